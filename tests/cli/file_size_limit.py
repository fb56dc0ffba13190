"""`python -m tests.cli.file_size_limit BYTES ARGS...`: `allennlp ARGS` with every file it writes
limited to BYTES (RLIMIT_FSIZE, with SIGXFSZ ignored: a write past the limit fails with EFBIG, as
a write to a full disk fails with ENOSPC). Run through `run_forked`, a fork of the warm server."""

import resource
import signal
import sys

from allennlp.__main__ import run

if __name__ == "__main__":
    limit = int(sys.argv[1])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    sys.argv = ["allennlp", *sys.argv[2:], "--include-package", "elmo_plugin"]
    run()
