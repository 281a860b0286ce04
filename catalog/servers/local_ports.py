"""Local process and TCP port checks shared by the metastore supervisor and ``statecat serve``.

Ports are looked up in /proc where it exists, so that checking makes no connection (a probe
connection makes a Thrift server log a failed handshake).
"""

from __future__ import annotations

import contextlib
import os
import socket

LOOPBACK = "127.0.0.1"
TCP_ESTABLISHED = "01"
TCP_LISTEN = "0A"
_PROC_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def sockets_on(port: int, state: str) -> int:
    """Local TCP sockets on ``port`` (local side) in ``state`` (a /proc/net/tcp state code)."""
    count = 0
    for table in _PROC_TABLES:
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == state and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        count += 1
        except OSError:
            continue
    return count


def listening(port: int) -> bool:
    """Whether something listens on the port (a probe connection where there is no /proc)."""
    if not os.path.exists(_PROC_TABLES[0]):
        return accepts(LOOPBACK, port)
    return sockets_on(port, TCP_LISTEN) > 0


def accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its parent) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing listens on now (the system's choice; another process may take it before use)."""
    (port,) = free_ports(1, host)
    return port


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` different ports nothing listens on now: held together while chosen, since two
    choices one after the other may give the same port."""
    with contextlib.ExitStack() as stack:
        probes = []
        for _ in range(count):
            probe = stack.enter_context(
                socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            )
            probe.bind((host, 0))
            probes.append(probe)
        return [int(p.getsockname()[1]) for p in probes]
