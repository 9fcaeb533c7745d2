"""Kept-alive HTTP/1.1 connections to one API server (:mod:`kubeclient.http11`).

Every plugin prepare GETs its claim and a fleet creates thousands of slices; urllib3's pool, retry and response
layers cost about 0.14 ms of CPU per request on top of ``http.client`` (0.37 against 0.24 ms for a claim GET,
measured against a local kube-apiserver), and ``http.client`` itself most of the rest, which is what a Python
driver can least afford. Requests that read their whole answer go through here; watches keep urllib3's streaming.

A connection the server closed while it sat idle is noticed before reuse (its socket reads as ready: EOF) and
replaced, as is one holding bytes no request asked for. The server may still close or reset it between that check
and the request; a GET on it that then fails before its whole answer arrived is sent once more on a new connection
(what Go's net/http does for idempotent requests); other methods are never repeated behind the caller's back.
Idle connections are closed when the pool is (or when it is garbage collected, as urllib3's are), one in use when
it comes back to a closed pool, so no socket is left for the interpreter to warn about.
"""

from __future__ import annotations

import select
import ssl
import threading
import urllib.parse
import weakref
from dataclasses import dataclass, field

from kubeclient.errors import HttpError, ServerClosedError, TransportError
from kubeclient.http11 import Connection, host_header, render_request

_CUT_OFF: tuple[type[BaseException], ...] = (
    ServerClosedError,
    ConnectionResetError,
    BrokenPipeError,
    ssl.SSLEOFError,
    ssl.SSLZeroReturnError,
)
"""How a connection the server closed or reset under a request fails (TLS says it in its own words)."""


@dataclass(frozen=True, kw_only=True)
class Answer:
    status: int
    body: bytes


def make_tls_context(
    *, ca_file: str | None, cert_file: str | None, key_file: str | None, insecure: bool
) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_file:
        context.load_cert_chain(cert_file, key_file)
    return context


def _close_all(idle: list[Connection]) -> None:
    while idle:
        idle.pop().close()


def _stale(connection: Connection) -> bool:
    """Whether an idle connection was closed by the server (its socket is readable: EOF or an unasked byte), or
    holds bytes no request asked for."""
    sock = connection.sock
    if sock is None or connection.leftover:
        return True
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


@dataclass(kw_only=True)
class Connections:
    """Mutable on purpose: the idle connections to ``server`` (``https://host:port[/prefix]``), shared by threads."""

    server: str
    tls: ssl.SSLContext | None
    max_idle: int = 8
    """Idle connections kept at most; more callers at once get connections that are closed after use."""
    _idle: list[Connection] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        url = urllib.parse.urlsplit(self.server)
        self._https = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")
        self._host_header = host_header(self._host, self._port, https=self._https)
        self._closed = False
        weakref.finalize(self, _close_all, self._idle)  # the list, never replaced: the finalizer must not hold self

    def _take(self, timeout: float) -> tuple[Connection, bool]:
        """A connection, and whether it was used before."""
        with self._lock:
            while self._idle:
                connection = self._idle.pop()
                if not _stale(connection):
                    connection.settimeout(timeout)
                    return connection, True
                connection.close()
        return self._new(timeout), False

    def _new(self, timeout: float) -> Connection:
        return Connection(host=self._host, port=self._port, tls=self.tls if self._https else None, timeout=timeout)

    def _give_back(self, connection: Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.max_idle:
                self._idle.append(connection)
                return
        connection.close()

    def request(self, method: str, path: str, *, body: bytes | None, headers: dict[str, str], timeout: float) -> Answer:
        """Send one request and read its whole answer (``path`` includes the query)."""
        return self.begin(method, path, body=body, headers=headers, timeout=timeout).finish()

    def begin(self, method: str, path: str, *, body: bytes | None, headers: dict[str, str], timeout: float) -> Exchange:
        """Send one request; its answer is read by :meth:`Exchange.finish`, so the caller can work meanwhile.
        :class:`~kubeclient.errors.InvalidRequestError` before anything is sent for a path or header that would
        break the request's framing."""
        request = render_request(
            method=method, target=self._prefix + path, host=self._host_header, headers=headers, body=body
        )
        connection, reused = self._take(timeout)
        exchange = Exchange(
            pool=self, connection=connection, reused=reused, method=method, request=request, timeout=timeout
        )
        try:
            connection.send(request)
        except _CUT_OFF as exc:
            exchange.send_error = exc  # finish() decides: sent again (a GET on a reused connection) or an error
        except OSError as exc:
            connection.close()
            raise TransportError(str(exc) or type(exc).__name__) from exc
        except BaseException:
            connection.close()
            raise
        return exchange

    def idle(self) -> int:
        """How many connections wait for a request (one may still turn out closed by the server)."""
        return len(self._idle)

    def close(self) -> None:
        """Close the idle connections; one in use is closed when it comes back."""
        with self._lock:
            self._closed = True
            _close_all(self._idle)


@dataclass(kw_only=True)
class Exchange:
    """Mutable on purpose: one request sent on a connection of ``pool``, its answer not read yet.

    Exactly one of :meth:`finish` and :meth:`abandon` must be called: the connection is busy until then."""

    pool: Connections
    connection: Connection
    reused: bool
    method: str
    request: bytes
    """The whole request as sent, for the one repeat a GET may get."""
    timeout: float
    send_error: BaseException | None = None

    def finish(self) -> Answer:
        """Read the whole answer (waiting for it); the connection goes back to the pool."""
        connection = self.connection
        try:
            try:
                if self.send_error is not None:
                    raise self.send_error
                reply = connection.read_reply(method=self.method)
            except _CUT_OFF:
                if not (self.reused and self.method == "GET"):
                    raise
                connection.close()  # closed by the server just as it was taken: a GET may go again, once
                connection = self.connection = self.pool._new(self.timeout)
                connection.send(self.request)
                reply = connection.read_reply(method=self.method)
        except (OSError, HttpError) as exc:
            connection.close()
            raise TransportError(str(exc) or type(exc).__name__) from exc
        except BaseException:
            connection.close()
            raise
        if reply.will_close:
            connection.close()
        else:
            self.pool._give_back(connection)
        return Answer(status=reply.status, body=reply.body)

    def abandon(self) -> None:
        """Give up on the answer: the connection is closed (its answer would confuse the next request)."""
        self.connection.close()
