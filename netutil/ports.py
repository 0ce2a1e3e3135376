"""Free loopback ports: other processes on the machine run servers too, so never hard-code one."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port that was free a moment ago on loopback (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    """Whether something accepts connections on this loopback port now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0
