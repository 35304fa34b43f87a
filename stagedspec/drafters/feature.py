"""An EAGLE-style feature draft as a level (see ``stagedspec/models/draft_files.py`` for the model).

At slot t it reads ``fc([embed(x_{t+1}); f_t])``, where ``f_t`` is the target's last hidden
state at position t, and its output predicts ``f_{t+1}``; the pruned head turns that into
q for token t + 2. The target's hidden states reach it through the drafter protocol:
the decoder passes ``features[b]``, the target's hidden states at every context
position but the last (what the target has cached), to ``propose``.

Inside a draft tree a node's feature is its parent's *predicted* one, so those cache
entries are provisional: at the next round they are dropped and the newly verified
positions are fed with the target's real features. The tail fed the round before saw
real features, so it stays (``sync(keep_first=...)``): a round feeds only the tokens
verified since the last one, not the whole context. It needs the target's hidden states, so it drafts only for the
target itself, never for another level.
"""

from __future__ import annotations

import torch

from stagedspec.engine.tree import TreeShapeT
from .model_drafter import ModelDrafter


class FeatureDrafter(ModelDrafter):
    wants_features = True

    def __init__(self, draft: torch.nn.Module, k: int = 4, tree: TreeShapeT = None, name: str = "eagle") -> None:
        if getattr(draft, "design", None) != "feature":
            raise ValueError(
                f"level {name!r}: a feature drafter needs a 'feature' draft model, "
                f"got {getattr(draft, 'design', type(draft).__name__)!r}"
            )
        super().__init__(draft, k=k, tree=tree, name=name)
        self.draft = draft
        self._real_tail = 0

    def prefill(self, contexts: list[list[int]]) -> None:
        """Nothing to do before the target's features exist; the first ``propose`` feeds
        the whole prompt."""

    @torch.no_grad()
    def _feed_tails(self, contexts, features):
        if features is None:
            raise ValueError(
                f"level {self.name!r} reads the target's hidden states: it must draft directly for "
                "the target (it got no features)"
            )
        kv = self.kv
        slots = [c[1:] for c in contexts]  # slot t holds x_{t+1} (its input also needs f_t)
        tails = kv.sync(slots, min_tail=1, keep_first=self._real_tail)
        inputs = []
        for b, tail in enumerate(tails):
            end = len(slots[b])
            f = features[b][end - len(tail) : end]
            if f.shape[0] != len(tail):
                raise ValueError(
                    f"level {self.name!r}: row {b} has {features[b].shape[0]} target features for "
                    f"{len(contexts[b])} context tokens; expected one per token but the last"
                )
            inputs.append(self.draft.feature_inputs(torch.tensor(tail, device=f.device), f))
        logits, states = kv.extend_chain(tails, inputs=inputs, hidden=True)
        self._real_tail = kv.n_pending  # the slots fed so far this round hold real features
        return [lg[0] for lg in logits], [st[-1] for st in states], [len(t) - 1 for t in tails]

    @torch.no_grad()
    def _node_inputs(self, toks, parent_states):
        H = self.draft.meta.hidden_size
        out = []
        for t, ps in zip(toks, parent_states):
            if not t:
                out.append(torch.empty(0, H, dtype=self.kv.dtype, device=self.kv.device))
            else:
                out.append(self.draft.feature_inputs(torch.tensor(t, device=self.kv.device), torch.stack(ps)))
        return out
