"""Draft hierarchies as plain config objects: a list of levels, lowest first, ending below
the target.

Each level is a small dataclass that can be validated without loading anything
(``validate``) and then built into a drafter (``build``) once the models exist. The Hydra
runner instantiates these from ``_target_`` dicts; a notebook can construct them directly:

    levels = [NgramLevel(k=4), ModelLevel(model=ModelSpec(source="truncated", layers=4), k=4)]
    drafter = build_hierarchy(levels, target, loader)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any
from collections.abc import Callable

from stagedspec.engine.drafter_protocol import Drafter
from stagedspec.engine.tree import AutoShape, TreeShape, TreeShapeT
from stagedspec.models.draft_files import load_draft, read_meta
from stagedspec.models.model_loading import LoadedModel, ModelSpec, check_compatible, truncated_copy
from stagedspec.prompts.prompt_sets import DATA_ENV, default_data_path
from .bypass import BypassDrafter, RoutePrices
from .feature import FeatureDrafter
from .model_drafter import ModelDrafter
from .ngram_drafters import KatzNgramDrafter, PromptLookupDrafter
from .ngram_lm import KatzBackoffLM, read_corpus
from .pruned_head import head_subset, pruned_copy
from .recycle import RecycleDrafter, parse_template
from .tree_growth import check_probability


def _is_int(x: Any) -> bool:
    """An integer, not a bool (``true`` in a config is no number)."""
    return isinstance(x, int) and not isinstance(x, bool)


def _check_k(name: str, k: Any) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"level {name!r}: draft length k must be an integer >= 1, got {k!r}")


def _check_count(name: str, key: str, value: Any, hi: int, note: str, hi_label: str | None = None) -> None:
    """Raise unless ``value`` is an integer (not a bool) in 0..hi; ``note`` says what it means."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= hi:
        raise ValueError(f"level {name!r}: {key} must be an integer in 0..{hi_label or hi} ({note}), got {value!r}")


def _check_probability(name: str, key: str, value: Any, note: str) -> None:
    check_probability(f"level {name!r}", key, value, note)


class _TreeLevel:
    """A level that can draft a tree: ``tree`` is the setting as configured (see
    ``TreeShape.parse``; None = a chain of k), ``shape`` the same setting parsed."""

    tree: Any

    @cached_property
    def shape(self) -> TreeShapeT:
        # parsed once per level: validation, the drafter and the run's labels all read it
        return TreeShape.parse(self.tree)


ASSETS = Path(__file__).resolve().parents[1] / "assets"
EMBEDDED_ASSETS = {
    "embedded-feature": "smollm2-135m.feature.safetensors",
    "embedded-layers": "smollm2-135m.layers.safetensors",
    "embedded": "smollm2-135m.ngram.safetensors",
}
"""Files shipped for the embedded target (stagedspec/assets/README.md says how each was made)."""


def _asset_path(value: str, what: str, valid: tuple[str, ...]) -> Path:
    if value in EMBEDDED_ASSETS and value in valid:
        return ASSETS / EMBEDDED_ASSETS[value]
    p = Path(value).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"{what} {value!r} does not exist (give a file, or one of {list(valid)})")
    return p.resolve()


@lru_cache(maxsize=4)
def corpus_lm(path: Path, mtime: float, vocab_size: int, order: int):
    """The n-gram counts of a token-id corpus file, counted once per process."""
    lm = KatzBackoffLM(vocab_size, order)
    lm.update(read_corpus(path, vocab_size))
    return lm


@dataclass
class NgramLevel(_TreeLevel):
    """Katz-backoff n-gram LM over token ids: the row's own text so far, on top of
    optional fixed counts (``corpus``: a token-id file of the target's own outputs, as
    ``python -m stagedspec.distill`` writes; ``corpus_file``: a text file)."""

    k: int = 4
    order: int = 3
    corpus: str | None = None
    """A token-id corpus file, "embedded" (the one shipped for the embedded target) or null."""
    corpus_file: str | None = None
    """Optional text file whose tokenization is added to the fixed counts."""
    tree: Any = None
    name: str = "ngram"
    min_top: float = 0.0
    """Draft from a distribution only when its likeliest token has at least this
    probability (``KatzNgramDrafter``); 0: always draft."""

    def validate(self) -> None:
        _check_k(self.name, self.k)
        _check_probability(self.name, "min_top", self.min_top, "0: always draft")
        if not isinstance(self.order, int) or isinstance(self.order, bool) or self.order < 1:
            raise ValueError(f"level {self.name!r}: order must be an integer >= 1, got {self.order!r}")
        if self.corpus_file is not None and not Path(self.corpus_file).is_file():
            raise FileNotFoundError(f"level {self.name!r}: corpus_file {self.corpus_file!r} does not exist")
        if self.corpus is not None:
            _asset_path(self.corpus, f"level {self.name!r}: corpus", ("embedded",))
        self.shape  # parsing is the check

    def build(self, lower: Drafter | None, target: LoadedModel, loader: Callable[[ModelSpec], LoadedModel]) -> Drafter:
        if lower is not None:
            raise ValueError(f"level {self.name!r}: an n-gram level must be the lowest level of a hierarchy")
        base = None
        if self.corpus is not None:
            path = _asset_path(self.corpus, f"level {self.name!r}: corpus", ("embedded",))
            try:
                base = corpus_lm(path, path.stat().st_mtime, target.vocab_size, self.order)
            except ValueError as e:
                raise ValueError(f"level {self.name!r}: {e}") from None
        if self.corpus_file is not None:
            if target.tokenizer is None:
                raise ValueError(f"level {self.name!r}: corpus_file needs a target with a tokenizer")
            text_lm = KatzBackoffLM(target.vocab_size, self.order, base=base)
            text_lm.update(target.tokenizer.encode(Path(self.corpus_file).read_text(), add_special_tokens=False))
            base = text_lm
        return KatzNgramDrafter(
            vocab_size=target.vocab_size,
            k=self.k,
            order=self.order,
            base=base,
            tree=self.shape,
            name=self.name,
            min_top=float(self.min_top),
        )


@dataclass
class PromptLookupLevel:
    """Copy what followed the longest recent match of the context's suffix (deterministic)."""

    k: int = 4
    max_ngram: int = 3
    min_ngram: int = 1
    name: str = "prompt_lookup"

    def validate(self) -> None:
        _check_k(self.name, self.k)
        if not (_is_int(self.min_ngram) and _is_int(self.max_ngram) and 1 <= self.min_ngram <= self.max_ngram):
            raise ValueError(
                f"level {self.name!r}: need 1 <= min_ngram <= max_ngram, got min_ngram={self.min_ngram!r}, "
                f"max_ngram={self.max_ngram!r}"
            )

    def build(self, lower: Drafter | None, target: LoadedModel, loader: Callable[[ModelSpec], LoadedModel]) -> Drafter:
        if lower is not None:
            raise ValueError(f"level {self.name!r}: prompt lookup must be the lowest level of a hierarchy")
        return PromptLookupDrafter(k=self.k, max_ngram=self.max_ngram, min_ngram=self.min_ngram, name=self.name)


@dataclass
class RecycleLevel:
    """Token Recycling drafting for the target alone (``drafters/recycle.py``): each round a tree
    grown by ``template`` (rank paths) from the target's own earlier top-k successors. It learns
    from the target's calls, so it is the only level of its hierarchy (under a router:
    ``levels.copy.recycle``)."""

    template: Any = 3
    """A number N (the first N of ``recycle.RANKED_PATHS``) or a list of rank paths like ['0', '1', '00']."""
    name: str = "recycle"

    @property
    def k(self) -> int:
        """The template's depth (its longest rank path)."""
        return max(len(p) for p in parse_template(self.template, f"level {self.name!r}: template"))

    def validate(self) -> None:
        parse_template(self.template, f"level {self.name!r}: template")

    def build(self, lower: Drafter | None, target: LoadedModel, loader: Callable[[ModelSpec], LoadedModel]) -> Drafter:
        if lower is not None:
            raise ValueError(f"level {self.name!r}: a recycle level drafts for the target alone (no level below it)")
        return RecycleDrafter(self.template, name=self.name)


@dataclass
class BypassLevel:
    """Long verbatim matches straight to the level above, the rest to the levels below
    (``drafters/bypass.py``): offers up to ``k`` tokens that followed the longest earlier
    occurrence of the context's suffix when that match is at least ``min_match`` tokens
    long, and passes the round down otherwise; with ``miss_below`` = m > 0, also after a
    copy that had fewer than m tokens accepted."""

    k: int = 24
    min_match: int = 8
    max_match: int = 32
    name: str = "copy"
    miss_below: int = 0
    route: str = "rule"
    """"rule": copy when the match is at least ``min_match`` tokens; "priced": each round to
    the proposal with the higher expected tokens per unit of target time (``RoutePrices``);
    "timed": the same in measured seconds, with a plain step (no draft) as a third proposal
    (``drafters/bypass.py``)."""
    prices: Any = None
    """With route=priced or timed: ``RoutePrices`` fields to change (row_cost, draft_cost,
    prior_weight, prior_accepted, copy_weight, explore, first_look, explore_cold, copy_decay, copy_own,
    recycle_accepted); None:
    its defaults."""
    cost_curve: bool = False
    """With route=priced: cost a verification of n rows at the target's calibrated T(n) / T(1)
    (``KernelChoice.step_curve``, handed over by the job) instead of ``1 + row_cost * n``."""
    lazy_lower: bool = True
    """The level below gets the prompt only when a round first goes below (a model level's
    prefill is not paid in a job whose rounds never go below); false: with the prompt."""
    recycle: Any = None
    """With route=timed: Token Recycling's tree template, a number of nodes N or rank paths like
    ['0', '1', '00'] (``drafters/recycle.py``), offered where a round would take a plain step and the tree prices
    above it; None: off."""
    routes = True  # a router: the level below it still drafts for the target (takes `tree`)

    def route_prices(self) -> RoutePrices | None:
        return RoutePrices(**dict(self.prices or {})) if self.route in ("priced", "timed") else None

    def validate(self) -> None:
        _check_k(self.name, self.k)
        if self.route not in ("rule", "priced", "timed"):
            raise ValueError(f"level {self.name!r}: route must be 'rule', 'priced' or 'timed', got {self.route!r}")
        known = {f.name: f.type for f in dataclasses.fields(RoutePrices)}
        for key, value in dict(self.prices or {}).items():
            if key not in known:
                raise ValueError(f"level {self.name!r}: unknown prices.{key}; valid: {sorted(known)}")
            if known[key] in (bool, "bool"):
                if not isinstance(value, bool):
                    raise ValueError(f"level {self.name!r}: prices.{key} must be true or false, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise ValueError(f"level {self.name!r}: prices.{key} must be a finite number >= 0, got {value!r}")
            elif key == "copy_decay" and not 0 < value <= 1:
                raise ValueError(
                    f"level {self.name!r}: prices.copy_decay must be in (0, 1] (1: no decay), got {value!r}"
                )
        if not (_is_int(self.min_match) and _is_int(self.max_match) and 1 <= self.min_match <= self.max_match):
            raise ValueError(
                f"level {self.name!r}: need 1 <= min_match <= max_match, got min_match="
                f"{self.min_match!r}, max_match={self.max_match!r}"
            )
        _check_count(self.name, "miss_below", self.miss_below, self.k, "0: off", hi_label=f"k={self.k}")
        if not isinstance(self.cost_curve, bool):
            raise ValueError(f"level {self.name!r}: cost_curve must be true or false, got {self.cost_curve!r}")
        if not isinstance(self.lazy_lower, bool):
            raise ValueError(f"level {self.name!r}: lazy_lower must be true or false, got {self.lazy_lower!r}")
        if self.recycle is not None:
            if self.route != "timed":
                raise ValueError(
                    f"level {self.name!r}: recycle trees are priced against a plain step, so they need "
                    f"route=timed, got route={self.route!r} (or recycle=null)"
                )
            parse_template(self.recycle, f"level {self.name!r}: recycle")

    def build(self, lower: Drafter | None, target: LoadedModel, loader: Callable[[ModelSpec], LoadedModel]) -> Drafter:
        return BypassDrafter(
            lower,
            k=self.k,
            min_match=self.min_match,
            max_match=self.max_match,
            name=self.name,
            miss_below=self.miss_below,
            prices=self.route_prices(),
            cost_curve=self.cost_curve,
            timed=self.route == "timed",
            lazy_lower=self.lazy_lower,
            recycle=RecycleDrafter(self.recycle) if self.recycle is not None else None,
        )


@dataclass
class ModelLevel(_TreeLevel):
    """A small causal LM sharing the target's tokenizer; with a lower level below it, it
    drafts by speculative decoding of that level (Staged SD's "draft of the draft")."""

    model: Any = field(default_factory=lambda: ModelSpec(source="truncated", layers=4))
    k: int = 4
    tree: Any = None
    name: str = "small"
    head: Any = None
    """An int N: an LM head of the N token ids most frequent in Python code (FR-Spec,
    ``drafters/pruned_head.py``); None: the model's full head."""
    stop_below: float = 0.0
    """End the draft after a pick the model gives less than this probability (its
    softmax when greedy, q when sampling); k is then a cap. 0: always draft k."""
    int4_rows: int = 0
    """Forwards of at most this many rows multiply by 4-bit copies of the model's weights
    (``engine/kernels.py``, ``KernelChoice.int4_rows``; CPU only); 0: off."""
    stop_alternatives: int = 0
    """Beside the pick that stopped the draft (``stop_below``), also offer the model's
    next N best tokens there as leaves for the level above (no extra draft forward); 0: off.
    With ``stop_below=0`` no pick stops a draft, so none are offered."""

    def spec(self) -> ModelSpec:
        return self.model if isinstance(self.model, ModelSpec) else ModelSpec(**dict(self.model))

    def validate(self) -> None:
        _check_k(self.name, self.k)
        spec = self.spec()
        r = self.int4_rows
        _check_count(self.name, "int4_rows", r, 32, "forwards of up to that many rows take 4-bit weights; 0: off")
        if r and not str(spec.device).startswith("cpu"):
            raise ValueError(
                f"level {self.name!r}: int4_rows={r} runs a CPU kernel only; the model is on "
                f"{spec.device!r}: set int4_rows=0 there"
            )
        if r and spec.weights == "requant_q4k":
            raise ValueError(
                f"level {self.name!r}: int4_rows={r} and model.weights='requant_q4k' are two 4-bit paths for the "
                f"same forwards; set int4_rows=0 (the re-encoded blocks run at every row count) or weights=dense"
            )
        spec.validate()
        self.shape  # parsing is the check
        if self.head is not None and (not isinstance(self.head, int) or isinstance(self.head, bool) or self.head < 1):
            raise ValueError(
                f"level {self.name!r}: head must be a number of tokens >= 1 (a pruned LM head) "
                f"or null (the full head), got {self.head!r}"
            )
        _check_probability(self.name, "stop_below", self.stop_below, "0: never stop early")
        _check_count(
            self.name,
            "stop_alternatives",
            self.stop_alternatives,
            8,
            "leaves beside the pick that stopped the draft; 0: none",
        )

    def build(self, lower: Drafter | None, target: LoadedModel, loader: Callable[[ModelSpec], LoadedModel]) -> Drafter:
        spec = self.spec()
        if spec.source == "truncated":
            small = truncated_copy(target, spec.layers)
        else:
            small = loader(spec)
        check_compatible(target, small, self.name)
        model = small.model
        if self.head is not None:
            model = pruned_copy(model, head_subset(small, self.head))
        return ModelDrafter(
            model,
            k=self.k,
            lower=lower,
            tree=self.shape,
            name=self.name,
            stop_below=float(self.stop_below),
            int4_rows=self.int4_rows,
            stop_alternatives=self.stop_alternatives,
        )


@dataclass
class TrainedLevel(_TreeLevel):
    """A draft trained for the target by ``python -m stagedspec.distill`` (``models/draft_files.py``):
    an EAGLE-style feature draft, which reads the target's hidden states and so drafts only
    for the target itself, or a layer draft, a small causal LM that can also draft through
    a lower level."""

    weights: str = "embedded-feature"
    """A weights file, or "embedded-feature" / "embedded-layers" (shipped for the embedded target)."""
    k: int = 4
    tree: Any = None
    name: str = "draft"

    @property
    def path(self) -> Path:
        return _asset_path(self.weights, f"level {self.name!r}: weights", ("embedded-feature", "embedded-layers"))

    @cached_property
    def meta(self):
        return read_meta(self.path)

    @property
    def reads_features(self) -> bool:
        return self.meta.design == "feature"

    def validate(self) -> None:
        _check_k(self.name, self.k)
        self.meta  # the file exists and is a trained draft: checked without loading tensors
        self.shape

    def build(self, lower: Drafter | None, target: LoadedModel, loader: Callable[[ModelSpec], LoadedModel]) -> Drafter:
        draft = load_draft(self.path, target.model, target.name)  # refuses a draft of another target
        if draft.design == "feature":
            if lower is not None:
                raise ValueError(f"level {self.name!r}: a feature draft cannot draft through a lower level")
            return FeatureDrafter(draft, k=self.k, tree=self.shape, name=self.name)
        return ModelDrafter(draft, k=self.k, lower=lower, tree=self.shape, name=self.name)


LEVEL_TYPES = (NgramLevel, PromptLookupLevel, BypassLevel, ModelLevel, TrainedLevel, RecycleLevel)


def target_facing(levels: list[Any]) -> int:
    """Index of the level whose drafts reach the target: the highest one that is not a router
    (a bypass level above it only adds copies of its own and passes every other round down).
    -1 when there is none."""
    i = len(levels) - 1
    while i >= 0 and getattr(levels[i], "routes", False):
        i -= 1
    return i


def validate_levels(levels: list[Any]) -> None:
    names = [getattr(lv, "name", None) for lv in levels]
    if len(set(names)) != len(names):
        raise ValueError(f"level names must be unique, got {names}")
    for lv in levels:
        if not isinstance(lv, LEVEL_TYPES):
            raise TypeError(f"unknown level type {type(lv).__name__}; valid: {[t.__name__ for t in LEVEL_TYPES]}")
        lv.validate()
        if isinstance(lv, RecycleLevel) and len(levels) > 1:
            raise ValueError(
                f"level {lv.name!r}: a recycle level learns from the target's calls, so it drafts for the target "
                f"alone; drop the other levels ({[n for n in names if n != lv.name]}) or give the router its "
                "template (levels.copy.recycle)"
            )
    for lv in levels[:-1]:
        if getattr(lv, "reads_features", False):
            raise ValueError(
                f"level {lv.name!r} is a feature draft: it reads the target's hidden states, so it "
                "must be the level drafting for the target (the highest stage)"
            )
    for lower, lv in zip(levels, levels[1:]):
        if isinstance(lv, (NgramLevel, PromptLookupLevel)):
            raise ValueError(f"level {lv.name!r} ({type(lv).__name__}) can only be the lowest level")
        if getattr(lv, "reads_features", False):
            raise ValueError(
                f"level {lv.name!r} is a feature draft: it cannot draft through the level "
                f"{lower.name!r} below it (drop it: levels.{lower.name}=null)"
            )
        # a level drafting through a lower one offers a tree too: the lower stage draws its
        # rank-0 chain, the level adds its own ranked alternatives (drafters/model_drafter.py)
    top = target_facing(levels)
    for i, lv in enumerate(levels):
        shape = getattr(lv, "shape", None)
        if isinstance(shape, AutoShape) and shape.source == "data" and not default_data_path().is_file():
            raise FileNotFoundError(
                f"level {lv.name!r}: tree=auto with source=data calibrates on {default_data_path()}, which does "
                f"not exist; set ${DATA_ENV} to a Spec-Bench-style questions file or use source=training"
            )
        if isinstance(shape, AutoShape) and (i != top or top != len(levels) - 1):
            if i == top:
                raise ValueError(
                    f"level {lv.name!r}: tree=auto calibrates the level drafting for the target "
                    f"alone; with the bypass level {levels[-1].name!r} above it, use a fixed tree "
                    f"(tree=specinfer_221, ...) or drop it (levels.{levels[-1].name}=null)"
                )
            raise ValueError(
                f"level {lv.name!r}: tree=auto is measured against the target, so only the level "
                f"drafting for the target (the highest stage, here {levels[top].name!r}) can take it"
            )


def build_hierarchy(
    levels: list[Any], target: LoadedModel, loader: Callable[[ModelSpec], LoadedModel]
) -> Drafter | None:
    """Build levels lowest first; each drafts for the next; the last drafts for the target.

    An empty list means plain autoregressive decoding (returns None). A top level with
    ``tree=auto`` comes back with its ``AutoShape`` request as its tree: the job's assembly
    resolves it (``tuning.auto_tree.resolve_auto_tree``, keyed by ``hierarchy_key``)
    before anything decodes.
    """
    validate_levels(levels)
    drafter: Drafter | None = None
    for lv in levels:
        drafter = lv.build(drafter, target, loader)
    return drafter


def hierarchy_key(levels: list[Any]) -> list[str]:
    """What identifies a hierarchy for ``tree=auto``'s calibration cache: every level's
    settings, except the top level's k and tree (the calibration chooses those)."""

    def files(lv: Any) -> list[str]:  # weights and corpus files are named by path; their contents can change
        paths: list[Path] = []
        if isinstance(lv, TrainedLevel):
            paths.append(lv.path)
        if isinstance(lv, NgramLevel):
            if lv.corpus is not None:
                paths.append(_asset_path(lv.corpus, f"level {lv.name!r}: corpus", ("embedded",)))
            if lv.corpus_file is not None:
                paths.append(Path(lv.corpus_file))
        return [f"{p}:{st.st_size}:{st.st_mtime_ns}" for p in paths if p.is_file() for st in [p.stat()]]

    out = [repr(lv) for lv in levels[:-1]]
    if levels:
        top = levels[-1]
        out.append(repr(dataclasses.replace(top, k=1, tree=None)) if hasattr(top, "tree") else repr(top))
    return out + [f for lv in levels for f in files(lv)]
