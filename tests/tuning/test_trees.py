"""Trees that pay: ranked alternatives are the draft's real next-best tokens at every
temperature, trees at a staged level, batched dynamic trees, and ``tree=auto``
(calibration, Sequoia's program, the cache). Greedy output equals HF ``generate`` for
every tree preset, at the top level and at a staged level, batch 1 and 5; the emitted
distribution is the target's (chi-square of the 3rd and 4th tokens) for staged trees and
dynamic trees at T = 1 and at T = 0.7 with top-p."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from stagedspec.drafters import KatzNgramDrafter, ModelDrafter
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.kernels import HF_KERNELS
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import AutoShape, DraftTree, DynamicShape, StaticShape, TreeShape
from stagedspec.models.model_loading import truncated_copy
from stagedspec.tuning.auto_tree import resolve_auto_tree
from stagedspec.tuning.tree_calibration import RankRecorder
from stagedspec.tuning.tree_program import Calibration, acceptance_matrix, best_trees, choose, replay
from tests.helpers import other_small, tiny_target
from tests.oracles import (
    N_NEW,
    V,
    chi2,
    chi2_critical,
    draw_positions_3_4,
    exact_positions_3_4,
    hf_reference,
    peaked,
    tiny_prompts,
    trained_drafts,
)

CONF = Path(__file__).resolve().parents[2] / "conf" / "tree"
PRESETS = {p.stem: yaml.safe_load(p.read_text())["shape"] for p in sorted(CONF.glob("*.yaml")) if p.stem != "auto"}
SMALL_AUTO = AutoShape(max_nodes=8, widths=(3, 2, 2), prompts=2, tokens=12, repeats=1)


def _first1():
    return truncated_copy(tiny_target(), 1).model


def _setup(drafter, sampling: SamplingConfig, contexts: list[list[int]]):
    drafter.setup(sampling, torch.Generator().manual_seed(0))
    drafter.reset(len(contexts))
    drafter.prefill(contexts)


def _children(tree: DraftTree, node: int) -> list[int]:
    return [i for i, p in enumerate(tree.parents) if p == node]


def _next_best_scores(raw: torch.Tensor, pick: int, n: int) -> torch.Tensor:
    """The raw scores of the draft's n most preferred tokens other than ``pick``, best first
    (compared as scores: tied tokens may come in either order)."""
    rest = raw.float().clone()
    rest[pick] = float("-inf")
    return torch.sort(rest, descending=True).values[:n]


def _check_ranked(tree: DraftTree, raw_after, greedy: bool) -> int:
    """Every node's children: rank 0 first, then the draft's next-best tokens in order.
    ``raw_after(path_tokens)`` gives the draft's raw scores after a path. Returns the number
    of alternatives checked."""
    checked = 0
    for node in [-1] + list(range(len(tree))):
        kids = _children(tree, node)
        if not kids:
            continue
        raw = raw_after(tree.path_tokens(node) if node >= 0 else [])
        ranks = [tree.rank[c] for c in kids]
        toks = [tree.tokens[c] for c in kids]
        assert ranks == sorted(ranks) and ranks[0] == 0
        pick = toks[0]
        if greedy:
            assert pick == int(torch.argmax(raw)), "rank 0 at T = 0 must be the draft's argmax"
        want = _next_best_scores(raw, pick, len(kids) - 1)
        got = raw.float()[toks[1:]]
        assert len(set(toks)) == len(toks) and torch.allclose(got, want, atol=1e-4, rtol=0), (
            f"node {node}: offered {toks[1:]} scoring {got.tolist()}; the draft's next-best score {want.tolist()}"
        )
        assert all(q is None for q in [tree.q[c] for c in kids[1:]]), "ranked alternatives are point masses"
        checked += len(kids) - 1
    return checked


SAMPLINGS = [SamplingConfig(0.0), SamplingConfig(0.7, top_k=1, seed=3), SamplingConfig(1.0, top_p=0.5, seed=4)]


# ------------------------------------------------------------------ ranked alternatives
@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["greedy", "t0.7-topk1", "t1-topp0.5"])
def test_ngram_alternatives_are_its_next_best_tokens(sampling):
    """With top-k = 1 or greedy the processed q is one-hot: ranking from it would offer
    token ids 0, 1, 2 (zero-probability ties)."""
    ctx = [5, 9, 3, 7, 5, 9, 4, 7, 5, 9, 3, 8, 5, 9, 6, 1, 5, 9]
    d = KatzNgramDrafter(128, tree=TreeShape.parse({"widths": [4, 3, 2]}))
    _setup(d, sampling, [ctx])
    (tree,) = d.propose([ctx])
    n = _check_ranked(tree, lambda path: torch.log(d.lms[0].distribution(ctx + path)), sampling.greedy)
    assert n == 3 + 4 * 2 + 12 * 1
    assert {3, 4, 6} <= {tree.tokens[c] for c in _children(tree, -1)}  # what followed "5 9"


def _model_raw(model, ctx):
    def raw(path):
        with torch.no_grad():
            return model(torch.tensor([ctx + path])).logits[0, -1].float()

    return raw


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["greedy", "t0.7-topk1", "t1-topp0.5"])
def test_model_alternatives_are_its_next_best_tokens(sampling):
    small = _first1()
    ctx = tiny_prompts(2)[1]
    d = ModelDrafter(small, tree=TreeShape.parse([[0], [1], [2], [0, 0], [0, 1], [1, 0], [1, 1], [0, 0, 0], [1, 0, 0]]))
    _setup(d, sampling, [ctx])
    (tree,) = d.propose([ctx])
    assert _check_ranked(tree, _model_raw(small, ctx), sampling.greedy) == 2 + 1 + 1


@pytest.mark.parametrize("sampling", SAMPLINGS[:2], ids=["greedy", "t0.7-topk1"])
def test_staged_tree_alternatives_are_the_levels_next_best_tokens(sampling):
    """At a staged level the spine comes from the lower stage; the alternatives, at spine
    nodes and below alternatives, are still this level's own next-best tokens."""
    small = _first1()
    ctx = tiny_prompts(2)[1]
    shape = TreeShape.parse([[0], [1], [2], [0, 0], [0, 1], [1, 0], [1, 1], [0, 0, 0], [0, 0, 1], [1, 0, 0]])
    d = ModelDrafter(small, lower=KatzNgramDrafter(128, k=2), tree=shape)
    _setup(d, sampling, [ctx])
    for _ in range(2):  # the second call starts from a cache holding the first call's nodes
        (tree,) = d.propose([ctx])
        assert len(tree) == shape.size
        assert _check_ranked(tree, _model_raw(small, ctx), sampling.greedy) == 2 + 1 + 1 + 1
        assert tree.drafted.get("ngram", 0) > 0


def test_dynamic_tree_ranks_by_the_drafts_preferences_and_grows_past_depth_2():
    """Budget 4, topk 4 used to stop at depth 2; a confident draft now goes deeper."""
    ctx = [7, 1, 2, 3, 4, 5, 6] * 4
    d = KatzNgramDrafter(128, tree=TreeShape.parse({"dynamic": {"budget": 4, "topk": 4, "depth": 6}}))
    _setup(d, SamplingConfig(0.0), [ctx])
    (tree,) = d.propose([ctx])
    assert tree.path_tokens(len(tree) - 1)[:3] == [7, 1, 2] and tree.depth() == 4
    # each node's children are its most probable tokens, best first
    for node in [-1] + list(range(len(tree))):
        kids = _children(tree, node)
        if kids:
            p = d.lms[0].distribution(ctx + (tree.path_tokens(node) if node >= 0 else []))
            top = torch.topk(p, len(kids)).values
            assert torch.allclose(p[[tree.tokens[c] for c in kids]], top)


def test_dynamic_tree_expands_every_row_in_one_forward_per_depth():
    small = _first1()
    shape = TreeShape.parse({"dynamic": {"budget": 10, "topk": 3, "depth": 4}})
    calls = {}
    for B in (1, 6):
        d = ModelDrafter(small, tree=shape)
        ctxs = tiny_prompts(6)[:B]
        _setup(d, SamplingConfig(0.0), ctxs)
        before = d.forward_stats()[1]
        trees = d.propose(ctxs)
        calls[B] = d.forward_stats()[1] - before
        assert all(len(t) == 10 for t in trees)
    assert calls[1] <= calls[6] <= shape.depth  # the root's forward, then one per depth for all rows


def test_dynamic_matches_a_row_by_row_reference():
    """The batched growth keeps what growing each row alone keeps (the kept set does not
    depend on the other rows)."""
    small = _first1()
    shape = DynamicShape(budget=7, topk=3, depth=4)
    ctxs = tiny_prompts(4)
    d = ModelDrafter(small, tree=shape)
    _setup(d, SamplingConfig(0.0), ctxs)
    together = d.propose(ctxs)
    for b, ctx in enumerate(ctxs):
        one = ModelDrafter(small, tree=shape)
        _setup(one, SamplingConfig(0.0), [ctx])
        (alone,) = one.propose([ctx])
        assert (alone.tokens, alone.parents) == (together[b].tokens, together[b].parents)


# ------------------------------------------------------------------ greedy exactness
def _staged(tree, k=4):
    target = tiny_target()
    return ModelDrafter(_first1(), k=k, lower=KatzNgramDrafter(target.vocab_size, k=2), tree=tree)


def _three_levels(tree, k=4):
    target = tiny_target()
    mid = ModelDrafter(
        other_small(target.vocab_size),
        k=2,
        lower=KatzNgramDrafter(target.vocab_size, k=2),
        name="other",
        tree=TreeShape.parse({"widths": [2, 1]}),
    )
    return ModelDrafter(_first1(), k=k, lower=mid, tree=tree)


MAKERS = {
    "ngram": lambda t: KatzNgramDrafter(tiny_target().vocab_size, k=4, tree=t),
    "small": lambda t: ModelDrafter(_first1(), k=4, tree=t),
    "ngram>small": _staged,
    "ngram>other(tree)>small": _three_levels,
}


CASES = [
    (kind, preset)
    for kind in MAKERS
    for preset in sorted(PRESETS)
    if kind != "ngram>other(tree)>small" or preset in ("medusa", "dynamic")  # the slowest: two presets suffice
]


@pytest.mark.parametrize("kind, preset", CASES)
def test_every_tree_preset_greedy_equals_hf(kind, preset):
    target = tiny_target()
    ref = [list(r) for r in hf_reference(5)]
    for batch in (1, 5):
        drafter = MAKERS[kind](TreeShape.parse(PRESETS[preset]))
        res = SpeculativeDecoder(target.model, drafter, SamplingConfig()).generate(tiny_prompts(5)[:batch], N_NEW)
        assert [s.output_ids for s in res.sequences] == ref[:batch], f"{kind} {preset} batch {batch}"
        if preset != "chain":
            assert res.summary()["tree_nodes_per_call"] > 1


@pytest.mark.parametrize("kind", ["small", "ngram>small"])
def test_tree_auto_greedy_equals_hf(kind, tmp_path):
    target = tiny_target()
    ref = [list(r) for r in hf_reference(5)]
    drafter = MAKERS[kind](SMALL_AUTO)
    choice = resolve_auto_tree(drafter, target, SamplingConfig(), HF_KERNELS, hierarchy_key=[kind], cache_dir=tmp_path)
    assert isinstance(drafter.tree, StaticShape) and drafter.tree.size <= SMALL_AUTO.max_nodes
    assert [list(p) for p in drafter.tree.paths] == choice.paths
    for batch in (1, 5):
        res = SpeculativeDecoder(target.model, drafter, SamplingConfig()).generate(tiny_prompts(5)[:batch], N_NEW)
        assert [s.output_ids for s in res.sequences] == ref[:batch]
    assert [list(p) for p in drafter.tree.paths] == choice.paths  # decoding leaves the chosen tree alone


# ------------------------------------------------------------------ sampling exactness
def _staged_peaked(tree):
    """A random lower model (the inner decoding accepts ~30% of its drafts, so spine tokens
    come both from it and from the level's own residual and bonus draws) under the
    sampling test's layer draft (the target's first layer)."""
    _, _, layers = peaked()
    lower = ModelDrafter(other_small(V, seed=1, init=0.1), k=2, name="random")
    return ModelDrafter(layers, lower=lower, tree=TreeShape.parse(tree))


STAGED_TREE = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [1, 0, 0]]
DYNAMIC = {"dynamic": {"budget": 6, "topk": 2, "depth": 4}}
T1 = SamplingConfig(temperature=1.0, seed=31)
T07P = SamplingConfig(temperature=0.7, top_p=0.9, seed=32)


@pytest.mark.parametrize(
    "factory,cfg",
    [
        (lambda: _staged_peaked(STAGED_TREE), T1),
        (lambda: _staged_peaked(STAGED_TREE), T07P),
        (lambda: ModelDrafter(peaked()[2], tree=TreeShape.parse(DYNAMIC)), T1),
        (lambda: ModelDrafter(peaked()[2], tree=TreeShape.parse(DYNAMIC)), T07P),
    ],
    ids=["staged-tree-t1", "staged-tree-t0.7-topp", "dynamic-t1", "dynamic-t0.7-topp"],
)
def test_trees_sample_the_target_at_positions_3_and_4(factory, cfg):
    """Chi-square (N = 6000, alpha = 1e-4) of the joint of the 3rd and 4th emitted tokens:
    trees of depth 3-4, so these come from accepted spine tokens, alternatives, residuals
    and bonus tokens alike."""
    stat, df = chi2(draw_positions_3_4(factory, cfg, 6000, batch=2000), exact_positions_3_4(cfg))
    assert stat < chi2_critical(df), f"chi2={stat:.1f} df={df} crit={chi2_critical(df):.1f}"


# ------------------------------------------------------------------ Sequoia's program
@functools.cache
def _exact_trees(size: int, d: int, depth: int, width: int) -> tuple:
    """Every prefix-ranked subtree of exactly ``size`` nodes (its root included) whose root
    sits at depth d, as paths below that root."""
    if size == 1:
        return ((),)
    if d == depth:
        return ()
    out = []
    for j in range(1, width + 1):
        for sizes in itertools.product(range(1, size), repeat=j):
            if sum(sizes) != size - 1:
                continue
            for parts in itertools.product(*[_exact_trees(s, d + 1, depth, width) for s in sizes]):
                out.append(tuple((r,) + p for r, part in enumerate(parts) for p in ((),) + part))
    return tuple(out)


def test_sequoia_program_matches_brute_force():
    rng = np.random.default_rng(0)
    for trial in range(3):
        acc = rng.uniform(0, 1, size=(3, 3))
        acc = acc / acc.sum(1, keepdims=True) * rng.uniform(0.5, 0.95, size=(3, 1))
        acc = -np.sort(-acc, axis=1)
        value, paths = best_trees(acc, 6, 3)
        for n in range(2, 8):
            brute = max(_value(acc, t) for t in _exact_trees(n, 0, 3, 3))
            assert value[n] == pytest.approx(brute), (trial, n)
            got = paths(n)
            assert len(got) == n - 1 and _value(acc, got) == pytest.approx(value[n])
            TreeShape.parse([list(p) for p in got])  # a valid path list


def _value(acc, paths) -> float:
    reach = {(): 1.0}
    for p in sorted(paths, key=len):
        reach[p] = reach[p[:-1]] * acc[len(p) - 1, p[-1]]
    return sum(reach.values())


def test_program_prefers_a_chain_when_alternatives_never_win():
    acc = np.zeros((6, 3))
    acc[:, 0] = 0.8
    value, paths = best_trees(acc, 6, 6)
    assert sorted(paths(7)) == [(0,) * d for d in range(1, 7)]
    assert value[7] == pytest.approx(sum(0.8**d for d in range(7)))


def test_acceptance_matrix_smooths_towards_the_all_depth_rate():
    a = acceptance_matrix([[50, 10], [0, 0]], [100, 0])
    assert a[0].tolist() == pytest.approx([(50 + 8 * 0.5) / 108, (10 + 8 * 0.1) / 108])
    assert a[1].tolist() == pytest.approx([0.5, 0.1])  # no data at depth 2: the pooled rate


def test_recorder_reads_the_accepted_rank_per_depth():
    tree = DraftTree()
    a = tree.add(10, -1, None, "x", 0)
    alt = tree.add(11, -1, None, "x", 1)
    b = tree.add(20, a, None, "x", 0)
    tree.add(21, a, None, "x", 1)
    tree.add(30, b, None, "x", 0)
    tree.add(40, alt, None, "x", 0)  # below an alternative: not what the calibration measures

    class Inner:
        name, wants_features = "x", False

    rec = RankRecorder(Inner(), depth=3, width=2)
    rec.observe(tree, [10, 21, 99])  # rank 0 at depth 1, rank 1 at depth 2
    rec.observe(tree, [11, 40, 5])  # rank 1 at depth 1: off the chain, nothing deeper
    rec.observe(tree, [10, 20, 30, 7])  # the whole chain, then the bonus (no children left)
    rec.observe(tree, [42])  # nothing accepted
    rec.observe(tree, [10])  # cut by the length limit: depth 2 not observed
    assert rec.reached == [5, 2, 1]
    assert rec.counts == [[3, 1], [1, 1], [1, 0]]


def test_choice_predicts_tokens_per_call_by_hand():
    """Sampling (no rank traces): positional acceptance 0.6 for rank 0 and 0.2 for rank 1 at
    both depths, every tree costing the same. Of the trees of at most 3 nodes and depth 2,
    {0, 1, 0-0} yields 1 + 0.6 + 0.2 + 0.6^2 = 2.16 tokens per call (a chain with a sibling
    at depth 2, {0, 0-0, 0-1}: 1 + 0.6 + 0.36 + 0.12 = 2.08); the calibration tree {0, 1,
    0-0, 0-1} would yield 2.28."""
    cal = Calibration(
        key={},
        widths=[2, 2],
        accept_counts=[[60, 20], [60, 20]],
        reached=[100, 100],
        verify_ms={"1": 10.0, "5": 10.0},
        draft_fit_ms=[0.0, 0.0, 0.0],
        draft_points=[],
        rest_ms=0.0,
        process_ms={"1": 0.0},
        calib_tokens_per_call=0.0,
        rounds=0,
        seconds=0.0,
    )
    c = choose(cal, AutoShape(max_nodes=3, widths=(2, 2)))
    assert sorted(map(tuple, c.paths)) == [(0,), (0, 0), (1,)]
    assert c.predicted_tokens_per_call == pytest.approx(2.16)
    assert c.predicted_ms_per_call == pytest.approx(10.0)
    assert c.predicted_calib_tokens_per_call == pytest.approx(2.28)
    assert np.asarray(c.accept) == pytest.approx(np.array([[0.6, 0.2], [0.6, 0.2]]))


def test_tree_auto_calibrates_once_and_caches(tmp_path):
    target = tiny_target()
    drafter = ModelDrafter(_first1(), tree=SMALL_AUTO)
    sampling = SamplingConfig(0.0)
    first = resolve_auto_tree(drafter, target, sampling, hierarchy_key=["small"], cache_dir=tmp_path)
    files = list((tmp_path / "trees").glob("*.json"))
    assert len(files) == 1 and not first.cache_hit
    cal = json.loads(files[0].read_text())
    assert {"threads", "dtype", "device", "hierarchy", "temperature", "plan"} <= set(cal["key"])
    assert sum(cal["reached"]) > 0 and len(cal["verify_ms"]) >= SMALL_AUTO.max_nodes + 1
    # greedy: the prediction is the chosen tree replayed on the calibration's rank traces
    assert first.predicted_tokens_per_call == pytest.approx(
        replay([tuple(p) for p in first.paths], cal["rank_traces"])[0]
    )
    assert first.params()["tree_auto.paths"].startswith("[[0]")
    assert "tree_auto.predicted_tokens_per_call" in first.metrics()
    # a new process (a new drafter) with the same setting reads the cache
    again = ModelDrafter(_first1(), tree=SMALL_AUTO)
    second = resolve_auto_tree(again, target, sampling, hierarchy_key=["small"], cache_dir=tmp_path)
    assert second.cache_hit and second.paths == first.paths
    assert [list(p) for p in again.tree.paths] == first.paths
    # another temperature is another calibration
    again2 = ModelDrafter(_first1(), tree=SMALL_AUTO)
    assert not resolve_auto_tree(
        again2, target, SamplingConfig(1.0), hierarchy_key=["small"], cache_dir=tmp_path
    ).cache_hit
    assert len(list((tmp_path / "trees").glob("*.json"))) == 2
    # a resolved tree is a fixed shape: resolving again changes nothing
    assert resolve_auto_tree(again2, target, sampling, hierarchy_key=["small"], cache_dir=tmp_path) is None
    # the choice is redone from the measurement, e.g. under a smaller node budget
    smaller = choose(first.calibration, AutoShape(max_nodes=3, widths=SMALL_AUTO.widths))
    assert len(smaller.paths) <= 3


def test_unresolved_tree_auto_is_refused_at_setup():
    """The engine never measures nor chooses: a drafter whose tree=auto was not resolved
    before decoding is refused, in one line naming the function that resolves it."""
    d = ModelDrafter(_first1(), tree=AutoShape())
    with pytest.raises(ValueError, match=r"tree=auto is unresolved.*tuning\.auto_tree\.resolve_auto_tree") as e:
        d.setup(SamplingConfig(0.0), None)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="tree=auto is unresolved"):
        SpeculativeDecoder(tiny_target().model, d, SamplingConfig()).generate([[1, 2, 3]], 2)
    assert not hasattr(d, "auto")


def test_auto_parses_and_is_refused_below_the_top_level():
    from stagedspec.drafters.hierarchy import ModelLevel, NgramLevel, validate_levels

    assert TreeShape.parse("auto") == AutoShape()
    assert TreeShape.parse({"auto": {"max_nodes": 12, "widths": [4, 2]}}) == AutoShape(max_nodes=12, widths=(4, 2))
    with pytest.raises(ValueError, match="unknown keys"):
        TreeShape.parse({"auto": {"nodes": 3}})
    with pytest.raises(ValueError, match="widths"):
        TreeShape.parse({"auto": {"widths": [0]}})
    validate_levels([NgramLevel(k=2), ModelLevel(tree={"widths": [2, 2]})])  # a tree at a staged level
    validate_levels([NgramLevel(k=2), ModelLevel(tree="auto")])
    with pytest.raises(ValueError, match="tree=auto"):
        validate_levels([NgramLevel(k=2, tree="auto"), ModelLevel()])


def test_isotonic_cost_curve():
    from stagedspec.tuning.tree_calibration import isotonic

    assert isotonic([1, 3, 2, 4, 10, 5, 6]) == pytest.approx([1, 2.5, 2.5, 4, 7, 7, 7])
    assert isotonic([3, 2, 1]) == pytest.approx([2, 2, 2])


def test_calibration_prompts_miss_the_first_questions_of_each_category(tmp_path, monkeypatch):
    import json

    from stagedspec.prompts import prompt_sets as data
    from stagedspec.tuning.tree_calibration import calibration_prompts
    from stagedspec.models.chat_text import encode_prompt

    class Tok:  # a tokenizer without a chat template: one id per character is enough to compare
        chat_template = None

        def __call__(self, text, **kw):
            return {"input_ids": [ord(c) % 128 for c in text]}

    class Target:
        tokenizer, vocab_size = Tok(), 128

    if not data.default_data_path().is_file():  # a bare clone: four questions in each of four categories
        path = tmp_path / "q.jsonl"
        path.write_text(
            "".join(
                json.dumps(
                    {"question_id": 10 * c + i, "category": f"cat{c}", "turns": [f"Question {i} of category {c}?"]}
                )
                + "\n"
                for c in range(4)
                for i in range(4)
            )
        )
        monkeypatch.setenv(data.DATA_ENV, str(path))
    qs = data.load_questions(data.default_data_path())
    first = {tuple(encode_prompt(Tok(), q.turns[:1])) for q in data.balanced(qs, 2)}
    got = calibration_prompts(Target(), 6, "data")
    assert len(got) == 6 and not first & {tuple(p) for p in got}
    assert len({tuple(p) for p in got}) == 6


def test_replay_of_rank_traces():
    from stagedspec.engine.tree import chain
    from stagedspec.tuning.tree_program import replay

    trace = [[0, 0, 1, -1, 0]]
    tpc, acc, offered = replay(chain(2), trace)  # rounds: [0 0] + bonus, reject, [0] then the end
    assert tpc == pytest.approx(5 / 3) and acc == [[2], [1]] and offered == [[3], [1]]
    assert replay([(0,), (1,)], trace)[0] == pytest.approx(5 / 3)
    assert replay([(0,), (0, 0), (0, 1)], [[0, 1, 0, 0, 1]])[0] == pytest.approx(5 / 2)


def test_build_hierarchy_leaves_tree_auto_to_be_resolved_keyed_without_the_top_levels_k(tmp_path, monkeypatch):
    """build_hierarchy injects nothing: the top level keeps its AutoShape request until the
    assembly resolves it, cached in the target's cache under the hierarchy's key."""
    from stagedspec.drafters.hierarchy import ModelLevel, NgramLevel, build_hierarchy, hierarchy_key
    from stagedspec.models.model_loading import ModelSpec

    monkeypatch.setenv("STAGEDSPEC_CACHE", str(tmp_path))
    target = tiny_target()
    first1 = ModelSpec(source="truncated", layers=1)
    levels = [
        NgramLevel(k=2),
        ModelLevel(
            model=first1,
            k=3,
            tree={"auto": {"max_nodes": 6, "widths": [2, 2], "prompts": 1, "tokens": 8, "repeats": 1}},
        ),
    ]
    drafter = build_hierarchy(levels, target, loader=None)
    assert isinstance(drafter.tree, AutoShape) and not hasattr(drafter, "auto")
    assert hierarchy_key(levels) == hierarchy_key([levels[0], ModelLevel(model=first1, k=7, tree="auto")])
    assert hierarchy_key(levels) != hierarchy_key([NgramLevel(k=3), levels[1]])
    choice = resolve_auto_tree(drafter, target, SamplingConfig(0.0), hierarchy_key=hierarchy_key(levels))
    assert isinstance(drafter.tree, StaticShape) and choice.paths == [list(p) for p in drafter.tree.paths]
    assert choice.cache_file is not None and Path(choice.cache_file).is_file()
    assert resolve_auto_tree(None, target, SamplingConfig(0.0)) is None


def test_feature_draft_tree_auto_greedy_equals_hf(tmp_path):
    from stagedspec.drafters.feature import FeatureDrafter

    target = tiny_target()
    drafter = FeatureDrafter(trained_drafts()[0], tree=SMALL_AUTO)
    resolve_auto_tree(drafter, target, SamplingConfig(), hierarchy_key=["feature"], cache_dir=tmp_path)
    assert isinstance(drafter.tree, StaticShape)
    ref = [list(r) for r in hf_reference(5)]
    for batch in (1, 5):
        res = SpeculativeDecoder(target.model, drafter, SamplingConfig()).generate(tiny_prompts(5)[:batch], N_NEW)
        assert [s.output_ids for s in res.sequences] == ref[:batch]


class _Recording(ModelDrafter):
    """Keeps every tree it proposes."""

    def propose(self, contexts, features=None):
        trees = super().propose(contexts, features)
        self.seen = getattr(self, "seen", []) + trees
        return trees


def test_dynamic_tree_at_a_staged_level_credits_only_the_spine_to_the_lower_level():
    """A dynamic tree is pruned to its budget and renumbered after growing: provenance must
    be read from the pruned tree, so a node credited to the n-gram lies on the rank-0 path
    (the spine the inner decoding made), never on a runner-up branch. Peaked models, so
    deep nodes outscore shallow runners-up and pruning renumbers the tree (with the cache
    of pre-pruning node ids this credited 4 runner-up nodes here)."""
    target, _, layers = peaked()
    drafter = _Recording(
        layers,
        tree=TreeShape.parse({"dynamic": {"budget": 4, "topk": 3, "depth": 4}}),
        lower=KatzNgramDrafter(V, k=3, order=2),
    )
    prompts = [[1, 5, 2, 5, 2], [3, 1, 4, 1, 5], [2, 7, 1, 0, 2], [6, 6, 0, 3, 1]]
    SpeculativeDecoder(target.model, drafter, SamplingConfig()).generate(prompts, 24)
    credited = 0
    for tree in drafter.seen:
        for n in range(len(tree)):
            if tree.origin[n] == "ngram":
                credited += 1
                path, m = [], n
                while m >= 0:
                    path.append(tree.rank[m])
                    m = tree.parents[m]
                assert set(path) == {0}, f"node {n} (ranks {path[::-1]}) credited to the n-gram off the spine"
    assert credited > 0
