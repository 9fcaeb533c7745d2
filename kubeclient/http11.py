"""One HTTP/1.1 client connection, reduced to what talking to an API server needs.

``http.client`` parses every answer's headers with the ``email`` package and builds a request from many small
writes; for the short JSON exchanges of a plugin and a fleet that was most of the client's CPU per request (112
against 40 µs here, timed on loopback against a server that answers with kube-apiserver's headers). Here a request
goes out in one ``sendall`` and the answer is read from the connection's own buffer: the status line, the headers
this client acts on (``Content-Length``, ``Transfer-Encoding``, ``Connection``), then the body by length, by chunks
or up to the server's close. Informational (1xx) answers are skipped.

Strict on both sides: a request whose target or headers would change its framing (a space, a control character, a
non-ASCII byte, a line break) is refused before anything is sent (:class:`InvalidRequestError`), and an answer
whose framing is not exactly HTTP/1.1's is an :class:`HttpError` — as are bytes the server sent beyond an answer,
seen when the connection is next taken (:attr:`Connection.leftover`), so they can never be read as the next
answer.
"""

from __future__ import annotations

import re
import socket
import ssl
from dataclasses import dataclass
from typing import Final

from kubeclient.errors import HttpError, InvalidRequestError, ServerClosedError

MAX_LINE: Final = 65536
"""The longest status, header or chunk-size line accepted (what ``http.client`` allows)."""
MAX_HEADERS: Final = 100
MAX_INTERIM: Final = 10
"""Informational answers skipped before the final one at most."""
MAX_BODY: Final = 4 << 30
"""The largest answer body accepted (a list of every object of a large cluster stays well under it)."""
NO_BODY_STATUSES: Final = frozenset({204, 304})
RECV_BYTES: Final = 256 << 10
_TARGET: Final = re.compile(r"[!-~]+")
"""Visible ASCII only: no space, control character or non-ASCII byte can end the request line early."""
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_UNSAFE_VALUE: Final = re.compile(r"[\x00\r\n]")
_DIGITS: Final = re.compile(rb"[0-9]{1,19}")
_HEX: Final = re.compile(rb"[0-9A-Fa-f]{1,16}")


@dataclass(frozen=True, kw_only=True)
class Reply:
    status: int
    body: bytes
    will_close: bool
    """The server will not take another request on this connection."""


def render_request(*, method: str, target: str, host: str, headers: dict[str, str], body: bytes | None) -> bytes:
    """The whole request (pure). A method that may carry a body gets ``Content-Length: 0`` without one, as
    ``http.client`` sends it. :class:`InvalidRequestError` for a target or header that would break the framing."""
    if not _TARGET.fullmatch(target) or not _TARGET.fullmatch(method):
        raise InvalidRequestError(f"cannot send {method} {target!r}: only visible ASCII may be in a request line")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Accept-Encoding: identity"]
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name) or _UNSAFE_VALUE.search(value):
            raise InvalidRequestError(f"cannot send header {name!r}: a line break or NUL in it")
        lines.append(f"{name}: {value}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    elif method in ("POST", "PUT", "PATCH"):
        lines.append("Content-Length: 0")
    try:
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(f"cannot send a header value outside latin-1: {exc}") from None
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
        self._buffer = bytearray()
        self._start = 0
        """Where the unread bytes of ``_buffer`` begin."""

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
        return sock

    def settimeout(self, timeout: float) -> None:
        if timeout == self.timeout:
            return  # the socket has it already; setting it again is an ioctl per request
        self.timeout = timeout
        if self.sock is not None:
            self.sock.settimeout(timeout)

    @property
    def leftover(self) -> int:
        """Bytes received and not read as part of an answer: on an idle connection, the server broke the framing."""
        pending = self.sock.pending() if isinstance(self.sock, ssl.SSLSocket) else 0
        return len(self._buffer) - self._start + pending

    def send(self, request: bytes) -> None:
        """Write one request made by :func:`render_request` (connecting first if needed). ``OSError`` as the socket
        raises it."""
        sock = self.sock if self.sock is not None else self._connect()
        sock.sendall(request)

    def read_reply(self, *, method: str) -> Reply:
        """Read the whole answer to the request sent last. :class:`ServerClosedError` when the server closed before
        answering, :class:`HttpError` for a broken answer, ``OSError`` (timeouts included) as the socket raises."""
        if self.sock is None:
            raise HttpError("no request was sent on this connection")
        for _ in range(MAX_INTERIM + 1):
            head = self._whole_head()
            if head is not None:
                status, version_1_0, fields = head
            else:
                status, version_1_0 = self._status()
                fields = self._headers()
            if status >= 200:
                break
            if status == 101:
                raise HttpError("the server switched protocols, which this client never asks for")
        else:
            raise HttpError(f"more than {MAX_INTERIM} informational answers")
        connection = fields.get("connection", "").lower()
        will_close = "close" in connection or (version_1_0 and "keep-alive" not in connection)
        if method == "HEAD" or status in NO_BODY_STATUSES:
            return Reply(status=status, body=b"", will_close=will_close)
        coding = fields.get("transfer-encoding")
        if coding is not None:
            if coding.lower() != "chunked":
                raise HttpError(f"unsupported Transfer-Encoding {coding!r}")
            # A length beside chunked is ignored (RFC 9112 6.3), and such a connection is not trusted again.
            return Reply(status=status, body=self._chunked(), will_close=will_close or "content-length" in fields)
        length = fields.get("content-length")
        if length is None:
            return Reply(status=status, body=self._until_close(), will_close=True)
        return Reply(status=status, body=self._exactly(_size(length.encode(), pattern=_DIGITS)), will_close=will_close)

    def close(self) -> None:
        sock, self.sock = self.sock, None
        self._buffer.clear()
        self._start = 0
        if sock is not None:
            sock.close()

    # -- reading -----------------------------------------------------------------------------------------------

    def _receive(self) -> bool:
        """More bytes into the buffer; False at the server's close."""
        assert self.sock is not None
        chunk = self.sock.recv(RECV_BYTES)
        if not chunk:
            return False
        if self._start:
            del self._buffer[: self._start]
            self._start = 0
        self._buffer += chunk
        return True

    def _line(self) -> bytes:
        """One line with its end, or what is left before the server's close (b"" when nothing)."""
        while True:
            end = self._buffer.find(b"\n", self._start)
            if end >= 0:
                if end - self._start >= MAX_LINE:
                    raise HttpError("a line of the answer is too long")
                line = bytes(self._buffer[self._start : end + 1])
                self._start = end + 1
                return line
            if len(self._buffer) - self._start >= MAX_LINE:
                raise HttpError("a line of the answer is too long")
            if not self._receive():
                line = bytes(self._buffer[self._start :])
                self._start = len(self._buffer)
                return line

    def _exactly(self, size: int) -> bytes:
        if size > MAX_BODY:
            raise HttpError(f"an answer of {size} bytes is larger than this client takes")
        while len(self._buffer) - self._start < size:
            if not self._receive():
                got = len(self._buffer) - self._start
                raise HttpError(f"the connection closed after {got} of {size} bytes of the answer")
        data = bytes(self._buffer[self._start : self._start + size])
        self._start += size
        return data

    def _until_close(self) -> bytes:
        while self._receive():
            if len(self._buffer) - self._start > MAX_BODY:
                raise HttpError("an answer larger than this client takes")
        data = bytes(self._buffer[self._start :])
        self._start = len(self._buffer)
        return data

    def _whole_head(self) -> tuple[int, bool, dict[str, str]] | None:
        """Status, HTTP/1.0-ness and fields of an answer whose whole head has arrived with CRLF line ends only (as
        API servers send it), parsed in one go; None otherwise, for the line-by-line path (which reads on and
        judges bare LFs and oversized heads). An API answer's head took 40 µs line by line, about 15 here."""
        if self._start == len(self._buffer) and not self._receive():
            raise ServerClosedError("the server closed the connection without answering")
        end = self._buffer.find(b"\r\n\r\n", self._start)
        if end < 0 or end - self._start >= MAX_LINE:
            return None
        head = bytes(self._buffer[self._start : end + 2])
        lines = head.split(b"\r\n")[:-1]
        if head.count(b"\n") != len(lines) or len(lines) > MAX_HEADERS + 1:
            return None
        status, version_1_0 = _status_of(lines[0] + b"\r\n")
        fields: dict[str, str] = {}
        for line in lines[1:]:
            _add_field(fields, line)
        self._start = end + 4
        return status, version_1_0, fields

    def _status(self) -> tuple[int, bool]:
        """The status code, and whether the server speaks HTTP/1.0."""
        line = self._line()
        if not line:
            raise ServerClosedError("the server closed the connection without answering")
        return _status_of(line)

    def _headers(self) -> dict[str, str]:
        """The fields this client acts on, lower-cased names; the others are skipped unparsed."""
        fields: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = self._line()
            if line in (b"\r\n", b"\n"):
                return fields
            if not line.endswith(b"\n"):
                raise HttpError("the connection closed within the answer's headers")
            _add_field(fields, line)
        raise HttpError(f"more than {MAX_HEADERS} header lines")

    def _chunked(self) -> bytes:
        parts = []
        total = 0
        while True:
            line = self._line()
            size = _size(line.split(b";", 1)[0].strip(), pattern=_HEX, base=16, what="chunk size")
            if size == 0:
                break
            total += size
            if total > MAX_BODY:
                raise HttpError("an answer larger than this client takes")
            parts.append(self._exactly(size))
            if self._line() not in (b"\r\n", b"\n"):
                raise HttpError("a chunk does not end where its size says")
        while True:  # trailer fields, unused, up to the empty line
            line = self._line()
            if line in (b"\r\n", b"\n"):
                return b"".join(parts)
            if not line.endswith(b"\n"):
                raise HttpError("the connection closed within the answer's trailer")


def _status_of(line: bytes) -> tuple[int, bool]:
    """A status line (with its end): the code, and whether the server speaks HTTP/1.0."""
    version, _, rest = line.partition(b" ")
    code = rest[:3]
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or not code.isdigit() or rest[3:4] not in (b" ", b"\r", b"\n"):
        raise HttpError(f"bad status line {line[:80]!r}")
    return int(code), version == b"HTTP/1.0"


def _add_field(fields: dict[str, str], line: bytes) -> None:
    """One header line into ``fields`` if it is one this client acts on (lower-cased name)."""
    name, colon, value = line.partition(b":")
    if not colon:
        raise HttpError(f"bad header line {line[:80]!r}")
    key = name.strip().lower().decode("latin-1")
    if key in ("content-length", "transfer-encoding", "connection"):
        text = value.strip().decode("latin-1")
        if key == "content-length" and fields.get(key, text) != text:
            raise HttpError("two different Content-Length fields")
        fields[key] = f"{fields[key]}, {text}" if key != "content-length" and key in fields else text


def _size(text: bytes, *, pattern: re.Pattern[bytes], base: int = 10, what: str = "Content-Length") -> int:
    if not pattern.fullmatch(text):
        raise HttpError(f"bad {what} {text[:40]!r}")
    return int(text, base)
