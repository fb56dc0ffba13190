"""Two network hosts on one machine, for rehearsing multi-node training: two Linux network
namespaces joined by a veth pair, each with its own address and its `lo` up (iproute2's `ip`,
as root). `network_hosts()` removes them on exit, also on an error, Ctrl-C or SIGTERM. This
module imports nothing heavy."""

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional

SUBNET = "10.231.0"  # private to the two namespaces: nothing outside them sees it


@dataclass(frozen=True)
class Host:
    """One node: a command runs on it through `command()`, gloo talks over `interface`.
    `namespaced`: its own network namespace `name`; otherwise this machine's network."""

    name: str
    interface: str
    address: str
    namespaced: bool = True

    def command(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv] if self.namespaced else argv

    def environment(self) -> dict[str, str]:
        """What a process on this host needs in its environment: gloo's interface."""
        return {"GLOO_SOCKET_IFNAME": self.interface}

    def cut_link(self) -> None:
        """Takes this host's end of the link down: a partition, no socket closed."""
        ip("-n", self.name, "link", "set", "dev", self.interface, "down")

    def restore_link(self) -> None:
        ip("-n", self.name, "link", "set", "dev", self.interface, "up")


def loopback_hosts() -> tuple[Host, Host]:
    """Two nodes on this machine's loopback: no root needed, but no link to cut."""
    return Host("loopback0", "lo", "127.0.0.1", False), Host("loopback1", "lo", "127.0.0.1", False)


def unavailable_reason() -> Optional[str]:
    """Why namespaces cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "needs iproute2's ip command (network namespaces)"
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    return None


def ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def namespaces() -> list[str]:
    """The names `ip netns list` shows."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]


@contextlib.contextmanager
def network_hosts(tag: str = "") -> Iterator[tuple[Host, Host]]:
    """Two hosts, `SUBNET`.1 and .2, named after this process (and `tag`) so that runs side by
    side do not collide; removed on exit (a process still running in one keeps its network
    alive until it ends, but the names are gone)."""
    suffix = f"{os.getpid()}{tag}"
    hosts = tuple(
        Host(f"elmo-node{node}-{suffix}", f"elmo{node}-{suffix}"[:15], f"{SUBNET}.{node + 1}")
        for node in range(2)
    )
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        for host in hosts:
            ip("netns", "add", host.name)
        ip(
            "link",
            "add",
            hosts[0].interface,
            "netns",
            hosts[0].name,
            "type",
            "veth",
            "peer",
            "name",
            hosts[1].interface,
            "netns",
            hosts[1].name,
        )
        for host in hosts:
            ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", host.interface)
            ip("-n", host.name, "link", "set", "dev", "lo", "up")
            ip("-n", host.name, "link", "set", "dev", host.interface, "up")
        yield hosts[0], hosts[1]
    finally:
        for host in hosts:
            if host.name in namespaces():
                ip("netns", "delete", host.name)  # the veth pair goes with it
        signal.signal(signal.SIGTERM, previous)


def interrupt(signum, frame) -> None:
    """SIGTERM as Ctrl-C, so that the namespaces are removed on the way out."""
    raise KeyboardInterrupt(f"signal {signum}")
