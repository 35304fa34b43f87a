"""Run identity: the keys that find a job's run and a sweep's parent run again, a run's
name, and the job's config as MLflow params.

A re-run of a sweep skips every job whose ``config_hash`` already has a FINISHED run, and
reattaches to the parent run with the same ``sweep_id``. Knows omegaconf, not MLflow.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

from omegaconf import DictConfig

from .plan import data_path, level_dict, level_slots, plain

HASH_EXCLUDED_KEYS = ("hydra", "tracking", "experiment_name", "resume")
"""Top-level keys that do not change a job's results: where it is logged, not what it does."""


def _without(cfg: DictConfig, keys: Iterable[str]) -> dict:
    """Resolved plain dict of ``cfg`` minus top-level ``keys`` (never resolving those)."""
    skip = set(keys)
    return {str(k): plain(cfg[k]) for k in cfg if k not in skip}


def config_hash(cfg: DictConfig) -> str:
    """sha256 of what determines a job's results: the resolved config without tracking,
    Hydra and naming keys, with the levels as the ordered list that actually runs (so
    ``levels.x=null`` and ``levels.x.enabled=false`` hash alike) and a spec_bench file's
    path resolved (so ``data.path=null`` with $STAGEDSPEC_DATA and that file's path hash
    alike; a packaged prompt set has no path in the hash: its pinned version fixes it)."""
    payload = _without(cfg, HASH_EXCLUDED_KEYS)
    payload["levels"] = [level_dict(s, d) for s, d in level_slots(cfg)]
    data = dict(payload.get("data") or {})
    path = data_path(data)
    data["path"] = None if path is None else str(path)
    payload["data"] = data
    text = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
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


def job_overrides_label(overrides: Iterable[str]) -> str:
    """A short run name from a job's overrides (bookkeeping and paths left out)."""
    keep = [o for o in overrides if not _is_bookkeeping_override(o) and not o.startswith(("data.path", "experiment="))]
    return ",".join(keep)


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


def flat_params(cfg: DictConfig) -> dict[str, Any]:
    """The flattened resolved config (without ``hydra``), for MLflow params."""
    return flatten(_without(cfg, ("hydra",)))
