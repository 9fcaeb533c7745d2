"""Which profile a DaemonSet's plugin serves: its Node's label, else the default; refusals name node and label."""

from __future__ import annotations

import pytest

from fakedev.cli import main
from fakedev.errors import ProfileError
from fakedev.plugin.nodeprofile import ProfileChoice, ProfileSource, choose_profile

LABEL = "fakedev.io/profile"


@pytest.mark.parametrize(
    ("labels", "default", "expected"),
    [
        ({LABEL: "dgx-h100"}, "seed-example", ProfileChoice(profile="dgx-h100", source=ProfileSource.NODE_LABEL)),
        ({LABEL: "nic-only"}, None, ProfileChoice(profile="nic-only", source=ProfileSource.NODE_LABEL)),
        ({}, "seed-example", ProfileChoice(profile="seed-example", source=ProfileSource.DEFAULT)),
        ({LABEL: ""}, "seed-example", ProfileChoice(profile="seed-example", source=ProfileSource.DEFAULT)),
        (
            {"other": "dgx-h100"},
            "/profiles/mine.yaml",
            ProfileChoice(profile="/profiles/mine.yaml", source=ProfileSource.DEFAULT),
        ),
    ],
    ids=["label-wins", "label-without-default", "no-label-default", "empty-label-default", "default-may-be-a-path"],
)
def test_profile_comes_from_the_label_else_the_default(
    labels: dict[str, str], default: str | None, expected: ProfileChoice
) -> None:
    assert choose_profile(labels=labels, label=LABEL, default=default, node_name="n1") == expected


@pytest.mark.parametrize(
    ("labels", "default", "says"),
    [
        ({LABEL: "no-such-profile"}, "seed-example", f"node n1: label {LABEL}=no-such-profile: no built-in profile"),
        ({LABEL: "profile.yaml"}, "seed-example", "a node label can only name a built-in profile"),
        ({}, None, f"node n1: label {LABEL}: the node has no such label and no default was given"),
    ],
    ids=["unknown-name", "file-name-in-label", "neither"],
)
def test_refusals_name_node_label_and_value(labels: dict[str, str], default: str | None, says: str) -> None:
    with pytest.raises(ProfileError) as caught:
        choose_profile(labels=labels, label=LABEL, default=default, node_name="n1")
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["plugin", "--node-name", "n1", "--kubeconfig", "/k"], "give --profile, --profile-from-node-label, or both"),
        (
            ["plugin", "--node-name", "n1", "--no-api", "--profile-from-node-label", LABEL],
            "--profile-from-node-label reads the Node, which --no-api rules out",
        ),
        (
            ["plugin", "--node-name", "n1", "--profile", "seed-example", "--if-schema-absent", "idle"],
            "--if-schema-absent idle needs --schema",
        ),
    ],
    ids=["no-profile-at-all", "label-without-api", "idle-without-schema"],
)
def test_plugin_refuses_flag_combinations_by_name(argv: list[str], says: str) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert says in str(caught.value.code)
