"""Token trees: shapes (what a drafter should build) and drafts (what it built).

The one serialised form of a static tree is a list of root-to-node index paths, as in
Medusa/EAGLE: ``[[0], [1], [0, 0], [0, 1], [0, 0, 0]]``. Index ``i`` at depth ``d`` means
"the i-th candidate the drafter offers after the node's parent": candidate 0 is the
drafter's own pick (its sample when sampling, its argmax when greedy) and candidates
1, 2, ... are its next most probable tokens. A chain of k drafts is the path list
``[[0], [0, 0], ...]`` of depth k; ``None`` stands for it.

The root of every tree is the last token of the context (already emitted, not yet in
the target's KV cache): the target's logits at the root score depth-1 drafts.

"The i-th best" is the draft's own preference, read from its raw distribution (logits or
n-gram probabilities before temperature, top-k and top-p): at temperature 0 the
processed q is one-hot, so ranking from it would offer arbitrary zero-probability ties.

``tree=auto`` (``AutoShape``) is a request, not a shape: ``stagedspec/tuning/`` measures the
hierarchy's acceptance per rank and depth and this machine's costs, then picks a path list.
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

    @property
    def size(self) -> int:
        """Draft nodes (the target scores these plus the root)."""
        return len(self.paths)

    @property
    def spine(self) -> int:
        """Length of the rank-0 chain [0], [0, 0], ...: the drafter's own picks in a row
        (what a staged level gets from its lower level's speculation)."""
        n = 0
        have = set(self.paths)
        while (0,) * (n + 1) in have:
            n += 1
        return n

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


@dataclass(frozen=True)
class AutoShape:
    """Choose the shape on this machine (``stagedspec/tuning/``): decode a few calibration
    prompts with a tree that offers ``widths[d]`` ranked children at depth d + 1 along the
    rank-0 chain, measuring how often each rank is accepted at each depth; time the
    target's forward for 1..``max_nodes`` + 1 positions and the draft per tree; then solve
    Sequoia's dynamic program for the tree of at most ``max_nodes`` nodes and depth
    ``len(widths)`` with the most expected tokens per second."""

    max_nodes: int = 24
    widths: tuple[int, ...] = (6, 4, 3, 3, 2, 2, 2, 2)
    prompts: int = 4
    """Calibration prompts."""
    source: str = "training"
    """Where they come from: "training", the distillation templates
    (``prompts/training_prompts.py``: short requests that share no task with any benchmark
    set, present in every install; an n-gram level finds less to copy in them than in
    benchmark answers), or "data", Spec-Bench dev questions (``prompts.prompt_sets.
    default_data_path()``: the *last* of each category, categories in turn, so they miss an
    evaluation taking the first questions per category); "data" without that file is an
    error, never a silent switch to "training"."""
    tokens: int = 48
    """New tokens decoded per calibration prompt."""
    repeats: int = 5
    """Timings per measured size (medians)."""

    @property
    def depth(self) -> int:
        """The deepest tree it may choose (the calibration's depth)."""
        return len(self.widths)

    def calibration_shape(self) -> StaticShape:
        paths = [(0,) * d + (r,) for d, w in enumerate(self.widths) for r in range(w)]
        return _check_paths(tuple(paths))

    def __str__(self) -> str:
        return (
            f"auto(max_nodes={self.max_nodes},widths={list(self.widths)},prompts={self.prompts},"
            f"source={self.source},tokens={self.tokens})"
        ).replace(" ", "")


TreeShapeT = StaticShape | DynamicShape | AutoShape | None


class TreeShape:
    """Parsing of the tree setting accepted by every tree-building level."""

    @staticmethod
    def parse(x: Any) -> TreeShapeT:
        """``None`` (chain) | list of paths | ``{"widths": [2, 2, 1]}`` | ``{"dynamic": {...}}``
        | ``{"auto": {...}}`` | ``"auto"``."""
        if x is None or isinstance(x, (StaticShape, DynamicShape, AutoShape)):
            return x
        if isinstance(x, str):
            if x in ("chain", "null", ""):
                return None
            if x == "auto":
                return AutoShape()
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
                    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                        raise ValueError(f"dynamic tree: {k} must be an integer >= 1, got {v!r}")
                return shape
            if set(x) == {"auto"}:
                return _parse_auto(dict(x["auto"] or {}))
            raise ValueError(
                f"tree: expected a path list, {{'widths': [...]}}, {{'dynamic': {{...}}}} or "
                f"{{'auto': {{...}}}}, got {x!r}"
            )
        try:
            if any(not isinstance(i, int) or isinstance(i, bool) for p in x for i in p):
                raise TypeError
            paths = tuple(tuple(p) for p in x)
        except TypeError as e:
            raise ValueError(f"tree: a path list must be a list of lists of ints, got {x!r}") from e
        return _check_paths(paths)


def _parse_auto(d: dict) -> AutoShape:
    valid = ("max_nodes", "widths", "prompts", "source", "tokens", "repeats")
    unknown = set(d) - set(valid)
    if unknown:
        raise ValueError(f"auto tree: unknown keys {sorted(unknown)}; valid: {', '.join(valid)}")
    if "widths" in d:
        w = list(d["widths"])
        if not w or any(not isinstance(i, int) or isinstance(i, bool) or i < 1 for i in w):
            raise ValueError(f"auto tree: widths must be a non-empty list of integers >= 1, got {d['widths']!r}")
        d["widths"] = tuple(w)
    if d.get("source", "training") not in ("data", "training"):
        raise ValueError(f"auto tree: source must be 'data' or 'training', got {d['source']!r}")
    shape = AutoShape(**d)
    for k in ("max_nodes", "prompts", "tokens", "repeats"):
        v = getattr(shape, k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"auto tree: {k} must be an integer >= 1, got {v!r}")
    return shape


def widths_to_paths(widths: list[int]) -> StaticShape:
    """SpecInfer-style expansion <w1, w2, ...>: every node at depth d-1 gets w_d children."""
    if not widths or any(not isinstance(w, int) or isinstance(w, bool) or w < 1 for w in widths):
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
    verifier in node order. ``rank[i]``: node i's candidate index under its parent (0 =
    the drafter's own pick, r >= 1 its r-th best alternative; -1 for drafters without
    ranks), what ``tree=auto`` measures acceptance by.
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    q: list[torch.Tensor | None] = field(default_factory=list)
    origin: list[str] = field(default_factory=list)
    rank: list[int] = field(default_factory=list)
    drafted: dict[str, int] = field(default_factory=dict)
    """Tokens lower levels proposed *inside* this level while building it (staged SD)."""
    accepted: dict[str, int] = field(default_factory=dict)
    owner: str | None = None
    """The level whose draft this is, when not the level the target verifies (a bypass
    level that passed the round to the level below: ``drafters/bypass.py``)."""

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int, q: torch.Tensor | None, origin: str, rank: int = -1) -> int:
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.q.append(q)
        self.origin.append(origin)
        self.rank.append(rank)
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
