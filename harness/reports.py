"""Test-result reports shared by the conformance suite and the drills: console table, JUnit XML, JSON, and the
frame of their HTML pages."""

from __future__ import annotations

import html
import json
import platform
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

OUTCOMES: Final = ("passed", "failed", "error", "skipped", "blocked")


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    id: str
    title: str
    outcome: str
    message: str = ""
    seconds: float = 0.0
    required: bool = True
    clause: str = ""
    details: Mapping[str, str] = field(default_factory=dict)
    """Artifacts for failures (logs, specs, checkpoints), keyed by what they are."""
    needs: tuple[str, ...] = ()
    """What the case needs of the system under test (conformance: of the driver), in words."""
    sent: str = ""
    """What the case sent (claims, gRPC calls, pods), one line each."""
    received: str = ""
    """What came back, one line each."""
    traceback: str = ""
    """The traceback of an unexpected exception: in JSON and JUnit always, on the console only when verbose."""


def compute_exit_code(results: Sequence[CaseResult]) -> int:
    """0 only when no required case failed, errored or was blocked."""
    bad = [r for r in results if r.required and r.outcome in ("failed", "error", "blocked")]
    return 1 if bad else 0


def render_console(results: Sequence[CaseResult], *, title: str, verbose: bool = False) -> str:
    """A table, one row per case and its verdict's sentence below it; tracebacks only when ``verbose``."""
    width = max([len(r.id) for r in results] + [10])
    lines = [title, "-" * len(title)]
    for r in results:
        tag = r.outcome.upper() if r.required or r.outcome == "passed" else f"{r.outcome.upper()} (optional)"
        lines.append(f"{r.id:<{width}}  {tag:<18} {r.seconds:6.1f}s  {r.title}")
        if r.outcome not in ("passed",) and r.message:
            lines += [f"{'':<{width}}    {line}" for line in r.message.splitlines()[:6]]
        if verbose and r.traceback:
            lines += [f"{'':<{width}}    | {line}" for line in r.traceback.rstrip().splitlines()]
    counts = {o: sum(r.outcome == o for r in results) for o in OUTCOMES}
    lines.append(", ".join(f"{n} {o}" for o, n in counts.items() if n))
    return "\n".join(lines)


def render_junit(results: Sequence[CaseResult], *, suite: str) -> str:
    root = ET.Element(
        "testsuite",
        name=suite,
        tests=str(len(results)),
        failures=str(sum(r.outcome in ("failed", "blocked") for r in results)),
        errors=str(sum(r.outcome == "error" for r in results)),
        skipped=str(sum(r.outcome == "skipped" for r in results)),
        time=f"{sum(r.seconds for r in results):.3f}",
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"),
        hostname=platform.node(),
    )
    for r in results:
        case = ET.SubElement(root, "testcase", classname=suite, name=r.id, time=f"{r.seconds:.3f}")
        ET.SubElement(case, "properties").extend(
            [
                ET.Element("property", name="clause", value=r.clause),
                ET.Element("property", name="required", value=str(r.required).lower()),
                ET.Element("property", name="title", value=r.title),
            ]
        )
        if r.outcome in ("failed", "blocked"):
            ET.SubElement(
                case, "failure", message=r.message.splitlines()[0] if r.message else r.outcome
            ).text = r.message
        elif r.outcome == "error":
            ET.SubElement(case, "error", message=r.message.splitlines()[0] if r.message else "error").text = r.message
        elif r.outcome == "skipped":
            ET.SubElement(case, "skipped", message=r.message)
        if r.traceback and r.outcome in ("failed", "error"):
            case[-1].text = f"{r.message}\n\n{r.traceback}"
        out = {**({"sent": r.sent} if r.sent else {}), **({"received": r.received} if r.received else {}), **r.details}
        if out:
            ET.SubElement(case, "system-out").text = "\n\n".join(f"== {k} ==\n{v}" for k, v in out.items())
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def render_json(results: Sequence[CaseResult], *, meta: Mapping[str, Any]) -> str:
    return (
        json.dumps(
            {**meta, "results": [asdict(r) for r in results], "exitCode": compute_exit_code(results)},
            indent=2,
            default=str,
        )
        + "\n"
    )


PAGE_CSS: Final = """body { font-family: sans-serif; margin: 24px; color: #212121; }
table { border-collapse: collapse; margin: 8px 0 16px; }
td, th { border: 1px solid #e0e0e0; padding: 4px 8px; font-size: 13px; text-align: left; vertical-align: top; }
tr.blocked td, span.blocked { color: #6a1b9a; }"""
"""What the drill and conformance pages share; each adds its own rules after these."""


def render_page(*, title: str, css: str, body: str) -> str:
    """A self-contained HTML page (no scripts, no outside resources) with ``title`` as its heading."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
{PAGE_CSS}
{css}
</style></head><body>
<h1>{html.escape(title)}</h1>
{body}
</body></html>
"""
