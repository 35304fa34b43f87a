"""Benchmark: the target's cost curve T(n) on its GGUF's own 4-bit weights against the dense
path, interleaved.

    python experiments/bench_step_curve.py --repeats 7 --out docs/step-curve.md

One cached forward (with the LM head) of n chain tokens after ``--context`` tokens, through
the engine's own cache (``KVModel``), for each n and each plan in turn, ``--repeats`` times;
medians. The plans: the calibrated fast plan of ``target.weights=gguf_q4`` (the int4 kernel
on the file's Q4_K codes at the row counts its calibration chose) and the same plan without
its 4-bit rows (every GEMM dense: what ``weights=dense`` runs), on one model object. Beside
them, each plan's bytes of weights per 1-row step and the read bandwidth probed before and
after (the read floor: bytes / bandwidth). ``--llama-cpp``: a third column set, the same
forwards on llama.cpp over the same GGUF file (``target.backend=llama_cpp``; the file's own
blocks, every tensor in its stored type), interleaved with the others. ``--native``: another, the
target on its GGUF's own blocks with int8 activations (``target.weights=gguf_native``, a second model
object, its plan calibrated for it), and that plan with its one-row forwards' decoder layers in torch
instead of one C call each (``native_layers=False``: the layer kernel's A/B). ``--amx-ab`` (with
``--native``, on a CPU with AMX-INT8): also the native plan with its cols loop on VNNI instead of AMX
tiles (``gguf_native_vnni``; the same bits).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from stagedspec.engine import qk_kernels
from stagedspec.engine.kv_cache import KVModel
from stagedspec.engine.llama_cpp_kv import LlamaCppKV
from stagedspec.engine.tree import DraftTree
from stagedspec.models.llama_cpp_model import gguf_path, load_llama_cpp
from stagedspec.evaluation.bench_machine import read_bandwidth, step_bytes, time_forward
from stagedspec.metrics.machine import cpu_model
from stagedspec.tuning.kernel_calibration import kernel_plan
from stagedspec.models.model_loading import ModelSpec, load_model


def time_llama_cpp(kv: LlamaCppKV, context: list[int], n: int) -> float:
    """``time_forward`` on llama.cpp: the tail and a chain of n - 1 more, logits at all n."""
    (tail,) = kv.sync([context], min_tail=1)
    chain = [(context[-1] + 17 * i) % kv.vocab_size for i in range(1, n)]
    tree = DraftTree(tokens=chain, parents=[j - 1 for j in range(len(chain))], q=[None] * len(chain))
    t0 = time.perf_counter()
    kv.extend_trees([tail], [tree])
    dt = time.perf_counter() - t0
    kv.sync([context])
    return dt


def gguf_bytes(spec) -> int:
    """The bytes a llama.cpp step reads at most: the GGUF file's size (an upper bound: its header
    and the token embedding, of which a step reads a few rows, count whole)."""
    return gguf_path(spec).stat().st_size


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--rows", default="1,2,3,4,6,8,12,16,24,32")
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-cpp", action="store_true", help="also time the target on llama.cpp (optional install)")
    ap.add_argument(
        "--native", action="store_true", help="also time weights=gguf_native (the GGUF's blocks x int8 activations)"
    )
    ap.add_argument("--amx-ab", action="store_true", help="with --native: also the native plan on VNNI, not AMX tiles")
    ap.add_argument("--out", default=None, help="write the markdown table here (and the JSON beside it)")
    args = ap.parse_args(argv)
    if args.amx_ab and not args.native:
        ap.error("--amx-ab compares the native plan's two loops: give --native too")
    torch.set_num_threads(args.threads)
    rows = [int(n) for n in args.rows.split(",")]
    target = load_model(ModelSpec(source="embedded", embedded=args.target, dtype="bfloat16", weights="gguf_q4"))
    q4 = kernel_plan(target, "fast")
    plans = {"gguf_q4": q4, "dense": dataclasses.replace(q4, int4_rows=0, int4_exact=False, name="dense")}
    models = {name: target for name in plans}
    if args.native:  # a second model object (gguf_q4 rounds its dense copy to the int4 kernel's weights)
        native = load_model(ModelSpec(source="embedded", embedded=args.target, dtype="bfloat16", weights="gguf_native"))
        plans["gguf_native"] = kernel_plan(native, "fast")
        models["gguf_native"] = native
        # the same plan with every decoder layer in torch (no one-row layer kernel): the A/B of that kernel
        plans["gguf_native_torch_layers"] = dataclasses.replace(
            plans["gguf_native"], native_layers=False, name="fast-torch-layers"
        )
        models["gguf_native_torch_layers"] = native
        if args.amx_ab:
            if not qk_kernels.amx_in_use():
                raise SystemExit(
                    "--amx-ab: this machine's cols loop does not run on AMX tiles (no AMX-INT8, or not granted)"
                )
            plans["gguf_native_vnni"] = dataclasses.replace(plans["gguf_native"], name="fast-vnni")
            models["gguf_native_vnni"] = native
    bw = [read_bandwidth()]
    ctx = torch.randint(0, target.vocab_size, (args.context,), generator=torch.Generator().manual_seed(0)).tolist()
    kvs = {}
    for name, plan in plans.items():
        kvs[name] = KVModel(models[name].model, plan=plan)
        kvs[name].reset(1)
    if args.llama_cpp:
        handle = load_llama_cpp(gguf_path(target.spec), threads=args.threads, vocab_size=target.vocab_size)
        kvs["llama_cpp"] = LlamaCppKV(handle)
        kvs["llama_cpp"].reset(1)
        plans["llama_cpp"] = None
    times: dict[str, dict[int, list[float]]] = {p: {n: [] for n in rows} for p in plans}
    with torch.no_grad():
        for r in range(args.repeats + 1):  # repeat 0: warm-up, not kept
            for name in plans if r % 2 else reversed(list(plans)):
                if args.amx_ab:
                    qk_kernels.use_amx(name != "gguf_native_vnni")
                with plans[name].active() if plans[name] is not None else contextlib.nullcontext():
                    for n in rows:
                        t = (time_llama_cpp if plans[name] is None else time_forward)(kvs[name], ctx, n)
                        if r:
                            times[name][n].append(1000 * t)
    bw.append(read_bandwidth())
    med = {p: {n: statistics.median(v) for n, v in d.items()} for p, d in times.items()}
    nbytes = {
        p: step_bytes(models[p].model, plan=plan) if plan is not None else gguf_bytes(target.spec)
        for p, plan in plans.items()
    }
    lines = [
        f"## Target step T(n): {target.name}, bfloat16 activations, {args.threads} threads, context {args.context}",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu_model()} ({platform.machine()}), "
        f"{args.repeats} repeats interleaved, medians (ms). Plans: "
        + "; ".join(plans[p].describe() for p in plans if plans[p] is not None and p != "dense")
        + ".",
        "",
        "| plan | " + " | ".join(f"T({n})" for n in rows) + " | T(16)/T(1) | MB/step (1 row) | read floor ms |",
        "|---|" + "---|" * (len(rows) + 3),
    ]
    for p in plans:
        floor = nbytes[p] / max(bw) * 1000
        ratio = med[p].get(16, float("nan")) / med[p][rows[0]]
        lines.append(
            f"| {p} | "
            + " | ".join(f"{med[p][n]:.1f}" for n in rows)
            + f" | {ratio:.2f} | {nbytes[p] / 1e6:.0f} | {floor:.1f} |"
        )
    lines += [
        "",
        f"Read bandwidth probed before / after: {bw[0] / 1e9:.1f} / {bw[1] / 1e9:.1f} GB/s (the floor uses "
        "the faster). "
        + " ".join(f"{p} T(1) / read floor: {med[p][rows[0]] / (nbytes[p] / max(bw) * 1000):.2f}x." for p in plans),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(
            json.dumps(
                {"args": vars(args), "plan": q4.describe(), "ms": times, "bytes": nbytes, "read_bw": bw}, indent=1
            )
        )


if __name__ == "__main__":
    main()
