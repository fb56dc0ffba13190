"""Independent CPU work on several threads at once: the directions of a biLM layer's time loops,
forward and backward. Each step of a loop is two small matmuls and a pass over a few rows, too
little to keep torch's intra-op threads busy; on their own threads, each with its share of the
caller's intra-op threads, the directions run at once (torch releases the GIL inside its ops)."""

import ctypes
import functools
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Optional

import torch

OMP_PAUSE_SOFT = 1  # OpenMP 5.0's omp_pause_resource_t: "stop idle threads; restart when needed"

logger = logging.getLogger(__name__)

_forked_child = False  # in a forked child, OpenMP's record of the parent's threads is stale
_pool: Optional[ThreadPoolExecutor] = None
_pool_key = (-1, 0)  # (the process that made it, its number of threads)
_pool_lock = threading.Lock()


@functools.cache
def openmp_backend() -> bool:
    """Whether torch's intra-op threads are OpenMP's, whose count is set per thread (torch's
    native backend has one process-wide pool, fixed once used)."""
    return "ATen parallel backend: OpenMP" in torch.__config__.parallel_info()


def worth_it() -> bool:
    """Whether side_by_side can give each of two tasks its own thread: 2 or more intra-op threads
    to split, set per thread."""
    return torch.get_num_threads() >= 2 and openmp_backend()


@functools.cache
def runtime_function(name: str) -> Optional[Callable[[int], None]]:
    """The function `name` (one int argument) of the OpenMP or MKL runtime torch itself links
    (looked up through torch's extension module, which searches its dependencies: libgomp and
    MKL in torch's Linux wheels), or None where it has none."""
    try:
        function = getattr(ctypes.CDLL(torch._C.__file__), name)
    except (AttributeError, OSError):  # no such symbol (no OpenMP, an OpenMP before 5.0)
        logger.debug("no %s in torch's runtimes", name)
        return None
    function.argtypes, function.restype = [ctypes.c_int], None
    return function


def release_idle_openmp_threads() -> None:
    """Stops this thread's idle OpenMP worker threads (OpenMP 5.0's omp_pause_resource_all;
    libgomp: this thread's only; LLVM's runtime puts all idle ones to sleep). After a parallel op
    they spin for a while (milliseconds with libgomp's defaults) before they sleep, on the very
    cores the tasks going side by side need; this thread's next parallel op starts them again
    (about 0.1 ms). Best effort: where the runtime declines or lacks it, they spin as before.
    Not in a forked child, where libgomp would wait for the parent's threads."""
    pause = runtime_function("omp_pause_resource_all")
    if pause is not None and not _forked_child:
        pause(OMP_PAUSE_SOFT)


def _in_forked_child() -> None:
    global _forked_child
    _forked_child = True


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_in_forked_child)


def thread_pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool of at least `workers` threads (made again after a fork: a forked child
    has none of its parent's threads)."""
    global _pool, _pool_key
    with _pool_lock:
        if _pool is None or _pool_key[0] != os.getpid() or _pool_key[1] < workers:
            _pool, _pool_key = (
                ThreadPoolExecutor(workers, thread_name_prefix="elmo_plugin"),
                (os.getpid(), workers),
            )
        return _pool


def on_thread(task: Callable[[], Any], threads: int, inference: bool) -> Any:
    """Runs task with `threads` intra-op threads and the caller's no-grad / inference mode (both
    thread-local in torch) -> its result. The counts set are this thread's own, OpenMP's and
    MKL's, as torch.set_num_threads sets them, but not the default of threads made later (after
    torch's first call on the thread, which sets them to the process's)."""
    if torch.get_num_threads() != threads:
        for name in ("omp_set_num_threads", "MKL_Set_Num_Threads_Local"):
            set_threads = runtime_function(name)
            if set_threads is not None:
                set_threads(threads)
    with torch.inference_mode(inference), torch.no_grad():
        return task()


def side_by_side(tasks: list[Callable[[], Any]]) -> list[Any]:
    """Runs the tasks at once, one per pool thread, the caller's intra-op threads split between
    them (at least one each) -> their results, once all are done (then raising the first failed
    task's error). Without gradients: a task's tensors record no graph. No process-wide setting
    changes, even for a moment. The caller's idle OpenMP workers are released first
    (`release_idle_openmp_threads`): spinning, they took a core from the tasks for milliseconds
    (a sixth of the LSTM directions' time on 2 cores)."""
    threads, inference = torch.get_num_threads(), torch.is_inference_mode_enabled()
    pool, each = thread_pool(len(tasks)), max(1, threads // len(tasks))
    release_idle_openmp_threads()
    futures = [pool.submit(on_thread, task, each, inference) for task in tasks]
    wait(futures)
    return [future.result() for future in futures]
