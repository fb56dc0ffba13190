import pytest
import torch
from allennlp.modules.elmo import batch_to_ids

from elmo_plugin.modules import distinct_rows as distinct_rows_module
from elmo_plugin.modules.distinct_rows import distinct_rows


def repeated_ids() -> torch.Tensor:
    """(12, 50) character ids of tokens, some repeated, one padding token."""
    return batch_to_ids([["the", "cat", "the", "mat", "cat"], ["a", "the", "a", "zebra" * 12]]).view(-1, 50)


def repeated_vectors() -> torch.Tensor:
    """(9, 130) float rows, some repeated, 0.0 and -0.0 in otherwise equal rows, wider than 128."""
    table = torch.randn(4, 130, generator=torch.Generator().manual_seed(0))
    table[3] = table[2]
    table[3, 5], table[2, 5] = 0.0, -0.0
    return table[torch.tensor([0, 1, 0, 2, 3, 1, 1, 2, 0])]


@pytest.mark.parametrize("rows", [repeated_ids(), repeated_vectors()], ids=["char_ids", "floats"])
def test_distinct_rows_are_exact_bit_for_bit_even_when_hashes_collide(rows, monkeypatch):
    """distinct[inverse] gives back every row bit for bit, one row per distinct row (floats
    compared by their bits: 0.0 and -0.0 are told apart), also when every row hashes alike
    (then torch.unique over rows decides), and for no rows."""
    bits = rows.view(torch.int32) if rows.is_floating_point() else rows
    expected = len(torch.unique(bits, dim=0))
    for powers in (distinct_rows_module.hash_powers, lambda width: [0] * width):
        monkeypatch.setattr(distinct_rows_module, "hash_powers", powers)
        distinct, inverse = distinct_rows(rows)
        assert distinct.dtype == rows.dtype and len(distinct) == expected
        assert torch.equal(distinct[inverse].view(bits.dtype), bits)
    empty, empty_inverse = distinct_rows(rows[:0])
    assert empty.shape == (0, rows.size(1)) and empty_inverse.shape == (0,)
