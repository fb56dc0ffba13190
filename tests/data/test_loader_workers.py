"""The loader worker pool: results in unit order whatever the number of workers, a worker's
error raised again in the main process, naming the loader and the worker, and a worker that
does not start forked again."""

import logging
import time

import pytest

from elmo_plugin.data import loader_workers
from elmo_plugin.data.loader_workers import WorkerFailure, worker_results


def items(unit: int) -> list[tuple[int, int]]:
    return [(unit, k) for k in range(unit % 3)]  # some units have none


@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_results_come_in_unit_order_whatever_the_workers(num_workers):
    units = list(range(4, 14))
    expected = [(unit, item) for unit in units for item in items(unit)]
    assert list(worker_results(items, units, num_workers, "data_loader test")) == expected


def failing(unit: int) -> list[int]:
    if unit == 5:
        raise ValueError("bad chunk")
    return [unit]


def test_a_workers_error_is_raised_in_the_main_process_naming_it():
    results = worker_results(failing, [4, 5, 6], 2, "data_loader test")
    assert next(results) == (4, 4)
    with pytest.raises(
        WorkerFailure, match=r"data_loader test worker 1: ValueError\('bad chunk'\)"
    ):
        next(results)


def test_a_worker_that_does_not_start_is_forked_again(monkeypatch, tmp_path, caplog):
    work, forked = loader_workers._work, tmp_path / "forked"

    def stuck_once(*args):  # as a child stuck in its fork, before any of its own code
        if not forked.exists():
            forked.touch()
            time.sleep(60)
        work(*args)

    monkeypatch.setattr(loader_workers, "_work", stuck_once)
    units = list(range(4, 10))
    expected = [(unit, item) for unit in units for item in items(unit)]
    with caplog.at_level(logging.WARNING):
        assert list(worker_results(items, units, 2, "data_loader test", start_s=5.0)) == expected
    warned = "data_loader test worker 0: not started 5 s after its fork (attempt 1 of 3)"
    assert caplog.messages == [warned]


def test_a_worker_that_never_starts_is_an_error_naming_it(monkeypatch):
    monkeypatch.setattr(loader_workers, "_work", lambda *args: time.sleep(60))
    results = worker_results(items, [4, 5], 1, "data_loader test", start_s=0.2)
    with pytest.raises(
        WorkerFailure, match=r"^data_loader test worker 0: not started within 0.2 s, 3 times$"
    ):
        next(results)
