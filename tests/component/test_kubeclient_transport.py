"""The kept-alive HTTP connections of kubeclient, against a small HTTP server on 127.0.0.1 that the test runs."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from kubeclient import ApiUnavailableError, Credentials, KubeClient


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless the server says otherwise
    close_after = False

    def do_GET(self) -> None:
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


@pytest.fixture
def server() -> Iterator[http.server.ThreadingHTTPServer]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    _Handler.close_after = False


def _client(srv: http.server.ThreadingHTTPServer) -> KubeClient:
    return KubeClient(Credentials(server=f"http://127.0.0.1:{srv.server_address[1]}"))


def test_requests_reuse_one_connection(server: http.server.ThreadingHTTPServer) -> None:
    client = _client(server)
    ports = {client.request("GET", f"/x/{i}", query={"n": str(i)})["port"] for i in range(5)}
    assert len(ports) == 1
    assert client.request("GET", "/a", query={"q": "1"})["path"] == "/a?q=1"
    client.close()


def test_a_connection_the_server_closed_is_replaced_before_it_is_used(server: http.server.ThreadingHTTPServer) -> None:
    _Handler.close_after = True
    client = _client(server)
    answers = [client.request("GET", f"/x/{i}") for i in range(3)]
    assert [a["path"] for a in answers] == ["/x/0", "/x/1", "/x/2"]
    assert len({a["port"] for a in answers}) == 3  # a fresh connection each time, none failed
    client.close()


def test_an_unreachable_server_is_an_api_unavailable_error(server: http.server.ThreadingHTTPServer) -> None:
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    client = KubeClient(Credentials(server=f"http://127.0.0.1:{port}"))
    with pytest.raises(ApiUnavailableError, match="API server unreachable"):
        client.request("GET", "/x")
