"""The bench's gRPC floor: grpc-go's and grpcio's servers answer the health check, each timed from grpc.aio."""

from __future__ import annotations

from fakedev.cli.bench import grpcfloor
from harness.procs import run_dir


def test_both_servers_answer_and_their_round_trips_are_timed() -> None:
    said: list[str] = []
    with run_dir(purpose="grpc-floor") as run:
        figures = grpcfloor.measure(run=run, say=said.append, calls=50)
        sockets = sorted(p.name for p in run.path.glob("*.sock"))
    assert set(figures) == {"grpc_floor_go_ms", "grpc_floor_python_ms", "grpc_floor_gap_ms"}
    # A server that did not answer SERVING would have raised; a round trip is above zero and far below a second.
    assert 0 < figures["grpc_floor_go_ms"] < 1000 and 0 < figures["grpc_floor_python_ms"] < 1000
    assert figures["grpc_floor_gap_ms"] == round(figures["grpc_floor_python_ms"] - figures["grpc_floor_go_ms"], 3)
    assert sockets == ["grpc-floor-go.sock", "grpc-floor-python.sock"]
    assert any("go server" in line for line in said) and any("python server" in line for line in said)
