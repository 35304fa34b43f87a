"""The bypass level's routing rule, by hand: copy on a match, and with ``miss_below`` hand
the round after a missed copy to the level below."""

from __future__ import annotations

from stagedspec.drafters import BypassDrafter
from stagedspec.engine.drafter_protocol import Drafter
from stagedspec.engine.tree import DraftTree


class Below(Drafter):
    """Proposes token 99 to every row; counts its calls."""

    name = "below"

    def __init__(self):
        self.calls = 0

    def propose(self, contexts, features=None):
        self.calls += 1
        out = []
        for _ in contexts:
            t = DraftTree()
            t.add(99, -1, None, self.name)
            out.append(t)
        return out


def _tokens(tree: DraftTree) -> list[int]:
    return list(tree.tokens)


def test_after_a_missed_copy_the_next_round_goes_below():
    below = Below()
    d = BypassDrafter(below, k=3, min_match=2, miss_below=2)
    d.reset(2)
    # row 0 repeats "1 2": a copy of what followed ("3 4 1"); row 1 has no match of 2 tokens
    ctx = [[1, 2, 3, 4, 1, 2], [5, 6, 7]]
    first = d.propose(ctx)
    assert _tokens(first[0]) == [3, 4, 1] and first[0].owner != "below"
    assert _tokens(first[1]) == [99] and below.calls == 1
    d.feedback([1, 0])  # row 0's copy: 1 of 3 accepted (< 2: a miss); row 1 was below's round
    second = d.propose(ctx)
    assert _tokens(second[0]) == [99] and _tokens(second[1]) == [99] and below.calls == 2
    d.feedback([1, 1])  # both rounds were below's: row 0 may copy again
    third = d.propose(ctx)
    assert _tokens(third[0]) == [3, 4, 1]
    d.feedback([2, 0])  # 2 accepted: not a miss
    assert _tokens(d.propose(ctx)[0]) == [3, 4, 1]
    d.keep_rows([1])  # row 1 alone goes on: its state is kept, row 0's dropped
    assert d._cold == [False] and _tokens(d.propose([[5, 6, 7]])[0]) == [99]


def test_without_miss_below_a_match_always_copies():
    below = Below()
    d = BypassDrafter(below, k=3, min_match=2)
    d.reset(1)
    ctx = [[1, 2, 3, 4, 1, 2]]
    for _ in range(3):
        assert _tokens(d.propose(ctx)[0]) == [3, 4, 1]
        d.feedback([0])
    assert below.calls == 0
