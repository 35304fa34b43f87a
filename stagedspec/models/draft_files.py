"""Trained draft models built around a target: their architectures, and the weights file.

Two designs, both reading the target's own embedding and the rows of its LM head for a
frequency-pruned subset of the vocabulary (FR-Spec: a draft's LM head is most of its cost
on a CPU; tokens outside the subset get q = 0, which keeps verification exact):

- ``layers`` (an independent small model): the target's first ``n_layers`` decoder layers
  and final norm, copied and then trained to imitate the target. A causal LM like any
  other, so it can draft through a lower level (staged speculation).
- ``feature`` (EAGLE-style): one decoder layer over ``fc([embed(x_{t+1}); f_t])`` where
  ``f_t`` is the target's last hidden state at position t; it predicts ``f_{t+1}``, and the
  pruned head turns that into q for token t + 2. At draft nodes past the verified prefix
  it reads its own predicted features. It needs the target's hidden states, so it can
  only draft directly for the target.

Only the trained tensors are stored (half precision), with the vocabulary subset and the
target's shape; ``load_draft`` refuses a file made for another target before decoding.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

DESIGNS = ("layers", "feature")
FORMAT_VERSION = 1


@dataclass
class DraftMeta:
    """What a weights file says about itself; checked against the target at load."""

    design: str
    n_layers: int
    vocab_size: int  # the target's full vocabulary
    hidden_size: int
    target_layers: int
    target_name: str = ""
    recipe: dict = field(default_factory=dict)  # the command/config and seed that trained it
    metrics: dict = field(default_factory=dict)  # measured when it was trained (held-out acceptance, ...)
    format_version: int = FORMAT_VERSION


class DraftModel(nn.Module):
    """A trained draft: a small Llama-style causal LM whose LM head rows are a vocabulary
    subset of the target's. ``model`` / ``lm_head`` follow the Hugging Face layout, so the
    engine's ``KVModel`` drives it like any causal LM (``vocab_map`` maps head rows to ids)."""

    def __init__(self, lm: nn.Module, vocab_map: torch.Tensor, meta: DraftMeta, fc: nn.Linear | None = None) -> None:
        super().__init__()
        self.lm = lm
        self.register_buffer("vocab_map", vocab_map.long(), persistent=False)
        self.meta = meta
        self.fc = fc

    # what KVModel uses
    @property
    def config(self):
        return self.lm.config

    def get_decoder(self) -> nn.Module:
        return self.lm.model

    def get_output_embeddings(self) -> nn.Module:
        return self.lm.lm_head

    @property
    def design(self) -> str:
        return self.meta.design

    def feature_inputs(self, tokens: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """``fc([embed(x_{t+1}); f_t])`` for a feature draft (tokens: [...], features: [..., H])."""
        emb = self.lm.model.embed_tokens(tokens)
        return self.fc(torch.cat([emb, features.to(emb.dtype)], dim=-1))

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The tensors a weights file stores (everything but the target's own)."""
        return {k: v for k, v in self.state_dict().items() if not _from_target(k)}


def _from_target(key: str) -> bool:
    return key.startswith(("lm.model.embed_tokens.", "lm.lm_head.", "lm.model.rotary_emb."))


def build_draft(
    target: nn.Module, design: str, n_layers: int, vocab_map: torch.Tensor, target_name: str = ""
) -> DraftModel:
    """A fresh draft for ``target``: copies of the target's first ``n_layers`` layers
    (``layers``) or of its last layer plus a new ``fc`` (``feature``), its final norm, and
    its embedding and head rows shared (not trained)."""
    if design not in DESIGNS:
        raise ValueError(f"unknown draft design {design!r}; valid: {list(DESIGNS)}")
    cfg_t = target.config
    total = int(cfg_t.num_hidden_layers)
    if not isinstance(n_layers, int) or not 1 <= n_layers <= total:
        raise ValueError(f"draft n_layers must be in 1..{total} (the target's layers), got {n_layers!r}")
    V = int(target.get_output_embeddings().weight.shape[0])
    _check_vocab_map(vocab_map, V, "vocab subset")
    config = copy.deepcopy(cfg_t)
    config.num_hidden_layers = n_layers
    config.vocab_size = int(vocab_map.numel())
    config.tie_word_embeddings = False
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:n_layers]
    src = target.get_decoder()
    p = next(src.parameters())
    # a fresh small model of the target's class, then the target's weights copied in
    # (load_state_dict, not deepcopy: the target's modules may carry kernel patches)
    lm = type(target)(config).to(device=p.device, dtype=p.dtype)
    first = list(src.layers[:n_layers]) if design == "layers" else list(src.layers[-n_layers:])
    for mine, theirs in zip(lm.model.layers, first):
        mine.load_state_dict(theirs.state_dict())
    lm.model.norm.load_state_dict(src.norm.state_dict())
    lm.model.embed_tokens = src.embed_tokens  # shared, frozen
    head = target.get_output_embeddings()
    with torch.no_grad():
        lm.lm_head.weight.copy_(head.weight[vocab_map.to(head.weight.device)])
    lm.lm_head.weight.requires_grad_(False)
    fc = None
    if design == "feature":
        H = int(cfg_t.hidden_size)
        fc = nn.Linear(2 * H, H, bias=True, device=p.device, dtype=p.dtype)
        with torch.no_grad():  # start as "pass the feature through": [0 | I]
            fc.weight.zero_()
            fc.weight[:, H:] = torch.eye(H, dtype=p.dtype, device=p.device)
            fc.bias.zero_()
    meta = DraftMeta(
        design=design,
        n_layers=n_layers,
        vocab_size=V,
        hidden_size=int(cfg_t.hidden_size),
        target_layers=total,
        target_name=target_name,
    )
    draft = DraftModel(lm, vocab_map.to(p.device), meta, fc)
    draft.lm.model.embed_tokens.weight.requires_grad_(False)
    return draft


def _check_vocab_map(vocab_map: torch.Tensor, vocab_size: int, what: str) -> None:
    if vocab_map.ndim != 1 or vocab_map.numel() == 0:
        raise ValueError(f"{what}: expected a non-empty 1-D list of token ids, got shape {tuple(vocab_map.shape)}")
    lo, hi = int(vocab_map.min()), int(vocab_map.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"{what}: token ids must be in [0, {vocab_size}) (the target's vocabulary), got {lo}..{hi}")
    if torch.unique(vocab_map).numel() != vocab_map.numel():
        raise ValueError(f"{what}: token ids repeat")


# ------------------------------------------------------------------------------ file
def save_draft(draft: DraftModel, path: str | Path) -> Path:
    """Write the trained tensors (float16) + vocabulary subset + metadata, atomically."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in draft.trainable_state().items()}
    tensors["vocab_map"] = draft.vocab_map.to("cpu", torch.int32).contiguous()
    tmp = path.with_name(f".{path.name}.tmp")
    save_file(tensors, str(tmp), metadata={"stagedspec_draft": json.dumps(asdict(draft.meta))})
    tmp.replace(path)
    return path


def read_meta(path: str | Path) -> DraftMeta:
    """The metadata of a weights file, read without loading tensors; errors name the file."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"draft weights file not found: {str(path)!r}")
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get("stagedspec_draft")
    except Exception as e:  # safetensors raises its own error types for a cut or foreign file
        raise ValueError(
            f"draft weights file {str(path)!r} is unreadable (truncated or not safetensors): {e}"
        ) from None
    if raw is None:
        raise ValueError(f"draft weights file {str(path)!r} has no stagedspec metadata: not a trained draft")
    d = json.loads(raw)
    if d.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"draft weights file {str(path)!r} has format {d.get('format_version')}, this code reads {FORMAT_VERSION}"
        )
    return DraftMeta(**d)


def check_fits(meta: DraftMeta, target: nn.Module, path: str | Path) -> None:
    """Refuse a draft trained for another target, naming the file and the mismatch."""
    cfg = target.config
    V = int(target.get_output_embeddings().weight.shape[0])
    have = {"vocab_size": meta.vocab_size, "hidden_size": meta.hidden_size, "target_layers": meta.target_layers}
    want = {"vocab_size": V, "hidden_size": int(cfg.hidden_size), "target_layers": int(cfg.num_hidden_layers)}
    bad = [f"{k} {have[k]} (file) vs {want[k]} (target)" for k in have if have[k] != want[k]]
    if bad:
        raise ValueError(f"draft weights file {str(path)!r} was trained for another target: " + "; ".join(bad))


def load_draft(path: str | Path, target: nn.Module, target_name: str = "") -> DraftModel:
    """Rebuild a draft around ``target`` from a weights file, in the target's dtype."""
    from safetensors.torch import load_file

    path = Path(path)
    meta = read_meta(path)
    check_fits(meta, target, path)
    try:
        tensors = load_file(str(path))
    except Exception as e:
        raise ValueError(f"draft weights file {str(path)!r} is unreadable: {e}") from None
    if "vocab_map" not in tensors:
        raise ValueError(f"draft weights file {str(path)!r} has no vocab_map tensor")
    vocab_map = tensors.pop("vocab_map").long()
    try:
        _check_vocab_map(vocab_map, meta.vocab_size, f"draft weights file {str(path)!r}: vocab_map")
    except ValueError as e:
        raise ValueError(str(e)) from None
    draft = build_draft(target, meta.design, meta.n_layers, vocab_map, target_name or meta.target_name)
    draft.meta = meta
    want = draft.trainable_state()
    missing, extra = sorted(set(want) - set(tensors)), sorted(set(tensors) - set(want))
    shapes = [k for k in set(want) & set(tensors) if tuple(want[k].shape) != tuple(tensors[k].shape)]
    if missing or extra or shapes:
        raise ValueError(
            f"draft weights file {str(path)!r} does not match a {meta.design} draft of "
            f"{meta.n_layers} layer(s): missing {missing[:3]}, unexpected {extra[:3]}, "
            f"wrong shapes {shapes[:3]}"
        )
    p = next(target.parameters())
    with torch.no_grad():
        for k, v in draft.state_dict().items():
            if k in tensors:
                v.copy_(tensors[k].to(device=p.device, dtype=v.dtype))
    draft.eval()
    draft.requires_grad_(False)
    return draft


def draft_size(draft: DraftModel) -> dict[str, Any]:
    """Parameter counts: trained (stored) and shared with the target."""
    trained = sum(v.numel() for v in draft.trainable_state().values())
    head = draft.lm.lm_head.weight.numel()
    return {"trained_params": trained, "head_rows": int(draft.vocab_map.numel()), "head_params": head}


def standalone_causal_lm(draft: DraftModel, target: nn.Module) -> nn.Module:
    """A ``layers`` draft as a plain Hugging Face causal LM over the target's whole
    vocabulary (its layers, with the target's full LM head instead of the subset rows),
    for tools that need one, e.g. Hugging Face assisted generation (``assistant_model=``)."""
    if draft.design != "layers":
        raise ValueError(f"only a 'layers' draft is a causal LM of its own; this one is {draft.design!r}")
    config = copy.deepcopy(draft.lm.config)
    config.vocab_size = int(target.get_output_embeddings().weight.shape[0])
    p = next(draft.parameters())
    with torch.device("meta"):
        lm = type(draft.lm)(config)
    lm.model = draft.lm.model  # shared modules: the same weights, no copy
    lm.lm_head = target.get_output_embeddings()
    lm.generation_config = copy.deepcopy(target.generation_config)
    return lm.to(p.device).eval()
