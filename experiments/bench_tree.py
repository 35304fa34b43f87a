"""Benchmark: chain vs tree drafts at equal numbers of scored positions per target call,
on the embedded SmolLM2-135M at temperature 0.

    python experiments/bench_tree.py --prompts 6 --max-new-tokens 64 --budgets 4,8,16

For each node budget N the target scores N draft positions (+ the root) per call, either
as a chain of N tokens or as a tree of N nodes (dynamic best-first, or SpecInfer-style
widths). Reports mean accepted tokens per target call and tokens/s, checks that every
output equals plain greedy decoding.
"""

from __future__ import annotations

import argparse
import json

from stagedspec.decoding import SpeculativeDecoder
from stagedspec.drafters import KatzNgramDrafter, PromptLookupDrafter
from stagedspec.sampling import SamplingConfig
from stagedspec.stats import summarize
from stagedspec.tree import TreeShape

from common import add_common_args, setup


def variants(V: int, n: int):
    yield f"ngram chain k={n}", KatzNgramDrafter(V, k=n)
    yield f"ngram tree dynamic({n})", KatzNgramDrafter(
        V, tree=TreeShape.parse({"dynamic": {"budget": n, "topk": 4, "depth": n}}))
    yield f"lookup chain k={n}", PromptLookupDrafter(k=n)
    yield f"lookup trie {n} ({max(1, n // 4)}x{min(n, 4)})", PromptLookupDrafter(
        k=min(n, 4), max_candidates=max(1, n // 4))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="4,8,16")
    add_common_args(ap)
    args = ap.parse_args()
    target, prompts, _ = setup(args)
    n_new = args.max_new_tokens
    ar = SpeculativeDecoder(target.model, None, SamplingConfig())
    ar.generate([prompts[0]], 4)
    ar_res = [ar.generate([p], n_new) for p in prompts]
    ref = [r.sequences[0].output_ids for r in ar_res]
    ar_tps = n_new * len(prompts) / sum(r.wall_time for r in ar_res)
    rows = [{"method": "ar", "budget": 0, "tokens_per_s": ar_tps, "tokens_per_call": 1.0,
             "nodes_per_call": 0.0, "speedup": 1.0, "identical": True}]
    for budget in [int(b) for b in args.budgets.split(",")]:
        for name, drafter in variants(target.vocab_size, budget):
            dec = SpeculativeDecoder(target.model, drafter, SamplingConfig())
            res = [dec.generate([p], n_new) for p in prompts]
            s = summarize([x for r in res for x in r.sequences])
            tps = n_new * len(prompts) / sum(r.wall_time for r in res)
            rows.append({"method": name, "budget": budget, "tokens_per_s": tps,
                         "tokens_per_call": s["mean_accepted_tokens_per_call"],
                         "nodes_per_call": s["tree_nodes_per_call"], "speedup": tps / ar_tps,
                         "identical": [r.sequences[0].output_ids for r in res] == ref})
    print(f"{len(prompts)} prompts x {n_new} new tokens, greedy, {args.dtype} on {args.device}")
    print(f"{'method':28s} {'nodes/call':>10s} {'tok/call':>8s} {'tok/s':>7s} {'speedup':>7s} exact")
    for r in rows:
        print(f"{r['method']:28s} {r['nodes_per_call']:10.2f} {r['tokens_per_call']:8.2f} "
              f"{r['tokens_per_s']:7.2f} {r['speedup']:7.2f} {r['identical']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
