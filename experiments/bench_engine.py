"""Benchmark: tokens/s of HF generate, our AR baseline and speculative hierarchies on the
embedded SmolLM2-135M, greedy, on a handful of Spec-Bench dev prompts.

    python experiments/bench_engine.py --prompts 6 --max-new-tokens 64

Every method runs on the same prompts in this one process, one prompt at a time
(batch 1), after a warm-up; ratios are against HF greedy ``generate`` and against our
own AR loop. Outputs are checked to be identical to HF greedy. A benchmark, not a test:
it reports numbers, it asserts only exactness.
"""

from __future__ import annotations

import argparse
import json
import time


from stagedspec.drafters import KatzNgramDrafter, ModelDrafter, PromptLookupDrafter
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import TreeShape
from stagedspec.evaluation.bench_methods import hf_generate
from stagedspec.evaluation.bench_setup import add_common_args, setup
from stagedspec.metrics.round_stats import summarize
from stagedspec.models.model_loading import truncated_copy


def methods(target, small_layers: int):
    V = target.vocab_size
    small = truncated_copy(target, small_layers).model
    return {
        "ar": lambda: None,
        "prompt_lookup>target": lambda: PromptLookupDrafter(k=5),
        "ngram>target": lambda: KatzNgramDrafter(V, k=4),
        "ngram-tree>target": lambda: KatzNgramDrafter(V, k=4, tree=TreeShape.parse({"widths": [3, 2, 1, 1]})),
        f"small{small_layers}>target": lambda: ModelDrafter(small, k=2, name=f"small{small_layers}"),
        f"ngram>small{small_layers}>target": lambda: ModelDrafter(
            small, k=4, lower=KatzNgramDrafter(V, k=3), name=f"small{small_layers}"
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small-layers", type=int, default=4)
    add_common_args(ap)
    args = ap.parse_args()
    target, prompts, _ = setup(args)
    n = args.max_new_tokens

    hf_generate(target.model, prompts[0], 8)  # warm-up
    rows = {}
    t = time.perf_counter()
    ref = [hf_generate(target.model, p, n) for p in prompts]
    hf_time = time.perf_counter() - t
    rows["hf_generate"] = {"tokens_per_s": n * len(prompts) / hf_time}
    t = time.perf_counter()
    pl = [hf_generate(target.model, p, n, prompt_lookup_num_tokens=5) for p in prompts]
    rows["hf_prompt_lookup"] = {"tokens_per_s": n * len(prompts) / (time.perf_counter() - t), "identical": pl == ref}

    for name, make in methods(target, args.small_layers).items():
        dec = SpeculativeDecoder(target.model, make(), SamplingConfig())
        dec.generate([prompts[0]], 4)  # warm-up
        results = [dec.generate([p], n) for p in prompts]
        wall = sum(r.wall_time for r in results)
        seqs = [s for r in results for s in r.sequences]
        summ = summarize(seqs)
        round_time = sum(p.total for r in results for p in r.phase_times)
        fwd = sum(r.target_forward_time + sum(r.draft_call_time.values()) for r in results)
        row = {
            "tokens_per_s": n * len(prompts) / wall,
            "mean_accepted_tokens_per_call": summ["mean_accepted_tokens_per_call"],
            "acceptance_rate": summ.get("acceptance_rate", 0.0),
            "share_outside_forwards": max(0.0, round_time - fwd) / round_time,
            "identical": [s.output_ids for s in seqs] == ref,
        }
        rows[name] = row
    base_hf = rows["hf_generate"]["tokens_per_s"]
    base_ar = rows["ar"]["tokens_per_s"]
    print(f"{len(prompts)} prompts x {n} new tokens, greedy, {args.dtype} on {args.device}, {args.threads} threads")
    print(
        f"{'method':28s} {'tok/s':>7s} {'vs HF':>6s} {'vs AR':>6s} {'tok/call':>8s} {'accept':>6s} "
        f"{'outside fwd':>11s} {'exact':>5s}"
    )
    for name, r in rows.items():
        r["speedup_vs_hf"] = r["tokens_per_s"] / base_hf
        r["speedup_vs_ar"] = r["tokens_per_s"] / base_ar
        print(
            f"{name:28s} {r['tokens_per_s']:7.2f} {r['speedup_vs_hf']:6.2f} {r['speedup_vs_ar']:6.2f} "
            f"{r.get('mean_accepted_tokens_per_call', float('nan')):8.2f} "
            f"{r.get('acceptance_rate', float('nan')):6.2f} "
            f"{r.get('share_outside_forwards', float('nan')):11.2%} {str(r.get('identical', True)):>5s}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
