"""``coupling=gumbel`` through the decoder and every kind of level (``engine/coupling.py``).

Drafter invariance, exactly: on the chi-square set-up's 8-token target (``tests/oracles.py``),
60 rows (two prompts, 12 tokens each, T = 0.9 with top-k 5), every level kind (a model
chain and tree, a staged level, a staged tree, an n-gram LM, prompt lookup, the bypass
router, a dynamic tree) emits plain sampling's tokens, row for row. Under ``residual`` the
same runs differ from plain sampling (each method reads the generator in its own order).

Distribution: the chi-square test of tokens 1-2 and 3-4 (N = 4000, critical values 64.1 /
84.8 at T = 1) for plain gumbel sampling; since every level emits the same tokens, this is
their distribution too.

Coupling, not only exactness: a level drafting with the target itself draws what the target
draws, so every draft token is kept.

Mutants, tried once by hand, each caught: the walk keeping the first child whose token has
mass instead of the target's draw (the chain's outputs differ from plain sampling's); the noise
keyed without the sequence (every row of a batch drawing alike: chi2 5842 against 64.1 for
tokens 1-2); a level drawing at its context's length + 1 (the self-drafting chain kept 353 of
1708 tokens), and a staged level's inner check likewise (the same 353 of 1708).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from stagedspec.drafters import BypassDrafter, KatzNgramDrafter, ModelDrafter, PromptLookupDrafter
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.coupling import Sampler
from stagedspec.engine.sampling import SamplingConfig, probabilities
from stagedspec.engine.tree import TreeShape
from tests.oracles import PROMPT, V, chi2_models, lower_model, staged_drafter, statistics

GUMBEL = SamplingConfig(temperature=0.9, top_k=5, seed=3, coupling="gumbel")
PROMPTS = [PROMPT] * 50 + [[3, 4]] * 10


def _factories():
    draft = chi2_models()[1]
    return {
        "chain": lambda: ModelDrafter(draft, k=3),
        "tree": lambda: ModelDrafter(draft, k=3, tree=TreeShape.parse({"widths": [3, 2]})),
        "staged": staged_drafter,
        "staged-tree": lambda: ModelDrafter(
            draft, tree=TreeShape.parse({"widths": [2, 2, 1]}), lower=ModelDrafter(lower_model(), k=2, name="inner")
        ),
        "ngram": lambda: KatzNgramDrafter(V, k=2, order=2),
        "lookup": lambda: PromptLookupDrafter(k=2),
        "bypass": lambda: BypassDrafter(staged_drafter(), k=3, min_match=2),
        "dynamic": lambda: ModelDrafter(draft, tree=TreeShape.parse({"dynamic": {"budget": 6, "topk": 3, "depth": 3}})),
    }


def _outputs(drafter, cfg: SamplingConfig) -> list[list[int]]:
    dec = SpeculativeDecoder(chi2_models()[0].model, drafter, cfg)
    return [s.output_ids for s in dec.generate(PROMPTS, 12).sequences]


@pytest.mark.parametrize("name", list(_factories()))
def test_every_level_emits_plain_samplings_tokens(name):
    plain = _outputs(None, GUMBEL)
    assert len({tuple(o) for o in plain}) > 40  # the rows are distinct samples
    assert _outputs(_factories()[name](), GUMBEL) == plain
    residual = dataclasses.replace(GUMBEL, coupling="residual")
    assert _outputs(_factories()[name](), residual) != _outputs(None, residual)


def test_plain_gumbel_sampling_has_the_targets_distribution():
    for pair, stat, df, crit in statistics(lambda: None, SamplingConfig(temperature=1.0, seed=11, coupling="gumbel")):
        assert stat < crit, f"{pair}: chi2={stat:.1f} df={df} crit={crit:.1f}"


@pytest.mark.parametrize("staged", [False, True], ids=["chain", "staged"])
def test_a_level_drafting_with_the_target_keeps_every_token(staged):
    """q = p and the same noise: the level's draw is the target's draw. Staged: the target also
    checks a lower level's drafts inside the level (its own draws there too)."""
    target = chi2_models()[0].model
    lower = ModelDrafter(target, k=2, name="inner") if staged else None
    dec = SpeculativeDecoder(target, ModelDrafter(target, k=4, lower=lower), GUMBEL)
    res = dec.generate(PROMPTS, 12)
    drafted = accepted = 0
    for s in res.sequences:
        for r in s.rounds:
            drafted += r.drafted.get("small", 0)
            accepted += r.accepted.get("small", 0)
    assert drafted > 0
    assert accepted == drafted, (accepted, drafted)


def test_gumbel_plain_sampling_on_a_full_vocabulary_matches_its_own_draws():
    """The decoder's draws are the sampler's: a 1-row plain run at seed s emits, token by
    token, argmax p / E at each position (p from the target's own logits)."""
    target = chi2_models()[0].model
    out = _outputs(None, GUMBEL)[0]
    s = Sampler(GUMBEL)
    s.reset(len(PROMPTS))
    ctx = list(PROMPT)
    with torch.no_grad():
        for t in out:
            p = probabilities(target(torch.tensor([ctx])).logits[0, -1], GUMBEL)
            assert s.draw(p, 0, len(ctx)) == t
            ctx.append(t)
