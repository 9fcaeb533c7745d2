"""The conformance report as a self-contained HTML page, in the style of the drill reports: a summary table, then
per check the contract clause it tests, what it needs of the driver, what was sent, what came back, the verdict and
why (pure: results in, text out)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Final

from harness.reports import OUTCOMES, CaseResult, render_page

VERDICT_MEANING: Final[Mapping[str, str]] = {
    "passed": "the driver does what the clause asks",
    "failed": "the driver broke the clause",
    "skipped": "the driver cannot give what the check needs",
    "error": "the harness or the environment broke",
    "blocked": "a prerequisite check did not pass",
}


PAGE_CSS: Final = """tr.failed td, span.failed, td.failed { color: #c62828; }
tr.error td, span.error, td.error { color: #e65100; }
tr.passed td:nth-child(4), span.passed, td.passed { color: #2e7d32; }
tr.skipped td, span.skipped { color: #757575; } td.blocked { color: #6a1b9a; }
pre { background: #fafafa; border: 1px solid #eeeeee; padding: 6px; font-size: 12px; white-space: pre-wrap; }
section.check { border-top: 2px solid #eeeeee; padding-top: 8px; }
h3 { font-size: 14px; margin: 8px 0 2px; }"""


def _pre(text: str, *, css: str) -> str:
    return f'<pre class="{css}">{html.escape(text)}</pre>' if text else f'<p class="{css} none">nothing</p>'


def render_conformance_html(results: Sequence[CaseResult], *, title: str, meta: Mapping[str, str]) -> str:
    counts = {o: sum(r.outcome == o for r in results) for o in OUTCOMES}
    summary = ", ".join(f"{n} {o}" for o, n in counts.items() if n)
    facts = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in meta.items())
    rows = "\n".join(
        f'<tr class="{r.outcome}"><td><a href="#{html.escape(r.id)}">{html.escape(r.id)}</a></td>'
        f"<td>{'required' if r.required else 'recommended'}</td><td>{html.escape(r.clause)}</td>"
        f"<td>{r.outcome}</td><td>{r.seconds:.1f}s</td><td>{html.escape(r.message)}</td></tr>"
        for r in results
    )
    sections = []
    for r in results:
        artifacts = "".join(
            f"<details><summary>{html.escape(k)}</summary>{_pre(v, css='artifact')}</details>"
            for k, v in r.details.items()
        )
        trace = (
            f"<details><summary>traceback</summary>{_pre(r.traceback, css='trace')}</details>" if r.traceback else ""
        )
        sections.append(
            f'<section class="check" id="{html.escape(r.id)}"><h2>{html.escape(r.id)} — '
            f'<span class="{r.outcome}">{r.outcome}</span></h2>'
            f'<p class="title">{html.escape(r.title)}</p>'
            f'<table class="facts"><tr><th>contract clause</th><td>{html.escape(r.clause)}</td></tr>'
            f"<tr><th>needs of the driver</th><td>{html.escape(', '.join(r.needs) or 'a registered driver')}</td></tr>"
            f'<tr><th>verdict</th><td class="{r.outcome}">{r.outcome} — {VERDICT_MEANING.get(r.outcome, "")}</td></tr>'
            f'<tr><th>why</th><td class="why">{html.escape(r.message or "—")}</td></tr></table>'
            f"<h3>sent</h3>{_pre(r.sent, css='sent')}<h3>received</h3>{_pre(r.received, css='received')}"
            f"{artifacts}{trace}</section>"
        )
    body = (
        f'<table class="meta">{facts}</table>\n<p class="summary">{summary}.</p>\n'
        '<table class="summary"><tr><th>check</th><th>level</th><th>clause</th><th>verdict</th><th>time</th>'
        f"<th>why</th></tr>\n{rows}</table>\n{''.join(sections)}"
    )
    return render_page(title=title, css=PAGE_CSS, body=body)
