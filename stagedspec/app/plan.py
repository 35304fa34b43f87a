"""A job's checked plan: ``validate_cfg`` turns a composed config into a ``JobPlan``
before any model is loaded.

The runner calls ``validate_cfg`` first: it builds every object the job needs except the
models (levels, the target's ModelSpec, the sampling rule), reads the questions and the
job's settings (seed, baseline, ...), so a bad override fails in a second instead of
after a 20-second model load, and the plan is all that travels below the runner. The
checks themselves are ``validation.py``'s; a bad value raises ``ConfigError``.

This module knows omegaconf but not Hydra or MLflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from stagedspec.drafters.hierarchy import target_facing
from stagedspec.metrics.run_schema import method_name
from stagedspec.models.llama_cpp_model import bindings
from .validation import (
    CONF_DIR,
    ConfigError,
    check_caches,
    check_context,
    check_keys,
    check_vocab_sizes,
    checked_levels,
    checked_target,
    heldout_questions,
    instantiate,
    job_settings,
    load_data,
)

__all__ = ["CONF_DIR", "ConfigError", "JobPlan", "validate_cfg"]
"""What the entry points import from here (``CONF_DIR`` and ``ConfigError`` are
``validation.py``'s, named here beside the function that raises it)."""


@dataclass
class JobPlan:
    """Everything a job needs except the models, checked. Below the runner only this
    travels, never the config."""

    target: Any  # ModelSpec
    levels: list[Any]
    sampling: Any  # SamplingConfig
    questions: list[Any]  # list[Question]
    data_path: Path | None
    batch_size: int
    max_new_tokens: int
    seed: int
    baseline: bool
    """Also decode with the target alone, on the same prompts (gives ``speedup``)."""
    warmup: bool
    """One short untimed generate per method first: first forwards allocate."""
    resume: bool
    """Skip the job if the tracker holds a FINISHED run of it; False: redo it."""
    device: str
    experiment_name: str
    kernels: str = "fast"
    """The forwards' kernel plan (``kernels.py``): "fast" (calibrated on this machine,
    cached) or "hf" (Hugging Face's own path, bit for bit)."""
    repeats: int = 1
    """Times each batch is decoded by the method and by the baseline, interleaved."""
    data_name: str | None = None
    """The prompt set (``prompt_sets.PROMPT_SETS``); None when the job reads no data (generate)."""
    prediction_prompts: int = 0
    """Prompts decoded before timing for ``predicted_speedup`` (0: no prediction)."""
    prediction_tokens: int = 64
    """New tokens per calibration prompt."""
    prediction_source: str = "heldout"
    """Where the calibration prompts come from: "heldout" (first turns of questions of the
    same prompt set and categories that the job does not evaluate, ``heldout_questions``)
    or "training" (the training templates)."""
    heldout_questions: list[Any] = field(default_factory=list)
    """The prompt set's questions the job does not evaluate (same categories when any is
    left there), for ``prediction_source`` "heldout"."""

    @property
    def method(self) -> str:
        """Level names, lowest first, then the target: "ngram>small>target"."""
        return method_name(lv.name for lv in self.levels)

    @property
    def draft_k(self) -> int:
        """k of the level that drafts for the target (0 without levels)."""
        return int(self.levels[-1].k) if self.levels else 0

    @property
    def tree(self) -> str:
        """The tree shape sent to the target as text ("chain" for a chain): the shape of the
        level drafting for the target (under a bypass level, the one it passes rounds to)."""
        i = target_facing(self.levels) if self.levels else -1
        shape = getattr(self.levels[i], "shape", None) if i >= 0 else None
        return "chain" if shape is None else str(shape)

    @property
    def params(self) -> dict[str, Any]:
        """What the job is, in a few MLflow params (logged beside the flattened config,
        ``identity.job_params``, which leaves out the config keys these repeat)."""
        return {
            "method": self.method,
            "draft_k": self.draft_k,
            "temperature": self.sampling.temperature,
            "batch_size": self.batch_size,
            "tree": self.tree,
            "n_levels": len(self.levels),
            "n_questions": len(self.questions),
            "n_prompts": sum(len(q.turns) for q in self.questions),
            "kernels": self.kernels,
        }

    @property
    def run_name(self) -> str:
        """A short name: "ngram>small>target k=4 T=0" ("target T=0.7" for plain decoding)."""
        k = f" k={self.draft_k}" if self.levels else ""
        return f"{self.method}{k} T={self.sampling.temperature:g}"


def validate_cfg(cfg: DictConfig, with_data: bool = True, extra_keys: tuple[str, ...] = ()) -> JobPlan:
    """Run every check that needs no model; raise ConfigError naming the bad value.

    Checked: no key that nothing reads (``check_keys``; ``extra_keys`` are the entry
    point's own, e.g. generate's ``prompt``), no ModelSpec field its source ignores;
    batch_size, max_new_tokens, seed, repeats, baseline, resume, warmup; every level
    (known type, k >= 1, its own keys, tree shape, order rules); the target's ModelSpec;
    the sampling rule (a finite temperature >= 0, top_p in (0, 1], top_k >= 0, an integer
    seed >= 0; ``true`` is no number anywhere); max_new_tokens plus the draft depth within
    the target's context (from its metadata); a writable cache_dir for a model not yet
    cached there; the prompt set (known, its file present and every line well-formed,
    categories its own, ``data.split`` one of dev / test / all). A drafter whose tokenizer differs from the target's
    can only be found once the models are loaded; ``ModelLevel.build`` checks it then,
    before decoding, naming the level.
    """
    check_keys(cfg, extra_keys)
    settings = job_settings(cfg)
    target = checked_target(cfg)
    sampling = instantiate(cfg.get("sampling"), "sampling")
    levels = checked_levels(cfg)
    if getattr(target, "backend", "torch") == "llama_cpp":
        check_llama_cpp(levels)
    check_vocab_sizes(target, levels)
    check_context(target, levels, settings["max_new_tokens"])
    check_caches(target, levels)
    path, questions, data_name = load_data(cfg) if with_data else (None, [], None)
    heldout: list[Any] = []
    if (
        with_data
        and settings["prediction_prompts"]
        and settings["prediction_source"] == "heldout"
        and levels
        and settings["baseline"]
    ):
        heldout = heldout_questions(cfg, questions, data_name)
    return JobPlan(
        target=target,
        levels=levels,
        sampling=sampling,
        questions=questions,
        data_path=path,
        data_name=data_name,
        device=str(cfg.get("device")),
        experiment_name=cfg.get("experiment_name"),
        heldout_questions=heldout,
        **settings,
    )


def check_llama_cpp(levels: list[Any]) -> None:
    """``target.backend=llama_cpp``: its bindings importable (an optional install) and no level
    reading the target's hidden states (llama.cpp returns none); before any model loads."""
    try:
        bindings()
    except RuntimeError as e:
        raise ConfigError(f"target.backend: {e}") from e
    if any(getattr(lv, "reads_features", False) for lv in levels):
        raise ConfigError(
            "target.backend=llama_cpp returns no hidden states, which a feature draft reads: use target.backend=torch"
        )
