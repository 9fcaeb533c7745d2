"""The direct YAML writer writes exactly what PyYAML writes for every spec document, or declines."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cdi.yamltext import render_block_yaml


def _pyyaml(document: Any) -> str:
    return yaml.dump(document, Dumper=yaml.CSafeDumper, sort_keys=False, explicit_start=True)


CLAIM_SPEC = {
    "cdiVersion": "0.5.0",
    "kind": "k8s.gpu.nvidia.com/claim",
    "devices": [
        {
            "name": "11111111-2222-3333-4444-555555555555-gpu-0",
            "containerEdits": {
                "env": ["NVIDIA_VISIBLE_DEVICES=GPU-56ab78ae-d3d6", "A_B=c:d,e@f+g"],
                "deviceNodes": [
                    {"path": "/dev/nvidia0", "hostPath": "/var/lib/x/dev/nvidia0", "type": "c", "major": 195},
                ],
                "mounts": [{"hostPath": "/h", "containerPath": "/c", "options": ["ro", "nosuid", "bind"]}],
                "hooks": [],
                "extra": {},
            },
        }
    ],
    "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]},
}


def test_a_claim_spec_is_written_as_pyyaml_writes_it() -> None:
    assert render_block_yaml(CLAIM_SPEC) == _pyyaml(CLAIM_SPEC)


def test_values_that_need_quoting_or_folding_are_left_to_pyyaml() -> None:
    for value in ["true", "null", "1.5", "0x1f", "", "a b", "-", "key: value", "a #b", "é", "...x", "123"]:
        assert render_block_yaml({"env": [value]}) is None, value
    assert render_block_yaml({"k": [["nested"]]}) is None
    assert render_block_yaml({"k": 1.5}) is None
    assert render_block_yaml({"k" * 128: "v"}) is None


_TEXT = st.text(alphabet="ab:=/-._,@+ #1é'\"tru", max_size=12)
_SCALAR = st.one_of(_TEXT, st.integers(-(2**40), 2**40), st.booleans())
_DOCUMENT = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_TEXT, _DOCUMENT, min_size=1, max_size=4))
def test_any_document_is_written_as_pyyaml_writes_it_or_declined(document: dict[str, Any]) -> None:
    text = render_block_yaml(document)
    assert text is None or text == _pyyaml(document)
