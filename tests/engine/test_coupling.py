"""``Sampler`` (``engine/coupling.py``): the job's random choices, ``residual`` or ``gumbel``.

By hand: a gumbel draw is argmax q / E for the noise E of its (seed, sequence, position), the
noise depends on nothing else, rows follow ``keep_rows``, and a tree is walked along the
target's own draws. Distribution: 20,000 gumbel draws (one position each) against 6 tokens
with mass, 5 degrees of freedom, critical value 25.7 at alpha = 1e-4; the decoding-level
chi-square and drafter-invariance tests are in tests/drafters/test_coupling.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from stagedspec.engine.coupling import Sampler
from stagedspec.engine.sampling import SamplingConfig, sample
from stagedspec.engine.tree import DraftTree

T1G = SamplingConfig(temperature=1.0, seed=4, coupling="gumbel")
WEIGHTS = torch.tensor([0.0, 0.2, 0.5, 0.0, 0.05, 0.25, 0.0, 0.6, 0.4, 0.0])


def _critical(df: int, z: float = 3.719) -> float:
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_a_gumbel_draw_is_the_argmax_of_q_over_its_positions_noise():
    s = Sampler(T1G)
    s.reset(2)
    e = s.noise(1, 7, len(WEIGHTS))
    assert bool((e > 0).all())
    by_hand = max(range(len(WEIGHTS)), key=lambda x: float(WEIGHTS[x]) / float(e[x]))
    assert s.draw(WEIGHTS, 1, 7) == by_hand
    # the noise is a function of (seed, sequence, position) only: a fresh sampler has it
    fresh = Sampler(T1G)
    fresh.reset(2)
    assert torch.equal(fresh.noise(1, 7, len(WEIGHTS)), e)
    other_seed = Sampler(SamplingConfig(1.0, seed=5, coupling="gumbel"))
    others = [fresh.noise(0, 7, 10), fresh.noise(1, 8, 10), other_seed.noise(1, 7, 10)]
    assert all(not torch.equal(o, e) for o in others)


def test_rows_keep_their_sequences_noise_when_others_finish():
    s = Sampler(T1G)
    s.reset(3)
    e2 = s.noise(2, 5, 10).clone()
    s.keep_rows([0, 2])  # sequence 1 finished: row 1 is now sequence 2
    assert torch.equal(s.noise(1, 5, 10), e2)
    s.release(1, 6)  # sequence 2 draws nothing before position 6 again
    assert s.held_positions(1) == []
    s.noise(1, 6, 10)
    assert s.held_positions(1) == [6]


def test_gumbel_draws_follow_the_distribution_and_never_a_token_without_mass():
    s = Sampler(T1G)
    s.reset(1)
    n = 20_000
    counts = torch.zeros(len(WEIGHTS))
    for t in range(n):
        counts[s.draw(WEIGHTS, 0, t)] += 1
        s.release(0, t + 1)
    p = WEIGHTS
    assert counts[p == 0].sum() == 0, counts.tolist()
    expected = p[p > 0] / p.sum() * n
    stat = float(((counts[p > 0] - expected) ** 2 / expected).sum())
    assert stat < _critical(int((p > 0).sum()) - 1), (stat, counts.tolist())


def test_a_tree_is_walked_along_the_targets_own_draws():
    """A tree built around the target's own draws d0, d1, d2 at positions 20-22: at the root a
    wrong token then d0, under d0 the chain d1 then a wrong token. The walk keeps d0 and d1 (the
    wrong siblings before them notwithstanding), stops at the wrong leaf and emits d2."""
    s = Sampler(T1G)
    s.reset(1)
    d0, d1, d2 = (s.draw(WEIGHTS, 0, 20 + j) for j in range(3))
    wrong = [x for x in (1, 2, 4, 5, 7, 8) if x not in (d0, d1, d2)][0]
    tree = DraftTree()
    tree.add(wrong, -1, None, "d")
    n0 = tree.add(d0, -1, None, "d")
    n1 = tree.add(d1, n0, None, "d")
    tree.add(wrong, n1, None, "d")
    assert s.verify(tree, WEIGHTS.expand(5, -1), 0, 20) == ([n0, n1], d2)
    # one position later the same tree meets other draws: the walk reads the position
    e0 = s.draw(WEIGHTS, 0, 21)
    path, tok = s.verify(tree, WEIGHTS.expand(5, -1), 0, 21)
    assert path[:1] == ([n0] if e0 == d0 else [0] if e0 == wrong else [])


def test_residual_is_the_generators_stream():
    """Under ``residual`` a draw is ``sample`` on the job's generator: the rows and positions
    change nothing."""
    s = Sampler(SamplingConfig(1.0, seed=3))
    g = torch.Generator().manual_seed(3)
    assert [s.draw(WEIGHTS, 0, t) for t in range(50)] == [sample(WEIGHTS, g) for _ in range(50)]


@pytest.mark.parametrize("bad", ["Gumbel", "", None, 1])
def test_an_unknown_coupling_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="coupling must be 'residual' or 'gumbel'"):
        SamplingConfig(temperature=0.7, coupling=bad)
