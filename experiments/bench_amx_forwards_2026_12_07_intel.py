"""The 1.5B's forward T(n) with the cols loop on AMX tiles and on VNNI, alternating in one process
(2026-12-07 11:3x UTC, docs/tuning/README.md "The cols loop on AMX tiles"): four passes, tiles off / on /
off / on (the first a warm-up), each n timed 5 times through the engine's cache after a 300-token
context (``bench_machine.time_forward``), medians.

    python experiments/bench_amx_forwards_2026_12_07_intel.py 1,4,8,12,16,24,32
"""

import cProfile
import pstats
import statistics
import sys

import torch
from stagedspec.engine.kv_cache import KVModel
from stagedspec.evaluation.bench_machine import time_forward
from stagedspec.tuning.kernel_calibration import kernel_plan
from stagedspec.models.model_loading import ModelSpec, load_model
from stagedspec.engine import qk_kernels as qk

torch.set_num_threads(2)
m = load_model(ModelSpec(source="embedded", embedded="qwen2.5-coder-1.5b", dtype="bfloat16", weights="gguf_native"))
plan = kernel_plan(m, "fast")
print(plan.describe())
kv = KVModel(m.model, plan=plan)
kv.reset(1)
ctx = torch.randint(0, m.vocab_size, (300,), generator=torch.Generator().manual_seed(0)).tolist()
lib = qk.library()
ns = [int(a) for a in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1, 16]
with torch.no_grad(), plan.active():
    for amx in [0, 1, 0, 1]:
        lib.qk_amx(amx)
        for n in ns:
            ts = [time_forward(kv, ctx, n) for _ in range(5)]
            print(f"amx={amx} T({n}) = {1000 * statistics.median(ts):.1f} ms", flush=True)
    if len(sys.argv) > 2:
        lib.qk_amx(0)
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(5):
            time_forward(kv, ctx, 16)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(18)
