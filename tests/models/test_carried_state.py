"""`CarriedState`: the stateful biLM's state, in buffers overwritten in place."""

import torch

from elmo_plugin.models.carried_state import CarriedState

CPU = torch.device("cpu")


def final_state(rows: int, value: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two layers' (state, memory), (directions 2, rows, 3), all `value`."""
    return [(torch.full((2, rows, 3), value), torch.full((2, rows, 3), -value)) for _ in range(2)]


def test_the_state_is_carried_in_the_same_buffers_and_zero_where_a_stream_starts():
    carried = CarriedState()
    assert carried.state(None, 4, CPU) is None and carried.layers is None
    carried.update(final_state(4, 1.0))
    buffers = [tensor for layer in carried.layers for tensor in layer]
    carried.update(final_state(4, 2.0))
    assert [tensor for layer in carried.layers for tensor in layer] == buffers  # same objects
    state = carried.state(torch.tensor([False, True, False, False]), 4, CPU)
    for h, c in state:
        assert h[:, [0, 2, 3]].eq(2.0).all() and c[:, [0, 2, 3]].eq(-2.0).all()
        assert h[:, 1].eq(0).all() and c[:, 1].eq(0).all()


def test_a_batch_of_another_size_starts_from_zero_and_so_does_the_next_of_the_first_size():
    carried = CarriedState()
    carried.update(final_state(4, 1.0))
    assert carried.state(None, 3, CPU) is None  # never seen: zero
    carried.update(final_state(3, 5.0))
    again = carried.state(None, 4, CPU)  # the last batch had 3 rows: zero, in the same shape
    assert all(h.eq(0).all() and c.eq(0).all() and h.shape == (2, 4, 3) for h, c in again)
    carried.update(final_state(4, 7.0))
    assert all(h.eq(7.0).all() for h, _ in carried.state(None, 4, CPU))


def test_the_carried_state_is_detached():
    carried = CarriedState()
    weight = torch.ones(1, requires_grad=True)
    carried.update([(torch.ones(2, 4, 3) * weight, torch.ones(2, 4, 3) * weight)])
    carried.update([(torch.ones(2, 4, 3) * weight, torch.ones(2, 4, 3) * weight)])
    assert not any(t.requires_grad for layer in carried.state(None, 4, CPU) for t in layer)
