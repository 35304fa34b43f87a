"""Training a draft to imitate its target (self-distillation), as plain functions.

1. ``generate_corpus``: the target answers training prompts (``stagedspec/prompts/training_prompts.py``,
   never a benchmark's), in batches with Hugging Face ``generate`` (batching is several
   times faster than one row at a time on a CPU), greedy and sampled.
2. ``target_features``: one teacher-forced target forward per batch gives the target's
   last hidden state at every position (what a feature draft reads, and, through the
   LM head, the target's distribution the draft is trained towards).
3. ``vocab_subset``: the most frequent tokens of the target's own outputs (FR-Spec).
4. ``train_draft``: minimise the divergence between the target's distribution and the
   draft's over the subset (and, for a feature draft, the error of its predicted
   feature), with checkpoints to resume from.
5. ``agreement``: held-out top-1 agreement with the target (the acceptance rate a
   greedy chain would see at its first position).

The Hydra entry point (``stagedspec/app/distill_entry.py``) wires these to a config, MLflow
and a cache directory; this module knows neither.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import platform
import random
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import transformers
from tqdm import tqdm

from stagedspec import __version__
from stagedspec.drafters.ngram_lm import write_corpus
from stagedspec.models.chat_text import eos_token_ids
from stagedspec.models.draft_files import DESIGNS, DraftModel, build_draft, draft_size, save_draft
from stagedspec.models.model_loading import LoadedModel
from .corpus import CorpusSpec, corpus_dir, corpus_splits, coverage, vocab_subset

log = logging.getLogger(__name__)


def provenance(target: LoadedModel, kernels, work: Path) -> dict:
    """What a shipped draft needs beside its command to be rebuilt: code and library
    versions, the commit (when run from a git checkout), threads, device, dtype, the kernel
    plan that generated the corpus and where the corpus is cached."""
    here = Path(__file__).resolve().parent
    try:
        commit = (
            subprocess.run(
                ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
        dirty = (
            bool(
                subprocess.run(
                    ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout.strip()
            )
            if commit
            else None
        )
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return {
        "stagedspec": __version__,
        "commit": commit,
        "dirty": dirty,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "device": str(target.device),
        "dtype": target.spec.dtype,
        "kernels": getattr(kernels, "name", "hf") if kernels is not None else "hf",
        "corpus_dir": work.name,
        "selection": "hyper-parameters were chosen on this held-out split: heldout_agreement is "
        "optimistic, not an unbiased estimate",
    }


# ---------------------------------------------------------------------------- training
@dataclass
class TrainConfig:
    epochs: float = 4.0
    batch_tokens: int = 4096
    lr: float = 5e-4
    weight_decay: float = 0.0
    warmup_steps: int = 20
    clip: float = 1.0
    divergence: str = "kl"  # kl (forward KL(p || q)) | tvd (total variation)
    reg_weight: float = 1.0  # feature draft: weight of the smooth-L1 feature regression
    noise: float = 0.1  # feature draft: uniform noise (times the feature's std) on input features
    seed: int = 0
    checkpoint_every: int = 50

    def validate(self) -> None:
        if self.divergence not in ("kl", "tvd"):
            raise ValueError(f"divergence must be 'kl' or 'tvd', got {self.divergence!r}")
        if not self.epochs > 0:
            raise ValueError(f"epochs must be > 0, got {self.epochs!r}")
        for k in ("batch_tokens", "warmup_steps", "checkpoint_every"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < (0 if k == "warmup_steps" else 1):
                raise ValueError(f"{k} must be a positive integer, got {v!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")


@dataclass
class TrainState:
    step: int = 0
    total_steps: int = 0
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0


def _batches(lengths: list[int], batch_tokens: int, rng: random.Random) -> list[list[int]]:
    """Sequences of similar length together (little padding), in a shuffled batch order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], rng.random()))
    out, cur = [], []
    for i in order:
        if cur and (len(cur) + 1) * lengths[i] > batch_tokens:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def _divergence(teacher_logits: torch.Tensor, draft_logits: torch.Tensor, kind: str) -> torch.Tensor:
    """Per position divergence between the target's and the draft's distributions over
    the subset (both from logits): [N]."""
    log_p = F.log_softmax(teacher_logits.float(), -1)
    log_q = F.log_softmax(draft_logits.float(), -1)
    if kind == "kl":
        return (log_p.exp() * (log_p - log_q)).sum(-1)
    return 0.5 * (log_p.exp() - log_q.exp()).abs().sum(-1)


def draft_loss(
    draft: DraftModel,
    ids: torch.Tensor,
    feats: torch.Tensor,
    mask: torch.Tensor,
    cfg: TrainConfig,
    gen: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Mean loss over the valid positions of one padded batch.

    ids [B, L], feats [B, L, H] (the target's), mask [B, L] (1 = real token)."""
    head = draft.lm.lm_head
    feats = feats.to(head.weight.dtype)
    if draft.design == "layers":
        # position t: the draft reads x_0..x_t and should give the target's p(x_{t+1})
        out = draft.lm.model(input_ids=ids, attention_mask=mask).last_hidden_state
        valid = mask.bool()
        div = _divergence(head(feats[valid]), head(out[valid]), cfg.divergence)
        loss = div.mean()
        return loss, {"loss": float(loss.detach()), "divergence": float(div.detach().mean())}
    # feature draft: slot t reads (x_{t+1}, f_t) and predicts f_{t+1}
    f_in = feats[:, :-1]
    if cfg.noise > 0:
        scale = cfg.noise * f_in.detach().float().std()
        f_in = f_in + (torch.rand(f_in.shape, generator=gen, dtype=torch.float32) - 0.5).to(f_in) * 2 * scale
    inputs = draft.feature_inputs(ids[:, 1:], f_in)
    slot_mask = mask[:, 1:]
    pred = draft.lm.model(inputs_embeds=inputs, attention_mask=slot_mask).last_hidden_state
    valid = slot_mask.bool()
    target_f = feats[:, 1:][valid]
    reg = F.smooth_l1_loss(pred[valid].float(), target_f.float(), reduction="none").mean(-1)
    div = _divergence(head(target_f), head(pred[valid]), cfg.divergence)
    loss = (cfg.reg_weight * reg + div).mean()
    return loss, {
        "loss": float(loss.detach()),
        "divergence": float(div.detach().mean()),
        "feature_loss": float(reg.detach().mean()),
    }


def train_draft(
    draft: DraftModel,
    sequences: list[list[int]],
    features: list[torch.Tensor],
    cfg: TrainConfig,
    checkpoint: str | Path | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    desc: str = "train",
) -> TrainState:
    """Train ``draft``'s own parameters (its layers, norm and fc; never the target's
    embedding or head rows) on the target's sequences and features. With ``checkpoint``,
    the state is saved every ``cfg.checkpoint_every`` steps and at the end, and a run
    that finds one resumes from it (same data, same config: the batch order is
    re-derived from the seed, so a resumed run takes the same steps)."""
    cfg.validate()
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    lengths = [len(s) for s in sequences]
    steps = _step_batches(lengths, cfg)
    ckpt = Path(checkpoint) if checkpoint else None
    state = _resume(ckpt, draft, opt, len(steps), cfg)
    draft.train()
    dev = next(draft.parameters()).device
    t0 = time.perf_counter() - state.seconds
    with tqdm(total=len(steps), initial=state.step, desc=desc, unit="step", leave=False) as bar:
        while state.step < len(steps):
            ids, mask, feats = _padded_batch(steps[state.step], sequences, features, lengths)
            gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + state.step)
            for g in opt.param_groups:
                g["lr"] = _lr_at(state.step, cfg, len(steps))
            loss, parts = draft_loss(draft, ids.to(dev), feats.to(dev), mask.to(dev), cfg, gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.clip)
            opt.step()
            state.step += 1
            state.losses.append(parts["loss"])
            state.seconds = time.perf_counter() - t0
            bar.update(1)
            bar.set_postfix(loss=f"{parts['loss']:.3f}")
            if on_step is not None:
                on_step(state.step, {**parts, "lr": _lr_at(state.step - 1, cfg, len(steps))})
            if state.step % cfg.checkpoint_every == 0 or state.step == len(steps):
                _save_checkpoint(ckpt, draft, opt, state, len(steps), cfg)
    draft.eval()
    return state


def _step_batches(lengths: list[int], cfg: TrainConfig) -> list[list[int]]:
    """The sequences of each training step: ``cfg.epochs`` shuffled passes (the last one
    cut to the fraction of an epoch asked for), derived from ``cfg.seed`` alone."""
    rng = random.Random(cfg.seed)
    epochs = math.ceil(cfg.epochs)
    steps = [b for _ in range(epochs) for b in _batches(lengths, cfg.batch_tokens, rng)]
    return steps[: max(1, int(round(len(steps) * cfg.epochs / epochs)))]


def _lr_at(step: int, cfg: TrainConfig, total_steps: int) -> float:
    """Linear warm-up over ``cfg.warmup_steps``, then a cosine decay to 0 at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))


def _resume(
    ckpt: Path | None, draft: DraftModel, opt: torch.optim.Optimizer, total_steps: int, cfg: TrainConfig
) -> TrainState:
    """A fresh state, or the one ``ckpt`` holds, loaded into ``draft`` and ``opt``; a
    checkpoint of another run (other steps or config) is refused."""
    if ckpt is None or not ckpt.is_file():
        return TrainState(total_steps=total_steps)
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    if saved["total_steps"] != total_steps or saved["config"] != asdict(cfg):
        raise ValueError(
            f"checkpoint {str(ckpt)!r} belongs to another run (steps or config differ); "
            "delete it or give another checkpoint path"
        )
    draft.load_state_dict(saved["model"], strict=False)
    opt.load_state_dict(saved["optimizer"])
    state = TrainState(**saved["state"])
    log.info("resuming %s from step %d of %d", ckpt, state.step, state.total_steps)
    return state


def _save_checkpoint(
    ckpt: Path | None,
    draft: DraftModel,
    opt: torch.optim.Optimizer,
    state: TrainState,
    total_steps: int,
    cfg: TrainConfig,
) -> None:
    if ckpt is None:
        return
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    tmp = ckpt.with_name(f".{ckpt.name}.tmp{os.getpid()}")
    torch.save(
        {
            "model": draft.trainable_state(),
            "optimizer": opt.state_dict(),
            "state": asdict(state),
            "total_steps": total_steps,
            "config": asdict(cfg),
        },
        tmp,
    )
    os.replace(tmp, ckpt)  # a kill mid-save leaves the previous checkpoint intact


def _padded_batch(
    idx: list[int], sequences: list[list[int]], features: list[torch.Tensor], lengths: list[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids [B, L], mask [B, L] (1 = real token) and float16 target features
    [B, L, H] of the sequences ``idx``, padded to the longest."""
    width = max(lengths[i] for i in idx)
    ids = torch.zeros(len(idx), width, dtype=torch.long)
    mask = torch.zeros(len(idx), width, dtype=torch.long)
    feats = torch.zeros(len(idx), width, features[idx[0]].shape[-1], dtype=torch.float16)
    for r, i in enumerate(idx):
        ids[r, : lengths[i]] = torch.tensor(sequences[i])
        mask[r, : lengths[i]] = 1
        feats[r, : lengths[i]] = features[i]
    return ids, mask, feats


@torch.no_grad()
def agreement(
    draft: DraftModel,
    target: torch.nn.Module,
    sequences: list[list[int]],
    features: list[torch.Tensor],
    start: list[int] | None = None,
) -> float:
    """Share of answer tokens (index >= ``start[i]``) for which the draft's argmax, given
    the true prefix (and, for a feature draft, the target's true features), equals the
    target's argmax over the full vocabulary: the acceptance a greedy chain sees at its
    first draft position."""
    head = target.get_output_embeddings()
    hits = total = 0
    for i, (seq, f) in enumerate(zip(sequences, features)):
        L = len(seq)
        lo = max(1, 0 if start is None else start[i])  # first predicted token index
        fe = f.to(head.weight.dtype)
        want = head(fe[:-1]).argmax(-1)  # want[t]: the target's token at index t + 1
        ids = torch.tensor([seq])
        if draft.design == "layers":
            out = draft.lm.model(input_ids=ids).last_hidden_state[0, :-1]  # out[t] -> token t + 1
            got, want = draft.vocab_map[draft.lm.lm_head(out).argmax(-1)][lo - 1 :], want[lo - 1 :]
        else:
            inputs = draft.feature_inputs(ids[:, 1:], fe[None, :-1])
            out = draft.lm.model(inputs_embeds=inputs).last_hidden_state[0, :-1]  # slot t -> token t + 2
            got = draft.vocab_map[draft.lm.lm_head(out).argmax(-1)]
            got, want = got[max(0, lo - 2) :], want[1:][max(0, lo - 2) :]
        hits += int((got == want).sum())
        total += len(want)
        assert len(got) == len(want) and L >= 2
    return hits / total if total else 0.0


# ---------------------------------------------------------------------------- the recipe
@dataclass
class DistillSpec:
    """One self-distillation run: the corpus, the vocabulary subset, and the drafts to
    train (design -> number of layers)."""

    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    designs: dict[str, int] = field(default_factory=lambda: {"feature": 1, "layers": 2})
    vocab_size: int = 8192
    heldout: float = 0.05
    train: TrainConfig = field(default_factory=TrainConfig)

    def validate(self, target_vocab: int | None = None, target_layers: int | None = None) -> None:
        self.corpus.validate()
        self.train.validate()
        if not self.designs:
            raise ValueError(f"designs: give at least one of {list(DESIGNS)} with its number of layers")
        for design, n in self.designs.items():
            if design not in DESIGNS:
                raise ValueError(f"designs: unknown draft design {design!r}; valid: {list(DESIGNS)}")
            top = target_layers or n
            if not isinstance(n, int) or not 1 <= n <= top:
                raise ValueError(f"designs.{design}: number of layers must be in 1..{top}, got {n!r}")
        top = target_vocab or self.vocab_size
        if not isinstance(self.vocab_size, int) or not 1 <= self.vocab_size <= top:
            raise ValueError(
                f"vocab_size must be an integer in 1..{top} (the target's vocabulary), got {self.vocab_size!r}"
            )
        if not 0 < self.heldout < 1:
            raise ValueError(f"heldout must be a share in (0, 1), got {self.heldout!r}")


def _train_design(
    target: LoadedModel,
    spec: DistillSpec,
    design: str,
    n_layers: int,
    subset: torch.Tensor,
    train: tuple[list[dict], list[torch.Tensor]],
    held: tuple[list[dict], list[torch.Tensor]],
    work: Path,
    on_metrics: Callable[[dict[str, float], int | None], None],
) -> tuple[DraftModel, dict[str, Any]]:
    """One draft design built and trained on the ``train`` (records, features) split
    (checkpointed in ``work``, each step's losses reported as ``<design>/<name>``), with
    its held-out agreement before and after training, its training time and steps and its size."""
    (train_records, f_train), (held_records, f_held) = train, held
    held_seqs, held_starts = [r["ids"] for r in held_records], [r["start"] for r in held_records]
    torch.manual_seed(spec.train.seed)
    draft = build_draft(target.model, design, n_layers, subset, target.name)
    before = agreement(draft, target.model, held_seqs, f_held, held_starts)

    def log_step(step: int, m: dict[str, float]) -> None:
        on_metrics({f"{design}/{k}": v for k, v in m.items()}, step)

    key = hashlib_key({**asdict(spec), "design": design, "n_layers": n_layers})
    state = train_draft(
        draft,
        [r["ids"] for r in train_records],
        f_train,
        spec.train,
        checkpoint=work / f"{design}-{key}.ckpt",
        on_step=log_step,
        desc=f"train {design}",
    )
    after = agreement(draft, target.model, held_seqs, f_held, held_starts)
    metrics = {
        "heldout_agreement_untrained": before,
        "heldout_agreement": after,
        "train_seconds": state.seconds,
        "train_steps": state.step,
        **draft_size(draft),
    }
    return draft, metrics


def distill(
    target: LoadedModel,
    spec: DistillSpec,
    out_dir: str | Path,
    cache_dir: str | Path,
    on_metrics: Callable[[dict[str, float], int | None], None] = lambda m, step: None,
    recipe: dict | None = None,
    kernels=None,
) -> dict[str, Path]:
    """The whole recipe: corpus, features, vocabulary subset, n-gram corpus, then each
    draft trained and saved in ``out_dir`` (``<design>.safetensors``, ``ngram.safetensors``).
    Every stage is cached or checkpointed under ``cache_dir``: a re-run resumes."""
    spec.validate(target.vocab_size, target.num_layers)
    out_dir = Path(out_dir)
    work = corpus_dir(
        cache_dir, target.name, spec.corpus, getattr(kernels, "name", "hf") if kernels is not None else "hf"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    train, held, f_train, f_held = corpus_splits(target, spec.corpus, spec.heldout, work, kernels, on_metrics)
    answers = [r["answer"] for r in train]
    eos = eos_token_ids(target)
    subset = vocab_subset(answers, spec.vocab_size, target.vocab_size, always=eos)
    on_metrics(
        {
            "vocab_coverage_train": coverage(answers, subset),
            "vocab_coverage_heldout": coverage([r["answer"] for r in held], subset),
        },
        None,
    )
    paths = {"ngram": out_dir / "ngram.safetensors"}
    stream = [t for a in answers for t in (a if a and a[-1] in eos else a + eos[:1])]
    write_corpus(paths["ngram"], stream, target.vocab_size, source=f"{target.name} answers to training prompts")
    for design, n_layers in spec.designs.items():
        draft, metrics = _train_design(
            target, spec, design, n_layers, subset, (train, f_train), (held, f_held), work, on_metrics
        )
        on_metrics({f"{design}/{k}": float(v) for k, v in metrics.items()}, None)
        draft.meta.recipe = {**(recipe or {}), "provenance": provenance(target, kernels, work)}
        draft.meta.metrics = metrics
        paths[design] = save_draft(draft, out_dir / f"{design}.safetensors")
        log.info(
            "%s draft: held-out agreement %.3f (untrained %.3f), %d steps in %.0f s -> %s",
            design,
            metrics["heldout_agreement"],
            metrics["heldout_agreement_untrained"],
            metrics["train_steps"],
            metrics["train_seconds"],
            paths[design],
        )
    return paths


def hashlib_key(obj: dict) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]
