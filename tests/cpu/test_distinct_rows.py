import pytest
import torch
from allennlp.modules.elmo import batch_to_ids

from elmo_plugin.cpu import distinct_rows as distinct_rows_module
from elmo_plugin.cpu.distinct_rows import distinct_rows


def repeated_ids() -> torch.Tensor:
    """(12, 50) character ids of tokens, some repeated, one padding token."""
    return batch_to_ids(
        [["the", "cat", "the", "mat", "cat"], ["a", "the", "a", "zebra" * 12]]
    ).view(-1, 50)


def repeated_vectors(dtype: torch.dtype) -> torch.Tensor:
    """(9, 130) float rows, some repeated, 0.0 and -0.0 in otherwise equal rows, wider than 128,
    as a non-contiguous view."""
    table = torch.randn(4, 130, generator=torch.Generator().manual_seed(0)).to(dtype)
    table[3] = table[2]
    table[3, 5], table[2, 5] = 0.0, -0.0
    return table[torch.tensor([0, 1, 0, 2, 3, 1, 1, 2, 0])].t().contiguous().t()


ROWS = [
    repeated_ids(),
    *(
        repeated_vectors(dtype)
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64)
    ),
]


@pytest.mark.parametrize(
    "rows", ROWS, ids=["char_ids", "float32", "float16", "bfloat16", "float64"]
)
def test_distinct_rows_are_exact_bit_for_bit_even_when_hashes_collide(rows, monkeypatch):
    """distinct[inverse] gives back every row bit for bit, one row per distinct row (floats
    compared by their bits: 0.0 and -0.0 are told apart), also when every row hashes alike
    (then torch.unique over rows decides, and only then), and for no rows."""
    bits = distinct_rows_module.as_bits(rows)
    expected = len(torch.unique(bits, dim=0))
    unique_over_rows: list[bool] = []
    plain_unique = torch.unique
    monkeypatch.setattr(
        torch,
        "unique",
        lambda *args, **kwargs: (
            unique_over_rows.append("dim" in kwargs) or plain_unique(*args, **kwargs)
        ),
    )
    for powers, colliding in (
        (distinct_rows_module.hash_powers, False),
        (lambda width: [0] * width, True),
    ):
        monkeypatch.setattr(distinct_rows_module, "hash_powers", powers)
        unique_over_rows.clear()
        distinct, inverse = distinct_rows(rows)
        assert distinct.dtype == rows.dtype and len(distinct) == expected
        assert torch.equal(distinct_rows_module.as_bits(distinct[inverse]), bits)
        assert any(unique_over_rows) == colliding
    empty, empty_inverse = distinct_rows(rows[:0])
    assert empty.shape == (0, rows.size(1)) and empty_inverse.shape == (0,)
