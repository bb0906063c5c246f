"""Listening sockets bound before serving, so that a taken port is one error message."""

from __future__ import annotations

import socket


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; raises `OSError` (port taken, address
    not ours) before anything is served, so the caller can say so in one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say they are TCP; without
    # it every answer written in two parts waits for a delayed ACK (about 40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock
