"""A raw HTTP server on a free loopback port, in a thread, for clients facing answers no real server sends:
`respond(request_body, connection)` writes each answer as bytes, however malformed."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator


class RawHttpServer:
    """Accepts one connection at a time, reads the request (head and Content-Length body), lets `respond`
    write the answer, and closes the connection."""

    def __init__(self, respond: Callable[[bytes, socket.socket], None]) -> None:
        self.respond = respond
        self.requests = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            with connection, contextlib.suppress(OSError):  # a client that went: the next one
                connection.settimeout(5)
                body = read_request(connection)
                self.requests += 1
                self.respond(body, connection)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(10)
        self.listener.close()


def read_request(connection: socket.socket) -> bytes:
    """The request's body (empty when the client went before its head ended)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lengths = [line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    length = int(lengths[0]) if lengths else 0
    while len(body) < length:
        chunk = connection.recv(65536)
        if not chunk:
            break
        body += chunk
    return body


@contextlib.contextmanager
def raw_http(respond: Callable[[bytes, socket.socket], None]) -> Iterator[RawHttpServer]:
    server = RawHttpServer(respond)
    try:
        yield server
    finally:
        server.stop()
