"""Probes of this machine the benchmarks print beside their timings: the memory bandwidth
and the weight bytes one forward reads, whose ratio is a memory-bound forward's floor."""

from __future__ import annotations

import time

import torch
from torch import nn


def memory_bandwidth(megabytes: int = 512, reps: int = 5) -> float:
    """Measured read bandwidth of this machine in bytes/s (the best of ``reps`` sums over
    a buffer larger than the caches): the physical limit of a memory-bound forward is
    its weight bytes divided by this."""
    x = torch.ones(megabytes * 2**20 // 4)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t0)
    return x.numel() * 4 / best


def weight_bytes(model: nn.Module) -> int:
    """Bytes of weights one forward reads (every parameter once; shared tensors once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total
