"""``fakedev cluster build|up|down|env|serve``: the local Kubernetes 1.37 control plane."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from harness.cluster import build as cluster_build
from harness.cluster import daemon
from harness.docker.clusterspec import KUBECONFIG_PATH
from harness.image.recipe import CLUSTER_API_PORT


def _stderr(message: str) -> None:
    print(f"[cluster] {message}", file=sys.stderr, flush=True)


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "cluster",
        help="build, start and stop the local Kubernetes 1.37 control plane",
        description="The local control plane: etcd, kube-apiserver, kube-scheduler and kube-controller-manager "
        "built from the Go module proxy, running on 127.0.0.1 with every 1.37 DRA feature gate enabled.",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    b = verbs.add_parser(
        "build",
        help="build the binaries (cached per version)",
        description=f"Build kube-apiserver, kube-scheduler, kube-controller-manager {cluster_build.KUBERNETES_VERSION} "
        f"and etcd {cluster_build.ETCD_VERSION} from the Go module proxy through the wrapper modules shipped with "
        "fakedev. A warm cache returns at once; a missing, partial or corrupt cache entry is rebuilt. A cold "
        "build downloads about 1 GB of modules and compiles for several minutes, printing progress.",
    )
    b.add_argument(
        "--cache", type=Path, default=None, help="cache root (default: $FAKEDEV_CACHE, else ~/.cache/fakedev)"
    )
    b.add_argument("--force", action="store_true", help="rebuild even when the cache is intact")
    b.add_argument(
        "--with-node",
        action="store_true",
        help=f"also build a real node: kubelet {cluster_build.KUBERNETES_VERSION}, containerd "
        f"{cluster_build.CONTAINERD_VERSION} (containerd, containerd-shim-runc-v2, ctr), runc "
        f"{cluster_build.RUNC_VERSION} (cgo: needs gcc), the CNI plugins {cluster_build.CNI_PLUGINS_VERSION} (bridge, "
        "host-local, loopback, portmap) and the pause program",
    )
    b.add_argument(
        "--with-helm",
        action="store_true",
        help=f"also build helm {cluster_build.HELM_VERSION} (installs fakedev's chart deploy/helm/fakedev)",
    )
    b.set_defaults(handler=_build)

    state_help = "where running clusters are recorded (default: ~/.local/state/fakedev/clusters)"
    u = verbs.add_parser(
        "up",
        help="start a control plane in the background",
        description="Start a control plane that keeps running after this command returns. "
        "Prints the export line for KUBECONFIG.",
    )
    u.add_argument("--name", default="default", help="cluster name (default: default)")
    u.add_argument("--state-dir", type=Path, default=None, help=state_help)
    u.set_defaults(handler=_up)

    d = verbs.add_parser("down", help="stop a background control plane")
    d.add_argument("--name", default="default")
    d.add_argument("--state-dir", type=Path, default=None, help=state_help)
    d.set_defaults(handler=_down)

    e = verbs.add_parser(
        "env",
        help="print `export KUBECONFIG=...` for a running control plane",
        description='Use as: eval "$(fakedev cluster env)"',
    )
    e.add_argument("--name", default="default")
    e.add_argument("--state-dir", type=Path, default=None, help=state_help)
    e.set_defaults(handler=_env)

    s = verbs.add_parser(
        "serve",
        help="a control plane and emulated nodes in the foreground (the command of the cluster container)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=SERVE_DESCRIPTION,
    )
    s.add_argument("--profile", required=True, help="node profile of every emulated node (`fakedev profile list`)")
    s.add_argument("--nodes", type=int, default=1, help="how many emulated nodes (default 1)")
    s.add_argument(
        "--kubeconfig-out",
        type=Path,
        default=Path(KUBECONFIG_PATH),
        help=f"where to write the kubeconfig for the container's host (default {KUBECONFIG_PATH})",
    )
    s.add_argument(
        "--bind-address",
        default="0.0.0.0",
        help="kube-apiserver's listening address (default 0.0.0.0: every address of the container)",
    )
    s.add_argument(
        "--port",
        type=int,
        default=CLUSTER_API_PORT,
        help=f"kube-apiserver's port (default {CLUSTER_API_PORT})",
    )
    s.add_argument("--base", type=Path, default=None, help="where run and node directories live (default: temp dir)")
    s.set_defaults(handler=_serve)


SERVE_DESCRIPTION = """\
Run a whole fake cluster in the foreground, as the fakedev cluster image does (`fakedev image build --with-cluster`):
etcd, kube-apiserver, kube-scheduler and kube-controller-manager from the binary cache ($FAKEDEV_CACHE; the image
carries them), kube-apiserver listening on --bind-address:--port with a certificate valid for 127.0.0.1 and
localhost, and --nodes emulated nodes of --profile named fakedev-node-0 … with their fake plugins, running pods'
containers under runc (as `fakedev node run`).

It writes a kubeconfig for the host to --kubeconfig-out (certificates inline, server https://127.0.0.1:PORT: rewrite
the port to the one the container's port is published on) and, once every Node is Ready and has its ResourceSlices
published, prints one line on stdout:

  fakedev: cluster ready: N node(s) with slices; kubeconfig at PATH

In a container it first remounts the container's own (read-only) cgroups writable, so runc can run the pods: the
container needs CAP_SYS_ADMIN and CAP_NET_ADMIN, seccomp=unconfined (runc's keyring) and, where AppArmor is on,
apparmor=unconfined — never --privileged (docs/testcontainers.md).

SIGTERM (docker stop) or SIGINT drains the nodes' pods, removes the nodes and stops the control plane. A failing
component ends the command with an error.
"""


def _build(args: argparse.Namespace) -> int:
    started = time.monotonic()
    groups = (
        cluster_build.DEFAULT_GROUPS
        + (cluster_build.NODE_GROUPS if args.with_node else ())
        + (cluster_build.TOOL_GROUPS if args.with_helm else ())
    )
    bins = cluster_build.build_binaries(cache_root=args.cache, progress=_stderr, force=args.force, groups=groups)
    for name, path in sorted(bins.paths.items()):
        print(f"{name}\t{path}")
    _stderr(f"done in {time.monotonic() - started:.1f}s")
    return 0


def _serve(args: argparse.Namespace) -> int:
    # (Checked here, not with fakedev.cli.args' types: importing that module costs `cluster build` 0.1 s.)
    if args.nodes < 1 or not 0 < args.port < 65536:
        raise SystemExit("fakedev cluster serve: --nodes must be at least 1 and --port within 1–65535")
    from fakedev.cli.cluster_serve import ServeOptions, serve

    return serve(
        ServeOptions(
            profile=args.profile,
            nodes=args.nodes,
            port=args.port,
            bind_address=args.bind_address,
            kubeconfig_out=args.kubeconfig_out,
            base=args.base,
        )
    )


def _up(args: argparse.Namespace) -> int:
    pointer = daemon.up(state_dir=args.state_dir or daemon.default_state_dir(), name=args.name)
    _stderr(f"cluster {args.name!r} is up at {pointer['server']}")
    print(daemon.render_env(pointer), end="")
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = daemon.down(state_dir=args.state_dir or daemon.default_state_dir(), name=args.name)
    _stderr(f"cluster {args.name!r} stopped" if stopped else f"no cluster {args.name!r} was running")
    return 0


def _env(args: argparse.Namespace) -> int:
    pointer = daemon.read_pointer(state_dir=args.state_dir or daemon.default_state_dir(), name=args.name)
    print(daemon.render_env(pointer), end="")
    return 0
