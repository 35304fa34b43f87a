"""The target's cache and forward on llama.cpp (ggml's kernels over the GGUF's own blocks).

``LlamaCppKV`` answers the calls ``SpeculativeDecoder`` makes of its target cache (``reset``,
``sync``, ``extend_chain``, ``extend_trees``, ``keep_rows``) with one ``llama_decode`` per
call over one llama.cpp context whose KV cache is shared by every sequence (``kv_unified``).
It needs a handle with the bindings and the context (``models/llama_cpp_model.py`` loads it);
the engine imports nothing of llama.cpp itself.

Rows and trees as sequence ids. Row b's committed tokens are the cells of its base sequence.
A round's tail and tree go in one batch; each leaf of the tree gets a sequence (the first
leaf, the drafter's own spine, is the base sequence itself; the others are copies of it made
by ``llama_memory_seq_cp``, which only adds the id to the prefix cells), and each node
carries the ids of the leaves below it. llama.cpp masks a token by its first sequence id:
cells holding that id at a position up to the token's own, which are exactly the committed
prefix, the node's ancestors and itself: tree attention. ``sync`` then keeps the accepted
path in the base sequence (``seq_rm`` past the spine's agreeing prefix, ``seq_cp`` of the
rest from the accepted leaf's sequence) and drops the other leaves' ids, which frees every
cell no sequence holds. A chain (plain decoding, a chain draft) needs no copy at all.

Logits are the context's float32 output rows, copied once per call. What the target
computes: llama.cpp's forward over the GGUF's quantized blocks (Q4_K, Q6_K ... with its own
activation quantization), so its logits differ from Hugging Face's bf16 forward, and between
row counts by ggml's own rounding; speculative decoding is exact against plain decoding on
this same backend up to that rounding (tests: ``tests/drafters/test_llama_cpp_kv.py``).
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import numpy as np
import torch

from .tree import DraftTree


class LlamaCppKV:
    """The target cache of ``SpeculativeDecoder`` on a llama.cpp context (see the module)."""

    def __init__(self, handle: Any, name: str = "target") -> None:
        self.h = handle
        self.lib = handle.lib
        self.name = name
        self.vocab_size = int(handle.vocab_size)
        self.forward_time = 0.0
        self.forward_calls = 0
        self._batch = self.lib.llama_batch_init(handle.n_batch, 0, handle.n_seq_max)
        self._mem = self.lib.llama_get_memory(handle.ctx)
        self.reset(0)

    def close(self) -> None:
        if self._batch is not None:
            self.lib.llama_batch_free(self._batch)
            self._batch = None

    # ------------------------------------------------------------------ state
    def reset(self, batch_size: int) -> None:
        if batch_size > self.h.n_seq_max:
            raise ValueError(f"batch size {batch_size} is over the llama.cpp context's {self.h.n_seq_max} sequences")
        self.lib.llama_memory_clear(self._mem, True)
        self.base = list(range(batch_size))
        """Row -> its base sequence id (the committed tokens' cells)."""
        self.free = list(range(self.h.n_seq_max - 1, batch_size - 1, -1))
        """Sequence ids a tree's extra leaves may take."""
        self.tokens: list[list[int]] = [[] for _ in range(batch_size)]
        self._pending: list[_Pending | None] = [None] * batch_size

    @property
    def batch_size(self) -> int:
        return len(self.tokens)

    @property
    def n_pending(self) -> int:
        return 0  # every extend is followed by a sync before the next one (the target's use)

    def keep_rows(self, rows: list[int]) -> None:
        """Drop finished rows: their sequences' cells are freed."""
        for r in range(self.batch_size):
            if r not in rows:
                self._drop_pending(r)
                self.lib.llama_memory_seq_rm(self._mem, self.base[r], -1, -1)
                self.free.append(self.base[r])
        self.base = [self.base[r] for r in rows]
        self.tokens = [self.tokens[r] for r in rows]
        self._pending = [self._pending[r] for r in rows]

    # ------------------------------------------------------------------- sync
    def sync(self, contexts: list[list[int]], min_tail: int = 0) -> list[list[int]]:
        """Commit each row's pending path that its context now spells, roll back what the
        context no longer has (and ``min_tail`` more), return each row's uncached tail."""
        assert len(contexts) == self.batch_size, (len(contexts), self.batch_size)
        for b, ctx in enumerate(contexts):
            pend = self._pending[b]
            if pend is not None:
                self._commit(b, pend, ctx)
            toks = self.tokens[b]
            n = min(len(toks), len(ctx))
            keep = next((i for i in range(n) if toks[i] != ctx[i]), n)
            keep = min(keep, max(0, len(ctx) - min_tail))
            if keep < len(toks):
                self.lib.llama_memory_seq_rm(self._mem, self.base[b], keep, -1)
                del toks[keep:]
        return [ctx[len(toks) :] for ctx, toks in zip(contexts, self.tokens)]

    def _commit(self, b: int, pend: _Pending, ctx: list[int]) -> None:
        c, sb = len(self.tokens[b]), self.base[b]
        path: list[int] = []  # matched nodes, first match among siblings
        node = -1
        while c + len(path) < len(ctx):
            nxt = next((j for j in pend.children.get(node, ()) if pend.tokens[j] == ctx[c + len(path)]), None)
            if nxt is None:
                break
            path.append(nxt)
            node = nxt
        on_spine = next((i for i, j in enumerate(path) if sb not in pend.seqs[j]), len(path))
        self.lib.llama_memory_seq_rm(self._mem, sb, c + on_spine, -1)
        if on_spine < len(path):
            leaf = pend.seqs[path[-1]][0]
            self.lib.llama_memory_seq_cp(self._mem, leaf, sb, c + on_spine, c + len(path))
        self.tokens[b].extend(pend.tokens[j] for j in path)
        self._drop_pending(b)

    def _drop_pending(self, b: int) -> None:
        pend = self._pending[b]
        if pend is None:
            return
        for s in pend.extra:
            self.lib.llama_memory_seq_rm(self._mem, s, -1, -1)
            self.free.append(s)
        self._pending[b] = None

    # ---------------------------------------------------------------- forward
    def extend_chain(self, tails: list[list[int]], want_last: bool = True, hidden: bool = False):
        """Feed each row's tail as a chain; logits at its last token (``want_last``)."""
        _refuse_hidden(hidden)
        trees = [DraftTree() for _ in tails]
        out = self._extend(tails, trees, want_root=want_last, want_nodes=False)
        for b, t in enumerate(tails):  # a chain is committed as fed
            if t:
                self._commit(b, self._pending[b], self.tokens[b] + t)
        return out

    def extend_trees(self, tails: list[list[int]], trees: list, rows: list[bool] | None = None, hidden: bool = False):
        """Feed each row's tail with its draft tree hanging from the last tail token; logits
        at that root and at every tree node (``[1 + nodes, V]``)."""
        _refuse_hidden(hidden)
        if rows is not None and not all(rows):
            raise ValueError("the llama.cpp target feeds every row of a round")
        return self._extend(tails, trees, want_root=True, want_nodes=True)

    def _extend(self, tails: list[list[int]], trees: list, want_root: bool, want_nodes: bool) -> list[torch.Tensor]:
        lib, batch = self.lib, self._batch
        pends = [_Pending.build(t, tree) for t, tree in zip(tails, trees)]
        n_total = sum(len(p.tokens) for p in pends)
        if n_total == 0:
            return [torch.empty(0, self.vocab_size) for _ in tails]
        if n_total > self.h.n_batch:
            raise ValueError(f"a forward of {n_total} rows is over the llama.cpp context's n_batch {self.h.n_batch}")
        i, wants = 0, []
        for b, pend in enumerate(pends):
            self._assign_seqs(b, pend)
            c = len(self.tokens[b])
            n_tail = len(tails[b])
            want = []
            for j, tok in enumerate(pend.tokens):
                batch.token[i] = tok
                batch.pos[i] = c + pend.depths[j]
                seqs = pend.seqs[j]
                batch.n_seq_id[i] = len(seqs)
                for k, s in enumerate(seqs):
                    batch.seq_id[i][k] = s
                w = (want_root and j == n_tail - 1) or (want_nodes and j >= n_tail)
                batch.logits[i] = 1 if w else 0
                want.append(w)
                i += 1
            wants.append(sum(want))
            self._pending[b] = pend
        batch.n_tokens = n_total
        t0 = time.perf_counter()
        rc = lib.llama_decode(self.h.ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} on a batch of {n_total} tokens")
        n_out = sum(wants)
        if n_out:
            ptr = lib.llama_get_logits(self.h.ctx)
            n_vocab = self.h.n_vocab
            flat = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_out, n_vocab))
            if n_vocab == self.vocab_size:
                logits = torch.from_numpy(flat.copy())
            else:  # the model's head pads the tokenizer's ids: no mass there
                logits = torch.full((n_out, self.vocab_size), float("-inf"))
                logits[:, :n_vocab] = torch.from_numpy(flat)
        else:
            logits = torch.empty(0, self.vocab_size)
        self.forward_time += time.perf_counter() - t0
        self.forward_calls += 1
        return list(logits.split(wants))

    def _assign_seqs(self, b: int, pend: _Pending) -> None:
        """Each leaf its sequence (the first: the base's), each node the ids of its leaves."""
        sb = self.base[b]
        leaves = pend.leaves()
        ids = {}
        for k, leaf in enumerate(leaves):
            if k == 0:
                ids[leaf] = sb
                continue
            if not self.free:
                raise ValueError(
                    f"a round needs more sequences than the llama.cpp context has ({self.h.n_seq_max}): "
                    "raise n_seq_max, or draft trees with fewer leaves"
                )
            s = self.free.pop()
            self.lib.llama_memory_seq_cp(self._mem, sb, s, -1, -1)
            ids[leaf] = s
            pend.extra.append(s)
        pend.seqs = [[] for _ in pend.tokens]
        for leaf in leaves:
            j = leaf
            while j >= 0:
                pend.seqs[j].append(ids[leaf])
                j = pend.parents[j]


def _refuse_hidden(hidden: bool) -> None:
    if hidden:
        raise ValueError("the llama.cpp target returns no hidden states: a feature draft needs target.backend=torch")


class _Pending:
    """One row's fed nodes (tail chain, then tree nodes) with parents, depths, leaf sequences."""

    def __init__(self, tokens: list[int], parents: list[int]) -> None:
        self.tokens, self.parents = tokens, parents
        self.depths: list[int] = []
        for p in parents:
            self.depths.append(0 if p < 0 else self.depths[p] + 1)
        self.children: dict[int, list[int]] = {}
        for j, p in enumerate(parents):
            self.children.setdefault(p, []).append(j)
        self.seqs: list[list[int]] = []
        self.extra: list[int] = []

    @classmethod
    def build(cls, tail: list[int], tree) -> _Pending:
        n = len(tail)
        parents = [j - 1 for j in range(n)]
        parents += [n - 1 if q < 0 else n + q for q in tree.parents]
        return cls(list(tail) + list(tree.tokens), parents)

    def leaves(self) -> list[int]:
        """Leaf nodes, the first-child spine's leaf first (its sequence is the base's)."""
        if not self.tokens:
            return []
        spine = 0
        while self.children.get(spine):
            spine = self.children[spine][0]
        return [spine] + [j for j in range(len(self.tokens)) if j != spine and not self.children.get(j)]
