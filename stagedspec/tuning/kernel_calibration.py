"""The fast kernel plan, calibrated on this machine: each GEMM path the engine offers
(``stagedspec/engine/kernels.py``) timed over all of a model's Linear weights for each row
count, the fastest kept within a budget of prepacked weight copies, and the result cached
per machine, model, dtype and threads (``kernels=fast``); ``kernels=hf`` is Hugging Face's
own path."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from stagedspec.metrics.machine import cpu_model
from stagedspec.engine.kernels import (
    HF_KERNELS,
    PATH_LINEAR,
    PATH_MKLDNN,
    PATH_WXT,
    KernelChoice,
    PATH_INT4,
    apply_path,
    available_paths,
    gemm_modules,
    long_path_for,
    install,
    native_forward,
)
from stagedspec.engine.qk_kernels import build_tag, has_cols
from .disk_cache import write_json_atomically
from .tree_calibration import isotonic

log = logging.getLogger(__name__)

SLOW_PASS_MS = 250.0
"""A pass over the Linear weights this slow, for the fastest path at ``COARSE_FROM`` rows or more, marks
a dense GEMM that grows with its rows (bf16 on a CPU without AVX-512 BF16: the 1.5B's pass 204 ms at one
row, 6.0 s at 32, on a 2-core AMD EPYC (Zen 2), a calibration of 15 minutes timed at every row count);
from there only ``COARSE_ROWS`` are timed and the row counts between filled in (``fill_rows``)."""
COARSE_FROM = 8
COARSE_ROWS = (8, 12, 16, 24, 32)

MAX_ROWS = 32
"""Row counts the calibration covers (a bypass draft of 24 verifies 25); a plan takes
``KernelChoice.long_path`` for more rows."""

CALIBRATION_VERSION = 5
"""Part of the cache key: raised when the timing procedure changes (2: an untimed pass per
path first and the fastest pass kept, rows up to 32; 3, 4: the GGUF-native kernel's two loops
timed; 5: slow passes timed at ``COARSE_ROWS`` only), so that no calibration made the old way is read back. A plan from version 1, made on a busy machine, had the 1.5B verify 6, 8
and 11 rows through F.linear at 1.5x mkldnn's time."""


@dataclass
class Calibration:
    """Seconds per pass over all Linear weights, per row count and path, and the plan."""

    key: dict
    times_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # rows -> path -> ms
    plan: dict = field(default_factory=dict)
    seconds: float = 0.0
    int4_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    """rows -> {"int4": ms, "dense": ms}: one pass over the modules holding their file's own
    4-bit codes, through the int4 kernel and through the plan's dense path."""
    native_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    """rows -> {"rows": ms, "cols": ms}: one pass over the modules holding their GGUF's own
    blocks (``weights=gguf_native``) through each of the kernel's two loops."""


INT4_MAX_ROWS = 8
"""Row counts the exact 4-bit path is timed at (torch's int4 kernel grows about linearly
with the rows; past a few rows the dense GEMM wins)."""


def exact_int4_modules(model: nn.Module) -> list[nn.Linear]:
    """The GEMM modules holding their file's own 4-bit codes (``models/gguf_int4.py``)."""
    return [m for m in gemm_modules(model) if getattr(m, "_stagedspec_int4_exact", False)]


def native_modules(model: nn.Module) -> list[nn.Linear]:
    """The GEMM modules holding their GGUF's own blocks (``models/gguf_native.py``)."""
    return [m for m in gemm_modules(model) if getattr(m, "_stagedspec_native", None)]


NATIVE_ROWS_MAX = 16
"""The kernel's 4-row loop is timed up to here (its cost grows linearly; the calibration has
always found the ``cols`` loop faster well before)."""


def _time_native(model: nn.Module, max_rows: int, reps: int) -> dict[str, dict[str, float]]:
    """For 1..``max_rows`` rows: one pass over the modules holding GGUF blocks through the
    kernel's ``cols`` loop (AVX-512 builds) and, up to ``NATIVE_ROWS_MAX`` rows, its 4-row loop."""
    mods = native_modules(model)
    out: dict[str, dict[str, float]] = {}
    if not mods:
        return out
    cols = has_cols()
    for m in range(1, max_rows + 1):
        xs = [torch.randn(m, mod.in_features, dtype=mod.weight.dtype) for mod in mods]
        loops = ({"rows": 0} if m <= NATIVE_ROWS_MAX or not cols else {}) | ({"cols": 1} if cols else {})
        out[str(m)] = {
            k: _time_pass(mods, xs, lambda mod, x, f=f: native_forward(mod, x, f), reps) for k, f in loops.items()
        }
    return out


def cols_from(native_ms: dict[str, dict[str, float]]) -> int:
    """The least row count from which the ``cols`` loop is faster than the 4-row loop at every
    row count timed with both (0: never, or a build without it)."""
    both = sorted(int(m) for m, t in native_ms.items() if "rows" in t and "cols" in t)
    best = 0
    for m in reversed(both):
        t = native_ms[str(m)]
        if t["cols"] >= t["rows"]:
            break
        best = m
    return best


def native_cost(native_ms: dict[str, dict[str, float]], cols_from: int, m: int) -> float:
    """ms of one pass of ``m`` rows through the native kernel's loop for ``m`` rows (past the
    timed row counts: the last one's time, scaled by the rows)."""
    loop = "cols" if cols_from and m >= cols_from else "rows"
    timed = max(int(k) for k, t in native_ms.items() if loop in t)
    if m > timed:
        return native_ms[str(timed)][loop] * m / timed
    return native_ms[str(m)][loop]


def _linears(model: nn.Module) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


def calibration_key(model: nn.Module, dtype: torch.dtype, threads: int, device: torch.device) -> dict:
    sizes = [list(m.weight.shape) for m in _linears(model)]
    return {
        "machine": platform.machine(),
        "processor": cpu_model(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "model": getattr(getattr(model, "config", None), "_name_or_path", "") or "",
        "weights": hashlib.sha256(json.dumps(sizes).encode()).hexdigest()[:16],
        "n_linear": len(sizes),
        "dtype": str(dtype).removeprefix("torch."),
        "threads": threads,
        "device": str(device),
        "int4_exact": len(exact_int4_modules(model)),
        "native": len(native_modules(model)),
        **({"native_kernel": build_tag()} if native_modules(model) else {}),
    }


def _time_pass(mods: list[nn.Linear], xs: list[torch.Tensor], path, reps: int) -> float:
    """Fastest ms of one pass over every Linear weight (the memory traffic of a forward):
    the minimum, not the median, since every disturbance (another process, a page fault)
    only adds time. ``path``: a path name (``apply_path``) or a function (module, x) -> y."""
    if isinstance(path, str):
        name = path
        path = lambda mod, x: apply_path(mod, name, x)  # noqa: E731
    with torch.no_grad():
        for mod, x in zip(mods, xs):  # warm-up, and packs the weights on first use
            path(mod, x)
        times: list[float] = []
        for _ in range(reps):
            # a big model: 3 passes of over 0.3 s say enough; 2 of over 0.5 s (seconds a pass: not a step's path)
            if sum(times) > 1.0 and (len(times) >= 3 or times[-1] > 0.5):
                break
            t0 = time.perf_counter()
            for mod, x in zip(mods, xs):
                path(mod, x)
            times.append(time.perf_counter() - t0)
    return 1000 * min(times)


def calibrate(
    model: nn.Module,
    max_rows: int = MAX_ROWS,
    max_packs: int = 2,
    reps: int = 7,
    cache_dir: str | Path | None = None,
    name: str = "fast",
    slow_pass_ms: float = SLOW_PASS_MS,
) -> tuple[KernelChoice, Calibration]:
    """Time each available GEMM path for 1..max_rows rows over all of ``model``'s Linear
    weights; keep the fastest per row count using at most ``max_packs`` prepacked copies
    of the weights (each costs the model's Linear weights in memory again). Cached in
    ``cache_dir``/kernels (default $STAGEDSPEC_CACHE, else ~/.cache/stagedspec) by machine,
    model, dtype and threads, and by every argument that changes the result (``max_rows``,
    ``max_packs``, ``reps``, ``name``): a quick calibration (``reps=1``) never stands in
    for a full one. Where passes are slow (``slow_pass_ms``), many-row counts are timed coarsely
    (``_time_paths``)."""
    install(model)
    p = next(model.parameters())
    key = calibration_key(model, p.dtype, torch.get_num_threads(), p.device)
    args = {"max_rows": max_rows, "max_packs": max_packs, "reps": reps, "name": name, "version": CALIBRATION_VERSION}
    if slow_pass_ms != SLOW_PASS_MS:
        args["slow_pass_ms"] = slow_pass_ms
    digest = hashlib.sha256(json.dumps({**key, **args}, sort_keys=True).encode()).hexdigest()[:20]
    cache = Path(cache_dir or os.environ.get("STAGEDSPEC_CACHE") or "~/.cache/stagedspec").expanduser() / "kernels"
    f = cache / f"{digest}.json"
    if f.is_file():
        return _cached(f)
    t0 = time.perf_counter()
    paths = available_paths(p.dtype, p.device)
    mods = gemm_modules(model)
    # the dense table even when the native kernel takes every module: draft levels run this plan too
    times = _time_paths(mods, paths, max_rows, reps, p.dtype, p.device, slow_pass_ms)
    linear = choose_paths(times, max_packs) if times else [PATH_LINEAR] * max_rows
    int4_ms = _time_exact_int4(model, linear, reps)
    int4_rows = next((int(m) - 1 for m, t in int4_ms.items() if t["int4"] >= t["dense"]), len(int4_ms))
    native_ms = _time_native(model, max_rows, reps)
    _drop_unused_packs(mods, linear)
    plan = KernelChoice(
        name=name,
        linear=tuple(linear),
        long_path=long_path_for(linear),
        gqa_packing=True,
        slot_cache=True,
        lean_layers=True,
        int4_rows=int4_rows,
        int4_exact=bool(int4_rows),
        native=bool(native_ms),
        native_cols_from=cols_from(native_ms),
    )
    cal = Calibration(
        key={**key, **args},
        times_ms=times,
        plan={**asdict(plan), "linear": list(plan.linear)},
        seconds=time.perf_counter() - t0,
        int4_ms=int4_ms,
        native_ms=native_ms,
    )
    write_json_atomically(f, asdict(cal), "kernel calibration", shown=cache)
    plan = dataclasses.replace(plan, step_curve=step_curve(cal, plan))
    log.info("calibrated kernels in %.1f s: %s", cal.seconds, plan.describe())
    return plan, cal


def _cached(f: Path) -> tuple[KernelChoice, Calibration]:
    """The plan and calibration a cache file ``f`` holds."""
    cal = Calibration(**json.loads(f.read_text()))
    known = {fl.name for fl in dataclasses.fields(KernelChoice)}  # a field since renamed or dropped: ignored
    plan = KernelChoice(
        **{k: v for k, v in cal.plan.items() if k in known}
        | {"linear": tuple(cal.plan["linear"]), "long_path": long_path_for(cal.plan["linear"])}
    )
    plan = dataclasses.replace(plan, step_curve=step_curve(cal, plan))
    log.info("kernel plan from %s: %s", f, plan.describe())
    return plan, cal


def step_curve(cal: Calibration, plan: KernelChoice) -> tuple[float, ...]:
    """T(n) / T(1) of ``plan``'s GEMMs at n = 1..the calibrated row counts: per row count the
    pass over all Linear weights through the path the plan takes there (with the 4-bit
    modules' own pass where it takes that), made non-decreasing (``isotonic``: a forward's cost
    does not fall with more rows, so noise in one timing is averaged with its neighbours) and
    divided by its first value; for a ``native`` plan, its kernel's passes (``native_cost``) at
    1..``MAX_ROWS`` rows. () when nothing was timed (one path: no choice was made)."""
    if plan.native and cal.native_ms:
        ms = isotonic([native_cost(cal.native_ms, plan.native_cols_from, m) for m in range(1, MAX_ROWS + 1)])
        return tuple(t / ms[0] for t in ms)
    rows = sorted(int(m) for m in cal.times_ms)
    if not rows or rows[0] != 1:
        return ()
    ms = []
    for m in rows:
        t = cal.times_ms[str(m)][plan.path(m, int4_ok=False)]
        four = cal.int4_ms.get(str(m))
        if m <= plan.int4_rows and four:
            t += four["int4"] - four["dense"]
        ms.append(t)
    ms = isotonic(ms)
    return tuple(t / ms[0] for t in ms)


def _time_paths(
    mods: list[nn.Linear],
    paths: list[str],
    max_rows: int,
    reps: int,
    dtype: torch.dtype,
    device: torch.device,
    slow_pass_ms: float = SLOW_PASS_MS,
) -> dict[str, dict[str, float]]:
    """Milliseconds of each candidate path over ``mods`` per row count 1..max_rows (``{}``
    with one path: nothing to choose, nothing to time). MKL's ``mklN`` is a candidate from
    N / 2 to N rows. Once the fastest pass at ``COARSE_FROM`` rows or more takes ``slow_pass_ms``,
    only ``COARSE_ROWS`` (and ``max_rows``) are timed, the rest filled in (``fill_rows``)."""
    times: dict[str, dict[str, float]] = {}
    if len(paths) < 2:
        return times
    # untimed: page in weights a fresh load left on disk, pack each path once
    for q in [q for q in paths if not q.startswith("mkl") or q == PATH_MKLDNN]:  # each mklN packs in its own pass
        _time_pass(mods, [torch.randn(1, mod.in_features, dtype=dtype, device=device) for mod in mods], q, 1)
    coarse = False
    for m in range(1, max_rows + 1):
        if coarse and m not in COARSE_ROWS and m != max_rows:
            continue
        xs = [torch.randn(m, mod.in_features, dtype=dtype, device=device) for mod in mods]
        cands = [q for q in paths if not q.startswith("mkl") or q == PATH_MKLDNN or m <= int(q[3:]) < 2 * m]
        times[str(m)] = {q: _time_pass(mods, xs, q, reps) for q in cands}
        coarse = coarse or (m >= COARSE_FROM and min(times[str(m)].values()) >= slow_pass_ms)
    return fill_rows(times, max_rows)


def fill_rows(times: dict[str, dict[str, float]], max_rows: int) -> dict[str, dict[str, float]]:
    """``times`` (rows -> path -> ms) at every row count 1..``max_rows``: a row count not timed
    takes, for each path timed at both its nearest timed neighbours, the straight line between
    them (a dense GEMM's time grows about linearly with its rows where a pass is this slow)."""
    timed = sorted(int(m) for m in times)
    out = {}
    for m in range(1, max_rows + 1):
        if str(m) in times:
            out[str(m)] = dict(times[str(m)])
            continue
        lo = max((r for r in timed if r < m), default=None)
        hi = min((r for r in timed if r > m), default=None)
        if lo is None or hi is None:
            continue
        f = (m - lo) / (hi - lo)
        a, b = times[str(lo)], times[str(hi)]
        out[str(m)] = {q: a[q] + (b[q] - a[q]) * f for q in a if q in b}
    return out


def _drop_unused_packs(mods: list[nn.Linear], linear: list[str]) -> None:
    """Free the prepacked weights the plan's paths do not use (a GGUF's own 4-bit codes stay)."""
    for mod in mods:
        for q in list(mod._stagedspec_packs):
            if q not in linear and not (q == PATH_INT4 and getattr(mod, "_stagedspec_int4_exact", False)):
                del mod._stagedspec_packs[q]


def _time_exact_int4(model: nn.Module, linear: list[str], reps: int) -> dict[str, dict[str, float]]:
    """For 1.. ``INT4_MAX_ROWS`` rows, until the dense path wins: one pass over the modules
    holding their file's own 4-bit codes through the int4 kernel, and through the path
    ``linear`` chose for that row count (the same weights either way)."""
    mods = exact_int4_modules(model)
    out: dict[str, dict[str, float]] = {}
    if not mods or mods[0].weight.device.type != "cpu":
        return out
    dtype = mods[0].weight.dtype
    for m in range(1, min(INT4_MAX_ROWS, len(linear)) + 1):
        xs = [torch.randn(m, mod.in_features, dtype=dtype) for mod in mods]
        out[str(m)] = {
            "int4": _time_pass(mods, xs, PATH_INT4, reps),
            "dense": _time_pass(mods, xs, linear[m - 1], reps),
        }
        if out[str(m)]["int4"] >= out[str(m)]["dense"]:
            break
    return out


def choose_paths(times: dict[str, dict[str, float]], max_packs: int) -> list[str]:
    """Fastest path per row count, using at most ``max_packs`` distinct prepacked paths:
    packs are added greedily by the total time they save over the best choice without them."""
    rows = sorted(times, key=int)
    free = {PATH_LINEAR, PATH_WXT}  # no prepacked copy of the weights
    allowed = {q for r in rows for q in times[r] if q in free}
    packs = {q for r in rows for q in times[r] if q not in free}

    def total(allow: set[str]) -> float:
        return sum(min(t for q, t in times[r].items() if q in allow) for r in rows)

    while len(allowed - free) < max_packs and packs - allowed:
        best = min(sorted(packs - allowed), key=lambda q: total(allowed | {q}))  # ties: name order
        if total(allowed | {best}) >= total(allowed) * 0.99:  # under 1% gain: not worth the memory
            break
        allowed.add(best)
    return [min((q for q in times[r] if q in allowed), key=lambda q: times[r][q]) for r in rows]


def kernel_plan(target, name: str) -> KernelChoice:
    """The plan a setting names for a loaded target: "hf" (Hugging Face's path) or
    "fast" (calibrated for this machine, model, dtype and threads; cached)."""
    if name == "hf":
        return HF_KERNELS
    if name != "fast":
        raise ValueError(f"kernels must be 'fast' or 'hf', got {name!r}")
    plan, _ = calibrate(target.model, cache_dir=target.spec.resolved_cache_dir())
    return plan
