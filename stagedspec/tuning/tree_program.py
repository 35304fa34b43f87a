"""Sequoia's program for ``tree=auto``: choose the tree from measured acceptance and costs.

Sequoia (Chen et al. 2024) models a tree's worth under the *positional acceptance*
assumption: the child of rank r (0 = the drafter's own pick, r >= 1 its r-th best
alternative) at depth d is the one the target accepts with probability a[d][r], whatever
happened above. A node is then reached with the product of a[.][.] along its path, and a
tree's expected tokens per target call is the sum of that over its nodes, the root
counting 1 (the bonus token). The tree of n nodes with the most expected tokens obeys

    best(n, h) = 1 + max over children ranks 1..j and sizes s_1 + ... + s_j = n - 1 of
                 sum_i a[h][i - 1] * best(s_i, h + 1)

(h: the node's depth), a knapsack per node, solved bottom-up here with numpy. Sequoia
then divides by the cost of a call; so do we, with costs measured here:

    tokens/s = best(n) / (T_verify(n positions) + T_draft(depth, nodes) + T_rest)

Written by hand: no maintained library implements Sequoia's program (its authors ship a
research script), and the measurement is this engine's own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from stagedspec.engine.tree import AutoShape, StaticShape, TreeShape

SMOOTHING = 8.0
"""Pseudo-counts pulling a depth's acceptance towards the all-depth rate of the same rank:
deep depths are reached in few rounds."""


# --------------------------------------------------------------------------- the program
def best_trees(accept: np.ndarray, max_nodes: int, max_depth: int) -> tuple[np.ndarray, Any]:
    """Sequoia's program under a depth limit.

    ``accept[h, r]``: probability that the rank-r child of a node at depth h is accepted.
    Returns ``value[n]`` for n = 0..max_nodes + 1 tree nodes *including the root* (expected
    tokens per call; -inf where impossible) and ``paths(n)``, the path list of that tree.
    """
    N = max_nodes + 1
    D = min(max_depth, accept.shape[0])
    W = accept.shape[1]
    neg = -np.inf
    best = [np.full(N + 1, neg) for _ in range(D + 1)]  # best[h][n]
    choice: list[list[np.ndarray]] = [[] for _ in range(D + 1)]  # choice[h][j][m]: size of child j's subtree
    nkids = [np.zeros(N + 1, dtype=int) for _ in range(D + 1)]
    best[D][1] = 1.0
    m = np.arange(N)
    a = np.arange(1, N)
    idx = m[:, None] - a[None, :]  # m - a
    ok = idx >= 0
    for h in range(D - 1, -1, -1):
        G = np.full(N, neg)
        G[0] = 0.0
        top = np.full(N + 1, neg)
        top[1] = 1.0  # a leaf
        for j in range(W):
            p = float(accept[h, j])
            if p <= 0.0:
                break
            sub = best[h + 1][1:N]  # best[h+1][a], a = 1..N-1
            cand = np.where(ok, G[np.clip(idx, 0, N - 1)] + p * sub[None, :], neg)
            arg = np.argmax(cand, axis=1)
            G = cand[m, arg]
            choice[h].append(a[arg])
            better = 1.0 + G[:N] > top[1:]
            top[1:] = np.where(better, 1.0 + G, top[1:])
            nkids[h][1:] = np.where(better, j + 1, nkids[h][1:])
        best[h] = top

    def build(h: int, n: int, prefix: tuple[int, ...]) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []
        j, rest = int(nkids[h][n]), n - 1
        sizes = []
        while j > 0:
            s = int(choice[h][j - 1][rest])
            sizes.append(s)
            rest -= s
            j -= 1
        for r, s in enumerate(reversed(sizes)):
            out.append(prefix + (r,))
            out.extend(build(h + 1, s, prefix + (r,)))
        return out

    return best[0], lambda n: build(0, n, ())


def acceptance_matrix(counts: list[list[int]], reached: list[int], smoothing: float = SMOOTHING) -> np.ndarray:
    """a[d][r] from counts of rank r accepted at depth d + 1 among ``reached[d]`` rounds,
    each depth shrunk towards the all-depth rate of its rank."""
    c = np.asarray(counts, dtype=float)
    n = np.asarray(reached, dtype=float)
    pooled = c.sum(0) / max(n.sum(), 1.0)
    return (c + smoothing * pooled[None, :]) / (n[:, None] + smoothing)


# --------------------------------------------------------------------------- measurements
@dataclass
class Calibration:
    """What ``calibrate`` measured (the cached part)."""

    key: dict
    widths: list[int]
    accept_counts: list[list[int]]
    """[depth - 1][rank]: rounds whose rank-0 chain reached depth - 1 and accepted that rank."""
    reached: list[int]
    """[depth - 1]: rounds whose accepted path reached the rank-0 node at depth - 1."""
    verify_ms: dict[str, float]
    """Positions scored in one target forward -> median ms (root + draft nodes, batch 1)."""
    draft_fit_ms: list[float]
    """[a, b, c]: the top level's propose takes a + b * depth + c * nodes ms."""
    draft_points: list[list[float]]
    """The timed proposes: [depth, nodes, median ms]."""
    rest_ms: float
    """Per round, outside the target's forward and the draft: verification, bookkeeping."""
    process_ms: dict[str, float]
    """Positions -> ms to turn the target's logits into p (sampling only; 0 when greedy)."""
    calib_tokens_per_call: float
    """Measured on the calibration tree, to set beside the program's prediction for it."""
    rounds: int
    seconds: float
    rank_traces: list[list[int]] = field(default_factory=list)
    """Greedy only: for each calibration text, at each generated position, the rank of the
    target's token among the top level's ranked candidates there (-1: not among them).
    With these, any tree's greedy acceptance on these texts is replayed exactly."""


@dataclass
class Choice:
    """The chosen tree and why: what a run logs for ``tree=auto``."""

    paths: list[list[int]]
    predicted_tokens_per_call: float
    predicted_ms_per_call: float
    accept: list[list[float]]
    calibration: Calibration
    cache_hit: bool
    cache_file: str | None
    predicted_calib_tokens_per_call: float
    candidates: list[dict] = field(default_factory=list)
    """The best tree per (size, depth) the program weighed: size, depth, tokens per call, ms."""

    @property
    def predicted_tokens_per_s(self) -> float:
        return 1000.0 * self.predicted_tokens_per_call / self.predicted_ms_per_call

    def params(self) -> dict[str, Any]:
        """Short values for MLflow params (strings of at most a few hundred characters)."""
        return {
            "tree_auto.paths": json.dumps(self.paths, separators=(",", ":")),
            "tree_auto.nodes": len(self.paths),
            "tree_auto.depth": max((len(p) for p in self.paths), default=0),
            "tree_auto.cache_hit": self.cache_hit,
            "tree_auto.widths": json.dumps(self.calibration.widths),
            "tree_auto.source": self.calibration.key.get("source", ""),
            "tree_auto.prompts": self.calibration.key.get("prompts", ""),
        }

    def metrics(self) -> dict[str, float]:
        cal = self.calibration
        out = {
            "tree_auto.predicted_tokens_per_call": self.predicted_tokens_per_call,
            "tree_auto.predicted_ms_per_call": self.predicted_ms_per_call,
            "tree_auto.predicted_tokens_per_s": self.predicted_tokens_per_s,
            "tree_auto.calib_tokens_per_call": cal.calib_tokens_per_call,
            "tree_auto.predicted_calib_tokens_per_call": self.predicted_calib_tokens_per_call,
            "tree_auto.replayed": float(bool(cal.rank_traces)),
            "tree_auto.calibration_s": cal.seconds,
            "tree_auto.rest_ms": cal.rest_ms,
        }
        for n, ms in cal.verify_ms.items():
            out[f"tree_auto.verify_ms/{int(n):02d}"] = ms
        for d, row in enumerate(self.accept):
            for r, x in enumerate(row):
                out[f"tree_auto.accept/d{d + 1}_r{r}"] = x
        return out

    def artifact(self) -> dict:
        """Everything, as JSON (``tree_auto.json``)."""
        d = asdict(self)
        d["predicted_tokens_per_s"] = self.predicted_tokens_per_s
        return d


def interp(table: dict[str, float], n: int) -> float:
    xs = sorted(int(k) for k in table)
    ys = [table[str(x)] for x in xs]
    return float(np.interp(n, xs, ys))  # flat beyond the ends


def replay(paths: list[tuple[int, ...]] | StaticShape, traces: list[list[int]]) -> tuple[float, list, list]:
    """Greedy decoding of the calibration texts with a given tree, replayed from the rank
    traces: a round starting at position t accepts while the target's token at t + i has a
    rank offered under the node reached so far. Returns (tokens per call, per-depth and
    per-rank acceptance counts, offers) - the counts conditioned on this tree's own rounds."""
    shape = paths if isinstance(paths, StaticShape) else TreeShape.parse([list(p) for p in paths])
    kids = shape.children()
    depth = shape.depth
    W = 1 + max((max(v) for v in kids.values()), default=0)
    acc = [[0] * W for _ in range(depth)]
    offered = [[0] * W for _ in range(depth)]
    tokens = calls = 0
    for rho in traces:
        t = 0
        while t < len(rho):
            node: tuple[int, ...] = ()
            n = 0
            while node in kids and t + n < len(rho):
                for r in kids[node]:
                    offered[n][r] += 1
                r = rho[t + n]
                if r not in kids[node]:
                    break
                acc[n][r] += 1
                node, n = node + (r,), n + 1
            calls += 1
            t += n + 1
        tokens += len(rho)
    return tokens / max(calls, 1), acc, offered


def _from_replay(acc: list, offered: list, fallback: np.ndarray) -> np.ndarray:
    """a[d][r] from a replay's counts where the tree offered rank r at depth d, else the fallback."""
    out = fallback.copy()
    for d in range(min(len(acc), out.shape[0])):
        for r in range(min(len(acc[d]), out.shape[1])):
            if offered[d][r]:
                out[d, r] = (acc[d][r] + SMOOTHING * fallback[d, r]) / (offered[d][r] + SMOOTHING)
    return out


def _new_candidates(
    accept: np.ndarray,
    auto: AutoShape,
    traces: list[list[int]],
    cost: Callable[[int, int], float],
    seen: dict[tuple, float],
    it: int,
) -> list[dict]:
    """Pass ``it``'s proposals not ``seen`` before: the program's best tree of each size
    and depth under ``accept``, each with its tokens per call (replayed on ``traces`` when
    there are any, else the program's value) and its ``cost`` in ms; ``seen`` grows."""
    rows = []
    for depth in range(1, auto.depth + 1):
        value, paths = best_trees(accept, auto.max_nodes, depth)
        for n in range(2, auto.max_nodes + 2):
            if not np.isfinite(value[n]):
                continue
            tree = tuple(sorted(paths(n), key=lambda p: (len(p), p)))
            if tree in seen:
                continue
            d = max(len(p) for p in tree)
            tpc = replay(tree, traces)[0] if traces else float(value[n])
            seen[tree] = tpc
            rows.append(
                {
                    "nodes": n - 1,
                    "depth": d,
                    "tokens_per_call": tpc,
                    "program": float(value[n]),
                    "ms": cost(n, d),
                    "pass": it,
                    "paths": [list(p) for p in tree],
                }
            )
    return rows


def choose(
    cal: Calibration, auto: AutoShape, cache_hit: bool = False, cache_file: str | None = None, iterations: int = 3
) -> Choice:
    """The tree with the most expected tokens per second under the measured costs.

    Sequoia's program proposes the best tree of each size and depth under positional
    acceptance. When greedy, each proposal is then replayed exactly on the calibration
    texts, which scores it without the positional assumption (a deep tree's rounds start
    after rejections more often than a chain's do, so per-round acceptance depends on the
    tree); the acceptance seen in the best tree's own replayed rounds feeds the next pass
    of the program, ``iterations`` times."""
    accept = acceptance_matrix(cal.accept_counts, cal.reached)
    a, b, c = cal.draft_fit_ms
    traces = cal.rank_traces

    def cost(n: int, depth: int) -> float:  # n: positions scored (root + nodes)
        return interp(cal.verify_ms, n) + interp(cal.process_ms, n) + a + b * depth + c * (n - 1) + cal.rest_ms

    best: dict | None = None
    candidates: list[dict] = []
    seen: dict[tuple, float] = {}
    for it in range(iterations if traces else 1):
        for row in _new_candidates(accept, auto, traces, cost, seen, it):
            candidates.append(row)
            if best is None or row["tokens_per_call"] / row["ms"] > best["tokens_per_call"] / best["ms"] * (1 + 1e-9):
                best = row
        if traces and best is not None:
            _, acc, offered = replay([tuple(p) for p in best["paths"]], traces)
            accept = _from_replay(acc, offered, acceptance_matrix(cal.accept_counts, cal.reached))
    assert best is not None
    shape = TreeShape.parse(best["paths"])
    calib = (
        replay(auto.calibration_shape(), traces)[0]
        if traces
        else _tree_value(acceptance_matrix(cal.accept_counts, cal.reached), auto.calibration_shape())
    )
    return Choice(
        paths=[list(p) for p in shape.paths],
        predicted_tokens_per_call=best["tokens_per_call"],
        predicted_ms_per_call=best["ms"],
        accept=accept.tolist(),
        calibration=cal,
        cache_hit=cache_hit,
        cache_file=cache_file,
        predicted_calib_tokens_per_call=calib,
        candidates=[{k: v for k, v in r.items() if k != "paths"} for r in candidates],
    )


def _tree_value(accept: np.ndarray, shape: StaticShape) -> float:
    """Expected tokens per call of a given tree under positional acceptance."""
    reach = {(): 1.0}
    for p in shape.paths:
        d, r = len(p) - 1, p[-1]
        a = float(accept[d, r]) if d < accept.shape[0] and r < accept.shape[1] else 0.0
        reach[p] = reach[p[:-1]] * a
    return float(sum(reach.values()))
