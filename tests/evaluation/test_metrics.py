"""Each metric against a case computed by hand (``metrics/round_stats.py`` defines them; the cost model
is ``metrics/cost_model.py``, the intervals ``metrics/intervals.py``), and the decoder's counters against
what its levels really did."""

from __future__ import annotations

import math

import pytest
import torch

from stagedspec.drafters import KatzNgramDrafter, ModelDrafter
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.drafter_protocol import Drafter
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import DraftTree
from stagedspec.evaluation.paired import BatchRun, MethodRun, job_metrics
from stagedspec.metrics import cost_model
from stagedspec.metrics.intervals import rate_interval, speedup_interval, t975
from stagedspec.metrics.round_stats import GenerationResult, PhaseTimes, RoundStats, SequenceResult, geometric_tokens
from stagedspec.models.model_loading import truncated_copy
from tests.helpers import tiny_target
from tests.oracles import tiny_prompts


def _round(acc: int, rejected: bool, emitted: int, k: int = 3) -> RoundStats:
    return RoundStats(
        drafted={"small": k},
        accepted={"small": acc},
        emitted=emitted,
        target_positions=k + 1,
        accepted_depth=acc,
        rejected=rejected,
        draft_depth=k,
        tree_nodes=k,
    )


def _sequence() -> SequenceResult:
    """Four rounds of a chain of 3: accept 1 then reject; accept all 3 (bonus); reject the
    first; accept 2, reject the third, and only 2 of the 3 tokens fit in max_new_tokens."""
    s = SequenceResult(prompt_ids=[1], draft_level="small")
    for r in (_round(1, True, 2), _round(3, False, 4), _round(0, True, 1), _round(2, True, 2)):
        s.record(r)
    s.output_ids = list(range(9))
    s.provenance = ["small"] * 6 + ["target"] * 3
    return s


def test_acceptance_length_emitted_efficiency_alpha_by_hand():
    m = _sequence().summary()
    assert m["rounds"] == 4 and m["emitted"] == 9
    assert m["acceptance_rate"] == m["acceptance_rate/small"] == 6 / 12  # accepted / drafted
    assert m["mean_acceptance_length"] == 1 + 6 / 4  # vLLM: 1 + accepted / drafts
    assert m["mean_accepted_tokens_per_call"] == m["mean_acceptance_length"]
    assert m["mean_emitted_tokens_per_call"] == 9 / 4  # the cut round emits 2, not 3
    assert m["system_efficiency"] == 9 / 16
    assert m["wasted_draft_fraction/small"] == 6 / 12
    # 6 accepted tests and 3 rejections: alpha_hat = 6 / 9, while accepted / drafted = 0.5
    assert m["alpha_hat"] == pytest.approx(2 / 3)
    assert m["iid_tokens_per_call"] == pytest.approx(1 + 2 / 3 + 4 / 9 + 8 / 27)  # 65 / 27
    assert m["provenance/small"] == 6 / 9


def test_position_acceptance_counts_only_tested_depths_by_hand():
    # tested depths: round 1 -> 1, 2; round 2 -> 1, 2, 3; round 3 -> 1; round 4 -> 1, 2, 3
    m = _sequence().summary()
    assert [m[f"position_acceptance/{i}"] for i in (1, 2, 3)] == [3 / 4, 2 / 3, 1 / 2]
    # a walk that ends on a leaf at depth 1 of a depth-3 tree tested depth 1 only
    s = SequenceResult(prompt_ids=[1])
    s.record(RoundStats(accepted_depth=1, rejected=False, draft_depth=3, tree_nodes=4))
    assert s.position_reached == [1] and s.position_accepted == [1]


def test_alpha_hat_is_consistent_where_accepted_over_drafted_is_not():
    """Simulated i.i.d. chain, alpha 0.8, k 4: accepted / drafted -> 0.59 (the issue's
    example), alpha_hat -> 0.8, and the predicted tokens per call -> the measured mean."""
    g = torch.Generator().manual_seed(0)
    s = SequenceResult(prompt_ids=[1], draft_level="d")
    for _ in range(20000):
        u = torch.rand(4, generator=g)
        acc = int((u < 0.8).int().cumprod(0).sum())
        s.record(
            RoundStats(
                drafted={"d": 4},
                accepted={"d": acc},
                accepted_depth=acc,
                rejected=acc < 4,
                draft_depth=4,
                emitted=acc + 1,
                target_positions=5,
                tree_nodes=4,
            )
        )
    m = s.summary()
    assert m["acceptance_rate"] == pytest.approx(0.8 * (1 - 0.8**4) / (4 * 0.2), abs=0.01)  # 0.59
    assert m["alpha_hat"] == pytest.approx(0.8, abs=0.01)
    assert m["iid_tokens_per_call"] == pytest.approx(m["mean_acceptance_length"], rel=0.01)
    assert geometric_tokens(0.8, 4) == pytest.approx(3.3616)


def test_predicted_rounds_match_a_simulated_iid_chain():
    """Rows of 20 tokens, chain of 4, alpha 0.8: the mean number of rounds (the last one
    cut at 20) is N / E plus the overshoot term, not N / E."""
    g = torch.Generator().manual_seed(1)
    counts = []
    for _ in range(4000):
        n = rounds = 0
        while n < 20:
            u = torch.rand(4, generator=g)
            n += int((u < 0.8).int().cumprod(0).sum()) + 1
            rounds += 1
        counts.append(rounds)
    E, second = cost_model.yield_moments(0.8, {4: 1})
    assert E == pytest.approx(geometric_tokens(0.8, 4))
    assert sum(counts) / len(counts) == pytest.approx(cost_model.predicted_rounds(20, E, second), rel=0.01)
    assert abs(sum(counts) / len(counts) - 20 / E) > 0.2  # the overshoot is not negligible


class _LeafTree(Drafter):
    """Root children: a token the target rejects (with a child of its own), then the
    target's greedy token as a leaf. The walk accepts the leaf: depth 1, no rejection."""

    name, k = "fixed", 2

    def __init__(self, good: int, bad: int) -> None:
        self.good, self.bad = good, bad

    def propose(self, contexts, features=None):
        trees = []
        for _ in contexts:
            t = DraftTree()
            first = t.add(self.bad, -1, None, self.name)
            t.add(self.good, -1, None, self.name)
            t.add(self.bad, first, None, self.name)
            trees.append(t)
        return trees


def test_decoder_records_a_leaf_acceptance_without_a_rejection():
    target = tiny_target()
    prompt = tiny_prompts(1)[0]
    with torch.no_grad():
        good = int(target.model(torch.tensor([prompt])).logits[0, -1].argmax())
    dec = SpeculativeDecoder(target.model, _LeafTree(good, (good + 1) % 128), SamplingConfig())
    seq = dec.generate([prompt], 1).sequences[0]
    (r,) = seq.rounds
    assert (r.accepted_depth, r.rejected, r.draft_depth) == (1, False, 2)
    assert seq.position_reached == [1]  # depth 2 was never tested: the accepted node is a leaf


@pytest.mark.parametrize("kind", ["small", "ngram"])
def test_draft_calls_are_counted_once_per_batch_round(kind):
    """Batch 4, a chain of 3: one forward (or one batch of look-ups) per depth per round,
    however many rows; ``draft_calls`` equals the level's own counter."""
    target = tiny_target()
    level = (
        ModelDrafter(truncated_copy(target, 1).model, k=3)
        if kind == "small"
        else KatzNgramDrafter(target.vocab_size, k=3)
    )
    dec = SpeculativeDecoder(target.model, level, SamplingConfig())
    res = dec.generate(tiny_prompts(4), 20)
    m = res.summary()
    # the level's own counter over the rounds (its prefill forward excluded)
    assert m["draft_calls/" + level.name] == res.draft_forwards[level.name] == 3 * len(res.phase_times)
    assert m["draft_calls_per_round/" + level.name] == 3
    assert m["target_calls"] == len(res.phase_times) < m["rounds"]  # forwards, not row-rounds


def test_staged_lower_level_counts_only_what_it_offered_upward():
    """A lower level that is the staged level's own model is always accepted. Staged k = 4,
    lower k = 2: inner round 1 keeps 2 + the bonus, inner round 2 has room for 1 of its 2
    accepted tokens: per round 4 drafted, 3 kept (acceptance 0.75, not 1.0)."""
    target = tiny_target()
    small = truncated_copy(target, 1).model
    staged = ModelDrafter(small, k=4, lower=ModelDrafter(small, k=2, name="inner"))
    res = SpeculativeDecoder(target.model, staged, SamplingConfig()).generate(tiny_prompts(1), 12)
    for r in res.sequences[0].rounds:
        assert (r.drafted["inner"], r.accepted["inner"]) == (4, 3)
    m = res.summary()
    assert m["acceptance_rate/inner"] == 0.75 and m["wasted_draft_fraction/inner"] == 0.25
    # the staged level makes one forward per inner round (2 per round), not k = 4
    assert m["draft_calls_per_round/small"] == 2 and m["draft_calls_per_round/inner"] == 2 * 2


# ------------------------------------------------------------------- intervals, cost model
def test_speedup_interval_by_hand():
    # (method tokens, method s, AR tokens, AR s): S = (30 / 4) / (30 / 6) = 1.5; influence
    # psi_i = 1 - b_i / mean(b) = 0.25, 0.25, -0.5; sd = sqrt(0.1875); se = sd / sqrt(3) = 0.25
    units = [[(10, 1, 10, 2)], [(10, 1, 10, 2)], [(10, 2, 10, 2)]]
    iv = speedup_interval(units)
    assert iv.estimate == pytest.approx(1.5)
    assert (iv.low, iv.high) == pytest.approx((1.5 * math.exp(-4.303 * 0.25), 1.5 * math.exp(4.303 * 0.25)))
    assert iv.n == 3 and iv.basis == "prompts"
    # one prompt, two repeats: the repeats are the units (timing noise only)
    one = rate_interval([[(10, 1), (10, 2)]])
    assert one.basis == "repeats" and one.estimate == pytest.approx(20 / 3)
    assert rate_interval([[(10, 1)]]) is None
    assert t975(4) == 2.776 and t975(60) == pytest.approx(2.000, abs=1e-3)


def _batch(rounds: list[tuple[int, bool, int]], wall: float, prefill: float, round_s: float) -> GenerationResult:
    s = SequenceResult(prompt_ids=[1], draft_level="small")
    for acc, rej, emitted in rounds:
        s.record(_round(acc, rej, emitted))
    s.output_ids = [0] * sum(e for _, _, e in rounds)
    phases = [
        PhaseTimes(
            draft=0.3 * round_s, verify=0.6 * round_s, overhead=0.1 * round_s, draft_calls={"small": 3}, rows=1, width=4
        )
        for _ in rounds
    ]
    return GenerationResult(
        [s],
        phases,
        target_calls=len(rounds),
        prefill_time=prefill,
        wall_time=wall,
        draft_call_time={"small": 0.2 * round_s * len(rounds)},
        draft_forwards={"small": 3 * len(rounds)},
        target_forward_time=0.5 * round_s * len(rounds),
    )


def test_cost_model_by_hand():
    """4 rounds: accepted 1, 1, 0, 2, each then rejected: alpha_hat = 4 / 8 = 0.5. A round
    of a chain of 3 yields X = 1, 2, 3, 4 tokens with probability 1/2, 1/4, 1/8, 1/8:
    E = 1.875, E[X (X - 1)] = 2 / 4 + 6 / 8 + 12 / 8 = 2.75. 8 tokens -> 8 / 1.875 rounds
    plus the last one's overshoot 2.75 / (2 * 1.875^2), of 0.1 s each after a 0.2 s
    prefill; the baseline makes 10 tokens/s."""
    b = _batch([(1, True, 2), (1, True, 2), (0, True, 1), (2, True, 3)], wall=0.6, prefill=0.2, round_s=0.1)
    p = cost_model.account([b], 10.0)
    rounds = 8 / 1.875 + 2.75 / (2 * 1.875**2)  # 4.658
    assert cost_model.yield_moments(0.5, {3: 4}) == pytest.approx((1.875, 2.75))
    assert p["accounted_tokens_per_call"] == pytest.approx(1.875)
    assert p["accounted_rounds"] == pytest.approx(rounds)
    assert p["accounted_wall_s"] == pytest.approx(0.2 + 0.1 * rounds)
    assert p["accounted_speedup"] == pytest.approx(8 / (0.2 + 0.1 * rounds) / 10.0)
    assert cost_model.predicted_rounds(5, 1.0, 0.0) == 5  # plain decoding: one token a round, no overshoot
    ar = GenerationResult(
        [SequenceResult(prompt_ids=[1])],
        [PhaseTimes(verify=0.05, rows=1, width=1)] * 4,
        target_calls=4,
        target_forward_time=4 * 0.04,
    )
    c = cost_model.round_costs(b, ar)
    # per round: the level's forwards 0.02 s (3 calls of 0.00667 s), verification 0.06 s
    assert c["round_s"] == pytest.approx(0.1) and c["round_verify_s"] == pytest.approx(0.06)
    assert c["round_draft_forward_s/small"] == pytest.approx(0.02)
    assert c["round_draft_other_s"] == pytest.approx(0.03 - 0.02)
    assert c["cost_ratio/small"] == pytest.approx((0.02 / 3) / 0.04)  # c against the baseline's T(1)
    assert c["stage_cost/small"] == pytest.approx(0.02 / 0.04)  # 3 forwards a round, no level below
    assert c["verify_cost/4"] == pytest.approx(0.06 / 0.05)  # T(4) / T(1)
    # a staged level: its stage cost adds the forwards of the level it drafts through
    b.draft_call_time = {"ngram": 4 * 0.004, "small": 4 * 0.02}
    b.draft_forwards = {"ngram": 4 * 8, "small": 4 * 3}
    c = cost_model.round_costs(b, ar)
    assert c["stage_cost/ngram"] == pytest.approx(0.004 / 0.04)
    assert c["stage_cost/small"] == pytest.approx((0.004 + 0.02) / 0.04)
    assert c["cost_ratio/ngram"] == pytest.approx((0.004 / 8) / 0.04)


def test_job_metrics_pool_repeats_and_carry_intervals():
    """Two units, two repeats each: counts come from one pass, rates from all, and every
    speedup has its interval; per category with one unit, from its repeats."""

    def run(name, secs):
        r = MethodRun(name)
        for unit, cat in enumerate(("qa", "math")):
            for rep in range(2):
                b = _batch([(1, True, 2), (2, True, 3)], wall=secs[unit][rep], prefill=0.0, round_s=0.1)
                r.batches.append(BatchRun(cat, unit, rep, b))
            r.records.append({"output_ids": [0] * 5})
        return r

    method = run("small>target", [[0.5, 0.6], [0.5, 0.4]])
    ar = run("target", [[1.0, 1.1], [1.0, 0.9]])
    m = job_metrics(method, ar, same_text=True)
    assert m["emitted"] == 10 and m["repeats"] == 2
    assert m["tokens_per_s"] == pytest.approx(20 / 2.0) and m["ar_tokens_per_s"] == pytest.approx(20 / 4.0)
    assert m["speedup"] == pytest.approx(2.0)
    assert m["speedup_ci_low"] < 2.0 < m["speedup_ci_high"]
    for cat in ("qa", "math"):
        assert m[f"speedup_ci_low/{cat}"] < m[f"speedup/{cat}"] < m[f"speedup_ci_high/{cat}"]
    assert m["timing_spread"] == pytest.approx((0.1 / 1.05 + 0.1 / 0.95) / 2)
    # the cost model by hand: 4 batches of one row, each accepting 1 then 2 of a chain of 3
    # before a rejection -> alpha_hat = 12 / 20 = 0.6; a round yields 1, 2, 3, 4 tokens with
    # probability 0.4, 0.24, 0.144, 0.216: E = 2.176, E[X (X - 1)] = 0.48 + 0.864 + 2.592 =
    # 3.936. A row's 5 tokens take 5 / E + 3.936 / (2 E^2) rounds of 0.1 s, no prefill; 4
    # batches emit 20 tokens; the baseline makes 5 tokens/s, the method measured 2x.
    E, second = 2.176, 3.936
    wall = 4 * (5 / E + second / (2 * E * E)) * 0.1  # 1.0854 s
    assert m["accounted_tokens_per_call"] == pytest.approx(E)
    assert m["accounted_wall_s"] == pytest.approx(wall)
    assert m["accounted_speedup"] == pytest.approx(20 / wall / 5.0)  # 3.685
    assert m["accounting_error"] == pytest.approx(20 / wall / 5.0 / 2.0 - 1.0)  # its walls hold more than its rounds
    assert not any(k.startswith("predict") for k in m)  # no out-of-sample prediction was given
    # given one (made before timing, on other prompts), it is kept as is and compared
    m = job_metrics(method, ar, same_text=True, prediction={"predicted_speedup": 2.5, "predicted_tokens_per_call": 3.0})
    assert m["predicted_speedup"] == 2.5 and m["prediction_error"] == pytest.approx(2.5 / 2.0 - 1.0)
    assert m["predicted_tokens_per_call"] == 3.0 and m["accounted_tokens_per_call"] == pytest.approx(E)


def test_out_of_sample_prediction_by_hand():
    """Calibration: one method batch (rounds emitting 2, 2, 1, 3 tokens: accepted 1, 1, 0,
    2 of a chain of 3, each then rejected; 0.1 s a round, 0.2 s prefill) and two plain
    batches (0.05 s a round, prefill 0.1 and 0.3 s). The yields are the rounds' own but
    the last (which the token budget may cut): 2, 2, 1, so E = 5/3 and E[X (X - 1)] =
    (2 + 2 + 0) / 3 = 4/3 (the i.i.d. model at alpha_hat 0.5 would say E = 1.875). A job
    of 16 tokens per row: the method needs 16 / (5/3) + (4/3) / (2 (5/3)^2) = 9.6 + 0.24
    = 9.84 rounds, 0.2 + 0.984 = 1.184 s a batch; plain decoding 0.2 + 16 * 0.05 = 1.0 s."""
    b = _batch([(1, True, 2), (1, True, 2), (0, True, 1), (2, True, 3)], wall=0.6, prefill=0.2, round_s=0.1)

    def plain(prefill):
        return GenerationResult(
            [SequenceResult(prompt_ids=[1])],
            [PhaseTimes(verify=0.05, rows=1, width=1)] * 6,
            target_calls=6,
            prefill_time=prefill,
            wall_time=prefill + 0.3,
        )

    assert cost_model.empirical_yield(b) == pytest.approx((5 / 3, 4 / 3))
    p = cost_model.predict_out_of_sample([b], [plain(0.1), plain(0.3)], tokens=16, rows=2)
    assert p["predicted_tokens_per_call"] == pytest.approx(5 / 3) and p["predicted_rounds"] == pytest.approx(9.84)
    assert p["prediction_iid_tokens_per_call"] == pytest.approx(1.875)
    assert p["predicted_speedup"] == pytest.approx(1.0 / 1.184)  # 0.8446
    assert p["predicted_tokens_per_s"] == pytest.approx(2 * 16 / 1.184)
    assert p["predicted_ar_tokens_per_s"] == pytest.approx(2 * 16 / 1.0)
    assert p["prediction_alpha_hat"] == 0.5 and p["prediction_ar_round_s"] == pytest.approx(0.05)
    assert cost_model.predict_out_of_sample([b], [], tokens=16) == {}  # no baseline calibration: nothing
    # one round per sequence leaves no uncut yield: the i.i.d. model at alpha_hat stands in
    one = _batch([(1, True, 2)], wall=0.3, prefill=0.2, round_s=0.1)
    assert cost_model.empirical_yield(one) is None
    q = cost_model.predict_out_of_sample([one], [plain(0.1)], tokens=16)
    assert q["predicted_tokens_per_call"] == pytest.approx(cost_model.yield_moments(0.5, {3: 1})[0])


def test_interval_metrics_say_what_the_interval_is_over():
    from stagedspec.metrics.intervals import interval_metrics

    # (method tokens, seconds, baseline tokens, seconds) per repeat, per unit
    two_prompts = [[(10.0, 1.0, 10.0, 2.0)], [(10.0, 1.0, 10.0, 3.0)]]
    m = interval_metrics("speedup/qa", speedup_interval(two_prompts))
    assert m["speedup_ci_n/qa"] == 2.0 and m["speedup_ci_over_prompts/qa"] == 1.0
    one_prompt = [[(10.0, 1.0, 10.0, 2.0), (10.0, 1.1, 10.0, 2.0), (10.0, 0.9, 10.0, 2.1)]]
    m = interval_metrics("speedup", speedup_interval(one_prompt))
    assert m["speedup_ci_n"] == 3.0 and m["speedup_ci_over_prompts"] == 0.0
    assert m["speedup_ci_low"] < 2.0 < m["speedup_ci_high"]


def test_routed_shares_count_the_level_each_draft_came_from():
    """Four rounds, drafted by copy, small, small and none (a round without a draft): routed/copy =
    1/3 and routed/small = 2/3 of the drafted rounds."""
    from stagedspec.metrics.round_stats import summarize

    s = SequenceResult(prompt_ids=[1], draft_level="copy")
    for who in ("copy", "small", "small", None):
        r = _round(1, True, 2)
        r.drafter = who
        s.record(r)
    out = summarize([s])
    assert out["routed/copy"] == pytest.approx(1 / 3) and out["routed/small"] == pytest.approx(2 / 3)


def test_undrafted_rounds_count_a_routers_plain_steps_and_not_plain_decoding():
    """Five rounds of a speculative run, two of them without a draft (a timed router's plain
    steps): undrafted_rounds = 2/5; plain decoding (no draft level) logs none."""
    from stagedspec.metrics.round_stats import summarize

    s, ar = SequenceResult(prompt_ids=[1], draft_level="copy"), SequenceResult(prompt_ids=[1])
    for k in (3, 0, 3, 0, 2):
        r = _round(0, False, 1, k=k)
        r.drafter = "copy" if k else None
        s.record(r)
        ar.record(_round(0, False, 1, k=0))
    assert summarize([s])["undrafted_rounds"] == pytest.approx(2 / 5)
    assert "undrafted_rounds" not in summarize([ar])
