"""Broken profiles and scenarios of every kind a probe found crashing the readers: each is now one clean error that
names the file, the line and the rule (and the field, once the YAML itself was readable)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fakedev.errors import ProfileError
from fakedev.model.profile import parse_profile
from fakedev.profiles import load_profile
from harness.drills.scenario import load_scenario, parse_scenario
from harness.errors import ScenarioError

PROFILE = """\
name: t
numaNodes:
  - {id: 0, cpus: "0-7"}
pcieRoots:
  - {name: "pci0000:50", numaNode: 0}
gpus:
  - product: h100-sxm5-80gb
    root: "pci0000:50"
"""
"""Lines 1-8; every case below appends from line 9 on or replaces a line of it."""

SCENARIO = """\
name: x
expect: y
nodes:
  - {name: dgx, profile: seed-example}
workloads:
  first: |
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: c}
steps:
  - {apply: first}
"""
"""Lines 1-11; cases append steps from line 12 on or replace a line of it."""

BOMB_LEVELS = ['&a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'] + [
    f"&{cur} [" + ",".join([f"*{prev}"] * 9) + "]" for prev, cur in zip("abcdefgh", "bcdefghi", strict=True)
]
BOMB = "[\n    " + ",\n    ".join(BOMB_LEVELS) + "]"
"""Nine levels of nine aliases (9^9 strings expanded) as one flow list starting on its line, the anchor on the next."""
DEEP = "[" * 5000 + "]" * 5000
CPU_DEADLINE = 2.0
"""CPU seconds for one broken file (CPU time: the machine is shared); each takes milliseconds, the alias bomb took
30 s and 2.5 GB before."""


def _replace(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


# (profile text, line, what the message says after "bad.yaml:<line>")
PROFILES: dict[str, tuple[str | bytes, int, str]] = {
    "nan-number": (
        PROFILE + "nics:\n  - {product: connectx-7, root: 'pci0000:50', mtu: .nan}\n",
        10,
        ": nics[0].mtu: must be an integer, not a number that is not finite (.nan)",
    ),
    "inf-number": (PROFILE + "example:\n  count: .inf\n", 10, ": example.count: must be an integer, not a number"),
    "mapping-as-key": (PROFILE + "{a: 1}: b\n", 9, ":1: a mapping key must be a string, not a mapping"),
    "list-as-key": (PROFILE + "? [gpus]\n: b\n", 9, ":3: a mapping key must be a string, not a list"),
    "list-for-a-name": (_replace(PROFILE, "name: t", "name: [t]"), 1, ": name: must be a string, not a list"),
    "list-for-a-product": (
        _replace(PROFILE, "product: h100-sxm5-80gb", "product: [h100-sxm5-80gb]"),
        7,
        ": gpus[0].product: must be a string, not a list",
    ),
    "python-name-tag": (
        PROFILE + "description: !!python/name:os.system\n",
        9,
        ":14: tag !!python/name:os.system is not allowed",
    ),
    "unknown-tag": (PROFILE + "description: !fancy text\n", 9, ":14: tag !fancy is not allowed"),
    "deep-nesting": (PROFILE + f"description: {DEEP}\n", 9, ":"),
    "not-utf8": (PROFILE.encode() + b"description: caf\xe9\n", 9, ":17: not UTF-8: byte 0xe9 at offset"),
    "huge-cpu-range": (
        _replace(PROFILE, '"0-7"', "'0-400000000'"),
        3,
        ": numaNodes[0].cpus: cpulist '0-400000000' names CPU 400000000; CPU numbers stop at 8191",
    ),
    "cpu-in-two-numa-nodes": (
        _replace(PROFILE, '  - {id: 0, cpus: "0-7"}', '  - {id: 0, cpus: "0-7"}\n  - {id: 1, cpus: "7-9"}'),
        4,
        ": numaNodes[1].cpus: CPU 7 is already in NUMA node 0",
    ),
    "alias-bomb": (PROFILE + f"description: {BOMB}\n", 10, ":5: anchors (&a) are not supported"),
    "syntax-error": (PROFILE + "nics: [unclosed\n", 10, ":1: not valid YAML: "),
    "huge-integer": (PROFILE + "example:\n  count: 1" + "0" * 5000 + "\n", 10, ":10: a number written with more than"),
    "too-many-gpus": (
        PROFILE + "".join("  - {product: h100-sxm5-80gb, root: 'pci0000:50'}\n" for _ in range(40)),
        7,
        ": gpus: lists 41 GPUs; a profile may list at most 32",
    ),
    "too-many-mig-instances": (
        PROFILE + "    mig:\n      mode: static\n      instances:\n"
        "        - {profile: 1g.10gb, start: 0}\n" * 1 + "".join("        - {profile: 1g.10gb, start: 0}\n" * 8),
        12,
        ": gpus[0].mig.instances: lists 9 MIG instances (one GPU's limit); a profile may list at most 7",
    ),
    "vf-beyond-the-last-bus": (
        "name: t\npcieRoots: [{name: 'pci0000:fe'}]\nnics:\n"
        "  - {product: connectx-7, root: 'pci0000:fe', address: '0000:ff:1f.7', vfs: 1}\n",
        4,
        ": nics[0]: its VFs do not fit after 0000:ff:1f.7",
    ),
    "long-description": (PROFILE + f"description: {'x' * 2000}\n", 9, ": description: must be at most 1024 characters"),
    "deep-field-error-names-its-line": (
        _replace(PROFILE, '    root: "pci0000:50"\n', '    root: "pci0000:50"\n    mig:\n      mode: static\n')
        + "      instances:\n        - {profile: 3g.40gb, start: 0}\n        - {profile: 3g.40gb, start: 2}\n",
        13,
        ": gpus[0].mig.instances[1].start: 3g.40gb cannot start at memory slice 2",
    ),
}


@pytest.mark.parametrize("case", PROFILES, ids=list(PROFILES))
def test_broken_profile_is_one_error_naming_file_line_and_rule(case: str) -> None:
    text, line, rest = PROFILES[case]
    started = time.process_time()
    with pytest.raises(ProfileError) as caught:
        parse_profile(text, source="bad.yaml")
    assert time.process_time() - started < CPU_DEADLINE
    assert str(caught.value).startswith(f"bad.yaml:{line}{rest}"), str(caught.value)


# (scenario text, line, what the message says after "bad.yaml:<line>")
SCENARIOS: dict[str, tuple[str | bytes, int, str]] = {
    "timeout-nan": (
        SCENARIO + "  - {apply: first, timeout: .nan}\n",
        12,
        ": steps[1].timeout: must be a finite number of seconds > 0 and at most 86400 (24 h)",
    ),
    "timeout-negative": (SCENARIO + "  - {apply: first, timeout: -5}\n", 12, ": steps[1].timeout: must be a finite"),
    "timeout-zero": (SCENARIO + "  - {apply: first, timeout: 0}\n", 12, ": steps[1].timeout: must be a finite"),
    "timeout-beyond-a-day": (SCENARIO + "  - {apply: first, timeout: 86401}\n", 12, ": steps[1].timeout: must be"),
    "timeout-text": (SCENARIO + "  - {apply: first, timeout: soon}\n", 12, ": steps[1].timeout: must be a number"),
    "replicas-inf": (
        _replace(SCENARIO, "  first: |\n", "  first:\n    replicas: .inf\n    manifests: |\n  ")
        .replace("\n    apiVersion", "\n      apiVersion")
        .replace("\n    kind", "\n      kind")
        .replace("\n    metadata", "\n      metadata"),
        7,
        ": workloads.first.replicas: must be a whole number from 1 to 5000",
    ),
    "max-pods-inf": (
        _replace(SCENARIO, "profile: seed-example}", "profile: seed-example, maxPods: .inf}"),
        4,
        ": nodes[0].maxPods: must be a whole number from 1 to 10000",
    ),
    "wipe-grace-nan": (
        _replace(SCENARIO, "profile: seed-example}", "profile: seed-example, wipeGrace: .nan}"),
        4,
        ": nodes[0].wipeGrace: must be a finite number of seconds >= 0",
    ),
    "condition-count-nan": (
        SCENARIO + "  - {wait: {pods: p, count: .nan}}\n",
        12,
        ": steps[1].wait.count: must be a whole number from 0 to 1000000",
    ),
    "condition-equals-nan": (
        SCENARIO + "  - wait:\n      field: pods/p\n      path: spec\n      equals: [1, .nan]\n",
        15,
        ": steps[1].wait.equals: '.nan' is not a finite number",
    ),
    "condition-list-for-a-name": (
        SCENARIO + "  - {wait: {pod: [p], phase: Running}}\n",
        12,
        ": steps[1].wait.pod: must be a string",
    ),
    "mapping-as-key": (SCENARIO + "  - {{a: 1}: first}\n", 12, ":6: a mapping key must be a string, not a mapping"),
    "list-as-workload-name": (
        _replace(SCENARIO, "  first: |", "  [first]: |"),
        6,
        ":3: a mapping key must be a string, not a list",
    ),
    "list-for-a-node-name": (
        _replace(SCENARIO, "{name: dgx,", "{name: [dgx],"),
        4,
        ": nodes[0].name: must be a string",
    ),
    "python-name-tag": (SCENARIO + "  - {apply: !!python/name:os.system }\n", 12, ":13: tag !!python/name:os.system"),
    "unknown-tag": (SCENARIO + "  - {apply: !fancy first}\n", 12, ":13: tag !fancy is not allowed"),
    "deep-nesting": (SCENARIO + f"  - {{wait: {{pod: {DEEP}}}}}\n", 12, ":"),
    "not-utf8": (SCENARIO.encode() + b"  - {apply: first, name: caf\xe9}\n", 12, ":29: not UTF-8: byte 0xe9"),
    "alias-bomb": (SCENARIO + f"  - assert: {{pod: p, equals: {BOMB}}}\n", 13, ":5: anchors (&a) are not supported"),
    "alias-bomb-in-manifests": (
        _replace(SCENARIO, "    metadata: {name: c}\n", "    metadata: {name: c}\n    data: &a {x: y}\n"),
        6,
        ": workloads.first: is not valid YAML: line 4, column 7 of the manifests: anchors (&a) are not supported",
    ),
    "syntax-error": (SCENARIO + "  - {apply: [first\n", 13, ":1: not valid YAML: "),
    "huge-integer": (SCENARIO + "  - {apply: first, timeout: 1" + "0" * 5000 + "}\n", 12, ":29: a number written"),
    "duplicate-key": (SCENARIO + "  - {apply: first, apply: first}\n", 12, ":20: key 'apply' appears twice"),
}


@pytest.mark.parametrize("case", SCENARIOS, ids=list(SCENARIOS))
def test_broken_scenario_is_one_error_naming_file_line_and_rule(case: str) -> None:
    text, line, rest = SCENARIOS[case]
    started = time.process_time()
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, source="bad.yaml")
    assert time.process_time() - started < CPU_DEADLINE
    assert str(caught.value).startswith(f"bad.yaml:{line}{rest}"), str(caught.value)


def test_a_profile_file_too_large_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_bytes(PROFILE.encode() + b"#" * (8 << 20))
    with pytest.raises(ProfileError, match=rf"^{path}:1:1: \d+ bytes is more than the 1048576 a file may have"):
        load_profile(path)


def test_a_scenario_file_that_is_not_utf8_names_the_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: café\n".encode("latin-1"))
    with pytest.raises(ScenarioError, match=rf"^{path}:1:10: not UTF-8: byte 0xe9 at offset 9 "):
        load_scenario(path)
