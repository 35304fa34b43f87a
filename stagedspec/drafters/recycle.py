"""Token Recycling (Luo et al. 2024): the target's own candidates, kept and drafted again.

Every target call scores each row's root and draft nodes, and at each of those positions the
target ranks every next token. Token Recycling keeps, per token id, the ``k`` next tokens the
target ranked highest the last time that token was an input (the most recent call wins): a table
of successors filled for free from calls the run makes anyway, rejected branches included. A
draft is a small static tree grown from the context's last token by rank paths: node ``"0"`` is
the last token's best successor, ``"1"`` its second, ``"01"`` the second-best successor of node
``"0"``'s token, and so on; a node whose parent's token has no entry yet is left out with its
subtree. Every node is a deterministic candidate (q a point mass), read from earlier rounds only,
so the target's output distribution is kept exactly (``engine/verification.py``).

The table is not cleared between prompts of a job (a runtime's drafter learns from all it served,
as the paper's does); it starts empty. The decoder fills it (``Drafter.successors``,
``observe_successors``); a level that routes (``drafters/bypass.py``) offers its trees where
they price above a plain step. This is no n-gram model: it ranks by the target's own logits, so on
prose, where the context has few repeats, its first node is the target's likeliest word after
the last one as the target last saw it.
"""

from __future__ import annotations

import torch

from stagedspec.engine.drafter_protocol import Drafter
from stagedspec.engine.tree import DraftTree

MAX_RANK = 8
"""Ranks 0..7: a template asks the decoder for at most this many successors a position."""


RANKED_PATHS = (
    "0", "1", "00", "2", "01", "000", "3", "10", "001", "0000",
    "02", "11", "20", "4", "002", "010", "00000", "100", "0001", "5",
)  # fmt: skip
"""A template given as a number N is the first N of these: best successors first, then the best
of the best's, ... (every path after its parent), roughly by how often each is accepted."""


def parse_template(paths: int | list[str] | tuple[str, ...], what: str = "recycle") -> tuple[str, ...]:
    """Rank paths ("0", "1", "00", ...), each a string of digits below ``MAX_RANK`` whose
    prefix (its parent) comes earlier in the list, or a number N: the first N ``RANKED_PATHS``;
    a clear error otherwise."""
    if isinstance(paths, int) and not isinstance(paths, bool):
        if not 1 <= paths <= len(RANKED_PATHS):
            raise ValueError(f"{what}: a template of N nodes takes N in 1..{len(RANKED_PATHS)}, got {paths}")
        return RANKED_PATHS[:paths]
    if isinstance(paths, str) or not isinstance(paths, (list, tuple)) or not paths:
        raise ValueError(
            f"{what}: a tree template is a number of nodes (1..{len(RANKED_PATHS)}) or a non-empty list of rank "
            f"paths like ['0', '1', '00'], got {paths!r}"
        )
    seen: set[str] = set()
    for p in paths:
        if not isinstance(p, str) or not p or any(not ("0" <= c < str(MAX_RANK)) for c in p):
            raise ValueError(
                f"{what}: rank path {p!r} is not a string of digits 0-{MAX_RANK - 1} (quote them: '00', not 00)"
            )
        if p in seen:
            raise ValueError(f"{what}: rank path {p!r} appears twice")
        if len(p) > 1 and p[:-1] not in seen:
            raise ValueError(f"{what}: rank path {p!r} comes before its parent {p[:-1]!r}")
        seen.add(p)
    return tuple(paths)


class SuccessorTable:
    """Per token id, the ``k`` next tokens the target ranked highest after it, most recent call wins."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.next: dict[int, list[int]] = {}

    def observe(self, inputs: list[int], successors: list[list[int]]) -> None:
        """``successors[i]``: the target's likeliest next tokens (best first) at the position whose
        input token was ``inputs[i]``; later positions overwrite earlier ones."""
        for tok, succ in zip(inputs, successors):
            self.next[int(tok)] = list(succ[: self.k])

    def grow(self, last: int, template: tuple[str, ...], origin: str) -> DraftTree:
        """The template's tree hanging from ``last`` (nodes whose parent has no entry are left out)."""
        tree = DraftTree()
        node_of: dict[str, int] = {}
        token_of: dict[str, int] = {"": int(last)}
        for path in template:
            parent = path[:-1]
            if parent not in token_of:
                continue
            succ = self.next.get(token_of[parent])
            rank = int(path[-1])
            if succ is None or rank >= len(succ):
                continue
            tok = succ[rank]
            node_of[path] = tree.add(tok, node_of.get(parent, -1), None, origin, rank)
            token_of[path] = tok
        return tree


class RecycleDrafter(Drafter):
    """Token Recycling as a level drafting for the target: each round the template's tree from the
    successor table (module docstring)."""

    def __init__(self, template: int | list[str] | tuple[str, ...] = 3, name: str = "recycle") -> None:
        self.template = parse_template(template, f"level {name!r}")
        self.name = name
        self.table = SuccessorTable(1 + max(int(c) for p in self.template for c in p))

    @property
    def successors(self) -> int:
        return self.table.k

    @property
    def k(self) -> int:  # the deepest path
        return max(len(p) for p in self.template)

    @property
    def max_depth(self) -> int:
        return self.k

    def observe_successors(self, inputs: list[int], successors: list[list[int]]) -> None:
        self.table.observe(inputs, successors)

    def propose(self, contexts: list[list[int]], features: list[torch.Tensor] | None = None) -> list[DraftTree]:
        return [self.table.grow(ctx[-1], self.template, self.name) for ctx in contexts]
