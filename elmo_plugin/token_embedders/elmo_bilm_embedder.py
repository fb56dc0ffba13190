"""TokenEmbedder `elmo_bilm_embedder`: ELMo for any AllenNLP config, from our biLM archive,
allennlp-models' bidirectional `language_model` archive or the standard ELMo files, in archives
that stay self-contained."""

import json
import logging
from typing import Optional, cast

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.modules.scalar_mix import ScalarMix
from allennlp.modules.token_embedders import TokenEmbedder
from allennlp.nn.util import add_sentence_boundary_token_ids, remove_sentence_boundaries

from elmo_plugin.archives.bilm_source import load_encoder_and_architecture
from elmo_plugin.data.elmo_manylangs_indexer import DEFAULT_NAMESPACE
from elmo_plugin.modules.bilm_encoder import Architecture, BiLmEncoder, current_architecture
from elmo_plugin.modules.character_encoder import record_indexer_dictionaries
from elmo_plugin.modules.precomputed_layers import PrecomputedLayers

logger = logging.getLogger(__name__)

# The biLM's architecture travels inside downstream archives as one token of this vocabulary
# namespace: allennlp drops `pretrained_file` when it loads an archive and saves the vocabulary
# with it, so the vocabulary is the one place a constructor argument can come back from.
ARCHITECTURE_NAMESPACE = "elmo_bilm_embedder_architecture"


def recorded_architecture(vocab: Vocabulary, namespace: str) -> Optional[Architecture]:
    """The architecture JSON stored as a token of `namespace`, if any, in the current form."""
    # The namespace is padded, so it also holds allennlp's padding and OOV tokens: only a JSON
    # object (starting with "{") is the architecture.
    tokens = [
        token for token in vocab.get_token_to_index_vocabulary(namespace) if token.startswith("{")
    ]
    if len(tokens) > 1:
        raise ConfigurationError(
            f"elmo_bilm_embedder: vocabulary namespace {namespace!r} holds {len(tokens)} "
            "architectures"
        )
    return current_architecture(json.loads(tokens[0])) if tokens else None


@TokenEmbedder.register("elmo_bilm_embedder")
class ElmoBiLmEmbedder(TokenEmbedder):
    """
    ELMo representations for downstream models: character ids (batch, tokens, 50) under the key
    `elmo_tokens` (our `elmo_char_ids` indexer or allennlp's `elmo_characters`). For an
    ELMoForManyLangs model: (batch, tokens, 1 + its max_characters_per_token) word and character
    ids from `elmo_manylangs_ids`) ->
    (batch, tokens, dim) = dropout(gamma * sum_j softmax(s)_j h_j) [-> linear projection].
    `<S>` / `</S>` are added before the biLM and removed after it, as allennlp's `Elmo` does;
    h_0 is the character CNN output repeated to full width, h_1.. the contextualizer layers.
    The mix is allennlp's `ScalarMix` (its parameters `scalar_parameters.*` and `gamma`; put an
    L2 penalty on s through the model's `regularizer`). Nothing is kept between batches.

    # Parameters

    vocab : `Vocabulary`
        The architecture of the biLM is recorded here (namespace `architecture_namespace`, one
        JSON token) so that the model's archive rebuilds the embedder without `pretrained_file`.
    pretrained_file : `str`, optional (default = `None`)
        Our biLM `model.tar.gz` (or serialization folder), LSTM or transformer, allennlp-models'
        bidirectional `language_model` archive (its character encoder + contextualizer), or a
        folder with ELMo's files (one `*options.json` + one `*weights.hdf5`, any names, as the
        published downloads are named). Or an ELMoForManyLangs model folder
        (its dictionaries are then recorded in the vocabulary, namespaces
        `<dictionary_namespace>_chars` / `_words`). allennlp drops this key when it loads an
        archive; the weights then come from the archive.
    requires_grad : `bool`, optional (default = `False`)
        False keeps the biLM frozen; True fine-tunes it.
    do_layer_norm : `bool`, optional (default = `False`)
        Layer-normalize each layer inside the mix (allennlp's `ScalarMix`).
    dropout : `float`, optional (default = `0.5`)
        Dropout on the mixed representation (allennlp's default for ELMo).
    projection_dim : `int`, optional (default = `None`)
        If given, a linear projection of the representation to this size.
    scalar_mix_parameters : `List[float]`, optional (default = `None`)
        Fixed (untrained) pre-softmax mix weights, one per layer, as in allennlp's `Elmo`.
    architecture_namespace : `str`, optional (default = `"elmo_bilm_embedder_architecture"`)
        Vocabulary namespace for the recorded architecture (one per ELMo embedder in a model).
    dictionary_namespace : `str`, optional (default = `"elmo_manylangs"`)
        For an ELMoForManyLangs model: the `namespace` of its `elmo_manylangs_ids` indexer.
    precomputed_layers : `str`, optional (default = `None`)
        An `allennlp elmo-embed MODEL sentences.txt FILE` output of this same biLM (`--layers
        all`, float32), read into memory: a sentence it holds takes its layers from the file
        instead of running the frozen biLM (equal within float32 rounding); others run the biLM.
        For a model trained for many epochs, seeds or tasks on the same sentences. Needs
        `requires_grad` false and `do_layer_norm` false; the first batch checks one sentence
        against the biLM (an error if the file was made by another biLM). The key stays in the
        model's archive: the file must exist where the archive is loaded, or override the key
        with null.
    """

    _bos: torch.Tensor  # buffers: the indexed <S> and </S> tokens
    _eos: torch.Tensor

    def __init__(
        self,
        vocab: Vocabulary,
        pretrained_file: Optional[str] = None,
        requires_grad: bool = False,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        projection_dim: Optional[int] = None,
        scalar_mix_parameters: Optional[list[float]] = None,
        architecture_namespace: str = ARCHITECTURE_NAMESPACE,
        dictionary_namespace: str = DEFAULT_NAMESPACE,
        precomputed_layers: Optional[str] = None,
    ) -> None:
        super().__init__()
        recorded = recorded_architecture(vocab, architecture_namespace)
        if pretrained_file is not None:
            self.bilm, architecture = load_encoder_and_architecture(pretrained_file)
            record_indexer_dictionaries(
                vocab, dictionary_namespace, self.bilm.characters, pretrained_file
            )
            if recorded is None:
                vocab.add_token_to_namespace(
                    json.dumps(architecture, sort_keys=True, separators=(",", ":")),
                    architecture_namespace,
                )
            elif recorded != json.loads(json.dumps(architecture)):
                raise ConfigurationError(
                    f"elmo_bilm_embedder: {pretrained_file} has architecture {architecture}, but "
                    f"the vocabulary (namespace {architecture_namespace!r}) records {recorded}"
                )
        elif recorded is not None:
            self.bilm = BiLmEncoder.from_architecture(
                recorded
            )  # the weights come from the model's archive
        else:
            raise ConfigurationError(
                "elmo_bilm_embedder: give pretrained_file (a biLM model.tar.gz, or a folder with "
                "one *options.json + one *weights.hdf5); without it the architecture must be "
                f"recorded in the vocabulary namespace {architecture_namespace!r}, as in an "
                "archive made with one"
            )
        self.bilm.eval()
        self._requires_grad = requires_grad
        for parameter in self.bilm.parameters():
            parameter.requires_grad_(requires_grad)
        self.scalar_mix = ScalarMix(
            self.bilm.num_layers,
            do_layer_norm=do_layer_norm,
            # (allennlp annotates this None default without Optional)
            initial_scalar_parameters=scalar_mix_parameters,  # type: ignore[arg-type]
            trainable=scalar_mix_parameters is None,
        )
        self._dropout = torch.nn.Dropout(dropout)
        self._projection = (
            torch.nn.Linear(self.bilm.get_output_dim(), projection_dim) if projection_dim else None
        )
        self._output_dim = projection_dim or self.bilm.get_output_dim()
        bos, eos = self.bilm.characters.boundary_ids()
        self.register_buffer("_bos", torch.tensor(bos), persistent=False)
        self.register_buffer("_eos", torch.tensor(eos), persistent=False)
        self._precomputed = (
            self._read_precomputed(
                precomputed_layers, requires_grad, do_layer_norm, dictionary_namespace
            )
            if precomputed_layers
            else None
        )
        self._precomputed_checked = False

    def _read_precomputed(
        self, path: str, requires_grad: bool, do_layer_norm: bool, dictionary_namespace: str
    ) -> PrecomputedLayers:
        if requires_grad or do_layer_norm:
            raise ConfigurationError(
                f"elmo_bilm_embedder: precomputed_layers ({path}) needs requires_grad false and "
                "do_layer_norm false (fixed layers, each position mixed on its own)"
            )
        if self.bilm.characters.indexer_dictionaries(dictionary_namespace):
            raise ConfigurationError(
                f"elmo_bilm_embedder: precomputed_layers ({path}) is for biLMs that read ELMo "
                "character ids, not ELMoForManyLangs models"
            )
        return PrecomputedLayers(path, self.bilm.num_layers, self.bilm.get_output_dim())

    def get_output_dim(self) -> int:
        return self._output_dim

    def train(self, mode: bool = True) -> "ElmoBiLmEmbedder":
        super().train(mode)
        if not self._requires_grad:
            self.bilm.eval()  # a frozen biLM is a fixed feature extractor
        return self

    def layers(self, elmo_tokens: torch.Tensor):
        """(batch, tokens, 50) -> (every biLM layer with `<S>`/`</S>`, their mask)."""
        if elmo_tokens.size(-1) != self._bos.numel():
            raise ConfigurationError(
                f"elmo_bilm_embedder: its indexer gives {elmo_tokens.size(-1)} ids per token, the "
                f"biLM reads {self._bos.numel()} (ELMoForManyLangs: elmo_manylangs_ids' "
                "max_characters_per_token + 1)"
            )
        mask = cast(torch.BoolTensor, (elmo_tokens > 0).any(dim=-1))
        with_boundaries, mask_with_boundaries = add_sentence_boundary_token_ids(
            elmo_tokens, mask, self._bos, self._eos
        )
        layers, _ = self.bilm(with_boundaries)
        return layers, mask_with_boundaries

    def layers_without_boundaries(self, elmo_tokens: torch.Tensor) -> torch.Tensor:
        """(batch, tokens, 50) -> the frozen biLM's layers (num_layers, batch, tokens, dim),
        `<S>`/`</S>` removed."""
        with torch.no_grad():
            layers, mask = self.layers(elmo_tokens)
        return torch.stack([remove_sentence_boundaries(layer, mask)[0] for layer in layers])

    def looked_up_layers(self, elmo_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.BoolTensor]:
        """(batch, tokens, 50) -> (layers (num_layers, batch, tokens, dim), mask (batch,
        tokens)): each sentence's layers from `precomputed_layers`, the biLM's for the others."""
        assert self._precomputed is not None
        mask = cast(torch.BoolTensor, (elmo_tokens > 0).any(dim=-1))
        lengths = mask.sum(dim=1).tolist()
        found = [self._precomputed.find(elmo_tokens[row, :n]) for row, n in enumerate(lengths)]
        missing = [row for row, layers in enumerate(found) if layers is None]
        if not self._precomputed_checked and len(missing) < len(found):
            self._check_precomputed(elmo_tokens, found, lengths)
        shape = (self.bilm.num_layers, *elmo_tokens.shape[:2], self.bilm.get_output_dim())
        layers = torch.zeros(shape, device=elmo_tokens.device)
        if missing:
            layers[:, missing] = self.layers_without_boundaries(elmo_tokens[missing])
        for row, sentence in enumerate(found):
            if sentence is not None:
                layers[:, row, : lengths[row]] = sentence.to(layers.device)
        return layers, mask

    def _check_precomputed(
        self, elmo_tokens: torch.Tensor, found: list[Optional[torch.Tensor]], lengths: list[int]
    ) -> None:
        """The file's layers of the batch's first sentence it holds equal the biLM's, within
        float32 rounding: otherwise another biLM made the file."""
        assert self._precomputed is not None
        row = next(row for row, layers in enumerate(found) if layers is not None)
        expected = self.layers_without_boundaries(elmo_tokens[row : row + 1, : lengths[row]])[:, 0]
        stored = cast(torch.Tensor, found[row]).to(expected.device)
        difference = float((expected - stored).abs().max())
        if difference > 1e-4 * max(1.0, float(expected.abs().max())):
            raise ConfigurationError(
                f"elmo_bilm_embedder: precomputed_layers {self._precomputed.path} was not made "
                f"by this biLM: a sentence's layers differ from the biLM's by {difference:.3g} "
                "(write it with `allennlp elmo-embed` of this biLM)"
            )
        self._precomputed_checked = True

    def forward(self, elmo_tokens: torch.Tensor) -> torch.Tensor:
        leading_shape = elmo_tokens.shape[:-2]
        flat = elmo_tokens.flatten(0, -3)  # (sentences, tokens, 50); also with 0 tokens
        if self._precomputed is not None:
            layers, mask = self.looked_up_layers(flat)
            mixed = self.scalar_mix(list(layers), mask)
        else:
            with torch.set_grad_enabled(torch.is_grad_enabled() and self._requires_grad):
                layers_with_boundaries, mask = self.layers(flat)
            mixed = self.scalar_mix(layers_with_boundaries, mask)
            mixed, _ = remove_sentence_boundaries(mixed, mask)
        output = self._dropout(mixed)
        if self._projection is not None:
            output = self._projection(output)
        return output.reshape(*leading_shape, *output.shape[-2:])
