"""Where a job's random choices come from: the draft levels' sampled picks and the target's
acceptance tests (``SamplingConfig.coupling``).

``residual`` (the papers' rule, ``verification.py``): one generator for the whole job; a
draft token x ~ q is kept with probability min(1, p(x)/q(x)), a rejection resamples from
the residual. Exact, with the highest acceptance a single draft can have (sum of
min(p, q)); but which text comes out depends on the drafter, because each method uses the
generator's stream differently.

``gumbel`` (drafter-invariant; Daliri, Musco and Suresh 2024, "Coupling without
communication and drafter-invariant speculative decoding"): every token at position t of
sequence s is drawn as argmax_x p(x) / E[x], where E is a vector of Exp(1) noise fixed by
(seed, s, t) alone. A drafter draws its own pick at t with the *same* E from its q, and
the target keeps a draft token exactly when it equals its own draw there; at the first
mismatch it emits its own draw. So every method, plain decoding included, emits the same
tokens for the same seed: the output is plain sampling's, and only the speed differs.
Exact: the token at t is argmax(p_t / E_t) with E_t independent of everything before t,
which is a sample from p_t (the exponential race). A point-mass draft x is kept with
probability p(x), as under ``residual``; a sampled draft with probability
P(argmax p/E = argmax q/E) >= (1 - d) / (1 + d), d the total variation between p and q
(the optimum is 1 - d). Its use here: sampled benchmarks compare methods on identical
texts, so a per-prompt ratio is paired, not a draw of two different continuations.

Greedy decoding (temperature 0) takes neither: the argmax, as before.
"""

from __future__ import annotations

import torch

from .sampling import SamplingConfig, sample
from .tree import DraftTree
from .verification import verify_tree, walk_tree


class Sampler:
    """One job's random choices; shared by the decoder and every draft level.

    Rows are the batch's current rows (the decoder drops finished ones: ``keep_rows``); a
    position is the index in the row's whole token sequence (prompt included) of the token
    being drawn. Under ``residual`` both are ignored."""

    def __init__(self, sampling: SamplingConfig) -> None:
        self.sampling = sampling
        self.generator: torch.Generator | None = torch.Generator().manual_seed(sampling.seed)
        self.gumbel = not sampling.greedy and sampling.coupling == "gumbel"
        self.sequences: list[int] | None = None
        self._noise: dict[tuple[int, int], torch.Tensor] = {}

    @classmethod
    def wrap(cls, sampling: SamplingConfig, generator: Sampler | torch.Generator | None) -> Sampler:
        """A level set up with a bare generator (or none) gets a ``residual`` sampler over it;
        a ``Sampler`` passes through."""
        if isinstance(generator, Sampler):
            return generator
        out = cls(sampling)
        if not out.gumbel:
            out.generator = generator
        return out

    def reset(self, batch_size: int) -> None:
        """A new batch: row b is sequence b."""
        self.sequences = list(range(batch_size))
        self._noise.clear()

    def keep_rows(self, rows: list[int]) -> None:
        if self.sequences is not None:
            self.sequences = [self.sequences[r] for r in rows]
        keep = set(self.sequences or ())
        self._noise = {k: v for k, v in self._noise.items() if k[0] in keep}

    def release(self, row: int, position: int) -> None:
        """Row ``row`` will draw nothing before ``position`` again: drop its noise there."""
        s = self._sequence(row)
        for key in [k for k in self._noise if k[0] == s and k[1] < position]:
            del self._noise[key]

    def held_positions(self, row: int) -> list[int]:
        """The positions whose noise row ``row`` holds (``release`` drops them)."""
        s = self._sequence(row)
        return sorted(k[1] for k in self._noise if k[0] == s)

    def draw(self, q: torch.Tensor, row: int, position: int) -> int:
        """One token from the 1-D distribution ``q`` at (row, position)."""
        if not self.gumbel:
            return sample(q, self.generator)
        return self._race(q, row, position)

    def verify(self, tree: DraftTree, p: torch.Tensor, row: int, position: int) -> tuple[list[int], int]:
        """The accepted path through ``tree`` and the next token, ``p[0]`` the target's processed
        distribution at the root (whose next token is at ``position``), ``p[i + 1]`` at node i."""
        if not self.gumbel:
            return verify_tree(tree, p, self.generator)
        # the target's own draw at each depth, computed along the walk only
        return walk_tree(tree, lambda node, depth: self._race(p[node + 1], row, position + depth))

    # ------------------------------------------------------------------ gumbel
    def _sequence(self, row: int) -> int:
        return row if self.sequences is None else self.sequences[row]

    def noise(self, row: int, position: int, vocab: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Exp(1) noise over the vocabulary at (row, position), a function of (seed, sequence,
        position) only, drawn on the CPU whatever the device (so CUDA draws the same tokens):
        -log U, U uniform in [0, 1) (U = 0 gives inf: that token cannot win)."""
        key = (self._sequence(row), position)
        e = self._noise.get(key)
        if e is None or e.numel() != vocab:
            g = torch.Generator().manual_seed(_mix(self.sampling.seed, *key))
            e = torch.rand(vocab, generator=g).log_().neg_()
        e = e.to(device)
        self._noise[key] = e
        return e

    def _race(self, p: torch.Tensor, row: int, position: int) -> int:
        """argmax_x p(x) / E[x]: a sample from p (p need not be normalised)."""
        score = p.float() / self.noise(row, position, p.numel(), p.device)
        x = int(torch.argmax(score))
        if not score[x] > 0:  # every token with mass drew E = inf (probability ~ 2^-24 each)
            x = int(torch.argmax(p))
        return x


def _mix(seed: int, sequence: int, position: int) -> int:
    """A 63-bit generator seed from (seed, sequence, position): splitmix64's finaliser chained
    over the three (collisions as rare as any 64-bit hash's)."""
    x = 0
    for part in (seed, sequence, position):
        x = (x + part + 0x9E3779B97F4A7C15) & _M64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
        x ^= x >> 31
    return x >> 1


_M64 = 2**64 - 1
