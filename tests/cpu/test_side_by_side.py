import os
import signal
import threading
import time

import pytest
import torch

from elmo_plugin.cpu import side_by_side as side_by_side_module
from elmo_plugin.cpu.side_by_side import release_idle_openmp_threads, side_by_side


def fresh_thread_count() -> int:
    """torch's intra-op thread count as a brand-new thread sees it (the process default)."""
    fresh = []
    thread = threading.Thread(target=lambda: fresh.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    return fresh[0]


def mkl_threads() -> list[int]:
    """MKL's thread count as this thread sees it ([] without MKL)."""
    lines = torch.__config__.parallel_info().splitlines()
    return [int(line.split(":")[-1]) for line in lines if "mkl_get_max_threads" in line]


def thread_counts_seen(tasks: int):
    seen, lock = [], threading.Lock()

    def task():
        count = (torch.get_num_threads(), mkl_threads())
        with lock:
            seen.append(
                (
                    threading.current_thread().name,
                    count,
                    torch.is_grad_enabled(),
                    torch.is_inference_mode_enabled(),
                    fresh_thread_count(),
                )
            )

    return seen, [task] * tasks


@pytest.mark.parametrize("threads, tasks, each", [(2, 2, 1), (4, 2, 2), (1, 2, 1), (3, 3, 1)])
def test_side_by_side_splits_the_callers_threads_and_never_changes_the_process_settings(
    threads, tasks, each
):
    """Each task runs on a pool thread with the caller's intra-op (and MKL) threads divided among
    the tasks (at least one), without gradients; a thread made while the tasks run, and afterwards
    the caller, MKL and a brand-new thread, still see the caller's count."""
    torch.set_num_threads(threads)
    seen, work = thread_counts_seen(tasks)
    side_by_side(work)
    assert len(seen) == tasks and all(name.startswith("elmo_plugin") for name, *_ in seen)
    assert [count for _, count, *_ in seen] == [(each, [each] * len(mkl_threads()))] * tasks
    assert not any(grad for _, _, grad, *_ in seen)
    assert [fresh for *_, fresh in seen] == [threads] * tasks
    assert torch.get_num_threads() == threads == fresh_thread_count()
    assert mkl_threads() == [threads] * len(mkl_threads())


def threads_in_this_process() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(
    side_by_side_module.runtime_function("omp_pause_resource_all") is None
    or not os.path.isdir("/proc/self/task"),
    reason="torch's OpenMP runtime cannot pause, or no /proc to count threads",
)
def test_idle_openmp_threads_are_released_before_tasks_go_side_by_side_and_parallel_ops_still_agree(
    monkeypatch,
):
    """Releasing this thread's idle OpenMP workers ends them (the process has 2 threads fewer
    after a 3-thread parallel op) and keeps its thread count; the next parallel op starts them
    again and gives the same numbers. side_by_side releases them before any task starts."""

    def threads_once_settled(expected: int) -> int:
        deadline = time.monotonic() + 5.0
        while threads_in_this_process() != expected and time.monotonic() < deadline:
            time.sleep(0.01)  # an ended thread may leave /proc a moment after the call returns
        return threads_in_this_process()

    release_idle_openmp_threads()  # whatever workers earlier tests left (a team of any size)
    time.sleep(0.1)
    without_workers = threads_in_this_process()
    torch.set_num_threads(3)
    x = torch.randn(3_000_000, dtype=torch.float64)
    before = x.exp()  # elementwise over millions: one OpenMP team of all 3 threads
    assert threads_in_this_process() == without_workers + 2
    release_idle_openmp_threads()
    assert threads_once_settled(without_workers) == without_workers
    assert torch.get_num_threads() == 3 and torch.equal(x.exp(), before)
    assert threads_in_this_process() == without_workers + 2
    events = []
    monkeypatch.setattr(
        side_by_side_module, "release_idle_openmp_threads", lambda: events.append("release")
    )
    side_by_side([lambda: events.append("task")] * 2)
    assert events == ["release", "task", "task"]


def test_a_forked_child_leaves_its_openmp_threads_alone(monkeypatch):
    """In a forked child OpenMP's record of the parent's threads is stale (libgomp would wait
    for them): no release there."""
    calls = []
    monkeypatch.setattr(side_by_side_module, "runtime_function", lambda name: calls.append)
    monkeypatch.setattr(side_by_side_module, "_forked_child", True)
    release_idle_openmp_threads()
    assert calls == []
    monkeypatch.setattr(side_by_side_module, "_forked_child", False)
    release_idle_openmp_threads()
    assert calls == [side_by_side_module.OMP_PAUSE_SOFT]


def test_side_by_side_carries_the_callers_inference_mode():
    seen, work = thread_counts_seen(2)
    with torch.inference_mode():
        side_by_side(work)
    assert [inference for *_, inference, _ in seen] == [True, True]


def test_side_by_side_raises_a_tasks_error_after_all_tasks_ran():
    done = []

    def failing():
        raise ValueError("task failed")

    with pytest.raises(ValueError, match="task failed"):
        side_by_side([failing, lambda: done.append(1)])
    assert done == [1]


def test_a_forked_child_gets_a_pool_of_its_own():
    """A fork keeps the pool object but not its threads: the child makes a new pool (else its
    tasks would wait forever for threads that do not exist), and knows it is a forked child
    (no OpenMP release there)."""
    side_by_side([lambda: None, lambda: None])  # the parent's pool exists
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            signal.alarm(60)  # a hang ends the child, and the test fails
            done = []
            side_by_side([lambda: done.append(1), lambda: done.append(2)])
            ok = sorted(done) == [1, 2] and side_by_side_module._forked_child  # the fork hook ran
            os.write(write, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 2) == b"ok" and status == 0
