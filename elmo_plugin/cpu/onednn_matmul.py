"""Float32 CPU matmuls through oneDNN, for the LSTM's CPU fast path and the character CNN.

torch's own CPU matmul calls MKL, which on some CPUs (AMD EPYC among them) runs several times
below the machine's rate; oneDNN, which torch also ships (its convolutions use it), does not.
`torch.ops.mkldnn._linear_pointwise` is the linear that torch.compile's CPU backend emits: x W^T
(+ b) with W either a plain (N, K) tensor or one prepacked by `_reorder_linear_weight` into
oneDNN's blocked layout (fastest for a weight used many times, as in a time loop). Where torch
was built without oneDNN, or for other devices and dtypes, the same calls run torch.matmul.
Results equal torch.matmul's within float32 rounding (the summation order differs).
"""

import functools
from typing import Optional

import torch


@functools.cache
def onednn_built() -> bool:
    """Whether this torch has oneDNN's linear (asked once)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def uses_onednn(*tensors: torch.Tensor) -> bool:
    """oneDNN takes float32 CPU tensors that need no autograd graph (its linear has no
    derivative: where one is needed, the caller differentiates by hand), outside CPU autocast
    (which would not see the call: torch's matmul keeps autocast's bf16)."""
    needs_graph = torch.is_grad_enabled() and any(tensor.requires_grad for tensor in tensors)
    return (
        onednn_built()
        and not needs_graph
        and not torch.is_autocast_enabled("cpu")
        and all(tensor.device.type == "cpu" and tensor.dtype == torch.float32 for tensor in tensors)
    )


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """x (..., K) W^T (+ bias (N,)) for a plain (N, K) `weight` (any strides) -> (..., N)."""
    if x.numel() and weight.numel() and uses_onednn(x, weight):  # oneDNN refuses empty operands
        return onednn_linear(x, weight, bias)
    return torch.nn.functional.linear(x, weight, bias)


def onednn_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]
) -> torch.Tensor:
    """`linear` through oneDNN; `weight` plain or prepacked."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def transposed_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a^T b for a (n, K), b (n, N) -> (K, N): the weight gradients, summed over n positions."""
    return linear(a.t(), b.t())


def prepackable(matrix: torch.Tensor) -> bool:
    """Whether `RightMatrix` prepacks this matrix (or others like it) for oneDNN."""
    return uses_onednn(matrix) and matrix.numel() > 0


class RightMatrix:
    """A (K, N) matrix that many x @ matrix products share, prepacked once for oneDNN."""

    def __init__(self, matrix: torch.Tensor) -> None:
        weight = matrix.t().contiguous()  # linear's (N, K) layout
        self.prepacked = prepackable(matrix)
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight) if self.prepacked else weight

    def __call__(self, x: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x (..., K) -> x @ matrix (+ bias (N,)): (..., N)."""
        return right_product(x, self.weight, self.prepacked, bias)


def right_product(
    x: torch.Tensor, weight: torch.Tensor, prepacked: bool, bias: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """x (..., K) @ the matrix of a `RightMatrix` given as its (weight, prepacked) (+ bias (N,))
    -> (..., N)."""
    if not prepacked:
        return torch.nn.functional.linear(x, weight, bias)
    if x.numel() == 0:  # oneDNN refuses empty inputs; only oneDNN reads the prepacked weight
        return x.new_zeros(list(x.shape[:-1]) + [weight.size(0)])
    return onednn_linear(x, weight, bias)
