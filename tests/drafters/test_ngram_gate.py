"""An n-gram level that drafts only from a sure distribution (``min_top``): where the
LM's likeliest next token has less than ``min_top`` probability it offers nothing (at the
root: the level above drafts on its own; deeper: the chain ends). The gate reads the
LM's own distribution before anything is drawn from it, so verification stays exact:
greedy equals HF token for token, sampling passes the chi-square test, and the drafts
have exactly the lengths the rule predicts by hand."""

from __future__ import annotations

import pytest
import torch

from stagedspec.drafters import KatzNgramDrafter, ModelDrafter
from stagedspec.drafters.ngram_lm import KatzBackoffLM
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.models.model_loading import truncated_copy
from tests.helpers import tiny_target
from tests.oracles import (
    N_NEW,
    PROMPT,
    chi2,
    chi2_critical,
    draw_positions_3_4,
    exact_positions_3_4,
    hf_reference,
    peaked,
    tiny_prompts,
)


def _greedy_walk(vocab: int, ctx: list[int], k: int, order: int = 3) -> tuple[list[int], list[float]]:
    """By hand: an LM over ``ctx`` followed greedily for k tokens, and the top probability
    of the distribution each token was picked from."""
    lm = KatzBackoffLM(vocab, order)
    lm.update(ctx)
    out, tops = [], []
    for _ in range(k):
        p = lm.distribution(ctx + out)
        tops.append(float(p.max()))
        out.append(int(p.argmax()))
    return out, tops


def _expected_chain(tokens: list[int], tops: list[float], min_top: float) -> list[int]:
    """The gated draft: the walk up to the first distribution whose top is below ``min_top``."""
    n = next((i for i, t in enumerate(tops) if t < min_top), len(tokens))
    return tokens[:n]


def test_the_gate_cuts_the_chain_where_the_top_probability_falls_below_it():
    V, ctx, k = 64, [3, 9, 4, 3, 9, 4, 3, 9, 7, 3, 9], 4
    tokens, tops = _greedy_walk(V, ctx, k)
    assert max(tops) > min(tops)  # the chain's distributions differ in how sure they are
    for min_top in [0.0] + sorted(set(tops)) + [max(tops) + 1e-4]:
        d = KatzNgramDrafter(V, k=k, min_top=min_top)
        d.setup(SamplingConfig(), torch.Generator())
        d.reset(1)
        (tree,) = d.propose([ctx])
        assert tree.tokens == _expected_chain(tokens, tops, min_top), min_top
        assert tree.parents == list(range(-1, len(tree.tokens) - 1))
    # a gate just above the root's top probability offers nothing at all
    d = KatzNgramDrafter(V, k=k, min_top=tops[0] + 1e-4)
    d.setup(SamplingConfig(), torch.Generator())
    d.reset(1)
    assert d.propose([ctx])[0].tokens == []


class _Spy(KatzNgramDrafter):
    """Records the length of every draft the gated level offers."""

    sizes: list[int]

    def propose(self, contexts, features=None):
        trees = super().propose(contexts, features)
        self.sizes = getattr(self, "sizes", []) + [len(t) for t in trees]
        return trees


def test_greedy_gated_ngram_under_a_small_model_equals_hf():
    target = tiny_target()
    small = truncated_copy(target, 1).model
    prompts = tiny_prompts(3)
    lower = _Spy(target.vocab_size, k=2, min_top=0.2)
    dec = SpeculativeDecoder(target.model, ModelDrafter(small, k=4, lower=lower), SamplingConfig())
    assert [s.output_ids for s in dec.generate(prompts, N_NEW).sequences] == [list(r) for r in hf_reference(3)]
    assert 0 in lower.sizes and max(lower.sizes) > 0, lower.sizes  # the gate both held and let drafts through


@pytest.mark.parametrize(
    "factory,cfg",
    [
        (
            lambda: ModelDrafter(peaked()[2], k=3, lower=_Spy(8, k=2, order=2, min_top=0.35)),
            SamplingConfig(temperature=1.0, seed=51),
        ),
        (
            lambda: ModelDrafter(
                peaked()[2], k=3, stop_below=0.6, stop_alternatives=2, lower=_Spy(8, k=2, order=2, min_top=0.35)
            ),
            SamplingConfig(temperature=0.7, top_p=0.9, seed=52),
        ),
    ],
    ids=["ngram-gated>small-t1", "ngram-gated>small-stop-alts-t0.7-topp"],
)
def test_gated_ngram_samples_the_target_at_positions_3_and_4(factory, cfg):
    """Chi-square (N = 6000, alpha = 1e-4) of the joint of the 3rd and 4th tokens with an
    n-gram level under the draft that drafts in some inner rounds and not in others
    (checked)."""
    target = peaked()[0]
    d = factory()
    SpeculativeDecoder(
        target.model, d, SamplingConfig(temperature=cfg.temperature, top_p=cfg.top_p, seed=cfg.seed)
    ).generate([PROMPT] * 200, 4)
    sizes = d.lower.sizes
    assert sizes.count(0) > len(sizes) // 20 and sum(s > 0 for s in sizes) > len(sizes) // 20, sizes
    stat, df = chi2(draw_positions_3_4(factory, cfg, 6000, batch=200), exact_positions_3_4(cfg))
    assert stat < chi2_critical(df), f"chi2={stat:.1f} df={df} crit={chi2_critical(df):.1f}"


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2, True, "x"])
def test_bad_min_top_is_refused_naming_the_value(bad):
    from stagedspec.drafters.hierarchy import NgramLevel

    with pytest.raises(ValueError, match=rf"min_top must be a probability in \[0, 1\).*{bad!r}"):
        NgramLevel(min_top=bad).validate()
    with pytest.raises(ValueError, match=rf"min_top must be a probability in \[0, 1\).*{bad!r}"):
        KatzNgramDrafter(8, min_top=bad)
