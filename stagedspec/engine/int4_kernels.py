"""4-bit weights in the layout of torch's CPU int4 kernel (``_weight_int4pack_mm_for_cpu``).

``int4_quantize`` turns a dense weight into codes and per-group scales and minimums,
``int4_pack_codes`` packs such codes (a draft's, or a GGUF's own, ``models/gguf_int4.py``)
for the kernel, ``int4_pack`` does both; ``int4_fits`` says whether a Linear's shape suits
the kernel. ``kernels.py`` calls them for the 4-bit GEMM path (``PATH_INT4``).
"""

from __future__ import annotations

import torch
from torch import nn

INT4_GROUP = 32
"""Input columns per group: each group has its own scale and minimum."""


def int4_quantize(weight: torch.Tensor, group: int = INT4_GROUP) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit quantization per group of ``group`` input columns: codes q in
    0..15 ([out, in], int32), and per group the scale s and minimum m ([in / group, out]),
    so that the weight is approximately q * s + m (exactly, where a group's values lie on a
    16-level grid that reaches both ends, as a Q4_K GGUF block's do)."""
    N, K = weight.shape
    if K % group:
        raise ValueError(f"4-bit weights need in_features divisible by {group}, got {K}")
    w = weight.detach().float().reshape(N, K // group, group)
    lo, hi = w.amin(-1), w.amax(-1)
    scale = ((hi - lo) / 15).clamp(min=1e-12)
    q = ((w - lo[..., None]) / scale[..., None]).round().clamp(0, 15).to(torch.int32).reshape(N, K)
    return q, scale.T.contiguous(), lo.T.contiguous()


def int4_fits(module: nn.Linear) -> bool:
    """The 4-bit kernel takes weights with out_features a multiple of 16 and in_features a
    multiple of the group (32); other Linears keep the plan's path at every row count."""
    out_f, in_f = module.weight.shape
    return out_f % 16 == 0 and in_f % INT4_GROUP == 0


def int4_pack_codes(
    q: torch.Tensor, scale: torch.Tensor, lo: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes q ([out, in], 0..15) with per-group scale and minimum ([in / group, out], weight
    ``q * scale + lo``) in the layout of torch's CPU int4 kernel, its scales in ``dtype``."""
    # the kernel computes (q - 8) * scale + zero
    scales_zeros = torch.stack([scale, lo + 8 * scale], -1).to(dtype)
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1), scales_zeros


def int4_pack(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A dense weight quantized (``int4_quantize``) and packed (``int4_pack_codes``)."""
    return int4_pack_codes(*int4_quantize(weight), weight.dtype)
