"""Model-free levels: a Katz-backoff n-gram LM (gives a real q) and prompt lookup
(deterministic: every token a point mass)."""

from __future__ import annotations

import time

import torch

from stagedspec.engine.drafter_protocol import Drafter
from stagedspec.engine.tree import DraftTree, TreeShapeT
from .ngram_lm import KatzBackoffLM, prompt_lookup_candidates
from .tree_growth import NodeDist, check_probability, grow_trees


class KatzNgramDrafter(Drafter):
    """Drafts from an n-gram LM over the sequence so far (plus an optional fixed corpus).

    Each row has its own LM, fed with the row's context as it grows. When the context
    is rolled back (a staged level above rejected tokens this LM already counted), the
    row's LM is rebuilt from the corpus and the new context, so counts only ever
    reflect the text the row actually has.
    """

    def __init__(
        self,
        vocab_size: int,
        k: int = 4,
        order: int = 3,
        base: KatzBackoffLM | None = None,
        tree: TreeShapeT = None,
        name: str = "ngram",
        min_top: float = 0.0,
    ) -> None:
        """``base``: fixed counts (a corpus) every row's LM adds to its own, shared, not copied.
        ``min_top``: draft from a distribution only when its likeliest token has at least this
        probability (at the root: no draft this round; deeper: the node gets no children). On
        prose the context's counts are thin and a guess is rarely right, while each guess
        costs the level above a row in its forward. The gate reads the LM's own distribution
        before anything is drawn from it, so what is offered stays a function of the draft's
        distributions and verification stays exact. 0: always draft."""
        check_probability(name, "min_top", min_top, "0: always draft")
        self.vocab_size, self.k, self.order, self.tree, self.name = vocab_size, k, order, tree, name
        self.min_top = float(min_top)
        self.base = base
        self.calls = 0
        self.seconds = 0.0
        self.reset(0)

    def reset(self, batch_size: int) -> None:
        self.lms = [self._fresh() for _ in range(batch_size)]
        self.seen: list[list[int]] = [[] for _ in range(batch_size)]

    def _fresh(self) -> KatzBackoffLM:
        return KatzBackoffLM(self.vocab_size, self.order, base=self.base)

    def keep_rows(self, rows: list[int]) -> None:
        self.lms = [self.lms[r] for r in rows]
        self.seen = [self.seen[r] for r in rows]

    def _absorb(self, b: int, ctx: list[int]) -> None:
        seen = self.seen[b]
        if ctx[: len(seen)] != seen:
            self.lms[b] = self._fresh()
            seen = self.seen[b] = []
        self.lms[b].update(ctx[len(seen) :])
        seen.extend(ctx[len(seen) :])

    def prefill(self, contexts: list[list[int]]) -> None:
        for b, ctx in enumerate(contexts):
            self._absorb(b, ctx)

    def _next_token_dist(self, b: int, ctx: list[int]) -> NodeDist | None:
        """The LM's next-token distribution: its log-probabilities rank the alternatives,
        the processed q (``probabilities_from_probs``'s rule) is what its pick is drawn from.
        None when its likeliest token is below ``min_top`` (nothing drafted from it)."""
        t0 = time.perf_counter()
        p = self.lms[b].distribution(ctx).float()
        dist = None
        if self.min_top <= 0.0 or float(p.max()) >= self.min_top:
            dist = NodeDist.from_scores(torch.log(p.clamp_min(1e-30)), self.sampling)
        self.seconds += time.perf_counter() - t0
        return dist

    def forward_stats(self) -> tuple[float, int]:
        """A draft 'forward' here is one batch of next-token distributions (every row's
        nodes at one depth), as a model level's forward is: calls then count alike."""
        return self.seconds, self.calls

    def propose(self, contexts: list[list[int]], features=None) -> list[DraftTree]:
        for b, ctx in enumerate(contexts):
            self._absorb(b, ctx)

        def expand(nodes, trees):
            self.calls += 1
            return [self._next_token_dist(b, contexts[b] + trees[b].path_tokens(n)) for b, n in nodes]

        self.calls += 1
        roots = [self._next_token_dist(b, ctx) for b, ctx in enumerate(contexts)]
        return grow_trees(
            self.tree,
            self.k,
            roots,
            expand,
            self.sampling,
            self.sampler,
            self.name,
            positions=[len(c) for c in contexts],
        )


class PromptLookupDrafter(Drafter):
    """Copy what followed the most recent earlier occurrence of the context's suffix.

    Deterministic, so every token is a point mass and the verifier stays exact at any
    temperature. With ``max_candidates > 1`` the continuations of several occurrences
    are merged into a token trie (a tree draft).
    """

    def __init__(
        self, k: int = 4, max_ngram: int = 3, min_ngram: int = 1, max_candidates: int = 1, name: str = "prompt_lookup"
    ) -> None:
        self.k, self.max_ngram, self.min_ngram, self.name = k, max_ngram, min_ngram, name
        self.max_candidates = max_candidates
        self.calls = 0
        self.seconds = 0.0

    def forward_stats(self) -> tuple[float, int]:
        """A draft 'forward' here is one batch of look-ups."""
        return self.seconds, self.calls

    def propose(self, contexts: list[list[int]], features=None) -> list[DraftTree]:
        t0 = time.perf_counter()
        self.calls += 1
        trees = []
        for ctx in contexts:
            tree = DraftTree()
            children: dict[tuple[int, int], int] = {}
            for cand in prompt_lookup_candidates(ctx, self.k, self.max_ngram, self.min_ngram, self.max_candidates):
                node = -1
                for tok in cand:
                    if (node, tok) not in children:
                        children[(node, tok)] = tree.add(tok, node, None, self.name)
                    node = children[(node, tok)]
            trees.append(tree)
        self.seconds += time.perf_counter() - t0
        return trees

    @property
    def max_depth(self) -> int:
        return self.k
