"""A small causal LM as a draft level, optionally drafting through a lower level.

Without a lower level it drafts autoregressively from its own q (a chain, or a tree of
its top candidates). With a lower level it is Staged SD's "draft of the draft": it runs
exact speculative decoding of the lower level against itself until it holds the tree's
rank-0 chain (the *spine*: k tokens for a chain), and offers those to the level above.
Because the inner decoding is exact, each spine token is distributed as this model's own
q at its position, which the inner verification forward has already computed; so the
level above sees an ordinary draft with an ordinary q. A tree shape then adds this
model's ranked alternatives: under a spine node they come free from the logits the inner
verification computed; below an alternative, this model scores it itself (one batched
forward per depth, all rows together). It is the same tree a plain model level would
grow, with its rank-0 picks drawn by the lower stage instead of by this model, so the
verifier's induction (sampled pick first, point masses after) holds unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from stagedspec.engine.drafter_protocol import Drafter
from stagedspec.engine.kernels import HF_KERNELS
from stagedspec.engine.kv_cache import KVModel
from stagedspec.engine.sampling import probabilities
from stagedspec.engine.tree import DraftTree, DynamicShape, StaticShape, TreeShapeT, chain
from stagedspec.engine.verification import verify_tree_greedy
from .tree_growth import Expand, NodeDist, confident, grow_trees


class ModelDrafter(Drafter):
    def __init__(
        self,
        model: torch.nn.Module,
        k: int = 4,
        lower: Drafter | None = None,
        tree: TreeShapeT = None,
        name: str = "small",
        stop_below: float = 0.0,
        int4_rows: int = 0,
        stop_alternatives: int = 0,
        native: bool | None = None,
    ) -> None:
        # a trained draft's head covers a vocabulary subset (models/draft_files.py)
        vocab_map = getattr(model, "vocab_map", None)
        meta = getattr(model, "meta", None)
        self.kv = KVModel(
            model, name=name, vocab_map=vocab_map, vocab_size=meta.vocab_size if vocab_map is not None else None
        )
        self.k, self.lower, self.tree, self.name = k, lower, tree, name
        self.stop_below = stop_below
        """The draft ends after a pick this model gives less than this probability (0: it
        always drafts its full shape): k becomes a cap, and an unsure draft stops early."""
        self.stop_alternatives = stop_alternatives
        """Beside the pick that stopped the draft, offer this many of this model's next-best
        tokens as leaves (``grow_trees``): no extra forward, a few more target rows."""
        self.int4_rows = int4_rows
        """This model's forwards of at most this many rows multiply by 4-bit copies of its
        weights (``KernelChoice.int4_rows``); 0: the target's plan as it is."""
        self.native = native
        """Whether this model's modules holding kernel blocks (``weights=requant_q4k``) multiply by
        them (``KernelChoice.for_draft``); None: wherever the model has them."""
        self.vocab_size = self.kv.vocab_size

    def setup(self, sampling, generator, plan=HF_KERNELS) -> None:
        native = self.native
        if native is None and any(getattr(m, "_stagedspec_native", None) for m in self.kv.model.modules()):
            native = True
        self.kv.set_plan(plan.for_draft(self.int4_rows, native=native))
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
        roots = NodeDist.many(torch.stack(root_logits), self.sampling) if root_logits else []
        # pending cache slot (and, for a feature draft, output state) of each draft node
        slot = [{-1: r} for r in root_slots]
        state = [{-1: s} for s in root_states] if root_states is not None else None

        def expand(nodes: list[tuple[int, int]], trees: list[DraftTree]) -> list[NodeDist]:
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
            dists = NodeDist.many(torch.cat(logits), self.sampling)
            start = [0] * len(contexts)  # row b's first node in the concatenation
            for b in range(1, len(contexts)):
                start[b] = start[b - 1] + len(logits[b - 1])
            cursor = [0] * len(contexts)
            out = []
            for b, n in nodes:
                out.append(dists[start[b] + cursor[b]])
                if state is not None:
                    state[b][n] = states[b][cursor[b]]
                cursor[b] += 1
            return out

        return self._grow(roots, expand, contexts)

    def _grow(self, roots: list[NodeDist | None], expand: Expand, contexts: list[list[int]]) -> list[DraftTree]:
        """``grow_trees`` with this drafter's shape, cap, sampling and stopping rule."""
        return grow_trees(
            self.tree,
            self.k,
            roots,
            expand,
            self.sampling,
            self.sampler,
            self.name,
            self.stop_below,
            self.stop_alternatives,
            positions=[len(c) for c in contexts],
        )

    def _spine_length(self) -> int:
        shape = chain(self.k) if self.tree is None else self.tree
        if isinstance(shape, DynamicShape):
            return shape.depth
        assert isinstance(shape, StaticShape), shape
        return shape.spine

    def _propose_staged(self, contexts: list[list[int]]) -> list[DraftTree]:
        """Speculative decoding of the lower level against this model until each row holds
        the spine, then the rest of the tree from this model's own preferences.

        Everything stays in the cache's pending region until the next ``sync``: the
        context tail, each inner round's lower draft, and off-spine nodes, each attending
        to its own ancestors, so an alternative can hang from any spine token."""
        kv, lower = self.kv, self.lower
        assert lower is not None
        B, m = len(contexts), self._spine_length()
        spines = _Spines.start(kv.sync(contexts, min_tail=1))
        first = True
        while first or any(spines.growing(b, m) for b in range(B)):
            need = [first or spines.growing(b, m) for b in range(B)]
            drafts = lower.propose([contexts[b] + spines.tokens[b] for b in range(B)])
            pending = kv.n_pending
            feeds = [self._inner_feed(spines, b, drafts[b], pending) if need[b] else ([], [], []) for b in range(B)]
            logits = kv.extend([f[0] for f in feeds], [f[1] for f in feeds], [f[2] for f in feeds])
            accepted = [0] * B
            for b in range(B):
                if need[b]:
                    at = len(contexts[b]) + len(spines.tokens[b])
                    accepted[b] = self._take_inner_round(spines, b, drafts[b], logits[b], pending, first, m, at)
            lower.feedback(accepted)
            first = False
        return self._grow_from_spine(contexts, spines)

    @staticmethod
    def _inner_feed(spines: _Spines, b: int, draft: DraftTree, pending: int) -> tuple[list[int], list[int], list[int]]:
        """Row b's input to an inner verification forward: the spine's unfed tokens (a chain
        after the last fed one) then the lower level's draft tree; each token's parent slot;
        the rows whose logits verify the draft (the last unfed token's onwards)."""
        unfed = spines.unfed[b]
        root = pending + len(unfed) - 1
        tokens = unfed + draft.tokens
        parents = (
            [spines.last_slot[b]]
            + list(range(pending, root))
            + [root if q < 0 else root + 1 + q for q in draft.parents]
        )
        wanted = list(range(len(unfed) - 1, len(unfed) + len(draft)))
        return tokens, parents, wanted

    def _take_inner_round(
        self, spines: _Spines, b: int, d: DraftTree, lg: torch.Tensor, pending: int, first: bool, m: int, at: int
    ) -> int:
        """Verify row b's lower draft against this model's logits ``lg`` and extend the
        spine by the emitted tokens (up to ``m``, or a pick this model was unsure of);
        returns how many of the lower level's tokens were accepted. ``at``: the position in
        row b's sequence of the draft's first token (the context's length plus the spine's)."""
        root = pending + len(spines.unfed[b]) - 1
        if first:
            spines.root_slot[b] = root
        else:  # this round fed the previous round's last token, a spine token
            spines.slots[b][-1] = root
        lg = lg.float()
        if self.sampling.greedy:
            p = None
            path, tok = verify_tree_greedy(d, lg.argmax(-1).tolist())
        else:
            p = probabilities(lg, self.sampling)
            path, tok = self.sampler.verify(d, p, b, at)
        # each emitted token is distributed as this model's q at its position
        tokens = [d.tokens[i] for i in path] + [tok]
        rows = [0] + [i + 1 for i in path]
        slots = [root] + [root + 1 + i for i in path]
        origins = [d.origin[i] for i in path] + [self.name]
        spine, known = spines.tokens[b], spines.known[b]
        appended = 0
        for j, (x, o) in enumerate(zip(tokens, origins)):
            if len(spine) <= m:  # also what follows the spine's last token, when known
                known.append(NodeDist(lg[rows[j]], None if p is None else p[rows[j]], pick=x))
            if len(spine) >= m:
                break
            spine.append(x)
            spines.origin[b].append(o)
            spines.slots[b].append(slots[j + 1] if j < len(path) else None)
            appended += 1
            if not confident(known[-1], x, self.stop_below):  # grow_trees stops at the same pick
                spines.stopped[b] = True
                break
        kept = min(len(path), appended)  # the lower's tokens offered upward: within the spine
        spines.unfed[b] = [tok]
        spines.last_slot[b] = slots[-1]
        _merge(spines.drafted[b], {self.lower.name: len(d)}, d.drafted)
        _merge(spines.accepted[b], {self.lower.name: kept}, d.accepted)
        return len(path)

    def _grow_from_spine(self, contexts: list[list[int]], spines: _Spines) -> list[DraftTree]:
        """The tree around the spine, from this model's own preferences; nodes whose
        distribution the inner decoding did not compute are scored by batched forwards."""
        B = len(contexts)
        on_spine = _SpinePositions(spines.tokens)
        slot: list[dict[int, int]] = [{-1: spines.root_slot[b]} for b in range(B)]

        def expand(nodes: list[tuple[int, int]], trees: list[DraftTree]) -> list[NodeDist | None]:
            return self._expand_around_spine(nodes, trees, spines, on_spine, slot)

        roots = [spines.known[b][0] for b in range(B)]  # the first inner round ran for every row
        trees = self._grow(roots, expand, contexts)
        on_spine.forget()  # a dynamic tree was pruned and renumbered: node ids changed
        for b, tree in enumerate(trees):
            for n in range(len(tree)):
                i = on_spine.position(b, tree, n)
                if i is not None:
                    tree.origin[n] = spines.origin[b][i]
            tree.drafted, tree.accepted = spines.drafted[b], spines.accepted[b]
        return trees

    def _expand_around_spine(
        self,
        nodes: list[tuple[int, int]],
        trees: list[DraftTree],
        spines: _Spines,
        on_spine: _SpinePositions,
        slot: list[dict[int, int]],
    ) -> list[NodeDist | None]:
        """``grow_trees``' expand for ``_grow_from_spine``: what this model knows after each
        new node. A spine node's is known from the inner decoding where it computed it;
        every other node is fed (under its parent's pending slot) and scored, all rows in
        one forward. ``slot[b]`` maps row b's nodes to their pending cache slots."""
        kv, B = self.kv, len(trees)
        out: list[NodeDist | None] = [None] * len(nodes)
        P = kv.n_pending
        toks: list[list[int]] = [[] for _ in range(B)]
        pars: list[list[int]] = [[] for _ in range(B)]
        fed: list[tuple[int, int, int]] = []  # (index in nodes, row, node)
        for j, (b, n) in enumerate(nodes):
            i = on_spine.position(b, trees[b], n)
            if i is not None:
                if spines.slots[b][i] is not None:
                    slot[b][n] = spines.slots[b][i]
                if i + 1 < len(spines.known[b]):
                    out[j] = spines.known[b][i + 1]
                    continue
            if n not in slot[b]:
                slot[b][n] = P + len(toks[b])
                toks[b].append(trees[b].tokens[n])
                pars[b].append(slot[b][trees[b].parents[n]])
            fed.append((j, b, n))
        if fed:
            want = [[] for _ in range(B)]
            for _, b, n in fed:
                want[b].append(slot[b][n] - P)
            logits = kv.extend(toks, pars, want)
            dists = NodeDist.many(torch.cat(logits), self.sampling)
            start = [0] * B  # row b's first node in the concatenation
            for b in range(1, B):
                start[b] = start[b - 1] + len(logits[b - 1])
            cursor = [0] * B
            for j, b, _ in fed:
                out[j] = dists[start[b] + cursor[b]]
                cursor[b] += 1
        return out


class _SpinePositions:
    """Which spine token a node of a tree being grown is, per row: node n is spine token i
    when its rank path is i + 1 zeros along the spine's own tokens (None: off the spine).
    Memoised per node id."""

    def __init__(self, spine: list[list[int]]) -> None:
        self.spine = spine
        self.known: list[dict[int, int | None]] = [{-1: -1} for _ in spine]

    def position(self, b: int, tree: DraftTree, n: int) -> int | None:
        if n in self.known[b]:
            return self.known[b][n]
        i = self.position(b, tree, tree.parents[n])
        spine = self.spine[b]
        on = i is not None and i + 1 < len(spine) and tree.rank[n] == 0 and tree.tokens[n] == spine[i + 1]
        self.known[b][n] = i + 1 if on else None
        return self.known[b][n]

    def forget(self) -> None:
        """Drop the memo (node ids changed), keeping the root's entry."""
        for cache in self.known:
            cache.clear()
            cache[-1] = -1


@dataclass
class _Spines:
    """Per row, what a staged level's inner decoding has built so far."""

    tokens: list[list[int]]
    """The spine: the tree's rank-0 chain, drawn by the inner decoding."""
    origin: list[list[str]]
    """The level that proposed each spine token."""
    slots: list[list[int | None]]
    """Each spine token's pending cache slot (None: not fed yet)."""
    known: list[list[NodeDist]]
    """known[b][i]: what this model knows after spine token i - 1 (i = 0: the root), pick included."""
    unfed: list[list[int]]
    """The path's tokens not yet in the cache: a chain."""
    last_slot: list[int]
    """Pending slot of the path's last fed token (-1: the committed end)."""
    root_slot: list[int]
    drafted: list[dict[str, int]]
    accepted: list[dict[str, int]]
    stopped: list[bool]
    """A pick this model was unsure of ended the row's spine (stop_below)."""

    @classmethod
    def start(cls, tails: list[list[int]]) -> _Spines:
        """Empty spines over each row's uncached context tail."""
        B = len(tails)
        return cls(
            tokens=[[] for _ in range(B)],
            origin=[[] for _ in range(B)],
            slots=[[] for _ in range(B)],
            known=[[] for _ in range(B)],
            unfed=[list(t) for t in tails],
            last_slot=[-1] * B,
            root_slot=[-1] * B,
            drafted=[{} for _ in range(B)],
            accepted=[{} for _ in range(B)],
            stopped=[False] * B,
        )

    def growing(self, b: int, m: int) -> bool:
        """Row b's spine is shorter than ``m`` and no unsure pick ended it."""
        return len(self.tokens[b]) < m and not self.stopped[b]


def _merge(into: dict[str, int], *parts: dict[str, int]) -> None:
    for part in parts:
        for k, v in part.items():
            into[k] = into.get(k, 0) + v
