"""`python -m tests.cli.file_size_limit BYTES ARGS...`: `allennlp ARGS` with every file it writes
limited to BYTES (RLIMIT_FSIZE, with SIGXFSZ ignored: a write past the limit fails with EFBIG, as
a write to a full disk fails with ENOSPC). Run through `run_forked`, a fork of the warm server."""

import atexit
import resource
import signal
import sys

from allennlp.__main__ import run

if __name__ == "__main__":
    limit = int(sys.argv[1])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    # lifted at exit, before `make coverage`'s data file of this process is written
    atexit.register(resource.setrlimit, resource.RLIMIT_FSIZE, (soft, hard))
    sys.argv = ["allennlp", *sys.argv[2:], "--include-package", "elmo_plugin"]
    run()
