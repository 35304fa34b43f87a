"""How a model's forward is computed: the GEMM path for each number of rows, attention
without grouped-query copies, and a KV cache that grows in place.

Why this exists. Speculation pays only when scoring a few positions costs about as much
as scoring one. On a CPU the forward of a small LM is memory-bound, so in principle it
does; but ``nn.Linear`` (``x @ W.T`` through MKL's sgemm) takes a slower path from about
4 rows on, and Hugging Face's SDPA attention copies the whole KV cache ``num_heads /
num_kv_heads`` times per layer (``repeat_kv``) whenever more than one query row comes
with a mask, i.e. for every verification forward. Measured on the embedded SmolLM2
(fp32, 2 threads, 300-token context): the 211 Linear layers take 21 ms at 1-2 rows, 34 ms
at 4 and 42 ms at 8 through ``F.linear``, but 27 ms at 4 (MKL with weights prepacked for
4 rows) and 33 ms at 8 (oneDNN, prepacked); ``repeat_kv`` adds ~13 ms per forward.

A ``KernelChoice`` says which path each row count takes. ``HF_KERNELS`` is Hugging Face's own
path, bit for bit (``F.linear``, HF's SDPA function, a ``DynamicCache``): its one-row
forwards give exactly HF's cached-decoding logits, and greedy output through it equals
``generate(do_sample=False)`` token for token in the float32 tests. A fast plan comes from
``calibrate`` in the tuning room (``stagedspec/tuning/kernel_calibration.py``; this module
never calls it): each candidate GEMM path is timed over all the model's Linear weights for
each row count, the fastest kept (within a budget of prepacked weight copies), and the
result cached per machine, model, dtype and threads; its lean layers are checked against
HF's logits once per model (``check_lean_layers``).

Exact up to kernel rounding, not bitwise. Under every plan, HF's included, a position's
logits depend by rounding on the forward's shape: a 1-row forward (plain decoding) and a
4-row one (verification) run other GEMM and attention kernels, and a fast plan's GEMMs
sum in yet another order. Measured on SmolLM2 (float32), one position through 1 and 4
rows: HF plan 5.7e-5, fast plans 5.5e-5 to 1.1e-4, on logits of about 30 (~2-4e-6
relative); ``tests/test_kernels.py`` bounds it at 1e-4 relative. So greedy decoding can
differ from HF's at a near-tie (the benchmark reports how often, with the top-2 logit
gap), and sampling reproduces the target's distribution up to that rounding: p at a
verification is the target's distribution as computed through k + 1 rows, which is the
baseline's one-row p to ~1e-6 relative, not bit for bit.

Mechanics. ``install(model)`` patches every ``nn.Linear`` of the model with a forward that
dispatches on the plan active at call time (``with plan.active(): ...``), and points the
model's attention at a function that packs the query heads of each KV group together
when a plan with ``gqa_packing`` is active. With no plan active both fall through to
exactly what the model did before, so Hugging Face's own ``generate`` on the same model
object is unchanged. Beside this module: ``int4_kernels.py`` the 4-bit weights,
``attention_kernels.py`` the packed attention, ``lean_whitelist.py`` which layers go lean.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import types
from dataclasses import dataclass
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .attention_kernels import packed_gqa_attention
from .int4_kernels import INT4_GROUP, int4_fits, int4_pack
from .qk_kernels import LayerWeights, has_cols, layer1, layer_rows, takes_heads
from .qk_kernels import linear as qk_linear
from .lean_whitelist import LEAN_CHECK_RTOL, check_logits, is_llama_layer

log = logging.getLogger(__name__)

ATTN_NAME = "stagedspec_sdpa"
PATH_LINEAR = "linear"  # F.linear: what nn.Linear and Hugging Face compute
PATH_MKLDNN = "mkldnn"  # oneDNN with the weight reordered once (any row count)
PATH_WXT = "wxt"  # (W @ x.T).T: the other operand order, which MKL runs as a different GEMM (any dtype;
# in bfloat16 on CPUs without AVX-512, where oneDNN has no bfloat16 path, the only other choice)
PATH_INT4 = "int4"  # 4-bit weights (groups of INT4_GROUP, scale and zero each): a draft's plan only
MKL_ROWS = (4, 8, 16)  # MKL sgemm with the weight packed for exactly b rows ("mkl4", ...)
DRAFT_COLS_FROM = 6
"""A draft's native forwards of this many rows or more take the kernel's cols loop when the
target's plan has none of its own (the 0.5B re-encoded, bf16, 2 threads, AMD EPYC, 300-token
context: 6 rows 43.4 ms through the cols loop against 47.8 through the 4-row loop, 13 rows 60.8
against 86.6; 4 rows 36.9 against 35.5)."""


@dataclass(frozen=True)
class KernelChoice:
    """Which GEMM path each row count takes, and the attention / cache choices.

    ``linear[m - 1]`` is the path for a Linear call on m rows (batch x new tokens);
    row counts past the table (prefill) take ``long_path``.
    """

    name: str = "hf"
    linear: tuple[str, ...] = ()
    gqa_packing: bool = False
    slot_cache: bool = False
    lean_layers: bool = False
    """Decoder layers of the classes in ``LEAN_CLASSES`` (Llama, Qwen2) run as one plain
    function (fused q/k/v and gate/up GEMMs, ``F.rms_norm``) instead of Hugging Face's
    modules: ~90 fewer GEMM calls and ~700 fewer small ops per forward; any other layer
    keeps HF's forward."""
    long_path: str = PATH_LINEAR
    """The path of Linear calls on more rows than ``linear`` covers (a prompt's prefill).
    ``calibrate`` sets it with ``long_path_for``: the path the table chose at its largest
    row count where that path takes any row count (oneDNN: 1.11 s against F.linear's 1.16-1.22 s
    for a 163-token prefill of the 1.5B, 0.37 s against 0.40-0.41 s for the 0.5B, bf16)."""
    int4_exact: bool = False
    """With ``int4_rows``: only modules holding their GGUF's own 4-bit codes take the 4-bit
    path (the same weights as the dense path, up to one rounding of the scales: a target's
    plan, ``target.weights=gguf_q4``); False: every module that fits, re-quantized from its
    dense weight (a draft's plan)."""
    int4_rows: int = 0
    """Linear calls on at most this many rows multiply by a 4-bit copy of the weight
    (``PATH_INT4``: groups of 32, a scale and a zero each; torch's CPU weight-only kernel,
    gpt-fast's int4 path). This changes the model's numbers, so only a draft level's plan
    may set it (``for_draft``; the decoder refuses it for the target): a draft's q is
    whatever its forward computes, and the verifier uses that same q, so the output stays
    exact. On the 0.5B draft, bf16 on 2 cores: 24 ms per 1-row forward against 45 ms;
    from about 4 rows the kernel is slower than oneDNN's bf16 GEMM, hence a row bound."""

    native: bool = False
    """Modules holding their GGUF's own Q4_K / Q6_K blocks (``models/gguf_native.py``,
    ``target.weights=gguf_native``) multiply by those blocks with int8 activations at every row
    count, prefill included (``qk_kernels.py``: llama.cpp's arithmetic): one function of the file's
    own weights however many rows a forward has. Other modules keep the table's path."""
    native_layers: bool = True
    """With ``native`` and ``lean_layers``: a one-row forward of a batch of one (plain decoding, a
    draft's chain step) runs each decoder layer whose four GEMMs hold blocks as one C call
    (``qk_kernels.layer1``: the same GEMMs, the norms, rotary embedding, cache write, attention and
    SiLU beside them, rounded to bfloat16 where the torch layer rounds); a forward of more rows
    (a verification, a draft's check of copies) as two, around torch's attention
    (``qk_kernels.layer_rows``); False: the torch layer."""
    native_model: bool = False
    """With ``native``, ``native_layers`` and ``lean_layers``: a one-row forward of a batch of one runs
    the decoder as the engine's own loop (``native_decoder_row``: the embedding, rotary embedding,
    the layer kernels, the final norm) instead of Hugging Face's model forward: the same calls in
    the same order, the same bits, without the model forward's Python around them. Measured
    2026-12-07 on a 2-core Intel Xeon (MT-bench dev 20, 64 tokens, off / on alternating, two runs
    each): the 0.5B's one-row forward 17.5, 17.1 / 16.5, 16.2 ms (the 0.5B drafting alone 19.4, 19.8
    / 20.1, 20.4 tok/s), the 1.5B's 44.2, 44.8 / 44.4, 44.5 (no gain). Off by default until a
    test-split run measures it."""
    native_cols_from: int = 0
    """With ``native``: forwards of this many rows or more run the kernel's ``cols`` loop (16
    weight rows in the lanes, 8 activation rows at a time), fewer its 4-row loop; 0: the 4-row
    loop always. The two sum the same exact integers in another float order (~1e-7 relative)."""

    step_curve: tuple[float, ...] = ()
    """T(n) / T(1) of this plan's GEMMs for n = 1..the calibrated row counts, from the
    calibration's own timings (``tuning/kernel_calibration.step_curve``; () for an uncalibrated
    plan): what a priced router costs a verification of n rows at. Changes nothing computed."""

    @property
    def bitwise_hf(self) -> bool:
        """True when every choice is Hugging Face's own (greedy equals ``generate``)."""
        return (
            not self.gqa_packing
            and not self.slot_cache
            and not self.lean_layers
            and not self.int4_rows
            and not self.native
            and all(p == PATH_LINEAR for p in self.linear)
            and self.long_path == PATH_LINEAR
        )

    def path(self, rows: int, int4_ok: bool = True) -> str:
        """The GEMM path of a Linear call on ``rows`` rows (``int4_ok``: the module's
        shape fits the 4-bit kernel, ``int4_fits``)."""
        if rows <= self.int4_rows and int4_ok:
            return PATH_INT4
        return self.linear[rows - 1] if rows <= len(self.linear) else self.long_path

    def for_draft(self, int4_rows: int, native: bool | None = None) -> KernelChoice:
        """This plan for a draft model whose Linear calls on up to ``int4_rows`` rows take
        4-bit weights; ``native``: True, its modules holding blocks (re-encoded ones:
        ``weights=requant_q4k``) multiply by them at every row count, from ``DRAFT_COLS_FROM``
        rows through the cols loop unless the plan calibrated its own; False, never (the int4
        or dense paths); None, as the plan says. Neither setting: the plan unchanged."""
        plan = self
        if native is False and plan.native:
            plan = dataclasses.replace(plan, native=False, native_cols_from=0, name=f"{plan.name}-native")
        if native and not plan.native:
            cols = DRAFT_COLS_FROM if has_cols() else 0
            plan = dataclasses.replace(plan, native=True, native_cols_from=cols, name=f"{plan.name}+native")
        if not int4_rows:
            return plan
        return dataclasses.replace(plan, int4_rows=int4_rows, int4_exact=False, name=f"{plan.name}+int4<={int4_rows}")

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        global _ACTIVE
        before, _ACTIVE = _ACTIVE, self
        try:
            yield
        finally:
            _ACTIVE = before

    def describe(self) -> str:
        """``fast: 1-3 linear, 4 mkl4, 5-16 mkldnn; gqa packing; slot cache``."""
        runs: list[str] = []
        start = 1
        for m in range(2, len(self.linear) + 2):
            if m > len(self.linear) or self.linear[m - 1] != self.linear[start - 1]:
                span = f"{start}" if start == m - 1 else f"{start}-{m - 1}"
                runs.append(f"{span} {self.linear[start - 1]}")
                start = m
        if self.long_path != PATH_LINEAR:
            runs.append(f"{len(self.linear) + 1}+ {self.long_path}")
        own = "the file's own " if self.int4_exact else ""
        cols = f" (its cols loop from {self.native_cols_from} rows)" if self.native_cols_from else ""
        extras = [
            x
            for x, on in (
                ("gqa packing", self.gqa_packing),
                ("slot cache", self.slot_cache),
                ("lean layers", self.lean_layers),
                (f"{own}4-bit weights at 1-{self.int4_rows} rows", self.int4_rows),
                (f"the GGUF's own blocks x int8 activations at every row count{cols}", self.native),
                ("one-row layers in one C call", self.native and self.native_layers and self.lean_layers),
                ("one-row decoder loop", self.native and self.native_layers and self.lean_layers and self.native_model),
            )
            if on
        ]
        return f"{self.name}: " + "; ".join([", ".join(runs) or "linear"] + extras)


HF_KERNELS = KernelChoice()


def long_path_for(linear: tuple[str, ...] | list[str]) -> str:
    """The path for row counts past a calibrated table: the one chosen at its largest row
    count when that path runs any row count at the speed it was timed at (oneDNN's
    reordered weight, F.linear, the swapped operands); MKL's packed GEMM is packed for one
    row count, so past the table it falls back to F.linear."""
    last = linear[-1] if linear else PATH_LINEAR
    return last if last in (PATH_LINEAR, PATH_MKLDNN, PATH_WXT) else PATH_LINEAR


_ACTIVE: KernelChoice | None = None


# --------------------------------------------------------------------------- GEMM paths
def _rows(x: torch.Tensor) -> int:
    return x.numel() // x.shape[-1] if x.shape[-1] else 0


def _mkl_pack(weight: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), rows)


def _mkldnn_pack(weight: torch.Tensor) -> torch.Tensor:
    # the batch-size hint only steers oneDNN's blocking; 8 measured as good as any for 2-16 rows
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 8)


def _pack(weight: torch.Tensor, path: str):
    """``weight`` reordered for a prepacked path (``mkldnn``, ``mklN`` or ``int4``)."""
    if path == PATH_INT4:
        return int4_pack(weight)
    return _mkldnn_pack(weight) if path == PATH_MKLDNN else _mkl_pack(weight, int(path[3:]))


def apply_path(module: nn.Linear, path: str, x: torch.Tensor) -> torch.Tensor:
    """``x @ W.T + b`` through one path (x: [..., in])."""
    if path == PATH_LINEAR:
        return F.linear(x, module.weight, module.bias)
    if path == PATH_WXT:
        y = (module.weight @ x.reshape(-1, x.shape[-1]).T).T
        if module.bias is not None:
            y = y + module.bias
        return y.reshape(*x.shape[:-1], y.shape[-1])
    packs = module._stagedspec_packs
    if path not in packs:
        # packing happens once per module and path, at the first call (warm-up or calibration)
        packs[path] = _pack(module.weight, path)
    m = _rows(x)
    x2 = x.reshape(m, x.shape[-1])
    if path == PATH_MKLDNN:
        y = torch.ops.mkldnn._linear_pointwise(x2, packs[path], module.bias, "none", [], "")
    elif path == PATH_INT4:
        packed, scales_zeros = packs[path]
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x2.contiguous(), packed, INT4_GROUP, scales_zeros)
        if module.bias is not None:
            y = y + module.bias
    else:
        b = int(path[3:])
        if m < b:  # MKL's packed GEMM is fast only at the row count it was packed for
            x2 = torch.cat([x2, x2.new_zeros(b - m, x2.shape[1])])
        y = torch.ops.mkl._mkl_linear(x2, packs[path], module.weight, module.bias, b)[:m]
    return y.reshape(*x.shape[:-1], y.shape[-1])


def int4_allowed(module: nn.Linear, plan: KernelChoice) -> bool:
    """Whether ``module`` takes the 4-bit path under ``plan`` at its int4 row counts: under an
    exact plan only modules holding their file's own 4-bit codes (``models/gguf_int4.py``),
    else any module whose shape fits the kernel (re-quantized: a draft's plan)."""
    if plan.int4_exact:
        return getattr(module, "_stagedspec_int4_exact", False)
    return int4_fits(module)


def native_forward(module: nn.Linear, x: torch.Tensor, cols_from: int) -> torch.Tensor:
    """``x @ W.T + b`` through the module's GGUF blocks (``qk_kernels.linear``), in x's dtype."""
    m = _rows(x)
    y = qk_linear(x.reshape(m, x.shape[-1]), module._stagedspec_native, module.bias, cols_from)
    return y.reshape(*x.shape[:-1], y.shape[-1])


def _dispatch_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    plan = _ACTIVE
    if plan is not None and plan.native and getattr(self, "_stagedspec_native", None):
        return native_forward(self, x, plan.native_cols_from)
    if plan is None or not (plan.linear or plan.int4_rows):
        return F.linear(x, self.weight, self.bias)
    return apply_path(self, plan.path(_rows(x), not plan.int4_rows or int4_allowed(self, plan)), x)


def available_paths(dtype: torch.dtype, device: torch.device) -> list[str]:
    """GEMM paths that run here for this dtype (MKL's packed sgemm is float32 only)."""
    if device.type != "cpu":
        return [PATH_LINEAR]
    out = [PATH_LINEAR, PATH_WXT]
    probe = nn.Linear(8, 4, bias=False).to(dtype)
    probe._stagedspec_packs = {}
    x = torch.randn(2, 8, dtype=dtype)
    for path in [PATH_MKLDNN] + [f"mkl{b}" for b in MKL_ROWS]:
        try:
            torch.testing.assert_close(apply_path(probe, path, x), F.linear(x, probe.weight), rtol=1e-2, atol=1e-2)
            out.append(path)
        except (RuntimeError, AssertionError, AttributeError):
            pass
    return out


# --------------------------------------------------------------------------- attention
def _packed_gqa_attention(
    module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs
):
    """The attention ``install`` points the model at: under a plan with ``gqa_packing``,
    ``packed_gqa_attention`` (``attention_kernels.py``) for grouped-query heads; else
    Hugging Face's own SDPA function, unchanged."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    plan = _ACTIVE
    groups = getattr(module, "num_key_value_groups", 1)
    if plan is None or not plan.gqa_packing or groups == 1 or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    return packed_gqa_attention(query, key, value, attention_mask, groups, dropout=dropout, scaling=scaling)


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_NAME, _packed_gqa_attention)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)


# --------------------------------------------------------------------------- lean layers
def _fuse(parts: list[nn.Linear]) -> nn.Linear:
    """One Linear computing ``parts`` side by side; the parts' weights become views of
    the fused weight, so nothing is stored twice and their own forwards are unchanged."""
    w = torch.cat([p.weight.detach() for p in parts])
    has_bias = parts[0].bias is not None
    # skip_init: no random initialisation, so fusing leaves the global RNG stream alone
    fused = nn.utils.skip_init(nn.Linear, w.shape[1], w.shape[0], bias=has_bias, device=w.device, dtype=w.dtype)
    fused.requires_grad_(False)
    fused.weight.data = w
    if has_bias:
        fused.bias.data = torch.cat([p.bias.detach() for p in parts])
    start = 0
    for p in parts:
        stop = start + p.weight.shape[0]
        p.weight.data = w[start:stop]
        if has_bias:
            p.bias.data = fused.bias.data[start:stop]
        start = stop
    fused._stagedspec_packs = {}
    fused.forward = types.MethodType(_dispatch_forward, fused)
    return fused


def _ensure_fused(layer: nn.Module) -> tuple[nn.Linear, nn.Linear]:
    """The layer's fused (q/k/v, gate/up) Linears, made at first use. Kept outside the
    module tree (not submodules), so the model's state_dict and saving are unchanged."""
    fused = layer.__dict__.get("_stagedspec_fused")
    if fused is None:
        attn, mlp = layer.self_attn, layer.mlp
        fused = (_fuse([attn.q_proj, attn.k_proj, attn.v_proj]), _fuse([mlp.gate_proj, mlp.up_proj]))
        layer.__dict__["_stagedspec_fused"] = fused
    return fused


def _layer_gemms(layer: nn.Module) -> tuple[nn.Linear, nn.Linear, nn.Linear, nn.Linear]:
    """A lean layer's four GEMM modules in forward order: fused q/k/v, o, fused gate/up, down."""
    qkv, gate_up = _ensure_fused(layer)
    return qkv, layer.self_attn.o_proj, gate_up, layer.mlp.down_proj


def gemm_module_parts(model: nn.Module) -> list[tuple[nn.Linear, list[str]]]:
    """The Linear modules a lean forward calls, in order, each with the names of the
    model's Linears it computes: per Llama layer the fused q/k/v, o, fused gate/up and down
    projections; every other Linear as it is."""
    out: list[tuple[nn.Linear, list[str]]] = []
    inside: set[int] = set()
    for name, mod in model.named_modules():
        if hasattr(mod, "_stagedspec_forward"):
            qkv, o, gate_up, down = _layer_gemms(mod)
            p = f"{name}." if name else ""
            out += [
                (qkv, [f"{p}self_attn.{x}_proj" for x in "qkv"]),
                (o, [f"{p}self_attn.o_proj"]),
                (gate_up, [f"{p}mlp.gate_proj", f"{p}mlp.up_proj"]),
                (down, [f"{p}mlp.down_proj"]),
            ]
            inside |= {id(m) for m in mod.modules()}
        elif isinstance(mod, nn.Linear) and id(mod) not in inside:
            out.append((mod, [name]))
    return out


def gemm_modules(model: nn.Module) -> list[nn.Linear]:
    """The Linear modules a lean forward calls, in order (``gemm_module_parts``)."""
    return [mod for mod, _ in gemm_module_parts(model)]


def prepack(model: nn.Module, plan: KernelChoice) -> int:
    """Pack ``model``'s weights now for every prepacked path ``plan`` uses (``apply_path``
    would otherwise pack each module at its first call on a path: for a plan read from the
    cache, inside the first timed round at that row count, seconds for a 1.5B model).
    Under a native plan a module with GGUF blocks takes them at every row count: it gets no
    other pack (a bfloat16 copy of its weight it would never read), but its blocks' 16-row
    panels for the ``cols`` loop when the plan takes it (``Segment.col_panels``: else made at
    the first product of that many rows, 3.4 s for the 0.5B on a 2-core AMD EPYC, inside the
    first timed round where a draft gets the prompt lazily). Returns the packs made."""
    paths = sorted(
        {q for q in plan.linear if q not in (PATH_LINEAR, PATH_WXT)} | ({PATH_INT4} if plan.int4_rows else set())
    )
    cols = plan.native and plan.native_cols_from > 0 and has_cols()
    made = 0
    with torch.no_grad():
        for mod in gemm_modules(model) if paths or cols else ():
            segments = getattr(mod, "_stagedspec_native", None) if plan.native else None
            if segments:
                for seg in segments if cols else ():
                    made += "panels" not in seg.cache
                    seg.col_panels()
                continue
            packs = mod.__dict__.setdefault("_stagedspec_packs", {})
            for q in paths:
                if q not in packs and (q != PATH_INT4 or (int4_fits(mod) and not plan.int4_exact)):
                    packs[q] = _pack(mod.weight, q)
                    made += 1
    return made


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _lean_layer_forward(
    self,
    hidden_states,
    attention_mask=None,
    position_ids=None,
    cache=None,
    use_cache=False,
    position_embeddings=None,
    **kwargs,
):
    """A Llama decoder layer as one function (gpt-fast style): the same mathematics as
    Hugging Face's modules with two fused GEMMs and fused norms."""
    plan = _ACTIVE
    if plan is None or not plan.lean_layers:
        return self._stagedspec_forward(
            hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=use_cache,
            position_embeddings=position_embeddings,
            **kwargs,
        )
    if plan.native and plan.native_layers and hidden_states.shape[0] == 1:
        if hidden_states.shape[1] == 1:
            out = _native_layer1(self, hidden_states, attention_mask, cache, position_embeddings)
        else:
            out = _native_layer_rows(self, hidden_states, attention_mask, cache, position_embeddings, plan)
        if out is not None:
            return out
    attn, mlp = self.self_attn, self.mlp
    qkv, gate_up = _ensure_fused(self)
    B, n, H = hidden_states.shape
    D = attn.head_dim
    n_q, n_kv = attn.q_proj.out_features // D, attn.k_proj.out_features // D
    ln1 = self.input_layernorm
    x = F.rms_norm(hidden_states, (H,), ln1.weight, ln1.variance_epsilon)
    qk, v = qkv(x).split([(n_q + n_kv) * D, n_kv * D], dim=-1)
    cos, sin = position_embeddings
    # the query and key heads rotated together (one set of elementwise ops, the same values)
    q, k = _rope(qk.view(B, n, n_q + n_kv, D), cos.unsqueeze(2), sin.unsqueeze(2)).transpose(1, 2).split([n_q, n_kv], 1)
    v = v.view(B, n, n_kv, D).transpose(1, 2)
    if cache is not None:
        k, v = cache.update(k, v, attn.layer_idx)
    out, _ = _packed_gqa_attention(attn, q, k, v, attention_mask, scaling=attn.scaling)
    h = hidden_states + attn.o_proj(out.reshape(B, n, n_q * D))
    ln2 = self.post_attention_layernorm
    x = F.rms_norm(h, (H,), ln2.weight, ln2.variance_epsilon)
    gate, up = gate_up(x).chunk(2, dim=-1)
    return h + mlp.down_proj(mlp.act_fn(gate) * up)


def _layer_weights(layer: nn.Module) -> LayerWeights | None:
    """The layer as ``qk_kernels.layer1`` reads it, or None where it cannot run it (a GEMM
    without blocks, not bfloat16, an activation other than SiLU, heads it does not take); made
    at first use and kept with the segments it was made from."""
    attn, mlp = layer.self_attn, layer.mlp
    mods = _layer_gemms(layer)
    segs = tuple(getattr(m, "_stagedspec_native", None) for m in mods)
    key = tuple(map(id, segs))
    got = layer.__dict__.get("_stagedspec_layer1")
    if got is not None and got[0] == key:
        return got[2]
    weights = None
    D = attn.head_dim
    n_q, n_kv = attn.q_proj.out_features // D, attn.k_proj.out_features // D
    norms = (layer.input_layernorm.weight, layer.post_attention_layernorm.weight)
    if (
        all(segs)
        and all(p.dtype == torch.bfloat16 and p.device.type == "cpu" for p in norms)
        and (isinstance(mlp.act_fn, nn.SiLU) or type(mlp.act_fn).__name__ == "SiLUActivation")
        and takes_heads((n_q, n_kv, D))
    ):
        weights = LayerWeights(
            *segs,
            biases=tuple(None if m.bias is None else m.bias.detach().to(torch.bfloat16).contiguous() for m in mods),
            norms=tuple(w.detach().contiguous() for w in norms),
            eps=(layer.input_layernorm.variance_epsilon, layer.post_attention_layernorm.variance_epsilon),
            heads=(n_q, n_kv, D),
            scale=attn.scaling,
        )
    layer.__dict__["_stagedspec_layer1"] = (key, segs, weights)
    return weights


_MASK_ROW: list = [None, None]
"""The last attention mask ``_mask_row`` converted, and its row: every layer of a forward gets the same mask."""


def _mask_row(attention_mask: torch.Tensor) -> torch.Tensor:
    """The last query row of a ``[1, 1, rows, slots]`` mask as float32 additive (what ``layer1``
    takes), converted once per mask object."""
    if _MASK_ROW[0] is not attention_mask:
        row = attention_mask[0, 0, -1]
        _MASK_ROW[:] = [
            attention_mask,
            torch.zeros(row.shape, dtype=torch.float32).masked_fill(~row, float("-inf"))
            if row.dtype == torch.bool
            else row.float().contiguous(),
        ]
    return _MASK_ROW[1]


def _native_slot(layer, hidden_states, cache):
    """(the layer's slot cache, its ``LayerWeights``) where the C layer kernels can run it: bfloat16
    states, a filled ``SlotLayer`` (one that hands out slots), GEMMs on blocks; else None."""
    slots = getattr(cache, "layers", None)
    idx = layer.self_attn.layer_idx
    if hidden_states.dtype != torch.bfloat16 or slots is None or not hasattr(slots[idx], "append_slot"):
        return None
    if not slots[idx].is_initialized:
        return None
    w = _layer_weights(layer)
    return None if w is None else (slots[idx], w)


def _layer1_inputs(layer, hidden_states, attention_mask, cache):
    """(the layer's slot cache, its ``LayerWeights``, the mask row) where ``qk_kernels.layer1`` can
    run the layer for one new token of a batch of one; None where the layer, the cache or the mask
    is not one it runs."""
    got = _native_slot(layer, hidden_states, cache)
    if got is None:
        return None
    slot_layer, w = got
    mask = None if attention_mask is None else _mask_row(attention_mask)
    if mask is not None and mask.numel() != slot_layer.length + 1:
        return None
    return slot_layer, w, mask


def _native_layer1(layer, hidden_states, attention_mask, cache, position_embeddings) -> torch.Tensor | None:
    """One new token of a batch of one through ``qk_kernels.layer1``; None where the layer or
    the cache is not one it runs (the caller then takes the torch layer)."""
    got = _layer1_inputs(layer, hidden_states, attention_mask, cache)
    if got is None:
        return None
    slot_layer, w, mask = got
    keys, values, slot = slot_layer.append_slot()
    x = hidden_states.reshape(-1).clone()
    cos, sin = (t.reshape(-1).contiguous() for t in position_embeddings)
    layer1(w, x, cos, sin, keys, values, slot, mask)
    return x.view(hidden_states.shape)


NATIVE_DECODERS = ("LlamaModel", "Qwen2Model")
"""Decoders whose forward is embedding, rotary embedding, the layers and a final norm, nothing else
(``native_decoder_row`` stands in for them)."""


def native_decoder_row(
    decoder: nn.Module, ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor, cache
) -> torch.Tensor | None:
    """The last hidden state ``decoder`` (a ``NATIVE_DECODERS`` model) gives one new token of a batch
    of one (``ids`` [1, 1]) under the active plan's ``native_model``: its embedding, rotary embedding,
    each layer through ``qk_kernels.layer1`` (the call the layer itself would make, with the same
    mask row) and its final norm, without the model forward around them. None, before anything is
    written to the cache, where the plan, the model or any layer is not one it runs."""
    plan = _ACTIVE
    if plan is None or not (plan.native_model and plan.native and plan.native_layers and plan.lean_layers):
        return None
    if type(decoder).__name__ not in NATIVE_DECODERS or tuple(ids.shape) != (1, 1) or ids.device.type != "cpu":
        return None
    x = decoder.embed_tokens(ids)
    inputs = [_layer1_inputs(layer, x, attention_mask, cache) for layer in decoder.layers]
    if any(got is None for got in inputs):
        return None
    cos, sin = (t.reshape(-1).contiguous() for t in decoder.rotary_emb(x, position_ids))
    h = x.reshape(-1).clone()  # each layer's kernel takes it to the layer's output, in place
    for slot_layer, w, mask in inputs:
        keys, values, slot = slot_layer.append_slot()
        layer1(w, h, cos, sin, keys, values, slot, mask)
    return decoder.norm(h.view(x.shape))


def _native_layer_rows(layer, hidden_states, attention_mask, cache, position_embeddings, plan) -> torch.Tensor | None:
    """n new tokens of a batch of one through ``qk_kernels.layer_rows``: the layer's own code before
    and after the attention in C, the attention as the torch layer runs it (the same call, mask
    and cache); None where the layer or the cache is not one it runs."""
    got = _native_slot(layer, hidden_states, cache)
    if got is None:
        return None
    slot, w = got
    attn = layer.self_attn
    _, n, H = hidden_states.shape
    n_q, _, D = w.heads
    keys, values, start = slot.append_slot(n)
    x = hidden_states.reshape(n, H).clone()
    cos, sin = (t.reshape(n, D).contiguous() for t in position_embeddings)

    def attend(q: torch.Tensor) -> torch.Tensor:
        out, _ = _packed_gqa_attention(
            attn, q.view(1, n, n_q, D).transpose(1, 2), slot.keys, slot.values, attention_mask, scaling=attn.scaling
        )
        return out.reshape(n, n_q * D).contiguous()

    layer_rows(w, x, cos, sin, keys, values, start, attend, cols_from=plan.native_cols_from)
    return x.view(hidden_states.shape)


# --------------------------------------------------------------------------- install
def install(model: nn.Module) -> nn.Module:
    """Make ``model``'s Linear layers, decoder layers and attention follow the active
    plan (idempotent). Without an active plan the model computes exactly what it did
    before."""
    if getattr(model, "_stagedspec_kernels", False):
        return model
    for mod in model.modules():
        if isinstance(mod, nn.Linear) and not hasattr(mod, "_stagedspec_packs"):
            mod._stagedspec_packs = {}
            mod.forward = types.MethodType(_dispatch_forward, mod)
        elif not hasattr(mod, "_stagedspec_forward") and is_llama_layer(mod):
            mod._stagedspec_forward = mod.forward
            mod.forward = types.MethodType(_lean_layer_forward, mod)
    for mod in model.modules():  # the model itself, or the Hugging Face model inside a wrapper
        if hasattr(mod, "set_attn_implementation") and getattr(mod.config, "_attn_implementation", None) == "sdpa":
            _register_attention()
            mod.set_attn_implementation(ATTN_NAME)
    check_lean_layers(model)
    model._stagedspec_kernels = True
    return model


LEAN_CHECK_PLAN = KernelChoice(name="lean-check", lean_layers=True, gqa_packing=True)
"""What ``check_lean_layers`` compares with Hugging Face's path: the lean layers and the
packed attention (the code that replaces HF's modules), every GEMM through ``F.linear``
(the GEMM paths compute the same products, and are chosen per machine later)."""


def check_lean_layers(model: nn.Module, tokens: int = 8) -> None:
    """Once per model: ``tokens`` tokens through the lean layers and through Hugging Face's
    path must give the same logits up to kernel rounding (``LEAN_CHECK_RTOL``). The class
    whitelist says which layers the lean forward is written for; this proves it on the
    loaded weights and config, so a family that passes the whitelist yet computes
    something else (a new config field, a changed HF class) fails here, by name, and is
    put back on HF's path instead of giving wrong logits silently."""
    lean = [m for m in model.modules() if hasattr(m, "_stagedspec_forward")]
    if not lean:
        return
    p = next(model.parameters())
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    vocab = decoder.get_input_embeddings().num_embeddings
    ids = (torch.arange(tokens, device=p.device) * 37 + 11).remainder(vocab)[None]
    classes = sorted({type(m).__name__ for m in lean})
    with torch.no_grad():
        with HF_KERNELS.active():
            ref = check_logits(model, ids, tokens // 2 + 1)
        try:
            with LEAN_CHECK_PLAN.active():
                got = check_logits(model, ids, tokens // 2 + 1)
            err = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
        except Exception as e:  # noqa: BLE001 -- any failure of the lean forward is a refusal
            err, why = float("inf"), f"{type(e).__name__}: {e}"
        else:
            why = f"||logits - HF|| / ||HF logits|| = {err:.2e}"
    rtol = LEAN_CHECK_RTOL.get(p.dtype, 4e-2)
    if not err <= rtol:
        for m in lean:  # back to Hugging Face's forward: the model stays usable through HF_KERNELS
            m.forward = m._stagedspec_forward
            del m._stagedspec_forward
        raise ValueError(
            f"the lean layer forward does not reproduce {', '.join(classes)} ({why}, allowed "
            f"{rtol:g} in {str(p.dtype).removeprefix('torch.')}); run this model with kernels=hf"
        )
    log.debug("lean layers checked against HF on %d tokens (%s): %s", tokens, ", ".join(classes), why)
