"""benchmarks.step_audit: one training step of each original config, with the settings a GPU
runs, dispatches no op that would make the GPU wait for the host, and the same ops on the same
shapes for every batch."""

import pytest

from benchmarks.step_audit import PHASES, audit_steps


@pytest.mark.parametrize("name", ["lstm", "transformer"])
def test_the_gpu_path_step_has_no_syncing_op_and_the_same_shapes_for_two_batches(name):
    """Forward, backward, gradient clipping and the optimizer step of two different batches
    (after the first step, which makes the optimizer's state): zero syncing ops, and the same
    (op, output shapes) sequence."""
    first, second = audit_steps(name, gpu_path=True, batches=2)
    assert first.syncs(*PHASES) == [], [f"{op.name} at {op.where}" for op in first.syncs()]
    assert first.trace() == second.trace()
    assert len(first.trace("forward")) > 100 and len(first.trace("optimizer")) > 10


def test_the_audit_sees_the_cpu_paths_host_reads():
    """The CPU's defaults (distinct tokens, packed LSTM) read the host: what the audit would
    catch if the GPU path ran them."""
    (audit,) = audit_steps("lstm", gpu_path=False, batches=1)
    places = {op.where.split(":")[0] for op in audit.syncs("forward")}
    assert {"elmo_plugin/cpu/distinct_rows.py", "elmo_plugin/cpu/packed_clipped_lstm.py"} <= places
