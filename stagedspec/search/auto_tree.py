"""``tree=auto``: measure on this machine, then choose the tree (Sequoia's dynamic program).

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

``calibrate`` measures (a) a[d][r] by decoding a few prompts with the configured
hierarchy and sampling rule, its top level offering ``widths[d]`` ranked children at
each depth of its rank-0 chain (positional acceptance lets the chain stand for every
parent), (b) the target's forward for 1..N positions through its active kernel plan,
(c) the top level's ``propose`` for a chain of 1, a chain of full depth and a bushy tree
(fitted as a + b * depth + c * nodes) and (d) the rest of a round (verification, cache
bookkeeping) from the calibration rounds. The measurement is cached per hierarchy,
target, sampling rule, dtype, device, threads and kernel plan, so a sweep calibrates
once; the choice itself is a few milliseconds and is redone from the cache.

Written by hand: no maintained library implements Sequoia's program (its authors ship a
research script), and the measurement is this engine's own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.kernels import HF_PLAN, KernelPlan, cpu_name
from stagedspec.engine.kv_cache import KVModel
from stagedspec.engine.sampling import SamplingConfig, probabilities
from stagedspec.engine.tree import AutoShape, DraftTree, StaticShape, TreeShape, chain, widths_to_paths
from stagedspec.models.chat_text import encode_prompt
from stagedspec.prompts import prompt_sets
from stagedspec.prompts.training_prompts import training_prompts

log = logging.getLogger(__name__)

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
            better = 1.0 + G[: N] > top[1:]
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


def _interp(table: dict[str, float], n: int) -> float:
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


def choose(cal: Calibration, auto: AutoShape, cache_hit: bool = False, cache_file: str | None = None,
           iterations: int = 3) -> Choice:
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
        return (_interp(cal.verify_ms, n) + _interp(cal.process_ms, n) + a + b * depth + c * (n - 1)
                + cal.rest_ms)

    best: dict | None = None
    candidates: list[dict] = []
    seen: dict[tuple, float] = {}
    for it in range(iterations if traces else 1):
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
                ms = cost(n, d)
                row = {"nodes": n - 1, "depth": d, "tokens_per_call": tpc, "program": float(value[n]), "ms": ms,
                       "pass": it, "paths": [list(p) for p in tree]}
                candidates.append(row)
                if best is None or tpc / ms > best["tokens_per_call"] / best["ms"] * (1 + 1e-9):
                    best = row
        if traces and best is not None:
            _, acc, offered = replay([tuple(p) for p in best["paths"]], traces)
            accept = _from_replay(acc, offered, acceptance_matrix(cal.accept_counts, cal.reached))
    assert best is not None
    shape = TreeShape.parse(best["paths"])
    calib = replay(auto.calibration_shape(), traces)[0] if traces else _tree_value(
        acceptance_matrix(cal.accept_counts, cal.reached), auto.calibration_shape())
    return Choice(paths=[list(p) for p in shape.paths], predicted_tokens_per_call=best["tokens_per_call"],
                  predicted_ms_per_call=best["ms"], accept=accept.tolist(), calibration=cal, cache_hit=cache_hit,
                  cache_file=cache_file, predicted_calib_tokens_per_call=calib,
                  candidates=[{k: v for k, v in r.items() if k != "paths"} for r in candidates])


def _tree_value(accept: np.ndarray, shape: StaticShape) -> float:
    """Expected tokens per call of a given tree under positional acceptance."""
    reach = {(): 1.0}
    for p in shape.paths:
        d, r = len(p) - 1, p[-1]
        a = float(accept[d, r]) if d < accept.shape[0] and r < accept.shape[1] else 0.0
        reach[p] = reach[p[:-1]] * a
    return float(sum(reach.values()))


# --------------------------------------------------------------------------- calibration
class _Recorder:
    """Wraps the top level during calibration decoding: remembers each round's trees and
    contexts, and when the next round's contexts show what was emitted, which rank was
    accepted at each depth of the rank-0 chain."""

    def __init__(self, inner, depth: int, width: int) -> None:
        self.inner = inner
        self.name, self.wants_features = inner.name, inner.wants_features
        self.counts = [[0] * width for _ in range(depth)]
        self.reached = [0] * depth
        self.last: list[tuple[list[int], DraftTree]] = []

    def __getattr__(self, item):  # setup, reset, prefill, feedback, forward_stats, max_depth, levels
        return getattr(self.inner, item)

    def keep_rows(self, rows: list[int]) -> None:
        self.last = [self.last[r] for r in rows] if self.last else []
        self.inner.keep_rows(rows)

    def propose(self, contexts, features=None):
        for (ctx, tree), new in zip(self.last, contexts):
            self.observe(tree, new[len(ctx):])
        trees = self.inner.propose(contexts, features)
        self.last = [(list(c), t) for c, t in zip(contexts, trees)]
        return trees

    def observe(self, tree: DraftTree, emitted: list[int]) -> None:
        kids: dict[int, list[int]] = {}
        for i, par in enumerate(tree.parents):
            kids.setdefault(par, []).append(i)
        node, depth = -1, 0
        for tok in emitted:
            children = kids.get(node, [])
            if not children or depth >= len(self.reached):
                return
            self.reached[depth] += 1
            hit = next((c for c in children if tree.tokens[c] == tok), None)
            if hit is None:
                return
            r = tree.rank[hit]
            if 0 <= r < len(self.counts[depth]):
                self.counts[depth][r] += 1
            if r != 0:
                return  # only the rank-0 chain carries ranked children in the calibration tree
            node, depth = hit, depth + 1
        # out of emitted tokens (a length or EOS cut): the next depth was not observed


def calibration_prompts(target, n: int, source: str = "data", seed: int = 0) -> list[list[int]]:
    """``n`` prompts encoded for the target (see ``AutoShape.source``); random token ids for
    a model without a tokenizer (tests). "data" falls back to "training" when the
    questions file is missing."""
    if target.tokenizer is None:
        rng = random.Random(seed)
        out = []
        for _ in range(n):
            base = [rng.randrange(target.vocab_size) for _ in range(rng.randrange(6, 16))]
            out.append(base + base[: len(base) // 2])
        return out
    if source == "data":
        try:
            questions = prompt_sets.load_questions(prompt_sets.default_data_path())
        except (FileNotFoundError, ValueError) as e:
            log.warning("tree=auto: no questions file (%s); calibrating on training templates", e)
        else:
            by_cat: dict[str, list] = {}
            for q in questions:
                by_cat.setdefault(q.category, []).append(q)
            cols = [list(reversed(qs)) for qs in by_cat.values()]  # the last of each category first
            picked = [col[i] for i in range(max(map(len, cols))) for col in cols if i < len(col)][:n]
            return [encode_prompt(target.tokenizer, q.turns[:1]) for q in picked]
    return [encode_prompt(target.tokenizer, turns[:1]) for turns in training_prompts(n, seed=seed + 12345)]


def isotonic(xs: list[float]) -> list[float]:
    """The non-decreasing sequence closest to ``xs`` in squared error (pool adjacent
    violators): a forward's cost does not fall with more positions, so a dip or a spike in
    noisy timings is averaged with its neighbours. Hand-written (a dozen lines; the
    library that has it, scikit-learn, is not a dependency)."""
    blocks: list[list[float]] = []  # [mean, count]
    for x in xs:
        blocks.append([x, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, c2), (m1, c1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2])
    return [m for m, c in blocks for _ in range(int(c))]


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def _fit_draft(points: list[list[float]]) -> list[float]:
    """a + b * depth + c * nodes >= 0 coefficients by least squares over the best subset."""
    X = np.array([[1.0, p[0], p[1]] for p in points])
    y = np.array([p[2] for p in points])
    best: tuple[float, list[float]] | None = None
    for mask in range(1, 8):
        cols = [i for i in range(3) if mask >> i & 1]
        coef, *_ = np.linalg.lstsq(X[:, cols], y, rcond=None)
        if (coef < 0).any():
            continue
        full = [0.0, 0.0, 0.0]
        for i, v in zip(cols, coef):
            full[i] = float(v)
        err = float(((X @ np.array(full) - y) ** 2).sum())
        if best is None or err < best[0] - 1e-12:
            best = (err, full)
    return best[1] if best is not None else [float(y.mean()), 0.0, 0.0]


def _features(target_model, ctx: list[int]) -> torch.Tensor:
    with torch.no_grad():
        dev = next(target_model.parameters()).device
        return target_model.get_decoder()(input_ids=torch.tensor([ctx], device=dev)).last_hidden_state[0, :-1]


def _time_propose(drafter, ctx: list[int], shape, sampling, gen, plan, repeats: int, target_model) -> float:
    drafter.tree = shape
    drafter.setup(sampling, gen, plan)
    drafter.reset(1)
    drafter.prefill([ctx])
    feats = [_features(target_model, ctx)] if drafter.wants_features else None
    times = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        drafter.propose([ctx], feats)
        if i:  # the first call feeds the prompt
            times.append(1000 * (time.perf_counter() - t0))
    return _median(times)


def _time_verify(target_model, ctx: list[int], sizes: list[int], plan: KernelPlan, repeats: int) -> dict[str, float]:
    """Median ms of one cached target forward scoring n positions (the root and n - 1
    draft nodes hanging from it, so the forward takes a tree mask as in verification)."""
    kv = KVModel(target_model, name="calibration", plan=plan)
    kv.reset(1)
    kv.extend_chain(kv.sync([ctx[:-1]]), want_last=False)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    order = list(sizes)
    rng = random.Random(0)
    for rep in range(repeats + 1):
        rng.shuffle(order)  # interleaved: drift on a shared machine spreads over every size
        for n in order:
            tail = kv.sync([ctx], min_tail=1)[0]
            toks = tail + [ctx[(i * 7) % len(ctx)] for i in range(n - 1)]
            root = len(tail) - 1
            pars = [-1] + list(range(len(tail) - 1)) + [root] * (n - 1)
            t0 = time.perf_counter()
            kv.extend([toks], [pars], [list(range(root, len(toks)))])
            if rep:
                times[n].append(1000 * (time.perf_counter() - t0))
    med = isotonic([_median(times[n]) for n in sizes])
    return {str(n): t for n, t in zip(sizes, med)}


def _time_process(sampling: SamplingConfig, vocab: int, sizes: list[int], repeats: int) -> dict[str, float]:
    """ms to turn n rows of target logits into p; the decoder skips it when greedy."""
    if sampling.greedy:
        return {str(n): 0.0 for n in sizes}
    out = {}
    for n in sizes:
        x = torch.randn(n, vocab)
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            probabilities(x, sampling)
            ts.append(1000 * (time.perf_counter() - t0))
        out[str(n)] = _median(ts)
    return out


def verify_sizes(max_positions: int) -> list[int]:
    """1..12 one by one (where the curve steps), then every 4, and the largest."""
    sizes = set(range(1, min(max_positions, 12) + 1)) | set(range(16, max_positions + 1, 4)) | {max_positions}
    return sorted(sizes)


def calibrate(drafter, target, sampling: SamplingConfig, plan: KernelPlan, auto: AutoShape, key: dict,
              prompts: list[list[int]] | None = None) -> Calibration:
    """Measure everything ``choose`` needs (see the module docstring). Leaves ``drafter.tree``
    at the calibration shape; the caller sets the chosen one."""
    t0 = time.perf_counter()
    prompts = prompts or calibration_prompts(target, auto.prompts, auto.source)
    shape = auto.calibration_shape()
    drafter.tree = shape
    rec = _Recorder(drafter, auto.depth, max(auto.widths))
    dec = SpeculativeDecoder(target.model, rec, SamplingConfig(sampling.temperature, sampling.top_k, sampling.top_p,
                                                               seed=sampling.seed + 777), plan=plan)
    dec.generate([prompts[0][-16:]], 4)  # warm-up: first forwards allocate
    rec.counts = [[0] * max(auto.widths) for _ in range(auto.depth)]
    rec.reached = [0] * auto.depth
    calls = emitted = 0
    draft_s = fwd_s = wall_s = 0.0
    contexts = []
    for p in prompts:  # batch 1: the setting whose costs the program weighs
        rec.last = []
        res = dec.generate([p], auto.tokens)
        seq = res.sequences[0]
        if rec.last:
            ctx, tree = rec.last[0]
            rec.observe(tree, (p + seq.output_ids)[len(ctx):])
        calls += res.target_calls
        emitted += len(seq.output_ids)
        draft_s += sum(t.draft for t in res.phase_times)
        fwd_s += res.target_forward_time
        wall_s += sum(t.total for t in res.phase_times)
        contexts.append(p + seq.output_ids)
    traces = _rank_traces(drafter, target.model, prompts, contexts, max(auto.widths), sampling, plan) \
        if sampling.greedy else []
    ctx = max(contexts, key=len)
    positions = auto.max_nodes + 1
    sizes = verify_sizes(max(positions, shape.size + 1))
    verify = _time_verify(target.model, ctx, sizes, plan, auto.repeats)
    process = _time_process(sampling, target.vocab_size, sizes, auto.repeats)
    gen = torch.Generator().manual_seed(sampling.seed)
    bushy = widths_to_paths([3, 2, 2])
    draft_points = []
    for s in (chain(1), chain(auto.depth), bushy):
        draft_points.append([float(s.depth), float(s.size),
                             _time_propose(drafter, ctx, s, sampling, gen, plan, auto.repeats, target.model)])
    rest_ms = 1000 * (wall_s - draft_s - fwd_s) / max(calls, 1) - _interp(process, shape.size + 1)
    return Calibration(
        key=key, widths=list(auto.widths), accept_counts=rec.counts, reached=rec.reached, verify_ms=verify,
        draft_fit_ms=_fit_draft(draft_points), draft_points=draft_points, rest_ms=max(rest_ms, 0.0),
        process_ms=process, calib_tokens_per_call=emitted / max(calls, 1), rounds=calls,
        seconds=time.perf_counter() - t0, rank_traces=traces,
    )


def _rank_traces(drafter, target_model, prompts, texts, width: int, sampling, plan) -> list[list[int]]:
    """At each generated position of each calibration text, the rank of the target's token
    among the top level's ``width`` candidates there (-1 when not among them): one
    depth-1 propose per position, as the level makes them while decoding."""
    shape = widths_to_paths([width])
    drafter.tree = shape
    drafter.setup(sampling, torch.Generator().manual_seed(sampling.seed), plan)
    out = []
    for prompt, text in zip(prompts, texts):
        drafter.reset(1)
        drafter.prefill([prompt])
        feats = _features(target_model, text) if drafter.wants_features else None
        rho = []
        for t in range(len(prompt), len(text)):
            (tree,) = drafter.propose([text[:t]], [feats[: t - 1]] if feats is not None else None)
            hit = [tree.rank[i] for i in range(len(tree)) if tree.parents[i] == -1 and tree.tokens[i] == text[t]]
            rho.append(hit[0] if hit else -1)
        out.append(rho)
    return out


# --------------------------------------------------------------------------- the resolver
class AutoTree:
    """Turns a level's ``tree=auto`` into a path list at ``setup`` (once per sampling rule
    and kernel plan; measurements cached on disk when ``hierarchy_key`` is given)."""

    def __init__(self, auto: AutoShape, target, hierarchy_key: Any = None, cache_dir: str | Path | None = None,
                 prompts: list[list[int]] | None = None) -> None:
        self.shape, self.target, self.hierarchy_key = auto, target, hierarchy_key
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.prompts = prompts
        self.choice: Choice | None = None
        self._chosen: dict[str, StaticShape] = {}
        self._busy = False

    def key(self, sampling: SamplingConfig, plan: KernelPlan) -> dict:
        p = next(self.target.model.parameters())
        a = self.shape
        return {
            "hierarchy": self.hierarchy_key, "target": getattr(self.target, "name", ""),
            "dtype": str(p.dtype).removeprefix("torch."), "device": str(p.device), "threads": torch.get_num_threads(),
            "plan": plan.describe(), "temperature": sampling.temperature, "top_k": sampling.top_k,
            "top_p": sampling.top_p, "widths": list(a.widths), "prompts": a.prompts, "source": a.source,
            "tokens": a.tokens,
            "max_positions": a.max_nodes + 1, "repeats": a.repeats, "torch": torch.__version__,
            "processor": cpu_name(), "cores": os.cpu_count(),
        }

    def _file(self, key: dict) -> Path | None:
        if self.hierarchy_key is None or self.cache_dir is None:
            return None
        digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]
        return self.cache_dir / "trees" / f"{digest}.json"

    def resolve(self, drafter, sampling: SamplingConfig, plan: KernelPlan = HF_PLAN) -> None:
        if self._busy:  # the calibration's own decoder sets the drafter up again
            return
        key = self.key(sampling, plan)
        tag = json.dumps(key, sort_keys=True, default=str)
        if tag in self._chosen:
            drafter.tree = self._chosen[tag]
            return
        f = self._file(key)
        cal, hit = None, False
        if f is not None and f.is_file():
            try:
                cal, hit = Calibration(**json.loads(f.read_text())), True
            except (TypeError, ValueError) as e:
                log.warning("ignoring unreadable tree calibration %s: %s", f, e)
        if cal is None:
            self._busy = True
            try:
                cal = calibrate(drafter, self.target, sampling, plan, self.shape, key, self.prompts)
            finally:
                self._busy = False
            if f is not None:
                try:
                    f.parent.mkdir(parents=True, exist_ok=True)
                    tmp = f.with_suffix(f".tmp{os.getpid()}")
                    tmp.write_text(json.dumps(asdict(cal), indent=1))
                    os.replace(tmp, f)
                except OSError as e:  # a read-only cache costs a re-calibration, not correctness
                    log.warning("could not cache the tree calibration in %s: %s", f, e)
        self.choice = choose(cal, self.shape, hit, str(f) if f is not None else None)
        chosen = TreeShape.parse(self.choice.paths)
        self._chosen[tag] = chosen
        drafter.tree = chosen
        log.info("tree=auto for %s: %d nodes, depth %d, predicted %.2f tokens/call, %.1f tokens/s (%s)",
                 drafter.name, chosen.size, chosen.depth, self.choice.predicted_tokens_per_call,
                 self.choice.predicted_tokens_per_s, "cached calibration" if hit else f"calibrated in {cal.seconds:.1f} s")


def attach(drafter, target, hierarchy_key: Any = None, cache_dir: str | Path | None = None,
           prompts: list[list[int]] | None = None) -> AutoTree:
    """Give a drafter whose ``tree`` is an ``AutoShape`` what it needs to choose at ``setup``.
    ``hierarchy_key``: anything JSON-able naming the hierarchy; without it nothing is cached."""
    if not isinstance(drafter.tree, AutoShape):
        raise ValueError(f"level {drafter.name!r}: tree_search.attach needs tree=auto, got {drafter.tree!r}")
    if cache_dir is None and hierarchy_key is not None and hasattr(target, "spec"):
        cache_dir = target.spec.resolved_cache_dir()
    drafter.auto = AutoTree(drafter.tree, target, hierarchy_key, cache_dir, prompts)
    return drafter.auto


def prepare(drafter, sampling: SamplingConfig, plan: KernelPlan = HF_PLAN) -> Choice | None:
    """Resolve ``tree=auto`` now (calibrating, or reading the cache) rather than at the first
    ``generate``: a runner calls this before it times anything, then logs the returned
    choice (``params()``, ``metrics()``, ``artifact()``). None when the top level has no auto tree."""
    auto = getattr(drafter, "auto", None) if drafter is not None else None
    if auto is None:
        return None
    auto.resolve(drafter, sampling, plan)
    return auto.choice
