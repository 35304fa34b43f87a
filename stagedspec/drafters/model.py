"""A small causal LM as a draft level, optionally drafting through a lower level.

Without a lower level it drafts autoregressively from its own q (a chain, or a tree of
its top candidates). With a lower level it is Staged SD's "draft of the draft": it runs
exact speculative decoding of the lower level against itself until it holds k tokens,
and offers those to the level above. Because the inner decoding is exact, each offered
token is distributed as this model's own q at its position, which the inner
verification forward has already computed; so the level above sees an ordinary draft
with an ordinary q.
"""

from __future__ import annotations

import torch

from ..kernels import HF_PLAN
from ..kvmodel import KVModel
from ..sampling import probabilities
from ..tree import DraftTree, TreeShapeT
from ..verification import verify_tree
from .base import Drafter, grow_trees


class ModelDrafter(Drafter):
    def __init__(self, model: torch.nn.Module, k: int = 4, lower: Drafter | None = None,
                 tree: TreeShapeT = None, name: str = "small") -> None:
        if lower is not None and tree is not None:
            raise ValueError(
                f"level {name!r}: a level drafting through a lower level ({lower.name!r}) offers a chain; "
                f"set its tree to null (got {tree})"
            )
        # a trained draft's head covers a vocabulary subset (draft_models.py)
        vocab_map = getattr(model, "vocab_map", None)
        meta = getattr(model, "meta", None)
        self.kv = KVModel(model, name=name, vocab_map=vocab_map,
                          vocab_size=meta.vocab_size if vocab_map is not None else None)
        self.k, self.lower, self.tree, self.name = k, lower, tree, name
        self.vocab_size = self.kv.vocab_size

    def setup(self, sampling, generator, plan=HF_PLAN) -> None:
        self.kv.set_plan(plan)
        super().setup(sampling, generator, plan)

    def reset(self, batch_size: int) -> None:
        self.kv.reset(batch_size)
        super().reset(batch_size)

    def keep_rows(self, rows: list[int]) -> None:
        self.kv.keep_rows(rows)
        super().keep_rows(rows)

    def prefill(self, contexts: list[list[int]]) -> None:
        # cache all but the last token; that one is fed with the first draft step
        self.kv.extend_chain(self.kv.sync([c[:-1] for c in contexts]), want_last=False)
        super().prefill(contexts)

    def forward_stats(self) -> tuple[float, int]:
        return self.kv.forward_time, self.kv.forward_calls

    # The three steps a feature draft (drafters/feature.py) does differently.
    def _feed_tails(self, contexts: list[list[int]], features) -> tuple[list[torch.Tensor], list | None, list[int]]:
        """Feed each row's uncached context; return the logits after its last token, the
        hidden state there (a feature draft's; else None) and its pending slot."""
        tails = self.kv.sync(contexts, min_tail=1)
        return [lg[0] for lg in self.kv.extend_chain(tails)], None, [len(t) - 1 for t in tails]

    def _node_inputs(self, toks: list[list[int]], parent_states: list[list]) -> list[torch.Tensor] | None:
        """Input vectors for new draft nodes (None: their token embeddings)."""
        return None

    def propose(self, contexts: list[list[int]], features=None) -> list[DraftTree]:
        if self.lower is not None:
            return self._propose_staged(contexts)
        kv = self.kv
        root_logits, root_states, root_slots = self._feed_tails(contexts, features)
        roots = [probabilities(lg, self.sampling) for lg in root_logits]
        # pending cache slot (and, for a feature draft, output state) of each draft node
        slot = [{-1: r} for r in root_slots]
        state = [{-1: s} for s in root_states] if root_states is not None else None

        def expand(nodes: list[tuple[int, int]], trees: list[DraftTree]) -> list[torch.Tensor]:
            P = kv.n_pending
            toks: list[list[int]] = [[] for _ in contexts]
            pars: list[list[int]] = [[] for _ in contexts]
            parent_states: list[list] = [[] for _ in contexts]
            for b, n in nodes:
                slot[b][n] = P + len(toks[b])
                toks[b].append(trees[b].tokens[n])
                pars[b].append(slot[b][trees[b].parents[n]])
                if state is not None:
                    parent_states[b].append(state[b][trees[b].parents[n]])
            new = [list(range(len(t))) for t in toks]
            inputs = self._node_inputs(toks, parent_states)
            if state is None:
                logits = kv.extend(toks, pars, new)
            else:
                logits, states = kv.extend(toks, pars, new, inputs=inputs, hidden=new)
            cursor = [0] * len(contexts)
            out = []
            for b, n in nodes:
                out.append(probabilities(logits[b][cursor[b]], self.sampling))
                if state is not None:
                    state[b][n] = states[b][cursor[b]]
                cursor[b] += 1
            return out

        return grow_trees(self.tree, self.k, roots, expand, self.sampling, self.generator, self.name)

    def _propose_staged(self, contexts: list[list[int]]) -> list[DraftTree]:
        """Speculative decoding of the lower level against this model, until k tokens."""
        kv, lower = self.kv, self.lower
        assert lower is not None
        B = len(contexts)
        out = [DraftTree() for _ in range(B)]
        while any(len(t) < self.k for t in out):
            need = [len(t) < self.k for t in out]
            inner = [contexts[b] + out[b].tokens for b in range(B)]
            drafts = lower.propose(inner)
            tails = kv.sync(inner, min_tail=1)
            logits = kv.extend_trees(tails, drafts, rows=need)
            acc = [0] * B
            for b in range(B):
                if not need[b]:
                    continue
                d = drafts[b]
                p = probabilities(logits[b], self.sampling)
                path, tok = verify_tree(d, p, self.generator)
                # each emitted token is distributed as this model's p at its position
                dists = [p[0]] + [p[i + 1] for i in path]
                tokens = [d.tokens[i] for i in path] + [tok]
                origins = [d.origin[i] for i in path] + [self.name]
                kept = min(len(path), self.k - len(out[b]))  # the lower's tokens offered upward: within k
                for x, q, o in zip(tokens, dists, origins):
                    if len(out[b]) >= self.k:
                        break
                    out[b].add(x, len(out[b]) - 1, q, o)
                _merge(out[b].drafted, {lower.name: len(d)}, d.drafted)
                _merge(out[b].accepted, {lower.name: kept}, d.accepted)
                acc[b] = len(path)
            lower.feedback(acc)
        return out


def _merge(into: dict[str, int], *parts: dict[str, int]) -> None:
    for part in parts:
        for k, v in part.items():
            into[k] = into.get(k, 0) + v
