"""The contextualizer interface of a biLM (what `BiLmEncoder` needs of `elmo_lstm` and
`elmo_transformer`)."""

from collections.abc import Callable
from typing import Any, Optional, TypeVar, Union

import torch
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

# One layer's carried state for both directions: (state (2, batch, dim), memory (2, batch, cells)).
LayerState = tuple[torch.Tensor, torch.Tensor]

T = TypeVar("T", bound="BiLmContextualizer")


class BiLmContextualizer(Seq2SeqEncoder):
    """
    A Seq2SeqEncoder made of two independent directions, `num_layers` deep:
    inputs (batch, timesteps, input_dim), mask (batch, timesteps) -> every layer's
    (batch, timesteps, 2 * input_dim) = [forward; backward] output (`all_layers`). From
    `forward`: the top layer only (a list of all of them with `return_all_layers`, as
    allennlp-models' transformer contextualizer). Padding positions are zero.

    A subclass lists the constructor keys it renamed in `renamed_keys` (old -> current) and the
    values no longer read in `dropped_values` (key -> value; dropped, the default applies):
    configs, archives and recorded architectures that use them keep loading.
    """

    renamed_keys: dict[str, str] = {}
    dropped_values: dict[str, Any] = {}

    @classmethod
    def with_current_keys(cls, params: dict[str, Any]) -> dict[str, Any]:
        """The same params with every old key under its current name, without dropped values; an
        error where a key is given under both names. The one place that reads renamed keys."""
        current = {
            key: value
            for key, value in params.items()
            if (key, value) not in cls.dropped_values.items()
        }
        for old, new in cls.renamed_keys.items():
            if old in current:
                if new in current:
                    raise ConfigurationError(
                        f"{cls.registered_name()}: give {new} ({old} is its old name), exactly once"
                    )
                current[new] = current.pop(old)
        return current

    @classmethod
    def registered_name(cls) -> str:
        """The `type` a config names this class by."""
        names = Seq2SeqEncoder.list_available()
        return next((n for n in names if Seq2SeqEncoder.resolve_class_name(n)[0] is cls), "")

    @classmethod
    def from_params(
        cls: type[T],
        params: Params,
        constructor_to_call: Optional[Callable[..., T]] = None,
        constructor_to_inspect: Optional[Callable[..., Any]] = None,
        **extras: Any,
    ) -> T:
        current = Params(cls.with_current_keys(params.as_dict(quiet=True)), params.history)
        # (a dict: allennlp annotates these two None defaults without Optional)
        constructors: dict[str, Any] = {
            "constructor_to_call": constructor_to_call,
            "constructor_to_inspect": constructor_to_inspect,
        }
        return super().from_params(current, **constructors, **extras)

    def __init__(self, input_dim: int, num_layers: int, return_all_layers: bool = False) -> None:
        super().__init__()
        self.input_dim = input_dim
        self.num_layers = num_layers
        self._return_all_layers = return_all_layers

    def get_input_dim(self) -> int:
        return self.input_dim

    def get_output_dim(self) -> int:
        return 2 * self.input_dim

    def is_bidirectional(self) -> bool:
        return True

    def all_layers(self, inputs: torch.Tensor, mask: torch.BoolTensor) -> list[torch.Tensor]:
        """Every layer's (batch, timesteps, 2 * input_dim) output, bottom first."""
        raise NotImplementedError

    def top_layer(self, inputs: torch.Tensor, mask: torch.BoolTensor) -> torch.Tensor:
        """The top layer alone; subclasses may skip work the lower layers' outputs need."""
        return self.all_layers(inputs, mask)[-1]

    # Whether `stream_layers` carries state across batches (elmo_bilm's `stateful`).
    supports_state = False

    def stream_layers(
        self, inputs: torch.Tensor, mask: torch.BoolTensor, state: Optional[list[LayerState]] = None
    ) -> tuple[list[torch.Tensor], list[LayerState]]:
        """Each direction over its own stream with state carried in and out (see `elmo_lstm`)."""
        raise ConfigurationError(
            f"{type(self).__name__} cannot read elmo_streams batches (stateful training): use "
            "the elmo_lstm contextualizer"
        )

    def forward(
        self, inputs: torch.Tensor, mask: torch.BoolTensor
    ) -> Union[torch.Tensor, list[torch.Tensor]]:
        if self._return_all_layers:
            return self.all_layers(inputs, mask)
        return self.top_layer(inputs, mask)
