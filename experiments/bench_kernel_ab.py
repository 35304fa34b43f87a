"""Benchmark: two versions of the GGUF-native kernel source, interleaved call by call in one process.

    git show 71b4cd6:stagedspec/engine/qk_kernels.c > /tmp/old.c
    python experiments/bench_kernel_ab.py /tmp/old.c --rows 1,2,4,8,16 --repeats 12

The machine's read bandwidth drifts by 2x within minutes (26-66 GB/s on one AMD EPYC in one hour), so
two runs one after the other cannot tell a 10% change; here both builds are loaded at once and every
timed call alternates between them (the order flipped each repeat). Two sets:

- ``gemms``: the 1.5B's own matrices alone (``--modules``: its fused gate/up, its down projections and
  the output head; several of each so that the weights come from memory, not the cache), through
  ``qk_kernels.linear`` at each row count with ``--cols-from`` (default: none, the rows loop throughout);
- ``step``: one cached forward of n new tokens after ``--context`` tokens (``time_forward``), each build
  with its own calibrated plan (``--old-cols-from``: the other build's cols threshold, as its own
  calibration chose it; default the same as the current build's).

Both sources must keep the same block and panel layouts (the repacked weights are shared). Prints the
medians and the median of the per-repeat ratios current / other with its quartiles.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

import torch

from stagedspec.engine import qk_kernels as qk
from stagedspec.engine.kernels import gemm_modules
from stagedspec.engine.kv_cache import KVModel
from stagedspec.evaluation.bench_machine import time_forward
from stagedspec.metrics.machine import cpu_model
from stagedspec.models.model_loading import ModelSpec, load_model
from stagedspec.tuning.kernel_calibration import kernel_plan

SETS = ("gemms", "step")


def libraries(other: Path) -> dict[str, object]:
    """The current source's library and ``other``'s, both built with this machine's flags."""
    current = qk.library()
    source = qk.SOURCE
    qk.SOURCE = other
    qk._LIBS.pop("machine", None)
    try:
        old = qk.library()
    finally:
        qk.SOURCE = source
        qk._LIBS["machine"] = current
    return {"current": current, "other": old}


def report(name: str, times: dict[tuple[str, int], list[float]], rows: list[int]) -> None:
    for n in rows:
        cur, old = times[("current", n)], times[("other", n)]
        ratios = sorted(a / b for a, b in zip(cur, old))
        q = len(ratios) // 4
        print(
            f"{name} n={n}: current {statistics.median(cur):.2f} ms, other {statistics.median(old):.2f} ms; "
            f"current / other {statistics.median(ratios):.3f} [{ratios[q]:.3f}, {ratios[-1 - q]:.3f}]"
        )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("other", type=Path, help="the other kernel source (a .c file)")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--sets", default="gemms,step")
    ap.add_argument("--modules", type=int, default=6, help="matrices of each shape in the gemms set")
    ap.add_argument("--cols-from", type=int, default=0, help="gemms set: the cols loop from this many rows (0: never)")
    ap.add_argument("--old-cols-from", type=int, default=None, help="step set: the other build's cols threshold")
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    sets = args.sets.split(",")
    if not args.other.is_file():
        ap.error(f"other source {args.other} is not a file")
    if bad := [s for s in sets if s not in SETS]:
        ap.error(f"unknown set(s) {bad}; valid: {', '.join(SETS)}")
    torch.set_num_threads(args.threads)
    rows = [int(n) for n in args.rows.split(",")]
    model = load_model(ModelSpec(source="embedded", embedded=args.target, dtype="bfloat16", weights="gguf_native"))
    libs = libraries(args.other)
    print(f"{cpu_model()}, {args.threads} threads, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")

    def run(fn, name: str) -> None:
        times = {(v, n): [] for v in libs for n in rows}
        for r in range(args.repeats + 1):  # repeat 0: warm-up, not kept
            for n in rows:
                for v in libs if r % 2 else reversed(list(libs)):
                    qk._LIBS["machine"] = libs[v]
                    t = fn(v, n)
                    if r:
                        times[(v, n)].append(1000 * t)
        qk._LIBS["machine"] = libs["current"]
        report(name, times, rows)

    if "gemms" in sets:
        mods = [m for m in gemm_modules(model.model) if getattr(m, "_stagedspec_native", None)]
        shapes: dict[tuple[int, int], list] = {}
        for m in mods:
            shapes.setdefault((m.out_features, m.in_features), []).append(m)
        picks = {
            "gate_up": max(((n * k, ms) for (n, k), ms in shapes.items() if k < n < 65536), key=lambda t: t[0])[1][
                : args.modules
            ],
            "down": [m for (n, k), ms in shapes.items() if k > n for m in ms][: args.modules],
            "head": [model.model.get_output_embeddings()],
        }
        for name, ms in picks.items():
            xs = {n: torch.randn(n, ms[0].in_features).to(torch.bfloat16) for n in rows}

            def gemm(v: str, n: int, ms=ms, xs=xs) -> float:
                t0 = time.perf_counter()
                for m in ms:
                    qk.linear(xs[n], m._stagedspec_native, None, args.cols_from)
                return (time.perf_counter() - t0) / len(ms)

            run(gemm, f"{name} ({ms[0].out_features}x{ms[0].in_features}, ms a matrix)")
    if "step" in sets:
        plan = kernel_plan(model, "fast")
        old = plan if args.old_cols_from is None else dataclasses.replace(plan, native_cols_from=args.old_cols_from)
        plans = {"current": plan, "other": old}
        kv = KVModel(model.model, plan=plan)
        kv.reset(1)
        ctx = torch.randint(0, model.vocab_size, (args.context,), generator=torch.Generator().manual_seed(0)).tolist()

        def step(v: str, n: int) -> float:
            kv.plan = plans[v]
            with plans[v].active():
                return time_forward(kv, ctx, n)

        with torch.no_grad():
            run(step, f"step T(n) (cols from {plan.native_cols_from} / {old.native_cols_from} rows)")


if __name__ == "__main__":
    main()
