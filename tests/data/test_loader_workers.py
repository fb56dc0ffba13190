"""The loader worker pool: results in unit order whatever the number of workers, and a
worker's error raised again in the main process, naming the loader and the worker."""

import pytest

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
