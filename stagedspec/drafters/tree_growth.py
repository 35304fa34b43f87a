"""The tree growing the draft levels share: what a drafter knows after a node
(``NodeDist``), the ranked alternatives it offers, and static and dynamic trees grown from
them. The protocol itself (``Drafter``) is the engine's: ``stagedspec/engine/drafter_protocol.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import torch

from stagedspec.engine.coupling import Sampler
from stagedspec.engine.sampling import SamplingConfig, probabilities
from stagedspec.engine.tree import DraftTree, DynamicShape, StaticShape, TreeShapeT, chain


@dataclass
class NodeDist:
    """What a drafter knows after a node (or at the root): its next-token preferences.

    ``raw``: the draft's own scores before temperature, top-k and top-p (logits, or
    log-probabilities for an n-gram LM); they rank the alternatives it offers, at every
    temperature. ``q``: the processed distribution its own pick is sampled from (None
    when greedy: the pick is then the argmax of ``raw``). ``pick``: a token already drawn
    from q for this node (a staged level's lower stage drew it by exact speculation)."""

    raw: torch.Tensor
    q: torch.Tensor | None = None
    pick: int | None = None

    @staticmethod
    def from_scores(raw: torch.Tensor, sampling: SamplingConfig, pick: int | None = None) -> NodeDist:
        """One node's, from its raw scores (q processed from them unless greedy)."""
        raw = raw.float()
        return NodeDist(raw=raw, q=None if sampling.greedy else probabilities(raw, sampling), pick=pick)

    @staticmethod
    def many(raw: torch.Tensor, sampling: SamplingConfig) -> list[NodeDist]:
        """One per row of ``raw`` ([n, V]), processed in one call (per-row calls dominate
        a large batch's drafting time)."""
        raw = raw.float()
        if sampling.greedy:
            return [NodeDist(raw=r) for r in raw]
        return [NodeDist(raw=r, q=q) for r, q in zip(raw, probabilities(raw, sampling))]


def pick_probability(dist: NodeDist, token: int) -> float:
    """The draft's probability of ``token`` after a node: q when sampling, the softmax of
    its raw scores when greedy (how sure it is of its argmax)."""
    if dist.q is not None:
        return float(dist.q[token])
    return float(torch.softmax(dist.raw, -1)[token])


def check_probability(who: str, key: str, value, note: str) -> None:
    """Raise unless ``value`` is a number (not a bool) in [0, 1): a draft's probability
    threshold (``stop_below``, an n-gram's ``min_top``); ``note`` says what 0 means."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{who}: {key} must be a probability in [0, 1) ({note}), got {value!r}")


def confident(dist: NodeDist, token: int, stop_below: float) -> bool:
    """Whether the draft goes on after offering ``token`` as its pick: its probability is
    at least ``stop_below`` (0: always). A stopping rule that reads only the draft's own
    distributions keeps verification exact (the draft's length is a function of what it
    drew, like any draft's tokens)."""
    return stop_below <= 0.0 or pick_probability(dist, token) >= stop_below


Expand = Callable[[list[tuple[int, int]], list[DraftTree]], list[NodeDist | None]]
"""Given (row, node) pairs of freshly added nodes, return what the drafter knows after each."""


def _alternatives(raw: torch.Tensor, exclude: int, n: int) -> list[int]:
    """The draft's ``n`` most preferred tokens other than ``exclude``, best first, from its raw
    scores; tokens it rules out (score -inf: outside a pruned head) are not offered."""
    if n <= 0:
        return []
    masked = raw.clone()
    masked[exclude] = float("-inf")
    top = torch.topk(masked, min(n, masked.numel() - 1))
    return [int(t) for t, v in zip(top.indices.tolist(), top.values.tolist()) if v != float("-inf")]


def _candidates(
    dist: NodeDist, ranks: list[int], sampling: SamplingConfig, sampler: Sampler, row: int, position: int
) -> list[tuple[int, int, torch.Tensor | None]]:
    """(rank, token, q-or-None) for the requested candidate ranks of one node.

    Rank 0 is the drafter's own pick: ``dist.pick`` if a lower stage drew it, else a
    sample from q when sampling (the sampler's draw for the token at ``position`` of row
    ``row``), else the argmax; it carries q (None when greedy). Ranks
    r >= 1 are the draft's r-th most preferred tokens by its raw scores, excluding rank 0,
    offered as point masses (deterministic given rank 0, so the verifier stays exact).
    """
    if dist.pick is not None:
        x0, q0 = int(dist.pick), dist.q
    elif not sampling.greedy:
        assert dist.q is not None
        x0, q0 = sampler.draw(dist.q, row, position), dist.q
    else:
        x0, q0 = int(torch.argmax(dist.raw).item()), None
    out = [(0, x0, q0)] if 0 in ranks else []
    alt = _alternatives(dist.raw, x0, max(ranks))
    out.extend((r, alt[r - 1], None) for r in ranks if r >= 1 and r - 1 < len(alt))
    return out


def grow_trees(
    shape: TreeShapeT,
    k: int,
    roots: list[NodeDist | None],
    expand: Expand,
    sampling: SamplingConfig,
    gen: Sampler | torch.Generator | None,
    origin: str,
    stop_below: float = 0.0,
    stop_alternatives: int = 0,
    positions: list[int] | None = None,
) -> list[DraftTree]:
    """Grow one tree per row from what the drafter knows at each root (None = no draft for
    that row); ``expand`` is called once per depth with every row's new nodes (and may
    answer None for a node: it gets no children). ``stop_below``: a rank-0 pick the draft
    gives less than this probability is offered but not expanded (static shapes).
    ``stop_alternatives``: beside such an unsure pick, also offer the draft's next
    ``stop_alternatives`` best tokens as leaves (ranks the shape does not already offer
    there): where the draft stops it is likeliest to be wrong, and its runners-up come
    from the distribution it already has, so they cost the draft nothing. Whether they
    are offered depends only on the draft's own distribution and pick, like the stop.
    ``positions[b]``: where in row b's sequence the root's next token goes (its context's
    length), for a ``gumbel`` sampler's draws (``engine/coupling.py``)."""
    sampler = Sampler.wrap(sampling, gen)
    if sampler.gumbel and positions is None:
        raise ValueError(f"{origin}: coupling=gumbel draws by position: grow_trees needs positions")
    trees = [DraftTree() for _ in roots]
    if isinstance(shape, DynamicShape):
        _grow_dynamic(shape, trees, roots, expand, origin)
        return trees
    static = chain(k) if shape is None else shape
    if not isinstance(static, StaticShape):
        raise TypeError(f"grow_trees: cannot grow {shape!r} (tree=auto must be resolved first)")
    kids = static.children()
    depth = static.depth
    # frontier: (row, node, path-of-ranks, what the drafter knows after the node)
    frontier = [(b, -1, (), d) for b, d in enumerate(roots) if d is not None]
    for d in range(1, depth + 1):
        added: list[tuple[int, int, tuple[int, ...]]] = []
        for b, node, path, dist in frontier:
            ranks = kids.get(path)
            if not ranks:
                continue
            unsure = None
            pos = d - 1 if positions is None else positions[b] + d - 1
            for r, tok, qq in _candidates(dist, ranks, sampling, sampler, b, pos):
                go_on = r > 0 or confident(dist, tok, stop_below)
                added.append((b, trees[b].add(tok, node, qq, origin, r), path + (r,), go_on))
                if r == 0 and not go_on:
                    unsure = tok
            if unsure is not None and stop_alternatives > 0:
                extra = [r for r in range(1, stop_alternatives + 1) if r not in ranks]
                alt = _alternatives(dist.raw, unsure, stop_alternatives)
                for r in extra:
                    if r - 1 < len(alt):  # point masses, never expanded
                        added.append((b, trees[b].add(alt[r - 1], node, None, origin, r), path + (r,), False))
        expandable = [(b, n, p) for b, n, p, go_on in added if go_on and d < depth and p in kids]
        if not expandable:
            break
        dists = expand([(b, n) for b, n, _ in expandable], trees)
        frontier = [(b, n, p, x) for (b, n, p), x in zip(expandable, dists) if x is not None]
    return trees


def _grow_dynamic(
    shape: DynamicShape, trees: list[DraftTree], roots: list[NodeDist | None], expand: Expand, origin: str
) -> None:
    """EAGLE-2-style, every row at once: at each depth give each frontier node its ``topk``
    most preferred children, scored by cumulative draft probability (the raw distribution,
    so it ranks at temperature 0 too); expand the ``topk`` best new nodes of each row with
    one ``expand`` call for the whole batch; finally keep each row's ``budget`` best nodes.
    A child scores at most its parent, so the kept set is a tree, and a node scoring no
    better than the row's ``budget``-th best so far cannot have a kept descendant: it is
    not expanded, and growth stops when no row has such a node (or at ``depth``).
    All candidates are point masses: whether a node is kept depends on its probability,
    so a sampled token kept this way would not be distributed as q."""
    work = trees  # every candidate; expand() reads them
    score: list[list[float]] = [[] for _ in roots]
    frontier: list[list[tuple[int, float, NodeDist]]] = [[(-1, 1.0, d)] if d is not None else [] for d in roots]
    for d in range(1, shape.depth + 1):
        added: list[list[int]] = [[] for _ in roots]
        for b, nodes in enumerate(frontier):
            for node, s, dist in nodes:
                probs = torch.softmax(dist.raw, -1)
                top = torch.topk(probs, min(shape.topk, probs.numel()))
                for r, (tok, pr) in enumerate(zip(top.indices.tolist(), top.values.tolist())):
                    if pr <= 0.0:
                        break
                    score[b].append(s * pr)
                    added[b].append(work[b].add(tok, node, None, origin, r))
        if d == shape.depth:
            break
        beams: list[tuple[int, int]] = []
        for b in range(len(roots)):
            sc = score[b]
            bar = sorted(sc, reverse=True)[shape.budget - 1] if len(sc) >= shape.budget else float("-inf")
            best = sorted(added[b], key=lambda n: (-sc[n], n))[: shape.topk]
            beams.extend((b, n) for n in sorted(best) if sc[n] > bar)
        if not beams:
            break
        dists = expand(beams, work)
        frontier = [[] for _ in roots]
        for (b, n), dist in zip(beams, dists):
            frontier[b].append((n, score[b][n], dist))
    for b, tree in enumerate(work):
        keep = sorted(sorted(range(len(tree)), key=lambda n: (-score[b][n], n))[: shape.budget])
        new_index = {-1: -1}
        pruned = DraftTree()
        for n in keep:
            new_index[n] = pruned.add(tree.tokens[n], new_index[tree.parents[n]], None, origin, tree.rank[n])
        trees[b] = pruned
