"""fakedev-netdevices as a CNI plugin: the protocol answers, and which recorded specs belong to a pod."""

from __future__ import annotations

import io
import json
from pathlib import Path

from harness.realnode.cni_netdevices import SANDBOX_ANNOTATION, records_for, render_launcher, run


def _run(command: str, stdin: str = "", **env: str) -> tuple[int, str]:
    out = io.StringIO()
    code = run(env={"CNI_COMMAND": command, **env}, stdin=stdin, out=out)
    return code, out.getvalue()


def test_version_lists_the_spec_versions() -> None:
    code, out = _run("VERSION")
    assert code == 0
    assert "1.0.0" in json.loads(out)["supportedVersions"]


def test_add_passes_the_previous_result_through() -> None:
    previous = {"cniVersion": "1.0.0", "ips": [{"address": "10.200.0.2/24"}]}
    code, out = _run("ADD", json.dumps({"cniVersion": "1.0.0", "name": "fakedev", "prevResult": previous}))
    assert code == 0 and json.loads(out) == previous


def test_bad_input_is_a_cni_error() -> None:
    code, out = _run("ADD", "{not json")
    assert code == 1 and json.loads(out)["code"] == 6
    code, out = _run("FROB", "{}")
    assert code == 1 and "FROB" in json.loads(out)["msg"]


def test_del_without_records_or_namespace_is_a_no_op(tmp_path: Path) -> None:
    assert _run("DEL", json.dumps({"records": str(tmp_path)}))[0] == 0
    assert _run("DEL", "{}", CNI_NETNS="/nonexistent")[0] == 0
    assert _run("CHECK", "{}") == (0, "")


def test_records_belong_to_the_sandbox_that_annotates_them(tmp_path: Path) -> None:
    mine = {"annotations": {SANDBOX_ANNOTATION: "sb1"}, "linux": {"netDevices": {"eth9": {"name": "net1"}}}}
    other = {"annotations": {SANDBOX_ANNOTATION: "sb2"}, "linux": {"netDevices": {"eth8": {}}}}
    by_path = {"linux": {"namespaces": [{"type": "network", "path": "/x/netns/cni-1"}], "netDevices": {"eth7": {}}}}
    for name, spec in (("a", mine), ("b", other), ("c", by_path)):
        (tmp_path / f"{name}.json").write_text(json.dumps(spec))
    (tmp_path / "broken.json").write_text("{")
    assert [p.name for p in records_for(records=tmp_path, netns="/x/netns/cni-9", sandbox="sb1")] == ["a.json"]
    assert [p.name for p in records_for(records=tmp_path, netns="/x/netns/cni-1", sandbox="")] == ["c.json"]


def test_the_launcher_runs_the_module_from_the_project() -> None:
    text = render_launcher(python="/v/bin/python", sys_path="/src")
    assert text.splitlines()[0] == "#!/v/bin/python"
    assert "sys.path.insert(0, '/src')" in text and "cni_netdevices import main" in text
