"""A draft that stops when it is unsure (``stop_below``): k becomes a cap, and a model
level ends its draft after the first pick it gives less than ``stop_below`` probability.
The rule reads only the draft's own distributions, so verification stays exact: greedy
equals HF token for token, sampling passes the chi-square test, plain and staged."""

from __future__ import annotations

import pytest
import torch

from stagedspec.drafters import KatzNgramDrafter, ModelDrafter
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import TreeShape
from stagedspec.models.model_loading import truncated_copy
from tests.helpers import tiny_target
from tests.oracles import (
    N_NEW,
    chi2,
    chi2_critical,
    draw_positions_3_4,
    exact_positions_3_4,
    hf_reference,
    peaked,
    tiny_prompts,
)

K = 6


def _small():
    return truncated_copy(tiny_target(), 1).model


def _median_pick_probability(model, prompts) -> float:
    """A threshold that splits the small model's greedy picks in half on these prompts."""
    with torch.no_grad():
        tops = [torch.softmax(model(torch.tensor([p])).logits[0].float(), -1).max(-1).values for p in prompts]
    return float(torch.cat(tops).median())


def _expected_depth(model, context: list[int], k: int, stop_below: float) -> int:
    """By hand: the small model's greedy chain from ``context``; the draft ends after the
    first pick whose softmax probability is below the threshold, or at k."""
    ctx = list(context)
    with torch.no_grad():
        for i in range(1, k + 1):
            p = torch.softmax(model(torch.tensor([ctx])).logits[0, -1].float(), -1)
            if float(p.max()) < stop_below:
                return i
            ctx.append(int(p.argmax()))
    return k


@pytest.mark.parametrize("staged", [False, True], ids=["small", "ngram>small"])
def test_greedy_stop_below_equals_hf_and_stops_where_the_rule_says(staged):
    target, small = tiny_target(), _small()
    prompts = tiny_prompts(3)
    tau = _median_pick_probability(small, prompts)
    drafter = ModelDrafter(
        small, k=K, stop_below=tau, lower=KatzNgramDrafter(target.vocab_size, k=2) if staged else None
    )
    res = SpeculativeDecoder(target.model, drafter, SamplingConfig()).generate(prompts, N_NEW)
    assert [s.output_ids for s in res.sequences] == [list(r) for r in hf_reference(3)]
    depths = []
    for prompt, seq in zip(prompts, res.sequences):
        done = 0
        for r in seq.rounds:
            assert r.draft_depth == _expected_depth(small, prompt + seq.output_ids[:done], K, tau)
            depths.append(r.draft_depth)
            done += r.emitted
    assert min(depths) < K and max(depths) > 1  # the threshold both stopped drafts and let some run on


def test_stop_below_zero_drafts_the_full_chain():
    target, small = tiny_target(), _small()
    res = SpeculativeDecoder(target.model, ModelDrafter(small, k=K), SamplingConfig()).generate(tiny_prompts(3), N_NEW)
    assert all(r.draft_depth == K for s in res.sequences for r in s.rounds[:-1])


@pytest.mark.parametrize(
    "factory,cfg",
    [
        (lambda: ModelDrafter(peaked()[2], k=3, stop_below=0.6), SamplingConfig(temperature=1.0, seed=31)),
        (
            lambda: ModelDrafter(peaked()[2], k=3, stop_below=0.6, lower=KatzNgramDrafter(8, k=2, order=2)),
            SamplingConfig(temperature=1.0, seed=32),
        ),
        (
            lambda: ModelDrafter(peaked()[2], stop_below=0.6, tree=TreeShape.parse({"widths": [2, 2, 1]})),
            SamplingConfig(temperature=0.7, seed=33),
        ),
    ],
    ids=["small", "ngram>small", "small-tree-t0.7"],
)
def test_stop_below_samples_the_target_at_positions_3_and_4(factory, cfg):
    """Chi-square (N = 6000, alpha = 1e-4) of the joint of the 3rd and 4th tokens, drafts
    of up to 3 tokens (a tree: up to 10 nodes) cut by the threshold (checked to cut some and
    not all; in a tree the stop prunes the rank-0 path, the alternatives keep their depth)."""
    target = peaked()[0]
    probe = SpeculativeDecoder(target.model, factory(), SamplingConfig(temperature=cfg.temperature, seed=cfg.seed))
    sizes = {r.tree_nodes for s in probe.generate([[1, 5, 2, 5, 2]] * 200, 4).sequences for r in s.rounds}
    assert min(sizes) < max(sizes) and max(sizes) in (3, 10), sizes
    # batches of 200: the decoder's per-round work grows faster than linearly in the batch
    stat, df = chi2(draw_positions_3_4(factory, cfg, 6000, batch=200), exact_positions_3_4(cfg))
    assert stat < chi2_critical(df), f"chi2={stat:.1f} df={df} crit={chi2_critical(df):.1f}"


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, True, "x"])
def test_bad_stop_below_is_refused_naming_the_value(bad):
    from stagedspec.drafters.hierarchy import ModelLevel
    from stagedspec.models.model_loading import ModelSpec

    with pytest.raises(ValueError, match=rf"stop_below must be a probability in \[0, 1\).*{bad!r}"):
        ModelLevel(model=ModelSpec(source="tiny"), stop_below=bad).validate()


# ----------------------------------------------------------------------- stop_alternatives
def test_alternatives_are_the_runners_up_beside_the_unsure_pick_only():
    """grow_trees by hand: a chain of 3 whose 2nd pick is unsure gets, beside that pick,
    the draft's 2nd and 3rd best tokens there as leaves (point masses, ranks 1 and 2),
    nothing beside the sure 1st pick, and no 3rd depth."""
    from stagedspec.drafters.tree_growth import NodeDist, grow_trees

    sure = torch.tensor([0.0, 5.0, 1.0, 0.5, -1.0])  # argmax 1, probability 0.93
    unsure = torch.tensor([1.0, 0.2, 0.9, 1.1, 0.8])  # argmax 3 (0.28), then 0 (0.26), then 2
    calls = []

    def expand(nodes, trees):
        calls.append(nodes)
        return [NodeDist(raw=unsure) for _ in nodes]

    (tree,) = grow_trees(
        None, 3, [NodeDist(raw=sure)], expand, SamplingConfig(), None, "small", stop_below=0.5, stop_alternatives=2
    )
    assert tree.tokens == [1, 3, 0, 2]
    assert tree.parents == [-1, 0, 0, 0]
    assert tree.rank == [0, 0, 1, 2]
    assert all(q is None for q in tree.q[2:])  # point masses
    assert calls == [[(0, 0)]]  # only the sure pick was expanded
    (plain,) = grow_trees(None, 3, [NodeDist(raw=sure)], expand, SamplingConfig(), None, "small", stop_below=0.5)
    assert plain.tokens == [1, 3]


def _expected_round(model, context: list[int], k: int, stop_below: float) -> tuple[int, bool]:
    """By hand: the greedy chain's depth, and whether it ended on an unsure pick."""
    ctx = list(context)
    with torch.no_grad():
        for i in range(1, k + 1):
            p = torch.softmax(model(torch.tensor([ctx])).logits[0, -1].float(), -1)
            if float(p.max()) < stop_below:
                return i, True
            ctx.append(int(p.argmax()))
    return k, False


@pytest.mark.parametrize("staged", [False, True], ids=["small", "ngram>small"])
def test_greedy_stop_alternatives_equals_hf_and_adds_two_leaves_where_it_stops(staged):
    target, small = tiny_target(), _small()
    prompts = tiny_prompts(3)
    tau = _median_pick_probability(small, prompts)
    drafter = ModelDrafter(
        small,
        k=K,
        stop_below=tau,
        stop_alternatives=2,
        lower=KatzNgramDrafter(target.vocab_size, k=2) if staged else None,
    )
    res = SpeculativeDecoder(target.model, drafter, SamplingConfig()).generate(prompts, N_NEW)
    assert [s.output_ids for s in res.sequences] == [list(r) for r in hf_reference(3)]
    stopped = 0
    for prompt, seq in zip(prompts, res.sequences):
        done = 0
        for r in seq.rounds:
            depth, unsure = _expected_round(small, prompt + seq.output_ids[:done], K, tau)
            assert (r.draft_depth, r.tree_nodes) == (depth, depth + 2 * unsure)
            stopped += unsure
            done += r.emitted
    assert stopped > 0


@pytest.mark.parametrize(
    "factory,cfg",
    [
        (
            lambda: ModelDrafter(peaked()[2], k=3, stop_below=0.6, stop_alternatives=2),
            SamplingConfig(temperature=1.0, seed=41),
        ),
        (
            lambda: ModelDrafter(
                peaked()[2], k=3, stop_below=0.6, stop_alternatives=2, lower=KatzNgramDrafter(8, k=2, order=2)
            ),
            SamplingConfig(temperature=0.7, top_p=0.9, seed=42),
        ),
    ],
    ids=["small-t1", "ngram>small-t0.7-topp"],
)
def test_stop_alternatives_sample_the_target_at_positions_3_and_4(factory, cfg):
    """Chi-square (N = 6000, alpha = 1e-4) of the joint of the 3rd and 4th tokens with
    drafts of up to 3 tokens plus 2 leaves beside an unsure pick (checked to occur)."""
    target = peaked()[0]
    probe = SpeculativeDecoder(
        target.model, factory(), SamplingConfig(temperature=cfg.temperature, top_p=cfg.top_p, seed=cfg.seed)
    )
    rounds = [r for s in probe.generate([[1, 5, 2, 5, 2]] * 200, 4).sequences for r in s.rounds]
    assert any(r.tree_nodes == r.draft_depth + 2 for r in rounds)
    assert any(r.tree_nodes == r.draft_depth for r in rounds)
    stat, df = chi2(draw_positions_3_4(factory, cfg, 6000, batch=200), exact_positions_3_4(cfg))
    assert stat < chi2_critical(df), f"chi2={stat:.1f} df={df} crit={chi2_critical(df):.1f}"


@pytest.mark.parametrize(
    "bad,stop,match",
    [
        (-1, 0.5, "stop_alternatives must be an integer in 0..8"),
        (9, 0.5, "in 0..8.*9"),
        (1.5, 0.5, "in 0..8.*1.5"),
        (True, 0.5, "in 0..8.*True"),
        ("2", 0.0, "in 0..8.*'2'"),
    ],
)
def test_bad_stop_alternatives_is_refused_naming_the_value(bad, stop, match):
    from stagedspec.drafters.hierarchy import ModelLevel
    from stagedspec.models.model_loading import ModelSpec

    with pytest.raises(ValueError, match=match):
        ModelLevel(model=ModelSpec(source="tiny"), stop_below=stop, stop_alternatives=bad).validate()
