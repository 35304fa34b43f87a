"""The checks of a composed job config that need no model, and the builders they use.

``plan.validate_cfg`` runs them in order and assembles their results into a ``JobPlan``;
each raises ``ConfigError`` naming the bad key and value. Every ``_target_`` goes through
``instantiate``, which builds only the classes in ``ALLOWED_TARGETS`` (Hydra 1.4 restricts
``_target_`` too; ours is stricter and names the valid ones). Hydra's own ``_target_``s
(launchers, callbacks) stay Hydra's business. ``identity.py`` reads the level and data
helpers (``level_slots``, ``level_dict``, ``data_path``) for the config hash.

This module knows omegaconf but not Hydra or MLflow.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from stagedspec.drafters.hierarchy import LEVEL_TYPES, target_facing, validate_levels
from stagedspec.models.model_loading import SOURCES, check_cache_dir, peek_context_length, peek_vocab_size
from stagedspec.prompts import prompt_sets, splits

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

LEVEL_TARGETS = tuple(f"{t.__module__}.{t.__name__}" for t in LEVEL_TYPES)
"""Every level type's ``_target_`` (``drafters/hierarchy.py``'s ``LEVEL_TYPES``)."""
ALLOWED_TARGETS = LEVEL_TARGETS + (
    "stagedspec.models.model_loading.ModelSpec",
    "stagedspec.engine.sampling.SamplingConfig",
)

LEVEL_META_KEYS = ("stage", "enabled")
"""Keys of a level dict that the runner reads (ordering, on/off) and the level never sees."""


CONFIG_KEYS = (
    "target",
    "levels",
    "tree",
    "sampling",
    "data",
    "tracking",
    "experiment_name",
    "batch_size",
    "max_new_tokens",
    "seed",
    "baseline",
    "device",
    "kernels",
    "warmup",
    "resume",
    "repeats",
    "prediction",
)
"""The top-level keys of a job's config (conf/config.yaml and its groups); ``hydra`` is
Hydra's, and an entry point may allow more (``prompt`` for generate)."""
DATA_KEYS = ("name", "path", "split", "categories", "per_category", "limit", "max_turns")
TRACKING_KEYS = ("uri", "artifact_location", "system_metrics")
TREE_KEYS = ("shape",)
PREDICTION_KEYS = ("prompts", "tokens", "source")
PREDICTION_SOURCES = ("heldout", "training")
KERNEL_CHOICES = ("fast", "hf")
GROUP_KEYS = {"data": DATA_KEYS, "tracking": TRACKING_KEYS, "tree": TREE_KEYS, "prediction": PREDICTION_KEYS}
"""Keys of the groups that build no dataclass (those are checked against its fields)."""

PATH_SOURCES = ("hf", "gguf")
"""The ModelSpec sources that read ``path``. A path given to another source (the embedded
model, tiny, truncated) would be silently ignored (``target.path=/x`` with the embedded
source loads the embedded model), so it is refused."""


class ConfigError(ValueError):
    """An invalid config; the message names the key and the bad value."""


def _leaves(node: Any) -> list[str]:
    """Dotted paths of the leaves under ``node`` (unresolved), "" for a leaf itself."""
    if isinstance(node, (DictConfig, ListConfig)):
        node = OmegaConf.to_container(node, resolve=False)
    if isinstance(node, dict) and node:
        return [f"{k}.{rest}" if rest else str(k) for k, v in node.items() for rest in _leaves(v)]
    return [""]


def unknown_key(where: str, key: str, valid: Any, node: Any = None, what: str = "") -> ConfigError:
    """The error for a key that nothing reads: its full path, and the nearest valid key
    (or the valid keys when none is near). ``node`` is the value under the bad key: with a
    single leaf below it, the message names that leaf's whole path."""
    valid = sorted(str(v) for v in valid)
    prefix = f"{where}." if where else ""
    leaves = _leaves(node) if node is not None else [""]
    tail = f".{leaves[0]}" if len(leaves) == 1 and leaves[0] else ""
    at = f"in {what or repr(where)}" if where else "at the top level"
    msg = f"unknown config key {prefix + key + tail!r}: {key!r} is not a key {at}"
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        msg += f"; did you mean {prefix + close[0] + tail!r}?"
    else:
        msg += f"; valid keys: {valid}"
    return ConfigError(msg)


def check_keys(cfg: DictConfig, extra: tuple[str, ...] = ()) -> None:
    """Refuse a key nothing reads, at the top level and in the groups without a dataclass
    (``data``, ``tracking``, ``tree``); the dataclass groups (target, sampling, levels) are
    checked against their fields when built. A ``+key=value`` typo (Hydra's own advice for
    a key it does not know) would otherwise run with the default and change the config hash."""
    valid = CONFIG_KEYS + tuple(extra)
    for key in cfg:
        if key != "hydra" and key not in valid:
            raise unknown_key("", str(key), valid, cfg[key] if OmegaConf.is_config(cfg) else None)
    for group, keys in GROUP_KEYS.items():
        node = cfg.get(group)
        if isinstance(node, DictConfig):
            for key in node:
                if key not in keys:
                    raise unknown_key(group, str(key), keys, node[key])


def plain(node: Any) -> Any:
    """A resolved plain-Python copy of a config node (dicts, lists, scalars)."""
    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node


def _import(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def instantiate(node: Any, where: str = "config") -> Any:
    """Build the object a ``_target_`` dict describes; nested ``_target_`` dicts first.

    Dicts without ``_target_`` and lists are returned as plain containers (their nested
    ``_target_`` dicts built). ``where`` is the config path, used in error messages.
    """
    node = plain(node)
    if isinstance(node, list):
        return [instantiate(v, f"{where}[{i}]") for i, v in enumerate(node)]
    if not isinstance(node, dict):
        return node
    if "_target_" not in node:
        return {k: instantiate(v, f"{where}.{k}") for k, v in node.items()}
    target = node["_target_"]
    if target not in ALLOWED_TARGETS:
        raise ConfigError(f"{where}: unknown _target_ {target!r}; valid: {list(ALLOWED_TARGETS)}")
    cls = _import(target)
    kwargs = {k: instantiate(v, f"{where}.{k}") for k, v in node.items() if k != "_target_"}
    if dataclasses.is_dataclass(cls):
        valid = [f.name for f in dataclasses.fields(cls) if f.init]
        unknown = sorted(set(kwargs) - set(valid))
        if unknown:
            extra = LEVEL_META_KEYS if target in LEVEL_TARGETS else ()
            raise unknown_key(where, unknown[0], [*valid, *extra], node[unknown[0]], what=f"{where} ({cls.__name__})")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from e


def drafter_options() -> list[str]:
    """Names of the level configs in conf/drafter/ (for error messages)."""
    return sorted(p.stem for p in (CONF_DIR / "drafter").glob("*.yaml"))


def level_slots(cfg: DictConfig) -> list[tuple[str, dict]]:
    """The active level dicts as (slot name, resolved dict), lowest level first.

    Null slots and ``enabled: false`` levels are dropped. Order: by the integer ``stage``
    key, ties in slot order; if no level has ``stage``, slot order alone. Mixing levels
    with and without ``stage`` is an error (the order would be a guess).
    """
    levels = cfg.get("levels")
    if levels is None:
        return []
    if not isinstance(levels, DictConfig):
        raise ConfigError(f"levels: expected a mapping of slot name -> level dict, got {plain(levels)!r}")
    items: list[tuple[str, dict]] = []
    for slot in levels:
        node = levels[slot]
        if node is None:
            continue
        d = plain(node)
        if not isinstance(d, dict):
            raise ConfigError(
                f"levels.{slot}: expected a level dict or null, got {d!r}; "
                f"pick a level with +drafter@levels.{slot}=<{'|'.join(drafter_options())}>"
            )
        enabled = d.get("enabled", True)
        if not isinstance(enabled, bool):
            raise ConfigError(f"levels.{slot}.enabled must be true or false, got {enabled!r}")
        if enabled:
            _check_level_target(str(slot), d)
            items.append((str(slot), d))
    staged = [s for s, d in items if "stage" in d]
    if staged and len(staged) != len(items):
        missing = [s for s, d in items if "stage" not in d]
        raise ConfigError(
            f"levels {missing} have no 'stage' but {staged} do: give every level an integer stage "
            f"(lowest runs first), e.g. +levels.{missing[0]}.stage=0"
        )
    for s, d in items:
        if "stage" in d and (not isinstance(d["stage"], int) or isinstance(d["stage"], bool)):
            raise ConfigError(f"levels.{s}.stage must be an integer, got {d['stage']!r}")
    if staged:
        items.sort(key=lambda item: item[1]["stage"])  # stable: ties keep slot order
    return items


def _check_level_target(slot: str, d: dict) -> None:
    target = d.get("_target_")
    if target not in LEVEL_TARGETS:
        what = "has no _target_" if target is None else f"has unknown level type {target!r}"
        raise ConfigError(
            f"levels.{slot} {what}; valid level types: {list(LEVEL_TARGETS)} "
            f"(configs: +drafter@levels.{slot}=<{'|'.join(drafter_options())}>)"
        )


def level_dict(slot: str, d: dict) -> dict:
    """A level's constructor dict: meta keys removed, the slot name as default ``name``."""
    _check_level_target(slot, d)
    out = {k: v for k, v in d.items() if k not in LEVEL_META_KEYS}
    out.setdefault("name", slot)
    return out


def tree_setting(cfg: DictConfig) -> Any:
    """The top-level tree shape (``tree.shape``) as plain data; None = chain."""
    tree = cfg.get("tree")
    if tree is None:
        return None
    if isinstance(tree, DictConfig):
        return plain(tree.get("shape"))
    return plain(tree)


def levels_from_cfg(cfg: DictConfig) -> list[Any]:
    """Level objects, lowest first (see ``level_slots``), not yet validated or built.

    The top-level ``tree`` shape goes to the level that drafts for the target (the last one,
    or the one under a bypass level: ``hierarchy.target_facing``); other levels take a shape
    only from their own ``tree`` key.
    """
    levels = [instantiate(level_dict(s, d), f"levels.{s}") for s, d in level_slots(cfg)]
    shape = tree_setting(cfg)
    if shape is not None:
        if not levels:
            raise ConfigError(f"tree: shape {shape!r} needs at least one draft level (all levels are off)")
        i = target_facing(levels)
        top = levels[i] if i >= 0 else levels[-1]
        if not hasattr(top, "tree"):
            raise ConfigError(
                f"tree: level {top.name!r} ({type(top).__name__}) drafts chains only; use tree=chain "
                f"or put a level that builds trees on top"
            )
        if top.tree is not None:
            raise ConfigError(
                f"tree: set the top level's tree either with `tree` or in the level ({top.name!r} has "
                f"tree={top.tree!r}), not both"
            )
        levels[i] = dataclasses.replace(top, tree=shape)  # a new object: no stale parsed ``shape``
    return levels


def check_int(cfg: DictConfig, key: str, minimum: int) -> int:
    v = cfg.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise ConfigError(f"{key} must be an integer >= {minimum}, got {v!r}")
    return v


def data_path(d: dict) -> Path | None:
    """The questions file a ``data`` dict names when it is a file of the user's
    (``spec_bench``: ``path`` resolved, else ``$STAGEDSPEC_DATA``); None for a prompt set
    that ships in a package (its version, pinned by the install step, fixes the file)."""
    name = d.get("name") or DEFAULT_DATA
    if name not in prompt_sets.PROMPT_SETS or not prompt_sets.PROMPT_SETS[name].needs_path:
        return None
    chosen = d.get("path") or os.environ.get(prompt_sets.DATA_ENV)
    return Path(chosen).expanduser().resolve() if chosen else None


DEFAULT_DATA = "mt_bench"

UNSPLIT = "all"
"""``data.split`` when a data dict has none (configs written before splits): every
question, as then; ``conf/data/`` sets ``test`` for the packaged sets."""


def data_split(d: dict) -> str:
    """The ``data.split`` a data dict selects (``UNSPLIT`` when absent), checked: a bad
    value is one line naming it and the valid ones, before any file is read."""
    split = d.get("split", UNSPLIT)
    try:
        return splits.check_split(split)
    except ValueError as e:
        raise ConfigError(f"data.split: {e}") from None


def load_data(cfg: DictConfig) -> tuple[Path, list[Any], str]:
    """The job's questions, the file they came from, and the prompt set's name."""
    d = cfg.get("data")
    d = plain(d) if d is not None else {}
    if not isinstance(d, dict):
        raise ConfigError(f"data: expected a mapping, got {d!r}")
    unknown = sorted(set(d) - set(DATA_KEYS))
    if unknown:
        raise unknown_key("data", unknown[0], DATA_KEYS, d[unknown[0]])
    name = d.get("name") or DEFAULT_DATA
    if name not in prompt_sets.PROMPT_SETS:
        close = difflib.get_close_matches(str(name), list(prompt_sets.PROMPT_SETS), n=1)
        hint = f"; did you mean data={close[0]}?" if close else ""
        raise ConfigError(f"data.name: unknown prompt set {name!r}; valid: {list(prompt_sets.PROMPT_SETS)}{hint}")
    ps = prompt_sets.PROMPT_SETS[name]
    if d.get("path") and not ps.needs_path:
        raise ConfigError(
            f"data.path={d['path']!r} is ignored by data={name} (its questions ship in the "
            f"{ps.package.split('==')[0]} package); for a questions file use data=spec_bench data.path={d['path']}"
        )
    if ps.needs_path and not (d.get("path") or os.environ.get(prompt_sets.DATA_ENV)):
        raise ConfigError(
            f"data.path: data={name} reads a JSONL file and none was given: add data.path=/path/to/question.jsonl "
            f"(or set ${prompt_sets.DATA_ENV}); offline sets that need no file: data=mt_bench, data=humaneval"
        )
    limit = d.get("limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ConfigError(f"data.limit must be an integer >= 1 or null, got {limit!r}")
    split = data_split(d)
    try:
        path = prompt_sets.prompt_set_path(name, d.get("path"))
        questions = prompt_sets.load_prompt_set(
            name,
            d.get("path"),
            categories=d.get("categories"),
            per_category=d.get("per_category"),
            limit=limit,
            max_turns=d.get("max_turns"),
            split=split,
        )
    except FileNotFoundError as e:
        raise ConfigError(f"data.path: {e}" if ps.needs_path else f"data={name}: {e}") from e
    except ValueError as e:
        raise ConfigError(f"data: {e}") from e
    if not questions:
        raise ConfigError(f"data: no questions selected from {str(path)!r} with {d}")
    return path, questions, name


def heldout_questions(cfg: DictConfig, evaluated: list[Any], name: str) -> list[Any]:
    """The questions of the job's prompt set's dev split (its ``data.categories`` filter
    only) that the job does not evaluate; those of the evaluated questions' categories when
    that leaves any; empty when the job evaluates the whole dev split (the prediction then
    calibrates on the training templates and its logged source says why). Dev only: a
    calibration prompt is never one of the test questions results are reported on."""
    d = plain(cfg.get("data")) or {}
    pool = prompt_sets.load_prompt_set(name, d.get("path"), categories=d.get("categories"), split="dev")
    ids = {q.question_id for q in evaluated}
    pool = [q for q in pool if q.question_id not in ids]
    cats = {q.category for q in evaluated}
    return [q for q in pool if q.category in cats] or pool


def check_spec_fields(spec: Any, where: str) -> None:
    """A ``path`` its source never reads, refused (see ``PATH_SOURCES``)."""
    if spec.path is not None and spec.source in SOURCES and spec.source not in PATH_SOURCES:
        raise ConfigError(
            f"{where}.path={spec.path!r} is ignored by source {spec.source!r}; a path is read by source "
            f"{' or '.join(map(repr, PATH_SOURCES))}: set {where}.source=hf (a save_pretrained directory) or "
            f"gguf (a .gguf file), or drop {where}.path"
        )


def check_vocab_sizes(target: Any, levels: list[Any]) -> None:
    """A model level with another vocabulary than the target's, refused from the configs'
    metadata before any weights load (the full tokenizer comparison runs at build time)."""
    want = None
    for lv in levels:
        spec = lv.spec() if hasattr(lv, "spec") else None
        if spec is None or spec.source == "truncated":
            continue
        want = peek_vocab_size(target) if want is None else want
        have = peek_vocab_size(spec)
        if want is not None and have is not None and have != want:
            raise ConfigError(
                f"levels.{lv.name}: its model has a vocabulary of {have} tokens but the target has {want}; "
                "every level must share the target's tokenizer"
            )


def level_depth(level: Any) -> int:
    """The deepest draft a level can make, as its drafter's ``max_depth``: its tree's depth,
    or its k for a chain (and for the levels that draft chains only)."""
    shape = getattr(level, "shape", None)
    return level.k if shape is None else shape.depth


def levels_depth(levels: list[Any]) -> int:
    """The deepest draft of the hierarchy (the decoder's ``draft_depth``); 0 without levels."""
    return max((level_depth(lv) for lv in levels), default=0)


def check_context(target: Any, levels: list[Any], max_new_tokens: int) -> None:
    """max_new_tokens plus the draft depth must leave the target's context room for a
    prompt: checked from the model's metadata before anything loads (the runner checks
    again with the loaded model)."""
    context = peek_context_length(target)
    depth = levels_depth(levels)
    if context is not None and context - max_new_tokens - depth < 1:
        raise ConfigError(
            f"max_new_tokens={max_new_tokens} plus draft depth {depth} leaves no room for a prompt in the "
            f"target's context of {context} tokens: lower max_new_tokens to at most {context - depth - 1}"
        )


def check_caches(target: Any, levels: list[Any]) -> None:
    """Every model that would be assembled and dequantized into a cache it cannot write,
    refused before the minutes that takes (``check_cache_dir``)."""
    specs = [("target", target)] + [(f"levels.{lv.name}.model", lv.spec()) for lv in levels if hasattr(lv, "spec")]
    for where, spec in specs:
        try:
            check_cache_dir(spec)
        except ValueError as e:
            raise ConfigError(f"{where}.{e}") from None


def job_settings(cfg: DictConfig) -> dict[str, Any]:
    """The job's own settings, checked in this order, as ``JobPlan`` fields: batch_size,
    max_new_tokens, seed, repeats; baseline, resume, warmup (true or false); the
    prediction's prompts, tokens and source; kernels; and ``tracking.system_metrics``
    (checked here, read by the tracker)."""
    settings: dict[str, Any] = {
        "batch_size": check_int(cfg, "batch_size", 1),
        "max_new_tokens": check_int(cfg, "max_new_tokens", 1),
        "seed": check_int(cfg, "seed", 0),
        "repeats": check_int(cfg, "repeats", 1) if "repeats" in cfg else 1,
    }
    for key in ("baseline", "resume", "warmup"):
        if not isinstance(cfg.get(key, True), bool):
            raise ConfigError(f"{key} must be true or false, got {cfg.get(key)!r}")
        settings[key] = cfg.get(key, True)
    prediction = cfg.get("prediction") or {}
    pred_prompts, pred_tokens = prediction.get("prompts", 0), prediction.get("tokens", 64)
    pred_source = prediction.get("source", "heldout")
    for key, v, low in (("prompts", pred_prompts, 0), ("tokens", pred_tokens, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ConfigError(f"prediction.{key} must be an integer >= {low}, got {v!r}")
    if pred_source not in PREDICTION_SOURCES:
        raise ConfigError(f"prediction.source must be one of {list(PREDICTION_SOURCES)}, got {pred_source!r}")
    settings |= {"prediction_prompts": pred_prompts, "prediction_tokens": pred_tokens, "prediction_source": pred_source}
    kernels = cfg.get("kernels", "fast")
    if kernels not in KERNEL_CHOICES:
        raise ConfigError(f"kernels must be one of {list(KERNEL_CHOICES)}, got {kernels!r}")
    settings["kernels"] = kernels
    tracking = cfg.get("tracking")
    if isinstance(tracking, DictConfig) and not isinstance(tracking.get("system_metrics", False), bool):
        raise ConfigError(f"tracking.system_metrics must be true or false, got {tracking.get('system_metrics')!r}")
    return settings


def checked_target(cfg: DictConfig) -> Any:
    """The target's ``ModelSpec``, built and validated (no path its source ignores)."""
    target = instantiate(cfg.get("target"), "target")
    check_spec_fields(target, "target")
    if getattr(target, "weights", None) == "requant_q4k":
        raise ConfigError(
            "target.weights='requant_q4k' re-encodes the weights, which changes the model: only a draft level "
            "may use it (levels.<name>.model.weights); the target takes dense, gguf_q4 or gguf_native"
        )
    try:
        target.validate()
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(f"target: {e}") from e
    return target


def checked_levels(cfg: DictConfig) -> list[Any]:
    """The level objects (``levels_from_cfg``), each validated on its own (its model's
    ModelSpec too), then the rules between them (``hierarchy.validate_levels``)."""
    levels = levels_from_cfg(cfg)
    for lv in levels:
        if hasattr(lv, "spec"):
            check_spec_fields(lv.spec(), f"levels.{lv.name}.model")
        try:
            lv.validate()
        except (TypeError, ValueError, FileNotFoundError) as e:  # "level 'ngram': ..." named once
            raise ConfigError(f"levels.{lv.name}: {str(e).removeprefix(f'level {lv.name!r}: ')}") from e
    try:
        validate_levels(levels)  # the rules between levels
    except (TypeError, ValueError, FileNotFoundError) as e:
        raise ConfigError(f"levels: {e}") from e
    return levels
