"""``fakedev-netdevices``: the last plugin of the real node's CNI chain; it hands NICs back before a pod's namespace
goes.

containerd tears a pod down in this order: stop its containers, run CNI ``DEL``, remove the network namespace — and
only afterwards does the kubelet call NodeUnprepareResources. runc moved each claimed interface into the pod at
``create`` and never moves it back, so without this step a veth dies with the namespace and the driver's unprepare
finds no NIC. The runc wrapper (:mod:`harness.realnode.runc_wrapper`) keeps a copy of every container spec that has
``linux.netDevices`` in the records directory; on ``DEL`` this plugin finds the records whose spec joins the pod's
namespace (``CNI_NETNS``) and returns their interfaces under their host names to the namespace runc took them from.

``ADD`` passes the previous plugin's result through; ``CHECK``, ``STATUS`` and ``GC`` have nothing to do.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, TextIO

from harness.runtime.netdevices import return_net_devices, same_netns, spec_net_devices, spec_netns

TYPE: Final = "fakedev-netdevices"
SUPPORTED: Final = ("0.3.1", "0.4.0", "1.0.0", "1.1.0")
ERRORS_LOG: Final = "release-errors.log"


SANDBOX_ANNOTATION: Final = "io.kubernetes.cri.sandbox-id"
"""containerd's annotation on every container of a pod; CNI_CONTAINERID is the same sandbox id."""


def records_for(*, records: Path, netns: str, sandbox: str) -> list[Path]:
    """The recorded container specs of the pod whose sandbox is ``sandbox`` (containerd's id, CNI_CONTAINERID) or
    that join the namespace at ``netns``. A pod container's spec names the namespace as ``/proc/<pause pid>/ns/net``,
    which is gone by the time of DEL, so the annotation is what matches in practice."""
    found = []
    for path in sorted(records.glob("*.json")):
        try:
            spec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if sandbox and (spec.get("annotations") or {}).get(SANDBOX_ANNOTATION) == sandbox:
            found.append(path)
            continue
        joined = spec_netns(spec)
        if joined is not None and (joined == netns or same_netns(joined, netns)):
            found.append(path)
    return found


def release(*, records: Path, netns: str, sandbox: str, source: str | None) -> list[str]:
    """Return every recorded interface of the pod in ``netns`` to ``source`` (the namespace runc ran in; ``None``:
    the host's); the records go once handled."""
    returned: list[str] = []
    for path in records_for(records=records, netns=netns, sandbox=sandbox):
        moved = spec_net_devices(json.loads(path.read_text()))
        if moved and Path(netns).exists():
            returned += return_net_devices(sandbox=netns, moved=moved, target=source)
        path.unlink(missing_ok=True)
    return returned


def _error(out: TextIO, *, code: int, message: str) -> int:
    out.write(json.dumps({"cniVersion": "1.0.0", "code": code, "msg": message}) + "\n")
    return 1


def run(*, env: Mapping[str, str], stdin: str, out: TextIO) -> int:
    """One CNI invocation (the command in ``CNI_COMMAND``, the network config on stdin)."""
    command = env.get("CNI_COMMAND", "")
    if command == "VERSION":
        out.write(json.dumps({"cniVersion": "1.0.0", "supportedVersions": list(SUPPORTED)}) + "\n")
        return 0
    try:
        config: dict[str, Any] = json.loads(stdin) if stdin.strip() else {}
    except ValueError as exc:
        return _error(out, code=6, message=f"{TYPE}: network config is not JSON: {exc}")
    if command == "ADD":
        result = config.get("prevResult") or {"cniVersion": config.get("cniVersion", "1.0.0")}
        out.write(json.dumps(result) + "\n")
        return 0
    if command == "DEL":
        records = config.get("records")
        netns = env.get("CNI_NETNS", "")
        if records and netns:
            try:
                release(
                    records=Path(records),
                    netns=netns,
                    sandbox=env.get("CNI_CONTAINERID", ""),
                    source=config.get("sourceNetns") or None,
                )
            except Exception as exc:
                # The interface is lost with the namespace; say why where the node's tests and users look.
                with (Path(records) / ERRORS_LOG).open("a") as log:
                    log.write(f"{env.get('CNI_CONTAINERID', '?')} {netns}: {exc!r}\n")
        return 0
    if command in ("CHECK", "STATUS", "GC"):
        return 0
    return _error(out, code=4, message=f"{TYPE}: unknown CNI_COMMAND {command!r}")


def main() -> None:
    sys.exit(run(env=os.environ, stdin=sys.stdin.read(), out=sys.stdout))


def render_launcher(*, python: str, sys_path: str) -> str:
    """The plugin's executable: containerd runs CNI plugins by file name from its ``bin_dirs``."""
    return (
        f"#!{python}\n"
        "import sys\n"
        f"sys.path.insert(0, {sys_path!r})\n"
        "from harness.realnode.cni_netdevices import main\n"
        "main()\n"
    )
