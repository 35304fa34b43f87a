"""The decoding loop: draft, verify in one target call, keep the accepted prefix.

Plain autoregressive decoding is the same loop with no drafter (an empty draft each
round), through the same cache code, so speedups compare like with like.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import torch

from stagedspec.metrics.round_stats import GenerationResult, PhaseTimes, RoundStats, SequenceResult
from stagedspec.metrics.run_schema import TARGET, method_name
from .coupling import Sampler
from .drafter_protocol import Drafter
from .kernels import HF_KERNELS, KernelChoice
from .kv_cache import KVModel
from .sampling import SamplingConfig, probabilities
from .tree import DraftTree
from .verification import verify_tree_greedy

log = logging.getLogger(__name__)

OnRound = Callable[[int, list[int], list[str], RoundStats, str], None]
"""A per-round observer (``SpeculativeDecoder.generate``'s ``on_round``)."""


class SpeculativeDecoder:
    def __init__(
        self,
        target: torch.nn.Module,
        drafter: Drafter | None = None,
        sampling: SamplingConfig = SamplingConfig(),
        eos_token_ids: Sequence[int] = (),
        context_length: int | None = None,
        plan: KernelChoice = HF_KERNELS,
        kv: KVModel | None = None,
    ) -> None:
        """``plan``: the kernel path of every model forward, target and draft levels alike
        (``kernels.py``); the default is Hugging Face's own, bit for bit. ``kv``: the target's
        cache and forward if not ``target``'s own through ``plan`` (``llama_cpp_kv.LlamaCppKV``:
        the same calls on llama.cpp; ``target`` then only gives the config)."""
        if plan.int4_rows and not plan.int4_exact:
            raise ValueError(
                f"kernel plan {plan.describe()!r} multiplies by re-quantized 4-bit weights (int4_rows="
                f"{plan.int4_rows}), which changes the model: only a draft level may use it "
                f"(levels.<name>.int4_rows); give the target a plan with int4_rows=0, or its file's "
                f"own 4-bit weights (target.weights=gguf_q4)"
            )
        self.plan = plan
        self.kv = KVModel(target, name=TARGET, plan=plan) if kv is None else kv
        self.drafter = drafter
        self.sampling = sampling
        self.eos = {int(t) for t in eos_token_ids}
        self.context_length = context_length or getattr(target.config, "max_position_embeddings", None)
        self.levels = drafter.levels() if drafter is not None else []
        self.features = drafter is not None and drafter.wants_features
        for lv in self.levels[:-1]:
            if lv.wants_features:
                raise ValueError(
                    f"level {lv.name!r} reads the target's hidden states, so it must draft directly "
                    f"for the target, not for the level above it"
                )
        for lv in self.levels:
            v = getattr(lv, "vocab_size", None)
            if v is not None and v != self.kv.vocab_size:
                raise ValueError(
                    f"level {lv.name!r} has vocabulary size {v} but the target has {self.kv.vocab_size}: "
                    "every level must share the target's tokenizer"
                )

    @property
    def method(self) -> str:
        return method_name(lv.name for lv in self.levels)

    @property
    def draft_depth(self) -> int:
        """The deepest draft any level makes: positions a round needs beyond the context."""
        return max((lv.max_depth for lv in self.levels), default=0)

    def _validate(self, prompts: list[list[int]], max_new_tokens: int) -> None:
        if not prompts:
            raise ValueError("prompts is empty: give at least one prompt")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        depth = self.draft_depth
        for i, p in enumerate(prompts):
            if len(p) == 0:
                raise ValueError(f"prompt {i} is empty")
            bad = [t for t in p if not 0 <= int(t) < self.kv.vocab_size]
            if bad:
                raise ValueError(f"prompt {i} has token ids outside [0, {self.kv.vocab_size}): {bad[:5]}")
            need = len(p) + max_new_tokens + depth
            if self.context_length is not None and need > self.context_length:
                raise ValueError(
                    f"prompt {i} has {len(p)} tokens; with max_new_tokens={max_new_tokens} and draft depth "
                    f"{depth} it needs {need} positions, more than the context length {self.context_length}"
                )

    def generate(
        self, prompts: list[list[int]], max_new_tokens: int, on_round: OnRound | None = None
    ) -> GenerationResult:
        """Decode every prompt. ``on_round(i, new_ids, origins, stats, finished)``, if given,
        is called once per round per sequence as the round commits: prompt i's new tokens,
        the level that proposed each, the round's ``RoundStats``, and ``"eos"``/``"length"``
        when the sequence ended there (else ""). Its time counts in the round's overhead."""
        self._validate(prompts, max_new_tokens)
        sampler = Sampler(self.sampling)
        sampler.reset(len(prompts))
        draft_name = self.drafter.name if self.drafter is not None else None
        results = [SequenceResult(prompt_ids=list(p), draft_level=draft_name) for p in prompts]
        contexts = [list(p) for p in prompts]
        active = list(range(len(prompts)))
        res = GenerationResult(sequences=results)
        t_start = time.perf_counter()
        features = self._prefill(contexts, sampler)
        res.prefill_time = time.perf_counter() - t_start
        fwd0 = self._forward_stats()
        while active:
            active = self._round(contexts, results, active, features, sampler, res, max_new_tokens, on_round)
        res.wall_time = time.perf_counter() - t_start
        self._forward_times(res, fwd0)
        return res

    def _prefill(self, contexts: list[list[int]], sampler: Sampler) -> _Features | None:
        """Reset the caches, set the drafter up and cache all but each prompt's last token,
        which is the first round's root; the target's hidden states for a feature draft."""
        self.kv.reset(len(contexts))
        if self.drafter is not None:
            self.drafter.setup(self.sampling, sampler, self.plan)
            self.drafter.reset(len(contexts))
        out = self.kv.extend_chain(self.kv.sync([c[:-1] for c in contexts]), want_last=False, hidden=self.features)
        features = _Features(out[1]) if self.features else None
        if self.drafter is not None:
            self.drafter.prefill(contexts)
        return features

    def _round(
        self,
        contexts: list[list[int]],
        results: list[SequenceResult],
        active: list[int],
        features: _Features | None,
        sampler: Sampler,
        res: GenerationResult,
        max_new_tokens: int,
        on_round: OnRound | None,
    ) -> list[int]:
        """One round: draft, score every row's tree in one target call, verify and commit
        each row; returns the rows still decoding."""
        ctxs = [contexts[i] for i in active]
        before = self._forward_stats()
        t0 = time.perf_counter()
        if self.drafter is None:
            trees = [DraftTree() for _ in ctxs]
        else:
            trees = self.drafter.propose(ctxs, features.rows if features is not None else None)
        t1 = time.perf_counter()
        logits, widths, tail_lens, states = self._score(ctxs, trees)
        t2 = time.perf_counter()
        if self.drafter is not None and self.drafter.successors:
            self._recycle(ctxs, trees, logits)
        after = self._forward_stats()
        calls = {lv.name: after[lv.name][1] - before[lv.name][1] for lv in self.levels}
        accepted, keep = [], []
        n_max = max(widths)
        for row, (i, tree) in enumerate(zip(active, trees)):
            path, tok = self._verify(tree, logits[row], sampler, row, len(contexts[i]))
            accepted.append(len(path))
            if features is not None:  # the target's states at what it now holds: tail + accepted path
                n_tail = tail_lens[row]
                features.append(row, states[row][list(range(n_tail)) + [n_tail + j for j in path]])
            new, origin, stats = self._commit(
                contexts[i], results[i], tree, path, tok, max_new_tokens, padding=n_max - widths[row]
            )
            sampler.release(row, len(contexts[i]))
            if not results[i].finished_reason:
                keep.append(row)
            if on_round is not None:
                on_round(i, new, origin, stats, results[i].finished_reason)
        if self.drafter is not None:
            self.drafter.feedback(accepted)
            self.drafter.observe_round(t2 - t1, n_max)
        if len(keep) < len(active):
            self.kv.keep_rows(keep)
            sampler.keep_rows(keep)
            if features is not None:
                features.keep_rows(keep)
            if self.drafter is not None:
                self.drafter.keep_rows(keep)
            active = [active[r] for r in keep]
        res.target_calls += 1
        t3 = time.perf_counter()
        res.phase_times.append(
            PhaseTimes(draft=t1 - t0, verify=t2 - t1, overhead=t3 - t2, draft_calls=calls, rows=len(trees), width=n_max)
        )
        return active

    def _recycle(self, ctxs: list[list[int]], trees: list[DraftTree], logits: list[torch.Tensor]) -> None:
        """Token Recycling's table (``Drafter.successors``): per row, each scored position's input
        token (the root, the last context token; then the draft nodes) with the target's likeliest
        next tokens there. Read before the round commits; drafts use it from the next round on."""
        k = self.drafter.successors
        for ctx, tree, lg in zip(ctxs, trees, logits):
            top = lg[: 1 + len(tree)].topk(k, dim=-1).indices.tolist()
            self.drafter.observe_successors([ctx[-1], *tree.tokens], top)

    def _verify(
        self, tree: DraftTree, logits: torch.Tensor, sampler: Sampler, row: int, position: int
    ) -> tuple[list[int], int]:
        """The accepted path through ``tree`` and the token the target adds after it; the root's
        next token is at ``position`` of the row's sequence."""
        if self.sampling.greedy:
            return verify_tree_greedy(tree, logits.argmax(-1).tolist())
        return sampler.verify(tree, probabilities(logits, self.sampling), row, position)

    def _commit(
        self,
        context: list[int],
        result: SequenceResult,
        tree: DraftTree,
        path: list[int],
        tok: int,
        max_new_tokens: int,
        padding: int,
    ) -> tuple[list[int], list[str], RoundStats]:
        """Append a row's accepted tokens and the target's own (cut at ``max_new_tokens`` and
        at the first eos) to its context and result, with the round's stats; sets
        ``finished_reason`` when the row ends here. Returns the new tokens, the level that
        proposed each, and the stats."""
        new = [tree.tokens[j] for j in path] + [tok]
        origin = [tree.origin[j] for j in path] + [TARGET]
        room = max_new_tokens - len(result.output_ids)
        new, origin = new[:room], origin[:room]
        eos_at = next((j for j, t in enumerate(new) if t in self.eos), None)
        if eos_at is not None:
            new, origin = new[: eos_at + 1], origin[: eos_at + 1]
        context.extend(new)
        result.output_ids.extend(new)
        result.provenance.extend(origin)
        stats = RoundStats(
            drafted=dict(tree.drafted),
            accepted=dict(tree.accepted),
            emitted=len(new),
            target_positions=1 + len(tree),
            accepted_depth=len(path),
            rejected=(path[-1] if path else -1) in tree.parents,
            draft_depth=tree.depth(),
            tree_nodes=len(tree),
            padding_positions=padding,
        )
        if result.draft_level is not None:
            owner = tree.owner or result.draft_level
            stats.drafter = owner if len(tree) else None
            stats.drafted[owner] = stats.drafted.get(owner, 0) + len(tree)
            stats.accepted[owner] = stats.accepted.get(owner, 0) + len(path)
        result.record(stats)
        if eos_at is not None:
            result.finished_reason = "eos"
        elif len(result.output_ids) >= max_new_tokens:
            result.finished_reason = "length"
        return new, origin, stats

    def _forward_times(self, res: GenerationResult, fwd0: dict[str, tuple[float, int]]) -> None:
        """The target's and each level's forward time (and count) since ``fwd0``."""
        fwd1 = self._forward_stats()
        res.target_forward_time = fwd1[TARGET][0] - fwd0[TARGET][0]
        for lv in self.levels:
            secs, n = fwd1[lv.name][0] - fwd0[lv.name][0], fwd1[lv.name][1] - fwd0[lv.name][1]
            if n:
                res.draft_call_time[lv.name] = secs
                res.draft_forwards[lv.name] = n

    def _forward_stats(self) -> dict[str, tuple[float, int]]:
        out = {TARGET: (self.kv.forward_time, self.kv.forward_calls)}
        for lv in self.levels:
            out[lv.name] = lv.forward_stats()
        return out

    def _score(self, ctxs: list[list[int]], trees: list[DraftTree]):
        """One target forward over each row's uncached tail plus its draft tree; returns the
        logits at the root (last context token) and at every draft node, the row widths,
        the tail lengths and (for a feature draft) the hidden states of every fed token."""
        tails = self.kv.sync(ctxs, min_tail=1)
        widths = [len(t) + len(tree) for t, tree in zip(tails, trees)]
        out = self.kv.extend_trees(tails, trees, hidden=self.features)
        logits, states = out if self.features else (out, None)
        return logits, widths, [len(t) for t in tails], states


class _Features:
    """Per row, the target's last hidden state at every context position but the last
    (the positions it has cached), for a level that drafts from them."""

    def __init__(self, first: list[torch.Tensor]) -> None:
        self.rows = list(first)

    def append(self, row: int, states: torch.Tensor) -> None:
        self.rows[row] = torch.cat([self.rows[row], states])

    def keep_rows(self, rows: list[int]) -> None:
        self.rows = [self.rows[r] for r in rows]
