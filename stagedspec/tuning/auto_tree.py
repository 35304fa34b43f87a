"""``tree=auto``: measure on this machine, then choose the tree (Sequoia's dynamic program).

The resolver: ``resolve_auto_tree`` turns a drafter's ``tree=auto`` into a path list, from
a measurement (``tree_calibration.py``) cached on disk, by Sequoia's program
(``tree_program.py``), and fixes the drafter's tree. A job's assembly calls it
(``evaluation/job.resolve_tree``) before anything is timed; the engine never does: a
drafter reaching ``setup`` with an unresolved ``tree=auto`` is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from stagedspec.engine.kernels import HF_KERNELS, KernelChoice
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import AutoShape, TreeShape
from stagedspec.metrics.machine import cpu_model
from .disk_cache import write_json_atomically
from .tree_calibration import calibrate
from .tree_program import Calibration, Choice, choose

log = logging.getLogger(__name__)


def auto_tree_key(
    auto: AutoShape, target, sampling: SamplingConfig, plan: KernelChoice, hierarchy_key: Any = None
) -> dict:
    """What a ``tree=auto`` measurement depends on: the hierarchy, the target, the sampling
    rule, the kernel plan, the request and this machine (the calibration cache's key)."""
    p = next(target.model.parameters())
    return {
        "hierarchy": hierarchy_key,
        "target": getattr(target, "name", ""),
        "dtype": str(p.dtype).removeprefix("torch."),
        "device": str(p.device),
        "threads": torch.get_num_threads(),
        "plan": plan.describe(),
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "widths": list(auto.widths),
        "prompts": auto.prompts,
        "source": auto.source,
        "tokens": auto.tokens,
        "max_positions": auto.max_nodes + 1,
        "repeats": auto.repeats,
        "torch": torch.__version__,
        "processor": cpu_model(),
        "cores": os.cpu_count(),
    }


def _cache_file(key: dict, hierarchy_key: Any, cache_dir: Path | None) -> Path | None:
    if hierarchy_key is None or cache_dir is None:
        return None
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]
    return cache_dir / "trees" / f"{digest}.json"


def resolve_auto_tree(
    drafter,
    target,
    sampling: SamplingConfig,
    plan: KernelChoice = HF_KERNELS,
    hierarchy_key: Any = None,
    cache_dir: str | Path | None = None,
    prompts: list[list[int]] | None = None,
) -> Choice | None:
    """Resolve ``drafter``'s ``tree=auto`` now: calibrate against ``target`` under
    ``sampling`` and ``plan`` (or read the cached calibration), choose, and set
    ``drafter.tree`` to the chosen path list. Call it before anything is timed; the
    returned choice is what a runner logs (``params()``, ``metrics()``, ``artifact()``).
    None, changing nothing, when ``drafter`` is None or its tree is not ``tree=auto``.
    ``hierarchy_key``: anything JSON-able naming the hierarchy; without it nothing is
    cached. ``cache_dir``: default the target's cache directory."""
    if drafter is None or not isinstance(drafter.tree, AutoShape):
        return None
    auto = drafter.tree
    if cache_dir is None and hierarchy_key is not None and hasattr(target, "spec"):
        cache_dir = target.spec.resolved_cache_dir()
    key = auto_tree_key(auto, target, sampling, plan, hierarchy_key)
    f = _cache_file(key, hierarchy_key, Path(cache_dir) if cache_dir is not None else None)
    cal, hit = None, False
    if f is not None and f.is_file():
        try:
            cal, hit = Calibration(**json.loads(f.read_text())), True
        except (TypeError, ValueError) as e:
            log.warning("ignoring unreadable tree calibration %s: %s", f, e)
    if cal is None:
        try:
            cal = calibrate(drafter, target, sampling, plan, auto, key, prompts)
        except BaseException:
            drafter.tree = auto  # still unresolved, not left at a calibration shape
            raise
        if f is not None:
            write_json_atomically(f, asdict(cal), "tree calibration")
    choice = choose(cal, auto, hit, str(f) if f is not None else None)
    chosen = TreeShape.parse(choice.paths)
    drafter.tree = chosen
    log.info(
        "tree=auto for %s: %d nodes, depth %d, predicted %.2f tokens/call, %.1f tokens/s (%s)",
        drafter.name,
        chosen.size,
        chosen.depth,
        choice.predicted_tokens_per_call,
        choice.predicted_tokens_per_s,
        "cached calibration" if hit else f"calibrated in {cal.seconds:.1f} s",
    )
    return choice
