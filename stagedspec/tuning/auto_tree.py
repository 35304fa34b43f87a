"""``tree=auto``: measure on this machine, then choose the tree (Sequoia's dynamic program).

The resolver: a level's ``tree=auto`` turns into a path list at ``setup``, from a
measurement (``tree_calibration.py``) cached on disk, by Sequoia's program
(``tree_program.py``); ``attach`` and ``prepare`` are the runner's hooks.
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

from stagedspec.engine.kernels import HF_PLAN, KernelPlan
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import AutoShape, StaticShape, TreeShape
from .disk_cache import write_json_atomically
from .kernel_calibration import cpu_name
from .tree_calibration import calibrate
from .tree_program import Calibration, Choice, choose

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the resolver
class AutoTree:
    """Turns a level's ``tree=auto`` into a path list at ``setup`` (once per sampling rule
    and kernel plan; measurements cached on disk when ``hierarchy_key`` is given)."""

    def __init__(self, auto: AutoShape, target, hierarchy_key: Any = None, cache_dir: str | Path | None = None,
                 prompts: list[list[int]] | None = None) -> None:
        self.shape, self.target, self.hierarchy_key = auto, target, hierarchy_key
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.prompts = prompts
        self.choice: Choice | None = None
        self._chosen: dict[str, StaticShape] = {}
        self._busy = False

    def key(self, sampling: SamplingConfig, plan: KernelPlan) -> dict:
        p = next(self.target.model.parameters())
        a = self.shape
        return {
            "hierarchy": self.hierarchy_key, "target": getattr(self.target, "name", ""),
            "dtype": str(p.dtype).removeprefix("torch."), "device": str(p.device), "threads": torch.get_num_threads(),
            "plan": plan.describe(), "temperature": sampling.temperature, "top_k": sampling.top_k,
            "top_p": sampling.top_p, "widths": list(a.widths), "prompts": a.prompts, "source": a.source,
            "tokens": a.tokens,
            "max_positions": a.max_nodes + 1, "repeats": a.repeats, "torch": torch.__version__,
            "processor": cpu_name(), "cores": os.cpu_count(),
        }

    def _file(self, key: dict) -> Path | None:
        if self.hierarchy_key is None or self.cache_dir is None:
            return None
        digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]
        return self.cache_dir / "trees" / f"{digest}.json"

    def resolve(self, drafter, sampling: SamplingConfig, plan: KernelPlan = HF_PLAN) -> None:
        if self._busy:  # the calibration's own decoder sets the drafter up again
            return
        key = self.key(sampling, plan)
        tag = json.dumps(key, sort_keys=True, default=str)
        if tag in self._chosen:
            drafter.tree = self._chosen[tag]
            return
        f = self._file(key)
        cal, hit = None, False
        if f is not None and f.is_file():
            try:
                cal, hit = Calibration(**json.loads(f.read_text())), True
            except (TypeError, ValueError) as e:
                log.warning("ignoring unreadable tree calibration %s: %s", f, e)
        if cal is None:
            self._busy = True
            try:
                cal = calibrate(drafter, self.target, sampling, plan, self.shape, key, self.prompts)
            finally:
                self._busy = False
            if f is not None:
                write_json_atomically(f, asdict(cal), "tree calibration")
        self.choice = choose(cal, self.shape, hit, str(f) if f is not None else None)
        chosen = TreeShape.parse(self.choice.paths)
        self._chosen[tag] = chosen
        drafter.tree = chosen
        log.info("tree=auto for %s: %d nodes, depth %d, predicted %.2f tokens/call, %.1f tokens/s (%s)",
                 drafter.name, chosen.size, chosen.depth, self.choice.predicted_tokens_per_call,
                 self.choice.predicted_tokens_per_s, "cached calibration" if hit else f"calibrated in {cal.seconds:.1f} s")


def attach(drafter, target, hierarchy_key: Any = None, cache_dir: str | Path | None = None,
           prompts: list[list[int]] | None = None) -> AutoTree:
    """Give a drafter whose ``tree`` is an ``AutoShape`` what it needs to choose at ``setup``.
    ``hierarchy_key``: anything JSON-able naming the hierarchy; without it nothing is cached."""
    if not isinstance(drafter.tree, AutoShape):
        raise ValueError(f"level {drafter.name!r}: auto_tree.attach needs tree=auto, got {drafter.tree!r}")
    if cache_dir is None and hierarchy_key is not None and hasattr(target, "spec"):
        cache_dir = target.spec.resolved_cache_dir()
    drafter.auto = AutoTree(drafter.tree, target, hierarchy_key, cache_dir, prompts)
    return drafter.auto


def prepare(drafter, sampling: SamplingConfig, plan: KernelPlan = HF_PLAN) -> Choice | None:
    """Resolve ``tree=auto`` now (calibrating, or reading the cache) rather than at the first
    ``generate``: a runner calls this before it times anything, then logs the returned
    choice (``params()``, ``metrics()``, ``artifact()``). None when the top level has no auto tree."""
    auto = getattr(drafter, "auto", None) if drafter is not None else None
    if auto is None:
        return None
    auto.resolve(drafter, sampling, plan)
    return auto.choice
