"""Peers benchmark: ratio to HF ``generate`` per method and batch size, with its 95%
interval, from ``experiments/peers.py``'s results.json (its ``tables.overall`` rows).

    python analysis/peers_figure.py outputs/peers/mt_bench/results.json [peers.png]

Reads only the JSON, never the engine; saved as peers.png next to it by default.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from matplotlib.figure import Figure


def figure(rows: list[dict], title: str = "") -> Figure:
    rows = [r for r in rows if r.get("speedup_vs_hf") is not None and not math.isnan(r["speedup_vs_hf"])]
    labels = [f"{r['method']}" + (f" (B={r['batch']})" if r["batch"] != 1 else "") for r in rows]
    vals = [r["speedup_vs_hf"] for r in rows]
    lo = [max(0.0, v - r["ci"][0]) for v, r in zip(vals, rows)]
    hi = [max(0.0, r["ci"][1] - v) for v, r in zip(vals, rows)]
    colors = ["tab:gray" if r["method"].startswith("hf") else "tab:blue" for r in rows]
    fig = Figure(figsize=(max(6.0, 0.55 * len(rows) + 2), 4.2), dpi=100, layout="constrained")
    ax = fig.subplots()
    ax.bar(range(len(rows)), vals, yerr=[lo, hi], capsize=3, color=colors)
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.set_xticks(range(len(rows)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("tokens/s ÷ HF generate\n(geometric mean, 95% CI)")
    ax.grid(True, axis="y", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=9)
    return fig


def draw(results: str | Path, out: str | Path | None = None) -> Path:
    results = Path(results)
    data = json.loads(results.read_text())
    a = data.get("args", {})
    title = f"{a.get('data', '')}, T={a.get('temperature', '')}, {a.get('dtype', '')}, {a.get('threads', '')} threads"
    out = Path(out) if out else results.with_name("peers.png")
    figure(data["tables"]["overall"], title).savefig(out)
    return out


if __name__ == "__main__":
    print(draw(*sys.argv[1:3]))
