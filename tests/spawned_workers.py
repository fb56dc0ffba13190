"""`python -m tests.spawned_workers SECONDS [--with-a-thread]`, a command of
tests/test_in_process_runner.py: starts two workers with `torch.multiprocessing.spawn`, as
`allennlp train` starts its distributed ones (with a thread of its own running first, where
asked). Each worker prints its pid and whether it sees what the command set before starting
them (a fork of the command does, a spawned interpreter does not), then waits SECONDS. Imports
only torch: a spawned worker imports this module again."""

import os
import sys
import threading
import time

import torch.multiprocessing

SET_BEFORE_THE_WORKERS = False


def worker(rank: int, seconds: float) -> None:
    print(os.getpid(), "forked" if SET_BEFORE_THE_WORKERS else "spawned", flush=True)
    time.sleep(seconds)


if __name__ == "__main__":
    if "--with-a-thread" in sys.argv:
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
    SET_BEFORE_THE_WORKERS = True
    torch.multiprocessing.spawn(worker, args=(float(sys.argv[1]),), nprocs=2)
