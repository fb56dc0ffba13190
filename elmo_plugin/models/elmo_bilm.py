"""Model `elmo_bilm`: ELMo's joint forward + backward language model."""

import contextlib
import logging
from typing import Optional, Union

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import TextFieldTensors, Vocabulary
from allennlp.models.model import Model
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder
from allennlp.modules.text_field_embedders import TextFieldEmbedder
from allennlp.nn import InitializerApplicator
from allennlp.nn.util import get_text_field_mask
from allennlp_models.lm.models.language_model import LanguageModel

from elmo_plugin.elmo_files.pretrained import load_pretrained_files
from elmo_plugin.models.carried_state import CarriedState
from elmo_plugin.models.language_model_encoder import language_model_encoder
from elmo_plugin.models.language_model_softmax import softmax_matrices
from elmo_plugin.modules.bilm_contextualizer import BiLmContextualizer
from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from elmo_plugin.modules.chunked_sampled_softmax_loss import ChunkedSampledSoftmaxLoss
from elmo_plugin.modules.weighted_softmax_loss import WeightedSoftmaxLoss
from elmo_plugin.training.sparse_gradient_sync import synchronize_sparse_gradients
from elmo_plugin.training.token_weighted_perplexity import TokenWeightedPerplexity

logger = logging.getLogger(__name__)

# The one line an old config or archive with `model.tf32` logs; the key no longer sets anything.
DEPRECATED_TF32 = (
    "elmo_bilm: model.tf32 (%s) is deprecated and ignored: TF32 is now a process setting, "
    '`tf32` of the "elmo_process_settings" trainer callback (train), of the "elmo_evaluator" '
    "evaluation (evaluate), of our predictors' --predictor-args (predict), or elmo-embed --tf32"
)

# `mixed_precision` values -> the autocast dtype (None: no autocast).
MIXED_PRECISION = {None: None, "bf16": torch.bfloat16}


@Model.register("elmo_bilm")
class ElmoLanguageModel(LanguageModel):
    """
    allennlp-models' bidirectional `LanguageModel` with ELMo's metrics: `forward_perplexity`,
    `backward_perplexity` and `perplexity`, token-weighted over everything seen since the last
    reset. One softmax (full, or sampled with `num_samples` during training) serves both
    directions; evaluation always uses the full softmax, with `num_samples` computed over chunks
    of rows so that its memory stays bounded at any vocabulary size (`ChunkedSampledSoftmaxLoss`).
    Every shape of a step is the batch's, whatever its content: the loss of each position is
    weighted by whether it has a target, the negatives are drawn on the model's device, and the
    metrics stay on the device until they are read.

    `source` must hold the character ids for the text field embedder and a `tokens` single-id
    entry (embedded by an `empty` embedder) for the targets.

    Batches of the `elmo_streams` data loader (bilm-tf's regime) also hold `backward_source`,
    the backward LM's own text (the stream reversed, read left to right), and `stream_start`:
    each window's first T tokens are read and its last T predicted, in each direction.

    # Parameters

    vocab : `Vocabulary`
        Given by allennlp; namespace `tokens` holds the softmax vocabulary.
    text_field_embedder : `TextFieldEmbedder`
        The character encoder (`elmo_char_cnn`, `elmo_manylangs_cnn` or allennlp-models'
        `character_encoding`) and an `empty` embedder for `tokens`.
    contextualizer : `Seq2SeqEncoder`
        `elmo_lstm` or `elmo_transformer`.
    dropout : `float`, optional (default = `None`)
        `LanguageModel`'s dropout on the contextualizer's output.
    num_samples : `int`, optional (default = `None`)
        Sampled softmax with this many samples during training; `None`: the full softmax.
    sparse_embeddings : `bool`, optional (default = `False`)
        With `num_samples`: the sampled softmax as sparse embeddings, so that a step computes
        and applies gradients for the rows it touched only (use Adagrad, or a sparse-capable
        optimizer for them: docs/pretraining.md, "Sparse softmax"). Under allennlp's
        distributed training their gradients are averaged over processes by gathering the
        touched rows, outside DDP's all-reduce, so it works on gloo and NCCL
        (`synchronize_sparse_gradients`).
    initializer : `InitializerApplicator`, optional (default = `None`)
        `LanguageModel`'s initializer.
    pretrained_file : `str` or `List[str]`, optional (default = `None`)
        The ELMo files to start from: a folder (one `*options.json`, one `*weights.hdf5`, any
        names; optionally `*softmax.hdf5` + `vocab.txt`) or `[options, weights]`, paths or URLs
        (`elmo_files.source`). The configured architecture must equal the options file; the
        softmax rows are mapped onto the vocabulary by token through vocab.txt, and without
        them the softmax starts fresh (one warning). Or an ELMoForManyLangs model folder (with
        an `elmo_manylangs_cnn` token embedder and the `elmo_manylangs` vocabulary): the
        configured architecture must equal its own; it has no softmax. allennlp drops this key
        when it loads an archive: the weights then come from the archive.
    mixed_precision : `str`, optional (default = `None`)
        `"bf16"` runs the forward pass (both directions, the softmax) under `torch.autocast`
        with bfloat16 on the model's device, CPU or GPU; parameters, optimizer state and the
        LSTM memory cells stay float32 and no gradient scaling is needed (allennlp's `use_amp`
        is float16 with a scaler and CUDA only).
    tf32 : `bool`, optional (default = `None`)
        Deprecated and ignored (one log line says so): TF32 is a process setting, `tf32` of the
        `elmo_process_settings` trainer callback, the `elmo_evaluator` evaluator, our
        predictors and `elmo-embed --tf32`.
    stateful : `bool`, optional (default = `False`)
        With `elmo_streams` batches and `elmo_lstm`: every row's LSTM state (all layers, both
        directions) is carried from one batch to the next, detached (truncated backpropagation
        through time), and reset to zero where `stream_start` is set; training and evaluation
        carry separate states. Each is kept in buffers overwritten in place (`CarriedState`),
        as a step captured in a CUDA graph needs. A resumed run (`-r`) starts from zero state.
        Without `stateful` every window starts from zero.
    row_gradients : `bool`, optional (default = `False`)
        With `sparse_embeddings`: the softmax rows a training step reads (its targets and
        negatives) get their gradient as one dense parameter of fixed shape per matrix
        (`TouchedRows`) instead of sparse tensors: no coalescing, no shape that depends on the
        data, the norm of every gradient computed on the device (the GPU step). Needs an
        optimizer that applies it to the softmax: `elmo_adagrad` or `fused_adam`.
    **kwargs
        `LanguageModel`'s other keys (`regularizer`, ...).
    """

    default_predictor = "elmo_embeddings"
    _softmax_loss: torch.nn.Module  # WeightedSoftmaxLoss or ChunkedSampledSoftmaxLoss

    def __init__(
        self,
        vocab: Vocabulary,
        text_field_embedder: TextFieldEmbedder,
        contextualizer: Seq2SeqEncoder,
        dropout: Optional[float] = None,
        num_samples: Optional[int] = None,
        sparse_embeddings: bool = False,
        initializer: Optional[InitializerApplicator] = None,
        pretrained_file: Optional[Union[str, list[str]]] = None,
        mixed_precision: Optional[str] = None,
        tf32: Optional[bool] = None,
        stateful: bool = False,
        row_gradients: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(
            vocab=vocab,
            text_field_embedder=text_field_embedder,
            contextualizer=contextualizer,
            dropout=dropout,
            num_samples=num_samples,
            sparse_embeddings=sparse_embeddings,
            bidirectional=True,
            initializer=initializer,
            **kwargs,
        )
        if not isinstance(contextualizer, BiLmContextualizer):
            raise ConfigurationError(
                "elmo_bilm: the contextualizer must be elmo_lstm or elmo_transformer, not "
                f"{type(contextualizer).__name__}"
            )
        if row_gradients and not (sparse_embeddings and num_samples is not None):
            raise ConfigurationError(
                "elmo_bilm: row_gradients needs the sampled sparse softmax "
                "(num_samples and sparse_embeddings: true)"
            )
        # The same parameters, weighted at fixed shapes (sampled: negatives drawn on the device,
        # chunked evaluation).
        parameters = self._softmax_loss.state_dict(keep_vars=True)
        if num_samples is not None:
            self._softmax_loss = ChunkedSampledSoftmaxLoss.with_parameters(
                parameters,
                vocab.get_vocab_size(),
                self._forward_dim,
                num_samples,
                sparse_embeddings,
                row_gradients,
            )
        else:
            self._softmax_loss = WeightedSoftmaxLoss.with_parameters(
                parameters, vocab.get_vocab_size(), self._forward_dim
            )
        if sparse_embeddings:
            synchronize_sparse_gradients(self)
        if stateful and not contextualizer.supports_state:
            raise ConfigurationError(
                "elmo_bilm: stateful needs a contextualizer that carries state (elmo_lstm), not "
                f"{type(contextualizer).__name__}"
            )
        self.stateful = stateful
        # The carried LSTM state of each mode (key: self.training), so validation between
        # training epochs keeps its own streams.
        self._stream_state = {True: CarriedState(), False: CarriedState()}
        self._token_weighted_perplexity = TokenWeightedPerplexity()
        if mixed_precision not in MIXED_PRECISION:
            raise ConfigurationError(
                f"elmo_bilm: mixed_precision must be one of {list(MIXED_PRECISION)}, "
                f"got {mixed_precision!r}"
            )
        self.mixed_precision = mixed_precision
        if tf32 is not None:
            logger.warning(DEPRECATED_TF32, tf32)
        if pretrained_file is not None:
            # allennlp drops this key when loading an archive: the weights come from there.
            load_pretrained_files(
                pretrained_file,
                self.bilm_encoder(),
                self.softmax_matrices(),
                vocab.get_token_to_index_vocabulary("tokens"),
            )

    def bilm_encoder(self) -> BiLmEncoder:
        """The character encoder and contextualizer of this model (shared, not copied)."""
        return language_model_encoder(self)

    def softmax_matrices(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight (rows, P), bias (rows,)): see `language_model_softmax.softmax_matrices`."""
        return softmax_matrices(self)

    def softmax_tokens(self, namespace: str = "tokens") -> list[str]:
        """The tokens of softmax rows 0, 1, ... (vocabulary indices 1, 2, ...)."""
        return [
            self.vocab.get_token_from_index(i, namespace)
            for i in range(1, self.vocab.get_vocab_size(namespace))
        ]

    def _autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast on the model's device when `mixed_precision` asks for it."""
        dtype = MIXED_PRECISION[self.mixed_precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(next(self.parameters()).device.type, dtype=dtype)

    def forward(
        self,
        source: TextFieldTensors,
        backward_source: Optional[TextFieldTensors] = None,
        stream_start: Optional[torch.BoolTensor] = None,
    ) -> dict[str, torch.Tensor]:
        with self._autocast():
            if backward_source is None:
                return self._sentence_forward(source)
            return self._stream_forward(source, backward_source, stream_start)

    def get_metrics(self, reset: bool = False) -> dict[str, float]:
        return self._token_weighted_perplexity.get_metric(reset)

    def _sentence_forward(self, source: TextFieldTensors) -> dict[str, torch.Tensor]:
        """allennlp-models' `LanguageModel.forward` (its outputs, its loss), at the batch's
        shapes whatever its content: each position's loss is weighted by whether it has a
        target, where allennlp-models selects the targets (`masked_select`) and branches on
        their number."""
        mask = get_text_field_mask(source)
        embeddings = self._text_field_embedder(source)
        contextual = self._contextualizer(embeddings, mask)
        output = {
            "lm_embeddings": contextual,
            "noncontextual_token_embeddings": embeddings,
            "mask": mask,
        }
        token_ids = source.get("tokens", {}).get("tokens")
        if token_ids is None:
            return output
        forward_targets = torch.nn.functional.pad(token_ids[:, 1:], (0, 1))
        # backward target at t: token t - 1, where token t exists (allennlp-models also gives
        # the first padding position of a padded sentence one)
        backward_targets = torch.nn.functional.pad(token_ids[:, :-1], (1, 0)) * (token_ids > 0)
        targets = torch.stack([forward_targets, backward_targets])
        return {**output, **self._losses(self._dropout(contextual), targets)}

    def _losses(
        self, lm_embeddings: torch.Tensor, targets: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """lm_embeddings (batch, timesteps, 2 * dim) [forward; backward], targets (2, batch,
        timesteps) vocabulary ids of each direction's targets, 0: none -> allennlp-models'
        losses (per target, averaged over the batch's targets; `loss` the mean of the two
        directions) and `batch_weight` (the number of targets); the perplexities updated."""
        embeddings = torch.stack(lm_embeddings.chunk(2, dim=-1)).flatten(1, 2)  # (2, B*T, dim)
        targets = targets.flatten(1)
        weights = (targets > 0).to(embeddings.dtype)
        # softmax row r scores vocabulary id r + 1 (id 0 is padding)
        negative_log_likelihoods = self._softmax_loss(
            embeddings, (targets - 1).clamp(min=0), weights
        )
        count = weights[0].sum().float()
        forward_nll, backward_nll = negative_log_likelihoods.detach().float()
        self._token_weighted_perplexity(forward_nll, backward_nll, count)
        per_target = negative_log_likelihoods / count.clamp(min=1.0)
        return {
            "loss": per_target.mean(),
            "forward_loss": per_target[0],
            "backward_loss": per_target[1],
            "batch_weight": count,
        }

    def _stream_forward(
        self,
        source: TextFieldTensors,
        backward_source: TextFieldTensors,
        stream_start: Optional[torch.BoolTensor],
    ) -> dict[str, torch.Tensor]:
        """Loss of `elmo_streams` windows (batch, T + 1 tokens) in each direction: positions
        0..T-1 are read, 1..T are the targets (0: padding, none). A batch of windows of one
        token (every stream ended: under distributed training a process whose streams are all
        a token shorter gets one) reads that token and predicts nothing, as a row whose stream
        has ended does in any batch."""
        reads = max(source["tokens"]["tokens"].size(1) - 1, 1)
        mask = get_text_field_mask(source)[:, :reads]
        embeddings = torch.stack(
            [self._text_field_embedder(text)[:, :reads] for text in (source, backward_source)]
        )
        targets = [
            torch.nn.functional.pad(tokens[:, 1:], (0, reads + 1 - tokens.size(1)))
            for tokens in (text["tokens"]["tokens"] for text in (source, backward_source))
        ]
        carried = self._stream_state[self.training]
        state = carried.state(stream_start, mask.size(0), mask.device) if self.stateful else None
        layers, final = self._contextualizer.stream_layers(embeddings, mask, state)
        if self.stateful:
            carried.update(final)
        output = {
            "lm_embeddings": layers[-1],
            "noncontextual_token_embeddings": embeddings[0],
            "mask": mask,
        }
        # Without targets (lone tokens) the losses are zeros that still reach every parameter,
        # so backward (and DDP's all-reduce, which waits for every parameter) runs as on the
        # other processes.
        return {**output, **self._losses(self._dropout(layers[-1]), torch.stack(targets))}
