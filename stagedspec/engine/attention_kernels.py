"""Attention without grouped-query copies: ``packed_gqa_attention``.

Hugging Face's SDPA attention repeats each KV head once per query head of its group
(``repeat_kv``) whenever more than one query row comes with a mask, i.e. for every
verification forward. Here the query heads of each KV group are stacked as extra query
rows instead, so the cache is read as stored. ``kernels.py`` calls it when the active
plan has ``gqa_packing`` (and falls back to Hugging Face's function otherwise).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def packed_gqa_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    groups: int,
    dropout: float = 0.0,
    scaling: float | None = None,
) -> tuple[torch.Tensor, None]:
    """SDPA with the query heads of each KV group (``groups`` query heads per KV head)
    stacked as extra query rows, so the KV cache is read as stored instead of repeated per
    query head (Hugging Face does this for one query row; verification feeds several).
    Returns HF's attention output layout ([batch, rows, heads, head_dim]) and no weights."""
    B, H, n, D = query.shape
    Hkv, T = key.shape[1], key.shape[2]
    if attention_mask is None and n > 1:  # plain causal rows at the end of the cache
        attention_mask = torch.zeros(n, T, dtype=query.dtype, device=query.device)
        attention_mask[:, T - n :] = torch.full(
            (n, n), torch.finfo(query.dtype).min, dtype=query.dtype, device=query.device
        ).triu(1)
        attention_mask = attention_mask[None, None]
    elif attention_mask is not None and attention_mask.dtype == torch.bool:
        attention_mask = torch.zeros_like(attention_mask, dtype=query.dtype).masked_fill(
            ~attention_mask, torch.finfo(query.dtype).min
        )
    q = query.reshape(B, Hkv, groups * n, D)  # head h = g * groups + r -> row r * n + i
    mask = attention_mask
    if mask is not None:
        mask = mask[:, :, -n:, :] if mask.shape[2] != n else mask
        mask = mask.repeat(1, 1, groups, 1) if n > 1 else mask
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling)
    return out.reshape(B, H, n, D).transpose(1, 2).contiguous(), None
