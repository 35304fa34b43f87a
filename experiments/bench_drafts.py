"""Benchmark: trained drafts on the embedded SmolLM2-135M, against plain decoding.

    python experiments/bench_drafts.py --prompts 13 --max-new-tokens 128 --repeats 2

1. Per-token acceptance alpha (accepted / (accepted + rejections), T = 0, chain of k) and
   cost ratio c (one draft forward / one target forward, same batch) of each trained
   draft and of the untrained truncated copy of the same size.
2. End-to-end tokens/s, interleaved per prompt and repeated: Hugging Face ``generate``
   (its own model object, untouched by our kernels), our plain decoding, and the
   speculative hierarchies; per-prompt speedups over HF ``generate`` with a bootstrap
   95% interval of their geometric mean. Greedy outputs are checked against HF's.

Prompts: Spec-Bench dev (``$STAGEDSPEC_DATA`` or ../shared) when present, else MT-bench;
never the drafts' training prompts (stagedspec/prompts/training_prompts.py).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


from stagedspec.drafters import KatzNgramDrafter, ModelDrafter
from stagedspec.drafters.feature import FeatureDrafter
from stagedspec.drafters.hierarchy import corpus_lm
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import TreeShape
from stagedspec.evaluation.bench_methods import hf_generate
from stagedspec.evaluation.bench_setup import add_common_args, draft_files, setup
from stagedspec.evaluation.bench_table import geomean_ci, per_token_alpha
from stagedspec.models.chat_text import eos_token_ids
from stagedspec.models.draft_files import load_draft
from stagedspec.tuning.kernel_calibration import kernel_plan
from stagedspec.models.model_loading import ModelSpec, load_model, truncated_copy


def hierarchies(target, files: dict[str, Path], k: int, tree) -> dict:
    """name -> factory of a fresh drafter (None: plain decoding)."""
    V = target.vocab_size
    feature = load_draft(files["feature"], target.model, target.name)
    layers = load_draft(files["layers"], target.model, target.name)
    ngram_file = files["ngram"]
    base = corpus_lm(ngram_file, ngram_file.stat().st_mtime, V, 3)
    shape = TreeShape.parse(tree) if tree else None
    return {
        "ar": lambda: None,
        "ngram>target": lambda: KatzNgramDrafter(V, k=k, base=base),
        "layers>target": lambda: ModelDrafter(layers, k=k, name="layers"),
        "ngram>layers>target": lambda: ModelDrafter(
            layers, k=k, lower=KatzNgramDrafter(V, k=2, base=base), name="layers"
        ),
        "feature>target": lambda: FeatureDrafter(feature, k=k, name="feature"),
        **({"feature-tree>target": lambda: FeatureDrafter(feature, tree=shape, name="feature")} if shape else {}),
    }


def acceptance_table(target, prompts, plan, k: int, n_new: int, files: dict[str, Path]) -> dict:
    """alpha and c of each trained draft and of the untrained truncated copy of its size."""
    out = {}
    for name in ("feature", "layers"):
        draft = load_draft(files[name], target.model, target.name)
        n = draft.meta.n_layers
        cands = {
            f"trained {name} ({n} layer{'s' * (n > 1)}, {int(draft.vocab_map.numel())}-token head)": (
                FeatureDrafter(draft, k=k, name=name) if name == "feature" else ModelDrafter(draft, k=k, name=name)
            )
        }
        if name == "layers":
            cands[f"untrained first {n} layers (full head)"] = ModelDrafter(
                truncated_copy(target, n).model, k=k, name="untrained"
            )
        for label, drafter in cands.items():
            dec = SpeculativeDecoder(target.model, drafter, SamplingConfig(), eos_token_ids(target), plan=plan)
            results = [dec.generate([p], n_new) for p in prompts]
            seqs = [s for r in results for s in r.sequences]
            t_fwd = sum(r.target_forward_time for r in results) / sum(r.target_calls for r in results)
            d_fwd = sum(sum(r.draft_call_time.values()) for r in results) / sum(
                sum(r.draft_forwards.values()) for r in results
            )
            summ = [r.summary() for r in results]
            out[label] = {
                "alpha": per_token_alpha(seqs),
                "c": d_fwd / t_fwd,
                "tokens_per_call": sum(s["emitted"] for s in summ) / sum(s["rounds"] for s in summ),
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--tree", default='{"widths": [2, 2, 1, 1]}')
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument(
        "--drafts",
        default=None,
        help="folder with feature/layers/ngram .safetensors (default: the files shipped for the embedded target)",
    )
    args = ap.parse_args()
    files = draft_files(args.drafts)
    target, prompts, cats = setup(args)
    hf_model = load_model(ModelSpec(source="embedded", dtype=args.dtype, device=args.device)).model  # untouched
    plan = kernel_plan(target, "fast")
    n = args.max_new_tokens
    sampling = SamplingConfig(temperature=args.temperature, seed=0)
    eos = eos_token_ids(target)
    print(
        f"{len(prompts)} prompts x {n} tokens, T={args.temperature}, {args.threads} threads, "
        f"kernel plan {plan.describe()}"
    )
    if args.temperature == 0:
        table = acceptance_table(target, prompts, plan, args.k, n, files)
        print(f"{'draft':55s} {'alpha':>6s} {'c':>6s} {'tok/call':>8s}")
        for label, r in table.items():
            print(f"{label:55s} {r['alpha']:6.3f} {r['c']:6.3f} {r['tokens_per_call']:8.2f}")
    methods = hierarchies(target, files, args.k, args.tree)
    names = ["hf"] + list(methods)
    times = {m: [[] for _ in prompts] for m in names}
    outs = {m: [None] * len(prompts) for m in names}
    calls = {m: [0, 0] for m in names}
    split = {m: [0.0, 0.0, 0.0] for m in names}  # wall, target forwards, draft calls (seconds)
    hf_generate(hf_model, prompts[0], 8)  # warm-ups
    for m, make in methods.items():
        SpeculativeDecoder(target.model, make(), sampling, eos, plan=plan).generate([prompts[0]], 8)
    for rep in range(args.repeats):
        for i, p in enumerate(prompts):
            order = names[(rep + i) % len(names) :] + names[: (rep + i) % len(names)]
            for m in order:  # interleaved: every method sees the machine in the same state
                t0 = time.perf_counter()
                if m == "hf":
                    ids = hf_generate(hf_model, p, n, eos=eos, temperature=args.temperature)
                else:
                    res = SpeculativeDecoder(target.model, methods[m](), sampling, eos, plan=plan).generate([p], n)
                    ids = res.sequences[0].output_ids
                    calls[m][0] += len(ids)
                    calls[m][1] += res.target_calls
                dt = time.perf_counter() - t0
                if m != "hf":
                    split[m][0] += dt
                    split[m][1] += res.target_forward_time
                    split[m][2] += sum(res.draft_call_time.values())
                times[m][i].append(len(ids) / dt)
                outs[m][i] = ids
    print(f"\n{'method':24s} {'tok/s':>7s} {'vs HF (95% CI)':>22s} {'tok/call':>8s} {'= HF':>5s}")
    rows = {}
    for m in names:
        tps = [sorted(ts)[len(ts) // 2] for ts in times[m]]  # median over repeats, per prompt
        ratios = [a / b for a, b in zip(tps, [sorted(ts)[len(ts) // 2] for ts in times["hf"]])]
        g, lo, hi = geomean_ci(ratios)
        same = sum(o == h for o, h in zip(outs[m], outs["hf"])) if args.temperature == 0 else None
        rows[m] = {
            "tokens_per_s": sum(tps) / len(tps),
            "speedup_vs_hf": g,
            "ci": [lo, hi],
            "tokens_per_call": calls[m][0] / calls[m][1] if calls[m][1] else 1.0,
            "identical_to_hf": same,
            "per_prompt_speedup": dict(zip(cats, ratios)),
        }
        if calls[m][1]:  # where the time of one round goes, milliseconds
            wall, verify, draft = split[m]
            rows[m]["ms_per_round"] = {
                "verify": 1e3 * verify / calls[m][1],
                "draft": 1e3 * draft / calls[m][1],
                "other": 1e3 * (wall - verify - draft) / calls[m][1],
            }
        print(
            f"{m:24s} {rows[m]['tokens_per_s']:7.2f} {g:6.2f} [{lo:5.2f}, {hi:5.2f}]      "
            f"{rows[m]['tokens_per_call']:8.2f} {'' if same is None else f'{same}/{len(prompts)}':>5s}"
        )
    print(f"\n{'method':24s} per target call (ms): {'verify':>7s} {'draft':>7s} {'other':>7s}")
    for m, r in rows.items():
        if "ms_per_round" in r:
            v = r["ms_per_round"]
            print(f"{m:24s} {'':21s} {v['verify']:7.1f} {v['draft']:7.1f} {v['other']:7.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "rows": rows,
                    "alpha_c": table if args.temperature == 0 else None,
                    "plan": plan.describe(),
                    "args": vars(args),
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
