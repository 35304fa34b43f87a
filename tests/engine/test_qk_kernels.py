"""The GGUF-native kernel (``engine/qk_kernels.py``, ``qk_kernels.c``): blocks decoded as gguf's
own reader decodes them, activations quantized as stated, products equal to the float64 product
of the two to float32 rounding, and each row's result independent of the rows beside it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize

from stagedspec.engine import qk_kernels as qk
from tests.helpers import random_gguf_blocks

QTYPES = {"q4_k": QT.Q4_K, "q6_k": QT.Q6_K}


def _segment(kind: str, rows: int, cols: int, seed: int = 0, start: int = 0) -> tuple[qk.Segment, np.ndarray]:
    raw = random_gguf_blocks(kind, rows, cols, seed)
    return qk.Segment(kind, qk.repack(kind, torch.from_numpy(raw)), start, rows, cols), raw


@pytest.mark.parametrize("kind", ["q4_k", "q6_k"])
def test_repacked_blocks_decode_to_ggufs_own_dequantization_bit_for_bit(kind):
    seg, raw = _segment(kind, rows=5, cols=768, seed=1)
    ref = torch.from_numpy(dequantize(raw, QTYPES[kind])).reshape(5, 768)
    assert torch.isfinite(ref).all() and ref.abs().max() > 0
    assert torch.equal(qk.dequantize(seg), ref)


def test_activations_are_quantized_per_256_columns_as_hand_computed():
    x = torch.zeros(2, 512)
    x[0, :3] = torch.tensor([2.0, -1.0, 0.5])  # max 2: scale 2/127, codes 127, -63.5 -> -64 (half to even), 31.75 -> 32
    x[0, 256] = -0.25  # second block: its own scale, 0.25/127, code -127
    # x[1]: all zero, a zero scale and zero codes
    got = qk.quantize_activations(x)
    s0, s1 = np.float32(2.0) / np.float32(127), np.float32(0.25) / np.float32(127)
    want = torch.zeros(2, 512)
    want[0, :3] = torch.tensor([127 * s0, -64 * s0, 32 * s0])
    want[0, 256] = float(-127 * s1)
    assert torch.equal(got, want)


def _reference(x: torch.Tensor, segs: list[qk.Segment]) -> torch.Tensor:
    w = torch.cat([qk.dequantize(s) for s in segs]).double()
    return qk.quantize_activations(x).double() @ w.T


def _loops() -> list[int]:
    return [0, 1] if qk.has_cols() else [0]  # cols_from: 0 the 4-row loop, 1 the cols loop throughout


@pytest.mark.parametrize("cols_from", _loops())
def test_a_product_equals_the_float64_product_of_what_it_multiplies(cols_from):
    """Fused parts of two kinds (as the 1.5B's q/k/v with a Q6_K v): the integer sums are exact,
    only the float32 sums over blocks round (measured ~2e-7 relative)."""
    a, _ = _segment("q4_k", 48, 512, seed=2)
    b, _ = _segment("q6_k", 24, 512, seed=3, start=48)
    x = torch.randn(21, 512, generator=torch.Generator().manual_seed(0))
    y = qk.matmul(x, [a, b], cols_from)
    ref = _reference(x, [a, b])
    assert y.shape == (21, 72)
    assert float((y.double() - ref).norm() / ref.norm()) < 2e-6


@pytest.mark.parametrize("cols_from", _loops())
@pytest.mark.parametrize("kind", ["q4_k", "q6_k"])
def test_a_rows_result_does_not_depend_on_the_rows_beside_it(kind, cols_from):
    seg, _ = _segment(kind, 40, 768, seed=4)
    x = torch.randn(19, 768, generator=torch.Generator().manual_seed(1))
    whole = qk.matmul(x, [seg], cols_from)
    for lo, hi in [(0, 1), (3, 7), (5, 19), (18, 19)]:
        assert torch.equal(qk.matmul(x[lo:hi], [seg], cols_from), whole[lo:hi]), (lo, hi)


@pytest.mark.skipif(not qk.has_cols(), reason="the cols loop needs the AVX-512 build")
@pytest.mark.parametrize("kind", ["q4_k", "q6_k"])
def test_the_cols_loop_and_the_four_row_loop_differ_by_float_rounding_only(kind):
    seg, _ = _segment(kind, 50, 1024, seed=5)  # 50 weight rows: three panels of 16 and a partial one
    x = torch.randn(17, 1024, generator=torch.Generator().manual_seed(2))  # two passes of 8 rows and one
    rows, cols = qk.matmul(x, [seg], 0), qk.matmul(x, [seg], 1)
    assert float((rows - cols).norm() / rows.norm()) < 1e-6


@pytest.mark.skipif(not qk.amx_in_use(), reason="AMX tiles: an Intel CPU with AMX-INT8 and a kernel that grants them")
@pytest.mark.parametrize("kind", ["q4_k", "q6_k"])
def test_the_cols_loop_on_amx_tiles_gives_the_vnni_loops_bits(kind):
    """The tiles compute the same exact integer sums as the VNNI loop and hand them to the same float
    code: bit for bit, for a partial panel (50 weight rows) and row counts below, at and past a
    tile's 16 rows (1, 5, 16, 17, 33)."""
    seg, _ = _segment(kind, 50, 1024, seed=11)
    x = torch.randn(33, 1024, generator=torch.Generator().manual_seed(12))
    try:
        for n in (1, 5, 16, 17, 33):
            assert qk.use_amx(False) is False
            vnni = qk.matmul(x[:n], [seg], 1)
            assert qk.use_amx(True) is True
            tiles = qk.matmul(x[:n], [seg], 1)
            assert vnni.abs().max() > 0
            assert torch.equal(tiles, vnni), (n, float((tiles - vnni).abs().max()))
    finally:
        qk.use_amx(True)


_AVX2 = {"avx2", "fma"} <= qk.cpu_flags()


@pytest.mark.parametrize(
    "build", ["scalar", pytest.param("avx2", marks=pytest.mark.skipif(not _AVX2, reason="the CPU lacks AVX2 or FMA"))]
)
def test_the_other_builds_compute_the_same_products(build):
    """What a CPU without AVX-512 runs (AVX2 + FMA, e.g. AMD Zen 2; or no flags at all): the same integer
    sums, float sums in another order; each row's result independent of the rows beside it (1 to 4 rows
    a pass, and a pass of 4 then 1)."""
    a, _ = _segment("q4_k", 16, 768, seed=6)
    b, _ = _segment("q6_k", 16, 768, seed=7, start=16)
    x = torch.randn(5, 768, generator=torch.Generator().manual_seed(3))
    assert qk.library(build).qk_avx2() == (build == "avx2")  # the AVX2 build runs its own loop, not the scalar one
    got, ref = qk.matmul(x, [a, b], build=build), _reference(x, [a, b])
    assert float((got.double() - ref).norm() / ref.norm()) < 2e-6
    for lo, hi in [(0, 1), (1, 3), (2, 5)]:
        assert torch.equal(qk.matmul(x[lo:hi], [a, b], build=build), got[lo:hi]), (build, lo, hi)


def test_a_kernel_build_outside_the_known_ones_is_refused_by_name():
    with pytest.raises(ValueError, match="kernel build 'avx3'.*machine, avx2, scalar"):
        qk.build_flags("avx3")


def test_the_build_flags_follow_the_cpus_flags():
    assert qk.compile_flags({"avx2", "fma"}) == ["-mavx2", "-mfma"]
    assert qk.compile_flags({"avx2"}) == [] and qk.compile_flags({"sse4_2", "fma"}) == []
    full = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"}
    assert "-mavx512f" in qk.compile_flags(full) and "-mavx512vnni" not in qk.compile_flags(full)
    assert "-mavx512vnni" in qk.compile_flags(full | {"avx512_vnni"})
    assert "-mamx-int8" in qk.compile_flags(full | {"amx_tile", "amx_int8"})
    assert not any(f.startswith("-mamx") for f in qk.compile_flags({"avx2", "fma", "amx_tile", "amx_int8"}))


# --------------------------------------------------------------------------- one call per Linear
@pytest.mark.parametrize("cols_from", _loops())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_gives_the_bits_of_the_product_in_the_activations_dtype_plus_the_bias(dtype, cols_from):
    """``linear`` (one C call: widening, quantizing, the products, rounding, the bias) against the
    same steps in torch: ``matmul(x).to(dtype) + bias``, bit for bit."""
    a, _ = _segment("q4_k", 48, 512, seed=8)
    b, _ = _segment("q6_k", 24, 512, seed=9, start=48)
    x = torch.randn(11, 512, generator=torch.Generator().manual_seed(4)).to(dtype)
    bias = torch.randn(72, generator=torch.Generator().manual_seed(5)).to(dtype)
    want = qk.matmul(x, [a, b], cols_from).to(dtype)
    assert torch.equal(qk.linear(x, [a, b], None, cols_from), want)
    assert torch.equal(qk.linear(x, [a, b], bias, cols_from), want + bias)
    assert qk.linear(x, [a, b], bias, cols_from).dtype == dtype


def test_blocks_wider_than_the_activations_multiply_them_padded_with_zeros():
    """Re-encoded weights of 300 columns are blocks of 512 (zero columns after 300; the group they
    share with columns 288-299 may code them off zero): 300-column activations multiply them as if
    padded with zeros, so those codes never count; more columns than the blocks' are refused."""
    w = torch.randn(40, 300, generator=torch.Generator().manual_seed(6))
    seg = qk.encode_q4k(w)
    assert (seg.cols, seg.rows) == (512, 40)
    assert torch.equal(qk.dequantize(seg)[:, 320:], torch.zeros(40, 192))  # whole groups of padding
    x = torch.randn(5, 300, generator=torch.Generator().manual_seed(7))
    padded = torch.nn.functional.pad(x, (0, 212))
    assert torch.equal(qk.linear(x, [seg]), qk.matmul(padded, [seg]))
    with pytest.raises(ValueError, match="blocks of 512 columns cannot multiply 600-column activations"):
        qk.linear(torch.randn(2, 600), [seg])


def test_q4k_encoding_of_hand_made_groups():
    """Row 0: every group of 32 is 0.1 * (i % 16) - 0.3: range [-0.3, 1.2] in 15 steps of 0.1, so
    d = 0.1 / 63 with sc 63, dmin = 0.3 / 63 with m 63 and codes i % 16. Row 1: 0.05 * (i % 16), no
    negative value: m 0. Row 2: zeros, all zero. Each decodes to its values (float rounding)."""
    i = torch.arange(256) % 16
    w = torch.stack([0.1 * i - 0.3, 0.05 * i, torch.zeros(256)]).float()
    seg = qk.encode_q4k(w)
    blk = seg.blocks.view(3, qk.Q4_BLOCK_BYTES)
    d, dmin = blk[:, 0:8].contiguous().view(torch.float32).view(3, 2).T
    assert torch.allclose(d, torch.tensor([0.1 / 63, 0.05 / 63, 0.0])) and torch.allclose(
        dmin, torch.tensor([0.3 / 63, 0.0, 0.0])
    )
    assert blk[0, 8:24].tolist() == [63] * 16 and blk[1, 8:24].tolist() == [63] * 8 + [0] * 8
    assert blk[2].count_nonzero() == 0
    qs = blk[0, 24:].view(4, 32)  # chunk c: byte p's low nibble is element 64c + p, its high one 64c + 32 + p
    assert torch.equal(torch.cat([qs & 15, qs >> 4], 1).reshape(256).long(), i)
    assert torch.allclose(qk.dequantize(seg), w, atol=1e-6)


def test_q4k_encoding_error_is_a_4_bit_codes():
    """Gaussian weights: the re-encoding's relative error ~0.076, as a group-of-32 min/max 4-bit
    code's (0.079 on the same weights); a 3-bit code would be ~0.17."""
    w = torch.randn(64, 896, generator=torch.Generator().manual_seed(8)) * 0.05
    err = float((qk.dequantize(qk.encode_q4k(w))[:, :896] - w).norm() / w.norm())
    assert 0.06 < err < 0.08, err
