"""Which decoder layers get the lean forward of a fast kernel plan: whitelisted classes
(Llama, Qwen2) whose mathematics it reproduces, nothing that only looks like them
(Granite's residual multiplier, SmolLM3's layers without RoPE, a non-gated MLP, a Llama
config with extras), and the one-time check against Hugging Face's logits at install."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import AutoModelForCausalLM, GraniteConfig, LlamaConfig, Qwen2Config, SmolLM3Config

from stagedspec.engine import kernels
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.kernels import KernelChoice
from stagedspec.engine.sampling import SamplingConfig
from tests.oracles import hf_greedy

SMALL = dict(
    vocab_size=128,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    max_position_embeddings=256,
    tie_word_embeddings=False,
)
LEAN = KernelChoice(name="lean", lean_layers=True)
FAST = KernelChoice(name="fast", linear=("linear", "wxt") * 4, gqa_packing=True, slot_cache=True, lean_layers=True)
IDS = torch.tensor([[3, 9, 27, 81, 115, 2, 6, 18, 54, 35]])


def _build(config, seed: int = 0, random_biases: bool = False) -> nn.Module:
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    if random_biases:  # HF initialises biases to zero, which would hide a bias the lean forward drops
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, nn.Linear) and m.bias is not None:
                    m.bias.normal_(0, 0.5)
    return model


def _lean_layers(model: nn.Module) -> list[bool]:
    return [hasattr(layer, "_stagedspec_forward") for layer in model.model.layers]


class _UpDownMLP(nn.Module):
    """A non-gated MLP (``down(act(up(x)))``): a subset of Llama's MLP parts."""

    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.up_proj(x)))


def _granite():
    return _build(GraniteConfig(**SMALL, residual_multiplier=0.5, attention_multiplier=0.25))


def _smollm3():
    return _build(
        SmolLM3Config(**SMALL, no_rope_layer_interval=2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    )  # layer 1 has no RoPE


def _llama_non_gated_mlp():
    model = _build(LlamaConfig(**SMALL))
    for layer in model.model.layers:
        layer.mlp = _UpDownMLP(64, 128)
    return model


def _llama_with_granite_extras():
    return _build(LlamaConfig(**SMALL, residual_multiplier=0.5))


@pytest.mark.parametrize(
    "make",
    [_granite, _smollm3, _llama_non_gated_mlp, _llama_with_granite_extras],
    ids=["granite", "smollm3-no-rope", "llama-non-gated-mlp", "llama-config-extras"],
)
def test_layers_that_only_look_like_llama_stay_on_hf(make):
    """Before the whitelist each of these got the lean forward: Granite lost its residual
    multiplier (logits off by 0.3 of 0.5), SmolLM3 got RoPE on its no-RoPE layer, the
    non-gated MLP crashed (no gate_proj)."""
    model = make()
    with torch.no_grad():
        ref = model(IDS).logits
        kernels.install(model)
        assert not any(_lean_layers(model))
        with LEAN.active():
            assert torch.equal(model(IDS).logits, ref)


@pytest.mark.parametrize(
    "make",
    [
        lambda: _build(Qwen2Config(**SMALL), random_biases=True),
        lambda: _build(LlamaConfig(**SMALL, attention_bias=True, mlp_bias=True), random_biases=True),
        lambda: _build(LlamaConfig(**SMALL)),
    ],
    ids=["qwen2-qkv-biases", "llama-all-biases", "llama"],
)
def test_whitelisted_layers_are_lean_and_match_hf_logits(make):
    model = make()
    with torch.no_grad():
        ref = model(IDS).logits
        kernels.install(model)
        assert all(_lean_layers(model))
        with LEAN.active():
            torch.testing.assert_close(model(IDS).logits, ref, rtol=1e-5, atol=1e-5)


def test_qwen2_sliding_window_layers_stay_on_hf():
    """Qwen2 with sliding windows from layer 1 on: layer 0 lean, layer 1 (a window the
    lean attention does not apply) on Hugging Face's forward."""
    model = _build(Qwen2Config(**SMALL, use_sliding_window=True, sliding_window=4, max_window_layers=1))
    assert model.config.layer_types == ["full_attention", "sliding_attention"]
    kernels.install(model)
    assert _lean_layers(model) == [True, False]


def test_qwen2_greedy_through_a_fast_plan_equals_hf_generate():
    model = _build(Qwen2Config(**SMALL), seed=3, random_biases=True)
    prompts = [[5, 9, 3, 7, 7, 1, 4], [4, 2, 11]]
    ref = [hf_greedy(model, p, 24) for p in prompts]
    dec = SpeculativeDecoder(model, None, SamplingConfig(), plan=FAST)
    assert all(_lean_layers(model))
    assert [s.output_ids for s in dec.generate(prompts, 24).sequences] == ref


def test_install_refuses_a_lean_forward_that_changes_the_logits(monkeypatch):
    """A whitelisted class whose lean forward computes something else (here: RoPE left
    out) fails the install-time check by name, and goes back to HF's forward."""
    monkeypatch.setattr(kernels, "_rope", lambda x, cos, sin: x)
    model = _build(LlamaConfig(**SMALL))
    with torch.no_grad():
        ref = model(IDS).logits
    with pytest.raises(ValueError, match=r"does not reproduce LlamaDecoderLayer .*kernels=hf"):
        kernels.install(model)
    assert not any(_lean_layers(model))
    with torch.no_grad(), LEAN.active():
        assert torch.equal(model(IDS).logits, ref)


def test_the_check_runs_once_per_model(monkeypatch):
    calls = []
    real = kernels.check_lean_layers
    monkeypatch.setattr(kernels, "check_lean_layers", lambda m: calls.append(m) or real(m))
    model = _build(LlamaConfig(**SMALL))
    kernels.install(model)
    kernels.install(model)
    assert calls == [model]
