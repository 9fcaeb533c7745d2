"""``fakedev drill``: run fault drills (YAML scenarios) against the local control plane or any cluster."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import shutil
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

from fakedev.cli.args import positive_count
from fakedev.cli.drill_cluster_env import DEFAULT_CHART_NAMESPACE, ChartDrillEnvironment
from fakedev.cli.drill_env import FakedevDrillEnvironment
from fakedev.cli.drill_real_env import RealNodeDrillEnvironment
from fakedev.logs import TextFormatter
from harness.cluster.config import ClusterSettings
from harness.cluster.local import LocalCluster, local_cluster
from harness.drills.real_node import real_node_refusals
from harness.drills.report import as_cases, drills_json, render_html, render_matrix
from harness.drills.requirements import cluster_gates
from harness.drills.runner import DrillEnvironment, DrillResult, run_drills
from harness.drills.scenario import Scenario, load_scenario
from harness.realnode.node import settings_for_cluster
from harness.reports import compute_exit_code, render_console, render_json, render_junit
from kubeclient import KubeClient

DESCRIPTION = """\
Run drills: each YAML scenario starts emulated nodes with fake drivers, applies workloads, injects faults (driver
killed or hung, node reboot, unhealthy device, DeviceTaintRule, prepare failures, API server or etcd outage, NIC
hot-unplug, exhaustion) and asserts what a correct cluster does. Reports: console table, JUnit XML, JSON and an HTML
page with a timeline per drill, in --report-dir. Without files, the shipped default set runs.

With --kubeconfig K --in-cluster the drills run on the cluster's own nodes, those running the fakedev chart's
DaemonSet (deploy/helm/fakedev; its pods are labelled app.kubernetes.io/name=fakedev in --chart-namespace):
device faults (device-health Unhealthy/Healthy, prepare-fault failTimes/delaySeconds, clear-faults, nic-unplug and
nic-replug) become DeviceFault objects (devicefaults.fakedev.io) that the node's plugin applies; driver-kill and
driver-restart delete the DaemonSet's pod on the node (the DaemonSet starts another); DeviceTaintRules are plain
API calls as always. A drill whose faults need what a real cluster does not hand out (node-reboot, driver-hang,
driver-socket-remove, apiserver/etcd outages) is reported BLOCKED with the reason, neither passed nor failed (the
exit code is non-zero while any drill is blocked: it was not verified).

With --real-node a drill's one node is this machine's real kubelet and containerd (as `fakedev node run --real`
starts them; root, and the node binaries of `fakedev cluster build --with-node`): the scenario's profile plugged in,
its fake plugins registered with the real kubelet, pods on the pod network, images built from this repository (the
virt-launcher stand-in) imported under the names the workloads use, so the YAML is unchanged. One real node per
host: only single-node drills run there, and only if no step needs an emulated node's hands (node-reboot, driver
and device faults, NIC unplug) or an emulated Node's settings (maxPods, memory, driver release pins, a wipeGrace
other than the kubelet's 30 s); anything else is refused before any node starts, naming the step. Name the
drills (files or shipped names). The report says which kind of node each drill ran on; the node's logs are kept in
REPORT_DIR/real-node/<drill>/. E.g. sudo fakedev drill kubevirt-pci --real-node

The upstream set reproduces known bugs of the Kubernetes components; those drills fail intermittently by nature, so
run them with --repeat (e.g. fakedev drill --set upstream --repeat 12) and read how many runs failed.
"""

DEFAULT_REAL_NODE_ADDRESS: Final = "127.0.0.1"
REAL_NODE_LOCK_SECONDS: Final = 600.0
"""How long --real-node waits for another real node on this host to stop (one per host; it says it is waiting)."""

DEFAULT_SET = (
    "extended-resource-migration",
    "gpu-exhaustion",
    "mig-exhaustion",
    "unhealthy-gpu-eviction",
    "taint-rule-maintenance",
    "driver-loss",
    "driver-hang",
    "node-reboot",
    "nic-hot-unplug",
    "apiserver-outage",
    "kubevirt-pci",
)


def shipped_scenario(name: str) -> Path:
    """A shipped drill by name (``matrix/<name>`` for the feature matrix family)."""
    return Path(str(resources.files("fakedev") / "scenarios" / f"{name}.yaml"))


def _folder_set(folder: str) -> tuple[str, ...]:
    """Every drill in ``scenarios/<folder>/``, by name (``<folder>/<stem>``)."""
    path = Path(str(resources.files("fakedev") / "scenarios" / folder))
    return tuple(f"{folder}/{p.stem}" for p in sorted(path.glob("*.yaml")))


def matrix_set() -> tuple[str, ...]:
    """The feature-matrix drills: every file in ``scenarios/matrix/``, by name."""
    return _folder_set("matrix")


def drill_set(name: str) -> tuple[str, ...]:
    """A shipped set by name. ``all`` is every drill expected to pass; ``upstream`` holds reproducers of known bugs."""
    sets = {
        "default": DEFAULT_SET,
        "matrix": matrix_set(),
        "all": DEFAULT_SET + matrix_set(),
        "upstream": _folder_set("upstream"),
    }
    return sets[name]


def repeated(scenarios: Sequence[Scenario], *, times: int) -> list[Scenario]:
    """Each scenario ``times`` times in a row; the runs are named ``<name>-1`` … so the reports tell them apart."""
    if times == 1:
        return list(scenarios)
    return [dataclasses.replace(s, name=f"{s.name}-{i}") for s in scenarios for i in range(1, times + 1)]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "drill",
        help="run fault drills and report what the cluster did",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "files",
        nargs="*",
        type=Path,
        help="scenario files or shipped drill names (see --list; default: the shipped set)",
    )
    p.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="run against this cluster (drills marked localOnly are skipped); default: a private local control plane",
    )
    p.add_argument(
        "--in-cluster",
        action="store_true",
        help="with --kubeconfig: drill on the cluster's nodes running the fakedev chart instead of starting emulated "
        "nodes; faults become DeviceFault objects and plugin-pod deletions, the rest is BLOCKED (see above)",
    )
    p.add_argument(
        "--chart-namespace",
        default=DEFAULT_CHART_NAMESPACE,
        metavar="NS",
        help=f"with --in-cluster: the namespace the chart is installed in (default {DEFAULT_CHART_NAMESPACE})",
    )
    p.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="N",
        help="with --in-cluster: use node N (repeat for drills with several nodes, in the scenario's order); "
        "default: every node with a ready plugin pod, by name",
    )
    p.add_argument(
        "--real-node",
        action="store_true",
        help="run each named single-node drill on this machine's real kubelet and containerd instead of an "
        "emulated node (see above; drills that need an emulated node are refused up front)",
    )
    p.add_argument(
        "--address",
        default=DEFAULT_REAL_NODE_ADDRESS,
        metavar="IP",
        help=f"with --real-node: the node's loopback address, also its name (default {DEFAULT_REAL_NODE_ADDRESS})",
    )
    p.add_argument(
        "--ca",
        type=Path,
        default=None,
        metavar="DIR",
        help="with --real-node and --kubeconfig: the cluster CA (ca.crt, ca.key) signing the kubelet's "
        "certificates (default: the pki/ next to the kubeconfig, as `fakedev cluster up` leaves it)",
    )
    p.add_argument(
        "--report-dir",
        type=Path,
        default=Path("build/drills"),
        help="where report.html, junit.xml, report.json and matrix.md go (default: build/drills)",
    )
    p.add_argument(
        "--set",
        choices=("default", "matrix", "all", "upstream"),
        default="default",
        help="which shipped drills run without files: the fault drills (default), the 1.37 feature matrix, both "
        "(all), or the reproducers of known upstream bugs (upstream; not part of all)",
    )
    p.add_argument(
        "--repeat",
        type=positive_count,
        default=1,
        metavar="N",
        help="run each drill N times in a row on the same cluster (for intermittent failures; default 1)",
    )
    p.add_argument(
        "--component-verbosity",
        type=positive_count,
        default=1,
        metavar="V",
        help="--v of the private control plane's components (default 1; 6 shows the scheduler's DRA decisions); "
        "their logs are kept in REPORT_DIR/components/",
    )
    p.add_argument("--list", action="store_true", help="list the shipped drills and exit")
    p.set_defaults(handler=_run)


def _say(message: str) -> None:
    print(f"[drill] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _cluster(
    kubeconfig: Path | None, *, logs_to: Path, verbosity: int
) -> Iterator[tuple[KubeClient, Path, LocalCluster | None]]:
    if kubeconfig is not None:
        yield KubeClient.from_kubeconfig(kubeconfig), kubeconfig, None
        return
    _say("starting the local Kubernetes 1.37 control plane")
    with local_cluster(settings=ClusterSettings(verbosity=verbosity), progress=_say) as cluster:
        try:
            yield cluster.client, cluster.kubeconfig, cluster
        finally:
            # The private control plane's run directory goes with it; its logs are what explains a failed drill.
            shutil.copytree(cluster.layout.logs, logs_to, dirs_exist_ok=True)


def _log_to(path: Path) -> None:
    """Component logs go to a file next to the reports; the console shows progress and the summary."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(TextFormatter())
    for name in ("harness", "fakedev"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel("INFO")
        logger.propagate = False


@dataclass(frozen=True, kw_only=True)
class RealNodeTarget:
    """Where ``--real-node`` drills: the node's address, and the cluster CA (None: the private control plane's, or
    the ``pki/`` next to the kubeconfig)."""

    address: str = DEFAULT_REAL_NODE_ADDRESS
    ca: Path | None = None


@dataclass(frozen=True, kw_only=True)
class InClusterTarget:
    """Where ``--in-cluster`` drills: the chart's namespace and, optionally, which nodes."""

    chart_namespace: str = DEFAULT_CHART_NAMESPACE
    nodes: tuple[str, ...] = ()


def run_scenarios(
    scenarios: Sequence[Scenario],
    *,
    kubeconfig: Path | None,
    report_dir: Path,
    title: str,
    verbosity: int = 1,
    in_cluster: InClusterTarget | None = None,
    real_node: RealNodeTarget | None = None,
) -> tuple[list[DrillResult], int]:
    _log_to(report_dir / "drills.log")
    with _cluster(kubeconfig, logs_to=report_dir / "components", verbosity=verbosity) as (client, path, cluster):

        def environment() -> DrillEnvironment:
            if real_node is not None:
                ca = real_node.ca or (cluster.layout.pki if cluster is not None else path.parent / "pki")
                settings = settings_for_cluster(
                    client=client, ca_dir=ca, address=real_node.address, lock_timeout=REAL_NODE_LOCK_SECONDS
                )
                return RealNodeDrillEnvironment(
                    client=client,
                    kubeconfig=path,
                    settings=settings,
                    logs_to=report_dir / "real-node",
                    progress=_say,
                )
            if in_cluster is None:
                return FakedevDrillEnvironment(client=client, kubeconfig=path)
            return ChartDrillEnvironment(
                client=client, chart_namespace=in_cluster.chart_namespace, node_names=in_cluster.nodes
            )

        results = run_drills(scenarios, client=client, cluster=cluster, progress=_say, env_factory=environment)
        gates = cluster_gates(client) if any(s.feature for s in scenarios) else {}
    cases = as_cases(results)
    report_dir.mkdir(parents=True, exist_ok=True)
    if gates:
        (report_dir / "matrix.md").write_text(render_matrix(results, gates=gates))
    (report_dir / "report.html").write_text(render_html(results, title=title))
    (report_dir / "junit.xml").write_text(render_junit(cases, suite="fakedev-drills"))
    (report_dir / "report.json").write_text(render_json(cases, meta={"title": title, "drills": drills_json(results)}))
    print(render_console(cases, title=title))
    extra = ", matrix.md" if gates else ""
    extra += ", components/ (the control plane's logs)" if cluster is not None else ""
    extra += ", real-node/ (the real node's logs per drill)" if real_node is not None else ""
    print(f"HTML report: {report_dir / 'report.html'} (also junit.xml, report.json{extra}, drills.log)")
    return results, compute_exit_code(cases)


def scenario_file(arg: Path) -> Path:
    """A scenario file as given, or a shipped drill by name (``kubevirt-pci``, ``matrix/<name>``)."""
    if arg.suffix in (".yaml", ".yml") or arg.exists():
        return arg
    shipped = shipped_scenario(str(arg))
    if not shipped.is_file():
        raise SystemExit(f"fakedev drill: {arg} is neither a scenario file nor a shipped drill (see --list)")
    return shipped


def real_node_refused(scenarios: Sequence[Scenario]) -> str | None:
    """Why some of ``scenarios`` cannot run on the real node (every drill and step named), None when all can."""
    lines = [f"  {s.name}: {reason}" for s in scenarios for reason in real_node_refusals(s)]
    if not lines:
        return None
    return "fakedev drill --real-node: refused before starting anything:\n" + "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    if args.list:
        for name in drill_set("all") + drill_set("upstream"):
            s = load_scenario(shipped_scenario(name))
            print(f"{name:<40} {s.description}")
        return 0
    if args.kubeconfig is not None and args.component_verbosity != 1:
        raise SystemExit("fakedev drill: --component-verbosity is for the private control plane, not --kubeconfig")
    if args.in_cluster and args.kubeconfig is None:
        raise SystemExit("fakedev drill: --in-cluster needs --kubeconfig (the cluster the chart is installed in)")
    if not args.in_cluster and (args.node or args.chart_namespace != DEFAULT_CHART_NAMESPACE):
        raise SystemExit("fakedev drill: --node and --chart-namespace go with --in-cluster")
    if args.real_node and args.in_cluster:
        raise SystemExit("fakedev drill: --real-node and --in-cluster are two different kinds of node; pick one")
    if not args.real_node and (args.address != DEFAULT_REAL_NODE_ADDRESS or args.ca is not None):
        raise SystemExit("fakedev drill: --address and --ca go with --real-node")
    if args.real_node and not args.files:
        raise SystemExit(
            "fakedev drill --real-node: name the drills to run (files or shipped names, e.g. kubevirt-pci); the "
            "shipped sets hold multi-node drills and faults only emulated nodes can suffer"
        )
    files = [scenario_file(f) for f in args.files] or [shipped_scenario(n) for n in drill_set(args.set)]
    target = InClusterTarget(chart_namespace=args.chart_namespace, nodes=tuple(args.node)) if args.in_cluster else None
    scenarios = repeated([load_scenario(f) for f in files], times=args.repeat)
    real = RealNodeTarget(address=args.address, ca=args.ca) if args.real_node else None
    if real is not None:
        refused = real_node_refused(scenarios)
        if refused is not None:
            raise SystemExit(refused)
    _, code = run_scenarios(
        scenarios,
        kubeconfig=args.kubeconfig,
        report_dir=args.report_dir,
        title="fakedev drills" + (f" on the real node {real.address}" if real is not None else ""),
        verbosity=args.component_verbosity,
        in_cluster=target,
        real_node=real,
    )
    return code
