"""``fakedev run`` (``make run``): the main job on the embedded default — a local 1.37 control plane, emulated nodes
(a DGX H100 with NVIDIA's schema and ConnectX-7 NICs, a seed-example node) and the default drills, with a report.

Reports: ``<report dir>/report.html`` (a timeline per drill), ``junit.xml``, ``report.json``, ``drills.log``. The exit
status is non-zero when a drill fails.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fakedev.cli.drill import DEFAULT_SET, run_scenarios, shipped_scenario
from harness.drills.scenario import load_scenario


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "run",
        help="the default job: local control plane + emulated nodes + the default drills, with a report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--report-dir", type=Path, default=Path("build/run"), help="where reports go")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    scenarios = [load_scenario(shipped_scenario(name)) for name in DEFAULT_SET]
    _, code = run_scenarios(scenarios, kubeconfig=None, report_dir=args.report_dir, title="fakedev run")
    return code
