"""The `allennlp` command that tests/test_docs_commands.py runs the documented commands with.

It is allennlp's own CLI (`allennlp.__main__.run`, the `allennlp` script's entry point), with two
differences, both made here and nowhere else:

- tiny sizes: a command that trains (or plans, or continues) a config gets the keys of
  `TINY_SIZES[config]` merged into its one `-o` JSON object (a command without `-o` gets one).
  Nothing else changes: the subcommand, every flag, the config file and the command's own
  override keys reach allennlp as written, so a renamed flag, config or key fails the test as it
  would fail a user.
- speed: a server process imports allennlp, allennlp-models and elmo_plugin once; each command
  is a fork of it. `python -m tests.allennlp_server CLIENT_ARGS...` (the `allennlp` on the test's
  PATH) hands its arguments, working directory, environment and standard streams to a fresh
  fork and exits with its exit status. A fork starts with a clean copy of the server (nothing a
  command does reaches the next one) in a few milliseconds instead of the seconds an `allennlp`
  process spends importing. The plugins are imported as for a user who ran `make install`
  (`~/.allennlp/plugins`).

This module imports only the standard library at its top: the client must start fast.
"""

import importlib
import json
import os
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any, Optional

SOCKET_ENV = "ELMO_DOCS_ALLENNLP_SOCKET"  # the server's socket, for the client
FAILURES_ENV = "ELMO_DOCS_ALLENNLP_FAILURES"  # a file the client appends each failed command to
COMMAND_TIMEOUT_S = 600  # a command still running then is killed (SIGALRM)
CONTINUE_CONFIG = "elmo_lstm_continue.jsonnet"  # `elmo-continue`'s default --config


def tiny_sizes() -> dict[str, dict[str, Any]]:
    """config file name (or `elmo-continue`) -> the keys merged into a documented command's
    `-o`: the sizes of the tests' tiny biLM (tests/conftest.py's `tiny_bilm_archive`), one epoch,
    the CPU."""
    from tests.helpers import TINY_LSTM_OVERRIDES, TINY_TAGGER_OVERRIDES

    lstm = {**TINY_LSTM_OVERRIDES, "trainer.num_epochs": 1}
    return {
        "elmo_lstm.jsonnet": lstm,
        # plain `allennlp train` of it states the demo architecture: the tiny biLM's instead
        CONTINUE_CONFIG: lstm,
        # elmo-continue takes the architecture from the options file: nothing of it is added
        "elmo-continue": {"data_loader.batch_size": 16, "trainer.num_epochs": 1},
        "elmo_lstm_original.jsonnet": {
            **{key: value for key, value in lstm.items() if not key.startswith("data_loader")},
            "model.num_samples": 20,
            "data_loader.batch_size": 16,
            "trainer.cuda_device": -1,
        },
        "pos_tagger_elmo.jsonnet": {**TINY_TAGGER_OVERRIDES, "trainer.num_epochs": 1},
        "classifier_elmo.jsonnet": {
            "model.seq2vec_encoder.input_size": TINY_TAGGER_OVERRIDES["model.encoder.input_size"],
            "model.seq2vec_encoder.hidden_size": 32,
            "trainer.num_epochs": 1,
        },
    }


def config_of(argv: list[str]) -> Optional[str]:
    """The config a command trains: `train CONFIG`, `elmo-plan CONFIG`, `elmo-continue
    [--config CONFIG]`; None for other commands."""
    if argv[:1] in (["train"], ["elmo-plan"]) and len(argv) > 1:
        return argv[1]
    if argv[:1] == ["elmo-continue"]:
        return argv[argv.index("--config") + 1] if "--config" in argv else CONTINUE_CONFIG
    return None


def with_tiny_sizes(argv: list[str]) -> list[str]:
    """`argv` with its config's tiny sizes merged into its `-o` (the command's keys kept, the
    sizes winning where both set one)."""
    config = config_of(argv)
    if config is None:
        return argv
    sizes = tiny_sizes().get("elmo-continue" if argv[0] == "elmo-continue" else Path(config).name)
    if sizes is None:
        raise SystemExit(
            f"tests/allennlp_server.py: no tiny sizes for {config}: add them to tiny_sizes()"
        )
    for flag in ("-o", "--overrides"):
        if flag in argv:
            at = argv.index(flag) + 1
            merged = {**json.loads(argv[at]), **sizes}
            return [*argv[:at], json.dumps(merged), *argv[at + 1 :]]
    return [*argv, "-o", json.dumps(sizes)]


def serve(path: str) -> None:
    """Imports allennlp and the plugins, then forks one child per connection on `path`."""
    # first: allennlp.__main__ puts site-packages first on sys.path, whose `benchmarks` package
    # would then hide ours (tests.helpers imports benchmarks.support.common)
    importlib.import_module("tests.helpers")
    import allennlp.__main__  # noqa: F401  (the script's logging set-up)
    from allennlp.common.plugins import import_plugins

    import_plugins()
    import elmo_plugin  # noqa: F401

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # the socket appears only when it accepts
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reap themselves
    listener.settimeout(5)
    parent = os.getppid()
    while os.getppid() == parent:  # the test session is gone: so is the server
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            continue
        connection.settimeout(None)
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the command waits for its own
            run_command(connection)
        connection.close()


def run_command(connection: socket.socket) -> None:
    """In a fresh fork: the client's streams, directory and environment, then allennlp's main;
    sends back the exit status and exits."""
    _, streams, _, _ = socket.recv_fds(connection, 1, 3)
    request = json.loads(connection.makefile("r", encoding="utf-8").readline())
    for target, stream in zip((0, 1, 2), streams, strict=True):
        os.dup2(stream, target)
        os.close(stream)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.alarm(COMMAND_TIMEOUT_S)
    status = 1
    try:
        import torch
        from allennlp.__main__ import run

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        sys.argv = ["allennlp", *with_tiny_sizes(request["argv"])]
        run()
        status = 0
    except SystemExit as exit:
        if isinstance(exit.code, str):
            print(exit.code, file=sys.stderr)
        status = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        connection.sendall(f"{status}\n".encode())
        os._exit(status)


def client(argv: list[str]) -> int:
    """Runs `allennlp ARGV` in a fork of the server -> its exit status."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(os.environ[SOCKET_ENV])
    socket.send_fds(connection, [b"x"], [0, 1, 2])
    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    connection.sendall(json.dumps(request).encode() + b"\n")
    reply = connection.makefile("r").readline()
    if not reply:
        print(f"allennlp {' '.join(argv)}: killed (over {COMMAND_TIMEOUT_S} s?)", file=sys.stderr)
    status = int(reply) if reply else 1
    if status != 0 and FAILURES_ENV in os.environ:  # seen even where the shell ignores it (`&`)
        with open(os.environ[FAILURES_ENV], "a", encoding="utf-8") as failures:
            failures.write(f"exit {status}: allennlp {' '.join(argv)}\n")
    return status


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    else:
        sys.exit(client(sys.argv[1:]))
