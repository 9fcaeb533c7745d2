"""A client on a rotating service-account token (a DaemonSet pod's bound token) sends the token the file holds now,
not the one it read at start — checked on the Authorization headers a real HTTP server on 127.0.0.1 receives."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

import kubeclient.client
from kubeclient import ApiError, Credentials, KubeClient


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.headers.get("Authorization", ""))
        body = json.dumps({"kind": "Status"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    class Handler(_Recorder):
        seen: ClassVar[list[str]] = []

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", Handler.seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_rotated_token_file_is_read_again(
    server: tuple[str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = server
    token = tmp_path / "token"
    token.write_text("first\n")
    client = KubeClient(Credentials(server=url, token_file=token))
    client.request("GET", "/version")
    token.write_text("second\n")
    client.request("GET", "/version")  # within the minute: the token read first is still used
    monkeypatch.setattr(kubeclient.client, "TOKEN_REREAD_SECONDS", 0.0)
    client.request("GET", "/version")

    assert seen == ["Bearer first", "Bearer first", "Bearer second"]


def test_a_token_file_that_disappears_keeps_the_last_token(
    server: tuple[str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = server
    token = tmp_path / "token"
    token.write_text("only")
    client = KubeClient(Credentials(server=url, token_file=token))
    client.request("GET", "/version")
    token.unlink()
    monkeypatch.setattr(kubeclient.client, "TOKEN_REREAD_SECONDS", 0.0)
    client.request("GET", "/version")

    assert seen == ["Bearer only", "Bearer only"]


def test_a_missing_token_file_at_start_is_a_clear_error(server: tuple[str, list[str]], tmp_path: Path) -> None:
    url, seen = server
    client = KubeClient(Credentials(server=url, token_file=tmp_path / "absent"))

    with pytest.raises(ApiError, match=r"cannot read the service-account token .*absent"):
        client.request("GET", "/version")
    assert seen == []
