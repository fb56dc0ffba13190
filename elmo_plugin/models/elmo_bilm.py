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
from elmo_plugin.models.language_model_encoder import language_model_encoder
from elmo_plugin.models.language_model_softmax import softmax_matrices
from elmo_plugin.modules.bilm_contextualizer import BiLmContextualizer, LayerState
from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from elmo_plugin.modules.chunked_sampled_softmax_loss import ChunkedSampledSoftmaxLoss
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
        carry separate states. A resumed run (`-r`) starts from zero state. Without `stateful`
        every window starts from zero.
    **kwargs
        `LanguageModel`'s other keys (`regularizer`, ...).
    """

    default_predictor = "elmo_embeddings"
    _softmax_loss: torch.nn.Module  # allennlp's SoftmaxLoss, or our ChunkedSampledSoftmaxLoss

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
        if num_samples is not None:  # the same parameters and training, chunked evaluation
            self._softmax_loss = ChunkedSampledSoftmaxLoss.with_parameters(
                self._softmax_loss.state_dict(keep_vars=True),
                vocab.get_vocab_size(),
                self._forward_dim,
                num_samples,
                sparse_embeddings,
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
        # training epochs keeps its own streams; None: zero state.
        self._stream_state: dict[bool, Optional[list[LayerState]]] = {True: None, False: None}
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

    def _compute_loss(
        self,
        lm_embeddings: torch.Tensor,
        token_embeddings: torch.Tensor,
        forward_targets: torch.Tensor,
        backward_targets: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch, timesteps) targets, 0 = none. allennlp-models' `LanguageModel` gives the first
        padding position of every padded sentence a backward target; drop it: a backward target
        at t exists exactly when the forward target at t - 1 does."""
        if backward_targets is not None:
            backward_targets = backward_targets.clone()
            backward_targets[:, 1:] *= forward_targets[:, :-1] > 0
        return super()._compute_loss(
            lm_embeddings, token_embeddings, forward_targets, backward_targets
        )

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
                output = super().forward(source)
            else:
                output = self._stream_forward(source, backward_source, stream_start)
        if "loss" in output:
            # allennlp-models returns per-direction losses averaged over this batch's targets
            # and their count as `batch_weight` (absent when a batch has none): weighting the
            # averages by it makes the perplexities token-weighted over the whole set.
            targets = output.get("batch_weight", torch.zeros(()))
            self._token_weighted_perplexity(
                output["forward_loss"].detach() * targets,
                output["backward_loss"].detach() * targets,
                targets,
            )
        return output

    def get_metrics(self, reset: bool = False) -> dict[str, float]:
        return self._token_weighted_perplexity.get_metric(reset)

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
        state = self._carried_state(stream_start, mask.size(0)) if self.stateful else None
        layers, final = self._contextualizer.stream_layers(embeddings, mask, state)
        if self.stateful:
            self._stream_state[self.training] = [(h.detach(), c.detach()) for h, c in final]
        forward_embeddings, backward_embeddings = self._dropout(layers[-1]).chunk(2, -1)
        losses = [
            self._loss_helper(
                direction, direction_embeddings, direction_targets, embeddings[direction]
            )
            for direction, (direction_embeddings, direction_targets) in enumerate(
                zip((forward_embeddings, backward_embeddings), targets, strict=True)
            )
        ]
        count = (targets[0] > 0).sum().float()
        output = {
            "lm_embeddings": layers[-1],
            "noncontextual_token_embeddings": embeddings[0],
            "mask": mask,
        }
        if count == 0:
            # Sums over no targets: zeros that still reach every parameter, so backward (and
            # DDP's all-reduce, which waits for every parameter) runs as on the other processes.
            zero = 0.5 * (losses[0] + losses[1])
            return {**output, "loss": zero, "forward_loss": losses[0], "backward_loss": losses[1]}
        # allennlp-models' `_perplexity` is not updated: `get_metrics` does not read it, and
        # its all-reduces would have to run on every process, batches without targets too.
        return {
            **output,
            "loss": 0.5 * (losses[0] + losses[1]) / count,
            "forward_loss": losses[0] / count,
            "backward_loss": losses[1] / count,
            "batch_weight": count,
        }

    def _carried_state(
        self, stream_start: Optional[torch.BoolTensor], batch: int
    ) -> Optional[list[LayerState]]:
        """This mode's carried state, zero in the rows whose stream starts (all rows when the
        batch size changed); None when nothing is carried."""
        state = self._stream_state[self.training]
        if state is None or state[0][0].size(1) != batch:
            return None
        if stream_start is None:
            return state
        keep = (~stream_start.bool()).view(1, -1, 1)
        return [(h * keep.to(h.dtype), c * keep.to(c.dtype)) for h, c in state]
