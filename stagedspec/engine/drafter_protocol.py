"""The drafter protocol every level implements (the engine's side of drafting).

A drafter sees the contexts of a batch and proposes one ``DraftTree`` per row: tokens,
their parents, and for each token the distribution q it was sampled from, or ``None``
when it was chosen deterministically (a point mass). The level above verifies, and the
drafter hears back how many tokens it accepted (``feedback``). A drafter needs no other
signal: at its next ``propose`` it compares the new contexts with what it holds and rolls
back or catches up by itself, so an n-gram table, a small model and a whole lower stage
of speculation look the same to the level above. The levels themselves live in
``stagedspec/drafters/``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from .coupling import Sampler
from .kernels import HF_KERNELS, KernelChoice
from .sampling import SamplingConfig
from .tree import AutoShape, DraftTree, TreeShapeT


class Drafter(ABC):
    name: str = "drafter"
    k: int = 1
    tree: TreeShapeT = None
    lower: Drafter | None = None
    wants_features: bool = False
    """True for a level that reads the target's hidden states (an EAGLE-style feature
    draft): the decoder then passes them to ``propose``. Only the level drafting directly
    for the target can have them."""

    def setup(
        self,
        sampling: SamplingConfig,
        generator: Sampler | torch.Generator | None,
        plan: KernelChoice = HF_KERNELS,
    ) -> None:
        """Called by the level above before decoding: the sampling rule applies to q too,
        and model levels run their forwards through the same kernel plan as the target.
        ``generator``: the job's ``Sampler`` (the decoder's, shared by every level), or a bare
        generator (a level used on its own: a sampler over it, ``Sampler.wrap``).
        A ``tree=auto`` must be resolved to a shape before (``stagedspec/tuning/``, from a
        job's assembly): the engine never measures nor chooses."""
        if isinstance(self.tree, AutoShape):
            raise ValueError(
                f"level {self.name!r}: tree=auto is unresolved; resolve it before decoding with "
                "stagedspec.tuning.auto_tree.resolve_auto_tree(drafter, target, sampling, plan) "
                "(evaluation.job.assemble_job does)"
            )
        self.sampling = sampling
        self.sampler = Sampler.wrap(sampling, generator)
        self.generator = self.sampler.generator
        if self.lower is not None:
            self.lower.setup(sampling, self.sampler, plan)

    def reset(self, batch_size: int) -> None:
        if self.lower is not None:
            self.lower.reset(batch_size)

    def prefill(self, contexts: list[list[int]]) -> None:
        """Optional: absorb the prompts before the first round (timed as prefill)."""
        if self.lower is not None:
            self.lower.prefill(contexts)

    @abstractmethod
    def propose(self, contexts: list[list[int]], features: list[torch.Tensor] | None = None) -> list[DraftTree]:
        """One draft tree per row. ``features[b]``, given only to a level that
        ``wants_features``: the target's last hidden states at every position of
        ``contexts[b]`` but the last."""

    def feedback(self, accepted: list[int]) -> None:
        """How many of each row's draft tokens the level above accepted (HF's
        ``update_candidate_strategy``); a hook for adaptive drafters."""

    successors: int = 0
    """k > 0: after each target call the decoder hands this level (``observe_successors``) the input
    token of every scored position (each row's root and draft nodes) with the target's k likeliest
    next tokens there (Token Recycling, ``drafters/recycle.py``); 0: nothing is computed."""

    def observe_successors(self, inputs: list[int], successors: list[list[int]]) -> None:
        """One row's scored positions: ``inputs[i]`` and the target's likeliest next tokens after it
        there, best first (``successors`` > 0 only)."""

    def observe_round(self, verify_seconds: float, rows: int) -> None:
        """The round's target call, after ``feedback``: its seconds and the rows it scored for the
        widest batch row (tail + draft nodes); a hook for routers that price rounds in seconds."""

    def keep_rows(self, rows: list[int]) -> None:
        if self.lower is not None:
            self.lower.keep_rows(rows)

    def levels(self) -> list[Drafter]:
        """This level and the ones below it, lowest first."""
        return (self.lower.levels() if self.lower is not None else []) + [self]

    def forward_stats(self) -> tuple[float, int]:
        """(seconds, calls) spent in this level's own model forwards."""
        return 0.0, 0

    @property
    def max_depth(self) -> int:
        if self.tree is None:
            return self.k
        return self.tree.depth
