"""``sample``: one token from a distribution by its inverse CDF.

Power: 20,000 draws against 6 tokens with mass (5 degrees of freedom); the critical value at
alpha = 1e-4 is 25.7. Mutants tried once by hand, each caught: the uniform not scaled by the
total (an unnormalised input then never reaches the last tokens: statistic ~20,000), the
token one past the one found (a zero-mass token drawn), a float32 sum kept (passes: not a
fault, only rounding).
"""

from __future__ import annotations

import math

import pytest
import torch

from stagedspec.engine.sampling import sample

WEIGHTS = [0.0, 0.2, 0.5, 0.0, 0.05, 0.25, 0.0, 0.6, 0.4, 0.0]
"""Unnormalised (total 2.0), with zero-mass tokens first, inside and last."""


def _critical(df: int, z: float = 3.719) -> float:
    """Wilson-Hilferty chi-square quantile; z = 3.719 is alpha = 1e-4."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_sample_draws_the_distribution_and_never_a_token_without_mass():
    p = torch.tensor(WEIGHTS)
    g = torch.Generator().manual_seed(5)
    n = 20_000
    counts = torch.zeros(len(WEIGHTS))
    for _ in range(n):
        counts[sample(p, g)] += 1
    assert counts[p == 0].sum() == 0, counts.tolist()
    expected = p[p > 0] / p.sum() * n
    stat = float(((counts[p > 0] - expected) ** 2 / expected).sum())
    assert stat < _critical(int((p > 0).sum()) - 1), (stat, counts.tolist())


def test_sample_over_a_full_vocabulary_keeps_to_the_support():
    """A 151,936-token vocabulary with its mass on three tokens, one of them the last."""
    p = torch.zeros(151_936)
    p[[7, 90_000, 151_935]] = torch.tensor([0.25, 0.25, 0.5])
    g = torch.Generator().manual_seed(1)
    seen = [sample(p, g) for _ in range(400)]
    assert set(seen) == {7, 90_000, 151_935}
    assert 150 < seen.count(151_935) < 250  # 200 expected, sd 10


@pytest.mark.parametrize("token", [0, 3, 9])
def test_a_point_mass_is_its_token(token):
    p = torch.zeros(10)
    p[token] = 1.0
    assert sample(p, torch.Generator().manual_seed(0)) == token
