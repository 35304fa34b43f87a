"""Shared builders for engine tests: tiny random Llamas and hierarchies over them."""

from __future__ import annotations

import functools

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from stagedspec.drafters import BypassDrafter, KatzNgramDrafter, ModelDrafter, PromptLookupDrafter
from stagedspec.engine.drafter_protocol import Drafter
from stagedspec.engine.tree import DraftTree
from stagedspec.models.model_loading import LoadedModel, ModelSpec, load_model, truncated_copy

VOCAB = 128


@functools.cache
def tiny_target(vocab: int = VOCAB, layers: int = 3, seed: int = 0, init: float = 0.02) -> LoadedModel:
    spec = ModelSpec(
        source="tiny",
        seed=seed,
        tiny={
            "vocab_size": vocab,
            "num_hidden_layers": layers,
            "initializer_range": init,
        },
    )
    return load_model(spec)


@functools.cache
def other_small(vocab: int = VOCAB, seed: int = 1, init: float = 0.02) -> torch.nn.Module:
    """An unrelated random model sharing the vocabulary: its drafts are mostly rejected."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        initializer_range=init,
    )
    return LlamaForCausalLM(cfg).eval()


def hierarchy(kind: str, target: LoadedModel, k: int, tree=None, lower_k: int = 2):
    """Named hierarchies over a tiny target (the target itself is implicit)."""
    first1 = truncated_copy(target, 1).model
    if kind == "ar":
        return None
    if kind == "ngram":
        return KatzNgramDrafter(target.vocab_size, k=k, tree=tree)
    if kind == "lookup":
        return PromptLookupDrafter(k=k)
    if kind == "small":
        return ModelDrafter(first1, k=k, tree=tree)
    if kind == "other":
        return ModelDrafter(other_small(target.vocab_size), k=k, tree=tree)
    if kind == "ngram>small":
        return ModelDrafter(first1, k=k, lower=KatzNgramDrafter(target.vocab_size, k=lower_k))
    if kind == "lookup>small":
        return ModelDrafter(first1, k=k, lower=PromptLookupDrafter(k=lower_k))
    if kind == "ngram>other>small":
        mid = ModelDrafter(
            other_small(target.vocab_size), k=lower_k, lower=KatzNgramDrafter(target.vocab_size, k=2), name="other"
        )
        return ModelDrafter(first1, k=k, lower=mid)
    if kind == "copy>ngram>small":  # long matches (here >= 2 tokens) straight to the target, else staged
        return BypassDrafter(
            ModelDrafter(first1, k=k, lower=KatzNgramDrafter(target.vocab_size, k=lower_k)), k=2 * k, min_match=2
        )
    if kind == "copy>small":
        return BypassDrafter(ModelDrafter(first1, k=k), k=k, min_match=3)
    if kind == "copy1-miss>ngram>small":  # copy on any match, but after a missed copy the staged draft
        return BypassDrafter(
            ModelDrafter(first1, k=k, lower=KatzNgramDrafter(target.vocab_size, k=lower_k)),
            k=2 * k,
            min_match=1,
            miss_below=2,
        )
    raise ValueError(kind)


class ProposeOne(Drafter):
    """A level below a router in routing tests: proposes token 99 to every row and counts its calls."""

    name = "below"

    def __init__(self, max_depth: int = 1) -> None:
        self.calls = 0
        self._depth = max_depth

    @property
    def max_depth(self) -> int:
        return self._depth

    def propose(self, contexts, features=None):
        self.calls += 1
        out = []
        for _ in contexts:
            t = DraftTree()
            t.add(99, -1, None, self.name)
            out.append(t)
        return out


def random_gguf_blocks(kind: str, rows: int, cols: int, seed: int = 0, size: float = 0.05):
    """Random GGUF rows of ``kind`` ("q4_k" or "q6_k"; [rows, cols / 256 * block bytes], uint8
    numpy) whose weights are of magnitude about ``size``: random codes, 6-bit scales and minima
    (Q4_K) or int8 scales (Q6_K), and float16 block scales chosen for that magnitude."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = rows * cols // 256
    if kind == "q4_k":  # d, dmin (float16), 12 bytes of 6-bit scales and minima, 128 bytes of codes
        b = rng.integers(0, 256, size=(n, 144), dtype=np.uint8)
        b[:, 0:2] = (rng.uniform(0.5, 1.0, n) * 2 * size / (15 * 63)).astype(np.float16).view(np.uint8).reshape(-1, 2)
        b[:, 2:4] = (rng.uniform(0.5, 1.0, n) * size / 63).astype(np.float16).view(np.uint8).reshape(-1, 2)
    elif kind == "q6_k":  # 128 + 64 bytes of codes, 16 int8 scales, d (float16)
        b = rng.integers(0, 256, size=(n, 210), dtype=np.uint8)
        b[:, 208:210] = (rng.uniform(0.5, 1.0, n) * size / (32 * 128)).astype(np.float16).view(np.uint8).reshape(-1, 2)
    else:
        raise ValueError(kind)
    return b.reshape(rows, -1)
