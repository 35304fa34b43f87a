"""Prefill with the cols loop on AMX tiles and on VNNI, alternating in one process (2026-12-07, docs/tuning/
README.md "The cols loop on AMX tiles"): the 0.5B re-encoded and the 1.5B native, n prompt tokens from an
empty cache, the head on the last row only, medians of 3.

    python experiments/bench_amx_prefill_2026_12_07_intel.py 16,32,160
"""

import statistics
import sys
import time

import torch
from stagedspec.engine.kv_cache import KVModel
from stagedspec.tuning.kernel_calibration import kernel_plan
from stagedspec.models.model_loading import ModelSpec, load_model
from stagedspec.engine import qk_kernels as qk

torch.set_num_threads(2)
ms = {
    "0.5b": load_model(
        ModelSpec(source="embedded", embedded="qwen2.5-coder-0.5b", dtype="bfloat16", weights="requant_q4k")
    ),
    "1.5b": load_model(
        ModelSpec(source="embedded", embedded="qwen2.5-coder-1.5b", dtype="bfloat16", weights="gguf_native")
    ),
}
ns = [int(a) for a in sys.argv[1].split(",")] if len(sys.argv) > 1 else [16, 32, 160]
for name, m in ms.items():
    plan = kernel_plan(m, "fast")
    kv = KVModel(m.model, plan=plan)
    ctx = torch.randint(0, m.vocab_size, (400,), generator=torch.Generator().manual_seed(0)).tolist()

    def pre(n):
        kv.reset(1)
        t0 = time.perf_counter()
        kv.extend([ctx[:n]], [[-1] + list(range(n - 1))], [[n - 1]])
        return time.perf_counter() - t0

    with torch.no_grad(), plan.active():
        for amx in [1, 0, 1, 0]:
            qk.use_amx(bool(amx))
            out = [f"prefill({n})={1000 * statistics.median([pre(n) for _ in range(3)]):.1f}" for n in ns]
            print(name, "amx " if amx else "vnni", " ".join(out), flush=True)
