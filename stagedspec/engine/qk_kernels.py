"""A GGUF's own Q4_K / Q6_K blocks as GEMM weights, with int8 activations (``qk_kernels.c``).

Why this exists: a CPU target step is a read of the weights, and the GGUF holds them in
~4.5-6.6 bits; dequantized to bfloat16 a step reads 3x the bytes. torch's own int4 kernel
takes only Q4_K (not the file's Q6_K third) and, past two rows, costs more than the dense
GEMM; torchao's CPU kernels are not in its wheel. So the product is written here, in C, in
llama.cpp's arithmetic (each activation row quantized per 256 columns to int8; exact int32
dot products with the blocks' codes; the blocks' float scales applied per block), with two
loops over the same arithmetic:

* ``rows``: 4 rows at a time against the unpacked block (best at 1 to a few rows: the step is
  a read of the blocks);
* ``cols``: 16 weight rows side by side in the SIMD lanes (a second copy of the weights in
  that layout, made at its first use), 4 activations of a row broadcast into one VNNI dot
  product where the CPU has one, 8 rows at a time (best for more rows: an extra row costs its
  integer dot products and little else). On CPUs with AMX-INT8 (where Linux grants the tile
  state) the same loop takes its integer sums from tile products, 16 rows at a time, and
  gives the same bits; ``STAGEDSPEC_AMX=0`` keeps it on VNNI.

Each loop gives a row the same result whatever rows come with it (bitwise); the two loops
sum the same exact integers in another float order, so they differ by float rounding
(~1e-7 relative). The C source compiles once per machine (gcc or cc, ``-O3``, AVX-512 flags
only where /proc/cpuinfo lists them, AMX's where it lists those and the compiler takes them;
else AVX2 and FMA where it lists those (the ``rows`` loop in 256-bit registers, as on AMD Zen 2);
a scalar build otherwise; ``cols`` needs AVX-512) into the cache directory beside the kernel
calibrations.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("qk_kernels.c")
QK = 256
"""Input columns per block (Q4_K and Q6_K super-blocks; the activation quantization's block)."""
KINDS = {"q4_k": 4, "q6_k": 6}
RAW_BYTES = {"q4_k": 144, "q6_k": 210}
"""Bytes per 256 weights in a GGUF (Q4_K, Q6_K super-blocks)."""
Q4_BLOCK_BYTES = 152
"""Bytes of a repacked Q4_K block (``q4_block`` in the C source: d, dmin, sc[8], m[8], qs[128])."""

# the CPU flags that decide the build, and the compiler flags they allow
_SIMD_FLAGS = {
    "avx512f": "-mavx512f",
    "avx512bw": "-mavx512bw",
    "avx512vl": "-mavx512vl",
    "avx512dq": "-mavx512dq",
    "avx512_vnni": "-mavx512vnni",
    "fma": "-mfma",
    "amx_tile": "-mamx-tile",
    "amx_int8": "-mamx-int8",
}
_NEEDED = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "fma")
_AVX2_FLAGS = ("-mavx2", "-mfma")
_AMX_FLAGS = ("-mamx-tile", "-mamx-int8")
AMX_ENV = "STAGEDSPEC_AMX"
"""Set to 0 to keep the cols loop off the AMX tiles (same bits; for A/B timings)."""


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def compile_flags(flags: set[str]) -> list[str]:
    """The build's machine flags: AVX-512 (with VNNI, and AMX's tile and int8 flags, where listed)
    when the CPU lists all of ``_NEEDED``; else AVX2 and FMA where it lists both (the rows loop in
    256-bit registers, no cols loop); none otherwise (the scalar build)."""
    if not all(f in flags for f in _NEEDED):
        return list(_AVX2_FLAGS) if all(f in flags for f in ("avx2", "fma")) else []
    return [v for k, v in _SIMD_FLAGS.items() if k in flags]


def _cache_dir() -> Path:
    return Path(os.environ.get("STAGEDSPEC_CACHE") or "~/.cache/stagedspec").expanduser() / "kernels"


_NO_AMX: set[str] = set()
"""Compilers (paths) that refused the AMX flags: the build goes on without them."""


BUILDS = ("machine", "avx2", "scalar")
"""The kernel's builds: this CPU's flags (what runs), AVX2 + FMA only, none (tests run all three where the
CPU can)."""


def build_flags(build: str = "machine") -> list[str]:
    # -ffp-contract=off: a * b + c stays two roundings where the source says so (the dequantized
    # weights must equal the GGUF reader's, which fuses nothing); the kernels' fused steps are explicit
    if build not in BUILDS:
        raise ValueError(f"kernel build {build!r}: expected one of {', '.join(BUILDS)}")
    flags = compile_flags(cpu_flags()) if build == "machine" else list(_AVX2_FLAGS) if build == "avx2" else []
    if _compiler() in _NO_AMX:
        flags = [f for f in flags if f not in _AMX_FLAGS]
    return ["-O3", "-ffp-contract=off", "-fPIC", "-shared", "-fopenmp", *flags]


def build_tag(build: str = "machine") -> str:
    """The build's identity: the source and the flags (part of the kernel calibration's key)."""
    return hashlib.sha256(SOURCE.read_bytes() + " ".join(build_flags(build)).encode()).hexdigest()[:16]


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


_LIBS: dict[str, ctypes.CDLL] = {}
_SCRATCH = threading.Lock()
"""Held around ``qk_linear`` and the layer calls: they keep scratch buffers in C, and ctypes releases the GIL
during the call, so two Python threads must not run them at once."""


class KernelBuildError(RuntimeError):
    pass


def library(build: str = "machine") -> ctypes.CDLL:
    """The compiled kernels (built at the first call on this machine, then cached); ``build``: this
    CPU's (``machine``), or, for tests, ``avx2`` (what an AVX2-only CPU runs) or ``scalar`` (none)."""
    if build in _LIBS:
        return _LIBS[build]
    out = _build(build)
    if out is None:  # a compiler that does not know AMX: the same build without it
        _NO_AMX.add(_compiler())
        out = _build(build)
        assert out is not None
    lib = ctypes.CDLL(str(out))
    P, I, C = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.qk_repack_q4k.argtypes = [P, I, P]
    lib.qk_repack_q6k.argtypes = [P, I, P]
    lib.qk_dequant_q4.argtypes = [P, I, P]
    lib.qk_dequant_q6.argtypes = [P, I, P]
    lib.qk_quantize.argtypes = [P, I, I, P, P, P, C]
    if lib.qk_simd():
        lib.qk_cols_q4.argtypes = [P, I, I, P]
        lib.qk_cols_q6.argtypes = [P, I, I, P]
    assert lib.qk_q4_block_bytes() == Q4_BLOCK_BYTES
    assert lib.qk_layer_struct_bytes() == ctypes.sizeof(_Layer)
    lib.qk_amx.argtypes = [C]
    if build == "machine":
        lib.qk_amx(0 if os.environ.get(AMX_ENV) == "0" else 1)
    lib.qk_linear.argtypes = [P, C, I, I, I, C, P, P, P, P, C, P, P, C, I, C]
    lib.qk_layer1.argtypes = [P, P, P, P, P, P, I, I, P, C]
    lib.qk_layer_pre.argtypes = [P, P, I, P, P, P, P, P, I, I, C, C]
    lib.qk_layer_post.argtypes = [P, P, P, I, C, C]
    _LIBS[build] = lib
    return lib


def _build(build: str) -> Path | None:
    """The library for this source and these flags (compiled at the first call); None where a
    build with AMX flags failed, now or in an earlier process (the caller retries without them);
    raises on any other failure."""
    flags = build_flags(build)
    out = _cache_dir() / f"qk_kernels-{build_tag(build)}.so"
    refused = out.with_suffix(".no-amx")  # this compiler refused these AMX flags once: no second try a process
    if out.is_file():
        return out
    if refused.is_file():
        return None
    cc = _compiler()
    if cc is None:
        raise KernelBuildError(
            "weights=gguf_native needs a C compiler (gcc or cc, or $CC) to build its kernel; "
            "install one or use target.weights=gguf_q4 / dense"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".qk_kernels-", suffix=".so", dir=out.parent)
    os.close(fd)
    cmd = [cc, *flags, str(SOURCE), "-o", tmp, "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        if any(f in flags for f in _AMX_FLAGS):
            log.info("%s refused the AMX build (%s); building without AMX", cc, r.stderr.strip()[-300:])
            refused.write_text(r.stderr[-2000:])
            return None
        raise KernelBuildError(f"building {SOURCE.name} failed ({' '.join(cmd)}):\n{r.stderr[-2000:]}")
    os.replace(tmp, out)
    log.info("built %s (%s)", out, " ".join(flags))
    return out


def use_amx(on: bool) -> bool:
    """Run the cols loop's integer sums on AMX tiles (``on``, where the build and Linux allow them)
    or on VNNI; returns whether the tiles are now in use. The bits are the same either way."""
    return bool(library().qk_amx(1 if on else 0))


def amx_in_use() -> bool:
    """Whether the cols loop runs on AMX tiles (an AMX build on a CPU and kernel that grant them)."""
    return bool(library().qk_amx(-1))


def has_cols() -> bool:
    """Whether this machine's build has the ``cols`` loop (the AVX-512 build)."""
    return bool(library().qk_simd())


@dataclass
class Segment:
    """Output rows [start, start + rows) of a GEMM, from one tensor's repacked blocks."""

    kind: str
    blocks: torch.Tensor  # uint8, repacked (qk_repack_*)
    start: int
    rows: int
    cols: int
    cache: dict = field(default_factory=dict)
    """Holds the same blocks with 16 weight rows side by side (``qk_cols_*``), made at the first
    ``cols`` product; segments made from one another (``dataclasses.replace``) share it."""

    def col_panels(self) -> torch.Tensor:
        if "panels" not in self.cache:
            lib = library()
            nb = self.cols // QK
            size = lib.qk_q4_col_bytes() if self.kind == "q4_k" else lib.qk_q6_col_bytes()
            out = torch.empty(-(-self.rows // 16) * nb * size, dtype=torch.uint8)
            (lib.qk_cols_q4 if self.kind == "q4_k" else lib.qk_cols_q6)(
                self.blocks.data_ptr(), self.rows, nb, out.data_ptr()
            )
            self.cache["panels"] = out
        return self.cache["panels"]


def encode_q4k(w: torch.Tensor, chunk: int = 2048) -> Segment:
    """A dense weight ([N, K]) re-encoded as Q4_K blocks in the kernel's layout, its columns
    padded with zeros to a multiple of 256: per group of 32 a 4-bit code q, ``w ~ d * sc * q -
    dmin * m`` with the group's range [min(w, 0), max(w, 0)] cut in 15 steps, sc and m the
    6-bit multiples of the block's d = max scale / 63 and dmin = max offset / 63 nearest to it,
    then one least-squares refit of each group's scale and offset to its codes (kept where
    both stay >= 0; a group with no negative value keeps offset 0) and the codes chosen again. Not the file's weights: a draft's (its q is
    what this computes, so the output stays exact); ~0.076 relative error on Gaussian weights,
    as a 4-bit group-of-32 min/max code (0.079)."""
    N, K = w.shape
    Kp = -(-K // QK) * QK
    nb = Kp // QK
    out = torch.empty(N * nb, Q4_BLOCK_BYTES, dtype=torch.uint8)  # d, dmin (float32), sc[8], m[8], qs[128]
    for lo in range(0, N, chunk):
        hi = min(N, lo + chunk)
        g = torch.zeros(hi - lo, Kp, dtype=torch.float32)
        g[:, :K] = w[lo:hi].float()
        g = g.view(hi - lo, nb, 8, 32)
        scale = (g.amax(-1).clamp(min=0) - g.amin(-1).clamp(max=0)) / 15
        bias = -g.amin(-1).clamp(max=0) + 0.0  # + 0.0: no -0.0 offsets
        for refit in (True, False):
            d = scale.amax(-1, keepdim=True) / 63
            dmin = bias.amax(-1, keepdim=True) / 63
            sc = torch.where(d > 0, scale / d, 0.0).round().clamp(0, 63)
            m = torch.where(dmin > 0, bias / dmin, 0.0).round().clamp(0, 63)
            s_eff, b_eff = (d * sc).unsqueeze(-1), (dmin * m).unsqueeze(-1)
            q = torch.where(s_eff > 0, (g + b_eff) / s_eff, 0.0).round().clamp(0, 15)
            if not refit:
                break
            qc, gc = q - q.mean(-1, keepdim=True), g - g.mean(-1, keepdim=True)
            var = (qc * qc).mean(-1)
            s_new = (qc * gc).mean(-1) / var.clamp_min(1e-30)
            b_new = torch.where(bias > 0, s_new * q.mean(-1) - g.mean(-1), 0.0)  # no negative value: offset 0
            ok = (var > 0) & (s_new > 0) & (b_new >= 0)
            scale, bias = torch.where(ok, s_new, scale), torch.where(ok, b_new, bias)
        rows = slice(lo * nb, hi * nb)
        out[rows, 0:4] = d.reshape(-1).contiguous().view(torch.uint8).view(-1, 4)
        out[rows, 4:8] = dmin.reshape(-1).contiguous().view(torch.uint8).view(-1, 4)
        out[rows, 8:16] = sc.reshape(-1, 8).to(torch.uint8)
        out[rows, 16:24] = m.reshape(-1, 8).to(torch.uint8)
        qb = q.reshape(-1, 4, 2, 32).to(torch.uint8)  # chunk c: element 64c + i low nibble, 64c + 32 + i high
        out[rows, 24:] = (qb[:, :, 0] | (qb[:, :, 1] << 4)).reshape(-1, 128)
    return Segment("q4_k", out.reshape(-1), 0, N, Kp)


def repack(kind: str, raw: torch.Tensor) -> torch.Tensor:
    """A GGUF tensor's raw blocks ([out, in / 256 * bytes], uint8) in the kernel's layout."""
    lib = library()
    raw = raw.contiguous()
    n = raw.numel() // RAW_BYTES[kind]
    size = lib.qk_q4_block_bytes() if kind == "q4_k" else lib.qk_q6_block_bytes()
    out = torch.empty(n * size, dtype=torch.uint8)
    (lib.qk_repack_q4k if kind == "q4_k" else lib.qk_repack_q6k)(raw.data_ptr(), n, out.data_ptr())
    return out


def dequantize(seg: Segment) -> torch.Tensor:
    """The float32 weight ([rows, cols]) a segment's blocks hold."""
    lib = library()
    out = torch.empty(seg.rows, seg.cols, dtype=torch.float32)
    fn = lib.qk_dequant_q4 if seg.kind == "q4_k" else lib.qk_dequant_q6
    fn(seg.blocks.data_ptr(), seg.rows * seg.cols // QK, out.data_ptr())
    return out


def matmul(
    x: torch.Tensor, segments: list[Segment], cols_from: int = 0, threads: int | None = None, build: str = "machine"
) -> torch.Tensor:
    """``x @ W.T`` ([m, K] float -> [m, N] float32) with W the segments' blocks stacked by rows,
    x quantized to int8 per row and block of 256; through the ``cols`` loop (AVX-512 builds) when
    ``cols_from`` is set and ``m >= cols_from``, else the 4-row loop (``build``: ``library``'s)."""
    return linear(x.to(torch.float32), segments, None, cols_from, threads, build)


def _takes_cols(lib: ctypes.CDLL, rows: int, cols_from: int) -> bool:
    """Whether a product of ``rows`` rows runs the cols loop: from ``cols_from`` rows (0: never), where the build has it."""
    return bool(cols_from) and rows >= cols_from and bool(lib.qk_simd())


def linear(
    x: torch.Tensor,
    segments: list[Segment],
    bias: torch.Tensor | None = None,
    cols_from: int = 0,
    threads: int | None = None,
    build: str = "machine",
) -> torch.Tensor:
    """``x @ W.T + bias`` in x's dtype (float32 or bfloat16; [m, K] -> [m, N]) in one call of the
    kernel: the same bits as ``matmul(x, ...).to(x.dtype) + bias``. The blocks may be wider than
    x (re-encoded weights padded with zero columns to a multiple of 256): x is padded to match."""
    if x.dtype not in (torch.float32, torch.bfloat16):  # e.g. float16: the product in float32, then as torch would
        y = linear(x.to(torch.float32), segments, None, cols_from, threads, build).to(x.dtype)
        return y if bias is None else y + bias
    lib = library(build)
    m, K = x.shape
    x = x.contiguous()
    Kp = _blocks_cols(segments, K)
    cols = _takes_cols(lib, m, cols_from)
    N = segments[-1].start + segments[-1].rows
    y = torch.empty(m, N, dtype=x.dtype)
    if bias is not None:
        bias = bias.to(x.dtype).contiguous()
    args = _call_args(lib, segments, cols)
    with _SCRATCH:
        rc = lib.qk_linear(
            x.data_ptr(),
            int(x.dtype == torch.bfloat16),
            m,
            K,
            Kp,
            *args,
            int(cols),
            None if bias is None else bias.data_ptr(),
            y.data_ptr(),
            int(x.dtype == torch.bfloat16),
            N,
            threads or torch.get_num_threads(),
        )
    if rc:
        raise MemoryError(f"the kernel could not allocate its buffers for {m} x {Kp} activations")
    return y


def _blocks_cols(segments: list[Segment], K: int) -> int:
    """The segments' width (a multiple of 256), checked to take ``K``-column activations."""
    Kp = segments[0].cols
    if Kp < K or Kp % QK:
        raise ValueError(f"blocks of {Kp} columns cannot multiply {K}-column activations")
    return Kp


def _call_args(lib: ctypes.CDLL, segments: list[Segment], cols: bool) -> tuple:
    """The segments as the C call takes them (count, kinds, weight pointers, rows, starts), made
    once per segment list and loop and kept in the first segment's cache with the segments
    themselves (so no other list can take their ids while the entry lives)."""
    key = ("call", id(lib), cols, *map(id, segments))
    store = segments[0].cache
    if key not in store:
        n = len(segments)
        ws = [(s.col_panels() if cols else s.blocks).data_ptr() for s in segments]
        store[key] = (
            tuple(segments),
            (
                n,
                (ctypes.c_int * n)(*(KINDS[s.kind] for s in segments)),
                (ctypes.c_void_p * n)(*ws),
                (ctypes.c_int64 * n)(*(s.rows for s in segments)),
                (ctypes.c_int64 * n)(*(s.start for s in segments)),
            ),
        )
    return store[key][1]


def _quantize(lib: ctypes.CDLL, x: torch.Tensor, threads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x`` ([m, K]) quantized per row and block of 256: scales (float32, [m * K / 256]), int8
    codes ([m * K]) and sums of 16 codes (int16, [m * K / 16]), as the kernels read them."""
    m, K = x.shape
    x = x.to(torch.float32).contiguous()
    nb = K // QK
    xd = torch.empty(m * nb, dtype=torch.float32)
    xq = torch.empty(m * nb * QK, dtype=torch.int8)
    xs = torch.empty(m * nb * 16, dtype=torch.int16)
    lib.qk_quantize(x.data_ptr(), m, K, xd.data_ptr(), xq.data_ptr(), xs.data_ptr(), threads)
    return xd, xq, xs


def quantize_activations(x: torch.Tensor) -> torch.Tensor:
    """What the kernel multiplies by: ``x`` ([m, K]) quantized and dequantized (float32)."""
    m, K = x.shape
    xd, xq, _ = _quantize(library(), x, 1)
    return (xq.view(m, K // QK, QK).float() * xd.view(m, K // QK, 1)).reshape(m, K)


# --------------------------------------------------------------------------- one decoder layer, one row
class _Lin(ctypes.Structure):
    _fields_ = [
        ("nseg", ctypes.c_int),
        ("kinds", ctypes.c_void_p),
        ("ws", ctypes.c_void_p),
        ("rows", ctypes.c_void_p),
        ("starts", ctypes.c_void_p),
        ("K", ctypes.c_int64),
        ("Kp", ctypes.c_int64),
        ("N", ctypes.c_int64),
        ("bias", ctypes.c_void_p),
        ("ws_cols", ctypes.c_void_p),
    ]


class _Layer(ctypes.Structure):
    _fields_ = [
        ("H", ctypes.c_int64),
        ("nq", ctypes.c_int64),
        ("nkv", ctypes.c_int64),
        ("D", ctypes.c_int64),
        ("I", ctypes.c_int64),
        ("eps1", ctypes.c_float),
        ("eps2", ctypes.c_float),
        ("scale", ctypes.c_float),
        ("ln1", ctypes.c_void_p),
        ("ln2", ctypes.c_void_p),
        ("qkv", _Lin),
        ("o", _Lin),
        ("gu", _Lin),
        ("down", _Lin),
    ]


MAX_HEAD_DIM = 512
"""The widest attention head ``layer1`` takes (its per-head buffers)."""


def takes_heads(heads: tuple[int, int, int]) -> bool:
    """Whether ``layer1`` takes these attention heads (query heads, key / value heads, head dim):
    an even head dim up to ``MAX_HEAD_DIM``, whole query groups."""
    nq, nkv, D = heads
    return D <= MAX_HEAD_DIM and D % 2 == 0 and nq % nkv == 0


@dataclass
class LayerWeights:
    """What ``layer1`` reads of one decoder layer: its four GEMMs' segments (q/k/v fused, o,
    gate/up fused, down) and biases, its two RMSNorm weights and epsilons (all bfloat16), its
    head counts and attention scale."""

    qkv: list[Segment]
    o: list[Segment]
    gate_up: list[Segment]
    down: list[Segment]
    biases: tuple[torch.Tensor | None, ...]  # per GEMM, bfloat16
    norms: tuple[torch.Tensor, torch.Tensor]
    eps: tuple[float, float]
    heads: tuple[int, int, int]  # query heads, key / value heads, head dim
    scale: float
    _structs: dict = field(default_factory=dict, repr=False)

    def struct(self, cols: bool = False) -> _Layer:
        """The C struct (made once per ``cols``; it points into the tensors and argument arrays this
        object and the segments keep); ``cols``: with the segments' panels for the cols loop."""
        if cols not in self._structs:
            lib = library()
            nq, nkv, D = self.heads
            if not takes_heads(self.heads):
                raise ValueError(
                    f"layer1 takes head_dim <= {MAX_HEAD_DIM}, even, and whole query groups (got {self.heads})"
                )
            H = self.norms[0].numel()
            inter = (self.gate_up[-1].start + self.gate_up[-1].rows) // 2
            lins = []
            for segs, bias, K in zip((self.qkv, self.o, self.gate_up, self.down), self.biases, (H, nq * D, H, inter)):
                n, kinds, ws, rows, starts = _call_args(lib, segs, False)
                panels = _call_args(lib, segs, True)[2] if cols else None
                N = segs[-1].start + segs[-1].rows
                lins.append(
                    _Lin(
                        n,
                        ctypes.addressof(kinds),
                        ctypes.addressof(ws),
                        ctypes.addressof(rows),
                        ctypes.addressof(starts),
                        K,
                        _blocks_cols(segs, K),
                        N,
                        None if bias is None else bias.data_ptr(),
                        None if panels is None else ctypes.addressof(panels),
                    )
                )
            self._structs[cols] = _Layer(
                H,
                nq,
                nkv,
                D,
                inter,
                self.eps[0],
                self.eps[1],
                self.scale,
                self.norms[0].data_ptr(),
                self.norms[1].data_ptr(),
                *lins,
            )
        return self._structs[cols]


def layer1(
    w: LayerWeights,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slot: int,
    mask: torch.Tensor | None = None,
    threads: int | None = None,
) -> None:
    """One decoder layer for one new token, in place: ``x`` (bfloat16, [hidden], contiguous)
    becomes the layer's output; its key and value heads are written into cache slot ``slot`` of
    ``keys`` / ``values`` (bfloat16, [heads, capacity, head_dim], contiguous), and it attends to
    slots 0..slot; ``mask``: float32 additive, [slot + 1], or None (all of them)."""
    lib = library()
    with _SCRATCH:
        rc = lib.qk_layer1(
            ctypes.byref(w.struct()),
            x.data_ptr(),
            cos.data_ptr(),
            sin.data_ptr(),
            keys.data_ptr(),
            values.data_ptr(),
            keys.shape[-2],
            slot,
            None if mask is None else mask.data_ptr(),
            threads or torch.get_num_threads(),
        )
    if rc:
        raise MemoryError("the layer kernel could not allocate its buffers")


def layer_rows(
    w: LayerWeights,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    start: int,
    attend: Callable[[torch.Tensor], torch.Tensor],
    cols_from: int = 0,
    threads: int | None = None,
) -> None:
    """One decoder layer for n new tokens of one sequence, in place, in two kernel calls around
    ``attend``: ``x`` (bfloat16, [n, hidden], contiguous) becomes the layer's output; row r's key
    and value heads go into cache slot ``start + r`` of ``keys`` / ``values`` (bfloat16, [heads,
    capacity, head_dim]); ``cos`` / ``sin``: [n, head_dim]. ``attend(q)`` takes the rotated
    queries ([n, query heads, head_dim]) and returns the attention's output ([n, query heads *
    head_dim], contiguous): the caller's SDPA over the cache, with its mask. ``cols_from``: as
    ``linear``'s (the GEMMs through the cols loop from that many rows)."""
    lib = library()
    n = x.shape[0]
    nq, _, D = w.heads
    cols = _takes_cols(lib, n, cols_from)
    st = ctypes.byref(w.struct(cols))
    q = torch.empty(n, nq, D, dtype=torch.bfloat16)
    t = threads or torch.get_num_threads()
    with _SCRATCH:
        rc = lib.qk_layer_pre(
            st,
            x.data_ptr(),
            n,
            cos.data_ptr(),
            sin.data_ptr(),
            q.data_ptr(),
            keys.data_ptr(),
            values.data_ptr(),
            keys.shape[-2],
            start,
            int(cols),
            t,
        )
    if rc:
        raise MemoryError("the layer kernel could not allocate its buffers")
    att = attend(q)
    if att.dtype != torch.bfloat16 or att.shape != (n, nq * D) or not att.is_contiguous():
        raise ValueError(
            f"attend must return a contiguous bfloat16 [{n}, {nq * D}] tensor, got {att.dtype} {tuple(att.shape)}"
        )
    with _SCRATCH:
        rc = lib.qk_layer_post(st, x.data_ptr(), att.data_ptr(), n, int(cols), t)
    if rc:
        raise MemoryError("the layer kernel could not allocate its buffers")
