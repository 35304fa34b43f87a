"""A causal LM with a batched KV cache that rolls back, holds token trees, and lets rows of
a batch advance by different amounts.

Every model in a hierarchy (target, small drafter, plain baseline) goes through this one
class, so speedups compare like with like.

How the cache is laid out. The cache is one ``DynamicCache`` of ``T`` slots shared by the
batch. Slots ``[0, n_commit)`` are *committed*: each row's committed tokens sit in some of
them, in order (``valid`` marks which); a row that advanced less than another has holes,
which the attention mask hides. Slots ``[n_commit, T)`` are *pending*: nodes fed since the
last ``sync`` (a tail of the context, then draft trees), each attending to its row's
committed slots plus its own ancestors among the pending nodes. Position ids are explicit
(committed length + depth), so holes and padding never shift a token's position.

``sync(contexts)`` is the only way state moves forward: it keeps the pending nodes that
spell the next context tokens (moving them, per row, to the front of the pending region
with one gather per layer: no recomputation), drops the other pending nodes, rolls back
committed tokens the context no longer has, and returns each row's uncached tail.
"""

from __future__ import annotations

import time

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, CacheLayerMixin

from .kernels import HF_KERNELS, KernelChoice, install, native_decoder_row, prepack
from .logit_processing import check_logit_processing, final_logit_processing

_DUMMY = -2  # parent marker of a padding slot


class SlotLayer(CacheLayerMixin):
    """One layer's keys and values in buffers with spare room. ``DynamicCache`` appends
    with ``torch.cat``, copying the whole layer every step (3.4 ms of a 31 ms forward at
    300 tokens of context, measured); here a step writes its new slots in place, a
    rollback is a length change, and the buffers double when full."""

    def __init__(self) -> None:
        super().__init__()
        self.length = 0

    @property
    def keys(self) -> torch.Tensor | None:
        return None if self._k is None else self._k[:, :, : self.length]

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        assert value is None, "SlotLayer: change the cache through update/truncate"
        self._k = None

    @property
    def values(self) -> torch.Tensor | None:
        return None if self._v is None else self._v[:, :, : self.length]

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        assert value is None, "SlotLayer: change the cache through update/truncate"
        self._v = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self._k = key_states.new_empty(*key_states.shape[:2], 0, key_states.shape[3])
        self._v = value_states.new_empty(*value_states.shape[:2], 0, value_states.shape[3])
        self.is_initialized = True

    def _reserve(self, need: int) -> None:
        cap = self._k.shape[2]
        if need <= cap:
            return
        cap = max(need, 2 * cap, 256)
        for name in ("_k", "_v"):
            old = getattr(self, name)
            new = old.new_empty(*old.shape[:2], cap, old.shape[3])
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[2]
        self._reserve(self.length + n)
        self._k[:, :, self.length : self.length + n] = key_states
        self._v[:, :, self.length : self.length + n] = value_states
        self.length += n
        return self.keys, self.values

    def append_slot(self, n: int = 1) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Room for ``n`` more slots of a batch of one, for a caller that writes them itself (the
        layer kernels): this batch row's key and value buffers ([heads, capacity, head_dim]) and
        the first new slot's index; the slots are now counted in the layer's length."""
        self._reserve(self.length + n)
        self.length += n
        return self._k[0], self._v[0], self.length - n

    def truncate(self, n: int) -> None:
        self.length = min(self.length, n)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def get_max_length(self) -> int:
        return -1

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._k, self._v = self._k[indices], self._v[indices]

    def reset(self) -> None:
        self._k = self._v = None
        self.length = 0
        self.is_initialized = False


def _refuse_cache_layers_we_do_not_handle(model: torch.nn.Module) -> None:
    """Refuse a model whose cache Hugging Face would build with layers other than plain
    full attention: a sliding-window layer (``DynamicSlidingWindowLayer``) trims itself
    once it holds more than its window, behind the back of the slot bookkeeping here
    (rollback, trees, holes), and chunked or recurrent layers are no plain KV list either.
    A window at least as long as the model's context never trims, so it is allowed."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    config = model.config
    context = getattr(config.get_text_config(decoder=True), "max_position_embeddings", None)
    for i, layer in enumerate(DynamicCache(config=config).layers):
        if type(layer) is DynamicLayer:
            continue
        window = getattr(layer, "sliding_window", None)
        if (
            isinstance(layer, DynamicSlidingWindowLayer)
            and window is not None
            and context is not None
            and window >= context
        ):
            continue
        what = (
            f"a sliding window of {window} tokens (context {context})"
            if isinstance(layer, DynamicSlidingWindowLayer)
            else f"a {type(layer).__name__} cache layer"
        )
        raise ValueError(
            f"model family {getattr(config, 'model_type', type(model).__name__)!r}: layer {i} has {what}; the KV "
            "cache here (rollback, token trees) handles plain full-attention layers only, so this model is refused "
            "until it handles that"
        )


def _tril(n: int, batch: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).tril().expand(batch, n, n)


class KVModel:
    """``vocab_map``: for a model whose LM head covers a subset of the vocabulary (a
    frequency-pruned draft head), the token id of each head row; logits come back over
    the full vocabulary with -inf outside the subset, so q has zero mass there."""

    def __init__(
        self,
        model: torch.nn.Module,
        name: str = "target",
        plan: KernelChoice = HF_KERNELS,
        vocab_map: torch.Tensor | None = None,
        vocab_size: int | None = None,
    ) -> None:
        self.model = model
        self.name = name
        self.plan = HF_KERNELS
        self.set_plan(plan)
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.decoder = model.get_decoder()
        self.head = model.get_output_embeddings()
        _refuse_cache_layers_we_do_not_handle(model)
        # the head is applied here, at the wanted positions only: so is what the model's own
        # forward does after it (a scale, a soft cap); a family doing more is refused
        check_logit_processing(model)
        self.final_logits = final_logit_processing(model.config)
        self.vocab_map = None if vocab_map is None else vocab_map.to(self.device)
        self.vocab_size = int(vocab_size if vocab_map is not None else self.head.weight.shape[0])
        self.forward_time = 0.0
        self.forward_calls = 0
        self.reset(0)

    def set_plan(self, plan: KernelChoice) -> None:
        """The kernel path of this model's forwards (see ``kernels.py``); takes effect at
        the next ``reset``."""
        if not plan.bitwise_hf:
            install(self.model)
            prepack(self.model, plan)  # outside every timed forward
        self.plan = plan

    # ------------------------------------------------------------------ state
    def reset(self, batch_size: int) -> None:
        if self.plan.slot_cache:
            self.cache = Cache(layers=[SlotLayer() for _ in range(self.model.config.num_hidden_layers)])
        else:
            self.cache = DynamicCache(config=self.model.config)
        self.tokens: list[list[int]] = [[] for _ in range(batch_size)]
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool)
        self.n_commit = 0
        self._clear_pending(batch_size)

    def _clear_pending(self, batch_size: int) -> None:
        self.pending_tokens: list[list[int]] = [[] for _ in range(batch_size)]
        self.pending_parents: list[list[int]] = [[] for _ in range(batch_size)]
        self.pending_depths: list[list[int]] = [[] for _ in range(batch_size)]
        self.pending_ancestors = torch.zeros(batch_size, 0, 0, dtype=torch.bool)

    @property
    def batch_size(self) -> int:
        return len(self.tokens)

    @property
    def n_pending(self) -> int:
        return len(self.pending_tokens[0]) if self.pending_tokens else 0

    @property
    def n_slots(self) -> int:
        return self.valid.shape[1]

    def keep_rows(self, rows: list[int]) -> None:
        """Drop finished rows so they stop costing compute."""
        if rows == list(range(self.batch_size)):
            return
        idx = torch.tensor(rows, dtype=torch.long)
        if self.n_slots:
            self.cache.batch_select_indices(idx.to(self.device))
        self.tokens = [self.tokens[r] for r in rows]
        self.valid = self.valid[idx]
        self.pending_tokens = [self.pending_tokens[r] for r in rows]
        self.pending_parents = [self.pending_parents[r] for r in rows]
        self.pending_depths = [self.pending_depths[r] for r in rows]
        self.pending_ancestors = self.pending_ancestors[idx]

    def _layers(self):
        return [layer for layer in self.cache.layers if getattr(layer, "is_initialized", False)]

    def _truncate(self, n: int) -> None:
        for layer in self._layers():
            if isinstance(layer, SlotLayer):
                layer.truncate(n)
            else:
                layer.keys = layer.keys[:, :, :n]
                layer.values = layer.values[:, :, :n]
        self.valid = self.valid[:, :n]

    # ------------------------------------------------------------------- sync
    @torch.no_grad()
    def sync(
        self, contexts: list[list[int]], min_tail: int = 0, keep_pending: bool = True, keep_first: int | None = None
    ) -> list[list[int]]:
        """Commit the pending path that matches each context, roll back what the context
        no longer has, and return each row's tail (context tokens not in the cache).

        ``min_tail`` rolls back further where needed so each tail has at least that many
        tokens: a caller that needs logits after the last token must feed it.
        ``keep_pending=False`` drops every pending node instead of committing matches: for
        a model whose inputs at draft nodes were provisional (a feature draft fed its own
        predicted features) and must be recomputed. ``keep_first=m`` drops the pending
        nodes after the first m (the tail such a model was fed with real inputs) and
        commits matches among those.
        """
        assert len(contexts) == self.batch_size, (len(contexts), self.batch_size)
        if not keep_pending and self.n_pending:
            self._truncate(self.n_commit)
            self._clear_pending(self.batch_size)
        elif keep_first is not None and self.n_pending > keep_first:
            self._truncate(self.n_commit + keep_first)
            for lists in (self.pending_tokens, self.pending_parents, self.pending_depths):
                for row in lists:
                    del row[keep_first:]
            self.pending_ancestors = self.pending_ancestors[:, :keep_first, :keep_first]
        P = self.n_pending
        if P:
            matched = [self._match_pending(b, ctx) for b, ctx in enumerate(contexts)]
            n_keep = max(len(m) for m in matched)
            if n_keep:
                idx = torch.tensor([m + [0] * (n_keep - len(m)) for m in matched], dtype=torch.long)
                keep = torch.tensor([[True] * len(m) + [False] * (n_keep - len(m)) for m in matched])
                gidx = idx.to(self.device)
                c = self.n_commit
                for layer in self._layers():
                    for attr in ("keys", "values"):
                        t = getattr(layer, attr)
                        g = gidx[:, None, :, None].expand(t.shape[0], t.shape[1], n_keep, t.shape[3])
                        t[:, :, c : c + n_keep] = torch.gather(t[:, :, c : c + P], 2, g)
                self.valid[:, c : c + n_keep] = keep
                for b, m in enumerate(matched):
                    self.tokens[b].extend(self.pending_tokens[b][s] for s in m)
            self._truncate(self.n_commit + n_keep)
            self.n_commit += n_keep
            self._clear_pending(self.batch_size)
        if min_tail:
            self._rollback([ctx[: max(0, min(len(t), len(ctx) - min_tail))] for ctx, t in zip(contexts, self.tokens)])
        self._rollback(contexts)
        return [ctx[len(toks) :] for ctx, toks in zip(contexts, self.tokens)]

    def _match_pending(self, b: int, ctx: list[int]) -> list[int]:
        """Pending slots of row b spelling ctx after the committed tokens (first match wins;
        two siblings with the same token hold identical keys and values)."""
        child: dict[tuple[int, int], int] = {}
        for s, (par, tok) in enumerate(zip(self.pending_parents[b], self.pending_tokens[b])):
            child.setdefault((par, tok), s)
        out: list[int] = []
        cur, i = -1, len(self.tokens[b])
        while i < len(ctx):
            nxt = child.get((cur, ctx[i]))
            if nxt is None:
                break
            out.append(nxt)
            cur, i = nxt, i + 1
        return out

    def _rollback(self, contexts: list[list[int]]) -> None:
        changed = False
        for b, ctx in enumerate(contexts):
            toks = self.tokens[b]
            n = min(len(toks), len(ctx))
            lcp = next((i for i in range(n) if toks[i] != ctx[i]), n)
            if lcp < len(toks):
                slots = self.valid[b].nonzero().flatten()
                self.valid[b, slots[lcp:]] = False
                del toks[lcp:]
                changed = True
        if changed:
            used = self.valid.any(0).nonzero()
            last = int(used.max()) + 1 if len(used) else 0
            if last < self.n_commit:
                self._truncate(last)
                self.n_commit = last

    # ---------------------------------------------------------------- forward
    @torch.no_grad()
    def extend(
        self,
        tokens: list[list[int]],
        parents: list[list[int]],
        want: list[list[int]],
        inputs: list[torch.Tensor] | None = None,
        hidden: list[list[int]] | None = None,
    ):
        """Feed new pending nodes and return float32 logits at the wanted new nodes.

        ``parents[b][j]`` is the pending slot of node j's parent (earlier pending slots
        count from 0; this call's nodes follow them), or -1 for a node that directly
        continues the committed tokens. Returns, per row, logits ``[len(want[b]), V]``.

        ``inputs[b]`` (``[len(tokens[b]), hidden]``): input vectors to feed instead of the
        tokens' embeddings (a feature draft); the tokens still identify the slots.
        ``hidden[b]``: new nodes whose last hidden states (after the final norm) to return
        too; then the result is ``(logits, hidden_states)``.
        """
        B = self.batch_size
        n = max((len(t) for t in tokens), default=0)
        if n == 0:
            empty = [torch.empty(0, self.vocab_size) for _ in range(B)]
            none = torch.empty(0, self.model.config.hidden_size, dtype=self.dtype, device=self.device)
            return empty if hidden is None else (empty, [none for _ in range(B)])
        P = self.n_pending
        ids, pos = self._add_pending(tokens, parents, n)
        mask = self._attention_mask(P, n)
        self.valid = torch.cat([self.valid, torch.zeros(B, n, dtype=torch.bool)], 1)
        t0 = time.perf_counter()
        logits, states = self._forward(self._model_inputs(ids, inputs, n), mask, pos, want)
        self.forward_time += time.perf_counter() - t0
        self.forward_calls += 1
        logits = list(logits.cpu().split([len(w) for w in want]))
        if hidden is None:
            return logits
        return logits, [states[b, idx] for b, idx in enumerate(hidden)]

    def _add_pending(
        self, tokens: list[list[int]], parents: list[list[int]], n: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``n`` pending slots per row (the row's new nodes, then padding slots that
        attend only to themselves) with their parents, depths and ancestors; return the
        token ids ``[B, n]`` and position ids (committed length + depth) to feed."""
        B, P = self.batch_size, self.n_pending
        anc = torch.zeros(B, P + n, P + n, dtype=torch.bool)
        anc[:, :P, :P] = self.pending_ancestors
        ids = torch.zeros(B, n, dtype=torch.long)
        pos = torch.zeros(B, n, dtype=torch.long)
        for b in range(B):
            toks, pars = tokens[b], parents[b]
            ids[b, : len(toks)] = torch.tensor(toks, dtype=torch.long)
            base = len(self.tokens[b])
            for j in range(n):
                s = P + j
                if j >= len(toks):
                    self.pending_tokens[b].append(-1)
                    self.pending_parents[b].append(_DUMMY)
                    self.pending_depths[b].append(0)
                else:
                    par = pars[j]
                    if par >= 0:
                        anc[b, s] = anc[b, par]
                    d = 0 if par < 0 else self.pending_depths[b][par] + 1
                    self.pending_tokens[b].append(toks[j])
                    self.pending_parents[b].append(par)
                    self.pending_depths[b].append(d)
                    pos[b, j] = base + d
                anc[b, s, s] = True
        self.pending_ancestors = anc
        return ids, pos

    def _attention_mask(self, P: int, n: int) -> torch.Tensor | None:
        """The additive mask of the ``n`` slots just added after ``P`` pending ones: each
        sees its row's committed slots and its own ancestors. None where that is plain
        causal attention (no holes, no branches, no padding): the model then builds its
        own mask, which lets SDPA take its faster mask-free kernels."""
        B, c, T = self.batch_size, self.n_commit, self.n_slots
        allowed = torch.zeros(B, n, T + n, dtype=torch.bool)
        allowed[:, :, :c] = self.valid[:, None, :c]
        allowed[:, :, c:] = self.pending_ancestors[:, P:, :]
        if (n == 1 and bool(allowed.all())) or (
            P == 0 and torch.equal(allowed[:, :, c:], _tril(n, B)) and bool(self.valid[:, :c].all())
        ):
            return None
        # additive float mask: a boolean 4D mask gives wrong logits with eager attention
        mask = torch.zeros(B, 1, n, T + n, dtype=self.dtype)
        mask.masked_fill_(~allowed[:, None], torch.finfo(self.dtype).min)
        return mask

    def _model_inputs(self, ids: torch.Tensor, inputs: list[torch.Tensor] | None, n: int) -> dict[str, torch.Tensor]:
        """The decoder's input: the token ids, or ``inputs``' vectors (a feature draft's)."""
        if inputs is None:
            return {"input_ids": ids.to(self.device)}
        embeds = torch.zeros(self.batch_size, n, inputs[0].shape[-1], dtype=self.dtype, device=self.device)
        for b, x in enumerate(inputs):
            embeds[b, : len(x)] = x
        return {"inputs_embeds": embeds}

    def _forward(
        self, feed: dict[str, torch.Tensor], mask: torch.Tensor | None, pos: torch.Tensor, want: list[list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoder forward under the kernel plan; float32 logits at the wanted new
        nodes (rows concatenated, over the full vocabulary) and every new node's last
        hidden state."""
        with self.plan.active():
            ids = feed.get("input_ids")
            states = None if ids is None else native_decoder_row(self.decoder, ids, mask, pos, self.cache)
            if states is None:
                states = self.decoder(
                    **feed,
                    attention_mask=None if mask is None else mask.to(self.device),
                    position_ids=pos.to(self.device),
                    cache=self.cache,
                    use_cache=True,
                ).last_hidden_state
            rows = torch.tensor([b for b, w in enumerate(want) for _ in w], dtype=torch.long, device=self.device)
            cols = torch.tensor([j for w in want for j in w], dtype=torch.long, device=self.device)
            logits = (
                self.final_logits(self.head(states[rows, cols])).float()
                if len(rows)
                else states.new_zeros(0, self.head.weight.shape[0])
            )
        if self.vocab_map is not None:
            full = logits.new_full((logits.shape[0], self.vocab_size), float("-inf"))
            full[:, self.vocab_map] = logits
            logits = full
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return logits, states

    def extend_chain(
        self,
        tails: list[list[int]],
        want_last: bool = True,
        inputs: list[torch.Tensor] | None = None,
        hidden: bool = False,
    ):
        """Feed each row's tail as a chain continuing its committed tokens; with
        ``hidden``, also return the hidden states at every fed token."""
        P = self.n_pending
        parents = [[-1] + list(range(P, P + len(t) - 1)) if t else [] for t in tails]
        want = [[len(t) - 1] if (t and want_last) else [] for t in tails]
        return self.extend(
            tails, parents, want, inputs=inputs, hidden=[list(range(len(t))) for t in tails] if hidden else None
        )

    def extend_trees(self, tails: list[list[int]], trees: list, rows: list[bool] | None = None, hidden: bool = False):
        """Feed each row's tail as a chain with its draft tree hanging from the last tail
        token; return logits at that root and at every tree node (``[1 + nodes, V]``).

        ``trees[b]`` has ``tokens`` and ``parents`` (-1 = child of the root). Rows with
        ``rows[b] == False`` are not fed (their logits come back empty). With ``hidden``,
        also return the hidden states at every fed token (tail, then tree nodes).
        """
        P = self.n_pending
        toks, pars, want = [], [], []
        for b, (t, tree) in enumerate(zip(tails, trees)):
            if rows is not None and not rows[b]:
                toks.append([]), pars.append([]), want.append([])
                continue
            root = P + len(t) - 1
            toks.append(t + tree.tokens)
            pars.append([-1] + list(range(P, root)) + [root if q < 0 else root + 1 + q for q in tree.parents])
            want.append(list(range(len(t) - 1, len(t) + len(tree.tokens))))
        return self.extend(toks, pars, want, hidden=[list(range(len(t))) for t in toks] if hidden else None)
