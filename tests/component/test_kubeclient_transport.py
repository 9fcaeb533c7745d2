"""The kept-alive HTTP connections of kubeclient, against a small HTTP server on 127.0.0.1 that the test runs."""

from __future__ import annotations

import gc
import http.server
import json
import socket
import threading
from collections.abc import Iterator

import pytest

from kubeclient import ApiUnavailableError, Credentials, KubeClient
from kubeclient.errors import InvalidRequestError
from kubeclient.resources import RESOURCE_CLAIMS


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless the server says otherwise
    close_after = False

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._answer()

    def _answer(self) -> None:
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        body = json.dumps({"path": self.path, "port": self.client_address[1]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if type(self).close_after:
            self.close_connection = True  # the server drops an idle keep-alive connection, as API servers do

    def log_message(self, format: str, *args: object) -> None:
        return


class _Server(http.server.ThreadingHTTPServer):
    """Counts the connections it has closed, so a test can wait until the client's idle one is gone."""

    closed = 0
    changed = threading.Condition()
    paths: list[str]

    def shutdown_request(self, request: object) -> None:
        super().shutdown_request(request)  # type: ignore[arg-type]
        with self.changed:
            type(self).closed += 1
            self.changed.notify_all()

    def wait_closed(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: type(self).closed >= count, timeout=10)


@pytest.fixture
def server() -> Iterator[_Server]:
    _Server.closed = 0
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.paths = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    _Handler.close_after = False


def _client(srv: _Server) -> KubeClient:
    return KubeClient(Credentials(server=f"http://127.0.0.1:{srv.server_address[1]}"))


def test_requests_reuse_one_connection(server: _Server) -> None:
    client = _client(server)
    ports = {client.request("GET", f"/x/{i}", query={"n": str(i)})["port"] for i in range(5)}
    assert len(ports) == 1
    assert client.request("GET", "/a", query={"q": "1"})["path"] == "/a?q=1"
    client.close()


def test_a_connection_the_server_closed_is_replaced_before_it_is_used(server: _Server) -> None:
    """POSTs are never sent twice, so only noticing the closed connection before reuse can make these work."""
    _Handler.close_after = True
    client = _client(server)
    answers = []
    for i in range(3):
        answers.append(client.request("POST", f"/x/{i}", body={"n": i}))
        server.wait_closed(i + 1)  # the server has dropped the connection the client keeps idle
    assert [a["path"] for a in answers] == ["/x/0", "/x/1", "/x/2"]
    assert len({a["port"] for a in answers}) == 3  # a fresh connection each time, none failed
    client.close()


def test_a_get_survives_the_server_closing_connections_at_any_moment(server: _Server) -> None:
    """Without waiting for the close, the client may reuse a connection the server is closing: a GET goes again."""
    _Handler.close_after = True
    client = _client(server)
    assert [client.request("GET", f"/y/{i}")["path"] for i in range(20)] == [f"/y/{i}" for i in range(20)]
    client.close()


def test_a_client_dropped_without_close_leaves_no_socket_open(server: _Server) -> None:
    """Idle connections are closed when the client is collected (an unclosed socket is a ResourceWarning, an error
    in this suite)."""
    client = _client(server)
    client.request("GET", "/z")
    del client
    gc.collect()
    server.wait_closed(1)


def test_an_unreachable_server_is_an_api_unavailable_error(server: _Server) -> None:
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    client = KubeClient(Credentials(server=f"http://127.0.0.1:{port}"))
    with pytest.raises(ApiUnavailableError, match="API server unreachable"):
        client.request("GET", "/x")


def test_gets_sent_ahead_are_answered_each_on_its_own_connection(server: _Server) -> None:
    """Two GETs in flight at once (sent, answers not read yet) get their own answers; afterwards both connections
    are kept for reuse."""
    client = _client(server)
    first = client.get_later(RESOURCE_CLAIMS, "a", namespace="ns")
    second = client.get_later(RESOURCE_CLAIMS, "b", namespace="ns")
    answers = [second.result(), first.result()]
    assert [a["path"] for a in answers] == [
        "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/b",
        "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/a",
    ]
    assert answers[0]["port"] != answers[1]["port"]
    reused = {client.request("GET", f"/r/{i}")["port"] for i in range(4)}
    assert reused <= {a["port"] for a in answers}
    client.close()


def test_an_abandoned_get_closes_its_connection_and_the_next_request_uses_another(server: _Server) -> None:
    client = _client(server)
    pending = client.get_later(RESOURCE_CLAIMS, "a", namespace="ns")
    pending.abandon()
    server.wait_closed(1)  # its answer, unread, can never be taken for the next request's
    assert client.request("GET", "/after")["path"] == "/after"
    client.close()


def test_a_get_sent_ahead_survives_the_server_closing_the_connection(server: _Server) -> None:
    _Handler.close_after = True
    client = _client(server)
    paths = []
    for i in range(20):
        paths.append(client.get_later(RESOURCE_CLAIMS, f"c{i}", namespace="ns").result()["path"])
    assert paths == [f"/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c{i}" for i in range(20)]
    client.close()


def test_a_name_that_would_smuggle_a_request_is_refused_before_anything_is_sent(server: _Server) -> None:
    client = _client(server)
    client.request("GET", "/warm")  # one kept-alive connection, so a second request would ride on it
    with pytest.raises(InvalidRequestError, match="only visible ASCII"):
        client.get(RESOURCE_CLAIMS, "x HTTP/1.1\r\nHost: h\r\n\r\nDELETE /api/v1/namespaces/victim", namespace="ns")
    assert client.request("GET", "/after")["path"] == "/after"
    client.close()
    server.wait_closed(1)
    assert server.paths == ["/warm", "/after"]


def test_a_connection_that_comes_back_to_a_closed_pool_is_closed(server: _Server) -> None:
    client = _client(server)
    pending = client.get_later(RESOURCE_CLAIMS, "a", namespace="ns")
    client.close()
    assert pending.result()["path"] == "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/a"
    assert client.idle_connections() == 0
    server.wait_closed(1)


def test_bytes_no_request_asked_for_are_never_read_as_the_next_answer() -> None:
    """A server that sends a second answer unasked: the connection holding it is dropped, not reused."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer(body: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    def serve() -> None:
        for extra in (answer(b'{"z": 9}'), b""):
            conn, _ = listener.accept()
            with conn, conn.makefile("rb") as reader:
                while reader.readline() not in (b"\r\n", b""):
                    pass
                conn.sendall(answer(b'{"n": %d}' % (1 if extra else 2)) + extra)
                reader.readline()  # until the client closes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = KubeClient(Credentials(server=f"http://127.0.0.1:{port}"))
    try:
        assert client.request("GET", "/one") == {"n": 1}
        assert client.request("GET", "/two") == {"n": 2}
    finally:
        client.close()
        thread.join(timeout=10)
        listener.close()
    assert not thread.is_alive()
