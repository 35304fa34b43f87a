"""The model's own final logit processing, applied by the cache code (Cohere's
``logit_scale``, Granite's ``logits_scaling``, Gemma-2/3's soft cap), and the check that
proves it against the model's forward when the model is first used; any other family
that changes its logits is refused by name."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

SUPPORTED_LOGIT_PROCESSING = (
    "logit_scale (Cohere: logits * logit_scale)",
    "logits_scaling (Granite: logits / logits_scaling)",
    "final_logit_softcapping (Gemma-2/3: cap * tanh(logits / cap))",
)


def final_logit_processing(config: Any):
    """What a causal LM's forward does to its LM head's output before returning logits,
    read from its config, as a function of the head's output. The cache code computes
    the head itself (at the positions it needs), so it must apply these too: without them
    p is not the model's distribution under sampling (greedy survives a positive scale,
    not a soft cap). ``check_logit_processing`` proves the function against the model."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    scale = getattr(text, "logit_scale", None)
    divide = getattr(text, "logits_scaling", None)
    cap = getattr(text, "final_logit_softcapping", None)

    def apply(logits: torch.Tensor) -> torch.Tensor:
        if scale is not None:
            logits = logits * scale
        if divide is not None:
            logits = logits / divide
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits

    return apply


_CHECKED: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def check_logit_processing(model: nn.Module) -> None:
    """Refuse a model whose own forward changes its logits in a way
    ``final_logit_processing`` does not reproduce, naming its family.

    Checked once per model object: the model's own forward on a few tokens against its
    decoder, its LM head and ``final_logit_processing``. A model that is not a Hugging
    Face causal LM itself (a trained draft wrapping one, ``models/draft_files.py``) is checked
    through the causal LM it wraps."""
    if model in _CHECKED:
        return
    hf = next(
        (m for m in model.modules() if isinstance(m, PreTrainedModel) and m.get_output_embeddings() is not None), None
    )
    if hf is None:
        return
    family = getattr(hf.config, "model_type", type(hf).__name__)
    p = next(hf.parameters())
    ids = (torch.arange(2, 6, device=p.device) % hf.get_output_embeddings().weight.shape[0])[None]
    try:
        with torch.no_grad():
            own = hf(input_ids=ids, use_cache=False).logits.float()
            states = hf.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state
            ours = final_logit_processing(hf.config)(hf.get_output_embeddings()(states)).float()
    except Exception as e:  # noqa: BLE001 - any failure means we cannot vouch for its p
        raise ValueError(
            f"model family {family!r} ({type(hf).__name__}): could not compare its own logits with "
            f"the cache code's ({type(e).__name__}: {e})"
        ) from e
    diff = float((own - ours).abs().max())
    tol = (1e-4 if p.dtype == torch.float32 else 2e-2) * max(1.0, float(own.abs().max()))
    if own.shape != ours.shape or diff > tol:
        raise ValueError(
            f"model family {family!r} ({type(hf).__name__}) is not supported: its forward processes the LM head's "
            f"logits in a way stagedspec does not reproduce (max |difference| {diff:.3g} on a 4-token check), so p "
            f"would not be its distribution. Supported final logit processing: "
            f"{'; '.join(SUPPORTED_LOGIT_PROCESSING)}"
        )
    _CHECKED.add(model)
