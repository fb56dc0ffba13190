import pytest
import torch

from elmo_plugin.cpu.onednn_matmul import RightMatrix, linear, transposed_matmul, uses_onednn


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal within float32 rounding, relative to the largest value (sums of many products)."""
    if a.shape != b.shape:
        return False
    return not b.numel() or float((a - b).abs().max()) <= 1e-5 * max(1.0, float(b.abs().max()))


@pytest.mark.parametrize("rows", [0, 1, 7, 300])
def test_products_equal_torch_matmul(rows):
    """Prepacked, plain (also a transposed view) and a^T b products equal torch's, for empty
    inputs, one row and many; a bias is added."""
    torch.manual_seed(0)
    x, matrix, bias = torch.randn(rows, 24), torch.randn(24, 40), torch.randn(40)
    with torch.no_grad():
        assert close(RightMatrix(matrix)(x), x @ matrix)
        assert close(RightMatrix(matrix)(x.view(1, rows, 24))[0], x @ matrix)
        assert close(RightMatrix(matrix)(x, bias), x @ matrix + bias)
        assert close(linear(x, matrix.t(), bias), x @ matrix + bias)
        other = torch.randn(rows, 40)
        assert close(transposed_matmul(x, other), x.t() @ other)


def test_onednn_runs_on_this_machine_and_stays_out_of_autograd_graphs():
    matrix = torch.randn(4, 3, requires_grad=True)
    assert uses_onednn(torch.randn(2, 4), matrix.detach())
    assert not uses_onednn(torch.randn(2, 4), matrix)  # a graph is needed: torch's matmul
    assert not uses_onednn(torch.randn(2, 4, dtype=torch.float64))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast's bf16 matmuls stay torch's
        assert not uses_onednn(torch.randn(2, 4))
        assert linear(torch.randn(2, 4), matrix.detach().t()).dtype == torch.bfloat16
    x = torch.randn(2, 4)
    linear(x, matrix.t()).sum().backward()
    assert torch.allclose(matrix.grad, x.sum(0, keepdim=True).t().expand(4, 3))
