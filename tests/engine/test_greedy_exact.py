"""Greedy speculative decoding must equal HF greedy ``generate`` token for token."""

from __future__ import annotations

import pytest
import torch

from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.kv_cache import KVModel
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import TreeShape, chain
from tests.helpers import hierarchy, tiny_target
from tests.oracles import N_NEW, hf_greedy, hf_reference, tiny_prompts

KINDS = [
    "ngram",
    "lookup",
    "small",
    "other",
    "ngram>small",
    "lookup>small",
    "ngram>other>small",
    "copy>ngram>small",
    "copy>small",
    "copy1-miss>ngram>small",
]


@pytest.mark.parametrize("kind", KINDS)
def test_chain_greedy_equals_hf_for_draft_lengths_1_to_8(kind):
    target = tiny_target()
    ref = [list(r) for r in hf_reference(3)]
    accepted_any = False
    for k in range(1, 9):
        dec = SpeculativeDecoder(target.model, hierarchy(kind, target, k), SamplingConfig())
        res = dec.generate(tiny_prompts(3), N_NEW)
        assert [s.output_ids for s in res.sequences] == ref, f"{kind} k={k}"
        s = res.summary()
        accepted_any |= s["acceptance_rate"] > 0
        # every round both accepted and emitted consistently
        for seq in res.sequences:
            assert sum(r.emitted for r in seq.rounds) == N_NEW
    if kind != "other":
        assert accepted_any, f"{kind}: no draft was ever accepted, so nothing was tested"


def test_plain_baseline_equals_hf():
    target = tiny_target()
    res = SpeculativeDecoder(target.model, None, SamplingConfig()).generate(tiny_prompts(3), N_NEW)
    assert [s.output_ids for s in res.sequences] == [list(r) for r in hf_reference(3)]
    assert res.summary()["mean_accepted_tokens_per_call"] == 1.0


TREES = [
    [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]],
    {"widths": [2, 2, 1]},
    {"widths": [3, 1, 1, 1]},
    {"dynamic": {"budget": 10, "topk": 3, "depth": 5}},
]


@pytest.mark.parametrize("tree", TREES, ids=["paths", "w221", "w3111", "dynamic"])
@pytest.mark.parametrize("kind", ["ngram", "small"])
def test_tree_greedy_equals_hf(kind, tree):
    target = tiny_target()
    dec = SpeculativeDecoder(target.model, hierarchy(kind, target, 4, tree=TreeShape.parse(tree)), SamplingConfig())
    res = dec.generate(tiny_prompts(3), N_NEW)
    assert [s.output_ids for s in res.sequences] == [list(r) for r in hf_reference(3)]
    assert res.summary()["tree_nodes_per_call"] > 1


@pytest.mark.parametrize("batch", [1, 2, 5, 8])
@pytest.mark.parametrize(
    "kind,tree",
    [
        ("ar", None),
        ("ngram>small", None),
        ("copy>ngram>small", None),
        ("small", {"widths": [2, 2, 1]}),
        ("ngram", None),
    ],
)
def test_batch_rows_equal_decoding_alone(batch, kind, tree):
    """Rows of different prompt lengths accept different numbers of tokens each round."""
    target = tiny_target()
    prompts = tiny_prompts(8)[:batch]
    ref = [list(r) for r in hf_reference(8)][:batch]
    dec = SpeculativeDecoder(target.model, hierarchy(kind, target, 3, tree=TreeShape.parse(tree)), SamplingConfig())
    res = dec.generate(prompts, N_NEW)
    assert [s.output_ids for s in res.sequences] == ref
    alone = [dec.generate([p], N_NEW).sequences[0].output_ids for p in prompts[:2]]
    assert alone == ref[:2]
    if batch > 1 and kind != "ar":
        depths = {tuple(r.accepted_depth for r in s.rounds[:5]) for s in res.sequences}
        assert len(depths) > 1, "rows never advanced by different amounts: ragged acceptance untested"


def test_eos_and_length_stop_per_row():
    target = tiny_target()
    prompts = tiny_prompts(4)
    ref = [list(r) for r in hf_reference(4)]
    eos = ref[1][5]  # row 1 must stop right after its 6th token
    dec = SpeculativeDecoder(target.model, hierarchy("ngram", target, 4), SamplingConfig(), eos_token_ids=[eos])
    res = dec.generate(prompts, N_NEW)
    for s, r in zip(res.sequences, ref):
        cut = r.index(eos) + 1 if eos in r else len(r)
        assert s.output_ids == r[:cut]
        assert s.finished_reason == ("eos" if eos in r else "length")
    assert len(res.sequences[1].output_ids) <= 6


@pytest.mark.parametrize(
    "shape",
    [
        chain(5),
        TreeShape.parse({"widths": [2, 2, 1]}),
        TreeShape.parse([[0], [1], [2], [0, 0], [1, 0], [0, 0, 0], [0, 0, 1]]),
    ],
)
def test_tree_logits_equal_each_path_run_as_a_sequence(shape):
    """Every node's logits from one tree forward equal its path's logits as a plain sequence."""
    target = tiny_target()
    kv = KVModel(target.model)
    kv.reset(2)
    ctxs = [[5, 9, 3, 7, 7, 1], [4, 2]]
    kv.extend_chain(kv.sync([c[:-1] for c in ctxs]), want_last=False)
    tails = kv.sync(ctxs, min_tail=1)
    g = torch.Generator().manual_seed(0)
    nodes = list(shape.paths)
    toks = [torch.randint(0, 128, (len(nodes),), generator=g).tolist() for _ in ctxs]
    index = {p: i for i, p in enumerate(nodes)}
    parents = [index[p[:-1]] if len(p) > 1 else -1 for p in nodes]
    feed = [t + tk for t, tk in zip(tails, toks)]
    pars = [[-1] + [0 if q < 0 else 1 + q for q in parents] for _ in ctxs]
    logits = kv.extend(feed, pars, [list(range(1 + len(nodes)))] * 2)
    for b, ctx in enumerate(ctxs):
        for i, p in enumerate(nodes):
            path = [toks[b][index[p[:d]]] for d in range(1, len(p) + 1)]
            with torch.no_grad():
                ref = target.model(torch.tensor([ctx + path])).logits[0, -1]
            torch.testing.assert_close(logits[b][i + 1], ref, atol=1e-5, rtol=1e-5)


def test_kv_rollback_many_rounds_long_output():
    """A mostly-rejected drafter over 300 tokens: hundreds of rollbacks, still exact."""
    target = tiny_target()
    prompt = tiny_prompts(2)[1]
    n = 300
    ref = hf_greedy(target.model, prompt, n)
    dec = SpeculativeDecoder(target.model, hierarchy("ngram>other>small", target, 6), SamplingConfig())
    res = dec.generate([prompt], n)
    seq = res.sequences[0]
    assert seq.output_ids == ref
    rejected_rounds = sum(1 for r in seq.rounds if r.accepted_depth < r.tree_nodes)
    assert rejected_rounds > 50
