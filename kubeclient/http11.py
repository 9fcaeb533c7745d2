"""One HTTP/1.1 client connection, reduced to what talking to an API server needs.

``http.client`` parses every answer's headers with the ``email`` package and builds a request from many small
writes; for the short JSON exchanges of a plugin and a fleet that was most of the client's CPU per request (112
against 40 µs here, timed on loopback against a server that answers with kube-apiserver's headers). Here a request
goes out in one ``sendall`` and the answer is read from a buffered reader: the status line, the headers this client
acts on (``Content-Length``, ``Transfer-Encoding``, ``Connection``), then the body by length, by chunks or up to
the server's close. Informational (1xx) answers are skipped. Anything malformed is an :class:`HttpError`.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from typing import BinaryIO, Final

from kubeclient.errors import HttpError, ServerClosedError

MAX_LINE: Final = 65536
"""The longest status, header or chunk-size line accepted (what ``http.client`` allows)."""
MAX_HEADERS: Final = 100
NO_BODY_STATUSES: Final = frozenset({204, 304})


@dataclass(frozen=True, kw_only=True)
class Reply:
    status: int
    body: bytes
    will_close: bool
    """The server will not take another request on this connection."""


def render_request(*, method: str, target: str, host: str, headers: dict[str, str], body: bytes | None) -> bytes:
    """The whole request (pure). A method that may carry a body gets ``Content-Length: 0`` without one, as
    ``http.client`` sends it."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Accept-Encoding: identity"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    elif method in ("POST", "PUT", "PATCH"):
        lines.append("Content-Length: 0")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


def host_header(host: str, port: int, *, https: bool) -> str:
    name = f"[{host}]" if ":" in host else host
    return name if port == (443 if https else 80) else f"{name}:{port}"


class Connection:
    """Mutable on purpose: one connection, opened on its first request, used by one caller at a time."""

    def __init__(self, *, host: str, port: int, tls: ssl.SSLContext | None, timeout: float) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self._reader: BinaryIO | None = None
        self._host_header = host_header(host, port, https=tls is not None)

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self._reader = sock.makefile("rb")
        return sock

    def settimeout(self, timeout: float) -> None:
        self.timeout = timeout
        if self.sock is not None:
            self.sock.settimeout(timeout)

    def send(self, method: str, target: str, *, headers: dict[str, str], body: bytes | None) -> None:
        """Write one request (connecting first if needed). ``OSError`` as the socket raises it."""
        sock = self.sock if self.sock is not None else self._connect()
        sock.sendall(render_request(method=method, target=target, host=self._host_header, headers=headers, body=body))

    def read_reply(self, *, method: str) -> Reply:
        """Read the whole answer to the request sent last. :class:`ServerClosedError` when the server closed before
        answering, :class:`HttpError` for a broken answer, ``OSError`` (timeouts included) as the socket raises."""
        reader = self._reader
        if reader is None:
            raise HttpError("no request was sent on this connection")
        while True:
            status, version_1_0 = _status(reader)
            fields = _headers(reader)
            if not 100 <= status < 200:
                break
        connection = fields.get("connection", "").lower()
        will_close = "close" in connection or (version_1_0 and "keep-alive" not in connection)
        if method == "HEAD" or status in NO_BODY_STATUSES:
            return Reply(status=status, body=b"", will_close=will_close)
        if "chunked" in fields.get("transfer-encoding", "").lower():
            return Reply(status=status, body=_chunked(reader), will_close=will_close)
        length = fields.get("content-length")
        if length is None:
            return Reply(status=status, body=reader.read(), will_close=True)  # the body ends where the server closes
        try:
            size = int(length)
        except ValueError:
            raise HttpError(f"bad Content-Length {length!r}") from None
        if size < 0:
            raise HttpError(f"bad Content-Length {length!r}")
        return Reply(status=status, body=_exactly(reader, size), will_close=will_close)

    def close(self) -> None:
        reader, sock = self._reader, self.sock
        self._reader = self.sock = None
        if reader is not None:
            reader.close()
        if sock is not None:
            sock.close()


def _line(reader: BinaryIO) -> bytes:
    line = reader.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise HttpError("a line of the answer is too long")
    return line


def _status(reader: BinaryIO) -> tuple[int, bool]:
    """The status code, and whether the server speaks HTTP/1.0."""
    line = _line(reader)
    if not line:
        raise ServerClosedError("the server closed the connection without answering")
    version, _, rest = line.partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or not code.isdigit() or rest[3:4] not in (b" ", b"\r", b"\n", b""):
        raise HttpError(f"bad status line {line[:80]!r}")
    return int(code), version == b"HTTP/1.0"


def _headers(reader: BinaryIO) -> dict[str, str]:
    """The fields this client acts on, lower-cased names; the others are skipped unparsed."""
    fields: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = _line(reader)
        if line in (b"\r\n", b"\n"):
            return fields
        if not line:
            raise HttpError("the connection closed within the answer's headers")
        name, colon, value = line.partition(b":")
        if not colon:
            raise HttpError(f"bad header line {line[:80]!r}")
        key = name.strip().lower()
        if key in (b"content-length", b"transfer-encoding", b"connection"):
            fields[key.decode("latin-1")] = value.strip().decode("latin-1")
    raise HttpError(f"more than {MAX_HEADERS} header lines")


def _exactly(reader: BinaryIO, size: int) -> bytes:
    data = reader.read(size)
    if len(data) < size:
        raise HttpError(f"the connection closed after {len(data)} of {size} bytes of the answer")
    return data


def _chunked(reader: BinaryIO) -> bytes:
    parts = []
    while True:
        line = _line(reader)
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise HttpError(f"bad chunk size line {line[:80]!r}") from None
        if size < 0:
            raise HttpError(f"bad chunk size line {line[:80]!r}")
        if size == 0:
            break
        parts.append(_exactly(reader, size))
        if _line(reader) not in (b"\r\n", b"\n"):
            raise HttpError("a chunk does not end where its size says")
    while _line(reader) not in (b"\r\n", b"\n", b""):  # trailer fields, unused
        pass
    return b"".join(parts)
