"""Token trees: shapes (what a drafter should build) and drafts (what it built).

The one serialised form of a static tree is a list of root-to-node index paths, as in
Medusa/EAGLE: ``[[0], [1], [0, 0], [0, 1], [0, 0, 0]]``. Index ``i`` at depth ``d`` means
"the i-th candidate the drafter offers after the node's parent": candidate 0 is the
drafter's own pick (its sample when sampling, its argmax when greedy) and candidates
1, 2, ... are its next most probable tokens. A chain of k drafts is the path list
``[[0], [0, 0], ...]`` of depth k; ``None`` stands for it.

The root of every tree is the last token of the context (already emitted, not yet in
the target's KV cache): the target's logits at the root score depth-1 drafts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class StaticShape:
    paths: tuple[tuple[int, ...], ...]

    @property
    def depth(self) -> int:
        return max(len(p) for p in self.paths)

    def children(self) -> dict[tuple[int, ...], list[int]]:
        """For each node path (root = ()), the candidate ranks of its children, in order."""
        out: dict[tuple[int, ...], list[int]] = {}
        for p in self.paths:
            out.setdefault(p[:-1], []).append(p[-1])
        return {k: sorted(v) for k, v in out.items()}

    def __str__(self) -> str:
        return json.dumps([list(p) for p in self.paths], separators=(",", ":"))


@dataclass(frozen=True)
class DynamicShape:
    """Grow the tree best-first: at each depth keep the ``topk`` most probable candidate
    children (by cumulative draft probability), stopping at ``budget`` nodes or ``depth``."""

    budget: int = 16
    topk: int = 4
    depth: int = 6

    def __str__(self) -> str:
        return f"dynamic(budget={self.budget},topk={self.topk},depth={self.depth})"


TreeShapeT = StaticShape | DynamicShape | None


class TreeShape:
    """Parsing of the tree setting accepted by every tree-building level."""

    @staticmethod
    def parse(x: Any) -> TreeShapeT:
        """``None`` (chain) | list of paths | ``{"widths": [2, 2, 1]}`` | ``{"dynamic": {...}}``."""
        if x is None or isinstance(x, (StaticShape, DynamicShape)):
            return x
        if isinstance(x, str):
            if x in ("chain", "null", ""):
                return None
            x = json.loads(x)
        if hasattr(x, "items"):  # dict or DictConfig
            x = dict(x)
            if set(x) == {"widths"}:
                return widths_to_paths(list(x["widths"]))
            if set(x) == {"dynamic"}:
                d = dict(x["dynamic"] or {})
                unknown = set(d) - {"budget", "topk", "depth"}
                if unknown:
                    raise ValueError(f"dynamic tree: unknown keys {sorted(unknown)}; valid: budget, topk, depth")
                shape = DynamicShape(**d)
                for k in ("budget", "topk", "depth"):
                    v = getattr(shape, k)
                    if not isinstance(v, int) or v < 1:
                        raise ValueError(f"dynamic tree: {k} must be an integer >= 1, got {v!r}")
                return shape
            raise ValueError(f"tree: expected a path list, {{'widths': [...]}} or {{'dynamic': {{...}}}}, got {x!r}")
        try:
            paths = tuple(tuple(int(i) for i in p) for p in x)
        except TypeError as e:
            raise ValueError(f"tree: a path list must be a list of lists of ints, got {x!r}") from e
        return _check_paths(paths)


def widths_to_paths(widths: list[int]) -> StaticShape:
    """SpecInfer-style expansion <w1, w2, ...>: every node at depth d-1 gets w_d children."""
    if not widths or any(not isinstance(w, int) or w < 1 for w in widths):
        raise ValueError(f"tree widths must be a non-empty list of integers >= 1, got {widths!r}")
    level: list[tuple[int, ...]] = [()]
    paths: list[tuple[int, ...]] = []
    for w in widths:
        level = [p + (i,) for p in level for i in range(w)]
        paths.extend(level)
    return _check_paths(tuple(paths))


def chain(k: int) -> StaticShape:
    return StaticShape(tuple(tuple([0] * d) for d in range(1, k + 1)))


def _check_paths(paths: tuple[tuple[int, ...], ...]) -> StaticShape:
    if not paths:
        raise ValueError("tree: the path list is empty")
    seen = set(paths)
    if len(seen) != len(paths):
        raise ValueError(f"tree: duplicate paths in {[list(p) for p in paths]}")
    for p in paths:
        if not p or any(i < 0 for i in p):
            raise ValueError(f"tree: path {list(p)} must be non-empty with indices >= 0")
        if len(p) > 1 and p[:-1] not in seen:
            raise ValueError(f"tree: path {list(p)} has no parent path {list(p[:-1])} in the list")
    # parents before children, siblings by rank: a stable, canonical order
    return StaticShape(tuple(sorted(paths, key=lambda p: (len(p), p))))


@dataclass
class DraftTree:
    """A draft for one sequence: nodes in topological order (parents before children).

    ``parents[i] == -1`` means node i is a child of the root. ``q[i]`` is the draft
    distribution node i's token was *sampled* from (already processed by temperature,
    top-k, top-p), or ``None`` when the token was chosen deterministically (a point
    mass: argmax, a ranked alternative, a table look-up). Siblings are tried by the
    verifier in node order.
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    q: list[torch.Tensor | None] = field(default_factory=list)
    origin: list[str] = field(default_factory=list)
    drafted: dict[str, int] = field(default_factory=dict)
    """Tokens lower levels proposed *inside* this level while building it (staged SD)."""
    accepted: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int, q: torch.Tensor | None, origin: str) -> int:
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.q.append(q)
        self.origin.append(origin)
        return len(self.tokens) - 1

    def depth(self) -> int:
        d = [0] * len(self.tokens)
        for i, p in enumerate(self.parents):
            d[i] = 1 if p < 0 else d[p] + 1
        return max(d, default=0)

    def path_tokens(self, node: int) -> list[int]:
        out = []
        while node >= 0:
            out.append(self.tokens[node])
            node = self.parents[node]
        return out[::-1]

