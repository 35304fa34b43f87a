"""End to end on the embedded SmolLM2-135M: greedy speculative output equals HF greedy
``generate`` token for token, for every hierarchy, on real MT-bench prompts (shipped
offline in a package, so this runs on a bare clone)."""

from __future__ import annotations

import pytest
import torch

from stagedspec.drafters import KatzNgramDrafter, ModelDrafter, PromptLookupDrafter
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import TreeShape
from stagedspec.models.chat_text import encode_prompt
from stagedspec.models.model_loading import truncated_copy
from stagedspec.prompts.prompt_sets import load_prompt_set

pytestmark = pytest.mark.slow
N_NEW = 32


@pytest.fixture(scope="module")
def setup(embedded_model):
    qs = load_prompt_set("mt_bench", categories=["extraction", "math", "coding"], per_category=1, max_turns=1)
    prompts = [encode_prompt(embedded_model.tokenizer, q.turns[:1]) for q in qs]
    ref = []
    for p in prompts:
        out = embedded_model.model.generate(
            torch.tensor([p]),
            attention_mask=torch.ones(1, len(p), dtype=torch.long),
            max_new_tokens=N_NEW,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
        ref.append(out[0, len(p) :].tolist())
    small = truncated_copy(embedded_model, 4).model
    return embedded_model, prompts, ref, small


def _levels(kind, target, small):
    V = target.vocab_size
    if kind == "ngram":
        return KatzNgramDrafter(V, k=4)
    if kind == "lookup":
        return PromptLookupDrafter(k=5)
    if kind == "small":
        return ModelDrafter(small, k=3)
    if kind == "ngram>small":
        return ModelDrafter(small, k=4, lower=KatzNgramDrafter(V, k=3))
    if kind == "small-tree":
        return ModelDrafter(small, k=3, tree=TreeShape.parse({"widths": [2, 2, 1]}))
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["ngram", "lookup", "small", "ngram>small", "small-tree"])
def test_embedded_greedy_equals_hf(setup, kind):
    target, prompts, ref, small = setup
    dec = SpeculativeDecoder(target.model, _levels(kind, target, small), SamplingConfig())
    # the three prompts as one ragged batch: batched and exact at once
    res = dec.generate(prompts, N_NEW)
    assert [s.output_ids for s in res.sequences] == ref
    assert res.summary()["mean_accepted_tokens_per_call"] > 1.0
