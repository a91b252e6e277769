"""One HTTP/1.1 request written byte for byte, for headers no polite client will send
(padded, empty or non-ASCII ``Authorization`` values), and a client that stops reading."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass
class RawResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header_list(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name.lower()]

    def json(self) -> Any:
        return json.loads(self.body)


def raw_request(
    url: str,
    method: str,
    path: str,
    headers: list[tuple[bytes, bytes]],
    body: bytes = b"",
    timeout: float = 10.0,
) -> RawResponse:
    """Send one request with ``Connection: close`` and read the whole answer."""
    parts = urlsplit(url)
    lines = [f"{method} {path} HTTP/1.1".encode(), f"Host: {parts.netloc}".encode()]
    lines += [name + b": " + value for name, value in headers]
    lines += [b"Connection: close", f"Content-Length: {len(body)}".encode()]
    request = b"\r\n".join(lines) + b"\r\n\r\n" + body
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, rest = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    pairs = [tuple(line.split(": ", 1)) for line in header_lines]
    received = [(name, value) for name, value in pairs]
    if any(name.lower() == "transfer-encoding" for name, _ in received):
        rest = _dechunk(rest)
    return RawResponse(int(status_line.split()[1]), received, rest)  # type: ignore[arg-type]


def unread_connection(port: int, request: bytes, timeout: float | None = None) -> socket.socket:
    """A connection to 127.0.0.1:``port`` that has sent ``request`` and reads nothing until
    its caller does. Its receive window is small (4 KiB), so a stream the client does not
    read soon fills the server's send buffer and holds the server back."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.settimeout(timeout)
    client.connect(("127.0.0.1", port))
    client.sendall(request)
    return client


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2 :]
    return out
