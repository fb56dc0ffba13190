"""Model `elmo_bilm`: ELMo's joint forward + backward language model."""
import contextlib
from typing import ContextManager, Dict, Optional, Tuple

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import TextFieldTensors, Vocabulary
from allennlp.models.model import Model
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder
from allennlp.modules.text_field_embedders import TextFieldEmbedder
from allennlp.nn import InitializerApplicator
from allennlp_models.lm.models.language_model import LanguageModel

from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn
from elmo_plugin.training.token_weighted_perplexity import TokenWeightedPerplexity

# `mixed_precision` values -> the autocast dtype (None: no autocast).
MIXED_PRECISION = {None: None, "bf16": torch.bfloat16}


@Model.register("elmo_bilm")
class ElmoBiLm(LanguageModel):
    """
    allennlp-models' bidirectional `LanguageModel` with ELMo's metrics: `forward_perplexity`,
    `backward_perplexity` and `perplexity`, token-weighted over everything seen since the last
    reset. One softmax (full, or sampled with `num_samples` during training) serves both
    directions; evaluation always uses the full softmax.

    `source` must hold the character ids for the text field embedder and a `tokens` single-id
    entry (embedded by an `empty` embedder) for the targets.

    `pretrained_file`: a folder with the standard ELMo files to start from; the configured
    architecture must equal its options.json, and its softmax.hdf5 (if any) is mapped onto the
    vocabulary by token through its vocab.txt.

    `mixed_precision: "bf16"` runs the forward pass (both directions, the softmax) under
    `torch.autocast` with bfloat16 on the model's device, CPU or GPU; parameters, optimizer state
    and the LSTM memory cells stay float32 and no gradient scaling is needed (allennlp's
    `use_amp` is float16 with a scaler and CUDA only). `tf32: true` / `false` lets (or stops)
    float32 matmuls and convolutions on Ampere and later GPUs use TF32 (process-wide torch
    settings, set when the model is built); unset leaves torch's defaults.
    """

    default_predictor = "elmo_embeddings"

    def __init__(
        self,
        vocab: Vocabulary,
        text_field_embedder: TextFieldEmbedder,
        contextualizer: Seq2SeqEncoder,
        dropout: Optional[float] = None,
        num_samples: Optional[int] = None,
        sparse_embeddings: bool = False,
        initializer: Optional[InitializerApplicator] = None,
        pretrained_file: Optional[str] = None,
        mixed_precision: Optional[str] = None,
        tf32: Optional[bool] = None,
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
        self._token_weighted_perplexity = TokenWeightedPerplexity()
        if mixed_precision not in MIXED_PRECISION:
            raise ConfigurationError(
                f"elmo_bilm: mixed_precision must be one of {list(MIXED_PRECISION)}, got {mixed_precision!r}"
            )
        self.mixed_precision = mixed_precision
        if tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
        if pretrained_file is not None:
            # A folder of ELMo files (options.json + weights.hdf5 [+ softmax.hdf5, vocab.txt])
            # to continue pretraining from; allennlp drops this key when loading an archive.
            from elmo_plugin.interop.elmo_files import import_elmo_files

            import_elmo_files(self, pretrained_file)

    def bilm_encoder(self) -> BiLmEncoder:
        """The character CNN and contextualizer of this model (shared, not copied)."""
        return BiLmEncoder(self.char_cnn(), self._contextualizer)

    def char_cnn(self) -> ElmoCharCnn:
        embedders = self._text_field_embedder._token_embedders  # type: ignore[attr-defined]
        for embedder in embedders.values():
            if isinstance(embedder, ElmoCharCnn):
                return embedder
        raise ConfigurationError("elmo_bilm: the text_field_embedder has no elmo_char_cnn")

    def _compute_loss(
        self,
        lm_embeddings: torch.Tensor,
        token_embeddings: torch.Tensor,
        forward_targets: torch.Tensor,
        backward_targets: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """(batch, timesteps) targets, 0 = none. allennlp-models' `LanguageModel` gives the first
        padding position of every padded sentence a backward target; drop it: a backward target
        at t exists exactly when the forward target at t - 1 does."""
        backward_targets = backward_targets.clone()
        backward_targets[:, 1:] *= forward_targets[:, :-1] > 0
        return super()._compute_loss(lm_embeddings, token_embeddings, forward_targets, backward_targets)

    def _autocast(self) -> ContextManager:
        """bf16 autocast on the model's device when `mixed_precision` asks for it."""
        dtype = MIXED_PRECISION[self.mixed_precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(next(self.parameters()).device.type, dtype=dtype)

    def forward(self, source: TextFieldTensors) -> Dict[str, torch.Tensor]:  # type: ignore[override]
        with self._autocast():
            output = super().forward(source)
        if "loss" in output:
            targets = output.get("batch_weight", torch.zeros(()))
            self._token_weighted_perplexity(
                output["forward_loss"].detach() * targets,
                output["backward_loss"].detach() * targets,
                targets,
            )
        return output

    def get_metrics(self, reset: bool = False) -> Dict[str, float]:
        return self._token_weighted_perplexity.get_metric(reset)
