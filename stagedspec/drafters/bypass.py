"""Route each span to the level that should draft it: a long verbatim match goes straight
to the level above, everything else to the levels below.

Code answers restate their prompt: whole lines come back verbatim, and for those the
cheapest correct draft is a copy (prompt lookup), tens of tokens long, with no model in the
way. Where the answer is new, a copy has nothing to offer and a small model (with its own
lower stage) should draft. A staged chain lookup > small > target sends every copy through
the small model, which pays a forward per round for tokens it only confirms and caps the
draft at its own k; lookup > target alone stalls on new lines. ``BypassDrafter`` decides
per round and row: when the context's suffix matches an earlier span over at least
``min_match`` tokens, it offers what followed that span (up to ``k`` tokens); otherwise it
passes the round to the level below, unchanged. The decision depends on the context
only, and either draft is verified as usual, so the output distribution stays exact.

A match's length is a weak signal of whether a copy will be accepted. ``miss_below`` adds
the round before's outcome: a row whose last copy had fewer than ``miss_below`` tokens
accepted hands its next round to the level below whatever its match (after that round
it may copy again). The rule reads only earlier rounds' acceptance, never the round being
verified, so exactness is kept, as for any adaptive draft length.

Batch: the level below drafts for every row or none (its caches hold every row), so when
some row has no long match, the rows that have one still take their copy and the level
below's draft for them is dropped (it is only work; it changes nothing).
"""

from __future__ import annotations

import time

import torch

from stagedspec.engine.drafter_protocol import Drafter
from stagedspec.engine.tree import DraftTree


def longest_match(context: list[int], max_match: int, min_match: int) -> tuple[int, int]:
    """(length, end) of the longest earlier occurrence of the context's suffix, at least
    ``min_match`` and at most ``max_match`` tokens long (the most recent one among equals):
    ``context[end:]`` is what followed it. (0, -1) when there is none."""
    n = len(context)
    if n < min_match + 1:
        return 0, -1
    last = context[-1]
    best, best_end = 0, -1
    # candidate ends: positions e < n - 1 with context[e - 1] == last... scanned newest first
    for e in range(n - 1, 0, -1):
        if context[e - 1] != last:
            continue
        length = 1
        limit = min(max_match, e)
        while length < limit and context[e - 1 - length] == context[n - 1 - length]:
            length += 1
        if length > best:
            best, best_end = length, e
            if best >= max_match:
                break
    return (best, best_end) if best >= min_match else (0, -1)


class BypassDrafter(Drafter):
    def __init__(self, lower: Drafter | None, k: int = 24, min_match: int = 8, max_match: int = 32,
                 name: str = "copy", miss_below: int = 0) -> None:
        self.lower, self.k, self.min_match, self.max_match, self.name = lower, k, min_match, max_match, name
        self.miss_below = miss_below
        self.calls = 0
        self.seconds = 0.0
        self._copied: list[bool] = []  # per row: its last round was a copy
        self._cold: list[bool] = []  # per row: that copy missed (fewer than miss_below accepted)

    def reset(self, batch_size: int) -> None:
        self._copied, self._cold = [False] * batch_size, [False] * batch_size
        super().reset(batch_size)

    def keep_rows(self, rows: list[int]) -> None:
        self._copied = [self._copied[r] for r in rows] if self._copied else []
        self._cold = [self._cold[r] for r in rows] if self._cold else []
        super().keep_rows(rows)

    def feedback(self, accepted: list[int]) -> None:
        if self.miss_below and len(self._copied) == len(accepted):
            self._cold = [c and a < self.miss_below for c, a in zip(self._copied, accepted)]

    def forward_stats(self) -> tuple[float, int]:
        """A draft 'forward' here is one batch of look-ups."""
        return self.seconds, self.calls

    @property
    def max_depth(self) -> int:
        return max(self.k, self.lower.max_depth if self.lower is not None else 0)

    def copies(self, contexts: list[list[int]]) -> list[list[int]]:
        """Per row, the verbatim continuation it would offer ([] when no long match)."""
        out = []
        for ctx in contexts:
            length, end = longest_match(ctx, self.max_match, self.min_match)
            out.append(list(ctx[end:end + self.k]) if length else [])
        return out

    def propose(self, contexts: list[list[int]], features: list[torch.Tensor] | None = None) -> list[DraftTree]:
        t0 = time.perf_counter()
        self.calls += 1
        copies = self.copies(contexts)
        if self.miss_below and self.lower is not None and len(self._cold) == len(contexts):
            copies = [[] if cold else cont for cont, cold in zip(copies, self._cold)]
        self._copied = [bool(c) for c in copies]
        self.seconds += time.perf_counter() - t0
        trees: list[DraftTree | None] = [None] * len(contexts)
        for b, cont in enumerate(copies):
            if cont:
                tree = DraftTree()
                node = -1
                for tok in cont:
                    node = tree.add(tok, node, None, self.name)
                trees[b] = tree
        if self.lower is not None and any(t is None for t in trees):
            lowered = self.lower.propose(contexts, features)
            for b, tree in enumerate(trees):
                if tree is None:
                    lowered[b].owner = self.lower.name
                    trees[b] = lowered[b]
        return [t if t is not None else DraftTree() for t in trees]
