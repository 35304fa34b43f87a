"""Probes of this machine the benchmarks print beside their timings: memory bandwidth
(read, and copy) and the weight bytes one decoding step reads, whose ratio is a
memory-bound step's floor; and the interleaved comparison of that floor with the plain
decoding step (``floor_pairs``), which ``experiments/bench_floor.py`` runs.

The machine's bandwidth is shared with its neighbours: on the 2-core development machine
a 512 MB sum read 34 and 69 GB/s eight minutes apart. A floor measured once, at the start of a
benchmark, is therefore a guess; ``floor_pairs`` takes a probe beside every timed step
and compares each step with the floor measured next to it.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from stagedspec.engine.kernels import PATH_INT4, KernelChoice, gemm_modules, int4_allowed
from stagedspec.engine.kv_cache import KVModel
from stagedspec.evaluation.bench_table import geomean_ci


PROBE_MB = 512
"""Probe buffers: larger than any cache of the machines we run on."""


def read_bandwidth(megabytes: int = PROBE_MB, reps: int = 5, buf: torch.Tensor | None = None) -> float:
    """Read bandwidth in bytes/s: the best of ``reps`` sums over a buffer larger than the
    caches (bytes read / seconds). A weight-reading step can go no faster than its
    weight bytes divided by this."""
    x = buf if buf is not None else torch.ones(megabytes * 2**20 // 4)
    return x.numel() * x.element_size() / min(_timed(x.sum) for _ in range(reps))


def copy_bandwidth(
    megabytes: int = PROBE_MB, reps: int = 5, bufs: tuple[torch.Tensor, torch.Tensor] | None = None
) -> float:
    """Copy bandwidth in bytes/s: the best of ``reps`` copies of a buffer larger than the
    caches, as bytes copied / seconds (each byte is read once and written once, so the
    memory moves twice this; STREAM's "Copy" counts both and reports twice this number)."""
    src, dst = bufs if bufs is not None else (torch.ones(megabytes * 2**20 // 4), torch.empty(megabytes * 2**20 // 4))
    return src.numel() * src.element_size() / min(_timed(lambda: dst.copy_(src)) for _ in range(reps))


def weight_bytes(model: nn.Module) -> int:
    """Bytes of all the model's weights (every parameter once; shared tensors once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def step_bytes(model: nn.Module, tokens: int = 1, plan: KernelChoice | None = None) -> int:
    """Bytes of weights one decoding step of ``tokens`` new tokens reads: every parameter
    once (shared tensors once), except an input embedding table that is not also the
    output head, of which a step reads only its tokens' rows. (Qwen2.5-Coder-1.5B's GGUF
    has an untied 466 MB table: counting it whole put the floor 15% too low.) Under a
    ``plan`` whose 4-bit path takes ``tokens`` rows, a module on that path reads its 4-bit
    pack (codes, scales and offsets) instead of its dense weight; under a ``native`` plan a
    module holding GGUF blocks reads those (``models/gguf_native.py``)."""
    total = weight_bytes(model)
    if plan is not None and plan.native:  # a module with GGUF blocks reads its repacked blocks
        for mod in gemm_modules(model):
            segs = getattr(mod, "_stagedspec_native", None)
            if segs:
                total += sum(s.blocks.numel() for s in segs) - mod.weight.numel() * mod.weight.element_size()
    if plan is not None and tokens <= plan.int4_rows:
        for mod in gemm_modules(model):
            pack = getattr(mod, "_stagedspec_packs", {}).get(PATH_INT4)
            if pack is not None and int4_allowed(mod, plan):
                total += (
                    sum(t.numel() * t.element_size() for t in pack) - mod.weight.numel() * mod.weight.element_size()
                )
    get = getattr(model, "get_input_embeddings", None)
    emb = get() if get is not None else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if isinstance(emb, nn.Embedding) and (head is None or head.weight.data_ptr() != emb.weight.data_ptr()):
        w = emb.weight
        total -= w.numel() * w.element_size()
        total += min(tokens, w.shape[0]) * w.shape[1] * w.element_size()
    return total


def floor_pairs(step, nbytes: int, pairs: int = 15, megabytes: int = PROBE_MB, reps: int = 3) -> list[dict]:
    """``pairs`` times in a row: a read probe, a copy probe and ``step()`` (the best of
    ``reps`` calls), so each step is compared with the bandwidth measured beside it.
    Returns one dict per pair: seconds of the step, both bandwidths, both floors
    (``nbytes`` / bandwidth) and the step's ratio to each."""
    src = torch.ones(megabytes * 2**20 // 4)
    dst = torch.empty_like(src)
    out = []
    for _ in range(pairs):
        rb = read_bandwidth(reps=reps, buf=src)
        cb = copy_bandwidth(reps=reps, bufs=(src, dst))
        s = min(_timed(step) for _ in range(reps))
        out.append(
            {
                "step_s": s,
                "read_bw": rb,
                "copy_bw": cb,
                "read_floor_s": nbytes / rb,
                "copy_floor_s": nbytes / cb,
                "vs_read_floor": s * rb / nbytes,
                "vs_copy_floor": s * cb / nbytes,
            }
        )
    return out


def time_forward(kv: KVModel, context: list[int], n: int) -> float:
    """Seconds of one forward (with the LM head) of n chain tokens after ``context``,
    through the engine's own cache; the pending nodes are dropped after, so the next
    call starts from the same cache."""
    (tail,) = kv.sync([context], min_tail=1)
    chain = tail + [(context[-1] + 17 * i) % kv.vocab_size for i in range(1, n)]
    t0 = time.perf_counter()
    kv.extend([chain], [[-1] + list(range(len(chain) - 1))], [list(range(len(tail) - 1, len(chain)))])
    dt = time.perf_counter() - t0
    kv.sync([context])
    return dt


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def summarize_pairs(pairs: list[dict]) -> dict:
    """Medians (and ranges) of each field over the pairs; for the step's ratio to each
    floor, also the geometric mean over the pairs with its bootstrap 95% interval."""
    out: dict = {"pairs": len(pairs)}
    for key in pairs[0]:
        vals = [p[key] for p in pairs]
        out[key] = statistics.median(vals)
        out[key + "_range"] = (min(vals), max(vals))
    for key in ("vs_read_floor", "vs_copy_floor"):
        g, lo, hi = geomean_ci([p[key] for p in pairs])
        out[key + "_geomean"] = g
        out[key + "_ci"] = (lo, hi)
    return out
