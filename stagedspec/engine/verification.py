"""The acceptance rule: which draft tokens the target keeps, and what it emits next.

Notation follows the papers (Leviathan et al. 2023; Chen et al. 2023): **p** is the
target's distribution, **q** the draft's, both already processed by temperature,
top-k and top-p (see ``sampling.py``).

For a chain, each draft token x ~ q is accepted with probability min(1, p(x)/q(x)); at
the first rejection the target samples from the residual norm(max(0, p - q)); if all are
accepted it samples a bonus token from p. The emitted token is then distributed exactly
as p.

For a tree we use SpecInfer's multi-step speculative sampling (Miao et al. 2024,
Algorithm 2): at a node, try its children in order; child x drawn from r is accepted
with probability min(1, p(x)/r(x)); on rejection p becomes norm(max(0, p - r)) and the
next sibling is tried; when all fail the target samples from the current residual.
Each step is one exact speculative-sampling step against the *current* p, so by
induction the emitted token is distributed as the original p, provided each candidate's
r is the distribution it was drawn from given everything tried before it. We only build
two kinds of candidates so that this holds:

- the drafter's own pick, sampled from q (r = q), always tried first among its siblings;
- deterministic candidates (argmax, ranked alternatives, table look-ups): given what the
  drafter already decided they are fixed, so r is a point mass δ_x, the test accepts with
  probability p(x), and the residual is p with x removed, renormalised.

Greedy decoding is the same rule with p and q point masses on their argmax: it accepts
exactly the drafts equal to the target's argmax and then emits the argmax.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .sampling import residual, sample
from .tree import DraftTree


def accept_probability(p: torch.Tensor, q: torch.Tensor | None, x: int) -> float:
    """min(1, p(x) / q(x)); q None is a point mass on x."""
    px = float(p[x])
    qx = 1.0 if q is None else float(q[x])
    if qx <= 0.0:
        # a sample from q never has q(x) = 0; a point mass always has q(x) = 1
        raise ValueError(f"draft token {x} has q(x) = 0: it cannot have been sampled from q")
    return min(1.0, px / qx)


def residual_after(p: torch.Tensor, q: torch.Tensor | None, x: int) -> torch.Tensor:
    """The target distribution to use after rejecting x drawn from q (point mass if None)."""
    if q is None:
        q = torch.zeros_like(p)
        q[x] = 1.0
    return residual(p, q)


def verify_tree(tree: DraftTree, p: torch.Tensor, generator: torch.Generator | None) -> tuple[list[int], int]:
    """Walk the tree from the root; return (accepted node indices, next token).

    ``p[0]`` is the target's distribution at the root, ``p[i + 1]`` at node i.
    """
    path: list[int] = []
    node = -1
    children = _children(tree)
    while True:
        p_cur = p[node + 1]
        chosen = None
        for c in children.get(node, []):
            x, q = tree.tokens[c], tree.q[c]
            u = torch.rand((), generator=generator).item()
            if u < accept_probability(p_cur, q, x):
                chosen = c
                break
            p_cur = residual_after(p_cur, q, x)
        if chosen is None:
            return path, sample(p_cur, generator)
        path.append(chosen)
        node = chosen


def verify_tree_greedy(tree: DraftTree, argmax: list[int]) -> tuple[list[int], int]:
    """``verify_tree`` at temperature 0, from the target's argmax at the root and at each
    node (``argmax[0]`` at the root, ``argmax[i + 1]`` at node i).

    With p a point mass on the argmax, a child is accepted with probability p(x) / 1,
    i.e. exactly when it is the argmax, and the emitted token is the argmax; so this walk
    is the same rule without building one-hot distributions over the vocabulary."""
    return walk_tree(tree, lambda node, depth: argmax[node + 1])


def walk_tree(tree: DraftTree, emit: Callable[[int, int], int]) -> tuple[list[int], int]:
    """The walk of a target whose token at each node is fixed before it looks at the drafts:
    ``emit(node, depth)`` is the token it emits after ``node`` (-1: the root), ``depth`` nodes
    below the root. The child holding that token (the first, if several) is kept and the walk
    goes on from it; where no child holds it, the walk ends and that token is emitted. Greedy
    decoding (the argmax) and drafter-invariant sampling (``coupling.py``) are this walk."""
    path: list[int] = []
    node = -1
    children = _children(tree)
    while True:
        want = emit(node, len(path))
        chosen = next((c for c in children.get(node, []) if tree.tokens[c] == want), None)
        if chosen is None:
            return path, want
        path.append(chosen)
        node = chosen


def _children(tree: DraftTree) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, par in enumerate(tree.parents):
        out.setdefault(par, []).append(i)
    return out
