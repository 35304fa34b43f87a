"""The bypass level's routing rule, by hand: copy on a match, and with ``miss_below`` hand
the round after a missed copy to the level below."""

from __future__ import annotations

import dataclasses

import pytest

from stagedspec.drafters import BypassDrafter
from stagedspec.drafters.bypass import RoutePrices
from stagedspec.engine.tree import DraftTree
from tests.helpers import ProposeOne


Below = ProposeOne  # token 99 to every row, its calls counted (max_depth 1)


def _tokens(tree: DraftTree) -> list[int]:
    return list(tree.tokens)


def test_after_a_missed_copy_the_next_round_goes_below():
    below = Below()
    d = BypassDrafter(below, k=3, min_match=2, miss_below=2)
    d.reset(2)
    # row 0 repeats "1 2": a copy of what followed ("3 4 1"); row 1 has no match of 2 tokens
    ctx = [[1, 2, 3, 4, 1, 2], [5, 6, 7]]
    first = d.propose(ctx)
    assert _tokens(first[0]) == [3, 4, 1] and first[0].owner != "below"
    assert _tokens(first[1]) == [99] and below.calls == 1
    d.feedback([1, 0])  # row 0's copy: 1 of 3 accepted (< 2: a miss); row 1 was below's round
    second = d.propose(ctx)
    assert _tokens(second[0]) == [99] and _tokens(second[1]) == [99] and below.calls == 2
    d.feedback([1, 1])  # both rounds were below's: row 0 may copy again
    third = d.propose(ctx)
    assert _tokens(third[0]) == [3, 4, 1]
    d.feedback([2, 0])  # 2 accepted: not a miss
    assert _tokens(d.propose(ctx)[0]) == [3, 4, 1]
    d.keep_rows([1])  # row 1 alone goes on: its state is kept, row 0's dropped
    assert d._cold == [False] and _tokens(d.propose([[5, 6, 7]])[0]) == [99]


def test_without_miss_below_a_match_always_copies():
    below = Below()
    d = BypassDrafter(below, k=3, min_match=2)
    d.reset(1)
    ctx = [[1, 2, 3, 4, 1, 2]]
    for _ in range(3):
        assert _tokens(d.propose(ctx)[0]) == [3, 4, 1]
        d.feedback([0])
    assert below.calls == 0


# --------------------------------------------------------------------------- the priced router
BelowOne = ProposeOne


PRICES = RoutePrices(copy_own=0.0, row_cost=0.1, draft_cost=0.5, prior_weight=1.0, prior_accepted=2.0, copy_weight=1.0)


def test_the_priced_router_sends_the_round_with_more_tokens_per_cost_by_hand():
    """Costs in target steps, linear (row_cost 0.1), draft_cost 0.4; the level below (depth 1,
    prior 2 accepted in 3 forwards): (2 + 1) / (1 + 0.1 * 2 + 0.4 * 3) = 1.25. A copy after a
    2-token match: its tokens continue matches of 2, 3 and 4 tokens, accepted with priors a_2 = 2 / 3,
    a_3 = 3 / 4, a_4 = 4 / 5 (r / (r + 1)); cut to L it prices (a_2 + a_2 a_3 + ... + 1) / (1 + 0.1 *
    (L + 1)); L = 3 is (2.35 a_2 + 1) / 1.4, the best cut while a_2 >= 2 / 7. Each copy rejected at its
    first token: a_2 = 2 / (3 + j) after j of them: 1.833, 1.554, 1.386, 1.274 (> 1.25: four copies
    [3, 4, 1]), then 1.194 (< 1.25): below. One accepted there with no forward lifts the level below
    to (1.5 + 1) / (1.2 + 0.4 * 1.5) = 1.39, so it stays below."""
    prices = RoutePrices(
        copy_own=0.0, row_cost=0.1, draft_cost=0.4, prior_weight=1.0, prior_accepted=2.0, copy_weight=1.0
    )
    d = BypassDrafter(BelowOne(), k=3, min_match=2, prices=prices)
    d.reset(1)
    ctx = [[1, 2, 3, 4, 1, 2]]
    routes = []
    for _ in range(6):
        routes.append(_tokens(d.propose(ctx)[0]))
        d.feedback([1] if routes[-1] == [99] else [0])
    assert routes == [[3, 4, 1]] * 4 + [[99], [99]]
    assert d.decisions == {"copy": 4, "lower": 2, "plain": 0}
    assert abs(d._stats.copy_alpha(2) - 2 / 7) < 1e-12 and d._stats.copy_alpha(3) == 3 / 4
    rate, cut = d._stats.copy_offer(2, 3)
    assert cut == 3 and abs(rate - (2.35 * 2 / 7 + 1) / 1.4) < 1e-12
    assert abs(d._stats.lower_rate(1) - (4 / 3 + 1) / (1.2 + 0.4 * 1)) < 1e-12  # after two rounds below


def test_a_copied_token_is_priced_by_the_match_it_continues():
    """copy_weight 1, row_cost 0.1. A copy of 4 after a 1-token match with 3 accepted: its tokens
    continued matches of 1, 2, 3 (accepted) and 4 (rejected) tokens, so a_1 = (1 + 1) / (1 + 2) = 2 / 3,
    a_2 = (1 + 2) / (1 + 3) = 3 / 4, a_3 = (1 + 3) / (1 + 4) = 4 / 5, a_4 = 4 / (1 + 5) = 2 / 3, a_5 its
    prior 5 / 6. Then a copy after a 2-token match rejected at once: a_2 = 3 / 5. A copy of 4 after a
    1-token match then expects a_1 = 0.667, + a_1 a_2 = 0.4, + 0.4 a_3 = 0.32, + 0.32 a_4 = 0.2133,
    priced over 1 + 0.1 (L + 1): L = 1..4 give 1.389, 1.590, 1.705, 2.6 / 1.5 = 1.733: the whole copy.
    (Priced by the 1-token match alone, as before, a = (3 + 1) / (3 + 1 + 2) = 2 / 3 for every token:
    L = 4 prices 2.605 / 1.5, L = 3 2.407 / 1.4 = 1.719.)"""
    s = BypassDrafter(BelowOne(), k=4, prices=RoutePrices(copy_own=0.0, row_cost=0.1, copy_weight=1.0))._stats
    s.record(("copy", 1, 4), accepted=3, forwards=0)
    alphas = [s.copy_alpha(r) for r in range(1, 6)]
    assert [round(a, 12) for a in alphas] == [round(x, 12) for x in (2 / 3, 3 / 4, 4 / 5, 2 / 3, 5 / 6)]
    s.record(("copy", 2, 2), accepted=0, forwards=0)
    assert abs(s.copy_alpha(2) - 3 / 5) < 1e-12 and s.copy_alpha(1) == alphas[0]
    rate, cut = s.copy_offer(1, 4)
    assert cut == 4 and abs(rate - 2.6 / 1.5) < 1e-12
    assert abs(s.copy_offer(1, 3)[0] - (1 + 2 / 3 + 0.4 + 0.32) / 1.4) < 1e-12
    s.record(("copy", 9, 3), accepted=3, forwards=0)  # matches of 9, 10, 11: the 8-or-more bucket
    assert abs(s.copy_alpha(8) - (3 + 8) / (3 + 9)) < 1e-12 and s.copy_alpha(12) == s.copy_alpha(8)


def test_a_lighter_copy_prior_sends_longer_copies_after_a_copy_accepted_whole():
    """After a 2-token match, a copy of 6 accepted whole: one accepted token continuing each match
    of 2..7 tokens, so a_r = (1 + w r) / (1 + w (r + 1)) for r = 2..7, and the prior 8 / 9 from 8 on.
    copy_weight 0.5: a_2..a_7 = 0.8, 0.8333, 0.8571, 0.875, 0.8889, 0.9; copy_weight 2: 0.7143, 0.7778,
    0.8182, 0.8462, 0.8667, 0.8824. Offered 8 tokens on linear prices (row_cost 0.2), (a_2 + a_2 a_3 +
    ... + 1) / (1 + 0.2 (L + 1)): copy_weight 0.5 prices L = 6 at 4.3825 / 2.4 = 1.826 over L = 5's
    3.9825 / 2.2 = 1.810 and L = 7's 4.7381 / 2.6 = 1.822; copy_weight 2 prices L = 5 at 3.4423 / 2.2 =
    1.565 over L = 4's 1.554 and L = 6's 1.557. The level below's prior is untouched by copy_weight."""
    cuts = {}
    for w in (0.5, 2.0):
        d = BypassDrafter(BelowOne(), k=8, prices=RoutePrices(copy_own=0.0, row_cost=0.2, copy_weight=w))
        s = d._stats
        s.record(("copy", 2, 6), accepted=6, forwards=0)
        alphas = [(1 + w * r) / (1 + w * (r + 1)) for r in range(2, 8)] + [8 / 9]
        assert all(abs(s.copy_alpha(r) - a) < 1e-12 for r, a in zip(range(2, 9), alphas))
        rate, cuts[w] = s.copy_offer(2, 8)
        expected, power = 0.0, 1.0
        for a in alphas[: cuts[w]]:
            power *= a
            expected += power
        assert abs(rate - (expected + 1) / (1 + 0.2 * (cuts[w] + 1))) < 1e-12
        assert s.lower_rate(1) == BypassDrafter(
            BelowOne(), k=8, prices=RoutePrices(copy_own=0.0, row_cost=0.2)
        )._stats.lower_rate(1)
    assert cuts == {0.5: 6, 2.0: 5}


class _Prefilled(BelowOne):
    """The level below, recording the contexts it was given before drafting."""

    def __init__(self) -> None:
        super().__init__()
        self.prefills: list[list[list[int]]] = []

    def prefill(self, contexts):
        self.prefills.append([list(c) for c in contexts])


def test_a_lazy_router_gives_the_level_below_the_prompt_only_when_a_round_first_goes_below():
    """lazy_lower: the prompt's prefill skips the level below; copy rounds leave it so; the first
    round that goes below hands it that round's contexts (once), before its draft. Eager (the
    default): the level below gets the prompt at prefill."""
    lazy, eager = _Prefilled(), _Prefilled()
    d = BypassDrafter(lazy, k=3, min_match=2, lazy_lower=True)
    e = BypassDrafter(eager, k=3, min_match=2)
    for x in (d, e):
        x.reset(2)
        x.prefill([[1, 2, 1], [3, 4, 3]])
    assert lazy.prefills == [] and eager.prefills == [[[1, 2, 1], [3, 4, 3]]]
    copies = [[1, 2, 3, 1, 2], [3, 4, 5, 3, 4]]  # both rows match 2 tokens: copies, nothing below
    assert [_tokens(t) for t in d.propose(copies)] == [[3, 1, 2], [5, 3, 4]] and lazy.prefills == []
    d.feedback([0, 0])
    d.keep_rows([1])  # row 0 finished; row 1 has no match now
    assert _tokens(d.propose([[3, 4, 5, 3, 4, 9]])[0]) == [99]
    assert lazy.prefills == [[[3, 4, 5, 3, 4, 9]]] and lazy.calls == 1
    d.feedback([0])
    d.propose([[3, 4, 5, 3, 4, 9, 8]])
    assert len(lazy.prefills) == 1 and lazy.calls == 2
    d.reset(1)  # a new job: lazy again
    d.prefill([[7, 7]])
    assert len(lazy.prefills) == 1


def test_the_priced_router_copies_after_a_one_token_match_the_rule_would_pass_down():
    rule, priced = (
        BypassDrafter(BelowOne(), k=3, min_match=2),
        BypassDrafter(BelowOne(), k=3, min_match=2, prices=PRICES),
    )
    for d in (rule, priced):
        d.reset(1)
    ctx = [[5, 6, 5]]  # "5" seen before, then "6 5": a_1 = 1 / 2, a_2 = 2 / 3, (0.5 + 1 / 3 + 1) / 1.3 = 1.41 > 1.11
    assert _tokens(rule.propose(ctx)[0]) == [99] and _tokens(priced.propose(ctx)[0]) == [6, 5]


def test_greedy_output_with_the_priced_router_equals_plain_decoding():
    from stagedspec.drafters import KatzNgramDrafter, ModelDrafter
    from stagedspec.engine.decoding import SpeculativeDecoder
    from stagedspec.engine.sampling import SamplingConfig
    from stagedspec.models.model_loading import truncated_copy

    from tests.helpers import tiny_target
    from tests.oracles import N_NEW, hf_reference, tiny_prompts

    target = tiny_target()
    small = ModelDrafter(truncated_copy(target, 1).model, k=3, lower=KatzNgramDrafter(target.vocab_size, k=2))
    d = BypassDrafter(small, k=6, min_match=2, prices=RoutePrices())
    out = SpeculativeDecoder(target.model, d, SamplingConfig()).generate(tiny_prompts(3), N_NEW)
    assert [s.output_ids for s in out.sequences] == [list(r) for r in hf_reference(3)]
    assert d.decisions["copy"] > 0 and d.decisions["lower"] > 0  # both routes taken
    # each round records whose draft the target verified, and the shares add up to the router's count
    drafters = [r.drafter for s in out.sequences for r in s.rounds if r.drafter is not None]
    assert set(drafters) == {"copy", "small"} and drafters.count("copy") == d.decisions["copy"]
    summary = out.summary()
    assert summary["routed/copy"] + summary["routed/small"] == pytest.approx(1.0)


def test_sampled_output_with_the_priced_router_has_the_targets_distribution():
    """test_sampling_exact's chi-square (same N and critical values) with its staged draft
    under a priced bypass (copies on any match while they pay)."""
    from tests.oracles import T1, staged_drafter, statistics

    def factory():
        return BypassDrafter(staged_drafter(), k=3, min_match=2, prices=RoutePrices())

    for pair, stat, df, crit in statistics(factory, T1):
        assert stat < crit, f"{pair}: chi2={stat:.1f} df={df} crit={crit:.1f}"


def test_a_calibrated_step_curve_prices_verifications_by_hand():
    """ctx [5, 6, 5]: a copy of up to 2 after a 1-token match (a_1 = 1 / 2, a_2 = 2 / 3) against the
    level below (depth 1, prior 2 accepted in 3 forwards, draft_cost 0.5). Linear (row_cost 0.1): L = 2
    prices 1.833 / 1.3 = 1.41 > 3 / 2.7 = 1.11: copies [6, 5]. Curve (1, 1, 3): L = 1 prices
    1.5 / T(2) = 1.5, L = 2 1.833 / T(3) = 0.61, below 3 / (T(2) + 1.5) = 1.2: copies [6], cut.
    Curve (1, 3, 3): L = 1 0.5, L = 2 0.61, below 3 / 4.5 = 0.67: the round goes below. The rule
    ignores the curve."""
    ctx = [[5, 6, 5]]
    linear, cut, steep, rule = (
        BypassDrafter(BelowOne(), k=3, min_match=2, prices=PRICES),
        BypassDrafter(BelowOne(), k=3, prices=PRICES),
        BypassDrafter(BelowOne(), k=3, prices=PRICES),
        BypassDrafter(BelowOne(), k=3, min_match=1),
    )
    cut.use_step_curve((1.0, 1.0, 3.0))
    steep.use_step_curve((1.0, 3.0, 3.0))
    rule.use_step_curve((1.0, 3.0, 3.0))
    for d in (linear, cut, steep, rule):
        d.reset(1)
    assert _tokens(linear.propose(ctx)[0]) == [6, 5]
    assert _tokens(cut.propose(ctx)[0]) == [6]
    assert _tokens(steep.propose(ctx)[0]) == [99]
    assert _tokens(rule.propose(ctx)[0]) == [6, 5]  # a 1-token match meets min_match 1
    assert cut._stats.copy_offer(1, 2) == (1.5, 1) and abs(cut._stats.lower_rate(1) - 1.2) < 1e-12
    # past its end the curve goes on along its last step: T(5) = 3 + 2 * (5 - 3) = 7
    assert cut._stats.verify_cost(5) == 7.0 and linear._stats.verify_cost(5) == 1.5


def test_a_step_curve_that_falls_or_does_not_start_at_one_is_refused():
    import pytest

    d = BypassDrafter(BelowOne(), k=3, prices=PRICES)
    for bad in ((1.0, 2.0, 1.5), (2.0, 3.0)):
        with pytest.raises(ValueError, match="starts at 1 and never falls"):
            d.use_step_curve(bad)


# --------------------------------------------------------------------------- the timed router
def test_timed_prices_by_hand():
    """row_cost 0.1, draft_cost 0.5, prior_weight 1, prior_accepted 2. Untimed, the level below
    (depth 1) prices (2 + 1) / (1 + 0.1 * 2 + 0.5 * 3) = 3 / 2.7. Target calls of 0.3 s at 1 row
    and 0.6 s at 5 rows cost 1.1 + 1.5 = 2.6 steps: a step is 0.9 / 2.6 s. A round below that
    accepted 2 of 3 nodes in 0.2 s: accepted (2 + 2) / 2 = 2, nodes (3 + 1) / 2 = 2, draft
    (0.2 / step + 0.5 * 3) / 2 steps, verified at T(3) = 1.3: 3 / (1.3 + draft). Nodes 2.5 would
    be verified at T(3.5) = (1.3 + 1.4) / 2 (verifications keep the shape). A plain step is priced
    at the one-row calls timed, averaged with the shape worth one call: T(1) = (0.3 / step + 1.1) / 2
    = (0.8667 + 1.1) / 2; a plain step 1 / T(1)."""
    s = BypassDrafter(BelowOne(), k=3, prices=PRICES, timed=True)._stats
    assert s.step_seconds() is None and abs(s.lower_rate(1) - 3 / 2.7) < 1e-12
    s.observe_target(0.3, 1)
    s.observe_target(0.6, 5)
    step = 0.9 / 2.6
    assert abs(s.step_seconds() - step) < 1e-12
    s.record(("lower", 0, 3), accepted=2, forwards=4, seconds=0.2)
    draft = (0.2 / step + 0.5 * 3) / 2
    assert abs(s.lower_rate(1) - 3 / (1.3 + draft)) < 1e-12
    assert abs(s._cost(3.5) - 1.35) < 1e-12 and s._cost(3.0) == s.verify_cost(3)
    assert abs(s.verify_cost(1) - (0.3 * 2.6 / 0.9 + 1.1) / 2) < 1e-12
    assert s.verify_cost(5) == 1.5  # a verification keeps the shape, though a 5-row call was timed
    assert abs(s.plain_rate() - 2 / (0.3 * 2.6 / 0.9 + 1.1)) < 1e-12
    assert s.shape_cost(1) == 1.1 and s.shape_cost(5) == 1.5  # the shape itself unchanged
    s.timed = False  # untimed, the same records price as before: forwards at draft_cost, depth's nodes
    assert abs(s.lower_rate(1) - (2 + 1) / (1.2 + 0.5 * 3.5)) < 1e-12


def test_a_plain_step_timed_cheaper_than_the_curve_says_turns_rounds_to_plain_steps():
    """A curve (1, 1.2, 1.3, 1.6) prices a copy of up to 2 after a 1-token match (a_1 = 1 / 2, a_2 = 2 / 3):
    L = 1 1.5 / 1.2 = 1.25, L = 2 1.833 / 1.3 = 1.41, against a plain step's 1: it copies both.
    Timed: 50 one-row calls of 0.01 s and 50 three-row calls of 0.035 s (a one-row step on other
    code, cheap) make a cost unit (0.5 + 1.75) / (50 * 1 + 50 * 1.3) = 0.019565 s; a plain step
    T(1) = (0.5 / unit + 1) / 51 = 0.5207, verifications the shape (T(3) = 1.3): the copy's 1.41
    is under a plain step's 1 / 0.5207 = 1.92: no draft, where the shape alone would still copy."""
    prices = RoutePrices(copy_own=0.0, draft_cost=50.0, prior_weight=1.0, explore=0)
    d = BypassDrafter(BelowOne(), k=2, prices=prices, timed=True)
    d.use_step_curve((1.0, 1.2, 1.3, 1.6))
    d.reset(1)
    assert _tokens(d.propose([[5, 6, 5]])[0]) == [6, 5]
    for _ in range(50):
        d.observe_round(0.01, 1)
        d.observe_round(0.035, 3)
    s = d._stats
    unit = 2.25 / 115
    assert abs(s.step_seconds() - unit) < 1e-12
    assert abs(s.verify_cost(1) - (0.5 / unit + 1) / 51) < 1e-12
    assert s.verify_cost(3) == 1.3 and s.verify_cost(2) == 1.2
    assert _tokens(d.propose([[5, 6, 5]])[0]) == [] and d.decisions["plain"] == 1


def test_the_timed_router_drafts_nothing_when_no_draft_pays_and_explores_below():
    """Below priced (1 + 1) / (1.2 + 5 * 2) = 0.18 (a 100-round prior: it stays there) under a
    plain step's 1 / 1.1: a context with no earlier match drafts nothing, except once the level
    below has sat out two rounds, when it goes below (rounds 3, 6, 9); a 1-token match's copy (0.5 +
    1 / 3 + 1) / 1.3 = 1.41 is still sent. The untimed priced router would send the round below."""
    prices = RoutePrices(copy_own=0.0, row_cost=0.1, draft_cost=5.0, prior_weight=100.0, prior_accepted=1.0, explore=3)
    below = BelowOne()
    d = BypassDrafter(below, k=3, prices=prices, timed=True)
    untimed = BypassDrafter(BelowOne(), k=3, prices=prices)
    for x in (d, untimed):
        x.reset(1)
    none, match = [[1, 2, 3]], [[5, 6, 5]]
    routes = []
    for _ in range(11):
        routes.append(_tokens(d.propose(none)[0]))
        d.feedback([0])
    assert routes == [[], [], [99], [], [], [99], [], [], [99], [], []] and below.calls == 3
    assert _tokens(d.propose(match)[0]) == [6, 5]
    assert d.decisions == {"copy": 1, "lower": 3, "plain": 8}
    assert _tokens(untimed.propose(none)[0]) == [99]
    with pytest.raises(ValueError, match="timed routing prices each round"):
        BypassDrafter(BelowOne(), k=3, timed=True)


def test_first_look_keeps_a_lazy_level_below_off_until_that_many_plain_steps():
    """Below priced (4 + 1) / (1.2 + 0.5 * 5) = 1.35 over a plain step's 1 / 1.1 = 0.91: without
    ``first_look`` the first round with no match goes below (its prefill unpriced); with
    ``first_look=2`` the first two such rounds take plain steps, a 1-token match's copy (0.5 + 1 / 3
    + 1) / 1.3 = 1.41 still goes out and does not count, and the third plain-priced round goes
    below (prefill first). Once the level below has the prompt, or in a new job's first rounds with
    an eager level below, the price alone decides."""
    prices = RoutePrices(
        copy_own=0.0, row_cost=0.1, draft_cost=0.5, prior_weight=1.0, prior_accepted=4.0, copy_weight=1.0, first_look=0
    )
    looking = dataclasses.replace(prices, first_look=2)
    none, match = [[1, 2, 3]], [[5, 6, 5]]
    at_once, waits = _Prefilled(), _Prefilled()
    d0 = BypassDrafter(at_once, k=3, prices=prices, timed=True, lazy_lower=True)
    d2 = BypassDrafter(waits, k=3, prices=looking, timed=True, lazy_lower=True)
    for d in (d0, d2):
        d.reset(1)
        d.prefill(none)
    assert _tokens(d0.propose(none)[0]) == [99] and len(at_once.prefills) == 1
    routes = []
    for ctx in (none, match, none, none, none):
        routes.append(_tokens(d2.propose(ctx)[0]))
        d2.feedback([0])
    assert routes == [[], [6, 5], [], [99], [99]] and waits.calls == 2 and len(waits.prefills) == 1
    assert d2.decisions == {"copy": 1, "lower": 2, "plain": 2}
    d2.reset(1)  # a new job: the level below waits for its prompt again, the clock from zero
    d2.prefill(none)
    assert _tokens(d2.propose(none)[0]) == [] and waits.calls == 2
    eager = BypassDrafter(_Prefilled(), k=3, prices=looking, timed=True)
    eager.reset(1)
    eager.prefill(none)
    assert _tokens(eager.propose(none)[0]) == [99]


@pytest.mark.parametrize("explore_cold", [False, True])
def test_explore_leaves_a_new_prompts_lazy_level_below_alone_once_rounds_below_priced_under_a_plain_step(
    explore_cold,
):
    """The level below priced under a plain step (as in the explore test: 0.18 against 0.91), explore 3,
    no first_look. The first prompt: no round below measured yet, so explore sends rounds 3 and 6 below
    (the prefill at the first). A new prompt (reset): rounds below were measured and priced under a plain
    step, so with ``explore_cold`` off its rounds take plain steps and the prefill is never paid; with it
    on, round 3 goes below (a second prefill) as before. Once the level below has the prompt, explore
    runs its clock either way."""
    prices = RoutePrices(
        copy_own=0.0,
        row_cost=0.1,
        draft_cost=5.0,
        prior_weight=100.0,
        prior_accepted=1.0,
        explore=3,
        first_look=0,
        explore_cold=explore_cold,
    )
    below = _Prefilled()
    d = BypassDrafter(below, k=3, prices=prices, timed=True, lazy_lower=True)
    none = [[1, 2, 3]]

    def rounds(n):
        out = []
        for _ in range(n):
            out.append(_tokens(d.propose(none)[0]))
            d.feedback([0])
        return out

    d.reset(1)
    d.prefill(none)
    assert rounds(6) == [[], [], [99], [], [], [99]] and len(below.prefills) == 1 and d._stats.low_n == 2
    d.reset(1)  # the next prompt: the level below waits for it again
    d.prefill(none)
    if explore_cold:
        assert rounds(6) == [[], [], [99], [], [], [99]] and len(below.prefills) == 2
    else:
        assert rounds(6) == [[]] * 6 and len(below.prefills) == 1 and below.calls == 2
        assert d.decisions["plain"] == 4 + 6


def _timed_router(lower, explore: int = 3, row_cost: float = 0.02, lazy_lower: bool = False):
    """Priors that make the level below too dear (a 1000-round prior), so plain steps, copies on
    matches and, after ``explore`` - 1 rounds without it, the level below all happen (a dear row,
    ``row_cost``, keeps copies to long matches)."""
    prices = RoutePrices(copy_own=0.0, row_cost=row_cost, draft_cost=3.0, prior_weight=1000.0, explore=explore)
    return BypassDrafter(lower, k=6, min_match=2, prices=prices, timed=True, lazy_lower=lazy_lower)


@pytest.mark.parametrize("lazy_lower", [False, True])
def test_greedy_output_with_the_timed_router_equals_plain_decoding(lazy_lower):
    from stagedspec.drafters import KatzNgramDrafter, ModelDrafter
    from stagedspec.engine.decoding import SpeculativeDecoder
    from stagedspec.engine.sampling import SamplingConfig
    from stagedspec.models.model_loading import truncated_copy

    from tests.helpers import tiny_target
    from tests.oracles import N_NEW, hf_reference, tiny_prompts

    target = tiny_target()
    small = ModelDrafter(truncated_copy(target, 1).model, k=3, lower=KatzNgramDrafter(target.vocab_size, k=2))
    d = _timed_router(small, lazy_lower=lazy_lower)
    out = SpeculativeDecoder(target.model, d, SamplingConfig()).generate(tiny_prompts(3), N_NEW)
    assert [s.output_ids for s in out.sequences] == [list(r) for r in hf_reference(3)]
    assert min(d.decisions.values()) > 0, d.decisions  # all three routes taken
    assert d._stats.step_seconds() > 0 and d._stats.low_n == d.decisions["lower"]
    rounds = sum(len(s.rounds) for s in out.sequences)  # each row's plain steps, logged as undrafted rounds
    assert out.summary()["undrafted_rounds"] * rounds == pytest.approx(d.decisions["plain"])


def test_sampled_output_with_the_timed_router_has_the_targets_distribution():
    """test_sampling_exact's chi-square (same N and critical values) with its staged draft under
    a timed bypass that takes all three routes (rows cost 2 steps each, so copies follow only
    matches of 3 or more; the level below every other round). Measured: 37.0 / 155.5 against
    64.1 / 84.8 with a mutant that verifies the rounds below against a flattened q, (q + mean) / 2
    (dropping q is no such mutant: a point-mass verification is exact whatever picked the token)."""
    from tests.oracles import T1, staged_drafter, statistics

    made = []

    def factory():
        made.append(_timed_router(staged_drafter(), explore=2, row_cost=2.0))
        return made[-1]

    for pair, stat, df, crit in statistics(factory, T1):
        assert stat < crit, f"{pair}: chi2={stat:.1f} df={df} crit={crit:.1f}"
    assert all(sum(d.decisions[k] for d in made) > 0 for k in ("copy", "lower", "plain"))


def test_rounds_of_copies_do_not_count_toward_exploring_below():
    """The priors of ``test_the_timed_router_drafts_nothing_when_no_draft_pays_and_explores_below``
    (explore = 3): no match, a match, a match, no match, no match: the copies leave the clock alone,
    so the round below is the fifth (two rounds that drafted nothing), not the fourth."""
    prices = RoutePrices(copy_own=0.0, row_cost=0.1, draft_cost=5.0, prior_weight=100.0, prior_accepted=1.0, explore=3)
    below = BelowOne()
    d = BypassDrafter(below, k=3, prices=prices, timed=True)
    d.reset(1)
    routes = []
    for ctx in ([1, 2, 3], [5, 6, 5], [5, 6, 5], [1, 2, 3], [1, 2, 3], [1, 2, 3]):
        routes.append(_tokens(d.propose([ctx])[0]))
        d.feedback([len(routes[-1]) if routes[-1] != [99] else 0])  # copies accepted whole
    assert routes == [[], [6, 5], [6, 5], [], [99], []] and below.calls == 1


def test_copy_decay_shrinks_the_kept_copy_counts_each_round_by_hand():
    """copy_decay 0.5, copy_weight 1. A 1-token match's copy of 2 ("6 5" after "5 6 5") with 1 accepted:
    accepted 1 at match 1, rejected 1 at match 2; a_1 = (1 + 1) / (1 + 2) = 2 / 3. The next round (a plain
    step: no feedback on copies) halves them first: a_1 = (0.5 + 1) / (0.5 + 2) = 0.6, a_2 = (0 + 2) / (0.5 +
    3). Without decay the counts stay (a_1 = 2 / 3)."""
    for decay, a1, a2 in ((0.5, 0.6, 2 / 3.5), (1.0, 2 / 3, 2 / 4)):
        prices = RoutePrices(copy_own=0.0, copy_decay=decay, copy_weight=1.0, row_cost=0.0, draft_cost=50.0, explore=0)
        d = BypassDrafter(BelowOne(), k=2, prices=prices, timed=True)
        d.reset(1)
        assert _tokens(d.propose([[5, 6, 5]])[0]) == [6, 5]
        d.feedback([1])
        s = d._stats
        assert s.copy_acc[1] == 1 and s.copy_short[2] == 1 and abs(s.copy_alpha(1) - 2 / 3) < 1e-12
        d.propose([[1, 2, 3]])  # no match: a plain step (or below), a round all the same
        d.feedback([0])
        assert abs(s.copy_alpha(1) - a1) < 1e-12 and abs(s.copy_alpha(2) - a2) < 1e-12


def test_copy_own_prices_each_rows_copies_by_its_own_record_by_hand():
    """copy_own 2, copy_weight 1. Two rows copy "6 5" after "5 6 5" (a 1-token match, 2 offered): row 0 keeps
    both, row 1 none. Pool: accepted 2 at match 1... per match length: match 1 accepted 1 (row 0) rejected 1
    (row 1), match 2 accepted 1 (row 0): a_1 = (1 + 1) / (2 + 2) = 1 / 2. Row 1 alone: accepted 0, rejected 1
    at match 1, so (0 + 2 * 1/2) / (1 + 2) = 1 / 3; row 0: (1 + 1) / (1 + 2) = 2 / 3. Without copy_own every
    row reads the pool. A new batch starts the rows' records empty; rows follow keep_rows."""
    prices = RoutePrices(copy_own=2.0, copy_weight=1.0, row_cost=0.0, draft_cost=50.0, explore=0)
    d = BypassDrafter(BelowOne(), k=2, prices=prices, timed=True)
    d.reset(2)
    assert [_tokens(t) for t in d.propose([[5, 6, 5], [5, 6, 5]])] == [[6, 5], [6, 5]]
    d.feedback([2, 0])
    s = d._stats
    assert abs(s.copy_alpha(1) - 1 / 2) < 1e-12
    assert abs(s.copy_alpha(1, 1) - 1 / 3) < 1e-12 and abs(s.copy_alpha(1, 0) - 2 / 3) < 1e-12
    assert abs(s.copy_alpha(2, 1) - s.copy_alpha(2)) < 1e-12  # row 1 never reached match 2: the pool
    d.keep_rows([1])
    assert abs(s.copy_alpha(1, 0) - 1 / 3) < 1e-12  # row 1 is now row 0
    d.reset(1)
    assert abs(s.copy_alpha(1, 0) - 1 / 2) < 1e-12
    off = BypassDrafter(BelowOne(), k=2, prices=dataclasses.replace(prices, copy_own=0.0), timed=True)
    off.reset(2)
    off.propose([[5, 6, 5], [5, 6, 5]])
    off.feedback([2, 0])
    assert abs(off._stats.copy_alpha(1, 1) - 1 / 2) < 1e-12
