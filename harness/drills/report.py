"""Drill reports: a self-contained HTML page with an SVG timeline per drill, plus console/JUnit/JSON via reports."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Final

from harness.drills.requirements import Gate
from harness.drills.runner import DrillResult, NodeKind, Sample
from harness.reports import CaseResult, render_page

PAGE_CSS: Final = """tr.failed td, span.failed { color: #c62828; }
tr.passed td:nth-child(2), span.passed { color: #2e7d32; }
tr.skipped td { color: #9e9e9e; }
svg.timeline text { font-size: 11px; fill: #424242; }
section.drill { border-top: 2px solid #eeeeee; padding-top: 8px; }"""
LANE_HEIGHT: Final = 22
LABEL_WIDTH: Final = 190
PLOT_WIDTH: Final = 860
COLORS: Final[Mapping[str, str]] = {
    "passed": "#2e7d32",
    "failed": "#c62828",
    "skipped": "#9e9e9e",
    "blocked": "#6a1b9a",
    "Pending": "#bdbdbd",
    "Running": "#43a047",
    "Succeeded": "#1e88e5",
    "Failed": "#e53935",
    "Absent": "#ffffff",
    "Unhealthy": "#e53935",
    "Unknown": "#fb8c00",
    "Healthy": "#43a047",
    "?": "#eeeeee",
}
NODE_KIND_TEXT: Final[Mapping[NodeKind, str]] = {
    NodeKind.EMULATED: "emulated nodes",
    NodeKind.REAL: "the real node (this machine's kubelet and containerd)",
    NodeKind.CLUSTER: "the cluster's nodes running the fakedev chart",
}


def as_cases(results: Sequence[DrillResult]) -> list[CaseResult]:
    return [
        CaseResult(
            id=r.scenario.name,
            title=r.scenario.description or r.scenario.expect.splitlines()[0],
            outcome=r.outcome,
            message=r.message,
            seconds=r.seconds,
            clause=str(r.scenario.path),
        )
        for r in results
    ]


def _segments(samples: Sequence[Sample], key: str, *, kind: str) -> list[tuple[float, float, str]]:
    """Contiguous runs of one lane's state across the samples: (start, end, state)."""
    out: list[tuple[float, float, str]] = []
    for i, s in enumerate(samples):
        state = (s.pods if kind == "pod" else s.devices).get(key, "Absent" if kind == "pod" else "Healthy")
        end = samples[i + 1].t if i + 1 < len(samples) else s.t
        if out and out[-1][2] == state:
            out[-1] = (out[-1][0], end, state)
        else:
            out.append((s.t, end, state))
    return out


def render_timeline(result: DrillResult) -> str:
    """An SVG: lanes for steps, faults, every pod's phase and every device whose health changed."""
    total = max([result.seconds, *(s.end for s in result.steps), 1.0])
    scale = PLOT_WIDTH / total
    pods = sorted({p for s in result.samples for p in s.pods})
    devices = sorted({d for s in result.samples for d in s.devices})
    lanes = ["steps", "faults", *(f"pod {p}" for p in pods), *(f"device {d}" for d in devices)]
    height = LANE_HEIGHT * (len(lanes) + 1) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{LABEL_WIDTH + PLOT_WIDTH + 20}" '
        f'height="{height}" role="img" aria-label="timeline of {html.escape(result.scenario.name)}">'
    ]
    for i, lane in enumerate(lanes):
        y = i * LANE_HEIGHT + 4
        parts.append(f'<text x="4" y="{y + 15}" class="lane">{html.escape(lane[:28])}</text>')
        parts.append(
            f'<line x1="{LABEL_WIDTH}" x2="{LABEL_WIDTH + PLOT_WIDTH}" y1="{y + LANE_HEIGHT - 2}" '
            f'y2="{y + LANE_HEIGHT - 2}" stroke="#e0e0e0"/>'
        )

    def bar(lane: int, start: float, end: float, color: str, title: str) -> None:
        x, w = LABEL_WIDTH + start * scale, max((end - start) * scale, 2.0)
        y = lane * LANE_HEIGHT + 6
        parts.append(
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{LANE_HEIGHT - 8}" fill="{color}" '
            f'stroke="#616161" stroke-width="0.5"><title>{html.escape(title)}</title></rect>'
        )

    for s in result.steps:
        bar(0, s.start, s.end, COLORS[s.outcome], f"{s.index + 1}. {s.title} — {s.outcome} ({s.end - s.start:.1f}s)")
    for t, label in result.faults:
        x = LABEL_WIDTH + t * scale
        parts.append(
            f'<path class="fault" d="M{x:.1f},{LANE_HEIGHT + 6} l6,12 l-12,0 z" fill="#d84315">'
            f"<title>{html.escape(label)} at {t:.1f}s</title></path>"
        )
    for i, p in enumerate(pods):
        for start, end, state in _segments(result.samples, p, kind="pod"):
            bar(2 + i, start, end, COLORS.get(state, "#eeeeee"), f"{p}: {state} {start:.1f}–{end:.1f}s")
    for i, d in enumerate(devices):
        for start, end, state in _segments(result.samples, d, kind="device"):
            bar(2 + len(pods) + i, start, end, COLORS.get(state, "#eeeeee"), f"{d}: {state} {start:.1f}–{end:.1f}s")
    axis_y = len(lanes) * LANE_HEIGHT + 16
    for k in range(0, int(total) + 1, max(1, int(total) // 10 or 1)):
        x = LABEL_WIDTH + k * scale
        parts.append(f'<text x="{x:.1f}" y="{axis_y}" class="tick">{k}s</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def render_html(results: Sequence[DrillResult], *, title: str) -> str:
    passed = sum(r.outcome == "passed" for r in results)
    blocked = sum(r.outcome == "blocked" for r in results)
    # BLOCKED is neither pass nor fail: the cluster could not suffer the drill's faults (the reason is in "why").
    blocked_note = f" {blocked} blocked (this cluster cannot do their faults)." if blocked else ""
    rows = "\n".join(
        f'<tr class="{r.outcome}"><td><a href="#{html.escape(r.scenario.name)}">{html.escape(r.scenario.name)}</a></td>'
        f"<td>{r.outcome}</td><td>{r.seconds:.1f}s</td><td>{html.escape(r.message)}</td></tr>"
        for r in results
    )
    sections = []
    for r in results:
        steps = "\n".join(
            f'<tr class="{s.outcome}"><td>{s.index + 1}</td><td>{s.kind}</td><td>{html.escape(s.title)}</td>'
            f"<td>{s.outcome}</td><td>{s.start:.1f}s</td><td>{s.end - s.start:.1f}s</td>"
            f"<td>{html.escape(s.message)}</td></tr>"
            for s in r.steps
        )
        drivers = {n.name: f" ({', '.join(n.drivers)})" if n.drivers else "" for n in r.scenario.nodes}
        nodes = ", ".join(f"{k} → {v}{drivers.get(k, '')}" for k, v in r.nodes.items())
        if r.node_kind is not None:
            nodes = f"{NODE_KIND_TEXT[r.node_kind]}: {nodes}"
        sections.append(
            f'<section class="drill" id="{html.escape(r.scenario.name)}"><h2>{html.escape(r.scenario.name)} — '
            f'<span class="{r.outcome}">{r.outcome}</span></h2>'
            f'<p class="expect"><b>A correct cluster:</b> {html.escape(r.scenario.expect)}</p>'
            f'<p class="nodes">{html.escape(nodes)}</p>'
            f"{render_timeline(r)}"
            f'<table class="steps"><tr><th>#</th><th>kind</th><th>step</th><th>outcome</th><th>at</th>'
            f"<th>took</th><th>detail</th></tr>{steps}</table></section>"
        )
    body = (
        f'<p class="summary">{passed} of {len(results)} drills passed.{blocked_note}</p>\n'
        f'<table class="summary"><tr><th>drill</th><th>outcome</th><th>time</th><th>why</th></tr>{rows}</table>\n'
        f"{''.join(sections)}"
    )
    return render_page(title=title, css=PAGE_CSS, body=body)


def render_matrix(results: Sequence[DrillResult], *, gates: Mapping[str, Gate]) -> str:
    """Markdown: feature × maturity (as this cluster reports its first gate) × drill × result."""
    rows = ["| feature | maturity in 1.37 | feature gates | drill | result |", "|---|---|---|---|---|"]
    for r in results:
        s = r.scenario
        if not s.feature:
            continue
        known = [gates[g] for g in s.requires.feature_gates if g in gates]
        # A drill is as mature as the least mature gate it needs.
        order = {"alpha": 0, "beta": 1, "GA": 2}
        least = min((g.maturity for g in known), key=lambda m: order.get(m, -1), default="GA")
        maturity = s.maturity or least
        names = ", ".join(f"`{g}`" for g in s.requires.feature_gates) or "—"
        result = r.outcome if r.outcome == "passed" else f"{r.outcome}: {r.message}"
        rows.append(f"| {s.feature} | {maturity} | {names} | `{s.name}` | {result} |")
    return "\n".join(rows) + "\n"


def drills_json(results: Sequence[DrillResult]) -> list[dict[str, object]]:
    """Each drill as data: its steps with timings, the faults injected, and the sampled pod phases and health."""
    return [
        {
            "name": r.scenario.name,
            "feature": r.scenario.feature,
            "expect": r.scenario.expect,
            "outcome": r.outcome,
            "message": r.message,
            "seconds": r.seconds,
            "nodes": dict(r.nodes),
            "nodeKind": None if r.node_kind is None else r.node_kind.value,
            "outputs": dict(r.outputs),
            "steps": [
                {
                    "index": st.index,
                    "line": st.line,
                    "kind": st.kind,
                    "title": st.title,
                    "outcome": st.outcome,
                    "message": st.message,
                    "start": st.start,
                    "end": st.end,
                }
                for st in r.steps
            ],
            "faults": [{"t": t, "what": what} for t, what in r.faults],
            "samples": [{"t": x.t, "pods": dict(x.pods), "devices": dict(x.devices)} for x in r.samples],
        }
        for r in results
    ]
