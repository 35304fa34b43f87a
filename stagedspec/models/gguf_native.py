"""A GGUF's own Q4_K / Q6_K blocks as the target's weights at every row count
(``target.weights=gguf_native``; the kernel: ``engine/qk_kernels.py``).

Every GEMM module (the lean layers' fused q/k/v and gate/up included) whose parts all have
Q4_K or Q6_K blocks gets them, repacked for the kernel, as ``module._stagedspec_native``
(a list of segments, one per part); a plan with ``native`` then multiplies by them at every
row count, prefill included. What the target computes is then the file's own weights times
activations quantized to int8 per 256 columns (llama.cpp's CPU arithmetic), not the dense
bfloat16 model: the dense copy stays for ``kernels=hf`` and the modules without blocks.

Each part's blocks are checked against the module's dense weight before use: decoded to
float32 and rounded to the model's dtype they must equal it exactly (a loader that permutes
rows fails the check, and that module keeps its dense path). The raw blocks are cached beside
the dequantized model (``native_blocks.safetensors``, the GGUF's own bytes, 1.0 GB for the
1.5B), so a later load needs no GGUF.

``weights=requant_q4k`` (a draft's setting, ``reencode``): every GEMM weight re-encoded from the
dense weights as Q4_K blocks (``qk_kernels.encode_q4k``; columns zero-padded to a multiple of 256,
so any width fits, e.g. the 0.5B's 896) and multiplied through the same kernel at every row count.
Not the file's weights (the 0.5B's GGUF is mostly Q5_0 and Q8_0, which the kernel does not take):
a draft's q is whatever its forward computes, and the verifier uses that q, so the output stays
exact. Cached beside the dequantized model (``REQUANT_FILE``; 0.33 GB for the 0.5B).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from stagedspec.engine import qk_kernels
from stagedspec.engine.kernels import gemm_module_parts, install

from . import gguf_int4
from .gguf_cache import NATIVE_FILE as BLOCKS_FILE
from .gguf_cache import NATIVE_KINDS as KINDS

log = logging.getLogger(__name__)


def load_blocks(cache_path: Path | None, get_gguf: Callable[[Path], tuple[Path, bool]]) -> dict[str, torch.Tensor]:
    """The Q4_K and Q6_K blocks of the model's decoder Linears and output head."""
    return gguf_int4.load_blocks(cache_path, get_gguf, file=BLOCKS_FILE, kinds=KINDS)


def attach(model: nn.Module, blocks: dict[str, torch.Tensor]) -> tuple[int, int]:
    """Give every GEMM module whose parts all have blocks its segments (and each part its
    own); returns (modules given blocks, modules whose check failed)."""
    install(model)
    by_name = {k.split(":", 1)[1]: k for k in blocks}
    named = dict(model.named_modules())
    attached = failed = 0
    segments: dict[str, qk_kernels.Segment] = {}

    def segment(name: str, start: int) -> qk_kernels.Segment | None:
        key = by_name[name]
        kind = key.split(":", 1)[0]
        w = named[name].weight
        if w.shape[1] % qk_kernels.QK:
            return None
        if name not in segments:
            seg = qk_kernels.Segment(kind, qk_kernels.repack(kind, blocks[key]), 0, w.shape[0], w.shape[1])
            if not torch.equal(qk_kernels.dequantize(seg).to(w.dtype), w.detach().cpu()):
                log.warning("the GGUF blocks of %s do not match its dense weight: it stays dense", name)
                return None
            segments[name] = seg
        return dataclasses.replace(segments[name], start=start)  # one tensor's segments share its cols panels

    with torch.no_grad():
        for mod, names in gemm_module_parts(model):
            if not names or any(n not in by_name or n not in named for n in names):
                continue
            segs, start = [], 0
            for n in names:
                seg = segment(n, start)
                if seg is None:
                    break
                segs.append(seg)
                start += seg.rows
            if len(segs) != len(names):
                failed += 1
                continue
            mod._stagedspec_native = segs
            for n in names:  # each part on its own too (Hugging Face's unfused layers call them)
                named[n]._stagedspec_native = [segment(n, 0)]
            attached += 1
    return attached, failed


REQUANT_FILE = "requant_q4k-v1.safetensors"
"""The re-encoded blocks (``reencode``); the version changes with ``qk_kernels.encode_q4k``."""


def reencode(model: nn.Module, cache_path: Path | None) -> int:
    """Give every GEMM module its weights re-encoded as Q4_K blocks (``encode_q4k``), each part
    its own too; read from ``cache_path / REQUANT_FILE`` when there, else encoded (14-29 s for
    the 0.5B on 2 cores) and saved there. Returns the modules given blocks."""
    from safetensors.torch import load_file, save_file

    install(model)
    named = dict(model.named_modules())
    file = cache_path / REQUANT_FILE if cache_path is not None else None
    stored = load_file(file) if file is not None and file.is_file() else {}
    encoded: dict[str, torch.Tensor] = {}
    done = 0
    with torch.no_grad():
        for mod, names in gemm_module_parts(model):
            if not names or any(n not in named for n in names):
                continue
            segs, start = [], 0
            for n in names:
                w = named[n].weight
                cols = -(-w.shape[1] // qk_kernels.QK) * qk_kernels.QK
                if n in stored and stored[n].numel() == w.shape[0] * cols // qk_kernels.QK * qk_kernels.Q4_BLOCK_BYTES:
                    seg = qk_kernels.Segment("q4_k", stored[n], 0, w.shape[0], cols)
                else:
                    seg = qk_kernels.encode_q4k(w.detach().cpu())
                    encoded[n] = seg.blocks
                named[n]._stagedspec_native = [seg]
                segs.append(dataclasses.replace(seg, start=start))
                start += seg.rows
            mod._stagedspec_native = segs
            done += 1
    if encoded and file is not None:
        fd, tmp = tempfile.mkstemp(prefix=".requant-", suffix=".safetensors", dir=file.parent)
        os.close(fd)
        save_file({**stored, **encoded}, tmp)
        os.replace(tmp, file)
    return done
