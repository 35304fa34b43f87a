"""Per-round and per-sequence statistics of speculative decoding, and the metric definitions.

vLLM's speculative-decoding metrics, word for word, so numbers compare with theirs:

- draft acceptance rate = accepted / drafted (``acceptance_rate/<level>``: tokens a level
  proposed to the level above it, and how many that level kept; ``acceptance_rate`` for
  the level that drafts for the target);
- mean acceptance length = 1 + accepted / drafts (``mean_acceptance_length``): drafts =
  verification rounds, one per sequence per round; the bonus or resampled token counts;
  it does not see ``max_new_tokens`` or EOS. ``mean_accepted_tokens_per_call`` is the
  same number under its older name;
- system efficiency = emitted / positions the target scored (for a chain of k drafts,
  positions = k + 1 per round, which is vLLM's ``rounds * (k + 1)``);
- per-position acceptance (``position_acceptance/<i>``): of the rounds that *tested* a
  draft token at depth i (the walk stood at depth i - 1 on a node with children), the
  share that accepted one there.

Ours, each named for what it is:

- ``mean_emitted_tokens_per_call`` = emitted / drafts: tokens appended per verification,
  cut by ``max_new_tokens`` and EOS (so below the mean acceptance length);
- ``alpha_hat`` = accepted / (accepted + rejections): a consistent estimate of the
  per-token acceptance probability alpha of an i.i.d. model. Every test the target
  makes either accepts (counted in accepted) or rejects and ends the round (a
  rejection); a round that ran out of draft ends without a test. accepted / drafted is
  *not* alpha: it is alpha (1 - alpha^k) / (k (1 - alpha)) for a chain of k, so a theory
  fed with it falls with k by construction;
- ``iid_tokens_per_call``: 1 + alpha_hat + ... + alpha_hat^d averaged over the
  rounds, d the depth of each round's draft (k for a chain): what the i.i.d. model
  gives for the mean acceptance length, from this run's alpha_hat and draft shapes (in
  sample; ``predicted_*`` are reserved for the out-of-sample ``cost_model`` prediction);
- ``draft_calls/<level>``: the level's forwards over the whole batch (a batch of look-ups
  for a model-free level), counted once per batch round, never once per row;
  ``draft_call_s/<level>``: seconds per such call; ``target_call_s``: seconds per target
  forward; ``verify_s/<n>``: mean seconds of the verification phase of the batch rounds
  whose widest row scored n positions (root + draft nodes).

Everything here is plain Python: no torch, Hydra or MLflow, so analysis code can use it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field


def geometric_tokens(alpha: float, depth: int) -> float:
    """1 + alpha + ... + alpha^depth: expected tokens per verification of a chain of
    ``depth`` drafts when each is accepted with probability alpha, independently
    (Leviathan et al. 2023, eq. 1), the bonus token included."""
    return float(sum(alpha**i for i in range(depth + 1)))


@dataclass
class RoundStats:
    """What one verification round did for one sequence."""

    drafted: dict[str, int] = field(default_factory=dict)
    """Tokens each draft level proposed to the level above it in this round."""
    accepted: dict[str, int] = field(default_factory=dict)
    """Of ``drafted``, how many the level above kept (for a level below a staged level:
    the tokens it offered upward, i.e. those within the staged level's k)."""
    emitted: int = 0
    """Tokens appended to the output (accepted drafts + the target's own token)."""
    target_positions: int = 0
    """Positions the target scored for this sequence (root + draft nodes)."""
    accepted_depth: int = 0
    """Draft tokens the target accepted (depth of the accepted path in the tree)."""
    rejected: bool = False
    """The target tested a draft token after the accepted path and rejected it (every
    candidate there); False when the walk ended on a node without children."""
    draft_depth: int = 0
    """Depth of the draft tree (k for a chain; 0 without a draft)."""
    tree_nodes: int = 0
    """Draft nodes sent to the target (= draft length for a chain)."""
    padding_positions: int = 0
    """Positions scored only to pad this sequence up to the batch's widest row."""
    drafter: str | None = None
    """The level whose draft the target verified this round (a router's choice: its copy, or
    the level below it); None without a draft."""

    @property
    def wasted_target_positions(self) -> int:
        """Positions the target scored whose result was thrown away."""
        return self.target_positions - self.emitted

    @property
    def tests(self) -> int:
        """Draft depths the target tested: each accepted one, plus the rejection if any."""
        return self.accepted_depth + int(self.rejected)


@dataclass
class PhaseTimes:
    """One batch round: its wall time split by phase (seconds), and what it computed."""

    draft: float = 0.0
    verify: float = 0.0
    overhead: float = 0.0
    draft_calls: dict[str, int] = field(default_factory=dict)
    """Forwards each draft level made over the batch in this round (a batch of look-ups
    for a model-free level)."""
    rows: int = 0
    """Sequences in the batch this round."""
    width: int = 0
    """Positions the target scored per row: the widest row's tail + draft nodes."""

    @property
    def total(self) -> float:
        return self.draft + self.verify + self.overhead


@dataclass
class SequenceResult:
    """One sequence's output and its per-round record."""

    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    provenance: list[str] = field(default_factory=list)
    """For each output token, the level that proposed it (``"target"`` for its own)."""
    rounds: list[RoundStats] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)
    """Index i: rounds that accepted a draft token at depth i + 1."""
    position_reached: list[int] = field(default_factory=list)
    """Index i: rounds that tested a draft token at depth i + 1."""
    finished_reason: str = ""
    draft_level: str | None = None
    """Name of the level that drafts directly for the target (None for plain decoding)."""

    def record(self, r: RoundStats) -> None:
        """Add one round. Depth i + 1 was tested when the first i were accepted and the
        node reached had children: every accepted depth, plus the rejected one."""
        self.rounds.append(r)
        while len(self.position_reached) < r.tests:
            self.position_reached.append(0)
            self.position_accepted.append(0)
        for i in range(r.tests):
            self.position_reached[i] += 1
        for i in range(r.accepted_depth):
            self.position_accepted[i] += 1

    def summary(self) -> dict[str, float]:
        return summarize([self])


@dataclass
class GenerationResult:
    """A batch's sequences plus the wall time of each batch round."""

    sequences: list[SequenceResult]
    phase_times: list[PhaseTimes] = field(default_factory=list)
    target_calls: int = 0
    """Target forward passes over the batch (prefill excluded)."""
    prefill_time: float = 0.0
    wall_time: float = 0.0
    """Total wall time of ``generate`` including prefill."""
    draft_call_time: dict[str, float] = field(default_factory=dict)
    """Seconds spent inside each draft level's own forwards (look-ups for a model-free level)."""
    draft_forwards: dict[str, int] = field(default_factory=dict)
    target_forward_time: float = 0.0
    """Seconds spent inside target forwards during rounds (prefill excluded)."""

    @classmethod
    def merge(cls, results: list[GenerationResult]) -> GenerationResult:
        """One result holding all sequences, with times and counts summed."""
        out = cls(sequences=[])
        for r in results:
            out.sequences.extend(r.sequences)
            out.phase_times.extend(r.phase_times)
            out.target_calls += r.target_calls
            out.prefill_time += r.prefill_time
            out.wall_time += r.wall_time
            out.target_forward_time += r.target_forward_time
            for k, v in r.draft_call_time.items():
                out.draft_call_time[k] = out.draft_call_time.get(k, 0.0) + v
            for k, n in r.draft_forwards.items():
                out.draft_forwards[k] = out.draft_forwards.get(k, 0) + n
        return out

    @property
    def emitted(self) -> int:
        return sum(len(s.output_ids) for s in self.sequences)

    def summary(self) -> dict[str, float]:
        """``summarize`` over the sequences, then what only the batch knows: times, and
        counts of forwards, which a batch shares between its rows."""
        out = summarize(self.sequences)
        out["tokens_per_s"] = self.emitted / self.wall_time if self.wall_time > 0 else 0.0
        out["wall_time_s"] = self.wall_time
        out["prefill_time_s"] = self.prefill_time
        t = PhaseTimes()
        calls: Counter[str] = Counter()
        by_width: dict[int, list[float]] = defaultdict(list)
        for p in self.phase_times:
            t.draft += p.draft
            t.verify += p.verify
            t.overhead += p.overhead
            calls.update(p.draft_calls)
            by_width[p.width].append(p.verify)
        round_time = t.total
        n_rounds = len(self.phase_times)
        out["time_draft_s"] = t.draft
        out["time_verify_s"] = t.verify
        out["time_overhead_s"] = t.overhead
        forward_time = self.target_forward_time + sum(self.draft_call_time.values())
        out["share_outside_forwards"] = max(0.0, round_time - forward_time) / round_time if round_time > 0 else 0.0
        out["target_calls"] = float(self.target_calls)
        out["batch_target_calls"] = float(self.target_calls)
        out["batch_rounds"] = float(n_rounds)
        if n_rounds:
            out["round_s"] = round_time / n_rounds
        if self.target_calls:
            out["target_call_s"] = self.target_forward_time / self.target_calls
        for level, n in calls.items():
            out[f"draft_calls/{level}"] = float(n)
            out[f"draft_calls_per_round/{level}"] = n / n_rounds
        for level, secs in self.draft_call_time.items():
            n = self.draft_forwards.get(level, 0)
            if n:
                out[f"draft_call_s/{level}"] = secs / n
        for width, secs in sorted(by_width.items()):
            if width:
                out[f"verify_s/{width}"] = sum(secs) / len(secs)
        return out


@dataclass
class _Totals:
    """``summarize``'s counts, summed over sequences and their rounds."""

    drafted: Counter[str] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)
    provenance: Counter[str] = field(default_factory=Counter)
    drafters: Counter[str] = field(default_factory=Counter)
    """Rounds per level whose draft the target verified (``RoundStats.drafter``)."""
    undrafted: int = 0
    """Rounds of a speculative run that drafted nothing (a timed router's plain steps)."""
    emitted: int = 0
    positions: int = 0
    padding: int = 0
    nodes: int = 0
    rounds: int = 0
    depth: int = 0
    """Draft tokens the target accepted, summed over rounds."""
    rejections: int = 0
    depths: Counter[int] = field(default_factory=Counter)
    """Rounds per draft depth."""
    reached: list[int] = field(default_factory=list)
    """Index i: rounds that tested a draft token at depth i + 1."""
    accepted_at: list[int] = field(default_factory=list)
    """Index i: rounds that accepted a draft token at depth i + 1."""

    @classmethod
    def count(cls, sequences: list[SequenceResult]) -> _Totals:
        t = cls()
        for s in sequences:
            t.provenance.update(s.provenance)
            for r in s.rounds:
                t.drafted.update(r.drafted)
                t.accepted.update(r.accepted)
                if r.drafter is not None:
                    t.drafters[r.drafter] += 1
                elif s.draft_level is not None and not r.tree_nodes:
                    t.undrafted += 1
                t.emitted += r.emitted
                t.positions += r.target_positions
                t.padding += r.padding_positions
                t.nodes += r.tree_nodes
                t.depth += r.accepted_depth
                t.rejections += int(r.rejected)
                t.depths[r.draft_depth] += 1
                t.rounds += 1
            for i, (n_reached, n_acc) in enumerate(zip(s.position_reached, s.position_accepted)):
                if i >= len(t.reached):
                    t.reached.append(0)
                    t.accepted_at.append(0)
                t.reached[i] += n_reached
                t.accepted_at[i] += n_acc
        return t


def summarize(sequences: list[SequenceResult]) -> dict[str, float]:
    """Aggregate metrics over sequences (counts are summed, then divided)."""
    t = _Totals.count(sequences)
    rounds, emitted, positions, depth = t.rounds, t.emitted, t.positions, t.depth
    acceptance_length = 1.0 + depth / rounds if rounds else 0.0
    out: dict[str, float] = {
        "rounds": float(rounds),
        "emitted": float(emitted),
        "target_calls": float(rounds),
        "mean_acceptance_length": acceptance_length,
        "mean_accepted_tokens_per_call": acceptance_length,
        "mean_emitted_tokens_per_call": emitted / rounds if rounds else 0.0,
        "system_efficiency": emitted / positions if positions else 0.0,
        "tree_nodes_per_call": t.nodes / rounds if rounds else 0.0,
        "accepted_depth_per_call": depth / rounds if rounds else 0.0,
        "wasted_target_fraction": (positions - emitted) / positions if positions else 0.0,
        "padding_fraction": t.padding / (positions + t.padding) if positions + t.padding else 0.0,
    }
    out |= _level_metrics(t, sequences)
    if depth + t.rejections:
        alpha = depth / (depth + t.rejections)
        out["alpha_hat"] = alpha
        out["rejections"] = float(t.rejections)
        out["iid_tokens_per_call"] = sum(n * geometric_tokens(alpha, d) for d, n in t.depths.items()) / rounds
    for i, (n_reached, n_acc) in enumerate(zip(t.reached, t.accepted_at)):
        out[f"position_acceptance/{i + 1}"] = n_acc / n_reached if n_reached else 0.0
    total_prov = sum(t.provenance.values())
    for level, n in t.provenance.items():
        out[f"provenance/{level}"] = n / total_prov if total_prov else 0.0
    drafted_rounds = sum(t.drafters.values())
    for level, n in t.drafters.items():  # a router's decisions: the share of drafted rounds each level drafted
        out[f"routed/{level}"] = n / drafted_rounds
    if t.undrafted:
        out["undrafted_rounds"] = t.undrafted / t.rounds
    return out


def _level_metrics(t: _Totals, sequences: list[SequenceResult]) -> dict[str, float]:
    """Per draft level: tokens drafted and accepted, their rate and the wasted share; and
    ``acceptance_rate``, the rate of the level right below the target."""
    out: dict[str, float] = {}
    for level in t.drafted:
        d, a = t.drafted[level], t.accepted[level]
        out[f"drafted/{level}"] = float(d)
        out[f"accepted/{level}"] = float(a)
        out[f"acceptance_rate/{level}"] = a / d if d else 0.0
        out[f"wasted_draft_fraction/{level}"] = (d - a) / d if d else 0.0
    # the level right below the target is the one whose drafts the target saw
    top = next((s.draft_level for s in sequences if s.draft_level), None)
    if top is not None:
        d, a = t.drafted[top], t.accepted[top]
        out["acceptance_rate"] = a / d if d else 0.0
    return out
