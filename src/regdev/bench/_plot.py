"""``regdev bench --plot FILE.png``: ns per call by case and contender, regdev highlighted.

matplotlib (``pip install 'regdev[bench]'``) is imported only here, when a chart is asked for,
with the Agg backend (no display needed).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from ._bench import SECTIONS, BenchResult, noise_line

__all__ = ["PLOT_HINT", "plot"]

PLOT_HINT = ("--plot needs matplotlib: pip install 'regdev[bench]' (in a clone of regdev: "
             ".venv/bin/pip install -e '.[bench]')")


def plot(result: BenchResult, path: str | Path) -> None:
    """Draw the result as a PNG chart at ``path``: one panel per section, a line per case,
    ns per call on a log scale, a marker per contender; regdev's baseline (the section's
    first row) drawn large in red, the others small; the noise line under the chart.

    Raises:
        ImportError: matplotlib is not installed (:data:`PLOT_HINT` says how to install it).
        OSError: the file cannot be written.
    """
    import matplotlib  # noqa: PLC0415 - optional, and only for a chart

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    panels = []
    for section, heading in SECTIONS.items():
        members = [r for r in result.rows if r.get("section") == section and r["ns"]]
        if members:
            titles = [c.title for c in result.cases
                      if any(c.title in r["ns"] for r in members)]
            panels.append((heading, members, titles))
    height = sum(1.2 + 0.28 * len(titles) for _, _, titles in panels) + 1.2
    figure, axes = plt.subplots(len(panels) or 1, 1, figsize=(11, max(height, 3)),
                                squeeze=False,
                                height_ratios=[len(t) + 3 for _, _, t in panels] or [1])
    colours = plt.get_cmap("tab10")
    for axis, (heading, members, titles) in zip(axes[:, 0], panels, strict=False):
        where = {title: n for n, title in enumerate(reversed(titles))}
        for n, record in enumerate(members):
            first = n == 0
            points = [(ns, where[t]) for t, ns in record["ns"].items() if t in where]
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            axis.scatter(xs, ys, s=90 if first else 22, marker="D" if first else "o",
                         color="red" if first else colours((n - 1) % 10),
                         zorder=3 if first else 2, label=record["key"],
                         edgecolors="black" if first else "none")
        axis.set_yticks(range(len(titles)), list(reversed(titles)), fontsize=7)
        axis.set_xscale("log")
        axis.set_xlabel(f"ns per call ({result.clock}, median of {result.rounds} rounds)")
        axis.set_title(heading, fontsize=9)
        axis.grid(True, axis="x", which="both", alpha=0.3)
        axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    noise = noise_line(result, result.control_name)
    figure.text(0.01, 0.005, "\n".join(textwrap.wrap(noise, 170)), fontsize=6, va="bottom")
    figure.tight_layout(rect=(0, 0.05, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
