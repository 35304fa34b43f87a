"""The machine a figure was measured on: the CPU's model name and the vector extensions that
pick kernels (from ``/proc/cpuinfo``; the platform's own answer elsewhere). Standard library only."""

from __future__ import annotations

import platform
from pathlib import Path

EXTENSIONS = (("avx512_bf16", "AVX-512 BF16"), ("avx512_vnni", "VNNI"), ("amx_tile", "AMX"), ("avx2", "AVX2"))
"""cpuinfo flag -> label, in the order a figure's CPU note names them."""


def _cpuinfo() -> str | None:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return None


def cpu_model(info: str | None = None) -> str:
    """The CPU's model name (part of every calibration cache key); ``info``: cpuinfo's text."""
    info = _cpuinfo() if info is None else info
    for line in (info or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def cpu_label(info: str | None = None) -> str:
    """The model name and the vector extensions present, e.g. ``Intel Xeon (AVX-512 BF16, VNNI, AMX, AVX2)``."""
    info = _cpuinfo() if info is None else info
    if info is None:
        return platform.processor() or platform.machine()
    name = cpu_model(info) or platform.machine()
    flags = next((set(line.split(":", 1)[1].split()) for line in info.splitlines() if line.startswith("flags")), set())
    ext = [label for flag, label in EXTENSIONS if flag in flags]
    return f"{name} ({', '.join(ext)})" if ext else name
