"""A GGUF's own 4-bit blocks as the weights of torch's CPU int4 kernel (``target.weights=gguf_q4``).

A Q4_K super-block holds 256 weights of one row as 8 groups of 32: 4-bit codes q (0..15)
and, per group, a scale ``d * sc`` and a minimum ``dmin * m`` (d, dmin float16 per
super-block; sc, m 6-bit integers), so that ``w = (d * sc) * q - dmin * m``. That is the
form torch's weight-only int4 kernel multiplies by (``_weight_int4pack_mm_for_cpu``: groups
of 32 input columns, a scale and an offset each), so the codes carry over bit for bit; the
kernel keeps the scale and offset in the activations' dtype, so they are rounded once to it.
The weights the target computes with are then ``(q - 8) * scale + offset`` with that
rounded scale and offset, and the module's dense copy (which more rows multiply by) is
overwritten with exactly that weight in the model's dtype, so that every row count computes
with one set of weights (the measurement behind this: docs/results-history.md, "Measurements
formerly in module docstrings"). Q4_1 (SmolLM2's file) has the same form with one group per block, and its scale and minimum
are float16 values themselves.

Tensors in other formats (Q6_K: the 1.5B's ``ffn_down``, ``attn_v`` and output head; Q5_0,
Q8_0) have no such form and keep the dense path, and so does a fused GEMM with any such part
(the lean layers' q/k/v, whose v is Q6_K in the 1.5B). Each module's codes are checked
against its dense weight before they are used: the decoded values, rounded to the model's
dtype, must equal the dense weight exactly (a loader that permutes rows, as Hugging Face's
does for Llama's q/k, fails the check and that module stays dense).

The raw blocks of the tensors used are cached beside the dequantized model
(``q4_blocks.safetensors``, the GGUF's bytes, about 0.5 GB for the 1.5B), so a later load
needs no GGUF.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from stagedspec.engine.int4_kernels import INT4_GROUP, int4_fits, int4_pack_codes
from stagedspec.engine.kernels import PATH_INT4, gemm_module_parts, install

log = logging.getLogger(__name__)

BLOCKS_FILE = "q4_blocks.safetensors"
Q4K_BLOCK_BYTES = 144  # a Q4_K super-block of 256 weights: d, dmin (2 + 2), scales (12), codes (128)
Q41_BLOCK_BYTES = 20  # a Q4_1 block of 32 weights: d, m (2 + 2), codes (16)

_GGUF_TO_HF = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_linear_name(gguf_name: str) -> str | None:
    """``blk.3.ffn_up.weight`` -> ``model.layers.3.mlp.up_proj``; ``output.weight`` ->
    ``lm_head``; None for tensors that are not a decoder Linear's weight."""
    if gguf_name == "output.weight":
        return "lm_head"
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight" and parts[2] in _GGUF_TO_HF:
        return f"model.layers.{parts[1]}.{_GGUF_TO_HF[parts[2]]}"
    return None


def read_blocks(gguf_path: str | Path, kinds: tuple[str, ...] = ("q4_k", "q4_1")) -> dict[str, torch.Tensor]:
    """The raw blocks of every decoder Linear weight in a GGUF file stored in one of ``kinds``
    (GGML type names, lower case), by the Hugging Face module name, prefixed with the kind
    (``q4_k:model.layers.0.mlp.up_proj``; uint8, [out, blocks * bytes])."""
    import gguf  # the GGUF reader (a dependency; imported here as only this function reads files)

    types = {getattr(gguf.GGMLQuantizationType, k.upper()): k for k in kinds}
    out: dict[str, torch.Tensor] = {}
    for t in gguf.GGUFReader(gguf_path).tensors:
        name = hf_linear_name(t.name)
        if name is not None and t.tensor_type in types:
            out[f"{types[t.tensor_type]}:{name}"] = torch.from_numpy(np.array(t.data, dtype=np.uint8))
    return out


def decode_q4k(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q4_K rows ([out, n * 144] bytes) -> codes q ([out, in], int32, 0..15), and per group of
    32 the scale s and minimum lo ([out, in / 32], float32) with ``w = s * q + lo``: the same
    float32 values as gguf's own ``Q4_K.dequantize_blocks`` computes, term by term."""
    from gguf.quants import Q4_K

    rows = blocks.shape[0]
    b = blocks.numpy().reshape(-1, Q4K_BLOCK_BYTES)
    d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
    dmin = b[:, 2:4].copy().view(np.float16).astype(np.float32)
    sc, m = Q4_K.get_scale_min(b[:, 4:16].copy())
    scale = d * sc.astype(np.float32)  # [blocks, 8]
    lo = -(dmin * m.astype(np.float32))
    qs = b[:, 16:].reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    codes = (qs & np.uint8(0x0F)).reshape(rows, -1)
    return (
        torch.from_numpy(codes.astype(np.int32)),
        torch.from_numpy(scale.reshape(rows, -1)),
        torch.from_numpy(lo.reshape(rows, -1)),
    )


def decode_q41(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q4_1 rows ([out, n * 20] bytes) -> codes, scale, minimum as ``decode_q4k``:
    ``w = d * q + m`` per block of 32 (low nibbles are weights 0-15, high 16-31)."""
    rows = blocks.shape[0]
    b = blocks.numpy().reshape(-1, Q41_BLOCK_BYTES)
    d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = b[:, 2:4].copy().view(np.float16).astype(np.float32)
    qs = b[:, 4:].reshape(-1, 1, 16) >> np.array([0, 4], dtype=np.uint8).reshape(1, 2, 1)
    codes = (qs & np.uint8(0x0F)).reshape(rows, -1)
    return (
        torch.from_numpy(codes.astype(np.int32)),
        torch.from_numpy(d.reshape(rows, -1)),
        torch.from_numpy(m.reshape(rows, -1)),
    )


def decode(key: str, blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (decode_q4k if key.startswith("q4_k:") else decode_q41)(blocks)


def save_blocks(cache_path: Path, blocks: dict[str, torch.Tensor], file: str = BLOCKS_FILE) -> None:
    """Write ``blocks`` to ``cache_path``/``file`` atomically (a failure to write costs the
    next load a pass over the GGUF, not correctness)."""
    from safetensors.torch import save_file

    f = cache_path / file
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{file}.", dir=cache_path)
        os.close(fd)
        save_file(blocks, tmp)
        os.replace(tmp, f)
    except OSError as e:
        log.warning("could not cache the 4-bit blocks in %s: %s", f, e)


def load_blocks(
    cache_path: Path | None,
    get_gguf: Callable[[Path], tuple[Path, bool]],
    file: str = BLOCKS_FILE,
    kinds: tuple[str, ...] = ("q4_k", "q4_1"),
) -> dict[str, torch.Tensor]:
    """The blocks of ``kinds`` (``read_blocks``), from ``cache_path``/``file``, else read from the
    GGUF (``get_gguf(workdir)`` -> (path, temporary), as the loader's) and cached there."""
    from safetensors.torch import load_file

    if cache_path is not None and (cache_path / file).is_file():
        return load_file(cache_path / file)
    work = Path(tempfile.mkdtemp(prefix="stagedspec-gguf-"))
    try:
        path, temporary = get_gguf(work)
        blocks = read_blocks(path, kinds)
        if temporary:
            path.unlink(missing_ok=True)
    finally:
        for p in work.iterdir():
            p.unlink()
        work.rmdir()
    if cache_path is not None and cache_path.is_dir():
        save_blocks(cache_path, blocks, file)
    return blocks


def kernel_weight(codes: torch.Tensor, scales_offsets: torch.Tensor) -> torch.Tensor:
    """The float32 weight torch's int4 kernel multiplies by: ``(q - 8) * scale + offset`` per
    group of 32 input columns, from the pack's scales and offsets ([in / 32, out, 2])."""
    scale = scales_offsets[..., 0].float().T.repeat_interleave(INT4_GROUP, 1)
    offset = scales_offsets[..., 1].float().T.repeat_interleave(INT4_GROUP, 1)
    return (codes - 8) * scale + offset


def attach(model: nn.Module, blocks: dict[str, torch.Tensor]) -> tuple[int, int]:
    """Give every GEMM module of ``model`` whose parts all have 4-bit blocks its int4 pack,
    made from those blocks, after checking the decoded weights against the dense ones.
    Returns (modules given a pack, modules whose check failed). Installs the kernels first
    (the lean layers' fused GEMMs are among the modules)."""
    install(model)
    by_name = {k.split(":", 1)[1]: k for k in blocks}
    attached = failed = 0
    with torch.no_grad():
        for mod, names in gemm_module_parts(model):
            if not names or any(n not in by_name for n in names) or not int4_fits(mod):
                continue
            parts = [decode(by_name[n], blocks[by_name[n]]) for n in names]
            codes, scale, lo = (torch.cat([p[i] for p in parts]) for i in range(3))
            dense = scale.repeat_interleave(INT4_GROUP, 1) * codes + lo.repeat_interleave(INT4_GROUP, 1)
            if codes.shape != mod.weight.shape or not torch.equal(dense.to(mod.weight.dtype), mod.weight):
                failed += 1
                log.warning("4-bit blocks of %s do not match its dense weight: it stays dense", "+".join(names))
                continue
            pack = int4_pack_codes(codes, scale.T.contiguous(), lo.T.contiguous(), mod.weight.dtype)
            # the dense copy becomes the weight the kernel multiplies by, (q - 8) * scale + offset
            # with both in the weight's dtype, so every row count computes with one set of weights
            mod.weight.data.copy_(kernel_weight(codes, pack[1]).to(mod.weight.dtype))
            mod._stagedspec_packs[PATH_INT4] = pack
            mod._stagedspec_int4_exact = True
            attached += 1
    return attached, failed
