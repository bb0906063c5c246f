"""Listening sockets bound before serving, so that a taken port is one error message."""

from __future__ import annotations

import socket


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; raises `OSError` (port taken, address
    not ours) before anything is served, so the caller can say so in one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock
