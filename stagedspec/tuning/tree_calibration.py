"""What ``tree=auto`` measures on this machine before it chooses (``tree_program.py``).

``calibrate`` measures (a) a[d][r] by decoding a few prompts with the configured
hierarchy and sampling rule, its top level offering ``widths[d]`` ranked children at
each depth of its rank-0 chain (positional acceptance lets the chain stand for every
parent), (b) the target's forward for 1..N positions through its active kernel plan,
(c) the top level's ``propose`` for a chain of 1, a chain of full depth and a bushy tree
(fitted as a + b * depth + c * nodes) and (d) the rest of a round (verification, cache
bookkeeping) from the calibration rounds. The measurement is cached per hierarchy,
target, sampling rule, dtype, device, threads and kernel plan, so a sweep calibrates
once; the choice itself is a few milliseconds and is redone from the cache."""

from __future__ import annotations

import dataclasses

import logging
import random
import time

import numpy as np
import torch

from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.kernels import KernelChoice
from stagedspec.engine.kv_cache import KVModel
from stagedspec.engine.sampling import SamplingConfig, probabilities
from stagedspec.engine.tree import AutoShape, DraftTree, chain, widths_to_paths
from stagedspec.models.chat_text import encode_prompt
from stagedspec.prompts import prompt_sets
from stagedspec.prompts.training_prompts import training_prompts
from .tree_program import Calibration, interp

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- calibration
class RankRecorder:
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
            self.observe(tree, new[len(ctx) :])
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


def calibration_prompts(target, n: int, source: str = "training", seed: int = 0) -> list[list[int]]:
    """``n`` prompts encoded for the target (see ``AutoShape.source``); random token ids for
    a model without a tokenizer (tests). "data" without its questions file raises
    FileNotFoundError naming the path (the cache key says which source was used, so a
    fallback would file one source's measurement under the other's name)."""
    if target.tokenizer is None:
        rng = random.Random(seed)
        out = []
        for _ in range(n):
            base = [rng.randrange(target.vocab_size) for _ in range(rng.randrange(6, 16))]
            out.append(base + base[: len(base) // 2])
        return out
    if source == "data":
        path = prompt_sets.default_data_path()
        if not path.is_file():
            raise FileNotFoundError(
                f"tree=auto with source=data calibrates on {path}, which does not exist: set "
                f"${prompt_sets.DATA_ENV} to a Spec-Bench-style questions file or use source=training"
            )
        questions = prompt_sets.load_questions(path)
        by_cat: dict[str, list] = {}
        for q in questions:
            by_cat.setdefault(q.category, []).append(q)
        cols = [list(reversed(qs)) for qs in by_cat.values()]  # the last of each category first
        picked = [col[i] for i in range(max(map(len, cols))) for col in cols if i < len(col)][:n]
        return [encode_prompt(target.tokenizer, q.turns[:1]) for q in picked]
    if source != "training":
        raise ValueError(f"tree=auto: source must be 'training' or 'data', got {source!r}")
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


def _time_verify(target_model, ctx: list[int], sizes: list[int], plan: KernelChoice, repeats: int) -> dict[str, float]:
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


def _decode_one_by_one(
    dec: SpeculativeDecoder, rec: RankRecorder, prompts: list[list[int]], tokens: int
) -> tuple[int, int, float, float, float, list[list[int]]]:
    """Each prompt decoded alone (batch 1: the setting whose costs the program weighs), ``rec``
    counting the accepted ranks. Returns the target calls, the tokens emitted, the seconds
    spent drafting, in target forwards and in all, and each prompt followed by its output."""
    calls = emitted = 0
    draft_s = fwd_s = wall_s = 0.0
    contexts = []
    for p in prompts:
        rec.last = []
        res = dec.generate([p], tokens)
        seq = res.sequences[0]
        if rec.last:
            ctx, tree = rec.last[0]
            rec.observe(tree, (p + seq.output_ids)[len(ctx) :])
        calls += res.target_calls
        emitted += len(seq.output_ids)
        draft_s += sum(t.draft for t in res.phase_times)
        fwd_s += res.target_forward_time
        wall_s += sum(t.total for t in res.phase_times)
        contexts.append(p + seq.output_ids)
    return calls, emitted, draft_s, fwd_s, wall_s, contexts


def _draft_points(
    drafter, ctx: list[int], sampling: SamplingConfig, plan: KernelChoice, auto: AutoShape, target_model
) -> list[list[float]]:
    """(depth, size, ms) of a proposal for three shapes (a 1-chain, a full-depth chain and a
    bushy tree): the points ``_fit_draft`` fits the draft's cost to."""
    gen = torch.Generator().manual_seed(sampling.seed)
    bushy = widths_to_paths([3, 2, 2])
    return [
        [float(s.depth), float(s.size), _time_propose(drafter, ctx, s, sampling, gen, plan, auto.repeats, target_model)]
        for s in (chain(1), chain(auto.depth), bushy)
    ]


def calibrate(
    drafter,
    target,
    sampling: SamplingConfig,
    plan: KernelChoice,
    auto: AutoShape,
    key: dict,
    prompts: list[list[int]] | None = None,
) -> Calibration:
    """Measure everything ``choose`` needs (see the module docstring). Leaves ``drafter.tree``
    at the calibration shape; the caller sets the chosen one."""
    t0 = time.perf_counter()
    prompts = prompts or calibration_prompts(target, auto.prompts, auto.source)
    shape = auto.calibration_shape()
    drafter.tree = shape
    rec = RankRecorder(drafter, auto.depth, max(auto.widths))
    dec = SpeculativeDecoder(
        target.model,
        rec,
        dataclasses.replace(sampling, seed=sampling.seed + 777),
        plan=plan,
    )
    dec.generate([prompts[0][-16:]], 4)  # warm-up: first forwards allocate
    rec.counts = [[0] * max(auto.widths) for _ in range(auto.depth)]
    rec.reached = [0] * auto.depth
    calls, emitted, draft_s, fwd_s, wall_s, contexts = _decode_one_by_one(dec, rec, prompts, auto.tokens)
    traces = (
        _rank_traces(drafter, target.model, prompts, contexts, max(auto.widths), sampling, plan)
        if sampling.greedy
        else []
    )
    ctx = max(contexts, key=len)
    positions = auto.max_nodes + 1
    sizes = verify_sizes(max(positions, shape.size + 1))
    verify = _time_verify(target.model, ctx, sizes, plan, auto.repeats)
    process = _time_process(sampling, target.vocab_size, sizes, auto.repeats)
    draft_points = _draft_points(drafter, ctx, sampling, plan, auto, target.model)
    rest_ms = 1000 * (wall_s - draft_s - fwd_s) / max(calls, 1) - interp(process, shape.size + 1)
    return Calibration(
        key=key,
        widths=list(auto.widths),
        accept_counts=rec.counts,
        reached=rec.reached,
        verify_ms=verify,
        draft_fit_ms=_fit_draft(draft_points),
        draft_points=draft_points,
        rest_ms=max(rest_ms, 0.0),
        process_ms=process,
        calib_tokens_per_call=emitted / max(calls, 1),
        rounds=calls,
        seconds=time.perf_counter() - t0,
        rank_traces=traces,
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
