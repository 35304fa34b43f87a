"""Tests for the Katz backoff n-gram LM and prompt lookup drafters."""

from __future__ import annotations

import random

import pytest
import torch

from stagedspec.drafters.ngram_lm import KatzBackoffLM, prompt_lookup, prompt_lookup_candidates


def _probs(lm: KatzBackoffLM, context: list[int]) -> list[float]:
    return lm.distribution(context).tolist()


# ---------------------------------------------------------------------- Katz LM


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_distribution_is_proper_on_random_streams(order, seed):
    rng = random.Random(seed)
    V = 50
    lm = KatzBackoffLM(V, order)
    # Skewed stream so that high counts (> 5) and repeated histories occur.
    stream = [min(int(rng.expovariate(0.3)), V - 1) for _ in range(600)]
    lm.update(stream)
    for _ in range(30):
        ctx = [min(int(rng.expovariate(0.3)), V - 1) for _ in range(rng.randint(0, 5))]
        p = lm.distribution(ctx)
        assert p.shape == (V,)
        assert p.dtype == torch.float32
        assert abs(float(p.sum()) - 1.0) < 1e-5
        assert bool((p > 0).all())


def test_empty_model_is_uniform():
    lm = KatzBackoffLM(7, 3)
    for ctx in ([], [1], [1, 2, 3]):
        assert torch.allclose(lm.distribution(ctx), torch.full((7,), 1 / 7), atol=1e-7)


def test_unigram_is_laplace():
    lm = KatzBackoffLM(4, order=1)
    lm.update([0, 0, 1])
    # (c + 1) / (N + V) = (3, 2, 1, 1) / 7, regardless of the context.
    assert _probs(lm, [3, 2]) == pytest.approx([3 / 7, 2 / 7, 1 / 7, 1 / 7], abs=1e-6)


def test_hand_computed_absolute_discount_fallback():
    # Bigrams: (0,1)x2, (1,0)x2, (0,2)x1 -> n1 = 1, n2 = 2, n3 = 0.
    # Good-Turing: d1 = 2*n2/n1 = 4 (outside (0,1)), d2 = 3*n3/(2*n2) = 0: both
    # degenerate, so d1 = 0.5, d2 = 0.75.
    lm = KatzBackoffLM(4, order=2)
    lm.update([0, 1, 0, 1, 0, 2])
    # After 0 (c = 3): P(1) = 0.75*2/3 = 1/2, P(2) = 0.5*1/3 = 1/6, left = 1/3.
    # Unigram (c+1)/(6+4) = (4, 3, 2, 1)/10; seen lower mass = 0.5 -> alpha = 2/3.
    expected = [0.4 * 2 / 3, 1 / 2, 1 / 6, 0.1 * 2 / 3]
    assert _probs(lm, [0]) == pytest.approx(expected, abs=1e-6)


def test_hand_computed_good_turing_discount():
    # Bigrams: (0,1)x2, (1,0), (1,2), (2,3) -> n1 = 3, n2 = 1, n3 = n6 = 0.
    # d1 = 2*n2/(1*n1) = 2/3 (valid Good-Turing); d2 degenerate -> 0.75.
    lm = KatzBackoffLM(5, order=2)
    lm.update([0, 1, 0, 1, 2, 3])
    # Unigram: counts (2, 2, 1, 1, 0), (c+1)/(6+5) = (3, 3, 2, 2, 1)/11.
    # After 1 (c = 2): P(0) = P(2) = (2/3)*(1/2) = 1/3, left = 1/3,
    # lower seen = 5/11 -> alpha = (1/3)/(6/11) = 11/18.
    assert _probs(lm, [1]) == pytest.approx([1 / 3, 1 / 6, 1 / 3, 1 / 9, 1 / 18], abs=1e-6)
    # After 0 (c = 2): P(1) = 0.75*2/2 = 3/4, left = 1/4, lower seen = 3/11 ->
    # alpha = (1/4)/(8/11) = 11/32.
    assert _probs(lm, [0]) == pytest.approx([3 / 32, 3 / 4, 2 / 32, 2 / 32, 1 / 32], abs=1e-6)
    # Unseen history 4 backs off to the unigram unchanged.
    assert _probs(lm, [4]) == pytest.approx([3 / 11, 3 / 11, 2 / 11, 2 / 11, 1 / 11], abs=1e-6)


def test_hand_computed_trigram_backs_off_to_katz_bigram():
    # Same corpus at order 3.  Trigrams (0,1,0), (1,0,1), (0,1,2), (1,2,3): n1 = 4,
    # n2 = 0 -> d1 = 0 is degenerate -> 0.5.
    lm = KatzBackoffLM(5, order=3)
    lm.update([0, 1, 0, 1, 2, 3])
    # After (0, 1) (c = 2): P(0) = P(2) = 0.5*1/2 = 1/4, left = 1/2.  The lower order
    # is the Katz bigram after 1 from the previous test: P(0) + P(2) = 2/3, so
    # alpha = (1/2)/(1/3) = 3/2 on (., 1/6, ., 1/9, 1/18).
    assert _probs(lm, [0, 1]) == pytest.approx([1 / 4, 1 / 4, 1 / 4, 1 / 6, 1 / 12], abs=1e-6)
    # A context longer than order-1 only uses its last two tokens.
    assert _probs(lm, [4, 4, 0, 1]) == _probs(lm, [0, 1])
    # A one-token context uses the bigram level.
    assert _probs(lm, [1]) == pytest.approx([1 / 3, 1 / 6, 1 / 3, 1 / 9, 1 / 18], abs=1e-6)


def test_all_counts_above_k_still_leave_mass_for_unseen():
    # Bigrams (0,1)x10, (1,0)x9: counts > 5 are undiscounted by Katz, which would give
    # token 2 zero mass after 0; we absolute-discount that history instead.
    lm = KatzBackoffLM(3, order=2)
    lm.update([0, 1] * 10)
    # P(1|0) = (10 - 0.5)/10 = 0.95, left = 0.05.  Unigram (11, 11, 1)/23, seen lower
    # 11/23 -> alpha = 0.05 / (12/23).
    alpha = 0.05 * 23 / 12
    assert _probs(lm, [0]) == pytest.approx([11 / 23 * alpha, 0.95, 1 / 23 * alpha], abs=1e-6)


def test_history_followed_by_whole_vocab_renormalises():
    lm = KatzBackoffLM(2, order=2)
    lm.update([0, 0, 1])  # after 0: 0 once, 1 once -> every vocab token seen
    assert _probs(lm, [0]) == pytest.approx([0.5, 0.5], abs=1e-6)


def test_prefers_seen_continuation():
    lm = KatzBackoffLM(10, order=3)
    lm.update([1, 2, 3, 1, 2, 3, 1, 2])
    p = lm.distribution([1, 2])
    assert int(p.argmax()) == 3
    # The trigram (1, 2) -> 3 is seen twice, so it takes most of the mass.
    assert float(p[3]) > 0.5


def test_incremental_equals_bulk():
    rng = random.Random(7)
    stream = [rng.randrange(12) for _ in range(300)]
    bulk = KatzBackoffLM(12, order=4)
    bulk.update(stream)
    inc = KatzBackoffLM(12, order=4)
    i = 0
    while i < len(stream):
        step = rng.randint(0, 5)
        inc.update(stream[i : i + step])
        # Interleave queries so lazily cached state is exercised mid-stream.
        inc.distribution(stream[max(0, i - 3) : i])
        i += step
    for j in range(0, len(stream), 17):
        ctx = stream[max(0, j - 3) : j]
        assert torch.equal(bulk.distribution(ctx), inc.distribution(ctx))
    assert bulk._count_of_counts == inc._count_of_counts  # count-of-counts agree too


def test_count_of_counts():
    lm = KatzBackoffLM(5, order=2)
    lm.update([0, 1, 0, 1, 2, 3])
    assert {r: c for r, c in lm._count_of_counts[2].items() if c} == {1: 3, 2: 1}
    assert {r: c for r, c in lm._count_of_counts[1].items() if c} == {1: 2, 2: 2}


def test_reset_forgets():
    lm = KatzBackoffLM(6, order=3)
    lm.update([1, 2, 3, 1, 2, 3])
    lm.reset()
    assert lm.num_tokens == 0
    assert torch.allclose(lm.distribution([1, 2]), torch.full((6,), 1 / 6), atol=1e-7)
    # After reset the stream restarts: no trigram spans the old tail.
    lm.update([4])
    assert lm._cont[3] == {}


def test_distributions_stacks():
    lm = KatzBackoffLM(8, order=2)
    lm.update([1, 2, 3, 1, 2])
    out = lm.distributions([[1], [2], []])
    assert out.shape == (3, 8)
    assert torch.equal(out[1], lm.distribution([2]))
    assert lm.distributions([]).shape == (0, 8)


@pytest.mark.parametrize(
    "kwargs, bad",
    [
        (dict(vocab_size=0), "0"),
        (dict(vocab_size=-3), "-3"),
        (dict(vocab_size=5, order=0), "0"),
        (dict(vocab_size=5, order=-1), "-1"),
    ],
)
def test_bad_constructor_args(kwargs, bad):
    with pytest.raises(ValueError, match=rf">= 1, got {bad}"):
        KatzBackoffLM(**kwargs)


def test_bad_token_rejected_without_partial_update():
    lm = KatzBackoffLM(5, order=2)
    with pytest.raises(ValueError, match=r"\[0, 5\), got 5"):
        lm.update([1, 2, 5])
    assert lm.num_tokens == 0


def test_large_vocab_runs():
    rng = random.Random(3)
    V = 49152
    lm = KatzBackoffLM(V, order=3)
    # Repetitive stream over a small id range, like a prompt with recurring phrases.
    corpus = [rng.randrange(300) for _ in range(200)] * 10
    lm.update(corpus)
    p = lm.distribution(corpus[-5:])
    assert p.shape == (V,)
    assert abs(float(p.sum()) - 1.0) < 1e-5
    assert bool((p > 0).all())
    assert int(p.argmax()) == corpus[0]  # the block wraps around: its tail was followed by its head


# ---------------------------------------------------------------------- prompt lookup


def test_prompt_lookup_prefers_longest_ngram():
    # Suffix (1, 2, 3) occurs at 0..2 followed by 9; the unigram 3 last occurred at
    # index 6 followed by 7, which n = 1 would pick.
    ctx = [1, 2, 3, 9, 8, 5, 3, 7, 1, 2, 3]
    assert prompt_lookup(ctx, k=2) == [9, 8]
    assert prompt_lookup(ctx, k=2, max_ngram=1) == [7, 1]


def test_prompt_lookup_most_recent_occurrence():
    ctx = [5, 6, 1, 5, 6, 2, 5, 6]
    assert prompt_lookup(ctx, k=1, max_ngram=2) == [2]


def test_prompt_lookup_no_match():
    assert prompt_lookup([1, 2, 3, 4], k=3) == []
    assert prompt_lookup([], k=3) == []
    assert prompt_lookup([7], k=3) == []


def test_prompt_lookup_truncated_and_k():
    ctx = [4, 5, 6, 4, 5]
    # (4, 5) last occurred at 0..1; the continuation runs into the suffix itself.
    assert prompt_lookup(ctx, k=10) == [6, 4, 5]
    assert prompt_lookup(ctx, k=2) == [6, 4]
    assert prompt_lookup(ctx, k=0) == []


def test_prompt_lookup_min_ngram():
    ctx = [1, 2, 3, 9, 3]
    assert prompt_lookup(ctx, k=2, min_ngram=2) == []
    assert prompt_lookup(ctx, k=2, min_ngram=1) == [9, 3]


def test_prompt_lookup_candidates_distinct():
    ctx = [1, 2, 7, 1, 2, 8, 3, 2, 7, 1, 2]
    cands = prompt_lookup_candidates(ctx, k=2, max_ngram=2, min_ngram=1, max_candidates=10)
    # n = 2: (1, 2) ends at 5 -> [8, 3], ends at 2 -> [7, 1];
    # n = 1: 2 ends at 8 -> [7, 1] (duplicate, dropped); ends 5 and 2 already used.
    assert cands == [[8, 3], [7, 1]]
    assert len({tuple(c) for c in cands}) == len(cands)
    assert cands[0] == prompt_lookup(ctx, k=2, max_ngram=2)
    assert prompt_lookup_candidates(ctx, k=2, max_ngram=2, max_candidates=1) == [[8, 3]]


def test_prompt_lookup_candidates_falls_through_orders():
    ctx = [4, 1, 5, 9, 1, 6, 2, 1]
    cands = prompt_lookup_candidates(ctx, k=1, max_ngram=2, min_ngram=1, max_candidates=3)
    # No earlier (2, 1); token 1 ended at 5 then 2 (most recent first).
    assert cands == [[6], [5]]


def test_prompt_lookup_bad_args():
    with pytest.raises(ValueError, match="got -1"):
        prompt_lookup([1, 2], k=-1)
    with pytest.raises(ValueError, match="got 0"):
        prompt_lookup([1, 2], k=1, min_ngram=0)
    with pytest.raises(ValueError, match="got 1"):
        prompt_lookup([1, 2], k=1, max_ngram=1, min_ngram=2)
    with pytest.raises(ValueError, match="got 0"):
        prompt_lookup_candidates([1, 2], k=1, max_candidates=0)


def test_good_turing_table_with_katz_correction():
    # Katz's d_r = (r*/r - A)/(1 - A), r* = (r+1) n_{r+1}/n_r, A = 6 n_6/n_1, set on
    # hand-picked count-of-counts (private hook: a corpus with these is tedious).
    from collections import Counter

    lm = KatzBackoffLM(10, order=2)
    lm._count_of_counts[2] = Counter({1: 20, 2: 6, 3: 3, 4: 1, 5: 1, 6: 1})
    lm._disc_cache[2] = None
    # A = 0.3; d1 = (0.6 - 0.3)/0.7, d2 = (0.75 - 0.3)/0.7, d3 = (4/9 - 0.3)/0.7;
    # d4 = 0.95/0.7 and d5 = 0.9/0.7 exceed 1 -> absolute fallback 3.5/4 and 4.5/5;
    # counts > 5 are not discounted.
    table = lm._discount_table(2).tolist()
    assert table[1:] == pytest.approx([3 / 7, 9 / 14, 13 / 63, 0.875, 0.9, 1.0], abs=1e-12)
