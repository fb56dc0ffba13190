"""`allennlp` commands (and `python -m` modules) as forks of one warm process: each command is a
process of its own (its own exit status, stdout and stderr, process-wide settings; it can kill
itself), without the seconds a process spends importing torch, allennlp, allennlp-models and
elmo_plugin. The tests' one fork server: `run_forked` (tests/helpers.py) and the `allennlp` on
the PATH of tests/test_docs_commands.py are its clients.

`python -m tests.forked_allennlp --serve SOCKET` imports them as the `allennlp` script does
(its logging set-up, then the plugins), then forks per connection on SOCKET: a waiter, which
forks the command and reports how it ended. `python tests/forked_allennlp.py TIMEOUT allennlp
ARGS...`, or `TIMEOUT -m MODULE ARGS...` for `python -m MODULE ARGS...`, hands the command its
arguments, working directory, environment and standard streams, and ends as the command ended:
its exit status, or the signal that killed it; a client killed takes its command and what that
started with it, as a killed process would. A client in another network namespace (`ip netns
exec HOST`) has its command run in that namespace. A fork starts from a clean copy of the server:
nothing a command does reaches the next one. A command's `torch.multiprocessing.spawn`
(`allennlp train`'s distributed workers) forks them from the command where it can
(`spawn_or_fork`). Without a server (SOCKET_ENV unset) the client runs the command as a fresh
process instead. Two variables of the client's environment change
what it does, both for the documented commands: TINY_SIZES_ENV (`with_tiny_sizes`) and
FAILURES_ENV (a file each failed command is appended to, seen even where the shell ignores an
exit status: `&`).

What a fork does not repeat of a fresh process: the imports (import-time warnings, the plugins
found through `.allennlp_plugins` or the global plugins file); tests of those start a fresh
interpreter. A command's own coverage data is saved as a process's is, at its exit.

This module imports only the standard library at its top: the client must start fast.
"""

import atexit
import importlib
import json
import multiprocessing
import multiprocessing.context
import os
import select
import signal
import socket
import sys
import tempfile
import traceback
from collections.abc import Callable

SOCKET_ENV = "ELMO_TESTS_ALLENNLP_SOCKET"  # the server's socket, for the client
TINY_SIZES_ENV = "ELMO_TESTS_TINY_SIZES"  # JSON: config file name (or elmo-continue) -> keys
FAILURES_ENV = "ELMO_TESTS_FAILED_COMMANDS"  # a file the client appends each failed command to
TIMEOUT_KEY = "timeout"  # seconds; the command is then ended (SIGALRM), as a client's timeout
UNSAFE_TO_FORK = 3  # the server's exit status when this process cannot fork commands safely
CLIENT_POLL_S = 0.02  # how often a waiter sees whether its command ended or its client is gone


def serve(path: str) -> None:
    """Imports allennlp and the plugins, then forks a waiter per connection on `path` until the
    process that started the server is gone."""
    # ours first: allennlp.__main__ puts site-packages, which has a `benchmarks` package too,
    # first on sys.path
    importlib.import_module("benchmarks")
    import allennlp.__main__  # noqa: F401  (the script's logging set-up)
    import torch
    from allennlp.common.plugins import import_plugins

    import_plugins()
    import elmo_plugin  # noqa: F401

    if torch.cuda.is_initialized():  # a fork cannot use CUDA initialized before it
        refuse("importing allennlp initialized CUDA")
    threads = other_threads()
    if threads:  # a fork could inherit a lock one of them holds, and hang on it (on a GPU
        # machine: the CUDA driver's own thread, which a fork cannot use CUDA after)
        refuse(f"threads besides the main one: {threads}")

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # the socket appears only when it accepts
    signal.signal(signal.SIGCHLD, reap_waiters)
    listener.settimeout(5)
    parent = os.getppid()
    while os.getppid() == parent:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            continue
        connection.settimeout(None)
        if os.fork() == 0:
            listener.close()
            wait_for_command(connection)
        connection.close()


def refuse(reason: str) -> None:
    """Ends the server before it listens, with UNSAFE_TO_FORK: clients are then started without
    SOCKET_ENV, and run each command as a fresh process (tests/helpers.py: run_forked)."""
    print(f"tests/forked_allennlp.py: {reason}", file=sys.stderr, flush=True)
    raise SystemExit(UNSAFE_TO_FORK)


def other_threads() -> list[str]:
    """The names of this process's threads besides the main one (Linux; elsewhere none known)."""
    if not os.path.isdir("/proc/self/task"):
        return []
    tasks = sorted(os.listdir("/proc/self/task"), key=int)[1:]
    names = []
    for task in tasks:
        with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as comm:
            names.append(comm.read().strip())
    return names


def reap_waiters(signum: int, frame: object) -> None:
    """Collects the waiters that ended (their CPU time then counts as the server's children's,
    as a process's would in its parent's)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:  # none left
        pass


def wait_for_command(connection: socket.socket) -> None:
    """In the waiter: forks the command, sends the client how it ended (an exit status, or minus
    the signal that ended it, as `subprocess` reads it) and exits."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _, streams, _, _ = socket.recv_fds(connection, 1, 3)
    request = json.loads(connection.makefile("r", encoding="utf-8").readline())
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    request["client"] = int.from_bytes(credentials[:4], sys.byteorder)  # struct ucred's pid
    command = os.fork()
    if command == 0:
        os.setpgid(0, 0)
        run_command(request, streams)
    for stream in streams:
        os.close(stream)
    status = wait_unless_client_gone(connection, command)
    try:
        connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    except OSError:  # the client is gone
        pass
    finally:
        os._exit(0)


def join_network_namespace(pid: int) -> None:
    """In the command's fork: the network namespace of process `pid` (the client's: a command
    started by `ip netns exec HOST` runs on that host, as the process it stands for would),
    where it is not this one's (setns(2), which needs root, as making namespaces does). Only the
    network: what `ip netns exec` also mounts (/sys, /etc/netns/HOST) is the server's."""
    namespace = f"/proc/{pid}/ns/net"
    if os.stat(namespace).st_ino == os.stat("/proc/self/ns/net").st_ino:
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    descriptor = os.open(namespace, os.O_RDONLY)
    if libc.setns(descriptor, 0x40000000) != 0:  # CLONE_NEWNET
        error = ctypes.get_errno()
        raise OSError(error, f"setns({namespace}): {os.strerror(error)}")
    os.close(descriptor)


def wait_unless_client_gone(connection: socket.socket, command: int) -> int:
    """The command's wait status once it ended; if the client goes first (killed: its end of the
    connection closes), the command and every process it started are killed, as a process is
    with its SIGKILL."""
    while not select.select([connection], [], [], CLIENT_POLL_S)[0]:  # the client sends no more
        pid, status = os.waitpid(command, os.WNOHANG)
        if pid:
            return status
    try:
        os.killpg(command, signal.SIGKILL)
    except ProcessLookupError:  # not in its own group yet: it has started nothing either
        os.kill(command, signal.SIGKILL)
    return os.waitpid(command, 0)[1]


def run_command(request: dict, streams: list[int]) -> None:
    """In the command's fork: the client's streams, network namespace, directory and environment,
    then allennlp's own entry point (or the requested module as `__main__`); exits with its
    status, running the exit handlers as a process does."""
    for target, stream in enumerate(streams):
        os.dup2(stream, target)
        os.close(stream)
    try:
        join_network_namespace(request["client"])
    except OSError as error:
        print(f"tests/forked_allennlp.py: {error}", file=sys.stderr, flush=True)
        os._exit(1)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # found again from the command's TMPDIR
    signal.alarm(request[TIMEOUT_KEY])
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1))
    start_workers_as_forks()
    if request["module"]:
        status = exit_status_of_module(request["module"], request["argv"])
    else:
        status = exit_status_of_allennlp(request["argv"])
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(status)


def start_workers_as_forks() -> None:
    """In a command's fork: `torch.multiprocessing.spawn`, how `allennlp train` starts its
    distributed workers, is `spawn_or_fork`, and a forked worker's `import_plugins()` (which
    would only walk every allennlp module again) is skipped as the command's is
    (`exit_status_of_allennlp`): the worker is a copy of the command, plugins imported (a
    spawned worker imports the module afresh, and them with it). Likewise
    `multiprocessing.get_context("spawn")` (`elmo-vocab --workers`' pool) is the fork context
    while the command has no other thread. Fresh processes (no server, `run_forked(...,
    fresh=True)`) and pytest's own keep spawn."""
    import allennlp.commands.train
    import torch.multiprocessing

    torch.multiprocessing.spawn = spawn_or_fork
    allennlp.commands.train.import_plugins = lambda: None
    get_context = multiprocessing.get_context

    def fork_when_alone(method: str | None = None) -> object:
        if method == "spawn" and not other_threads():
            return ForkedAsSpawned()
        return get_context(method)

    multiprocessing.get_context = fork_when_alone  # type: ignore[assignment]


class SpawnedLikeFork(multiprocessing.context.ForkProcess):
    """A fork in place of a spawned process, with a spawned process's SIGTERM: Python's default.
    The command's own is allennlp's, which raises an exception: a pool's worker killed by its
    pool's `terminate` could then hang on a lock instead of ending."""

    def run(self) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        super().run()


class ForkedAsSpawned(multiprocessing.context.ForkContext):
    """The fork context whose processes are `SpawnedLikeFork`."""

    Process = SpawnedLikeFork


def spawn_or_fork(
    fn: Callable[..., object],
    args: tuple = (),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> object:
    """`torch.multiprocessing.spawn`'s workers started as forks of this process
    (`start_processes(..., start_method="fork")`) when it has no thread besides its main one (a
    fork could inherit a lock another thread holds: OpenMP's, the CUDA driver's); otherwise, or
    for another start method, torch's own spawn. A fork is what a spawned worker is without its
    imports: the same `fn(rank, *args)` run by torch's `_wrap` (its error file, its exit
    status), in this process's group (what kills the group kills the workers)."""
    import torch.multiprocessing

    if start_method != "spawn" or other_threads():
        spawn = importlib.import_module("torch.multiprocessing.spawn").spawn  # torch's own
        return spawn(fn, args, nprocs, join, daemon, start_method)
    return torch.multiprocessing.start_processes(fn, args, nprocs, join, daemon, "fork")


def exit_status_of_allennlp(argv: list[str]) -> int:
    """Runs `allennlp ARGV` as the `allennlp` script does -> the exit status Python would give."""
    import allennlp.commands
    from allennlp.__main__ import run

    # the server imported the plugins, as the script does first; a command's own
    # import_plugins() would only walk every allennlp module again (1-2 s)
    allennlp.commands.import_plugins = lambda: None
    sys.argv = ["allennlp", *argv]
    return exit_status(run)


def exit_status_of_module(module: str, argv: list[str]) -> int:
    """Runs `python -m MODULE ARGV` -> the exit status Python would give."""
    import runpy

    sys.argv = [module, *argv]  # run_module puts the module's file first, as `-m` does
    return exit_status(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))


def exit_status(main: Callable[[], object]) -> int:
    """Runs `main` -> the exit status of a Python process running it: `sys.exit`'s (a message is
    printed to stderr, status 1); 1 for an escaping exception, which `sys.excepthook` reports
    (`allennlp train` points it at its log)."""
    try:
        main()
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            return exit.code or 0
        print(exit.code, file=sys.stderr)
        return 1
    except Exception:
        try:
            sys.excepthook(*sys.exc_info())
        except Exception:
            traceback.print_exc()
        return 1
    return 0


def with_tiny_sizes(argv: list[str], sizes: dict[str, dict]) -> list[str]:
    """`allennlp ARGV` with the keys of `sizes[CONFIG]` merged into its one `-o` JSON object (one
    added where it has none; the sizes win where both set a key), CONFIG what it trains: `train
    CONFIG`, `elmo-plan CONFIG` (by file name), `elmo-continue`. Nothing else changes: a renamed
    flag, config or key fails as it would fail a user. Other commands are left as they are."""
    if argv[:1] == ["elmo-continue"]:
        config = "elmo-continue"
    elif argv[:1] in (["train"], ["elmo-plan"]) and len(argv) > 1:
        config = os.path.basename(argv[1])
    else:
        return argv
    if config not in sizes:
        raise SystemExit(f"tests/forked_allennlp.py: no tiny sizes for {config}")
    for flag in ("-o", "--overrides"):
        if flag in argv:
            at = argv.index(flag) + 1
            merged = {**json.loads(argv[at]), **sizes[config]}
            return [*argv[:at], json.dumps(merged), *argv[at + 1 :]]
    return [*argv, "-o", json.dumps(sizes[config])]


def client(command: list[str], timeout: int) -> None:
    """Runs `allennlp ARGS...` or `-m MODULE ARGS...` (`command`) as a fork of the server (a
    fresh process without one) and ends as it ended."""
    module, argv = (command[1], command[2:]) if command[0] == "-m" else (None, command[1:])
    if TINY_SIZES_ENV in os.environ and module is None:
        argv = with_tiny_sizes(argv, json.loads(os.environ[TINY_SIZES_ENV]))
    if SOCKET_ENV in os.environ:
        status = forked_status(module, argv, timeout)
    else:
        import subprocess

        script = os.path.join(os.path.dirname(sys.executable), "allennlp")
        fresh = [sys.executable, "-m", module] if module else [script]
        status = subprocess.call([*fresh, *argv], timeout=timeout)
    if status != 0 and FAILURES_ENV in os.environ:
        with open(os.environ[FAILURES_ENV], "a", encoding="utf-8") as failures:
            failures.write(f"exit {status}: {' '.join(command)}\n")
    if status < 0:  # killed by a signal: so is this process
        if status != -signal.SIGKILL:  # (whose action cannot be set)
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


def forked_status(module: str | None, argv: list[str], timeout: int) -> int:
    """Runs the command as a fork of the server -> its exit status (minus the signal that ended
    it; 1 where the server gave no reply)."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(os.environ[SOCKET_ENV])
    socket.send_fds(connection, [b"x"], [0, 1, 2])
    request: dict[str, object] = {"module": module, "argv": argv, TIMEOUT_KEY: timeout}
    request.update(cwd=os.getcwd(), env=dict(os.environ))
    connection.sendall(json.dumps(request).encode() + b"\n")
    reply = connection.makefile("r").readline()
    return int(reply) if reply else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    else:
        client(sys.argv[2:], timeout=int(sys.argv[1]))
