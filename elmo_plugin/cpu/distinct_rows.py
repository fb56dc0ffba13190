"""A batch's distinct rows, found by hashing: the character CNN's distinct tokens and the packed
LSTM's repeated input vectors."""

import functools
from typing import Optional

import torch

HASH_MODULUS = 2**61 - 1
# Floats are compared bit for bit, as the integers of their size (0.0 and -0.0 differ).
INTEGERS_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@functools.cache
def hash_powers(width: int) -> list[int]:
    """The polynomial hash's weight for each of a row's `width` positions."""
    return [pow(1_000_003, position, HASH_MODULUS) for position in range(width)]


def as_bits(rows: torch.Tensor) -> torch.Tensor:
    """Integer rows as they are, float rows reinterpreted as integers of their size."""
    return (
        rows.view(INTEGERS_OF_SIZE[rows.element_size()]) if rows.dtype.is_floating_point else rows
    )


def row_hashes(rows: torch.Tensor) -> torch.Tensor:
    """(n, width) rows -> (n,) a polynomial hash of each row's values (bits, for floats):
    equal rows hash alike."""
    powers = torch.tensor(hash_powers(rows.size(-1)), dtype=torch.long, device=rows.device)
    return (as_bits(rows).long() * powers).sum(dim=-1)  # wraps around in int64: still a hash


def distinct_rows(
    rows: torch.Tensor, hash_inverse: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, width) rows, the inverse of torch.unique over their `row_hashes` if already known ->
    (distinct rows (m, width), inverse (n,)): distinct[inverse] == rows, bit for bit. Rows are
    told apart by their hashes (a 1-D unique, several times faster than torch.unique over rows);
    if two different rows ever share a hash, the check below sees it and torch.unique over rows
    decides."""
    bits = as_bits(rows)
    inverse = (
        torch.unique(row_hashes(rows), return_inverse=True)[1]
        if hash_inverse is None
        else hash_inverse
    )
    first = torch.empty(
        int(inverse.max()) + 1 if len(inverse) else 0, dtype=torch.long, device=rows.device
    )
    first.scatter_(0, inverse, torch.arange(len(inverse), device=rows.device))  # a row of each key
    if not torch.equal(bits[first][inverse], bits):
        distinct, inverse = torch.unique(bits, dim=0, return_inverse=True)
        return distinct.view(rows.dtype), inverse
    return rows[first], inverse
