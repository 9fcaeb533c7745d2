"""kubeclient's HTTP/1.1 connection against a loopback server that sends answers byte for byte as a test writes them:
every way an answer may end its body, and broken answers that must be errors, never a wrong body."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from kubeclient.errors import HttpError, InvalidRequestError, ServerClosedError
from kubeclient.http11 import Connection, host_header, render_request


class _Scripted:
    """Answers each request on one connection with the next of ``answers`` and closes the connection after the last
    one; None closes it instead of answering."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with self.listener.accept()[0] as conn, conn.makefile("rb") as reader:
            for answer in self.answers:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = next(
                    (int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")),
                    0,
                )
                self.requests.append(head + reader.read(length))
                if answer is None:
                    return
                conn.sendall(answer)

    def close(self) -> None:
        self.listener.close()
        self.thread.join(timeout=5)


@pytest.fixture
def scripted() -> Iterator[list[_Scripted]]:
    servers: list[_Scripted] = []
    yield servers
    for server in servers:
        server.close()


def _exchange(
    servers: list[_Scripted], answers: list[bytes | None], *, method: str = "GET", count: int = 1
) -> list[object]:
    server = _Scripted(answers)
    servers.append(server)
    connection = Connection(host="127.0.0.1", port=server.port, tls=None, timeout=5)
    replies: list[object] = []
    try:
        for _ in range(count):
            body = b"{}" if method == "POST" else None
            connection.send(render_request(method=method, target="/x", host="h", headers={"A": "j"}, body=body))
            replies.append(connection.read_reply(method=method))
    finally:
        connection.close()
    return replies


OK_HEAD = b"HTTP/1.1 200 OK\r\nAudit-Id: 1\r\nContent-Type: application/json\r\n"


def test_bodies_by_length_by_chunks_and_none_on_one_kept_alive_connection(scripted: list[_Scripted]) -> None:
    replies = _exchange(
        scripted,
        [
            OK_HEAD + b'Content-Length: 7\r\n\r\n{"a":1}',
            OK_HEAD + b'Transfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{"b"\r\n3\r\n:2}\r\n0\r\nX-Trailer: t\r\n\r\n',
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\n" + OK_HEAD + b"Content-Length: 2\r\n\r\n{}",
        ],
        count=4,
    )
    assert [(r.status, r.body, r.will_close) for r in replies] == [  # type: ignore[attr-defined]
        (200, b'{"a":1}', False),
        (200, b'{"b":2}', False),
        (204, b"", False),
        (200, b"{}", False),
    ]
    assert len(scripted[0].requests) == 4  # all on one connection


def test_heads_with_bare_line_feeds_or_in_pieces_read_as_whole_crlf_ones(scripted: list[_Scripted]) -> None:
    """API servers end head lines with CRLF and send a head whole, which is parsed in one go; a bare LF (which
    RFC 9112 lets a reader accept) or a head that comes in pieces takes the line-by-line path, to the same result."""
    replies = _exchange(
        scripted,
        [
            b"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}",
            OK_HEAD + b"Content-Length: 3\n\r\n[1]",
            OK_HEAD + b"Connection: keep-alive\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}",
        ],
        count=3,
    )
    assert [(r.status, r.body, r.will_close) for r in replies] == [  # type: ignore[attr-defined]
        (200, b"{}", False),
        (200, b"[1]", False),
        (200, b"{}", True),
    ]
    left, right = socket.socketpair()
    with left, right:
        connection = Connection(host="h", port=80, tls=None, timeout=5)
        connection.sock = left
        answer = OK_HEAD + b"Content-Length: 2\r\n\r\n{}"
        right.sendall(answer[:20])
        sender = threading.Thread(target=right.sendall, args=(answer[20:],))
        sender.start()
        reply = connection.read_reply(method="GET")
        sender.join()
        assert (reply.status, reply.body) == (200, b"{}")


def test_the_server_closing_ends_the_body_and_the_connection(scripted: list[_Scripted]) -> None:
    (reply,) = _exchange(scripted, [b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it"])
    assert (reply.status, reply.body, reply.will_close) == (200, b"all of it", True)  # type: ignore[attr-defined]
    (reply,) = _exchange(scripted, [OK_HEAD + b"Connection: close\r\nContent-Length: 2\r\n\r\n{}"])
    assert reply.will_close  # type: ignore[attr-defined]


def test_a_request_is_written_once_with_host_length_and_body(scripted: list[_Scripted]) -> None:
    _exchange(scripted, [OK_HEAD + b"Content-Length: 2\r\n\r\n{}"], method="POST")
    request = scripted[0].requests[0]
    assert request.startswith(b"POST /x HTTP/1.1\r\nHost: h\r\n")
    assert b"\r\nContent-Length: 2\r\n" in request and request.endswith(b"\r\n\r\n{}")


def test_a_close_before_any_answer_is_server_closed(scripted: list[_Scripted]) -> None:
    with pytest.raises(ServerClosedError):
        _exchange(scripted, [None])


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"SMTP ready\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "bad status line"),
        (OK_HEAD + b"no colon here\r\n\r\n", "bad header line"),
        (OK_HEAD + b"Content-Length: ten\r\n\r\n", "bad Content-Length"),
        (OK_HEAD + b"Content-Length: -1\r\n\r\n", "bad Content-Length"),
        (OK_HEAD + b"Content-Length: 10\r\n\r\n{}", "closed after 2 of 10 bytes"),
        (OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n-5\r\n", "bad chunk size"),
        (OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}xx0\r\n\r\n", "does not end where its size says"),
        (OK_HEAD + b"X-Long: " + b"a" * 70_000 + b"\r\n\r\n", "too long"),
        (OK_HEAD + b"".join(b"X-%d: v\r\n" % i for i in range(101)) + b"\r\n", "more than 100 header lines"),
        (OK_HEAD, "closed within the answer's headers"),
        (b"HTTP/1.9 200 OK\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "switched protocols"),
        (b"HTTP/1.1 100 Continue\r\n\r\n" * 11, "more than 10 informational answers"),
        (OK_HEAD + b"Content-Length: 0_2\r\n\r\n{}", "bad Content-Length"),
        (OK_HEAD + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", "two different Content-Length"),
        (OK_HEAD + b"Content-Length: 99999999999999999\r\n\r\n{}", "larger than this client takes"),
        (OK_HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "unsupported Transfer-Encoding"),
        (OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n0x2\r\n{}\r\n0\r\n\r\n", "bad chunk size"),
        (OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-T: 1\r\n", "within the answer's trailer"),
    ],
    ids=lambda value: value if isinstance(value, str) else "answer",
)
def test_a_broken_answer_is_an_error_not_a_body(scripted: list[_Scripted], answer: bytes, message: str) -> None:
    # The server closes after its answer, so a reader that waited for more would see the end, not hang.
    with pytest.raises(HttpError, match=message):
        _exchange(scripted, [answer])


def test_a_length_beside_chunked_is_ignored_and_the_connection_not_kept(scripted: list[_Scripted]) -> None:
    (reply,) = _exchange(
        scripted, [OK_HEAD + b"Content-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"]
    )
    assert (reply.body, reply.will_close) == (b"{}", True)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("target", "headers"),
    [
        ("/x HTTP/1.1\r\nHost: h\r\n\r\nDELETE /api/v1/namespaces/victim", {}),  # a smuggled second request
        ("/a b", {}),
        ("/\u00fc", {}),
        ("/x", {"X-A": "1\r\nX-B: 2"}),
        ("/x", {"X-A\r\nX-B": "2"}),
        ("/x", {"X-A": "\u20ac"}),
    ],
)
def test_a_request_that_would_break_its_framing_is_refused(target: str, headers: dict[str, str]) -> None:
    with pytest.raises(InvalidRequestError, match="cannot send"):
        render_request(method="GET", target=target, host="h", headers=headers, body=None)


def test_render_request_and_host_header() -> None:
    assert render_request(method="DELETE", target="/a?b=c", host="h", headers={"X": "1"}, body=None) == (
        b"DELETE /a?b=c HTTP/1.1\r\nHost: h\r\nAccept-Encoding: identity\r\nX: 1\r\n\r\n"
    )
    assert b"Content-Length: 0\r\n" in render_request(method="PATCH", target="/", host="h", headers={}, body=None)
    assert host_header("127.0.0.1", 443, https=True) == "127.0.0.1"
    assert host_header("::1", 6443, https=True) == "[::1]:6443"
    assert host_header("example", 80, https=False) == "example"
