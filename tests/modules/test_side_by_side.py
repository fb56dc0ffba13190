import os
import signal
import threading

import pytest
import torch

from elmo_plugin.modules import side_by_side as side_by_side_module
from elmo_plugin.modules.side_by_side import openmp_pause, release_idle_openmp_threads, side_by_side


def thread_counts_seen(tasks: int):
    seen, lock = [], threading.Lock()

    def task():
        with lock:
            seen.append((threading.current_thread().name, torch.get_num_threads(), torch.is_grad_enabled(), torch.is_inference_mode_enabled()))

    return seen, [task] * tasks


@pytest.mark.parametrize("threads, tasks, each", [(2, 2, 1), (4, 2, 2), (1, 2, 1), (3, 3, 1)])
def test_side_by_side_splits_the_callers_threads_and_leaves_its_setting_and_the_process_default(threads, tasks, each):
    """Each task runs on a pool thread with the caller's intra-op threads divided among the tasks
    (at least one), without gradients; afterwards the caller, MKL and a brand-new thread still see
    the caller's count (torch.set_num_threads also sets MKL's and the default of threads made later)."""
    torch.set_num_threads(threads)
    seen, work = thread_counts_seen(tasks)
    side_by_side(work)
    assert len(seen) == tasks and all(name.startswith("elmo_plugin") for name, *_ in seen)
    assert [count for _, count, _, _ in seen] == [each] * tasks
    assert not any(grad for _, _, grad, _ in seen)
    assert torch.get_num_threads() == threads
    mkl = [line for line in torch.__config__.parallel_info().splitlines() if "mkl_get_max_threads" in line]
    assert all(line.split(":")[-1].strip() == str(threads) for line in mkl)  # MKL's count is process-wide
    fresh = []
    thread = threading.Thread(target=lambda: fresh.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    assert fresh == [threads]


@pytest.mark.skipif(not side_by_side_module.openmp_backend(), reason="torch without OpenMP threads")
def test_idle_openmp_threads_are_released_before_and_after_the_tasks_and_parallel_ops_still_agree(monkeypatch):
    """torch's OpenMP runtime has OpenMP 5.0's pause; releasing this thread's idle workers keeps
    its thread count, and the next parallel op (which starts them again) gives the same numbers.
    side_by_side releases the caller's before any task starts, and a task's own after it
    where the task had more than one thread."""
    assert openmp_pause() is not None and openmp_pause()() == 0
    torch.set_num_threads(2)
    x = torch.randn(300, 300, dtype=torch.float64)
    before = x @ x
    release_idle_openmp_threads()
    assert torch.get_num_threads() == 2 and torch.equal(x @ x, before)
    events, lock = [], threading.Lock()

    def record(event):
        with lock:
            events.append((event, threading.current_thread().name == threading.main_thread().name))

    monkeypatch.setattr(side_by_side_module, "release_idle_openmp_threads", lambda: record("release"))
    for threads, released_by_tasks in ((2, 0), (4, 2)):
        events.clear()
        torch.set_num_threads(threads)
        side_by_side([lambda: record("task")] * 2)
        assert events[0] == ("release", True)
        assert sorted(events[1:]) == [("release", False)] * released_by_tasks + [("task", False)] * 2


def test_side_by_side_carries_the_callers_inference_mode():
    seen, work = thread_counts_seen(2)
    with torch.inference_mode():
        side_by_side(work)
    assert [inference for *_, inference in seen] == [True, True]


def test_side_by_side_raises_a_tasks_error_after_all_tasks_ran():
    done = []

    def failing():
        raise ValueError("task failed")

    with pytest.raises(ValueError, match="task failed"):
        side_by_side([failing, lambda: done.append(1)])
    assert done == [1]


def test_a_forked_child_gets_a_pool_of_its_own():
    """A fork keeps the pool object but not its threads: the child makes a new pool (else its
    tasks would wait forever for threads that do not exist)."""
    side_by_side([lambda: None, lambda: None])  # the parent's pool exists
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            signal.alarm(60)  # a hang ends the child, and the test fails
            done = []
            side_by_side([lambda: done.append(1), lambda: done.append(2)])
            os.write(write, b"ok" if sorted(done) == [1, 2] else b"no")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 2) == b"ok" and status == 0
