"""Load a GGUF into llama.cpp for the target's forwards (``target.backend=llama_cpp``).

Optional: neither the main command nor the tests need it. The bindings are llama-cpp-python's
(``import llama_cpp``): either ``pip install llama-cpp-python`` (it builds llama.cpp from
source), or its unpacked source on ``PYTHONPATH`` with ``LLAMA_CPP_LIB_PATH`` naming a folder
holding ``libllama.so`` built as docs/llama-cpp.md says. The handle this returns is what
``engine/llama_cpp_kv.LlamaCppKV`` drives; the same GGUF file the packaged model was
assembled from (checked by its hash) is loaded, so both backends read the same weights file.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .model_loading import embedded_gguf_path
from .packaged import gguf_file, packaged

log = logging.getLogger(__name__)

HOW = (
    "pip install llama-cpp-python (builds llama.cpp), or put its unpacked source on PYTHONPATH and set "
    "LLAMA_CPP_LIB_PATH to a folder with libllama.so (docs/llama-cpp.md)"
)


def bindings() -> Any:
    """llama-cpp-python's ctypes bindings, quiet; a one-line error naming how to get them."""
    try:
        import llama_cpp
    except (ImportError, OSError, FileNotFoundError, RuntimeError) as e:
        raise RuntimeError(f"target.backend=llama_cpp needs llama-cpp-python ({type(e).__name__}: {e}); {HOW}") from e
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
    return llama_cpp


def available() -> bool:
    try:
        bindings()
    except RuntimeError:
        return False
    return True


@dataclass
class LlamaCppHandle:
    """A loaded GGUF and one context over it: what ``LlamaCppKV`` drives."""

    lib: Any
    model: Any
    ctx: Any
    path: Path
    n_vocab: int
    vocab_size: int
    n_batch: int
    n_seq_max: int
    n_ctx: int
    threads: int

    def close(self) -> None:
        if self.ctx is not None:
            self.lib.llama_free(self.ctx)
            self.ctx = None
        if self.model is not None:
            self.lib.llama_model_free(self.model)
            self.model = None


def gguf_path(spec: Any) -> Path:
    """The GGUF file a ``ModelSpec`` names, whole on disk: a given file (``source: gguf``), a
    package's own file, or a chunked package's file assembled once (each chunk and the whole
    checked against their hashes) into ``<cache_dir>/gguf/`` and kept there."""
    if spec.source == "gguf":
        return Path(spec.path).expanduser().resolve()
    if spec.source != "embedded":
        raise ValueError(
            f"target.backend=llama_cpp reads a GGUF file; target.source={spec.source!r} has none "
            "(valid: embedded, gguf)"
        )
    pm = packaged(spec.embedded)
    if len(pm.chunks) == 1:
        return embedded_gguf_path(spec.embedded)
    dest = spec.resolved_cache_dir() / "gguf" / pm.gguf_name
    if dest.is_file() and dest.stat().st_size == pm.size:
        return dest
    tmp, _ = gguf_file(pm.name, dest.parent)  # checked whole against the package's hash
    tmp.replace(dest)
    return dest


def load_llama_cpp(
    path: Path,
    threads: int,
    n_ctx: int = 8192,
    n_batch: int = 512,
    n_seq_max: int = 64,
    gpu: bool = False,
    vocab_size: int | None = None,
) -> LlamaCppHandle:
    """Load ``path`` with one context whose KV cache all sequences share (``kv_unified``):
    ``n_ctx`` cells in all, forwards of up to ``n_batch`` rows, ``n_seq_max`` sequence ids
    (rows plus the extra leaves of their trees), ``threads`` for every forward;
    ``vocab_size``: report logits over this many ids (the Hugging Face model's head, which
    may pad the tokenizer's vocabulary; the padding gets -inf)."""
    lib = bindings()
    if not Path(path).is_file():
        raise FileNotFoundError(f"GGUF file {path} does not exist")
    lib.llama_backend_init()
    mp = lib.llama_model_default_params()
    mp.n_gpu_layers = 999 if gpu else 0
    model = lib.llama_model_load_from_file(str(path).encode(), mp)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    cp = lib.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = n_ctx, n_batch, n_batch, n_seq_max
    cp.n_threads = cp.n_threads_batch = threads
    cp.kv_unified = True
    cp.no_perf = True
    ctx = lib.llama_init_from_model(model, cp)
    if not ctx:
        lib.llama_model_free(model)
        raise RuntimeError(f"llama.cpp could not make a context for {path} (n_ctx {n_ctx}, n_seq_max {n_seq_max})")
    n_vocab = int(lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model)))
    if vocab_size is not None and vocab_size < n_vocab:
        raise ValueError(f"{path}: llama.cpp's vocabulary has {n_vocab} ids, more than the model's {vocab_size}")
    log.info("llama.cpp: %s, %d threads, n_ctx %d, %d sequences", Path(path).name, threads, n_ctx, n_seq_max)
    return LlamaCppHandle(
        lib, model, ctx, Path(path), n_vocab, vocab_size or n_vocab, n_batch, n_seq_max, n_ctx, threads
    )


@functools.cache
def load_llama_cpp_cached(path: Path, threads: int, gpu: bool = False, vocab_size: int | None = None) -> LlamaCppHandle:
    """``load_llama_cpp`` once per process for each file and setting: the jobs of a sweep share
    the loaded model and its context (each decode resets the cache)."""
    return load_llama_cpp(path, threads=threads, gpu=gpu, vocab_size=vocab_size)
