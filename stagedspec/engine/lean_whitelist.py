"""Which decoder layers a plan's lean forward (``kernels.py``) may replace, and what its
install-time check compares.

``is_llama_layer(layer)``: the layer's class is whitelisted (``LEAN_CLASSES``: Llama,
Qwen2), built from its own parts, with no config extras. ``check_logits`` is the forward
``kernels.check_lean_layers`` runs through Hugging Face's path and through the lean one;
``LEAN_CHECK_RTOL`` how far apart their logits may be per dtype.
"""

from __future__ import annotations

import torch
from torch import nn

_TF = "transformers.models."
LEAN_CLASSES: dict[str, tuple[str, str, str]] = {
    _TF + "llama.modeling_llama.LlamaDecoderLayer": (
        _TF + "llama.modeling_llama.LlamaAttention",
        _TF + "llama.modeling_llama.LlamaMLP",
        _TF + "llama.modeling_llama.LlamaRMSNorm",
    ),
    # Llama with biases on q/k/v (the fused GEMM carries them) and optional sliding-window
    # layers (refused per layer below: the lean attention has no window)
    _TF + "qwen2.modeling_qwen2.Qwen2DecoderLayer": (
        _TF + "qwen2.modeling_qwen2.Qwen2Attention",
        _TF + "qwen2.modeling_qwen2.Qwen2MLP",
        _TF + "qwen2.modeling_qwen2.Qwen2RMSNorm",
    ),
}
"""Decoder-layer classes whose mathematics the lean forward (``kernels.py``) reproduces, with the
attention, MLP and norm classes each is built from. By class, not by submodule names:
Granite's layer has exactly Llama's submodules but scales each residual branch
(``residual_multiplier``), SmolLM3's skips RoPE on some layers; names alone let both
through and their logits changed."""

_CONFIG_EXTRAS = (
    "residual_multiplier",
    "attention_multiplier",
    "embedding_multiplier",
    "no_rope_layers",
    "no_rope_layer_interval",
    "use_qk_norm",
    "qk_layernorm",
    "attn_logit_softcapping",
)
"""Config fields of families whose layers do more than Llama's; a whitelisted layer under
a config that has one (a converted or hand-edited config) is left on Hugging Face's path."""

_LAYER_PARTS = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}
_ATTN_PARTS = {"q_proj", "k_proj", "v_proj", "o_proj"}
_MLP_PARTS = {"gate_proj", "up_proj", "down_proj", "act_fn"}


def _qualname(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def is_llama_layer(layer: nn.Module) -> bool:
    """A whitelisted decoder layer (``LEAN_CLASSES``) built from its own classes, with
    exactly Llama's parts (pre-norm attention, gated MLP, RMS norms), fusable biases (all
    of q/k/v, and gate/up, with or without), full attention and no config extras."""
    parts = LEAN_CLASSES.get(_qualname(layer))
    if parts is None or {n for n, _ in layer.named_children()} != _LAYER_PARTS:
        return False
    attn, mlp = layer.self_attn, layer.mlp
    if (_qualname(attn), _qualname(mlp)) != parts[:2] or any(
        _qualname(getattr(layer, n)) != parts[2] for n in ("input_layernorm", "post_attention_layernorm")
    ):
        return False
    if {n for n, _ in attn.named_children()} != _ATTN_PARTS or {n for n, _ in mlp.named_children()} != _MLP_PARTS:
        return False
    if len({attn.q_proj.bias is None, attn.k_proj.bias is None, attn.v_proj.bias is None}) != 1 or (
        mlp.gate_proj.bias is None
    ) != (mlp.up_proj.bias is None):
        return False
    cfg = getattr(attn, "config", None)
    layer_types = getattr(cfg, "layer_types", None)
    idx = getattr(attn, "layer_idx", None)
    return (
        getattr(attn, "sliding_window", None) is None
        and (layer_types is None or idx is None or layer_types[idx] == "full_attention")
        and all(getattr(cfg, x, None) in (None, False) for x in _CONFIG_EXTRAS)
        and all(hasattr(getattr(layer, n), "variance_epsilon") for n in ("input_layernorm", "post_attention_layernorm"))
        and hasattr(attn, "head_dim")
        and hasattr(attn, "scaling")
    )


LEAN_CHECK_RTOL = {torch.float32: 1e-4, torch.float64: 1e-4, torch.bfloat16: 4e-2, torch.float16: 4e-2}
"""Largest accepted ||logits - HF logits|| / ||HF logits|| (all positions, whole vocabulary).
Measured on 8 tokens: float32, SmolLM2 3e-7 (the fused GEMMs and ``F.rms_norm`` sum in
another order); bfloat16, 1.1e-2 (SmolLM2), 1.8e-2 (Qwen2.5-Coder 0.5B), 1.5e-2 (1.5B),
where HF's own path fed as 1 + 7 instead of 5 + 3 tokens already moves 0.7-1.3e-2. Two
broken forwards on the same models: no RoPE on every 4th layer 6.9-8.8e-2, the attention
branch scaled by 0.9 6.5-7.8e-2 (float32 and bfloat16 alike). So float32 is checked
tightly, half types between their rounding and those faults; a fault that moves the
logits by less than ~5% passes a half-precision check, which is why the class whitelist
comes first."""


def check_logits(model: nn.Module, ids: torch.Tensor, split: int) -> torch.Tensor:
    """Logits at every position of ``ids``, fed as a prefill of ``split`` tokens and then
    the rest through the cache (the two ways the engine calls a layer)."""
    from transformers import DynamicCache

    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    cache = DynamicCache(config=decoder.config)  # filled in place
    out: list[torch.Tensor] = []
    for part in (ids[:, :split], ids[:, split:]):
        h = decoder(input_ids=part, cache=cache, use_cache=True).last_hidden_state
        out.append(h if head is None else head(h))
    return torch.cat(out, 1).float()
