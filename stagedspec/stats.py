"""Per-round and per-sequence statistics of speculative decoding.

Metric definitions follow vLLM's speculative-decoding metrics word for word, so numbers
compare with theirs:

- draft acceptance rate = accepted / drafted (per level: tokens a level proposed to the
  level above it, and how many that level kept);
- mean acceptance length = 1 + accepted / drafts, i.e. tokens emitted per target call
  (the bonus or resampled token counts);
- system efficiency = emitted / positions the target scored (for a chain of k drafts,
  positions = k + 1 per round, which is vLLM's ``rounds * (k + 1)``);
- per-position acceptance: for draft depth i (1-based), the share of rounds that reached
  depth i - 1 and accepted a token at depth i.

Everything here is plain Python: no torch, Hydra or MLflow, so analysis code can use it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

TARGET = "target"


def method_name(level_names: Iterable[str]) -> str:
    """A hierarchy's name: its draft levels, lowest first, then the target, e.g.
    "ngram>small>target"; plain decoding is "target". (``analysis/names.py`` reads it back.)"""
    return ">".join([*level_names, TARGET])


@dataclass
class RoundStats:
    """What one verification round did for one sequence."""

    drafted: dict[str, int] = field(default_factory=dict)
    """Tokens each draft level proposed to the level above it in this round."""
    accepted: dict[str, int] = field(default_factory=dict)
    """Of ``drafted``, how many the level above kept."""
    draft_calls: dict[str, int] = field(default_factory=dict)
    """Forward passes (or table look-ups) each draft level made."""
    emitted: int = 0
    """Tokens appended to the output (accepted drafts + the target's own token)."""
    target_positions: int = 0
    """Positions the target scored for this sequence (root + draft nodes)."""
    accepted_depth: int = 0
    """Draft tokens the target accepted (depth of the accepted path in the tree)."""
    tree_nodes: int = 0
    """Draft nodes sent to the target (= draft length for a chain)."""
    padding_positions: int = 0
    """Positions scored only to pad this sequence up to the batch's widest row."""

    @property
    def wasted_target_positions(self) -> int:
        """Positions the target scored whose result was thrown away."""
        return self.target_positions - self.emitted


@dataclass
class PhaseTimes:
    """Wall time of one batch round, split by phase (seconds)."""

    draft: float = 0.0
    verify: float = 0.0
    overhead: float = 0.0

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
    """Index i: rounds that had a draft token at depth i + 1 to test."""
    finished_reason: str = ""
    draft_level: str | None = None
    """Name of the level that drafts directly for the target (None for plain decoding)."""

    def record(self, r: RoundStats, depth_offered: int) -> None:
        """Add one round; ``depth_offered`` is the deepest draft depth the target could test."""
        self.rounds.append(r)
        need = depth_offered
        while len(self.position_reached) < need:
            self.position_reached.append(0)
            self.position_accepted.append(0)
        # depth i+1 was *tested* when the first i were accepted (a rejection stops the walk)
        for i in range(min(r.accepted_depth + 1, depth_offered)):
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
    """Seconds spent inside each draft level's model forwards (for the cost ratio c)."""
    draft_forwards: dict[str, int] = field(default_factory=dict)
    target_forward_time: float = 0.0
    """Seconds spent inside target forwards during rounds (prefill excluded)."""

    @classmethod
    def merge(cls, results: list["GenerationResult"]) -> "GenerationResult":
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

    def summary(self) -> dict[str, float]:
        out = summarize(self.sequences)
        emitted = sum(len(s.output_ids) for s in self.sequences)
        out["tokens_per_s"] = emitted / self.wall_time if self.wall_time > 0 else 0.0
        out["wall_time_s"] = self.wall_time
        out["prefill_time_s"] = self.prefill_time
        t = PhaseTimes()
        for p in self.phase_times:
            t.draft += p.draft
            t.verify += p.verify
            t.overhead += p.overhead
        round_time = t.total
        out["time_draft_s"] = t.draft
        out["time_verify_s"] = t.verify
        out["time_overhead_s"] = t.overhead
        forward_time = self.target_forward_time + sum(self.draft_call_time.values())
        out["share_outside_forwards"] = (
            max(0.0, round_time - forward_time) / round_time if round_time > 0 else 0.0
        )
        out["batch_target_calls"] = float(self.target_calls)
        if self.target_calls:
            per_target = self.target_forward_time / self.target_calls
            for level, secs in self.draft_call_time.items():
                n = self.draft_forwards.get(level, 0)
                if n and per_target > 0:
                    out[f"cost_ratio/{level}"] = (secs / n) / per_target
        return out


def summarize(sequences: list[SequenceResult]) -> dict[str, float]:
    """Aggregate metrics over sequences (counts are summed, then divided)."""
    drafted: Counter[str] = Counter()
    accepted: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    prov: Counter[str] = Counter()
    emitted = positions = padding = nodes = rounds = depth = 0
    reached: list[int] = []
    acc_pos: list[int] = []
    for s in sequences:
        prov.update(s.provenance)
        for r in s.rounds:
            drafted.update(r.drafted)
            accepted.update(r.accepted)
            calls.update(r.draft_calls)
            emitted += r.emitted
            positions += r.target_positions
            padding += r.padding_positions
            nodes += r.tree_nodes
            depth += r.accepted_depth
            rounds += 1
        for i, (n_reached, n_acc) in enumerate(zip(s.position_reached, s.position_accepted)):
            if i >= len(reached):
                reached.append(0)
                acc_pos.append(0)
            reached[i] += n_reached
            acc_pos[i] += n_acc
    out: dict[str, float] = {
        "rounds": float(rounds),
        "emitted": float(emitted),
        "target_calls": float(rounds),
        "mean_accepted_tokens_per_call": emitted / rounds if rounds else 0.0,
        "system_efficiency": emitted / positions if positions else 0.0,
        "tree_nodes_per_call": nodes / rounds if rounds else 0.0,
        "accepted_depth_per_call": depth / rounds if rounds else 0.0,
        "wasted_target_fraction": (positions - emitted) / positions if positions else 0.0,
        "padding_fraction": padding / (positions + padding) if positions + padding else 0.0,
    }
    for level in drafted:
        d, a = drafted[level], accepted[level]
        out[f"drafted/{level}"] = float(d)
        out[f"accepted/{level}"] = float(a)
        out[f"acceptance_rate/{level}"] = a / d if d else 0.0
        out[f"wasted_draft_fraction/{level}"] = (d - a) / d if d else 0.0
        out[f"draft_calls/{level}"] = float(calls[level])
    # the level right below the target is the one whose drafts the target saw
    top = next((s.draft_level for s in sequences if s.draft_level), None)
    if top is not None:
        d, a = drafted[top], accepted[top]
        out["acceptance_rate"] = a / d if d else 0.0
    for i, (n_reached, n_acc) in enumerate(zip(reached, acc_pos)):
        out[f"position_acceptance/{i + 1}"] = n_acc / n_reached if n_reached else 0.0
    total_prov = sum(prov.values())
    for level, n in prov.items():
        out[f"provenance/{level}"] = n / total_prov if total_prov else 0.0
    return out
