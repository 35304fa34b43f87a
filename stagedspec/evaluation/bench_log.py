"""The benchmarks' measurement loop: every method on every group of prompts, interleaved
(an order rotated per group and repeat), each measurement appended to a JSON-lines log as
it ends, keyed by a hash of the settings, so a killed run resumes where it stopped."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

RunFn = Callable[[list[list[int]], int, int], dict]
"""A method: (prompts, max_new_tokens, seed) -> {"outputs": [ids per prompt], and for ours
"target_calls", "target_forward_time", "rounds", "drafted", "accepted"}. A sampling method
draws from ``seed`` (greedy ones ignore it)."""


PROMPT_SEED_STRIDE = 1009
"""Seeds of consecutive prompts lie this far apart (a prime above any repeat count)."""


@dataclass(frozen=True)
class Cell:
    method: str
    batch: int
    group: int
    prompts: tuple[int, ...]
    repeat: int

    @property
    def key(self) -> tuple:
        return (self.method, self.batch, self.group, self.repeat)

    def seed(self, base: int) -> int:
        """The seed this cell samples with: ``base`` + its repeat + ``PROMPT_SEED_STRIDE`` x its first
        prompt. Each prompt its own stream: with one seed for all, a run's prompts drew the same
        uniforms at the same positions and forked alike (v20, HumanEval at T = 0.7, seed 0: plain
        decoding wrote two newlines after the imports on 3 of 6 problems where prompt lookup wrote
        three on all 3), so one seed was one draw, not six."""
        return base + self.repeat + PROMPT_SEED_STRIDE * self.prompts[0]


def groups(n_prompts: int, batch: int) -> list[tuple[int, ...]]:
    """Consecutive prompt indices, ``batch`` at a time (the last group may be shorter)."""
    return [tuple(range(i, min(i + batch, n_prompts))) for i in range(0, n_prompts, batch)]


def schedule(batches: dict[str, list[int]], n_prompts: int, batch_sizes: list[int], repeats: int) -> list[Cell]:
    """Every measurement, in run order: repeat, batch size, prompt group, then the methods
    run at that batch size, rotated by one more place per group and per repeat."""
    cells = []
    for rep in range(repeats):
        for b in batch_sizes:
            names = [m for m, bs in batches.items() if b in bs]
            if not names:
                continue
            for g, idx in enumerate(groups(n_prompts, b)):
                r = (rep + g) % len(names)
                cells += [Cell(m, b, g, idx, rep) for m in names[r:] + names[:r]]
    return cells


def read_measurements(path: Path, config_hash: str) -> list[dict]:
    """This configuration's measurements so far; a torn last line (a kill mid-write) is ignored."""
    out = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("config") == config_hash:
            out.append(rec)
    return out


def drop_torn_tail(path: Path) -> None:
    """Cut a last line without its newline (a kill mid-write), so the next append starts
    a line of its own instead of gluing itself to the fragment."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def record_key(rec: dict) -> tuple:
    return (rec["method"], rec["batch"], rec["group"], rec["repeat"])


def measurement_record(c: Cell, out: dict, seconds: float, config_hash: str, seed: int) -> dict:
    """The log line of cell ``c``: what ran, its outputs and time, and the run's counters."""
    return {
        "config": config_hash,
        "method": c.method,
        "batch": c.batch,
        "group": c.group,
        "prompts": list(c.prompts),
        "repeat": c.repeat,
        "seed": c.seed(seed),
        "tokens": sum(len(o) for o in out["outputs"]),
        "seconds": seconds,
        "outputs": [list(map(int, o)) for o in out["outputs"]],
        **{
            k: out.get(k)
            for k in ("target_calls", "target_forward_time", "prefill_seconds", "rounds", "drafted", "accepted")
        },
    }


def run_measurements(
    methods: dict[str, RunFn],
    batches: dict[str, list[int]],
    prompts: list[list[int]],
    max_new_tokens: int,
    batch_sizes: list[int],
    repeats: int,
    path: Path,
    config_hash: str,
    limit: int | None = None,
    warmup_tokens: int = 8,
    clock: Callable[[], float] = time.perf_counter,
    log: Callable[[str], None] = print,
    seed: int = 0,
) -> list[dict]:
    """Run every cell of ``schedule`` not yet in ``path`` (skipping done ones keeps the
    interleaving of a resumed run), appending one JSON line per measurement; stop after
    ``limit`` new ones. Each method is warmed up once (untimed) before its first new
    measurement. Repeat r runs every method with seed ``Cell.seed(seed)`` (``seed`` + r + a stride
    per prompt), so sampled repeats and prompts are different samples and a median over repeats is
    over samples as well as timing noise (the methods share the seed, not the draws: each consumes
    its generator its own way).
    Returns this schedule's measurements, old and new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    drop_torn_tail(path)
    cells = schedule(batches, len(prompts), batch_sizes, repeats)
    wanted = {c.key for c in cells}
    # only this schedule's cells: fewer repeats or batch sizes than an earlier run leave the rest out
    records = [r for r in read_measurements(path, config_hash) if record_key(r) in wanted]
    done = {record_key(r) for r in records}
    todo = [c for c in cells if c.key not in done]
    if done:
        log(f"resuming: {len(done)} measurements done, {len(todo)} to go ({path})")
    warm: set[str] = set()
    new = 0
    with path.open("a", encoding="utf-8") as f:
        for c in todo:
            if limit is not None and new >= limit:
                log(f"stopping after {new} new measurements (limit); rerun to resume")
                break
            if c.method not in warm and warmup_tokens:
                methods[c.method]([prompts[c.prompts[0]]], warmup_tokens, seed)
                warm.add(c.method)
            batch = [prompts[i] for i in c.prompts]
            t0 = clock()
            out = methods[c.method](batch, max_new_tokens, c.seed(seed))
            rec = measurement_record(c, out, clock() - t0, config_hash, seed)
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())
            records.append(rec)
            new += 1
    return records
