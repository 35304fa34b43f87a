"""Train drafts that imitate a target: ``python -m stagedspec.distill [overrides]``.

The recipe (``distillation.distill``): the target answers templated training prompts
(never a benchmark's) in batches, greedy and sampled; its hidden states along those
answers are the training signal; the most frequent answer tokens form the drafts'
vocabulary subset; each configured draft design is trained and written to ``out_dir``
with the recipe and its held-out agreement inside the file, beside an n-gram corpus of
the same answers. Every stage is cached under the model cache (``<cache>/distill/``),
and training checkpoints, so an interrupted run resumes. One MLflow run per invocation
(experiment ``distill``) holds the config, the loss curves and the held-out agreement.

    python -m stagedspec.distill                                   # conf/distill.yaml
    python -m stagedspec.distill vocab_size=4096 designs=[feature] n_layers.feature=2
    python -m stagedspec.distill -m vocab_size=4096,8192,16384     # a sweep
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from stagedspec.tuning.kernel_calibration import kernel_plan
from stagedspec.models.model_loading import load_cached
from stagedspec.training.corpus import CorpusSpec
from stagedspec.training.distillation import DistillSpec, TrainConfig, distill
from .cli import entry_errors
from .validation import CONF_DIR, ConfigError, instantiate, plain
from .tracking import Tracker, context_tags

log = logging.getLogger(__name__)

KEYS = {
    "target",
    "tracking",
    "experiment_name",
    "seed",
    "device",
    "kernels",
    "out_dir",
    "corpus",
    "designs",
    "n_layers",
    "vocab_size",
    "heldout",
    "train",
}


def distill_spec(cfg: DictConfig) -> tuple[object, DistillSpec]:
    """The target's ModelSpec and the checked recipe; nothing is loaded."""
    unknown = sorted(set(cfg) - KEYS - {"hydra"})
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown}; valid: {sorted(KEYS)}")
    target = instantiate(cfg.get("target"), "target")
    try:
        target.validate()
        corpus = CorpusSpec(**{**plain(cfg.corpus), "temperatures": tuple(plain(cfg.corpus).get("temperatures", ()))})
        train = TrainConfig(**{**plain(cfg.train), "seed": cfg.seed})
        # a list of designs (a dict would merge with the default on override, not replace it)
        designs, n_layers = list(plain(cfg.designs)), dict(plain(cfg.n_layers))
        missing = [d for d in designs if d not in n_layers]
        if missing:
            raise ValueError(f"n_layers has no entry for design(s) {missing}; give e.g. n_layers.{missing[0]}=1")
        settings = DistillSpec(
            corpus=corpus,
            designs={d: n_layers[d] for d in designs},
            vocab_size=cfg.vocab_size,
            heldout=cfg.heldout,
            train=train,
        )
        settings.validate()
    except (TypeError, ValueError, FileNotFoundError) as e:
        raise ConfigError(str(e)) from e
    if cfg.get("kernels", "fast") not in ("fast", "hf"):
        raise ConfigError(f"kernels must be 'fast' or 'hf', got {cfg.get('kernels')!r}")
    return target, settings


@hydra.main(config_path=str(CONF_DIR), config_name="distill", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with entry_errors():  # one line on the console (a file holds any other error's traceback)
        run_distill(cfg)


def run_distill(cfg: DictConfig) -> None:
    """Build the corpus and train the drafts the config asks for, logging to MLflow."""
    spec, settings = distill_spec(cfg)
    tracker = None
    uri = (cfg.get("tracking") or {}).get("uri")
    run_id = None
    if uri:
        tracker = Tracker(uri, cfg.experiment_name, cfg.tracking.get("artifact_location"))
        run = tracker.client.create_run(
            tracker.experiment_id,
            run_name=f"distill V={settings.vocab_size} " + " ".join(f"{d}{n}" for d, n in settings.designs.items()),
            tags=context_tags(),
        )
        run_id = run.info.run_id
        tracker.log(
            run_id,
            params={
                "target": spec.source,
                "vocab_size": settings.vocab_size,
                "designs": json.dumps(settings.designs),
                "corpus": json.dumps(plain(cfg.corpus)),
                "train": json.dumps(plain(cfg.train)),
                "seed": cfg.seed,
            },
        )

    def on_metrics(metrics: dict[str, float], step: int | None) -> None:
        if tracker is not None:
            tracker.log(run_id, metrics=metrics, step=step or 0)

    status = "FAILED"
    try:
        target = load_cached(spec)
        recipe = {
            "command": "python -m stagedspec.distill " + " ".join(sys.argv[1:]),
            "config": OmegaConf.to_container(cfg, resolve=True)
            if "hydra" not in cfg
            else {k: plain(cfg[k]) for k in cfg if k != "hydra"},
        }
        paths = distill(
            target,
            settings,
            Path(cfg.out_dir),
            spec.resolved_cache_dir(),
            on_metrics=on_metrics,
            recipe=recipe,
            kernels=kernel_plan(target, cfg.kernels),
        )
        for name, path in paths.items():
            log.info("%s: %s", name, path)
            if tracker is not None:
                tracker.log_artifact(run_id, path)
        status = "FINISHED"
    finally:
        if tracker is not None:
            tracker.end(run_id, status)
