"""Benchmark: chains vs token trees vs ``tree=auto`` on the embedded SmolLM2-135M at
temperature 0, batch 1, drafting with the best drafter available.

    python experiments/bench_tree.py --prompts 6 --max-new-tokens 64 --json tree.json
    python analysis/tree_figure.py tree.json report/tree.png      # the figure

For each method the target scores the root plus the draft's nodes in one call per round.
Methods, per prompt in turn (interleaved, so drift on a shared machine spreads over all):
plain decoding (AR); chains of k = ``--chains``; fixed trees (the ``conf/tree`` presets,
dynamic trees of ``--budgets`` nodes, a wide-root spine); and ``tree=auto``, which
calibrates first (untimed, like a job's warm-up) and reports the tree it chose with its
predicted tokens per call. Every output is checked against AR through the same kernel
plan. The JSON holds one row per method (``rows``) in the form ``analysis/tree_figure.py``
reads, the settings, and tree=auto's calibration and choice (``tree_auto``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import yaml

from stagedspec.drafters import KatzNgramDrafter
from stagedspec.drafters.hierarchy import TrainedLevel
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import AutoShape, DynamicShape, StaticShape, TreeShape, chain
from stagedspec.evaluation.bench_setup import add_common_args, setup
from stagedspec.evaluation.job import resolve_tree
from stagedspec.metrics.round_stats import summarize
from stagedspec.tuning.kernel_calibration import kernel_plan

CONF = Path(__file__).resolve().parents[1] / "conf" / "tree"


def make_drafter(kind: str, target, shape):
    """The top level: "ngram" (Katz back-off over the row's own text), or a trained draft
    ("feature" / "layers": a weights file, or the shipped ones once they exist)."""
    if kind == "ngram":
        return KatzNgramDrafter(target.vocab_size, tree=shape)
    weights = {"feature": "embedded-feature", "layers": "embedded-layers"}.get(kind, kind)
    return TrainedLevel(weights=weights, tree=shape, name="draft").build(None, target, None)


def methods(args, target) -> list[tuple[str, str, object]]:
    """(label, kind, shape) for every method but AR."""
    out: list[tuple[str, str, object]] = []
    for k in [int(x) for x in args.chains.split(",") if x]:
        out.append((f"chain k={k}", "chain", chain(k)))
    for name in ("specinfer_221", "medusa"):
        shape = TreeShape.parse(yaml.safe_load((CONF / f"{name}.yaml").read_text())["shape"])
        out.append((f"{name} ({shape.size})", "tree", shape))
    out.append(("spine+root alts (3,1,1,1)", "tree", TreeShape.parse({"widths": [3, 1, 1, 1]})))
    for n in [int(x) for x in args.budgets.split(",") if x]:
        out.append((f"dynamic({n})", "dynamic", DynamicShape(budget=n, topk=4, depth=8)))
    if args.auto:
        out.append(("tree=auto", "auto", AutoShape(max_nodes=args.auto_max_nodes)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafter", default="ngram", help="ngram | feature | layers | a trained-draft weights file")
    ap.add_argument("--chains", default="1,2,3,4,6,8")
    ap.add_argument("--budgets", default="4,8,16,24", help="dynamic-tree node budgets")
    ap.add_argument("--auto", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--auto-max-nodes", type=int, default=24)
    ap.add_argument("--kernels", default="fast", choices=["fast", "hf"])
    ap.add_argument("--repeats", type=int, default=1, help="timed passes over the prompts")
    add_common_args(ap)
    args = ap.parse_args()
    target, prompts, cats = setup(args)
    plan = kernel_plan(target, args.kernels)
    greedy = SamplingConfig()
    n_new = args.max_new_tokens
    decs: dict[str, SpeculativeDecoder] = {"ar": SpeculativeDecoder(target.model, None, greedy, plan=plan)}
    info: dict[str, dict] = {"ar": {"kind": "ar", "nodes": 0, "depth": 0}}
    auto_drafter = None
    for label, kind, shape in methods(args, target):
        drafter = make_drafter(args.drafter, target, shape)
        if kind == "auto":
            auto_drafter = drafter
        decs[label] = SpeculativeDecoder(target.model, drafter, greedy, plan=plan)
        nodes = shape.size if isinstance(shape, StaticShape) else getattr(shape, "budget", None)
        info[label] = {"kind": kind, "nodes": nodes, "depth": shape.depth}
    t0 = time.perf_counter()
    choice = None  # tree=auto calibrates (or reads its cache) here, before the warm-up
    if auto_drafter is not None:
        choice = resolve_tree(auto_drafter, target, greedy, plan, ["bench_tree", args.drafter])
    for label, dec in decs.items():  # warm-up
        dec.generate([prompts[0][-32:]], 4)
    if choice is not None:
        info["tree=auto"].update(
            nodes=len(choice.paths),
            depth=max(len(p) for p in choice.paths),
            predicted_tokens_per_call=choice.predicted_tokens_per_call,
            predicted_ms_per_call=choice.predicted_ms_per_call,
            paths=choice.paths,
        )
        print(
            f"tree=auto chose {len(choice.paths)} nodes {json.dumps(choice.paths)}: predicted "
            f"{choice.predicted_tokens_per_call:.2f} tokens/call ({'cached' if choice.cache_hit else 'calibrated'}"
            f" in {choice.calibration.seconds:.0f} s)"
        )
    print(f"warm-up {time.perf_counter() - t0:.0f} s")
    seqs: dict[str, list] = {k: [] for k in decs}
    wall = {k: 0.0 for k in decs}
    for rep in range(args.repeats):
        for i, p in enumerate(prompts):
            for label, dec in decs.items():
                res = dec.generate([p], n_new)
                wall[label] += res.wall_time
                if rep == 0:
                    seqs[label].append(res.sequences[0])
            print(f"pass {rep + 1}/{args.repeats}, prompt {i + 1}/{len(prompts)} done", flush=True)
    ref = [s.output_ids for s in seqs["ar"]]
    tokens = sum(len(s.output_ids) for s in seqs["ar"]) * args.repeats
    ar_tps = tokens / wall["ar"]
    rows = []
    for label in decs:
        s = summarize(seqs[label])
        tps = tokens / wall[label]
        rows.append(
            {
                "method": label,
                **info[label],
                "tokens_per_call": s["mean_accepted_tokens_per_call"],
                "nodes_per_call": s.get("tree_nodes_per_call", 0.0),
                "tokens_per_s": tps,
                "speedup": tps / ar_tps,
                "identical": [x.output_ids for x in seqs[label]] == ref,
            }
        )
    print(
        f"{len(prompts)} prompts ({', '.join(cats)}) x {n_new} new tokens, greedy, batch 1, {args.dtype}, "
        f"{torch.get_num_threads()} threads, kernels {plan.describe()}, drafter {args.drafter}"
    )
    print(f"{'method':30s} {'nodes/call':>10s} {'tok/call':>8s} {'pred':>6s} {'tok/s':>7s} {'speedup':>7s} exact")
    for r in rows:
        pred = r.get("predicted_tokens_per_call")
        print(
            f"{r['method']:30s} {r['nodes_per_call']:10.2f} {r['tokens_per_call']:8.2f} "
            f"{'' if pred is None else f'{pred:.2f}':>6s} {r['tokens_per_s']:7.2f} {r['speedup']:7.2f} "
            f"{r['identical']}"
        )
    if args.json:
        out = {
            "settings": {
                "prompts": len(prompts),
                "categories": cats,
                "max_new_tokens": n_new,
                "threads": torch.get_num_threads(),
                "dtype": args.dtype,
                "device": args.device,
                "kernels": plan.describe(),
                "drafter": args.drafter,
                "repeats": args.repeats,
                "temperature": 0.0,
                "batch_size": 1,
            },
            "rows": rows,
            "tree_auto": choice.artifact() if choice is not None else None,
        }
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
