"""Test helpers (imported by test modules; conftest.py holds only fixtures): repo paths, the real
data location, two runners for the real `allennlp` CLI (a subprocess, or in this process), tiny
config sizes."""

import atexit
import contextlib
import datetime
import gzip
import io
import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Optional, cast

import allennlp.commands as allennlp_commands
import numpy
import pytest
import torch
from allennlp.common import Params
from allennlp.common import logging as allennlp_logging
from allennlp.common import tqdm as allennlp_tqdm
from allennlp.data import Batch, DatasetReader, Instance, Token, Vocabulary
from allennlp.data.fields import TextField
from allennlp.models import Model

from benchmarks.support.common import (  # the one definition, shared with benchmarks/
    ALLENNLP_ENV,
    shared_data_dir,
)
from elmo_plugin.training import glibc_heap
from tests import forked_allennlp

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "training_config"


def text_tokens(instance: Instance, field: str = "source") -> list[Token]:
    """The tokens of one of an instance's text fields."""
    return cast(TextField, instance[field]).tokens


def require_shared_file(relative: str) -> Path:
    path = shared_data_dir() / relative
    if not path.is_file():
        pytest.skip(f"real data not found: {path} (set ELMO_PLUGIN_DATA to the shared data folder)")
    return path


def run_allennlp(
    args: list[str],
    cwd: Optional[Path] = None,
    timeout: int = 600,
    check: bool = True,
    stdin: Optional[bytes] = None,
    fresh: bool = False,
) -> subprocess.CompletedProcess:
    """Runs `allennlp ARGS --include-package elmo_plugin` in a process of its own, a fork of this
    session's warm `allennlp` (tests/forked_allennlp.py: no import time), `stdin` its standard
    input; fails the test with its output on error (with `check`; otherwise returns the failed
    result too). For what only a process shows: its exit status and stderr, a kill, distributed
    workers, process-wide settings; otherwise `run_allennlp_in_process` costs less still. With
    `fresh`, a fresh `allennlp` process (`run_forked`)."""
    command, env = allennlp_process(args)
    result = run_forked(command, cwd or REPO_ROOT, env, timeout, stdin, fresh)
    if check and result.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} exited {result.returncode}:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
        )
    return result


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """The single `: error: ` line of a refused run (exit status 1, no traceback)."""
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if ": error: " in line]
    assert len(errors) == 1, output[-3000:]
    return errors[0]


def allennlp_process(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command `allennlp ARGS --include-package elmo_plugin` and the environment of every
    `allennlp` process the suite starts."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    # Tiny models gain nothing from threads, and spinning OpenMP threads on shared cores slow
    # them down by 10x and more (measured: 60 s vs 0.9 s per tagger epoch under load).
    env.setdefault("OMP_NUM_THREADS", "1")
    return ["allennlp", *args, "--include-package", "elmo_plugin"], env


def run_forked(
    command: list[str],
    cwd: Path,
    env: dict[str, str],
    timeout: int = 600,
    stdin: Optional[bytes] = None,
    fresh: bool = False,
) -> subprocess.CompletedProcess:
    """`allennlp ARGS...` or `-m MODULE ARGS...` (`command`) as a process of its own, forked
    from this session's warm server (tests/forked_allennlp.py), in `cwd` with `env` (the
    repository first on PYTHONPATH) -> its exit status (minus the signal that ended it) and
    output, as text. With `fresh`, or where the server cannot fork safely (a GPU machine: the
    CUDA driver's thread), a fresh process (`allennlp` is this venv's script)."""
    client, env = forked_client(command, env, timeout, fresh)
    ran = subprocess.run(
        client, cwd=cwd, env=env, input=stdin or b"", capture_output=True, timeout=timeout + 60
    )
    stdout, stderr = (ran.stdout.decode(errors="replace"), ran.stderr.decode(errors="replace"))
    return subprocess.CompletedProcess(command, ran.returncode, stdout, stderr)


def start_forked(command: list[str], cwd: Path, env: dict[str, str], **popen) -> subprocess.Popen:
    """`run_forked`'s process, started: `popen` as `subprocess.Popen`'s keywords; its `kill()`
    kills the command (and what the command started) as it would a fresh process."""
    client, env = forked_client(command, env, timeout=600, fresh=False)
    return subprocess.Popen(client, cwd=cwd, env=env, **popen)


def lines_done_records(log: str) -> list[int]:
    """The N of every `elmo-embed: N lines done` line of `log`."""
    return [int(n) for n in re.findall(r"elmo-embed: (\d+) lines done", log)]


def killed_after_two_records(args: list[str], cwd: Path) -> str:
    """`allennlp ARGS` (elmo-embed; a process of its own, `start_forked`) killed with SIGKILL once
    its stderr has recorded two chunks as done -> that stderr."""
    command, env = allennlp_process(args)
    popen = dict(stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    killed = start_forked(command, cwd, env, **popen)
    assert killed.stderr is not None
    log = ""
    while len(lines_done_records(log)) < 2:  # the signal: a chunk recorded as done
        line = killed.stderr.readline()
        assert line, f"elmo-embed ended before it recorded two chunks:\n{log[-3000:]}"
        log += line
    killed.kill()
    killed.wait()
    assert killed.returncode == -signal.SIGKILL
    return log


def many_lines(folder: Path, count: int) -> Path:
    """FOLDER/input.txt: `count` lines of the demo corpus, every 7th blank."""
    text = (REPO_ROOT / "fixtures/demo_corpus/train/shard_0.txt").read_text(encoding="utf-8")
    lines = text.splitlines()
    path = folder / "input.txt"
    path.write_text(
        "\n".join("" if i % 7 == 3 else lines[i % len(lines)] for i in range(count)) + "\n",
        encoding="utf-8",
    )
    return path


def forked_client(
    command: list[str], env: dict[str, str], timeout: int, fresh: bool
) -> tuple[list[str], dict[str, str]]:
    """The client's command line and environment for `run_forked`'s arguments."""
    server = None if fresh else allennlp_server()
    paths = filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])
    env = {**env, "PYTHONPATH": os.pathsep.join(paths)}
    if server is not None:
        env[forked_allennlp.SOCKET_ENV] = server
    return [sys.executable, "-S", str(FORKED_ALLENNLP), str(timeout), *command], env


FORKED_ALLENNLP = REPO_ROOT / "tests" / "forked_allennlp.py"


def forked_allennlp_script(folder: Path, timeout: int = 600) -> Path:
    """FOLDER/allennlp, an `allennlp` whose commands are forks of this session's warm server: its
    client (tests/forked_allennlp.py), which finds the server in its environment (SOCKET_ENV, set
    in every `run_forked` command's) and runs a fresh `allennlp` without one."""
    script = folder / "allennlp"
    script.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -S "{FORKED_ALLENNLP}" {timeout} allennlp "$@"\n'
    )
    script.chmod(0o755)
    return script


def warm_allennlp_env(folder: Path) -> dict[str, str]:
    """The variables that make a process's `allennlp` children (a benchmark's: ALLENNLP_ENV)
    forks of this session's warm server: FOLDER/allennlp (`forked_allennlp_script`) and the
    server's socket, where it runs (else the script runs a fresh `allennlp`)."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {ALLENNLP_ENV: str(forked_allennlp_script(folder))}
    server = allennlp_server()
    if server is not None:
        env[forked_allennlp.SOCKET_ENV] = server
    return env


_server: dict[str, Optional[str]] = {}  # this session's server: its socket (None: refused)


def allennlp_server() -> Optional[str]:
    """The socket of this session's `python -m tests.forked_allennlp --serve` (started on first
    use, ended with the session). Its environment is the session's without glibc's malloc
    variables, which glibc reads once, at a process's start (a test may have set them); torch
    asks NVML, not CUDA, whether there is a GPU (CUDA initialized before a fork is unusable in
    it); pyarrow's allocator starts no thread (the server forks with its main thread alone).
    None where the server refused to start (`forked_allennlp.UNSAFE_TO_FORK`)."""
    if "socket" not in _server:
        folder = Path(tempfile.mkdtemp(prefix="allennlp_server_"))
        socket_path = folder / "server.sock"
        env = {k: v for k, v in os.environ.items() if k not in glibc_heap.USER_SETTINGS}
        env.update(PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        env["JE_ARROW_MALLOC_CONF"] = "background_thread:false"  # pyarrow's, started at import
        with open(folder / "server.log", "w") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.forked_allennlp", "--serve", str(socket_path)],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        atexit.register(stop_server, process, folder)
        deadline = time.monotonic() + 600
        while not socket_path.exists():
            if process.poll() == forked_allennlp.UNSAFE_TO_FORK:
                reason = (folder / "server.log").read_text().strip().splitlines()[-1]
                warnings.warn(f"{reason}: commands run as fresh processes (slower)", stacklevel=2)
                _server["socket"] = None
                return None
            if process.poll() is not None or time.monotonic() > deadline:
                log_text = (folder / "server.log").read_text()
                pytest.fail(f"tests/forked_allennlp.py --serve did not start:\n{log_text[-6000:]}")
            time.sleep(0.1)
        _server["socket"] = str(socket_path)
    return _server["socket"]


def stop_server(process: subprocess.Popen, folder: Path) -> None:
    process.terminate()
    process.wait()
    shutil.rmtree(folder, ignore_errors=True)


def run_allennlp_in_process(
    args: list[str], cwd: Optional[Path] = None, check: bool = True
) -> subprocess.CompletedProcess:
    """`allennlp ARGS --include-package elmo_plugin` run by allennlp's own `main` (the same parser
    and subcommands) inside this process, from `cwd` (default: the repo root): no process at
    all. Returns what `run_allennlp` returns: stdout, stderr with the log lines at INFO, and the
    exit status a process would have (`forked_allennlp.exit_status`). What a command leaves in
    the process is put back afterwards (`process_state_restored`)."""
    argv = ["allennlp", *args, "--include-package", "elmo_plugin"]
    stdout, stderr = io.StringIO(), io.StringIO()
    with process_state_restored(), pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd or REPO_ROOT)
        patch.setattr(sys, "argv", argv)
        # conftest.py imported the plugins once, as a process does at its start; a command's own
        # import_plugins() would only walk every allennlp module again (1-2 s)
        patch.setattr(allennlp_commands, "import_plugins", lambda: None)
        # glibc's heap thresholds cannot be set back: the command's choice is logged, not made
        patch.setattr(glibc_heap, "mallopt", lambda parameter, value: 1)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            log_to(stderr)
            returncode = forked_allennlp.exit_status(lambda: allennlp_commands.main("allennlp"))
    result = subprocess.CompletedProcess(argv, returncode, stdout.getvalue(), stderr.getvalue())
    if check and returncode != 0:
        pytest.fail(
            f"{' '.join(argv)} (in process) exited {returncode}:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
        )
    return result


def predict_args(
    archive: Path, cwd: Path, inputs: str | list[dict], predictor: str, batch_size: int = 2, **args
) -> list[str]:
    """`allennlp predict` arguments for `inputs` (JSON lines, or objects to write as such, written
    to CWD/in.jsonl; the output CWD/out.jsonl), `args` its --predictor-args."""
    if not isinstance(inputs, str):
        inputs = "".join(json.dumps(line) + "\n" for line in inputs)
    (cwd / "in.jsonl").write_text(inputs, encoding="utf-8")
    command = ["predict", str(archive), "in.jsonl", "--predictor", predictor, "--silent"]
    command += ["--output-file", "out.jsonl", "--batch-size", str(batch_size)]
    return command + (["--predictor-args", json.dumps(args)] if args else [])


def predict(
    archive: Path, cwd: Path, inputs: str | list[dict], predictor: str, batch_size: int = 2, **args
) -> list[dict]:
    """`allennlp predict` (in this process, `predict_args`) -> its output lines."""
    run_allennlp_in_process(predict_args(archive, cwd, inputs, predictor, batch_size, **args), cwd)
    return [json.loads(line) for line in (cwd / "out.jsonl").read_text("utf-8").splitlines()]


def log_to(stream: io.StringIO) -> None:
    """The root logger as `allennlp`'s entry point sets it: INFO and above to `stream`."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s - %(levelname)s - %(name)s - %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)


@contextlib.contextmanager
def process_state_restored() -> Iterator[None]:
    """Runs the block as a fresh `allennlp` process would (one torch thread, as `run_allennlp`'s
    OMP_NUM_THREADS=1; warnings ignored; allennlp's once-only log lines not yet seen) and puts back
    what a command changes for the whole process: the root and tqdm loggers' handlers and level
    (closing the ones it added), sys.excepthook, sys.path, allennlp's file-friendly flag, the
    random states of random, numpy and torch, torch's threads, default dtype, grad mode and TF32
    flags."""
    root, tqdm_logger = logging.getLogger(), allennlp_tqdm.logger
    handlers, tqdm_handlers, level = list(root.handlers), list(tqdm_logger.handlers), root.level
    python_state = (sys.excepthook, list(sys.path), allennlp_logging.FILE_FRIENDLY_LOGGING)
    random_states = (random.getstate(), numpy.random.get_state(), torch.random.get_rng_state())
    torch_state = (torch.get_num_threads(), torch.get_default_dtype(), torch.is_grad_enabled())
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    forget_logged_once()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for handler in {*root.handlers, *tqdm_logger.handlers} - {*handlers, *tqdm_handlers}:
            handler.close()
        root.handlers[:], tqdm_logger.handlers[:] = handlers, tqdm_handlers
        root.setLevel(level)
        sys.excepthook, sys.path[:], allennlp_logging.FILE_FRIENDLY_LOGGING = python_state
        random.setstate(random_states[0])
        numpy.random.set_state(random_states[1])
        torch.random.set_rng_state(random_states[2])
        torch.set_num_threads(torch_state[0])
        torch.set_default_dtype(torch_state[1])
        torch.set_grad_enabled(torch_state[2])
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def forget_logged_once() -> None:
    """allennlp's `warning_once` and friends log a message once per process: a fresh one."""
    for logger in logging.Logger.manager.loggerDict.values():
        if isinstance(logger, allennlp_logging.AllenNlpLogger):
            logger._seen_msgs.clear()


def overrides(values: dict) -> str:
    return json.dumps(values)


def train_args(config: Path | str, out: Path | str, values: dict) -> list[str]:
    """`train CONFIG -s OUT -o VALUES`: an `allennlp train` run's arguments, for either runner."""
    return ["train", str(config), "-s", str(out), "-o", overrides(values)]


def evaluation(
    archive: Path | str, data: Path | str, output: Path, *options: str, cwd: Optional[Path] = None
) -> dict:
    """`allennlp evaluate ARCHIVE DATA --output-file OUTPUT OPTIONS` in this process, from `cwd`
    (a failed run fails the test) -> the metrics it wrote (OUTPUT absolute)."""
    args = ["evaluate", str(archive), str(data), "--output-file", str(output), *options]
    run_allennlp_in_process(args, cwd)
    return json.loads(output.read_text())


def predictions(
    archive: Path | str, inputs: Path, *options: str, cwd: Optional[Path] = None
) -> list[dict]:
    """`allennlp predict ARCHIVE INPUTS --output-file OUTPUT --silent OPTIONS` in this process,
    from `cwd` (a failed run fails the test), OUTPUT beside INPUTS (absolute, in the test's own
    folder) -> the JSON lines it wrote."""
    output = inputs.with_name(f"{inputs.stem}.predicted.jsonl")
    args = ["predict", str(archive), str(inputs), "--output-file", str(output), "--silent"]
    run_allennlp_in_process([*args, *options], cwd)
    return [json.loads(line) for line in output.read_text().splitlines()]


def train_with_probes(
    config: str,
    values: dict,
    out: Path,
    record: Path,
    kill: Optional[str] = None,
    resume: bool = False,
    fresh: bool = False,
) -> subprocess.CompletedProcess:
    """`allennlp train CONFIG -s OUT -o VALUES` (with `-r` when `resume`) and the probe callbacks
    of tests/cli/probes.py writing into `record` (`batch_recorder`, `target_counter`);
    `kill="epoch,batch"` makes `batch_recorder` kill the run there (the failed run is returned).
    A run that is killed or distributed (`values` has `distributed`) is a process of its own
    (`fresh`: a fresh one, see `run_allennlp`); any other runs in this process."""
    record.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(REPO_ROOT))
        patch.setenv("TARGET_COUNTER_DIR", str(record))
        patch.setenv("BATCH_RECORDER_DIR", str(record))
        if kill:
            patch.setenv("BATCH_RECORDER_KILL", kill)
        args = [*train_args(config, out, values), "--include-package", "tests.cli.probes"]
        args += ["-r"] if resume else []
        if kill or "distributed" in values or fresh:
            return run_allennlp(args, check=not kill, fresh=fresh)
        return run_allennlp_in_process(args)


# Tiny sizes for CLI tests: same architecture as the demo, seconds per epoch.
TINY_CHAR_CNN_OVERRIDES: dict[str, Any] = {
    "model.text_field_embedder.token_embedders.elmo.filters": [[1, 8], [2, 8], [3, 16]],
    "model.text_field_embedder.token_embedders.elmo.projection_dim": 16,
    "model.contextualizer.input_dim": 16,
}

TINY_INPUT_OVERRIDES = {**TINY_CHAR_CNN_OVERRIDES, "data_loader.batch_size": 16}

TINY_LSTM_OVERRIDES = {**TINY_INPUT_OVERRIDES, "model.contextualizer.cell_size": 32}

TINY_TRANSFORMER_OVERRIDES = {
    **TINY_INPUT_OVERRIDES,
    "model.contextualizer.feedforward_hidden_dim": 32,
    "model.contextualizer.num_attention_heads": 2,
}


def tiny_model_and_batches(
    config: str, values: dict, data: Path, sizes: Sequence[int], whole_file_vocab: bool = True
) -> tuple[Model, list[dict]]:
    """training_config/CONFIG with the overrides `values`: tensor batches of the first instances
    its reader reads from `data`, one after the other, `sizes` instances each, and its model (seed
    0) over the vocabulary of every instance read (`whole_file_vocab`) or of the batched ones."""
    params = Params.from_file(str(CONFIG_DIR / config), json.dumps(values))
    reader = DatasetReader.from_params(params.pop("dataset_reader"))
    instances = list(reader.read(str(data)))
    assert sum(sizes) <= len(instances), f"{data} has {len(instances)} instances, not {sum(sizes)}"
    vocab = Vocabulary.from_instances(instances if whole_file_vocab else instances[: sum(sizes)])
    torch.manual_seed(0)
    model = Model.from_params(vocab=vocab, params=params.pop("model"))
    batches = [Batch(instances[sum(sizes[:i]) : sum(sizes[: i + 1])]) for i in range(len(sizes))]
    for batch in batches:
        batch.index_instances(vocab)
    return model, [batch.as_tensor_dict() for batch in batches]


def conllu_head(path: Path, sentences: int) -> str:
    return "".join(
        block.strip("\n") + "\n\n"
        for block in path.read_text(encoding="utf-8").split("\n\n")[:sentences]
    )


# pos_tagger_elmo.jsonnet with the tiny biLM: ELMo width 2 x 16, + the 32-wide word embedding.
TINY_TAGGER_OVERRIDES = {"model.encoder.input_size": 2 * 16 + 32, "model.encoder.hidden_size": 32}


def first_item_before_end_of_file(
    read: Callable[[str], Iterable], path: Path, head: str, timeout: float = 20.0
):
    """`read(path)`'s first item when the file is a pipe holding only `head` and not yet closed:
    an eager reader (one that reads to the end before yielding) never returns it, and this
    fails; a lazy one yields from what is there. The pipe is closed afterwards either way."""
    os.mkfifo(path)
    release = threading.Event()

    def write() -> None:
        with open(path, "w", encoding="utf-8") as pipe:
            pipe.write(head)
            pipe.flush()
            release.wait(timeout)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    result: list = []
    reader = threading.Thread(
        target=lambda: result.append(next(iter(read(str(path))))), daemon=True
    )
    reader.start()
    reader.join(timeout)
    produced_before_end = bool(result)
    release.set()
    writer.join(timeout)
    assert produced_before_end, f"no item from {path} before its end: the reader is not lazy"
    return result[0]


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (`/proc/PID/stat`'s state)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def free_port() -> int:
    """A TCP port free on this machine now (for process groups: two suites may run side by side)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def join_as_node(rank: int, port: int) -> None:
    """This process as node RANK of two with one process each (allennlp's workers with one
    device on each of two nodes): a gloo group over 127.0.0.1:PORT; a process out of step fails
    within a minute."""
    os.environ["ALLENNLP_PROCS_PER_NODE"] = "1"
    torch.distributed.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=60),
    )


def run_as_two_nodes(module: str, root: Path) -> None:
    """`python -m MODULE ROOT PORT` as a command of the tests' warm server (whose
    `torch.multiprocessing.spawn` forks the two nodes, each calling `join_as_node`), failing the
    test with its stderr."""
    command = ["-m", module, str(root), str(free_port())]
    ran = run_forked(command, REPO_ROOT, dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    assert ran.returncode == 0, ran.stderr[-6000:]


@contextlib.contextmanager
def hidden(*paths: Path) -> Iterator[None]:
    """The paths (files or folders) moved out of the way for the block and put back after it,
    so a test can prove it does not need them without breaking fixtures other tests share."""
    moved = [(path, path.with_name(path.name + ".hidden")) for path in paths]
    for path, away in moved:
        path.rename(away)
    try:
        yield
    finally:
        for path, away in moved:
            away.rename(path)


def copy_archive_with(
    source: Path, target: Path, extra: Sequence[tarfile.TarInfo] = (), drop: str = ""
) -> Path:
    """A copy of the tar archive `source` without the member named `drop` (and what is under
    it), plus the members `extra` at its end (a regular file's TarInfo gets `size` bytes of "x");
    how the tests craft hostile archives."""
    with tarfile.open(source) as original, tarfile.open(target, "w:gz") as copy:
        for member in original.getmembers():
            if member.name != drop and not member.name.startswith(f"{drop}/"):
                copy.addfile(member, original.extractfile(member) if member.isfile() else None)
        for member in extra:
            copy.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    return target


def damaged_archive(source: Path, target: Path, damage: str) -> Path:
    """A copy of the model.tar.gz `source` damaged as a disk or download damages one: `bytes at
    30%` or `bytes at 300` (64 bytes overwritten there), `truncated` (its second half lost),
    `header of MEMBER` (that member's header overwritten inside the tar, then compressed again:
    tarfile stops listing there without a word)."""
    data = bytearray(source.read_bytes())
    if damage.startswith("bytes at "):
        where = damage.removeprefix("bytes at ")
        at = len(data) * int(where[:-1]) // 100 if where.endswith("%") else int(where)
        data[at : at + 64] = b"\xa5" * 64
    elif damage == "truncated":
        del data[len(data) // 2 :]
    else:
        with tarfile.open(source) as original:
            at = original.getmember(damage.removeprefix("header of ")).offset
        data = bytearray(gzip.decompress(data))
        data[at + 100 : at + 108] = b"\xa5" * 8  # its mode field: the header checksum fails
        data = bytearray(gzip.compress(bytes(data)))
    target.write_bytes(bytes(data))
    return target


def tar_member(
    name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "", size: int = 0
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, linkname, size
    return info


# The published ELMo sizes (the README's table of configs): name -> (LSTM dim, projection, highway)
PUBLISHED_SIZES = {"small": (1024, 128, 1), "medium": (2048, 256, 1), "original": (4096, 512, 2)}
FILTERS_2048 = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]


def published_options(dim: int, projection: int, highway: int) -> dict:
    """The options.json of a published ELMo size (relu, 2048 filters, clips 3, 262 characters)."""
    return {
        "lstm": {
            "use_skip_connections": True,
            "projection_dim": projection,
            "cell_clip": 3,
            "proj_clip": 3,
            "dim": dim,
            "n_layers": 2,
        },
        "char_cnn": {
            "activation": "relu",
            "filters": FILTERS_2048,
            "n_highway": highway,
            "embedding": {"dim": 16},
            "n_characters": 262,
            "max_characters_per_token": 50,
        },
    }


def save_tiny_bert(text: str, folder: Path, hidden: int) -> str:
    """A 2-layer `BertForMaskedLM` of width `hidden` (2 heads, seed 0) and its WordPiece
    tokenizer trained on `text` (benchmarks/support/bert_mlm.py's), saved in `folder/model` ->
    that path."""
    from transformers import BertConfig, BertForMaskedLM

    from benchmarks.support import bert_mlm

    (folder / "text.txt").write_text(text)
    tokenizer = bert_mlm.train_wordpieces(folder / "text.txt", folder / "model")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
    )
    BertForMaskedLM(config).save_pretrained(str(folder / "model"))
    return str(folder / "model")


def slow_tests_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The suite's items with the tests marked `slow` first, each group in the order it had
    (pytest-randomly's): pytest-xdist's workers then start the long tests while most of the
    suite is still to share, and none idles at the end while another runs one."""
    return sorted(items, key=lambda item: item.get_closest_marker("slow") is None)
