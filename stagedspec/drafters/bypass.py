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

``prices`` (a ``RoutePrices``) replaces the fixed rule by a priced one: before each round
and for each row it estimates the tokens per unit of target time of the two proposals it can
make, the copy after the longest match (any match length from 1, cut to the length that prices
best) and the level below's draft, from what earlier rounds measured: for a copy's i-th token after
an m-token match, the match it would continue is m + i - 1 tokens long, and a_r, the chance that a
token continuing an r-token match is accepted (r = 1..8, 8 meaning 8 or more), counts the copied
tokens that continued an r-token match, accepted and rejected (prior r / (r + 1), worth
``copy_weight`` rounds), so a copy cut to L tokens is expected to have a_m + a_m a_(m+1) + ... +
a_m ... a_(m+L-1) accepted: a copy that has held for a while is priced as the long match it has
become (one acceptance per match length, the same for every position, sent sampled copies out in
short pieces: early rejections pulled down the one figure the long restatements were priced by);
for the level below the mean
accepted and its forwards per round, from a prior worth ``prior_weight`` rounds. Costs are counted in
plain target steps: a verification of n rows costs T(n) / T(1) from the machine's calibrated
cost curve when the run has one (``use_step_curve``: the target's kernel plan, timed on this
machine and cached, so a seeded run on one machine routes the same way each time; on a CPU
whose multi-row GEMM is compute-bound a long verification costs several steps, where on
another it costs little more than one), else ``1 + row_cost * n``; a forward of the level
below costs ``draft_cost`` (a setting). It sends the proposal with the higher
(accepted + 1) / cost. It reads only the context and earlier rounds' acceptance, so exactness
is kept, as for the rule.

``timed=True`` prices the same proposals in measured seconds, and a third one: no draft at all (a
plain target step, one token for T(1)). A verification's cost keeps the shape above (the curve or
the linear price) but its scale comes from the target calls the run has timed (the decoder's
``observe_round``); a plain step, which runs other code than a verification (the one-row layer
kernel), is priced at the one-row calls timed so far (averaged with the shape worth ``prior_weight``
calls). (Pricing every row count by its own timed calls was tried and dropped for this narrower
rule, the smaller change to the curve: against the best fixed method per test prompt it measured
0.815 / 0.820 / 0.695 on HumanEval T = 0 / MT-bench / HumanEval T = 0.7, this rule 0.832 / 0.800 /
0.719, the curve alone 0.896 / 0.842 / 0.903 before the several-row layer kernel; on 4 MT-bench dev
prompts this rule ran 0.92x plain decoding, the curve alone 0.64x.) A round below costs its own
measured seconds (the level's whole draft, its catch-up after skipped rounds included) where
``draft_cost`` guessed, verified at the mean size of its drafts instead of its largest; both start
from the untimed prices' prior worth ``prior_weight`` rounds. When neither a copy nor the level
below promises more tokens per second than a plain step, the round drafts nothing, except that once
``explore`` - 1 rounds drafted nothing since the level below last drafted, such a round goes below
anyway, so the router notices when drafting pays again (rounds of copies do not count: while copies
pay, a look below is not worth its catch-up). Timings are read only from earlier rounds, so exactness is kept; a
seeded sampled run no longer routes, and so samples, the same way twice.

``lazy_lower=True`` gives the level below the prompt only when a round first goes below (that
round's contexts, before its draft is timed): where copies and plain steps carry a whole answer, the
small model's prefill is never paid. The router leaves that prefill out of the first round's price;
``first_look`` (timed) instead keeps the first rounds off the level below until that many plain
steps were taken: an answer that opens with a few new tokens and then restates its prompt (a code
answer's fence, then the signature) is copied from there on, and the small model never runs. Nor does
``explore`` pay that prefill on a new prompt once rounds below, measured on earlier prompts, price under
a plain step (``explore_cold`` off, the default): on prose, where a round below costs more than it
returns, each prompt would otherwise pay the small model's prefill and catch-up every ``explore`` rounds
for nothing.

Batch: the level below drafts for every row or none (its caches hold every row), so when
some row has no long match, the rows that have one still take their copy and the level
below's draft for them is dropped (it is only work; it changes nothing).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from stagedspec.engine.drafter_protocol import Drafter
from stagedspec.engine.tree import DraftTree
from .recycle import RecycleDrafter


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


@dataclass(frozen=True)
class RoutePrices:
    """The priced router's costs, in plain target steps, and its priors (module docstring)."""

    row_cost: float = 0.02
    """Extra cost of each verified row, T(n) / T(1) = 1 + row_cost * n, where the run has no
    calibrated cost curve (``BypassDrafter.use_step_curve``)."""
    draft_cost: float = 0.35
    """Cost of one forward of the level below, against one plain target step."""
    prior_weight: float = 2.0
    """Rounds' worth of each estimate's prior: copies after an m-token match a per-token
    acceptance of m / (m + 1), a round below ``prior_accepted`` accepted with
    ``prior_accepted + 1`` forwards."""
    prior_accepted: float = 4.0
    copy_weight: float = 0.5
    """Rounds' worth of the copies' prior (r / (r + 1) per token continuing an r-token match): lighter
    than ``prior_weight``, since a copy's first rounds say much about the next (a restated
    signature is copied whole); chosen on the dev split (docs/tuning/)."""
    explore: float = 16
    """``timed``: a round that would draft nothing goes below anyway when this many rounds less one
    drafted nothing since the level below last drafted (rounds of copies do not count; 0: never)."""
    first_look: float = 6
    """``timed`` with ``lazy_lower``: before the level below has the prompt, a round goes below only
    once this many rounds drafted nothing (plain steps; rounds of copies do not count); until then a
    round copies or takes a plain step. The first round below pays the level's prefill, which its
    price leaves out (0: priced as any round)."""
    explore_cold: bool = False
    """``timed`` with ``lazy_lower``: whether ``explore`` also sends a round to a level below that has
    not had this prompt yet (paying its prefill) once rounds below measured on earlier prompts price
    under a plain step. False: such a prompt goes below only where the price says so (rounds below
    never measured, or measured to pay); a level below that has the prompt is explored as before."""
    copy_decay: float = 1.0
    """Each round multiplies the copies' kept counts (accepted, rejected, per match length) by this factor
    (0 < d <= 1): older rounds weigh less, so copies priced on one prompt's long restatements are priced
    down within a few rounds on a prompt whose copies fail, and counts that sent the router to plain
    steps fade back to the prior. 1: every round counts alike (before 2026-12-07)."""
    copy_own: float = 8.0
    """Each sequence's copies also priced by its own record: a copied token continuing an m-token match is
    accepted with (its sequence's accepted + w a) / (its sequence's accepted + rejected + w) at that match
    length, a the job's pooled acceptance there (``copy_alpha``) and w this weight, in tokens. A text that does
    not restate its prompt (a sampled answer that wanders off) prices its own short copies down within a few
    rejections while the job's pool still holds copying texts' record. 0: the pool alone (before 2026-12-08);
    8 chosen on the dev split against 0 and 2 (docs/tuning/README.md)."""
    recycle_accepted: float = 1.0
    """``timed`` with a recycle tree (``BypassDrafter(recycle=...)``): the prior of its accepted tokens
    per round, worth ``prior_weight`` rounds."""


MATCH_BUCKETS = 8
"""A copied token is priced by the length of the match it continues: 1..7, and 8 or more."""


class _RouteStats:
    """Running sums the priced router learns from: per match length, copies' accepted
    tokens; for the level below, accepted tokens and forwards per round."""

    def __init__(self, prices: RoutePrices) -> None:
        self.prices = prices
        self.curve: tuple[float, ...] = ()
        """T(n) / T(1) for n = 1..len (``use_step_curve``); () for the linear ``row_cost``."""
        self.copy_acc, self.copy_short = [0.0] * (MATCH_BUCKETS + 1), [0.0] * (MATCH_BUCKETS + 1)
        self.low_sum, self.low_forwards, self.low_n = 0.0, 0.0, 0
        self.timed = False
        """Costs from measured seconds (``BypassDrafter(timed=True)``)."""
        self.verify_s, self.verify_units = 0.0, 0.0  # timed target calls: seconds, their shape_cost
        self.rows_s: dict[int, list[float]] = {}  # timed one-row target calls: {1: [seconds, calls]}
        self.low_s, self.low_nodes = 0.0, 0.0  # timed rounds below: seconds of the draft, its nodes
        self.rec_sum, self.rec_n = 0.0, 0  # rounds of recycle trees: accepted tokens, rounds
        self.row_acc: list[list[float]] = []  # per row (sequence): copies' accepted / rejected per match length
        self.row_short: list[list[float]] = []

    def reset_rows(self, batch_size: int) -> None:
        """New sequences: their own copy records start empty (``copy_own``)."""
        self.row_acc = [[0.0] * (MATCH_BUCKETS + 1) for _ in range(batch_size)]
        self.row_short = [[0.0] * (MATCH_BUCKETS + 1) for _ in range(batch_size)]

    def keep_rows(self, rows: list[int]) -> None:
        if self.row_acc:
            self.row_acc = [self.row_acc[r] for r in rows]
            self.row_short = [self.row_short[r] for r in rows]

    def step_seconds(self) -> float | None:
        """Seconds of one plain target step (T(1)) measured so far: the timed calls' seconds over
        their costs in steps; None before the first."""
        return self.verify_s / self.verify_units if self.verify_units else None

    def verify_cost(self, rows: int) -> float:
        """A verification of ``rows`` rows in plain target steps: ``shape_cost``; timed, a plain
        step (one row) once one was timed: the one-row calls measured so far (in units of
        ``step_seconds``) averaged with ``shape_cost(1)`` worth ``prior_weight`` calls. A one-row
        step runs other code than a verification (the one-row layer kernel), so its price is
        measured, not read off the GEMMs' curve; verifications keep the curve's shape, so a row
        count the router has stopped sending is not priced from the others' scale alone."""
        shape = self.shape_cost(rows)
        step = self.step_seconds() if self.timed and rows == 1 else None
        got = self.rows_s.get(1) if step else None
        if not got:
            return shape
        w = self.prices.prior_weight
        return (got[0] / step + w * shape) / (got[1] + w)

    def shape_cost(self, rows: int) -> float:
        """A verification of ``rows`` rows in plain target steps before any timing: the calibrated
        curve (past its end, extended along its last step), else ``1 + row_cost * rows``."""
        c = self.curve
        if not c:
            return 1 + self.prices.row_cost * rows
        if rows <= len(c):
            return c[rows - 1]
        slope = c[-1] - c[-2] if len(c) > 1 else 0.0
        return c[-1] + slope * (rows - len(c))

    def copy_alpha(self, match: int, row: int | None = None) -> float:
        """Acceptance of a copied token that continues an m-token match: accepted / (accepted +
        rejected) among such tokens, from a prior of m accepted per rejection worth ``copy_weight``
        rounds; with ``copy_own`` and a ``row``, that row's own record with this as its prior."""
        b, w = min(match, MATCH_BUCKETS), self.prices.copy_weight
        pooled = (self.copy_acc[b] + w * b) / (self.copy_acc[b] + self.copy_short[b] + w * (b + 1))
        own = self.prices.copy_own
        if own <= 0 or row is None or row >= len(self.row_acc):
            return pooled
        acc, short = self.row_acc[row][b], self.row_short[row][b]
        return (acc + own * pooled) / (acc + short + own)

    def copy_offer(self, match: int, length: int, row: int | None = None) -> tuple[float, int]:
        """(rate, L): the copy's best (expected accepted + 1) / T(L + 1) over its cuts L =
        1..length, the expected accepted of a cut a_m + a_m a_(m+1) + ... (``copy_alpha``: the
        i-th token continues an (m + i - 1)-token match)."""
        best, best_len, expected, power = -1.0, 1, 0.0, 1.0
        for n in range(1, length + 1):
            power *= self.copy_alpha(match + n - 1, row)
            expected += power
            rate = (expected + 1) / self.verify_cost(n + 1)
            if rate > best:
                best, best_len = rate, n
        return best, best_len

    def lower_rate(self, depth: int) -> float:
        """(expected accepted + 1) / cost of a round below. Untimed: verified at ``depth`` nodes,
        drafted at ``draft_cost`` a forward. Timed: verified at the mean nodes of its drafts
        (prior ``depth``), drafted at its mean measured seconds over the measured plain step
        (prior ``draft_cost`` a forward), each from a prior worth ``prior_weight`` rounds."""
        p, w = self.prices, self.prices.prior_weight
        accepted = (self.low_sum + w * p.prior_accepted) / (self.low_n + w)
        forwards = (self.low_forwards + w * (p.prior_accepted + 1)) / (self.low_n + w)
        step = self.step_seconds() if self.timed else None
        if step is None:
            return (accepted + 1) / (self.verify_cost(depth + 1) + p.draft_cost * forwards)
        nodes = (self.low_nodes + w * depth) / (self.low_n + w)
        draft = (self.low_s / step + w * p.draft_cost * (p.prior_accepted + 1)) / (self.low_n + w)
        return (accepted + 1) / (self._cost(nodes + 1) + draft)

    def _cost(self, rows: float) -> float:
        """``verify_cost`` at a fractional row count (linear between its neighbours)."""
        lo = max(1, int(rows))
        f = rows - lo
        return self.verify_cost(lo) * (1 - f) + self.verify_cost(lo + 1) * f if f else self.verify_cost(lo)

    def plain_rate(self) -> float:
        """One token for one plain step."""
        return 1 / self.verify_cost(1)

    def recycle_rate(self, nodes: int) -> float:
        """(expected accepted + 1) / cost of a recycle tree of ``nodes`` nodes: its rounds' mean
        accepted from a prior of ``recycle_accepted`` worth ``prior_weight`` rounds."""
        p, w = self.prices, self.prices.prior_weight
        accepted = (self.rec_sum + w * p.recycle_accepted) / (self.rec_n + w)
        return (accepted + 1) / self.verify_cost(nodes + 1)

    def observe_target(self, seconds: float, rows: int) -> None:
        """A timed target call that verified ``rows`` rows (the widest row's)."""
        self.verify_s += seconds
        self.verify_units += self.shape_cost(rows)
        if rows == 1:
            got = self.rows_s.setdefault(1, [0.0, 0])
            got[0] += seconds
            got[1] += 1

    def forget(self) -> None:
        """One round passes: the copies' counts shrink by ``copy_decay``."""
        g = self.prices.copy_decay
        if g < 1.0:
            self.copy_acc = [x * g for x in self.copy_acc]
            self.copy_short = [x * g for x in self.copy_short]

    def record(
        self, route: tuple[str, int, int], accepted: int, forwards: float, seconds: float = 0.0, row: int | None = None
    ) -> None:
        """One row's round: ``route`` (kind, match, tokens offered), what was accepted, the
        forwards and seconds of the level below that round; ``row``: whose (its own copy record)."""
        kind, match, offered = route
        if kind == "copy":  # the i-th token continued an (m + i - 1)-token match: in the pool, and the row's own
            records = [(self.copy_acc, self.copy_short)]
            if row is not None and row < len(self.row_acc):
                records.append((self.row_acc[row], self.row_short[row]))
            for acc, short in records:
                for i in range(accepted):
                    acc[min(match + i, MATCH_BUCKETS)] += 1
                if accepted < offered:
                    short[min(match + accepted, MATCH_BUCKETS)] += 1
        elif kind == "lower":
            self.low_sum += accepted
            self.low_forwards += forwards
            self.low_n += 1
            self.low_s += seconds
            self.low_nodes += offered
        elif kind == "recycle":
            self.rec_sum += accepted
            self.rec_n += 1


class BypassDrafter(Drafter):
    def __init__(
        self,
        lower: Drafter | None,
        k: int = 24,
        min_match: int = 8,
        max_match: int = 32,
        name: str = "copy",
        miss_below: int = 0,
        prices: RoutePrices | None = None,
        cost_curve: bool = False,
        timed: bool = False,
        lazy_lower: bool = False,
        recycle: RecycleDrafter | None = None,
    ) -> None:
        if timed and prices is None:
            raise ValueError(f"{name}: timed routing prices each round; give it prices (RoutePrices())")
        if recycle is not None and not timed:
            raise ValueError(f"{name}: a recycle tree is priced against a plain step; it needs timed routing")
        self.recycle = recycle
        """Token Recycling's trees (``drafters/recycle.py``), offered where a round would otherwise
        take a plain step and the tree prices above it."""
        self.lower, self.k, self.min_match, self.max_match, self.name = lower, k, min_match, max_match, name
        self.miss_below = miss_below
        self.lazy_lower = lazy_lower
        """The level below gets the prompt only when a round first goes below (``prefill``)."""
        self._lower_waits = False  # lazy_lower: the level below has not had the prompt yet
        self.prices = prices
        self.cost_curve = cost_curve
        """The job hands this router the target's calibrated cost curve (``use_step_curve``)."""
        self._stats = _RouteStats(prices) if prices is not None else None
        if self._stats is not None:
            self._stats.timed = timed
        self._since_lower = 0  # rounds that drafted nothing since the level below last drafted (``_count_round``)
        self._round_seconds = 0.0  # seconds of the level below's draft in the last round
        self._routes: list[tuple[str, int, int]] = []  # per row: ("copy", match, length) / ("lower", 0, 0)
        self._round_forwards = (
            0.0  # forwards of the level below in the last round (one batched forward serves every row)
        )
        self.decisions = {"copy": 0, "lower": 0, "plain": 0} | ({"recycle": 0} if recycle is not None else {})
        """Rounds and rows routed each way (the priced router's log; the rule counts too)."""
        self.calls = 0
        self.seconds = 0.0
        self._copied: list[bool] = []  # per row: its last round was a copy
        self._cold: list[bool] = []  # per row: that copy missed (fewer than miss_below accepted)

    def reset(self, batch_size: int) -> None:
        self._lower_waits = False
        self._copied, self._cold = [False] * batch_size, [False] * batch_size
        self._routes = []
        self._since_lower = 0
        if self._stats is not None:
            self._stats.reset_rows(batch_size)
        super().reset(batch_size)

    def keep_rows(self, rows: list[int]) -> None:
        self._copied = [self._copied[r] for r in rows] if self._copied else []
        self._cold = [self._cold[r] for r in rows] if self._cold else []
        self._routes = [self._routes[r] for r in rows] if self._routes else []
        if self._stats is not None:
            self._stats.keep_rows(rows)
        super().keep_rows(rows)

    def feedback(self, accepted: list[int]) -> None:
        if self.miss_below and len(self._copied) == len(accepted):
            self._cold = [c and a < self.miss_below for c, a in zip(self._copied, accepted)]
        if self._stats is not None and len(self._routes) == len(accepted):
            self._stats.forget()
            for row, (route, a) in enumerate(zip(self._routes, accepted)):
                self._stats.record(route, a, self._round_forwards, self._round_seconds, row)

    def prefill(self, contexts: list[list[int]]) -> None:
        """With ``lazy_lower``, nothing: the level below (a model's cache filled with the whole
        prompt) gets the contexts of the round that first goes below, before that round's draft
        is timed; a job whose rounds never go below never pays for it."""
        if self.lazy_lower and self.lower is not None:
            self._lower_waits = True
            return
        super().prefill(contexts)

    @property
    def timed(self) -> bool:
        """Costs from measured seconds, and the plain step priced as a third proposal."""
        return self._stats is not None and self._stats.timed

    @property
    def successors(self) -> int:  # the recycle table's, handed over by the decoder
        return self.recycle.successors if self.recycle is not None else 0

    def observe_successors(self, inputs: list[int], successors: list[list[int]]) -> None:
        if self.recycle is not None:
            self.recycle.observe_successors(inputs, successors)

    def observe_round(self, verify_seconds: float, rows: int) -> None:
        if self.timed:
            self._stats.observe_target(verify_seconds, rows)

    def use_step_curve(self, curve: tuple[float, ...]) -> None:
        """Price verifications by ``curve`` (T(n) / T(1), n = 1..len: the target's calibrated
        kernel plan, ``KernelChoice.step_curve``) instead of the linear ``row_cost``; the rule
        ignores it. Non-decreasing, starting at 1, or a clear error."""
        if curve and (abs(curve[0] - 1) > 1e-9 or any(b < a for a, b in zip(curve, curve[1:]))):
            raise ValueError(f"{self.name}: a step curve starts at 1 and never falls, got {list(curve)[:6]}...")
        if self._stats is not None:
            self._stats.curve = tuple(curve)

    def forward_stats(self) -> tuple[float, int]:
        """A draft 'forward' here is one batch of look-ups."""
        return self.seconds, self.calls

    @property
    def max_depth(self) -> int:
        return max(self.k, self.lower.max_depth if self.lower is not None else 0)

    def copies(self, contexts: list[list[int]]) -> list[list[int]]:
        """Per row, the verbatim continuation it would offer ([] when no long match)."""
        return [cont for cont, _ in self._matches(contexts, self.min_match)]

    def _matches(self, contexts: list[list[int]], min_match: int) -> list[tuple[list[int], int]]:
        out = []
        for ctx in contexts:
            length, end = longest_match(ctx, self.max_match, min_match)
            out.append((list(ctx[end : end + self.k]), length) if length else ([], 0))
        return out

    def _priced_copies(self, contexts: list[list[int]]) -> list[list[int] | DraftTree | None]:
        """Per row, the copy cut to its best-priced length where that prices above the level
        below's draft (and, timed, above a plain step), [] for the level below, None (timed) for
        no draft, or (timed, with ``recycle``) a recycle tree where a row would take a plain step
        and the tree prices above one."""
        below = self.lower.max_depth if self.lower is not None else 0
        stats = self._stats
        if self.timed and self._lower_waits and self._since_lower < stats.prices.first_look:
            lower_rate = -1.0  # first_look: not yet worth the level below's prefill
        else:
            lower_rate = stats.lower_rate(below) if self.lower is not None else 0.0
        plain_rate = stats.plain_rate() if self.timed else 0.0
        grown = self.recycle.propose(contexts) if self.recycle is not None and self.timed else []
        full = len(self.recycle.template) if grown else 0
        alt_rate = max(plain_rate, stats.recycle_rate(full) if full else 0.0)
        plain = self.timed and max(lower_rate, 0.0) < alt_rate
        cold = self._lower_waits and stats.low_n > 0 and not stats.prices.explore_cold
        if plain and self.lower is not None and self._since_lower + 1 >= stats.prices.explore > 0 and not cold:
            plain = False  # explore: try the level below again
        out: list[list[int] | DraftTree | None] = []
        self._routes = []
        for b, (cont, match) in enumerate(self._matches(contexts, 1)):
            rate, cut = stats.copy_offer(match, len(cont), b) if cont else (0.0, 0)
            tree = grown[b] if grown and len(grown[b]) else None
            tree_rate = stats.recycle_rate(len(tree)) if tree is not None else 0.0
            if cont and rate > lower_rate and (not plain or rate > max(plain_rate, tree_rate)):
                out.append(cont[:cut])
                self._routes.append(("copy", match, cut))
            elif plain and tree is not None and tree_rate > plain_rate:
                out.append(tree)
                self._routes.append(("recycle", 0, len(tree)))
            elif plain:
                out.append(None)
                self._routes.append(("plain", 0, 0))
            else:
                out.append([])
                self._routes.append(("lower", 0, 0))
        return out

    def _count_round(self, copies: list[list[int] | DraftTree | None], goes_below: bool) -> None:
        """``explore``'s clock: rounds where some row drafted nothing (or a recycle tree), since the
        level below last drafted. Rounds carried by copies leave it alone: while copies pay, the level
        below is not worth a look (v19: a 96-token answer copied in 16 rounds explored at the 16th, its
        lazy prefill and catch-up 0.5-0.8 s for no token)."""
        if goes_below:
            self._since_lower = 0
        elif any(not isinstance(c, list) for c in copies):
            self._since_lower += 1

    def propose(self, contexts: list[list[int]], features: list[torch.Tensor] | None = None) -> list[DraftTree]:
        t0 = time.perf_counter()
        self.calls += 1
        copies = self.copies(contexts) if self._stats is None else self._priced_copies(contexts)
        if self.miss_below and self.lower is not None and len(self._cold) == len(contexts):
            copies = [[] if cold and isinstance(c, list) else c for c, cold in zip(copies, self._cold)]
        self._copied = [isinstance(c, list) and bool(c) for c in copies]
        self.seconds += time.perf_counter() - t0
        trees: list[DraftTree | None] = [None] * len(contexts)
        for b, cont in enumerate(copies):
            if isinstance(cont, DraftTree):
                cont.owner = self.recycle.name
                trees[b] = cont
            elif cont:
                tree = DraftTree()
                node = -1
                for tok in cont:
                    node = tree.add(tok, node, None, self.name)
                trees[b] = tree
        self._round_forwards = self._round_seconds = 0.0
        goes_below = any(isinstance(c, list) and not c for c in copies)
        if self.lower is not None and goes_below:
            if self._lower_waits:  # untimed by the router: a one-off, not the price of a round below
                self._lower_waits = False
                self.lower.prefill(contexts)
            calls = self.lower.forward_stats()[1]
            t1 = time.perf_counter()
            lowered = self.lower.propose(contexts, features)
            self._round_seconds = time.perf_counter() - t1
            self._round_forwards = float(self.lower.forward_stats()[1] - calls)
            for b, cont in enumerate(copies):
                if isinstance(cont, list) and not cont:
                    lowered[b].owner = self.lower.name
                    trees[b] = lowered[b]
                    if self._routes:
                        self._routes[b] = ("lower", 0, len(lowered[b].tokens))
        self._count_round(copies, goes_below)
        for cont in copies:
            kind = (
                "plain" if cont is None else "recycle" if isinstance(cont, DraftTree) else "copy" if cont else "lower"
            )
            self.decisions[kind] += 1
        return [t if t is not None else DraftTree() for t in trees]
