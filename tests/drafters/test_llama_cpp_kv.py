"""The llama.cpp target cache (``engine/llama_cpp_kv.py``): rows and trees as sequence ids.

On a fresh clone (no llama.cpp) against a fake of the few llama.cpp calls it makes, which keeps
cells with positions and sequence sets, masks a token by its first sequence id as llama.cpp
does (``llama-kv-cache.cpp``: a cell is seen when it holds that id at a position up to the
token's), enforces llama.cpp's batch rules (positions consecutive after the sequence's last
cached one, never decreasing within the batch) and computes logits from what a token sees.
The fake refuses any view that is not one cell per position 0..pos, so a wrong mask fails
loudly instead of drifting. With llama.cpp installed, the same decoding runs on the embedded
SmolLM2 GGUF too (skipped without it: an optional backend).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from stagedspec.drafters import KatzNgramDrafter, PromptLookupDrafter
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.llama_cpp_kv import LlamaCppKV
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import DraftTree, TreeShape

V = 64
EOS = 63


def next_token(seen: list[int]) -> int:
    """The fake model: mostly copies the token 5 back, shifted when the sum is a multiple of 3."""
    if len(seen) < 5:
        return (7 * len(seen) + 3) % 60
    return (seen[-5] + (sum(seen) % 3 == 0)) % 60 if sum(seen) % 11 else EOS


def fake_logits(seen: list[int]) -> np.ndarray:
    nxt = next_token(seen)
    return (-0.5 * np.abs(np.arange(V) - nxt) + 0.01 * (len(seen) % 7)).astype(np.float32)


class _Batch:
    def __init__(self, n: int, n_seq: int) -> None:
        self.token = [0] * n
        self.pos = [0] * n
        self.n_seq_id = [0] * n
        self.seq_id = [[0] * n_seq for _ in range(n)]
        self.logits = [0] * n
        self.n_tokens = 0


class FakeLlama:
    """The llama.cpp calls LlamaCppKV makes, over one unified cache of cells."""

    def __init__(self) -> None:
        self.cells: list[dict] = []  # {"pos", "tok", "seqs"}
        self.out = None
        self.decodes = 0

    # --- the bindings LlamaCppKV calls
    def llama_batch_init(self, n, embd, n_seq):
        return _Batch(n, n_seq)

    def llama_batch_free(self, batch):
        pass

    def llama_get_memory(self, ctx):
        return "mem"

    def llama_memory_clear(self, mem, data):
        self.cells = []

    def llama_memory_seq_rm(self, mem, seq, p0, p1):
        p0 = 0 if p0 < 0 else p0
        p1 = float("inf") if p1 < 0 else p1
        for c in self.cells:
            if p0 <= c["pos"] < p1:
                c["seqs"].discard(seq)
        self.cells = [c for c in self.cells if c["seqs"]]
        return True

    def llama_memory_seq_cp(self, mem, src, dst, p0, p1):
        p0 = 0 if p0 < 0 else p0
        p1 = float("inf") if p1 < 0 else p1
        for c in self.cells:
            if p0 <= c["pos"] < p1 and src in c["seqs"]:
                c["seqs"].add(dst)

    def seq_pos_max(self, s: int) -> int:
        return max((c["pos"] for c in self.cells if s in c["seqs"]), default=-1)

    def llama_decode(self, ctx, batch):
        n = batch.n_tokens
        toks = [
            {"pos": batch.pos[i], "tok": batch.token[i], "seqs": [batch.seq_id[i][k] for k in range(batch.n_seq_id[i])]}
            for i in range(n)
        ]
        last: dict[int, int] = {}
        for t in toks:  # llama.cpp's batch rules (llama-batch.cpp)
            for s in t["seqs"]:
                if s in last:
                    assert t["pos"] >= last[s], f"sequence {s} positions decreasing"
                elif self.seq_pos_max(s) >= 0:
                    assert t["pos"] == self.seq_pos_max(s) + 1, f"sequence {s} does not continue its cache"
                last[s] = t["pos"]
        new = [{"pos": t["pos"], "tok": t["tok"], "seqs": set(t["seqs"])} for t in toks]
        self.cells.extend(new)
        rows = []
        for i, t in enumerate(toks):
            s0 = t["seqs"][0]
            seen = sorted((c["pos"], c["tok"]) for c in self.cells if s0 in c["seqs"] and c["pos"] <= t["pos"])
            assert [p for p, _ in seen] == list(range(t["pos"] + 1)), f"token {i} sees positions {[p for p, _ in seen]}"
            if batch.logits[i]:
                rows.append(fake_logits([tok for _, tok in seen]))
        self.out = np.ascontiguousarray(np.stack(rows) if rows else np.zeros((0, V), np.float32))
        self.decodes += 1
        return 0

    def llama_get_logits(self, ctx):
        return self.out.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


class FakeHandle:
    def __init__(self, n_seq_max: int = 32) -> None:
        self.lib = FakeLlama()
        self.ctx = "ctx"
        self.n_vocab = V
        self.vocab_size = V
        self.n_batch = 512
        self.n_seq_max = n_seq_max


class _Config:
    max_position_embeddings = 4096


class _TargetStub(torch.nn.Module):
    config = _Config()


def reference(prompt: list[int], n: int) -> list[int]:
    out, ctx = [], list(prompt)
    while len(out) < n:
        t = next_token(ctx)
        out.append(t)
        ctx.append(t)
        if t == EOS:
            break
    return out


PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3], [5, 9, 5, 9, 5, 9, 5], [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]]


def decode(drafter, prompts, n=40, handle=None, temperature=0.0):
    handle = handle or FakeHandle()
    kv = LlamaCppKV(handle)
    dec = SpeculativeDecoder(
        _TargetStub(), drafter, SamplingConfig(temperature=temperature, seed=3), eos_token_ids=[EOS], kv=kv
    )
    return dec.generate(prompts, n), kv, handle


@pytest.mark.parametrize(
    "make",
    [
        lambda: None,
        lambda: PromptLookupDrafter(k=6),
        lambda: PromptLookupDrafter(k=6, max_candidates=3),  # token tries: trees with several leaves
        lambda: KatzNgramDrafter(V, k=4, tree=TreeShape.parse({"widths": [3, 2, 1, 1]})),
    ],
    ids=["plain", "lookup-chain", "lookup-tree", "ngram-tree"],
)
def test_greedy_outputs_equal_the_model_run_token_by_token(make):
    res, kv, handle = decode(make(), PROMPTS)
    for p, seq in zip(PROMPTS, res.sequences):
        assert seq.output_ids == reference(p, 40)
    assert res.target_calls < sum(len(s.output_ids) for s in res.sequences) or make() is None


def test_trees_are_scored_and_nothing_leaks():
    """Several leaves per round (extra sequence ids taken and given back), rows that end at
    different rounds (keep_rows): afterwards only committed cells remain, one sequence each."""
    drafter = PromptLookupDrafter(k=6, max_candidates=3)
    res, kv, handle = decode(drafter, PROMPTS, n=40)
    widths = [pt.width for pt in res.phase_times]
    assert max(widths) > 7  # tail + a tree wider than a chain of 6
    assert sorted(kv.free) == list(range(kv.batch_size, handle.n_seq_max)) or kv.batch_size == 0
    for c in handle.lib.cells:
        assert len(c["seqs"]) == 1 and min(c["seqs"]) < len(PROMPTS)


def test_a_round_whose_tree_is_rejected_at_the_first_node_keeps_only_the_tail():
    kv = LlamaCppKV(FakeHandle())
    kv.reset(1)
    ctx = [1, 2, 3, 4, 5, 6]
    kv.extend_chain(kv.sync([ctx[:-1]]), want_last=False)
    tree = DraftTree(tokens=[40, 41, 42, 43], parents=[-1, 0, -1, 2], q=[None] * 4, origin=["x"] * 4, rank=[0, 0, 1, 0])
    logits = kv.extend_trees(kv.sync([ctx], min_tail=1), [tree])[0]
    assert logits.shape == (5, V)
    assert int(logits[0].argmax()) == next_token(ctx)
    assert int(logits[3].argmax()) == next_token(ctx + [42])  # the second branch sees its own parent only
    assert int(logits[4].argmax()) == next_token(ctx + [42, 43])
    new = ctx + [next_token(ctx)]
    assert kv.sync([new], min_tail=1) == [[new[-1]]]
    assert kv.tokens[0] == ctx
    assert sorted(c["pos"] for c in kv.h.lib.cells) == list(range(len(ctx)))


def test_an_accepted_branch_off_the_spine_is_moved_into_the_row_sequence():
    kv = LlamaCppKV(FakeHandle())
    kv.reset(1)
    ctx = [9, 8, 7, 6, 5]
    kv.extend_chain(kv.sync([ctx[:-1]]), want_last=False)
    tree = DraftTree(tokens=[30, 31, 32, 33], parents=[-1, 0, -1, 2], q=[None] * 4, origin=["x"] * 4, rank=[0, 0, 1, 0])
    kv.extend_trees(kv.sync([ctx], min_tail=1), [tree])
    new = ctx + [32, 33, 1]  # the second branch accepted, then the target's own token
    assert kv.sync([new], min_tail=1) == [[1]]
    assert kv.tokens[0] == ctx + [32, 33]
    cells = sorted((c["pos"], c["tok"], tuple(c["seqs"])) for c in kv.h.lib.cells)
    assert cells == [(i, t, (0,)) for i, t in enumerate(ctx + [32, 33])]


def test_sampled_decoding_runs_and_stays_within_the_vocabulary():
    res, _, _ = decode(PromptLookupDrafter(k=4, max_candidates=2), PROMPTS, n=30, temperature=0.8)
    for seq in res.sequences:
        assert seq.output_ids and all(0 <= t < V for t in seq.output_ids)


def test_too_many_leaves_for_the_context_is_one_clear_error():
    kv = LlamaCppKV(FakeHandle(n_seq_max=3))
    kv.reset(1)
    kv.extend_chain(kv.sync([[1, 2]]), want_last=False)
    wide = DraftTree(tokens=[4, 5, 6, 7], parents=[-1, -1, -1, -1], q=[None] * 4, origin=["x"] * 4, rank=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="more sequences than the llama.cpp context has \\(3\\)"):
        kv.extend_trees(kv.sync([[1, 2, 3]], min_tail=1), [wide])


# ------------------------------------------------------------- on llama.cpp itself (optional)
def _real_handle():
    from stagedspec.models import llama_cpp_model
    from stagedspec.models.model_loading import ModelSpec

    if not llama_cpp_model.available():
        pytest.skip("llama.cpp bindings not installed (optional backend: docs/llama-cpp.md)")
    spec = ModelSpec(source="embedded", embedded="smollm2-135m")
    return llama_cpp_model.load_llama_cpp(llama_cpp_model.gguf_path(spec), threads=torch.get_num_threads())


def test_on_llama_cpp_speculative_greedy_equals_plain_up_to_near_ties():
    """Greedy speculative (chains and tries) against plain decoding, both on llama.cpp: equal, or
    apart first where plain's own top two logits nearly tie (ggml's rounding moves with the rows
    a forward carries, as bf16's does on torch); a broken mask or commit leaves wide gaps."""
    handle = _real_handle()
    try:
        kv = LlamaCppKV(handle)
        stub = _TargetStub()
        prompts = [[1, 504, 3458, 282, 253, 1789, 30, 504, 3458, 282], [1, 2, 3, 4, 5]]
        plain = [
            s.output_ids
            for s in SpeculativeDecoder(stub, None, SamplingConfig(), kv=kv).generate(prompts, 32).sequences
        ]
        same = 0
        for drafter in (PromptLookupDrafter(k=6), PromptLookupDrafter(k=6, max_candidates=3)):
            res = SpeculativeDecoder(stub, drafter, SamplingConfig(), kv=kv).generate(prompts, 32)
            assert res.target_calls < sum(len(s.output_ids) for s in res.sequences)
            for p, ref, seq in zip(prompts, plain, res.sequences):
                out = seq.output_ids
                i = next((j for j in range(min(len(ref), len(out))) if ref[j] != out[j]), None)
                if i is None:
                    same += 1
                    continue
                kv.reset(1)  # plain's own logits where the two first differ, through one row
                ctx = p + ref[:i]
                kv.extend_chain(kv.sync([ctx[:-1]]), want_last=False)
                logits = kv.extend_chain(kv.sync([ctx], min_tail=1))[0][0]
                gap = float(logits[ref[i]] - logits[out[i]])
                assert 0 <= gap < 0.1, (i, gap)
        assert same >= 2
    finally:
        handle.close()
