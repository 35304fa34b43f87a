"""Benchmark (alone on the CPU): candidate GEMV kernels at 1-4 rows on the 1.5B's shapes.

    python experiments/bench_gemv_candidates.py 1,2,4

bf16 weights through oneDNN (prepacked), ``F.linear`` and a ``torch.compile``d reduction; 4-bit
codes through torch's int4 kernel (``_weight_int4pack_mm_for_cpu``) and a compiled
dequantize-and-reduce over nibble-packed codes with a bf16 scale and offset per group of 32.
Random weights; each op alone, medians of 9; GB/s counts the weight bytes a call reads (bf16: 2
a weight; the 4-bit forms 0.5625, a Q4_K block's). Results: docs/bench/gemv-candidates-*.md.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F

SHAPES = {"gate_up": (17920, 1536), "down": (1536, 8960), "lm_head": (151936, 1536), "o": (1536, 1536)}
G = 32
BF16 = ("linear", "mkldnn", "compiled bf16")


def bf16_red(x, w):  # x [M, K] bf16, w [N, K] bf16
    return (x.float()[:, None, :] * w.float()[None]).sum(-1).to(x.dtype)


def q4_red(x, packed, scale, off):  # packed [N, K/2] uint8 (low nibble: column 2j); scale, off [N, K/32]
    n = packed.shape[0]
    q = torch.stack([(packed & 15).float(), (packed >> 4).float()], -1).reshape(n, -1, G)
    w = (q * scale.float()[..., None] + off.float()[..., None]).to(torch.bfloat16).float()
    return (x.float()[:, None, :] * w.reshape(1, n, -1)).sum(-1).to(x.dtype)


def med(f, reps: int = 9) -> float:
    f()
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[reps // 2] * 1e3


def main(rows: list[int]) -> None:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    torch._dynamo.config.recompile_limit = 64
    cbf, cq4 = torch.compile(bf16_red, dynamic=False), torch.compile(q4_red, dynamic=False)
    for name, (n, k) in SHAPES.items():
        w = (torch.randn(n, k) * 0.02).to(torch.bfloat16)
        packed = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8)
        scale = (torch.rand(n, k // G) * 0.01).to(torch.bfloat16)
        off = (-torch.rand(n, k // G) * 0.08).to(torch.bfloat16)
        codes = torch.stack([(packed & 15).to(torch.int32), (packed >> 4).to(torch.int32)], -1).reshape(n, k)
        pk = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        sz = torch.stack([scale.T.float(), (off.float() + 8 * scale.float()).T], -1).to(torch.bfloat16).contiguous()
        wpk = torch.ops.mkldnn._reorder_linear_weight(w, 8)
        for m in rows:
            x = torch.randn(m, k).to(torch.bfloat16)
            r = {
                "linear": med(lambda: F.linear(x, w)),
                "mkldnn": med(lambda: torch.ops.mkldnn._linear_pointwise(x, wpk, None, "none", [], "")),
                "compiled bf16": med(lambda: cbf(x, w)),
                "int4pack": med(lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, pk, G, sz)),
                "compiled q4": med(lambda: cq4(x, packed, scale, off)),
            }
            gbs = {q: n * k * (2 if q in BF16 else 0.5625) / (v / 1e3) / 1e9 for q, v in r.items()}
            print(
                f"{name} {n}x{k} rows {m}: " + " | ".join(f"{q} {v:.2f} ms ({gbs[q]:.0f} GB/s)" for q, v in r.items())
            )


if __name__ == "__main__":
    main([int(a) for a in (sys.argv[1] if len(sys.argv) > 1 else "1,2,4").split(",")])
