"""Who listens at the gateway URL a flash would send its client token to, found in /proc.

The serial port is local, so the gateway that holds it (or released it) is a local process: the flash
asks a gateway only when the URL leads to a socket of this machine, and names the processes that
listen there (the socket's inode in /proc/net/tcp and tcp6, the process whose /proc/PID/fd holds it).
A process of another user is seen only by root: its socket then counts as unseen.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from gateway.flash.port import GATEWAY_SERVICE, gateway_command, process_text

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
LISTEN = "0A"
"""The state of a listening socket in /proc/net/tcp (TCP_LISTEN)."""
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Listener:
    """What listens at a URL's host and port on this machine."""

    local: bool
    """The host is a loopback address or an address of this machine (every address it resolves to)."""
    pids: tuple[int, ...] = ()
    """The processes seen holding a socket that listens there."""
    unseen: int = 0
    """Sockets listening there whose process cannot be seen (another user's, and this command not root)."""

    @property
    def nobody(self) -> bool:
        """Nothing listens there: a request would not be answered (nor a token read)."""
        return self.local and not self.pids and not self.unseen

    def is_gateway(self, runs: Callable[[int], bool]) -> bool:
        """Seen to be the gateway: every socket listening there is held by a process `runs` says runs
        the gateway (`runs_gateway`: an `mcp-gateway run` process)."""
        return self.local and bool(self.pids) and not self.unseen and all(map(runs, self.pids))

    def describe(self) -> str:
        """Who listens there, for a message: "python3 (pid 812)", "a process of another user"."""
        if not self.local:
            return "its host is no address of this machine"
        names = [process_text(pid) for pid in self.pids]
        if self.unseen:
            names.append("a process this user cannot see")
        return f"{', '.join(names) or 'nothing'} listens there"


def runs_gateway(pid: int) -> bool:
    """The process `pid` runs as `mcp-gateway run` (as its command line says)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return gateway_command(argv) == GATEWAY_SERVICE


def listener(url: str) -> Listener:
    """Who listens on this machine at the host and port of `url`."""
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
        host = parts.hostname
        if port is None or not host:
            return Listener(local=False)
        addresses = {
            ipaddress.ip_address(str(info[4][0]).partition("%")[0])
            for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        }
    except (ValueError, OSError):  # a malformed URL, a name that does not resolve: no local gateway
        return Listener(local=False)
    if not addresses or not all(map(_is_local, addresses)):
        return Listener(local=False)
    inodes = _listening_inodes(addresses, port)
    owners = _owners(inodes)
    pids = tuple(sorted({pid for inode in inodes for pid in owners.get(inode, ())}))
    return Listener(local=True, pids=pids, unseen=sum(1 for inode in inodes if inode not in owners))


def _is_local(address: Address) -> bool:
    """A loopback address, or one a socket of this machine can be bound to (one of its own)."""
    if address.is_loopback:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


def _listening_inodes(addresses: set[Address], port: int) -> set[int]:
    """The inodes of the sockets a connection to `port` at one of `addresses` may reach: those that
    listen on that port at that address or at the wildcard address of its family (:: takes IPv4 too)."""
    wanted = set(addresses)
    wanted.update(address.ipv4_mapped for address in addresses if isinstance(address, ipaddress.IPv6Address)
                  and address.ipv4_mapped is not None)  # fmt: skip
    families = {address.version for address in wanted}
    inodes: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text(encoding="ascii", errors="replace").splitlines()[1:]
        except OSError:  # no IPv6 on this machine
            continue
        for fields in (line.split() for line in lines):
            # "sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ..."
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            host_hex, _, port_hex = fields[1].partition(":")
            with contextlib.suppress(ValueError):
                if int(port_hex, 16) != port:
                    continue
                address = _address(host_hex)
                mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
                reaches = (
                    address in wanted
                    or (mapped is not None and mapped in wanted)
                    or (address.is_unspecified and (address.version == 6 or 4 in families))
                )
                if reaches and int(fields[9]):
                    inodes.add(int(fields[9]))
    return inodes


def _address(text: str) -> Address:
    """An address as /proc/net/tcp writes it: 32-bit words in hex, each in the machine's byte order."""
    words = [int(text[start : start + 8], 16).to_bytes(4, sys.byteorder) for start in range(0, len(text), 8)]
    return ipaddress.ip_address(b"".join(words))


def _owners(inodes: set[int]) -> dict[int, list[int]]:
    """inode -> the processes whose descriptors hold the socket, among those this user may look into."""
    links = {f"socket:[{inode}]": inode for inode in inodes}
    owners: dict[int, list[int]] = {}
    if not links:
        return owners
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            descriptors = list((entry / "fd").iterdir())
        except OSError:  # another user's process (this command not root), or one that ended
            continue
        held = set()
        for descriptor in descriptors:
            with contextlib.suppress(OSError):  # closed meanwhile
                held.add(os.readlink(descriptor))
        for link in held & links.keys():
            owners.setdefault(links[link], []).append(int(entry.name))
    return owners
