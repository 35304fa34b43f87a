"""A router against the best fixed routing chosen in hindsight, per prompt, from a peers run.

    python -m analysis.router_oracle docs/peers/v14-amd-humaneval-t0/measurements.jsonl \\
        --router "ngram:1:30>q4:12:50:2>timed:24@gguf_native" \\
        --fixed "ar@gguf_native,copy:16:3@gguf_native,q4:12:50:2@gguf_native"

For each prompt (``group`` in ``peers.py``'s ``measurements.jsonl``) the oracle is the fixed method
with the highest decode rate on that prompt (new tokens over seconds less the prefill; repeats
summed); the router's rate over the oracle's is reported per prompt, as a geometric mean over the
prompts and as a ratio of totals (all the router's tokens over its seconds against the oracle
choices'). Greedy runs whose outputs agree compare like with like; sampled runs compare different
texts, so their per-prompt ratios carry that noise too.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path


def decode_totals(path: str | Path) -> dict[str, dict[int, tuple[float, float]]]:
    """method -> prompt group -> (new tokens, decode seconds), summed over repeats; rows without
    a recorded prefill (HF's methods) are left out."""
    out: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row.get("prefill_seconds") is None:
            continue
        tok, sec = out[row["method"]].get(row["group"], (0.0, 0.0))
        out[row["method"]][row["group"]] = (tok + row["tokens"], sec + row["seconds"] - row["prefill_seconds"])
    return dict(out)


def against_oracle(totals: dict, router: str, fixed: list[str]) -> dict:
    """Per prompt the oracle's method and both rates; the geometric mean of the ratios and the
    ratio of totals. A method missing from the run is a clear error naming the ones present."""
    missing = [m for m in [router, *fixed] if m not in totals]
    if missing:
        raise SystemExit(f"methods not in the run: {missing}; present: {sorted(totals)}")
    rows, tok_r, sec_r, tok_o, sec_o = [], 0.0, 0.0, 0.0, 0.0
    for g in sorted(totals[router]):
        best = max(fixed, key=lambda m: totals[m][g][0] / totals[m][g][1])
        (tr, sr), (to, so) = totals[router][g], totals[best][g]
        rows.append({"prompt": g, "oracle": best, "oracle_rate": to / so, "router_rate": tr / sr})
        tok_r, sec_r, tok_o, sec_o = tok_r + tr, sec_r + sr, tok_o + to, sec_o + so
    ratios = [r["router_rate"] / r["oracle_rate"] for r in rows]
    return {
        "prompts": rows,
        "geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)),
        "totals": (tok_r / sec_r) / (tok_o / sec_o),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("measurements", help="a peers run's measurements.jsonl")
    ap.add_argument("--router", required=True, help="the routed method's name in that run")
    ap.add_argument("--fixed", required=True, help="comma-separated fixed methods the oracle picks among")
    args = ap.parse_args(argv)
    res = against_oracle(decode_totals(args.measurements), args.router, [m for m in args.fixed.split(",") if m])
    for r in res["prompts"]:
        print(f"prompt {r['prompt']}: oracle {r['oracle']} {r['oracle_rate']:.1f} tok/s, router {r['router_rate']:.1f}")
    print(f"router / oracle: geometric mean {res['geomean']:.3f}, ratio of totals {res['totals']:.3f}")


if __name__ == "__main__":
    main()
