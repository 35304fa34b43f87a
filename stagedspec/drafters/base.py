"""The drafter protocol every level implements, and the tree growing they share.

A drafter sees the contexts of a batch and proposes one ``DraftTree`` per row: tokens,
their parents, and for each token the distribution q it was sampled from, or ``None``
when it was chosen deterministically (a point mass). The level above verifies, and the
drafter hears back how many tokens it accepted (``feedback``). A drafter needs no other
signal: at its next ``propose`` it compares the new contexts with what it holds and rolls
back or catches up by itself, so an n-gram table, a small model and a whole lower stage
of speculation look the same to the level above.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable

import torch

from ..kernels import HF_PLAN, KernelPlan
from ..sampling import SamplingConfig
from ..tree import DraftTree, DynamicShape, StaticShape, TreeShapeT, chain

Expand = Callable[[list[tuple[int, int]], list[DraftTree]], list[torch.Tensor]]
"""Given (row, node) pairs of freshly added nodes, return the processed q after each."""


class Drafter(ABC):
    name: str = "drafter"
    k: int = 1
    tree: TreeShapeT = None
    lower: "Drafter | None" = None
    wants_features: bool = False
    """True for a level that reads the target's hidden states (an EAGLE-style feature
    draft): the decoder then passes them to ``propose``. Only the level drafting directly
    for the target can have them."""

    def setup(self, sampling: SamplingConfig, generator: torch.Generator | None, plan: KernelPlan = HF_PLAN) -> None:
        """Called by the level above before decoding: the sampling rule applies to q too,
        and model levels run their forwards through the same kernel plan as the target."""
        self.sampling = sampling
        self.generator = generator
        if self.lower is not None:
            self.lower.setup(sampling, generator, plan)

    def reset(self, batch_size: int) -> None:
        if self.lower is not None:
            self.lower.reset(batch_size)

    def prefill(self, contexts: list[list[int]]) -> None:
        """Optional: absorb the prompts before the first round (timed as prefill)."""
        if self.lower is not None:
            self.lower.prefill(contexts)

    @abstractmethod
    def propose(self, contexts: list[list[int]], features: list[torch.Tensor] | None = None) -> list[DraftTree]:
        """One draft tree per row. ``features[b]``, given only to a level that
        ``wants_features``: the target's last hidden states at every position of
        ``contexts[b]`` but the last."""

    def feedback(self, accepted: list[int]) -> None:
        """How many of each row's draft tokens the level above accepted (HF's
        ``update_candidate_strategy``); a hook for adaptive drafters."""

    def keep_rows(self, rows: list[int]) -> None:
        if self.lower is not None:
            self.lower.keep_rows(rows)

    def levels(self) -> list["Drafter"]:
        """This level and the ones below it, lowest first."""
        return (self.lower.levels() if self.lower is not None else []) + [self]

    def forward_stats(self) -> tuple[float, int]:
        """(seconds, calls) spent in this level's own model forwards."""
        return 0.0, 0

    @property
    def max_depth(self) -> int:
        if self.tree is None:
            return self.k
        return self.tree.depth


def _candidates(
    q: torch.Tensor, ranks: list[int], sampling: SamplingConfig, gen: torch.Generator | None, sampled_first: bool
) -> list[tuple[int, int, torch.Tensor | None]]:
    """(rank, token, q-or-None) for the requested candidate ranks of one node.

    Rank 0 is the drafter's own pick: a sample from q when sampling (and
    ``sampled_first``), else the argmax. Ranks >= 1 are the next most probable tokens
    excluding rank 0, offered as point masses.
    """
    top = max(ranks)
    if sampled_first and not sampling.greedy:
        x0 = int(torch.multinomial(q, 1, generator=gen).item())
        q0: torch.Tensor | None = q
    else:
        x0, q0 = int(torch.argmax(q).item()), None
    out = []
    if 0 in ranks:
        out.append((0, x0, q0))
    if top >= 1:
        masked = q.clone()
        masked[x0] = -1.0
        alt = torch.topk(masked, min(top, masked.numel() - 1)).indices.tolist()
        for r in ranks:
            if r >= 1 and r - 1 < len(alt):
                out.append((r, int(alt[r - 1]), None))
    return out


def grow_trees(
    shape: TreeShapeT,
    k: int,
    root_q: list[torch.Tensor | None],
    expand: Expand,
    sampling: SamplingConfig,
    gen: torch.Generator | None,
    origin: str,
) -> list[DraftTree]:
    """Grow one tree per row from the processed q at each root (None = no draft for it)."""
    trees = [DraftTree() for _ in root_q]
    if isinstance(shape, DynamicShape):
        _grow_dynamic(shape, trees, root_q, expand, gen, origin)
        return trees
    static = chain(k) if shape is None else shape
    assert isinstance(static, StaticShape)
    kids = static.children()
    depth = static.depth
    # frontier: (row, node, path-of-ranks, q after it)
    frontier = [(b, -1, (), q) for b, q in enumerate(root_q) if q is not None]
    for d in range(1, depth + 1):
        added: list[tuple[int, int, tuple[int, ...]]] = []
        for b, node, path, q in frontier:
            ranks = kids.get(path)
            if not ranks:
                continue
            for r, tok, qq in _candidates(q, ranks, sampling, gen, sampled_first=True):
                added.append((b, trees[b].add(tok, node, qq, origin), path + (r,)))
        expandable = [(b, n, p) for b, n, p in added if d < depth and p in kids]
        if not expandable:
            break
        qs = expand([(b, n) for b, n, _ in expandable], trees)
        frontier = [(b, n, p, q) for (b, n, p), q in zip(expandable, qs)]
    return trees


def _grow_dynamic(
    shape: DynamicShape,
    trees: list[DraftTree],
    root_q: list[torch.Tensor | None],
    expand: Expand,
    gen: torch.Generator | None,
    origin: str,
) -> None:
    """EAGLE-2-style: expand a beam of the ``topk`` most probable nodes per depth (by
    cumulative draft probability), then keep the ``budget`` most probable nodes overall.
    A child's cumulative probability never exceeds its parent's, so the kept set is a
    tree. All candidates are point masses (ranked tokens): whether a node is kept depends
    on its probability, so a sampled token kept this way would not be distributed as q."""
    greedy = SamplingConfig(temperature=0.0)
    for b, q in enumerate(root_q):
        if q is None:
            continue
        work = trees[b]  # every candidate; expand() reads it
        score: list[float] = []
        frontier = [(-1, 1.0, q)]
        for d in range(1, shape.depth + 1):
            added = []
            for node, s, qn in frontier:
                for _, tok, _ in _candidates(qn, list(range(shape.topk)), greedy, gen, sampled_first=False):
                    score.append(s * float(qn[tok]))
                    added.append(work.add(tok, node, None, origin))
            if d == shape.depth or len(work) >= shape.budget * shape.topk:
                break
            beam = sorted(sorted(added, key=lambda n: -score[n])[: shape.topk])
            qs = expand([(b, n) for n in beam], trees)
            frontier = [(n, score[n], qn) for n, qn in zip(beam, qs)]
        keep = sorted(sorted(range(len(work)), key=lambda n: (-score[n], n))[: shape.budget])
        new_index = {-1: -1}
        pruned = DraftTree()
        for n in keep:
            new_index[n] = pruned.add(work.tokens[n], new_index[work.parents[n]], None, origin)
        trees[b] = pruned
