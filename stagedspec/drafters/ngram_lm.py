"""Cheap model-free drafters: a Katz backoff n-gram LM and prompt lookup.

Both work on integer token ids only, so they can sit at the bottom of a drafting
hierarchy and cost next to nothing next to a neural model.

``KatzBackoffLM`` gives a full next-token *distribution* (every entry > 0), which is
what exact speculative sampling needs from a drafter: the acceptance test divides by
q(x), and a draft distribution with zeros could never propose tokens the target likes.

``prompt_lookup`` / ``prompt_lookup_candidates`` are the greedy "copy from the
context" drafters (HF ``prompt_lookup_num_tokens``); they give tokens, no
distribution.
"""

from __future__ import annotations

from collections import Counter

import torch

# Katz: counts above this are considered reliable and are not discounted.
KATZ_K = 5
# Absolute discount used when Good-Turing is degenerate (see ``_discount_table``).
ABSOLUTE_D = 0.5


class KatzBackoffLM:
    """Order-n Katz backoff LM over token ids in ``[0, vocab_size)``.

    The training corpus is a single growing stream fed through :meth:`update`; the
    lowest order is an add-one (Laplace) unigram over the whole vocabulary, so every
    token always has mass and an empty model is uniform.
    """

    def __init__(self, vocab_size: int, order: int = 3, base: KatzBackoffLM | None = None) -> None:
        """``base``: a fixed LM (e.g. counted once over a large corpus of the target's own
        outputs) whose counts are added to this one's at every look-up, so many rows can
        share one corpus without copying it; it must not change while in use."""
        if not isinstance(vocab_size, int) or vocab_size < 1:
            raise ValueError(f"vocab_size must be an int >= 1, got {vocab_size!r}")
        if not isinstance(order, int) or order < 1:
            raise ValueError(f"order must be an int >= 1, got {order!r}")
        if base is not None and (base.vocab_size != vocab_size or base.order != order):
            raise ValueError(
                f"base LM has vocab_size {base.vocab_size} and order {base.order}; "
                f"this one has {vocab_size} and {order}"
            )
        self.vocab_size = vocab_size
        self.order = order
        self.base = base
        self.reset()

    # ------------------------------------------------------------------ counting

    def reset(self) -> None:
        """Forget the whole corpus."""
        # _cont[k][h][w] = c(h, w) for k-grams (history h has k-1 tokens), k = 1..n;
        # index 0 is unused so that the index is the order.
        self._cont: list[dict[tuple[int, ...], dict[int, int]]] = [{} for _ in range(self.order + 1)]
        # _hist[k][h] = c(h) = sum_w c(h, w): kept alongside so a lookup is O(1).
        self._hist: list[dict[tuple[int, ...], int]] = [{} for _ in range(self.order + 1)]
        # _count_of_counts[k][r] = number of distinct k-grams seen exactly r times (Good-Turing n_r).
        self._count_of_counts: list[Counter[int]] = [Counter() for _ in range(self.order + 1)]
        # Only the last order-1 tokens are needed to continue the stream.
        self._tail: list[int] = []
        self.num_tokens = 0
        # Unigram counts as a dense tensor for the vectorised base distribution; new
        # tokens are queued and added lazily so update() never touches an O(V) tensor.
        self._unigram = torch.zeros(self.vocab_size, dtype=torch.float64)
        self._pending: list[int] = []
        # Discount tables per order, rebuilt only when counts changed.
        self._disc_cache: list[torch.Tensor | None] = [None] * (self.order + 1)

    def update(self, tokens: list[int]) -> None:
        """Append ``tokens`` to the corpus stream and update all n-gram counts.

        O(order) dict operations per new token: each token ends exactly one k-gram for
        every order k (fewer at the very start of the stream).
        """
        V = self.vocab_size
        for w in tokens:
            w = int(w)
            if not 0 <= w < V:
                raise ValueError(f"token id must be in [0, {V}), got {w}")
        n = self.order
        tail = self._tail
        for w in tokens:
            w = int(w)
            for k in range(1, n + 1):
                if len(tail) < k - 1:
                    break  # stream too short for this and higher orders
                h = tuple(tail[len(tail) - (k - 1) :]) if k > 1 else ()
                conts = self._cont[k].setdefault(h, {})
                r = conts.get(w, 0)
                conts[w] = r + 1
                self._hist[k][h] = self._hist[k].get(h, 0) + 1
                coc = self._count_of_counts[k]
                if r:
                    coc[r] -= 1
                coc[r + 1] += 1
            tail.append(w)
            if len(tail) > n - 1:
                del tail[0]
            self._pending.append(w)
        if tokens:
            self.num_tokens += len(tokens)
            self._disc_cache = [None] * (n + 1)

    # ------------------------------------------------------------------ discounts

    def _discount_table(self, k: int) -> torch.Tensor:
        """d_r for order k as a float64 tensor indexed by r = 0..KATZ_K+1 (last = r > K).

        Katz's formula with K = 5:
            d_r = (r*/r - A) / (1 - A),  r* = (r+1) n_{r+1} / n_r,  A = (K+1) n_{K+1} / n_1.
        Counts > K are reliable: d_r = 1.  On small corpora Good-Turing is often
        degenerate (some n_r or n_1 is zero, or d_r lands outside (0, 1), e.g. n_{r+1} = 0
        gives d_r <= 0); for each such r we fall back to absolute discounting
        d_r = (r - D)/r with D = 0.5, which always lies in (0, 1).  The check is per r, so
        Good-Turing is kept for the counts where it is well behaved.
        """
        cached = self._disc_cache[k]
        if cached is not None:
            return cached
        # With a base LM the counts-of-counts are summed: not those of the merged counts (a
        # k-gram seen in both is counted twice), but a smoothing heuristic needs no more; q
        # stays a proper distribution either way, and exactness never depends on q's values.
        coc = self._count_of_counts[k]  # n_r: how many k-grams were seen exactly r times
        if self.base is not None:
            coc = coc + self.base._count_of_counts[k]
        table = torch.ones(KATZ_K + 2, dtype=torch.float64)
        n1 = coc.get(1, 0)
        A = (KATZ_K + 1) * coc.get(KATZ_K + 1, 0) / n1 if n1 else None
        for r in range(1, KATZ_K + 1):
            d = None
            nr = coc.get(r, 0)
            if A is not None and nr and A < 1.0:
                r_star = (r + 1) * coc.get(r + 1, 0) / nr
                d = (r_star / r - A) / (1.0 - A)
            if d is None or not 0.0 < d < 1.0:
                d = (r - ABSOLUTE_D) / r
            table[r] = d
        self._disc_cache[k] = table
        return table

    # ------------------------------------------------------------------ distribution

    def _unigram_counts(self) -> torch.Tensor:
        if self._pending:
            idx = torch.tensor(self._pending, dtype=torch.long)
            self._unigram.index_add_(0, idx, torch.ones(len(idx), dtype=torch.float64))
            self._pending = []
        return self._unigram

    def _base(self) -> torch.Tensor:
        """Add-one unigram over the whole vocabulary (float64)."""
        counts, n = self._unigram_counts(), self.num_tokens
        if self.base is not None:
            counts, n = counts + self.base._unigram_counts(), n + self.base.num_tokens
        return (counts + 1.0) / (n + self.vocab_size)

    def _continuations(self, k: int, h: tuple[int, ...]) -> tuple[dict[int, int] | None, int]:
        """c(h, w) for every seen w, and c(h), with the base LM's counts added."""
        own = self._cont[k].get(h)
        theirs = self.base._cont[k].get(h) if self.base is not None else None
        if not theirs:
            return own, self._hist[k].get(h, 0)
        merged = dict(theirs)
        for w, c in (own or {}).items():
            merged[w] = merged.get(w, 0) + c
        return merged, self.base._hist[k][h] + self._hist[k].get(h, 0)

    def distribution(self, context: list[int]) -> torch.Tensor:
        """P(next | last order-1 tokens of ``context``): float32 [vocab_size], all > 0.

        Built bottom-up, which is the recursive Katz definition: start from the
        Laplace unigram, then for each higher order whose history was seen, scale the
        lower-order vector by alpha(h) and overwrite the few seen continuations with
        their discounted ML estimates.  An unseen history leaves the vector as is
        (alpha = 1, pure backoff).  Cost: O(V) tensor ops per order plus
        O(#continuations) Python work; no loop over the vocabulary.
        """
        p = self._base()
        ctx = list(context[-(self.order - 1) :]) if self.order > 1 else []
        for k in range(2, self.order + 1):
            if len(ctx) < k - 1:
                break
            h = tuple(int(t) for t in ctx[len(ctx) - (k - 1) :])
            conts, c_h = self._continuations(k, h)
            if not conts:
                continue
            ids = torch.tensor(list(conts.keys()), dtype=torch.long)
            counts = torch.tensor(list(conts.values()), dtype=torch.float64)
            d = self._discount_table(k)[counts.long().clamp(max=KATZ_K + 1)]
            seen = d * counts / c_h
            left = 1.0 - float(seen.sum())
            if left <= 1e-12:
                # Every continuation has count > K, so Katz discounts nothing and
                # would give unseen tokens zero mass.  Drafters must keep q > 0, so
                # absolute-discount this history instead.
                seen = (counts - ABSOLUTE_D) / c_h
                left = 1.0 - float(seen.sum())
            lower_seen = float(p[ids].sum())
            if lower_seen >= 1.0 - 1e-12:
                # The history was followed by every vocab token: nothing to back off
                # to, so just renormalise the discounted estimates.
                p = torch.zeros_like(p)
                p[ids] = seen / seen.sum()
                continue
            p = p * (left / (1.0 - lower_seen))
            p[ids] = seen
        # Computed in float64 so alpha's cancellation stays accurate; p already sums
        # to 1, and no renormalisation here so that a bug in alpha cannot hide.
        return p.to(torch.float32)

    def distributions(self, contexts: list[list[int]]) -> torch.Tensor:
        """Stack of :meth:`distribution` for each context: float32 [len(contexts), V]."""
        if not contexts:
            return torch.empty(0, self.vocab_size, dtype=torch.float32)
        return torch.stack([self.distribution(c) for c in contexts])


# ---------------------------------------------------------------------- corpus files


def write_corpus(path, tokens: list[int], vocab_size: int, source: str = "") -> None:
    """A token-id corpus for an n-gram level (int32 safetensors, with its vocabulary size)."""
    from safetensors.torch import save_file

    save_file(
        {"tokens": torch.tensor(tokens, dtype=torch.int32)},
        str(path),
        metadata={"vocab_size": str(vocab_size), "source": source},
    )


def read_corpus(path, vocab_size: int) -> list[int]:
    """The token ids of a corpus file; refuses one made for another vocabulary."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tokens = f.get_tensor("tokens")
    except Exception as e:
        raise ValueError(f"n-gram corpus {str(path)!r} is unreadable (not a token-id corpus file): {e}") from None
    have = int(meta.get("vocab_size", -1))
    if have != vocab_size:
        raise ValueError(
            f"n-gram corpus {str(path)!r} was made for a vocabulary of {have} tokens; the target has {vocab_size}"
        )
    return tokens.tolist()


# ---------------------------------------------------------------------- prompt lookup


def _check_lookup_args(k: int, max_ngram: int, min_ngram: int) -> None:
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if min_ngram < 1:
        raise ValueError(f"min_ngram must be >= 1, got {min_ngram}")
    if max_ngram < min_ngram:
        raise ValueError(f"max_ngram must be >= min_ngram ({min_ngram}), got {max_ngram}")


def _occurrences(context: list[int], n: int):
    """End positions (exclusive) of earlier occurrences of the last n tokens, newest first.

    The suffix itself is excluded, so every match has at least one following token.
    """
    L = len(context)
    if L < n + 1:
        return
    pattern = context[L - n :]
    for start in range(L - n - 1, -1, -1):
        if context[start : start + n] == pattern:
            yield start + n


def prompt_lookup(context: list[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Draft up to ``k`` tokens by copying what followed the context's suffix before.

    For n = max_ngram down to min_ngram, the last n tokens are the pattern; the first n
    with an earlier occurrence wins, and the up-to-k tokens after that occurrence are
    returned (fewer near the end of the context; [] when no n matches).

    We take the *most recent* earlier occurrence, whereas HF's
    ``prompt_lookup_num_tokens`` takes the earliest: in generation the latest repeat
    (e.g. the line just edited, the loop just unrolled) is usually the better guess.
    """
    cands = prompt_lookup_candidates(context, k, max_ngram, min_ngram, max_candidates=1)
    return cands[0] if cands else []


def prompt_lookup_candidates(
    context: list[int],
    k: int,
    max_ngram: int = 3,
    min_ngram: int = 1,
    max_candidates: int = 4,
) -> list[list[int]]:
    """Up to ``max_candidates`` distinct continuations from distinct earlier occurrences.

    Ordered by n-gram length (longest first), then recency (most recent first); the
    first entry is what :func:`prompt_lookup` returns.  An occurrence matched at a
    longer n is not counted again at a shorter n, and duplicate continuations (from
    different occurrences) are dropped, so a tree drafter gets distinct branches.
    """
    _check_lookup_args(k, max_ngram, min_ngram)
    if max_candidates < 1:
        raise ValueError(f"max_candidates must be >= 1, got {max_candidates}")
    if k == 0:
        return []
    context = [int(t) for t in context]
    out: list[list[int]] = []
    # Deduplicating continuations also dedupes occurrences: an occurrence found again
    # at a shorter n has the same end, hence the same continuation.
    seen_conts: set[tuple[int, ...]] = set()
    for n in range(max_ngram, min_ngram - 1, -1):
        for end in _occurrences(context, n):
            cont = context[end : end + k]
            if tuple(cont) in seen_conts:
                continue
            seen_conts.add(tuple(cont))
            out.append(cont)
            if len(out) >= max_candidates:
                return out
    return out
