"""Benchmark: the verification cost curve T(n)/T(1) of the embedded target for each
kernel path, measured through the engine's own cache (``KVModel``), interleaved.

    python experiments/bench_kernels.py --repeats 5 --json kernels.json

For n = 1, 2, 3, 4, 6, 8, 12, 16 new tokens (a chain continuing a cached context of
``--context`` tokens) it times one cached forward + LM head at every n for every plan
in turn, repeated; medians over the repeats. Plans: Hugging Face's own path (``hf``:
``F.linear``, HF's SDPA, ``DynamicCache``), the calibrated fast plan, and single-path
plans (every row count through one GEMM path) to show what each path does alone. The
goal of the cheap-verification issue: T(4) <= 1.15 T_hf(1) and T(8) <= 1.4 T_hf(1),
where T_hf(1) is the plain one-token step through Hugging Face's path.
"""

from __future__ import annotations

import argparse
import json
import statistics
from types import SimpleNamespace

import torch

from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.kernels import HF_KERNELS, KernelChoice, available_paths
from stagedspec.engine.kv_cache import KVModel
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.evaluation.bench_methods import hf_generate
from stagedspec.evaluation.bench_machine import time_forward
from stagedspec.evaluation.bench_setup import setup
from stagedspec.evaluation.divergence import first_divergence, top2_gap
from stagedspec.tuning.kernel_calibration import calibrate
from stagedspec.models.model_loading import ModelSpec, load_model

NS = (1, 2, 3, 4, 6, 8, 12, 16)


def mismatches(target, hf_model, plan, prompts: list[list[int]], n_new: int) -> list[dict]:
    """Greedy through ``plan`` vs Hugging Face ``generate``: per prompt, the first position
    where they differ (None when identical) and the target's top-2 logit gap there,
    computed through Hugging Face's path on the common prefix (a near-tie, not a bug,
    when the gap is within the fast kernels' rounding)."""
    out = []
    dec = SpeculativeDecoder(target.model, None, SamplingConfig(), plan=plan)
    for p in prompts:
        ref = hf_generate(hf_model, p, n_new)
        ours = dec.generate([p], n_new).sequences[0].output_ids
        at = first_divergence(ours, ref)
        gap = None if at is None else top2_gap(hf_model, p + ref[:at])[0]
        out.append({"first_mismatch": at, "top2_gap": gap})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--single-paths", action="store_true", help="also time one-path plans")
    ap.add_argument(
        "--mismatch-prompts",
        type=int,
        default=0,
        help="also compare greedy output with HF generate on this many dev prompts",
    )
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_model(ModelSpec(source="embedded"))
    fast, cal = calibrate(target.model)
    plans = {"hf": HF_KERNELS, "fast": fast}
    if args.single_paths:
        for path in available_paths(torch.float32, torch.device("cpu")):
            plans[f"all-{path}"] = KernelChoice(name=path, linear=(path,) * max(NS), gqa_packing=True, slot_cache=True)
    g = torch.Generator().manual_seed(0)
    context = torch.randint(0, target.vocab_size, (args.context,), generator=g).tolist()
    kvs = {}
    for name, plan in plans.items():
        kv = KVModel(target.model, plan=plan)
        kv.reset(1)
        kv.extend_chain(kv.sync([context[:-1]]), want_last=False)
        for n in NS:  # warm-up (packs weights on first use)
            time_forward(kv, context, n)
        kvs[name] = kv
    times: dict[str, dict[int, list[float]]] = {name: {n: [] for n in NS} for name in plans}
    for _ in range(args.repeats):
        for n in NS:
            for name, kv in kvs.items():  # interleaved: plans share the machine's state
                times[name][n].append(time_forward(kv, context, n))
    med = {name: {n: 1000 * statistics.median(ts) for n, ts in per.items()} for name, per in times.items()}
    hf1 = med["hf"][1]
    print(f"context {args.context}, {args.threads} threads, medians of {args.repeats}; fast plan: {fast.describe()}")
    print(f"{'plan':14s} " + " ".join(f"{'T(' + str(n) + ')':>8s}" for n in NS) + "   T(n)/T_hf(1)")
    for name, row in med.items():
        print(
            f"{name:14s} "
            + " ".join(f"{row[n]:8.1f}" for n in NS)
            + "   "
            + " ".join(f"{row[n] / hf1:.2f}" for n in NS)
        )
    fast_row = med["fast"]
    print(f"goal T(4) <= 1.15 T_hf(1): {fast_row[4] / hf1:.2f};  T(8) <= 1.4 T_hf(1): {fast_row[8] / hf1:.2f}")
    found = []
    if args.mismatch_prompts:
        _, prompts, _ = setup(
            SimpleNamespace(prompts=args.mismatch_prompts, threads=args.threads, device="cpu", dtype="float32")
        )
        hf_model = load_model(ModelSpec(source="embedded")).model  # untouched by the kernels
        found = mismatches(target, hf_model, fast, prompts, args.max_new_tokens)
        diff = [m for m in found if m["first_mismatch"] is not None]
        print(
            f"greedy through the fast plan vs HF generate, {len(found)} prompts x {args.max_new_tokens} tokens: "
            f"{len(diff)} differ"
            + "".join(f"; at token {m['first_mismatch']} (top-2 logit gap {m['top2_gap']:.2e})" for m in diff)
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"medians_ms": med, "plan": fast.describe(), "calibration_ms": cal.times_ms, "mismatches": found},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
