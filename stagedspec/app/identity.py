"""Run identity: the keys that find a job's run and a sweep's parent run again, a run's
name, and the job's config as MLflow params.

A re-run of a sweep skips every job whose ``config_hash`` already has a FINISHED run, and
reattaches to the parent run with the same ``sweep_id``. Knows omegaconf, not MLflow.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any
from collections.abc import Iterable

from omegaconf import DictConfig, OmegaConf

from .validation import UNSPLIT, data_path, level_dict, level_slots, plain

HASH_EXCLUDED_KEYS = ("hydra", "tracking", "experiment_name", "resume")
"""Top-level keys that do not change a job's results: where it is logged, not what it does."""

HASHED_TARGETS = {
    **{
        f"stagedspec.drafters.hierarchy.{c}": f"stagedspec.hierarchy.{c}"
        for c in ("NgramLevel", "PromptLookupLevel", "BypassLevel", "ModelLevel", "TrainedLevel")
    },
    "stagedspec.drafters.hierarchy.RecycleLevel": "stagedspec.drafters.hierarchy.RecycleLevel",  # new since the rooms
    "stagedspec.models.model_loading.ModelSpec": "stagedspec.models.ModelSpec",
    "stagedspec.engine.sampling.SamplingConfig": "stagedspec.sampling.SamplingConfig",
}
"""``_target_`` class paths as config hashes spell them: the paths before the package was
split into rooms (issue 19), so a moved class keeps its jobs' hashes and a re-run of an
old sweep still finds their finished runs."""


def _hashed_targets(x: Any) -> Any:
    """``x`` with every ``_target_`` value spelled as in ``HASHED_TARGETS``."""
    if isinstance(x, dict):
        return {k: HASHED_TARGETS.get(v, v) if k == "_target_" else _hashed_targets(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_hashed_targets(v) for v in x]
    return x


def _without(cfg: DictConfig, keys: Iterable[str]) -> dict:
    """Resolved plain dict of ``cfg`` minus top-level ``keys`` (never resolving those)."""
    skip = set(keys)
    return {str(k): plain(cfg[k]) for k in cfg if k not in skip}


def _hashed_data(data: dict) -> dict:
    """The ``data`` group as the hash reads it: a spec_bench file's path resolved, and
    ``split`` left out when it selects every question (``all``, or absent), so a job that
    evaluates what it did before splits existed keeps its hash and a re-run still finds
    its finished run; ``dev`` and ``test`` select other questions and hash apart."""
    path = data_path(data)
    data["path"] = None if path is None else str(path)
    if data.get("split", UNSPLIT) == UNSPLIT:
        data.pop("split", None)
    return data


def config_hash(cfg: DictConfig) -> str:
    """sha256 of what determines a job's results: the resolved config without tracking,
    Hydra and naming keys, with the levels as the ordered list that actually runs (so
    ``levels.x=null`` and ``levels.x.enabled=false`` hash alike) and a spec_bench file's
    path resolved (so ``data.path=null`` with $STAGEDSPEC_DATA and that file's path hash
    alike; a packaged prompt set has no path in the hash: its pinned version fixes it).
    ``data.split`` ``all`` hashes as no split at all (``_hashed_data``), ``target.backend``
    ``torch`` as no backend key, ``sampling.coupling`` ``residual`` as no coupling key."""
    payload = _without(cfg, HASH_EXCLUDED_KEYS)
    payload["levels"] = [level_dict(s, d) for s, d in level_slots(cfg)]
    payload["data"] = _hashed_data(dict(payload.get("data") or {}))
    if isinstance(payload.get("target"), dict) and payload["target"].get("backend") == "torch":
        del payload["target"]["backend"]  # the default hashes as before the setting existed
    if isinstance(payload.get("sampling"), dict) and payload["sampling"].get("coupling") == "residual":
        del payload["sampling"]["coupling"]  # likewise
    text = json.dumps(_hashed_targets(payload), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _is_bookkeeping_override(override: str) -> bool:
    key = override.lstrip("+~").split("=", 1)[0]
    return key.startswith(("hydra.", "hydra/", "tracking")) or key == "experiment_name"


def sweep_id(experiment_name: str, overrides: Iterable[str], sweeper_params: dict | None = None) -> str:
    """Stable id of a sweep: its experiment name, its command-line overrides (sorted,
    minus Hydra/tracking bookkeeping) and the preset's ``hydra.sweeper.params``. Running
    the same command again gives the same id, so the sweep reattaches to its parent run."""
    payload = {
        "experiment_name": experiment_name,
        "overrides": sorted(o for o in overrides if not _is_bookkeeping_override(o)),
        "sweeper_params": {str(k): str(v) for k, v in sorted((sweeper_params or {}).items())},
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys -> scalar values; lists become JSON text (one MLflow param each)."""
    node = plain(node)
    out: dict[str, Any] = {}
    if isinstance(node, dict):
        if not node and prefix:
            out[prefix] = "{}"
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(node, list):
        out[prefix] = json.dumps(node, separators=(",", ":"), default=str)
    else:
        out[prefix] = node
    return out


def _is_reference(cfg: DictConfig, key: str) -> bool:
    """``key`` holds ``${other.key}``: a copy of another setting (``sampling.seed: ${seed}``)."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig) or leaf not in node or not OmegaConf.is_interpolation(node, leaf):
        return False
    text = str(node._get_node(leaf)._value())
    return text.startswith("${") and ":" not in text  # not a resolver such as ${oc.env:...}


def job_params(cfg: DictConfig, plan: Any) -> dict[str, Any]:
    """A job's MLflow params: ``plan.params`` (method, draft_k, temperature, ...) and the
    resolved config, each setting once. Left out: ``_target_`` class paths, null values,
    bookkeeping (tracking, experiment name, resume), copies of another key
    (``${...}`` references), the keys ``plan.params`` already gives (``sampling.temperature``,
    the top level's ``k``, ``tree``), and levels that do not run (their meta keys too:
    the method names the levels in their order). config.yaml among the artifacts holds
    everything."""
    payload = _without(cfg, ("hydra", "tree", "levels", *HASH_EXCLUDED_KEYS))
    payload["levels"] = {
        s: {k: v for k, v in d.items() if k not in ("_target_", "stage", "enabled")} for s, d in level_slots(cfg)
    }
    top = plan.levels[-1].name if plan.levels else None
    repeats = {"sampling.temperature", f"levels.{top}.k"}
    out = dict(plan.params)
    for key, value in flatten(payload).items():
        if value is None or key in repeats or key in out or key.endswith("_target_") or _is_reference(cfg, key):
            continue
        out[key] = value
    return out


SHOWN_BY_NAME = ("sampling", "sampling.temperature")
"""Override keys a run's name already shows (with the method, ``k`` and ``T``)."""
SHORT_KEYS = {"batch_size": "bs", "max_new_tokens": "new"}


def _shown_by_name(key: str, top_level: str | None) -> bool:
    key = key.split("@", 1)[-1]  # drafter@levels.small -> levels.small
    if key in SHOWN_BY_NAME or (top_level is not None and key == f"levels.{top_level}.k"):
        return True
    parts = key.split(".")
    # a level switched on, off or swapped: the method shows it
    return parts[0] == "levels" and (len(parts) == 2 or (len(parts) == 3 and parts[2] in ("enabled", "stage")))


def run_name(base: str, overrides: Iterable[str], swept: Iterable[str] | None, top_level: str | None) -> str:
    """A child run's name: ``base`` ("ngram>small>target k=4 T=0", ``JobPlan.run_name``)
    plus each swept override it does not already show, shortened ("bs=4",
    "small.layers=2", "tree=medusa"). ``swept`` None: every override counts (no sweep
    known), bookkeeping, data paths and presets left out."""
    swept = None if swept is None else {k.lstrip("+~") for k in swept}
    parts = [base]
    for o in overrides:
        key, _, value = o.lstrip("+~").partition("=")
        if _is_bookkeeping_override(o) or key in ("experiment", "data.path") or _shown_by_name(key, top_level):
            continue
        if swept is not None and key not in swept:
            continue
        short = SHORT_KEYS.get(key, key.removeprefix("levels."))
        parts.append(f"{short}={value}")
    return " ".join(parts)


def sweep_name(experiment_name: str, swept: Iterable[str], n_jobs: int) -> str:
    """A sweep's (parent run's) name: "default: levels.ngram.k x sampling, 8 jobs"."""
    keys = [k.lstrip("+~").split("@", 1)[-1] for k in swept]
    what = " x ".join(keys) if keys else "one job" if n_jobs == 1 else ""
    jobs = f", {n_jobs} jobs" if n_jobs != 1 else ""
    return f"{experiment_name}: {what}{jobs}" if what else f"{experiment_name}{jobs}"
