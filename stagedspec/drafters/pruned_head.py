"""A draft model whose LM head keeps only the most frequent tokens (FR-Spec, Zhao et al. 2025).

A 0.5B draft with a 151,936-token vocabulary spends about a quarter of its weights, and of
every forward's memory traffic, on the LM head, most of whose rows are tokens a code answer
never uses. ``pruned_copy`` gives the draft a head of the ``n`` most frequent token ids
only; ``KVModel`` scatters its logits back into the full vocabulary with -inf elsewhere,
so q is zero outside the subset. Exactness does not depend on the subset: a token the
draft cannot propose is still emitted by the target's residual or correction, it only
costs acceptance where it occurs.

The frequencies are counts of the draft's own tokenizer over Python source that ships
with the interpreter (the standard library's ``.py`` files, read in sorted order up to
``max_bytes``): code and its English docstrings, and no benchmark prompt or answer
(FR-Spec counts a general corpus too; ours is chosen to share no task with HumanEval or
MT-bench). The counts are cached per tokenizer and corpus.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn


def corpus_files(max_bytes: int) -> list[Path]:
    """The standard library's ``.py`` files (tests and site-packages left out), sorted, up
    to ``max_bytes`` in all."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out, total = [], 0
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).parts
        if "site-packages" in rel or "test" in rel or "tests" in rel or "idlelib" in rel:
            continue
        size = p.stat().st_size
        if total + size > max_bytes:
            break
        out.append(p)
        total += size
    return out


def token_counts(tokenizer, vocab_size: int, cache_dir: Path | None = None, max_bytes: int = 4_000_000) -> torch.Tensor:
    """Occurrences of each token id in the corpus (``corpus_files``), cached in ``cache_dir``."""
    files = corpus_files(max_bytes)
    key = hashlib.sha256(
        json.dumps(
            {
                "files": [[str(f), f.stat().st_size] for f in files],
                "vocab": vocab_size,
                "tokenizer": getattr(tokenizer, "name_or_path", ""),
                "tokens": len(tokenizer),
            }
        ).encode()
    ).hexdigest()[:16]
    path = None if cache_dir is None else Path(cache_dir) / f"head-counts-{key}.pt"
    if path is not None and path.is_file():
        return torch.load(path)
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for f in files:
        ids = tokenizer(f.read_text(encoding="utf-8", errors="replace"), add_special_tokens=False)["input_ids"]
        if ids:
            counts += torch.bincount(torch.tensor(ids), minlength=vocab_size)[:vocab_size]
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(counts, path)
    return counts


def frequent_ids(counts: torch.Tensor, n: int, always: list[int] = ()) -> torch.Tensor:
    """The ``n`` most frequent ids (ties by id), plus ``always`` (special tokens), sorted."""
    if n < 1:
        raise ValueError(f"a pruned head needs n >= 1 tokens, got {n}")
    order = torch.argsort(-counts, stable=True)[:n]
    ids = set(order.tolist()) | {int(i) for i in always if 0 <= int(i) < len(counts)}
    return torch.tensor(sorted(ids), dtype=torch.long)


def pruned_copy(model: nn.Module, ids: torch.Tensor) -> nn.Module:
    """A shallow copy of a causal LM whose output embedding keeps the rows ``ids`` only; the
    original (possibly shared by other levels through the loader's cache) is untouched.
    The copy carries ``vocab_map`` (head row -> token id) and ``meta.vocab_size``, which
    ``ModelDrafter`` passes to its ``KVModel``."""
    head = model.get_output_embeddings()
    if head is None or not isinstance(head, nn.Linear):
        raise ValueError(f"{type(model).__name__}: no Linear output embedding to prune")
    V = head.weight.shape[0]
    if int(ids.max()) >= V:
        raise ValueError(f"pruned head: id {int(ids.max())} is outside the vocabulary of {V}")
    small = nn.Linear(
        head.in_features, len(ids), bias=head.bias is not None, device=head.weight.device, dtype=head.weight.dtype
    )
    small.requires_grad_(False)
    small.weight.data = head.weight.detach()[ids.to(head.weight.device)].clone()
    if head.bias is not None:
        small.bias.data = head.bias.detach()[ids.to(head.weight.device)].clone()
    out = copy.copy(model)
    out._modules = dict(model._modules)  # a module dict of its own: replacing the head leaves the original's
    out.set_output_embeddings(small)
    out.vocab_map = ids
    out.meta = SimpleNamespace(vocab_size=V, design="pruned-head")
    return out


def head_subset(loaded, n: int) -> torch.Tensor:
    """The ``n`` ids a pruned head keeps for a loaded model (``models.LoadedModel``)."""
    tok = loaded.tokenizer
    counts = token_counts(tok, loaded.vocab_size, loaded.spec.resolved_cache_dir())
    return frequent_ids(counts, n, always=list(getattr(tok, "all_special_ids", [])))
