"""The router against the best fixed routing in hindsight, per prompt, from a peers run's
measurements (``experiments/oracle.py`` is its command line).

A router decides each round which proposal to send; a fixed routing sends the same kind of
proposal by a rule that does not learn (always copy, always the 0.5B, the match-length rule).
The oracle is, for each prompt, the fastest of the fixed routings measured on it (chosen after
the fact, so no deployable method reaches it in general). The table gives each prompt's tokens/s
(batch 1, decode only where the prefill was recorded, median over repeats: sampled repeats are
other samples), the oracle, the router and their ratio; the summary line the geometric mean of
router / oracle over prompts with its bootstrap 95% interval (``bench_table.geomean_ci``, as the
peers tables), and how many prompts are within 10% of their oracle.
"""

from __future__ import annotations

import statistics

from .bench_table import geomean_ci

WITHIN = 0.9
"""A prompt counts as matched when router / oracle >= this."""


def per_prompt_tps(records: list[dict], method: str) -> dict[int, float]:
    """Batch-1 tokens/s of ``method`` per prompt, the median over repeats: decode seconds where the
    measurement recorded its prefill (``prefill_seconds``, left out), else ``generate``'s whole."""
    by_prompt: dict[int, list[float]] = {}
    for r in records:
        seconds = r["seconds"] - (r.get("prefill_seconds") or 0.0)
        if r["method"] == method and r["batch"] == 1 and seconds > 0:
            by_prompt.setdefault(r["prompts"][0], []).append(r["tokens"] / seconds)
    return {p: float(statistics.median(v)) for p, v in by_prompt.items()}


def oracle_table(records: list[dict], router: str, fixed: list[str]) -> tuple[list[dict], dict]:
    """Rows (one per prompt that every method ran) and a summary; see the module docstring."""
    if not fixed:
        raise ValueError("oracle: --fixed names no method: give the fixed routings to compare against")
    known = {r["method"] for r in records}
    missing = [m for m in [router, *fixed] if m not in known]
    if missing:
        raise ValueError(f"oracle: no measurements of {missing}; the file has {sorted(known)}")
    tps = {m: per_prompt_tps(records, m) for m in [router, *fixed]}
    prompts = sorted(set.intersection(*(set(v) for v in tps.values())))
    rows = []
    for p in prompts:
        best = max(fixed, key=lambda m: tps[m][p])
        rows.append(
            {
                "prompt": p,
                **{m: tps[m][p] for m in fixed},
                "oracle": tps[best][p],
                "oracle_method": best,
                "router": tps[router][p],
                "ratio": tps[router][p] / tps[best][p],
            }
        )
    if not rows:
        raise ValueError("oracle: no prompt was measured by the router and every fixed routing")
    g, lo, hi = geomean_ci([r["ratio"] for r in rows])
    best_fixed = max(fixed, key=lambda m: geomean_ci([tps[m][r["prompt"]] / r["oracle"] for r in rows])[0])
    summary = {
        "prompts": len(rows),
        "router_vs_oracle": g,
        "ci": (lo, hi),
        "within_10pct": sum(r["ratio"] >= WITHIN for r in rows),
        "best_fixed": best_fixed,
        "best_fixed_vs_oracle": geomean_ci([tps[best_fixed][r["prompt"]] / r["oracle"] for r in rows])[0],
    }
    return rows, summary


def markdown(rows: list[dict], summary: dict, router: str, fixed: list[str]) -> str:
    head = "| prompt | " + " | ".join(f"`{m}`" for m in fixed) + f" | oracle | router `{router}` | router / oracle |"
    lines = [head, "|---|" + "---|" * (len(fixed) + 3)]
    for r in rows:
        cells = [f"{r[m]:.1f}" + (" *" if m == r["oracle_method"] else "") for m in fixed]
        lines.append(
            f"| {r['prompt']} | " + " | ".join(cells) + f" | {r['oracle']:.1f} | {r['router']:.1f} | {r['ratio']:.2f} |"
        )
    lo, hi = summary["ci"]
    lines += [
        "",
        f"tokens/s (decode only where the prefill was recorded), batch 1, median over repeats; * marks each prompt's oracle. Router / oracle, geometric "
        f"mean over {summary['prompts']} prompts: {summary['router_vs_oracle']:.2f} [{lo:.2f}, {hi:.2f}]; "
        f"within 10% of the oracle on {summary['within_10pct']} of {summary['prompts']}. The best single "
        f"fixed routing (`{summary['best_fixed']}`) reaches {summary['best_fixed_vs_oracle']:.2f} of the oracle.",
    ]
    return "\n".join(lines) + "\n"
