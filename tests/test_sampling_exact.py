"""Sampled speculative decoding must reproduce the target's distribution exactly.

Set-up: a tiny-vocabulary random target (8 tokens, peaked logits) and a deliberately
different draft (its first layer only: acceptance about 34%). We draw N two-token continuations (each row of a large batch is an
independent sample; batch size > 1 is exercised on the way) and run a chi-square
goodness-of-fit test against the exact joint distribution p(x1) p(x2 | x1), computed by
enumerating the target.

Power: the tests below also run *mutants* of the acceptance rule (min(1, q/p) instead
of min(1, p/q); no residual after a rejection; no residual between tree siblings) with
the same N and assert that the test rejects them. The false-alarm rate of the honest
test is alpha = 1e-4 per test. Measured with N = 6000 (29 cells with expected count
>= 5): honest chain 38 and tree 28 against a critical value of 66; the no-residual
mutants score 916 (chain) and 1401 (tree), min(1, q/p) far more.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

from stagedspec import verification
from stagedspec.decoding import SpeculativeDecoder
from stagedspec.drafters import KatzNgramDrafter, ModelDrafter, PromptLookupDrafter
from stagedspec.sampling import SamplingConfig, probabilities
from stagedspec.tree import TreeShape

from stagedspec.models import truncated_copy

from .helpers import tiny_target

V = 8
PROMPT = [1, 5, 2, 5, 2]
ALPHA_Z = 3.719  # one-sided normal quantile for alpha = 1e-4


def chi2_critical(df: int, z: float = ALPHA_Z) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile (accurate to ~1% here)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@functools.lru_cache(maxsize=None)
def _models():
    target = tiny_target(vocab=V, layers=2, seed=0, init=0.3)
    # its first layer + head: a different q that still agrees ~35% of the time, so both
    # acceptances and residual draws happen often
    draft = truncated_copy(target, 1).model
    return target, draft


def exact_joint(cfg: SamplingConfig) -> torch.Tensor:
    target, _ = _models()
    with torch.no_grad():
        p1 = probabilities(target.model(torch.tensor([PROMPT])).logits[0, -1], cfg)
        nxt = torch.tensor([PROMPT + [x] for x in range(V)])
        p2 = probabilities(target.model(nxt).logits[:, -1], cfg)
    return (p1[:, None] * p2).flatten()


def chi2(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    n = counts.sum()
    expected = probs * n
    big = expected >= 5
    stat = (((counts[big] - expected[big]) ** 2) / expected[big]).sum()
    rest_obs, rest_exp = counts[~big].sum(), expected[~big].sum()
    df = int(big.sum()) - 1
    if rest_exp > 0:
        stat = stat + (rest_obs - rest_exp) ** 2 / rest_exp
        df += 1
    return float(stat), df


def draw(drafter_factory, cfg: SamplingConfig, n: int, batch: int = 1000) -> torch.Tensor:
    target, _ = _models()
    counts = torch.zeros(V * V)
    for i in range(n // batch):
        dec = SpeculativeDecoder(target.model, drafter_factory(), SamplingConfig(
            temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p, seed=cfg.seed + i))
        res = dec.generate([PROMPT] * batch, 2)
        for s in res.sequences:
            counts[s.output_ids[0] * V + s.output_ids[1]] += 1
    return counts


def _model_chain():
    return ModelDrafter(_models()[1], k=3)


def _model_tree():
    return ModelDrafter(_models()[1], k=3, tree=TreeShape.parse({"widths": [3, 2]}))


def _staged():
    return ModelDrafter(_models()[1], k=3, lower=KatzNgramDrafter(V, k=2, order=2))


def _ngram():
    return KatzNgramDrafter(V, k=2, order=2)


def _lookup():
    return PromptLookupDrafter(k=2)


N = 6000
T1 = SamplingConfig(temperature=1.0, seed=11)


@pytest.mark.parametrize(
    "factory,cfg",
    [
        (_model_chain, T1),
        (_model_tree, T1),
        (_staged, T1),
        (_ngram, T1),
        (_lookup, T1),
        (_model_chain, SamplingConfig(temperature=0.7, top_k=5, top_p=0.9, seed=5)),
    ],
    ids=["small-chain", "small-tree", "ngram>small", "ngram", "lookup", "t0.7-topk-topp"],
)
def test_emitted_distribution_matches_target(factory, cfg):
    probs = exact_joint(cfg)
    counts = draw(factory, cfg, N)
    stat, df = chi2(counts, probs)
    assert stat < chi2_critical(df), f"chi2={stat:.1f} df={df} crit={chi2_critical(df):.1f}"


def _broken_ratio(p, q, x):
    px = float(p[x])
    qx = 1.0 if q is None else float(q[x])
    return min(1.0, qx / px) if px > 0 else 1.0


def _no_residual(p, q, x):
    return p


@pytest.mark.parametrize(
    "name,patch,factory",
    [
        ("min(1,q/p)", ("accept_probability", _broken_ratio), _model_chain),
        ("no residual", ("residual_after", _no_residual), _model_chain),
        ("no residual between siblings", ("residual_after", _no_residual), _model_tree),
    ],
)
def test_mutant_acceptance_rules_are_caught(monkeypatch, name, patch, factory):
    """The same test, same N, rejects a broken rule: the distribution test has power."""
    monkeypatch.setattr(verification, patch[0], patch[1])
    probs = exact_joint(T1)
    counts = draw(factory, T1, N)
    stat, df = chi2(counts, probs)
    assert stat > chi2_critical(df), f"{name}: chi2={stat:.1f} did not exceed {chi2_critical(df):.1f}"


def test_greedy_is_a_point_mass_of_the_same_rule():
    cfg = SamplingConfig(temperature=0.0)
    counts = draw(_model_chain, cfg, 1000)
    assert int((counts > 0).sum()) == 1
    assert int(torch.argmax(counts)) == int(torch.argmax(exact_joint(cfg)))
