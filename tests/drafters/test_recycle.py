"""Token Recycling (drafters/recycle.py): the successor table and its trees by hand, the decoder
filling it from the target's own logits, exactness alone and under the timed router, and the
router's price for its trees."""

from __future__ import annotations

import pytest
import torch

from stagedspec.drafters import BypassDrafter
from stagedspec.drafters.bypass import RoutePrices
from stagedspec.drafters.hierarchy import BypassLevel, RecycleLevel, validate_levels
from stagedspec.drafters.recycle import RecycleDrafter, SuccessorTable, parse_template
from tests.helpers import ProposeOne


def _tree(table: SuccessorTable, last: int, template) -> list[tuple[int, int, int]]:
    t = table.grow(last, tuple(template), "recycle")
    return list(zip(t.tokens, t.parents, t.rank))


def test_a_template_grows_from_the_last_tokens_successors_by_hand():
    """Successors 1 -> (2, 3), 2 -> (4, 5), 4 -> (6, 7); 3 and 5 have none. Template 0, 1, 00, 01, 10,
    000: node "0" = 2 (1's best), "1" = 3, "00" = 4 (2's best), "01" = 5, "10" would be 3's best (none:
    left out), "000" = 6 (4's best)."""
    table = SuccessorTable(k=2)
    table.observe([1, 2, 4], [[2, 3], [4, 5], [6, 7]])
    assert _tree(table, 1, ("0", "1", "00", "01", "10", "000")) == [
        (2, -1, 0),
        (3, -1, 1),
        (4, 0, 0),
        (5, 0, 1),
        (6, 2, 0),
    ]
    assert _tree(table, 9, ("0", "00")) == []  # an unseen last token: no draft
    table.observe([2, 2], [[8, 9], [5, 4]])  # the latest position wins
    assert table.next[2] == [5, 4] and _tree(table, 1, ("0", "00")) == [(2, -1, 0), (5, 0, 0)]
    table.observe([3], [[1, 2, 3]])  # kept to k
    assert table.next[3] == [1, 2]


@pytest.mark.parametrize(
    "bad, message",
    [
        (["0", "00", "00"], "appears twice"),
        (["00"], "comes before its parent '0'"),
        (["0", "a"], "'a' is not a string of digits 0-7"),
        (["0", 0], "0 is not a string of digits"),
        (["8"], "'8' is not a string of digits 0-7"),
        ("0,1", "non-empty list of rank paths"),
        ([], "non-empty list of rank paths"),
    ],
)
def test_a_bad_template_is_refused_by_name(bad, message):
    with pytest.raises(ValueError, match=message):
        parse_template(bad)
    with pytest.raises(ValueError, match=message):
        RecycleLevel(template=bad).validate()


def test_recycle_settings_are_checked_before_anything_loads():
    with pytest.raises(ValueError, match="need route=timed, got route='priced'"):
        BypassLevel(route="priced", recycle=["0"]).validate()
    with pytest.raises(ValueError, match="comes before its parent"):
        BypassLevel(route="timed", recycle=["0", "10"]).validate()
    BypassLevel(route="timed", recycle=["0", "1", "00"]).validate()
    with pytest.raises(ValueError, match=r"drafts for the target alone; drop the other levels \(\['copy'\]\)"):
        validate_levels([RecycleLevel(), BypassLevel()])
    assert RecycleLevel(template=["0", "00", "000", "1"]).k == 3
    with pytest.raises(ValueError, match="needs timed routing"):
        BypassDrafter(ProposeOne(), prices=RoutePrices(), recycle=RecycleDrafter())


def test_the_decoder_fills_the_table_with_the_targets_own_top_k():
    """One new token: one target call, at the prompt's last token; its entry is the target's top 2 at
    the prompt's last position, from a plain forward."""
    from stagedspec.engine.decoding import SpeculativeDecoder
    from stagedspec.engine.sampling import SamplingConfig

    from tests.helpers import tiny_target
    from tests.oracles import tiny_prompts

    target = tiny_target()
    prompt = tiny_prompts(1)[0]
    d = RecycleDrafter(["0", "1"])
    SpeculativeDecoder(target.model, d, SamplingConfig()).generate([prompt], 1)
    with torch.no_grad():
        logits = target.model(torch.tensor([prompt])).logits[0, -1]
    assert d.successors == 2 and d.table.next == {prompt[-1]: logits.topk(2).indices.tolist()}


def _recycling_router(lower, template=("0", "1", "00"), **prices) -> BypassDrafter:
    return BypassDrafter(
        lower, k=6, min_match=2, prices=RoutePrices(**prices), timed=True, recycle=RecycleDrafter(template)
    )


@pytest.mark.parametrize("routed", [False, True])
def test_greedy_output_with_recycled_drafts_equals_plain_decoding(routed):
    """Alone, and under the timed router beside copies and a level below (its prior set high, so its
    trees are sent): the same tokens as HF's greedy decoding, and recycled tokens among them."""
    from stagedspec.drafters import ModelDrafter
    from stagedspec.engine.decoding import SpeculativeDecoder
    from stagedspec.engine.sampling import SamplingConfig
    from stagedspec.models.model_loading import truncated_copy

    from tests.helpers import tiny_target
    from tests.oracles import N_NEW, hf_reference, tiny_prompts

    target = tiny_target()
    if routed:
        d = _recycling_router(ModelDrafter(truncated_copy(target, 1).model, k=3), recycle_accepted=3.0)
    else:
        d = RecycleDrafter(["0", "1", "00", "000"])
    out = SpeculativeDecoder(target.model, d, SamplingConfig()).generate(tiny_prompts(3), N_NEW)
    assert [s.output_ids for s in out.sequences] == [list(r) for r in hf_reference(3)]
    recycled = sum(s.provenance.count("recycle") for s in out.sequences)
    assert recycled > 0
    if routed:
        assert d.decisions["recycle"] > 0 and d._stats.rec_n == d.decisions["recycle"]
        assert d._stats.rec_sum >= recycled  # the last round's tokens may be cut at N_NEW


@pytest.mark.parametrize("routed", [False, True])
def test_sampled_output_with_recycled_drafts_has_the_targets_distribution(routed):
    """test_sampling_exact's chi-square (same N and critical values), recycled trees alone and under
    the timed router (with the staged draft below and copies). Measured with a mutant that gives each
    recycled node a uniform q instead of a point mass (the table's ranks taken for a sample):
    caught on both."""
    from tests.oracles import T1, staged_drafter, statistics

    made = []

    def factory():
        made.append(
            _recycling_router(staged_drafter(), explore=2, row_cost=0.5, recycle_accepted=2.0)
            if routed
            else RecycleDrafter(["0", "1", "00", "01", "000"])
        )
        return made[-1]

    for pair, stat, df, crit in statistics(factory, T1):
        assert stat < crit, f"{pair}: chi2={stat:.1f} df={df} crit={crit:.1f}"
    if routed:
        assert all(sum(d.decisions[k] for d in made) > 0 for k in ("recycle", "lower")), made[0].decisions


def test_the_router_prices_a_recycle_tree_against_a_plain_step_by_hand():
    """Curve (1, 1.2, 1.3, 1.6), prior_weight 1, recycle prior 1 accepted: a 2-node tree prices
    (1 + 1) / T(3) = 1.54 over a plain step's 1 and the level below's (draft_cost 50) near 0: sent.
    After rounds that accepted 0, 0, 0: (0 + 1) / (3 + 1) accepted, (0.25 + 1) / 1.3 = 0.96 < 1: a
    plain step. A 1-token match's copy (a_1 = 1 / 2 from a prior worth copy_weight 1: 1.5 / T(2) = 1.25)
    beats both."""
    prices = RoutePrices(
        copy_own=0.0, draft_cost=50.0, prior_weight=1.0, copy_weight=1.0, explore=0, recycle_accepted=1.0
    )
    d = BypassDrafter(ProposeOne(), k=1, prices=prices, timed=True, recycle=RecycleDrafter(["0", "00"]))
    d.use_step_curve((1.0, 1.2, 1.3, 1.6))
    d.reset(1)
    d.observe_successors([3, 4], [[4], [5]])  # 3 -> 4 -> 5
    s = d._stats
    assert abs(s.recycle_rate(2) - 2 / 1.3) < 1e-12
    tree = d.propose([[1, 2, 3]])[0]
    assert (tree.tokens, tree.parents, tree.owner) == ([4, 5], [-1, 0], "recycle")
    for _ in range(3):
        d.feedback([0])
        d.propose([[1, 2, 3]])
    assert abs(s.recycle_rate(2) - 1.25 / 1.3) < 1e-12
    assert d.decisions == {"copy": 0, "lower": 0, "plain": 1, "recycle": 3}
    copy = d.propose([[3, 1, 3]])[0]  # a 1-token match: copy "1"
    assert copy.tokens == [1] and copy.owner is None
