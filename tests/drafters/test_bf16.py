"""What greedy equality with HF means in bfloat16: a documented tolerance, not a claim.

In float32 (Hugging Face's kernel plan) greedy output equals ``generate(do_sample=False)``
token for token (``test_greedy_exact.py``, ``test_embedded_e2e.py``). In bfloat16 it
cannot: the same logits computed with other matrix shapes (the prompt cached in another
split, rows batched together, a tree's extra positions) round differently, and logits of
magnitude 16-32 are spaced 0.125 apart in bfloat16, so HF's own top two logits are often
exactly tied. Measured on 8 Spec-Bench dev prompts x 24 tokens of the embedded SmolLM2
(2026-12-03): plain decoding through our cache at batch 1 leaves HF's output on 3 of 8
prompts, at batch 4 on 1 of 8, an n-gram or small-model [2, 2, 1] tree on 4 of 8; every
time at a position where HF's top two logits were tied or one bfloat16 step apart.

The tolerance we state and test: in bfloat16 the output equals HF's up to the first
position where HF's top-two logit gap is at most two bfloat16 steps (ulps) of its top
logit; there it may differ, and after it the texts go their own ways.
"""

from __future__ import annotations

import math

import pytest
import torch

from stagedspec.drafters import KatzNgramDrafter
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import TreeShape
from stagedspec.models.chat_text import encode_prompt
from stagedspec.models.model_loading import ModelSpec, load_model
from stagedspec.prompts.prompt_sets import load_prompt_set

pytestmark = pytest.mark.slow
N_NEW = 24
ULPS = 2
QUESTION_IDS = (82, 92, 102, 112)
"""MT-bench questions (writing, roleplay, reasoning, math), shipped in the package: the
first question of each of the first four categories of the Spec-Bench dev file this test
read before, so it runs on a fresh clone with the same prompts."""


def bf16_ulp(x: float) -> float:
    """Spacing of bfloat16 numbers at |x| (8 significant bits)."""
    return 2.0 ** (math.floor(math.log2(abs(x))) - 7) if x else 2.0**-133


@pytest.fixture(scope="module")
def bf16_setup():
    target = load_model(ModelSpec(source="embedded", dtype="bfloat16"))
    questions = {q.question_id: q for q in load_prompt_set("mt_bench")}
    prompts = [encode_prompt(target.tokenizer, questions[i].turns[:1])[-64:] for i in QUESTION_IDS]
    ref, gaps = [], []
    for p in prompts:
        out = target.model.generate(
            torch.tensor([p]),
            attention_mask=torch.ones(1, len(p), dtype=torch.long),
            max_new_tokens=N_NEW,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            output_scores=True,
            return_dict_in_generate=True,
        )
        ref.append(out.sequences[0, len(p) :].tolist())
        tops = [s[0].float().topk(2).values for s in out.scores]
        gaps.append([(float(t[0] - t[1]), bf16_ulp(float(t[0]))) for t in tops])
    return target, prompts, ref, gaps


@pytest.mark.parametrize("kind,batch", [("ar", 4), ("ngram-tree221", 1)])
def test_bf16_output_leaves_hf_only_at_a_near_tie(bf16_setup, kind, batch):
    target, prompts, ref, gaps = bf16_setup
    outs = []
    for i in range(0, len(prompts), batch):
        drafter = (
            None if kind == "ar" else KatzNgramDrafter(target.vocab_size, tree=TreeShape.parse({"widths": [2, 2, 1]}))
        )
        outs += [
            s.output_ids
            for s in SpeculativeDecoder(target.model, drafter, SamplingConfig())
            .generate(prompts[i : i + batch], N_NEW)
            .sequences
        ]
    for out, want, gap in zip(outs, ref, gaps):
        first = next((j for j, (a, b) in enumerate(zip(out, want)) if a != b), None)
        if first is None:
            assert out == want
            continue
        g, ulp = gap[first]
        assert g <= ULPS * ulp, f"left HF's output at token {first} where its top-two gap was {g} (> {ULPS} ulps)"
