"""A GGUF's dequantized copy on disk: where it lives, loading a GGUF through it, and
writing it so that no half-written copy is ever trusted.

Dequantizing a GGUF takes 20-60 s; its safetensors copy reloads in seconds. ``model_loading``
loads every GGUF (a given file or a packaged one) through ``load_gguf_cached``, keyed by
``gguf_cache_path`` (file name, size, dtype) under the spec's cache directory. Also here:
the two transformers loaders (``from_pretrained``, ``load_tokenizer_if_any``) that the
cache and ``source: hf`` directories share; everything offline.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

import torch
from torch import nn

from . import gguf_int4

NATIVE_FILE, NATIVE_KINDS = "native_blocks.safetensors", ("q4_k", "q6_k")
"""Where ``gguf_native`` caches its blocks, and their kinds (it imports these)."""

if TYPE_CHECKING:
    from .model_loading import ModelSpec

log = logging.getLogger(__name__)


def gguf_cache_path(gguf_name: str, size: int, cache_dir: Path, dtype: torch.dtype = torch.float32) -> Path:
    """Cache directory for a GGUF, keyed by its file name and size (a changed file of the
    same name gets a fresh entry) and the dtype it was saved in (float32 has no suffix)."""
    suffix = "" if dtype == torch.float32 else f"-{str(dtype).removeprefix('torch.')}"
    return cache_dir / f"{gguf_name.removesuffix('.gguf')}-{size}{suffix}"


def load_gguf_cached(
    get_gguf: Callable[[Path], tuple[Path, bool]],
    gguf_name: str,
    size: int,
    spec: ModelSpec,
    dtype: torch.dtype,
) -> tuple[nn.Module, Any, Path, bool]:
    """Dequantizing a GGUF takes 20-60 s; the safetensors copy reloads in seconds. Cached
    in the dtype asked for (a 1.5B model's float32 copy is 6 GB, its bfloat16 one 3 GB);
    a float32 cache also serves other dtypes. ``get_gguf(workdir)`` gives the GGUF path
    (and whether it is a temporary file to delete) only when the cache must be built."""
    root = spec.resolved_cache_dir()
    cache = gguf_cache_path(gguf_name, size, root, dtype)
    for hit in dict.fromkeys([cache, gguf_cache_path(gguf_name, size, root)]):
        if (hit / "config.json").is_file():
            return from_pretrained(hit, spec, dtype), load_tokenizer_if_any(hit), hit, True
    gguf, temporary = get_gguf(root / "gguf")
    log.info("dequantizing %s (20-60 s; cached afterwards in %s)", gguf, cache)
    try:
        model = from_pretrained(gguf.parent, spec, torch.float32, gguf_file=gguf.name)
        tokenizer = load_tokenizer_if_any(gguf.parent, gguf_file=gguf.name)
        # the quantized blocks too, while the GGUF is at hand (else the first load that needs
        # them assembles it again): (file, kinds) per weights setting
        wanted = {"gguf_q4": (gguf_int4.BLOCKS_FILE, ("q4_k", "q4_1")), "gguf_native": (NATIVE_FILE, NATIVE_KINDS)}
        blocks_file, kinds = wanted.get(spec.weights, (None, ()))
        blocks = gguf_int4.read_blocks(gguf, kinds) if kinds else None
    finally:
        if temporary:
            gguf.unlink(missing_ok=True)
    model = model.to(dtype)
    try:
        save_cache_atomically(model, tokenizer, cache)
    except OSError as e:  # a read-only or full disk costs speed, not correctness
        log.warning("could not write the model cache %s: %s", cache, e)
    if blocks and cache.is_dir():
        gguf_int4.save_blocks(cache, blocks, blocks_file)
    return model, tokenizer, cache, False


def save_cache_atomically(model: nn.Module, tokenizer: Any, dest: Path) -> None:
    """Save model (+ tokenizer) into a temporary sibling of ``dest``, then rename it into
    place: an interrupted save leaves no half-written cache that a later load would trust."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # transformers refuses to save a model loaded from GGUF ("quantized with gguf and is
    # not serializable"); the weights are already dequantized, so drop the marker.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; the cache is meant to be shared
        model.save_pretrained(str(tmp))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        try:
            os.replace(tmp, dest)
        except OSError:
            if (dest / "config.json").is_file():  # another process finished first: keep theirs
                return
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def from_pretrained(path: Path, spec: ModelSpec, dtype: torch.dtype, **kwargs: Any) -> nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        str(path),
        dtype=dtype,
        attn_implementation=spec.attn_implementation,
        local_files_only=True,
        trust_remote_code=False,
        **kwargs,
    )


def load_tokenizer_if_any(path: Path, **kwargs: Any) -> Any:
    from transformers import AutoTokenizer

    if not kwargs and not any(
        (path / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
    ):
        log.warning("no tokenizer files in %s: tokenizer is None", path)
        return None
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=False, **kwargs)
