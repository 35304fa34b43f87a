"""The cache code's logits are the model's own: the families that process their LM head's
output (Cohere's scale, Granite's divisor, Gemma-2's soft cap) get it applied, one that
does something else is refused by name, and so are caches that trim themselves (sliding
windows shorter than the context)."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    CohereConfig,
    CohereForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    GraniteConfig,
    GraniteForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.kv_cache import KVModel
from stagedspec.engine.sampling import SamplingConfig, probabilities

SMALL = dict(
    vocab_size=64,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=64,
    max_position_embeddings=64,
    initializer_range=0.3,
)
PROMPT = [3, 17, 5, 40, 9, 22]


def _build(cls, config):
    torch.manual_seed(0)
    return cls(config).eval()


FAMILIES = {
    "cohere": lambda: _build(CohereForCausalLM, CohereConfig(**SMALL, logit_scale=0.5)),
    "granite": lambda: _build(GraniteForCausalLM, GraniteConfig(**SMALL, logits_scaling=4.0)),
    # a window as long as the context never trims; a cap of 1 bends these logits visibly
    "gemma2": lambda: _build(
        Gemma2ForCausalLM,
        Gemma2Config(**SMALL, head_dim=16, query_pre_attn_scalar=16, sliding_window=64, final_logit_softcapping=1.0),
    ),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_logits_are_the_models_own(family):
    model = FAMILIES[family]()
    with torch.no_grad():
        own = model(torch.tensor([PROMPT])).logits[0].float()
        head_only = model.get_output_embeddings()(model.get_decoder()(torch.tensor([PROMPT])).last_hidden_state)[0]
    # the family's processing matters here: the head alone is another distribution
    assert (head_only - own).abs().max() > 0.05
    kv = KVModel(model)
    kv.reset(1)
    (ours,) = kv.extend(kv.sync([PROMPT]), [[-1] + list(range(len(PROMPT) - 1))], [list(range(len(PROMPT)))])
    torch.testing.assert_close(ours, own, atol=1e-5, rtol=1e-5)
    cfg = SamplingConfig(temperature=0.8, top_k=20)
    torch.testing.assert_close(probabilities(ours, cfg), probabilities(own, cfg), atol=1e-6, rtol=1e-5)


def test_greedy_through_a_capped_family_equals_hf():
    model = FAMILIES["gemma2"]()
    dec = SpeculativeDecoder(model, None, SamplingConfig())
    out = dec.generate([PROMPT], 12).sequences[0].output_ids
    ref = model.generate(torch.tensor([PROMPT]), max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert out == ref[0, len(PROMPT) :].tolist()


class _Doubled(LlamaForCausalLM):
    """A family whose forward does something the cache code does not know."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * 2
        return out


def test_unknown_logit_processing_is_refused_by_family():
    model = _build(_Doubled, LlamaConfig(**SMALL))
    with pytest.raises(ValueError, match=r"model family 'llama' \(_Doubled\) is not supported.*logit_scale \(Cohere"):
        KVModel(model)
    KVModel(_build(LlamaForCausalLM, LlamaConfig(**SMALL)))  # the plain family passes


@pytest.mark.parametrize(
    "make,why",
    [
        (
            lambda: _build(MistralForCausalLM, MistralConfig(**SMALL, sliding_window=16)),
            r"'mistral': layer 0 has a sliding window of 16 tokens \(context 64\)",
        ),
        (
            lambda: _build(Gemma2ForCausalLM, Gemma2Config(**SMALL, head_dim=16, sliding_window=16)),
            r"'gemma2': layer 0 has a sliding window of 16 tokens",
        ),
    ],
)
def test_sliding_window_caches_are_refused(make, why):
    with pytest.raises(ValueError, match=why):
        KVModel(make())


def test_models_without_a_trimming_window_pass():
    KVModel(_build(MistralForCausalLM, MistralConfig(**SMALL, sliding_window=None)))
    KVModel(_build(Qwen2ForCausalLM, Qwen2Config(**SMALL)))  # use_sliding_window defaults to False
