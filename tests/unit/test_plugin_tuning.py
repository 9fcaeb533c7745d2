"""The gRPC core settings a plugin process starts with."""

from __future__ import annotations

from fakedev.plugin.tuning import GRPC_EXPERIMENTS, SERVING_GRPC_EXPERIMENTS, grpc_environment


def test_the_older_listener_is_chosen_when_nothing_is_set() -> None:
    env = grpc_environment({"PATH": "/bin"})
    assert env == {"PATH": "/bin", GRPC_EXPERIMENTS: "-event_engine_listener"}
    assert SERVING_GRPC_EXPERIMENTS == "-event_engine_listener"


def test_a_users_choice_of_experiments_is_kept_even_when_empty() -> None:
    assert grpc_environment({GRPC_EXPERIMENTS: "event_engine_listener"})[GRPC_EXPERIMENTS] == "event_engine_listener"
    assert grpc_environment({GRPC_EXPERIMENTS: ""})[GRPC_EXPERIMENTS] == ""
