"""Chains vs trees: tokens per target call and tokens/s against the number of draft nodes
the target scores per call, from ``experiments/bench_tree.py``'s JSON.

    python analysis/tree_figure.py tree.json report/tree.png

Left: tokens per call (mean accepted + 1) against draft nodes per call; right: tokens/s,
with plain decoding as a dashed line. Chains are one line (k = nodes), dynamic trees
another (budget = nodes), fixed path-list trees and ``tree=auto`` single markers; auto's
predicted tokens per call is drawn hollow beside its measured one. Reads only the JSON
(``rows``: method, kind, nodes_per_call, tokens_per_call, tokens_per_s, and for auto
predicted_tokens_per_call), never the engine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

STYLE = {
    "chain": ("tab:blue", "o", "-"),
    "dynamic": ("tab:green", "s", "-"),
    "tree": ("tab:orange", "^", ""),
    "auto": ("tab:red", "*", ""),
}


def load(path: str | Path) -> tuple[pd.DataFrame, dict]:
    data = json.loads(Path(path).read_text())
    rows = pd.DataFrame(data["rows"])
    for c in ("nodes_per_call", "tokens_per_call", "tokens_per_s"):
        rows[c] = pd.to_numeric(rows[c])
    return rows, data.get("settings", {})


def figure(rows: pd.DataFrame, settings: dict) -> Figure:
    fig = Figure(figsize=(9.0, 4.0), dpi=100, layout="constrained")
    ax_call, ax_speed = fig.subplots(1, 2)
    for ax in (ax_call, ax_speed):
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("draft nodes scored per target call")
    for kind, (color, marker, ls) in STYLE.items():
        d = rows[rows["kind"] == kind].sort_values("nodes_per_call")
        if d.empty:
            continue
        for ax, y in ((ax_call, "tokens_per_call"), (ax_speed, "tokens_per_s")):
            ax.plot(
                d["nodes_per_call"],
                d[y],
                color=color,
                marker=marker,
                linestyle=ls or "none",
                markersize=10 if kind == "auto" else 6,
                label=kind,
            )
        if kind == "tree":
            for _, r in d.iterrows():
                ax_call.annotate(
                    str(r["method"]).split(" ")[0],
                    (r["nodes_per_call"], r["tokens_per_call"]),
                    fontsize=7,
                    xytext=(3, -9),
                    textcoords="offset points",
                )
        if kind == "auto" and "predicted_tokens_per_call" in d:
            ax_call.plot(
                d["nodes_per_call"],
                pd.to_numeric(d["predicted_tokens_per_call"]),
                color=color,
                marker=marker,
                markerfacecolor="none",
                linestyle="none",
                markersize=10,
                label="auto (predicted)",
            )
    ar = rows[rows["kind"] == "ar"]
    if not ar.empty:
        ax_speed.axhline(float(ar["tokens_per_s"].iloc[0]), color="gray", linestyle="--", label="AR")
    ax_call.set_ylabel("tokens per target call")
    ax_speed.set_ylabel("tokens/s")
    ax_call.legend(fontsize=8)
    ax_speed.legend(fontsize=8)
    what = ", ".join(f"{k}={settings[k]}" for k in ("drafter", "prompts", "max_new_tokens", "threads") if k in settings)
    fig.suptitle(f"Chains vs trees, T=0, batch 1 ({what})", fontsize=10)
    return fig


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit("usage: python analysis/tree_figure.py BENCH_JSON OUT_PNG")
    rows, settings = load(argv[0])
    out = Path(argv[1])
    out.parent.mkdir(parents=True, exist_ok=True)
    figure(rows, settings).savefig(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
