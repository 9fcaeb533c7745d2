"""The real node's runc, as containerd calls it: a shell wrapper around the cached runc 1.5 (pure: paths in, text out).

runc looks each ``linux.netDevices`` interface up by name in the namespace *it* runs in, and fakedev's NICs live in
the node's own namespace (``fakedev-<run>-host``), not the host's. So a container whose spec moves interfaces is
created with runc inside that namespace (``nsenter --net``); every other call — and host-network containers, which
must inherit the host's namespace — runs runc where containerd is. The wrapper also keeps a copy of such a spec in
the records directory: the CNI ``DEL`` step (:mod:`harness.realnode.cni_netdevices`) reads it to hand the
interfaces back before the pod's namespace is removed.
"""

from __future__ import annotations

import shlex
from pathlib import Path


def render_runc_wrapper(*, runc: Path, records: Path, nic_netns: Path | None) -> str:
    q = shlex.quote
    enter = f"nsenter --net={q(str(nic_netns))} -- " if nic_netns is not None else ""
    return f"""#!/bin/sh
# fakedev: runc for the real node's containerd (see harness/realnode/runc_wrapper.py).
bundle=
prev=
for arg in "$@"; do
  case "$prev" in --bundle|-b) bundle=$arg ;; esac
  case "$arg" in --bundle=*) bundle=${{arg#--bundle=}} ;; esac
  prev=$arg
done
if [ -n "$bundle" ] && grep -q '"netDevices"' "$bundle/config.json" 2>/dev/null; then
  record={q(str(records))}/$(basename "$bundle").json
  cp "$bundle/config.json" "$record.tmp" && mv "$record.tmp" "$record"
  exec {enter}{q(str(runc))} "$@"
fi
exec {q(str(runc))} "$@"
"""
