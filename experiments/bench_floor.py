"""Benchmark: the plain decoding step against this machine's floor, measured side by side.

    python experiments/bench_floor.py --target qwen2.5-coder-1.5b --pairs 15 --json floor.json

The floor of a memory-bound step is the weight bytes it reads (``step_bytes``: every
weight once, the untied input embedding table only at the token's row) divided by the
memory bandwidth. The bandwidth of a shared machine drifts (34 and 69 GB/s for a 512 MB sum
eight minutes apart here), so each pair takes a read probe (a sum), a copy probe (bytes
copied / s) and the plain step (one token after a cached context of ``--context``
tokens, through the engine's kernel plan, best of 3) one after the other, and compares
the step with the floors measured beside it. Printed: medians and ranges over the pairs,
and the step's ratio to each floor (geometric mean over the pairs, bootstrap 95%).
``--gemv`` also times the GEMMs alone at one row (every Linear weight of the model
through the plan's one-row path, in turn), to show how much of the step they are and at
what bandwidth the GEMM kernel reads.
"""

from __future__ import annotations

import argparse
import json

import torch

from stagedspec.engine.kernels import apply_path, gemm_modules, int4_allowed
from stagedspec.engine.kv_cache import KVModel
from stagedspec.evaluation.bench_machine import floor_pairs, step_bytes, summarize_pairs, time_forward, weight_bytes
from stagedspec.tuning.kernel_calibration import kernel_plan
from stagedspec.models.model_loading import ModelSpec, load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b", help="packaged model (stagedspec/models/packaged.py)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kernels", default="fast", choices=["fast", "hf"])
    ap.add_argument("--context", type=int, default=250, help="cached tokens before the timed step")
    ap.add_argument("--weights", default="gguf_q4", help="the target's weights: gguf_q4 or dense")
    ap.add_argument("--pairs", type=int, default=15)
    ap.add_argument("--gemv", action="store_true", help="also time the model's GEMMs alone at one row")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.pairs < 2:
        raise SystemExit(f"--pairs must be >= 2 (an interval needs two), got {args.pairs}")
    torch.set_num_threads(args.threads)
    target = load_model(ModelSpec(source="embedded", embedded=args.target, dtype=args.dtype, weights=args.weights))
    plan = kernel_plan(target, args.kernels)
    kv = KVModel(target.model, plan=plan)
    kv.reset(1)
    g = torch.Generator().manual_seed(0)
    context = torch.randint(0, target.vocab_size, (args.context,), generator=g).tolist()
    nbytes = step_bytes(target.model, plan=plan)  # the 4-bit packs' bytes where the plan's 1-row step reads them
    with plan.active(), torch.no_grad():
        kv.extend_chain(kv.sync([context[:-1]]), want_last=False)
        for _ in range(3):
            time_forward(kv, context, 1)  # warm-up
        steps = [("step", lambda: time_forward(kv, context, 1))]
        if args.gemv:
            mods = gemm_modules(target.model)
            x = {m: torch.randn(1, m.in_features, dtype=m.weight.dtype) for m in mods}
            paths = {m: plan.path(1, int4_allowed(m, plan)) for m in mods}
            steps.append(("gemms", lambda: [apply_path(m, paths[m], x[m]) for m in mods]))
        results = {}
        for name, fn in steps:
            results[name] = summarize_pairs(floor_pairs(fn, nbytes, pairs=args.pairs))
    s = results["step"]
    print(f"{args.target} {args.dtype}, {args.threads} threads, plan {plan.describe()}, context {args.context}")
    print(f"weight bytes per step: {nbytes / 1e6:.1f} MB (all weights: {weight_bytes(target.model) / 1e6:.1f} MB)")
    print(f"{s['pairs']} pairs per row; medians [range] over the pairs, ratios as geometric means [95% CI]:")
    for name, r in results.items():
        print(
            f"  {name}: {r['step_s'] * 1e3:.1f} ms [{r['step_s_range'][0] * 1e3:.1f}, "
            f"{r['step_s_range'][1] * 1e3:.1f}] = {nbytes / r['step_s'] / 1e9:.1f} GB/s of weights, beside read "
            f"{r['read_bw'] / 1e9:.1f} GB/s [{r['read_bw_range'][0] / 1e9:.1f}, {r['read_bw_range'][1] / 1e9:.1f}] "
            f"and copy {r['copy_bw'] / 1e9:.1f} GB/s [{r['copy_bw_range'][0] / 1e9:.1f}, "
            f"{r['copy_bw_range'][1] / 1e9:.1f}] (bytes copied / s)"
        )
        print(
            f"    vs read floor {r['vs_read_floor_geomean']:.2f}x [{r['vs_read_floor_ci'][0]:.2f}, "
            f"{r['vs_read_floor_ci'][1]:.2f}], vs copy floor {r['vs_copy_floor_geomean']:.2f}x "
            f"[{r['vs_copy_floor_ci'][0]:.2f}, {r['vs_copy_floor_ci'][1]:.2f}]"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"args": vars(args), "plan": plan.describe(), "step_bytes": nbytes, "results": results}, f, indent=1
            )


if __name__ == "__main__":
    main()
