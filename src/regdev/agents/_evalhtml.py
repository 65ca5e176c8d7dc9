"""``regdev report --html``: the eval figures as one self-contained HTML page.

Rules of this file:

* One page, nothing fetched: the styles are inline, the charts are inline SVG, there is no
  script, no image, font or style sheet from elsewhere (it opens the same offline, and it
  cannot fail in a browser's console).
* Every text from a results file (proposers, models, labels, pins) goes through
  :func:`html.escape`; numbers are formatted here.
* The figures are :func:`~regdev.agents._eval.eval_figures`' own: the page shows them, it
  computes nothing of its own.
"""

from __future__ import annotations

import datetime
import html
from typing import Any

from .._version import __version__
from ._eval import CATEGORIES

__all__ = ["eval_html"]

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th:first-child,td:first-child,.t{text-align:left}
th{background:#f3f3f3}.note{color:#555;font-size:.9em}
.side{display:flex;flex-wrap:wrap;gap:2em;align-items:flex-start}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _rate(value: float | None) -> str:
    return "&ndash;" if value is None else f"{100 * value:.1f}%"


def _shade(value: float | None) -> str:
    if value is None:
        return ""
    red, green = int(255 - 120 * value), int(135 + 120 * value)
    return f' style="background:rgb({red},{green},150)"'


def _bars(figures: dict[str, dict[str, Any]]) -> str:
    """pass^k per proposer as horizontal bars, with the Wilson interval as a whisker."""
    row, left, width = 26, 230, 420
    height = row * len(figures) + 40
    parts = [f'<svg role="img" aria-label="pass^k per proposer" width="{left + width + 70}" '
             f'height="{height}" xmlns="http://www.w3.org/2000/svg" class="chart" '
             'data-chart="pass-k">']
    for tick in range(0, 101, 25):
        x = left + width * tick / 100
        parts.append(f'<line x1="{x}" y1="10" x2="{x}" y2="{height - 25}" stroke="#ddd"/>'
                     f'<text x="{x}" y="{height - 8}" font-size="11" text-anchor="middle">'
                     f'{tick}%</text>')
    for index, (proposer, entry) in enumerate(figures.items()):
        y = 14 + index * row
        value = entry["pass^k"] or 0.0
        parts.append(f'<text x="{left - 8}" y="{y + 14}" font-size="12" text-anchor="end">'
                     f'{_e(proposer)}</text>'
                     f'<rect x="{left}" y="{y}" width="{width * value:.1f}" height="18" '
                     f'fill="#4a7bb7"><title>{_e(proposer)}: {_rate(value)}</title></rect>')
        interval = entry.get("pass^k_ci95")
        if interval:
            low, high = (left + width * interval[0], left + width * interval[1])
            parts.append(f'<line x1="{low:.1f}" y1="{y + 9}" x2="{high:.1f}" y2="{y + 9}" '
                         'stroke="#222" stroke-width="1.5"/>')
        parts.append(f'<text x="{left + width + 6}" y="{y + 14}" font-size="12">'
                     f'{_rate(value)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _category_bars(figures: dict[str, dict[str, Any]], names: list[str]) -> str:
    """pass^k per category, one group of bars per category, one bar per proposer."""
    colours = ("#4a7bb7", "#e08a3c", "#5aa469", "#c0504d", "#8064a2", "#4bacc6", "#9b9b9b")
    group, bar, top, plot = max(96, 30 + 14 * len(figures)), 12, 10, 200
    width = max(60 + group * len(names), 60 + 160 * min(len(figures), 5))
    parts = [f'<svg role="img" aria-label="pass^k per category" width="{width}" '
             f'height="{plot + 90}" xmlns="http://www.w3.org/2000/svg" class="chart" '
             'data-chart="categories">']
    for index, name in enumerate(names):
        x0 = 50 + index * group
        parts.append(f'<text x="{x0 + group / 2 - 10}" y="{top + plot + 16}" font-size="11" '
                     f'text-anchor="middle">{_e(name[:14])}</text>')
        for number, (proposer, entry) in enumerate(figures.items()):
            category = entry["categories"].get(name)
            value = (category or {}).get("pass^k") or 0.0
            height = plot * value
            parts.append(f'<rect x="{x0 + number * (bar + 2)}" y="{top + plot - height:.1f}" '
                         f'width="{bar}" height="{height:.1f}" '
                         f'fill="{colours[number % len(colours)]}"><title>{_e(proposer)} '
                         f'{_e(name)}: {_rate(value if category else None)}</title></rect>')
    for number, proposer in enumerate(figures):
        parts.append(f'<rect x="{50 + 160 * (number % 5)}" y="{plot + 40 + 16 * (number // 5)}"'
                     f' width="10" height="10" fill="{colours[number % len(colours)]}"/>'
                     f'<text x="{64 + 160 * (number % 5)}" y="{plot + 49 + 16 * (number // 5)}" '
                     f'font-size="11">{_e(proposer[:24])}</text>')
    parts.append(f'<line x1="48" y1="{top + plot}" x2="{width}" y2="{top + plot}" '
                 'stroke="#888"/></svg>')
    return "".join(parts)


def _points(value: float) -> str:
    return f"{100 * value:+.1f}".replace("-", "&minus;")


def _formats_section(figures: dict[str, dict[str, Any]]) -> str:
    """The format-sensitivity table (pass^k per variant, its difference from the reference
    in points with Newcombe's interval, the labels) beside a chart of the differences."""
    out = ["<h2>Format sensitivity</h2>",
           '<p class="note">The same tasks with the tools\' descriptions reworded and with '
           "the provider's strict mode on and off (regdev eval --format-sensitivity). The "
           "difference is the variant's pass^k minus the reference's (the first row of each "
           "model), in percentage points, with its 95% Newcombe interval.</p>",
           '<div class="side"><table><tr><th>proposer</th><th class="t">variant</th>'
           "<th>pass^k</th><th>95% CI</th><th>difference</th><th>95% CI</th>"
           '<th class="t">labels</th></tr>']
    for proposer, entry in figures.items():
        for index, (name, row) in enumerate(entry["formats"].items()):
            interval, change = row["pass^k_ci95"], row["difference_ci95"]
            reference = name == entry["variant"]
            labels = ", ".join(f"{_e(k)} {v}" for k, v in row["labels"].items()) or "none"
            out.append(
                "<tr>" + (f'<td rowspan="{len(entry["formats"])}">{_e(proposer)}</td>'
                          if index == 0 else "")
                + f'<td class="t">{_e(name)}</td>'
                f"<td{_shade(row['pass^k'])}>{_rate(row['pass^k'])}</td>"
                f"<td>{'&ndash;' if not interval else _rate(interval[0]) + '&ndash;' + _rate(interval[1])}</td>"  # noqa: E501
                + ("<td>reference</td><td>&ndash;</td>" if reference or change is None else
                   f"<td>{_points(row['difference'])}</td>"
                   f"<td>{_points(change[0])} to {_points(change[1])}</td>")
                + f'<td class="t">{labels}</td></tr>')
    out.append(f"</table>{_difference_chart(figures)}</div>")
    return "".join(out)


def _difference_chart(figures: dict[str, dict[str, Any]]) -> str:
    """Each variant's difference from its model's reference, a dot with its interval as a
    whisker, on a scale of -100..+100 points."""
    rows = [(proposer, name, row) for proposer, entry in figures.items()
            for name, row in entry["formats"].items() if name != entry["variant"]]
    row_height, left, width = 22, 260, 360
    height = row_height * len(rows) + 40
    middle = left + width / 2
    parts = [f'<svg role="img" aria-label="pass^k difference per variant" '
             f'width="{left + width + 20}" height="{height}" '
             'xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="formats">']
    for tick in range(-100, 101, 50):
        x = middle + width / 2 * tick / 100
        parts.append(f'<line x1="{x}" y1="8" x2="{x}" y2="{height - 25}" '
                     f'stroke="{"#888" if tick == 0 else "#ddd"}"/>'
                     f'<text x="{x}" y="{height - 8}" font-size="11" text-anchor="middle">'
                     f"{tick:+d}</text>")
    for index, (proposer, name, row) in enumerate(rows):
        y = 18 + index * row_height
        parts.append(f'<text x="{left - 8}" y="{y + 4}" font-size="11" text-anchor="end">'
                     f"{_e(proposer[:24])} {_e(name)}</text>")
        if row["difference"] is None or row["difference_ci95"] is None:
            continue
        low, high = (middle + width / 2 * v for v in row["difference_ci95"])
        x = middle + width / 2 * row["difference"]
        parts.append(f'<line x1="{low:.1f}" y1="{y}" x2="{high:.1f}" y2="{y}" stroke="#222" '
                     f'stroke-width="1.5"/><circle cx="{x:.1f}" cy="{y}" r="4.5" '
                     f'fill="#c0504d"><title>{_e(proposer)} {_e(name)}: '
                     f"{_points(row['difference'])} points</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


def eval_html(figures: dict[str, dict[str, Any]], source: str) -> str:
    """The page for ``figures`` (:func:`~regdev.agents._eval.eval_figures`, ranked), read
    from the results file named ``source``; several proposers side by side.

    Returns:
        The HTML document as text (UTF-8 when written).
    """
    ks = "/".join(str(k) for k in sorted({e["k"] for e in figures.values()})) or "0"
    names = [c for c in CATEGORIES if any(c in e["categories"] for e in figures.values())]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
           f'<title>regdev eval report</title><style>{_STYLE}</style></head><body>',
           f"<h1>regdev eval: pass^{_e(ks)} per model and category</h1>",
           f'<p class="note">From {_e(source)}; written {now} by regdev {_e(__version__)}. '
           f"pass^k is tau-bench's (the chance that k trials of a task all pass), k = {_e(ks)};"
           " intervals are 95% Wilson intervals over tasks. Every figure is computed from the "
           "results file alone (docs/models.md).</p>",
           "<h2>Ranking</h2>",
           '<div class="side"><table><tr><th>rank</th><th class="t">proposer</th>'
           "<th>pass^k</th><th>95% CI</th><th>pass^1</th><th>1st-try valid</th>"
           "<th>recovered</th><th>calls/task</th><th>tasks passed every trial</th></tr>"]
    for proposer, entry in figures.items():
        interval = entry["pass^k_ci95"]
        calls = entry["calls_per_task"]
        out.append(f"<tr><td>{entry['rank']}</td><td class=\"t\">{_e(proposer)}</td>"
                   f"<td{_shade(entry['pass^k'])}>{_rate(entry['pass^k'])}</td>"
                   f"<td>{'&ndash;' if not interval else _rate(interval[0]) + '&ndash;' + _rate(interval[1])}</td>"  # noqa: E501
                   f"<td>{_rate(entry['pass^1'])}</td><td>{_rate(entry['first_try_validity'])}</td>"
                   f"<td>{_rate(entry['recovery_rate'])}</td>"
                   f"<td>{'&ndash;' if calls is None else f'{calls:.2f}'}</td>"
                   f"<td>{entry['tasks_passed_every_trial']}/{entry['tasks']}</td></tr>")
    out.append(f"</table>{_bars(figures)}</div>")
    out.append('<h2>pass^k per category</h2><div class="side"><table><tr><th>proposer</th>'
               + "".join(f"<th>{_e(n)}</th>" for n in names) + "</tr>")
    for proposer, entry in figures.items():
        cells = []
        for name in names:
            category = entry["categories"].get(name)
            cells.append(f"<td{_shade(category['pass^k'])}>{_rate(category['pass^k'])} "
                         f"({category['tasks']})</td>" if category else "<td>&ndash;</td>")
        out.append(f"<tr><td>{_e(proposer)}</td>{''.join(cells)}</tr>")
    out.append(f"</table>{_category_bars(figures, names)}</div>")
    swept = {p: e for p, e in figures.items() if len(e["formats"]) > 1}
    if swept:
        out.append(_formats_section(swept))
    out.append('<h2>Failure labels</h2><table><tr><th>proposer</th><th class="t">labels '
               "(failed trials)</th></tr>")
    for proposer, entry in figures.items():
        labels = ", ".join(f"{_e(k)} {v}" for k, v in entry["labels"].items()) or "none"
        out.append(f'<tr><td>{_e(proposer)}</td><td class="t">{labels}</td></tr>')
    out.append('</table><h2>Runs</h2><table><tr><th>proposer</th><th class="t">pin</th>'
               "</tr>")
    for proposer, entry in figures.items():
        for run in entry["runs"] or [{}]:
            pin = ", ".join(f"{_e(k)} {_e(v)}" for k, v in run.items() if k != "proposer")
            out.append(f'<tr><td>{_e(proposer)}</td><td class="t">{pin or "not recorded"}'
                       "</td></tr>")
    out.append("</table></body></html>\n")
    return "\n".join(out)
