"""SVG charts of the benchmark results (pure: figures in, SVG text out; no plotting library needed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Final

WIDTH: Final = 720
HEIGHT: Final = 360
MARGIN_LEFT: Final = 70
MARGIN_BOTTOM: Final = 70
MARGIN_TOP: Final = 40
COLOURS: Final = ("#3b6fb6", "#e08a2c", "#4d9a5b", "#b8483f", "#7b5ea7")


@dataclass(frozen=True, kw_only=True)
class Bar:
    group: str
    series: str
    value: float


@dataclass(frozen=True, kw_only=True)
class Target:
    """A horizontal line: the figure a bar should stay under."""

    value: float
    label: str


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    step = 10.0 ** math.floor(math.log10(value))
    for factor in (1, 2, 2.5, 5, 10):
        if value <= step * factor:
            return step * factor
    return value


def _frame(title: str, unit: str, top: float) -> list[str]:
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>',
        f'<text x="16" y="{MARGIN_TOP + plot_h / 2}" transform="rotate(-90 16 {MARGIN_TOP + plot_h / 2})" '
        f'text-anchor="middle">{escape(unit)}</text>',
    ]
    for i in range(5):
        v = top * i / 4
        y = MARGIN_TOP + plot_h - plot_h * i / 4
        out.append(f'<line x1="{MARGIN_LEFT}" x2="{WIDTH - 10}" y1="{y}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{MARGIN_LEFT - 6}" y="{y + 4}" text-anchor="end">{v:g}</text>')
    return out


def bar_chart(*, title: str, unit: str, bars: Sequence[Bar], targets: Sequence[Target] = ()) -> str:
    """Grouped bars (one colour per series) with optional target lines."""
    groups = list(dict.fromkeys(b.group for b in bars))
    series = list(dict.fromkeys(b.series for b in bars))
    top = _nice_max(max([b.value for b in bars] + [t.value for t in targets] + [0.0]) * 1.05)
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    plot_w = WIDTH - MARGIN_LEFT - 10
    out = _frame(title, unit, top)
    slot = plot_w / max(1, len(groups))
    bar_w = slot * 0.8 / max(1, len(series))
    values = {(b.group, b.series): b.value for b in bars}
    for gi, group in enumerate(groups):
        x0 = MARGIN_LEFT + gi * slot + slot * 0.1
        for si, name in enumerate(series):
            if (group, name) not in values:
                continue
            v = values[(group, name)]
            h = plot_h * v / top
            x = x0 + si * bar_w
            y = MARGIN_TOP + plot_h - h
            out.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w * 0.92:.1f}" height="{h:.1f}" '
                f'fill="{COLOURS[si % len(COLOURS)]}"><title>{escape(group)} {escape(name)}: {v:g}</title></rect>'
            )
            out.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle" font-size="10">{v:g}</text>'
            )
        out.append(
            f'<text x="{x0 + slot * 0.4:.1f}" y="{HEIGHT - MARGIN_BOTTOM + 16}" text-anchor="middle">'
            f"{escape(group)}</text>"
        )
    for t in targets:
        y = MARGIN_TOP + plot_h - plot_h * t.value / top
        out.append(
            f'<line x1="{MARGIN_LEFT}" x2="{WIDTH - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#b8483f" '
            'stroke-dasharray="6 4"/>'
        )
        out.append(f'<text x="{WIDTH - 12}" y="{y - 4:.1f}" text-anchor="end" fill="#b8483f">{escape(t.label)}</text>')
    for si, name in enumerate(series):
        x = MARGIN_LEFT + si * 160
        y = HEIGHT - 22
        out.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{COLOURS[si % len(COLOURS)]}"/>')
        out.append(f'<text x="{x + 18}" y="{y}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def dot_chart(*, title: str, unit: str, runs: dict[str, Sequence[float]]) -> str:
    """One column of dots per setting (every run), with its median as a bar."""
    top = _nice_max(max([v for vs in runs.values() for v in vs] + [0.0]) * 1.05)
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    plot_w = WIDTH - MARGIN_LEFT - 10
    out = _frame(title, unit, top)
    slot = plot_w / max(1, len(runs))
    for i, (label, values) in enumerate(runs.items()):
        cx = MARGIN_LEFT + slot * (i + 0.5)
        colour = COLOURS[i % len(COLOURS)]
        for j, v in enumerate(values):
            y = MARGIN_TOP + plot_h - plot_h * v / top
            out.append(
                f'<circle cx="{cx + (j - len(values) / 2) * 8:.1f}" cy="{y:.1f}" r="5" fill="{colour}" '
                f'fill-opacity="0.7"><title>{escape(label)} run {j + 1}: {v:g}</title></circle>'
            )
        if values:
            med = sorted(values)[len(values) // 2]
            y = MARGIN_TOP + plot_h - plot_h * med / top
            out.append(f'<line x1="{cx - 40:.1f}" x2="{cx + 40:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{colour}"/>')
        out.append(f'<text x="{cx:.1f}" y="{HEIGHT - MARGIN_BOTTOM + 16}" text-anchor="middle">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
