"""Peers benchmark (issue 15): our decoders against Hugging Face's, same target, same prompts.

    python experiments/peers.py --data mt_bench --prompts 16 --max-new-tokens 128 --threads 2

On the embedded SmolLM2-135M, one dtype, one thread count, the same prompts:

- Hugging Face ``generate`` (greedy, or sampled at ``--temperature``): the reference, on its
  own model object, untouched by our kernels;
- HF assisted generation with our trained ``layers`` draft as a standalone causal LM
  (``--assistant-schedule``, HF's ``heuristic`` by default; the schedule, starting number
  of assistant tokens and confidence threshold used are read from the assistant's
  generation config and printed), HF prompt lookup (``prompt_lookup_num_tokens``) and HF
  early-exit assisted generation (``assistant_early_exit``);
- ours: plain decoding (``ar``), the cheapest chains of ``--lower-k`` tokens
  (``lookup>target``: prompt lookup; ``ngram>target``: the n-gram over the shipped answer
  counts), the feature draft as a chain of ``--k`` (``feature>target``)
  and as a ``--tree`` (``feature-tree>target``), and the staged ``ngram>layers>target``
  (the feature draft takes no lower level, so there is no ``ngram>feature``); ours also at
  every ``--batch-sizes`` (B prompts decoded together; tokens/s = new tokens / wall time).

A method whose draft file is missing, or that transformers refuses, is skipped with the
reason printed. Measurements are interleaved (each group of prompts runs every method, in
an order rotated per group and repeat) and repeated ``--repeats`` times; each one is
appended to ``<out>/measurements.jsonl`` as it ends, keyed by a hash of the settings that
affect the numbers, so a killed run resumes where it stopped (``--max-measurements``
stops early on purpose).

Table (per category at batch 1, overall at every batch size): tokens/s (all new tokens /
all seconds), ratio to HF ``generate``: the geometric mean over prompt groups of the
group's median tokens/s over repeats divided by HF's on the same prompts (a group is one
prompt at batch 1), with a bootstrap 95% interval; tokens per target call per sequence and
acceptance (ours); outputs that differ from HF greedy (T = 0); seconds per target call
beside the physical floor, weight bytes / measured memory bandwidth.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO))

from common import add_common_args, geomean_ci, hf_generate
from stagedspec.app.tracking import Tracker, context_tags
from stagedspec.drafters import BypassDrafter, KatzNgramDrafter, ModelDrafter, PromptLookupDrafter
from stagedspec.drafters.feature import FeatureDrafter
from stagedspec.drafters.hierarchy import corpus_lm
from stagedspec.drafters.pruned_head import head_subset, pruned_copy
from stagedspec.engine.decoding import SpeculativeDecoder
from stagedspec.engine.sampling import SamplingConfig
from stagedspec.engine.tree import TreeShape
from stagedspec.evaluation.machine_probes import memory_bandwidth, weight_bytes
from stagedspec.models.chat_text import encode_prompt, eos_token_ids
from stagedspec.models.draft_files import load_draft, standalone_causal_lm
from stagedspec.models.kernel_calibration import kernel_plan
from stagedspec.models.model_loading import ModelSpec, load_model
from stagedspec.prompts.prompt_sets import balanced, load_prompt_set

REFERENCE = "hf"
RunFn = Callable[[list[list[int]], int], dict]
"""A method: (prompts, max_new_tokens) -> {"outputs": [ids per prompt], and for ours
"target_calls", "target_forward_time", "rounds", "drafted", "accepted"}."""


# ---------------------------------------------------------------- the measurement loop

@dataclass(frozen=True)
class Cell:
    method: str
    batch: int
    group: int
    prompts: tuple[int, ...]
    repeat: int

    @property
    def key(self) -> tuple:
        return (self.method, self.batch, self.group, self.repeat)


def groups(n_prompts: int, batch: int) -> list[tuple[int, ...]]:
    """Consecutive prompt indices, ``batch`` at a time (the last group may be shorter)."""
    return [tuple(range(i, min(i + batch, n_prompts))) for i in range(0, n_prompts, batch)]


def schedule(batches: dict[str, list[int]], n_prompts: int, batch_sizes: list[int], repeats: int) -> list[Cell]:
    """Every measurement, in run order: repeat, batch size, prompt group, then the methods
    run at that batch size, rotated by one more place per group and per repeat."""
    cells = []
    for rep in range(repeats):
        for b in batch_sizes:
            names = [m for m, bs in batches.items() if b in bs]
            if not names:
                continue
            for g, idx in enumerate(groups(n_prompts, b)):
                r = (rep + g) % len(names)
                cells += [Cell(m, b, g, idx, rep) for m in names[r:] + names[:r]]
    return cells


def read_measurements(path: Path, config_hash: str) -> list[dict]:
    """This configuration's measurements so far; a torn last line (a kill mid-write) is ignored."""
    out = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("config") == config_hash:
            out.append(rec)
    return out


def drop_torn_tail(path: Path) -> None:
    """Cut a last line without its newline (a kill mid-write), so the next append starts
    a line of its own instead of gluing itself to the fragment."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def _key(rec: dict) -> tuple:
    return (rec["method"], rec["batch"], rec["group"], rec["repeat"])


def run_measurements(
    methods: dict[str, RunFn], batches: dict[str, list[int]], prompts: list[list[int]], max_new_tokens: int,
    batch_sizes: list[int], repeats: int, path: Path, config_hash: str, limit: int | None = None,
    warmup_tokens: int = 8, clock: Callable[[], float] = time.perf_counter, log: Callable[[str], None] = print,
) -> list[dict]:
    """Run every cell of ``schedule`` not yet in ``path`` (skipping done ones keeps the
    interleaving of a resumed run), appending one JSON line per measurement; stop after
    ``limit`` new ones. Each method is warmed up once (untimed) before its first new
    measurement. Returns this schedule's measurements, old and new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    drop_torn_tail(path)
    cells = schedule(batches, len(prompts), batch_sizes, repeats)
    wanted = {c.key for c in cells}
    # only this schedule's cells: fewer repeats or batch sizes than an earlier run leave the rest out
    records = [r for r in read_measurements(path, config_hash) if _key(r) in wanted]
    done = {_key(r) for r in records}
    todo = [c for c in cells if c.key not in done]
    if done:
        log(f"resuming: {len(done)} measurements done, {len(todo)} to go ({path})")
    warm: set[str] = set()
    new = 0
    with path.open("a", encoding="utf-8") as f:
        for c in todo:
            if limit is not None and new >= limit:
                log(f"stopping after {new} new measurements (limit); rerun to resume")
                break
            if c.method not in warm and warmup_tokens:
                methods[c.method]([prompts[c.prompts[0]]], warmup_tokens)
                warm.add(c.method)
            batch = [prompts[i] for i in c.prompts]
            t0 = clock()
            out = methods[c.method](batch, max_new_tokens)
            seconds = clock() - t0
            rec = {"config": config_hash, "method": c.method, "batch": c.batch, "group": c.group,
                   "prompts": list(c.prompts), "repeat": c.repeat,
                   "tokens": sum(len(o) for o in out["outputs"]), "seconds": seconds,
                   "outputs": [list(map(int, o)) for o in out["outputs"]],
                   **{k: out.get(k) for k in ("target_calls", "target_forward_time", "rounds", "drafted", "accepted")}}
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())
            records.append(rec)
            new += 1
    return records


# ------------------------------------------------------------------------ the table

def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def _sum(recs: list[dict], key: str) -> float | None:
    vals = [r.get(key) for r in recs]
    return None if any(v is None for v in vals) or not vals else float(sum(vals))


def summarize(records: list[dict], categories: list[str], greedy: bool, min_s_per_call: float | None = None,
              reference: str = REFERENCE) -> dict[str, list[dict]]:
    """Table rows: "overall" (every method x batch size) and one table per category
    (batch 1, where a group is one prompt of one category)."""
    by_row: dict[tuple[str, int], list[dict]] = {}
    for r in records:
        by_row.setdefault((r["method"], r["batch"]), []).append(r)
    ref = {(r["prompts"][0], r["repeat"]): r for r in records if r["method"] == reference and r["batch"] == 1}
    ref_out: dict[int, list[int]] = {}
    for (i, rep), r in sorted(ref.items()):
        ref_out.setdefault(i, r["outputs"][0])  # HF greedy's output: its first repeat's

    def ref_tps(idx: tuple[int, ...], rep: int) -> float | None:
        rs = [ref.get((i, rep)) for i in idx]
        if any(r is None for r in rs):
            return None
        return sum(r["tokens"] for r in rs) / sum(r["seconds"] for r in rs)

    def row(method: str, batch: int, recs: list[dict]) -> dict:
        tokens, seconds = sum(r["tokens"] for r in recs), sum(r["seconds"] for r in recs)
        per_group: dict[tuple[int, ...], list[tuple[float, float]]] = {}
        for r in recs:
            ref_r = ref_tps(tuple(r["prompts"]), r["repeat"])
            if ref_r is not None:
                per_group.setdefault(tuple(r["prompts"]), []).append((r["tokens"] / r["seconds"], ref_r))
        ratios = [_median([a for a, _ in v]) / _median([b for _, b in v]) for v in per_group.values()]
        g, lo, hi = geomean_ci(ratios) if ratios else (math.nan, math.nan, math.nan)
        rounds, calls = _sum(recs, "rounds"), _sum(recs, "target_calls")
        fwd, drafted, accepted = _sum(recs, "target_forward_time"), _sum(recs, "drafted"), _sum(recs, "accepted")
        differing = None
        if greedy:
            bad = set()
            for r in recs:
                for i, o in zip(r["prompts"], r["outputs"]):
                    if i in ref_out and o != ref_out[i]:
                        bad.add(i)
            differing = len(bad)
        s_call = fwd / calls if fwd is not None and calls else None
        return {
            "method": method, "batch": batch, "prompts": len({i for r in recs for i in r["prompts"]}),
            "measurements": len(recs), "tokens_per_s": tokens / seconds if seconds else math.nan,
            "speedup_vs_hf": g, "ci": [lo, hi], "groups": len(ratios),
            "tokens_per_call": tokens / rounds if rounds else None,
            "acceptance": accepted / drafted if drafted else None,
            "differing_outputs": differing, "s_per_target_call": s_call, "min_s_per_target_call":
                min_s_per_call if s_call is not None else None,
        }

    order = list(dict.fromkeys(r["method"] for r in records))
    keys = sorted(by_row, key=lambda k: (k[1], order.index(k[0])))
    tables = {"overall": [row(m, b, by_row[(m, b)]) for m, b in keys]}
    for cat in dict.fromkeys(categories):
        rows = []
        for m, b in keys:
            recs = [r for r in by_row[(m, b)] if b == 1 and categories[r["prompts"][0]] == cat]
            if recs:
                rows.append(row(m, b, recs))
        tables[cat] = rows
    return tables


def _fmt(v, spec: str = ".2f") -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def markdown(tables: dict[str, list[dict]], head: str = "") -> str:
    lines = [head] if head else []
    for name, rows in tables.items():
        lines += ["", f"### {name}" + (" (batch 1)" if name != "overall" else ""), "",
                  "| method | batch | tokens/s | vs HF generate (95% CI) | tokens/call | acceptance | differing outputs "
                  "| s/target call | floor s/call |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            ci = f"{_fmt(r['speedup_vs_hf'])} [{_fmt(r['ci'][0])}, {_fmt(r['ci'][1])}]" \
                if not math.isnan(r["speedup_vs_hf"]) else ""
            diff = "" if r["differing_outputs"] is None else f"{r['differing_outputs']}/{r['prompts']}"
            lines.append(f"| {r['method']} | {r['batch']} | {_fmt(r['tokens_per_s'], '.1f')} | {ci} | "
                         f"{_fmt(r['tokens_per_call'])} | {_fmt(r['acceptance'])} | {diff} | "
                         f"{_fmt(r['s_per_target_call'], '.4f')} | {_fmt(r['min_s_per_target_call'], '.4f')} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------- set-up and methods

HASHED = ("data", "data_path", "prompts", "max_new_tokens", "threads", "device", "dtype", "temperature", "k", "tree",
          "lower_k", "kernels", "assistant_schedule", "prompt_lookup", "early_exit", "target", "draft", "ours",
          "assistant_tokens", "first_prompt")
"""The arguments that change the numbers: the measurements' key (with the draft files)."""


def config_hash(args, files: dict[str, Path], methods: list[str] | None = None) -> str:
    """The settings that change the numbers (not --repeats or --batch-sizes: more of
    either resumes the same measurements), draft files by size and mtime, and the list of
    methods: a run with a method added re-times every method, HF's included, so each ratio
    comes from one interleaved run."""
    import torch
    import transformers

    d = {k: getattr(args, k, None) for k in HASHED}
    d["files"] = {k: [str(p), p.stat().st_size, p.stat().st_mtime_ns] if p.is_file() else None
                  for k, p in files.items()}
    d["versions"] = [torch.__version__, transformers.__version__]
    d["methods"] = sorted(methods or [])
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def pick_prompts(questions: list, n: int) -> list:
    """``n`` questions balanced across categories, round-robin so a few span several."""
    cats = list(dict.fromkeys(q.category for q in questions))
    qs = balanced(questions, -(-n // len(cats))) if cats else []
    seen: dict[str, int] = {}
    rank = []
    for q in qs:
        rank.append((seen.get(q.category, 0), cats.index(q.category)))
        seen[q.category] = seen.get(q.category, 0) + 1
    return [q for _, q in sorted(zip(rank, qs), key=lambda x: x[0])][:n]


def ours_fn(target, make, sampling, eos, plan) -> RunFn:
    def run(prompts, n):
        res = SpeculativeDecoder(target.model, make(), sampling, eos, plan=plan).generate(prompts, n)
        s = res.summary()
        top = res.sequences[0].draft_level
        return {"outputs": [q.output_ids for q in res.sequences], "target_calls": res.target_calls,
                "target_forward_time": res.target_forward_time, "rounds": int(s["rounds"]),
                "drafted": s.get(f"drafted/{top}", 0.0) if top else None,
                "accepted": s.get(f"accepted/{top}", 0.0) if top else None}
    return run


def hf_fn(model, eos, temperature, **kw) -> RunFn:
    def run(prompts, n):
        return {"outputs": [hf_generate(model, p, n, eos=eos, temperature=temperature, **kw) for p in prompts]}
    return run


def our_methods(target, files: dict[str, Path], k: int, tree: str | None, lower_k: int) -> tuple[dict, dict]:
    """name -> factory of a fresh drafter (None: plain decoding), and name -> why skipped."""
    V = target.vocab_size
    made, skipped = {"ar": lambda: None}, {}
    # the cheapest chains: nothing but the target scores lower_k + 1 positions (T(3) ~ 1.1 T(1) here)
    made["lookup>target"] = lambda: PromptLookupDrafter(k=lower_k, name="lookup")
    if files["feature"].is_file():
        feature = load_draft(files["feature"], target.model, target.name)
        made["feature>target"] = lambda: FeatureDrafter(feature, k=k, name="feature")
        if tree:
            shape = TreeShape.parse(tree)
            made["feature-tree>target"] = lambda: FeatureDrafter(feature, tree=shape, name="feature")
    else:
        skipped["feature>target"] = skipped["feature-tree>target"] = f"no feature draft at {files['feature']}"
    if not files["layers"].is_file():
        skipped["ngram>layers>target"] = f"no layers draft at {files['layers']}"
    elif not files["ngram"].is_file():
        skipped["ngram>layers>target"] = f"no n-gram corpus at {files['ngram']}"
    else:
        layers = load_draft(files["layers"], target.model, target.name)
        base = corpus_lm(files["ngram"], files["ngram"].stat().st_mtime, V, 3)
        made["ngram>target"] = lambda: KatzNgramDrafter(V, k=lower_k, base=base, name="ngram")
        made["ngram>layers>target"] = lambda: ModelDrafter(
            layers, k=k, lower=KatzNgramDrafter(V, k=lower_k, base=base), name="layers")
    skipped["ngram>feature>target"] = "FeatureDrafter takes no lower= level (it drafts only from the target's features)"
    return made, skipped


LEVEL_KINDS = ("lookup", "ngram", "small", "fr", "copy")


def parse_ours(spec: str) -> dict[str, list[tuple[str, list[int]]]]:
    """``--ours`` for a packaged pair: comma-separated hierarchies, each its levels lowest
    first joined by '>', each level ``kind:k[:min_match]``: ``lookup:k`` prompt lookup,
    ``ngram:k`` the Katz n-gram over the context, ``small:k`` the packaged draft model,
    ``fr:k`` the same with a 32,768-token frequency-pruned head (``drafters/pruned_head.py``),
    ``copy:k:min_match`` the bypass level; ``ar`` is plain decoding. Name -> levels."""
    out = {}
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        if item == "ar":
            out["ar"] = []
            continue
        levels = []
        for part in item.split(">"):
            kind, *nums = part.split(":")
            if kind not in LEVEL_KINDS or not nums or not all(n.isdigit() and int(n) > 0 for n in nums) \
                    or len(nums) > (2 if kind == "copy" else 1):
                raise SystemExit(f"--ours: bad level {part!r} in {item!r}; valid: ar, lookup:K, ngram:K, small:K, fr:K, "
                                 f"copy:K[:MIN_MATCH], joined by '>' lowest first (e.g. ngram:4>small:8>copy:24:8)")
            levels.append((kind, [int(n) for n in nums]))
        out[item] = levels
    return out


def pair_methods(target, small, spec: str) -> dict:
    """name -> factory of a fresh drafter for a packaged target and draft model (``parse_ours``)."""
    V = target.vocab_size
    fr_model = None
    if any(kind == "fr" for levels in parse_ours(spec).values() for kind, _ in levels):
        fr_model = pruned_copy(small.model, head_subset(small, 32768))

    def factory(levels):
        def make():
            d = None
            for kind, nums in levels:
                if kind == "lookup":
                    d = PromptLookupDrafter(k=nums[0], name="lookup")
                elif kind == "ngram":
                    d = KatzNgramDrafter(V, k=nums[0], name="ngram")
                elif kind in ("small", "fr"):
                    d = ModelDrafter(small.model if kind == "small" else fr_model, k=nums[0], lower=d, name="small")
                else:
                    d = BypassDrafter(d, k=nums[0], min_match=nums[1] if len(nums) > 1 else 1, name="copy")
            return d
        return make

    return {name: factory(levels) for name, levels in parse_ours(spec).items()}


def pair_hf_methods(args, hf_model, hf_draft, eos) -> tuple[dict, dict, dict]:
    """HF generate, assisted generation with the packaged draft (HF's schedule and a
    constant one of ``--assistant-tokens``) and prompt lookup."""
    import copy

    T = args.temperature
    made = {REFERENCE: hf_fn(hf_model, eos, T)}
    skipped, info = {}, {}
    gc = hf_draft.generation_config
    gc.num_assistant_tokens_schedule = args.assistant_schedule
    info["assistant"] = gc
    candidates = {"hf_assisted": hf_fn(hf_model, eos, T, assistant_model=hf_draft)}
    if args.assistant_tokens:
        const = copy.copy(hf_draft)  # the same weights, its own generation config
        const.generation_config = copy.deepcopy(gc)
        const.generation_config.num_assistant_tokens_schedule = "constant"
        const.generation_config.num_assistant_tokens = args.assistant_tokens
        const.generation_config.assistant_confidence_threshold = 0.0
        candidates[f"hf_assisted_const{args.assistant_tokens}"] = hf_fn(hf_model, eos, T, assistant_model=const)
    candidates["hf_prompt_lookup"] = hf_fn(hf_model, eos, T, prompt_lookup_num_tokens=args.prompt_lookup)
    for name, fn in candidates.items():
        try:
            fn([[1, 2, 3, 4]], 4)
            made[name] = fn
        except Exception as e:
            skipped[name] = f"transformers refused: {type(e).__name__}: {e}"
    return made, skipped, info


def hf_methods(args, hf_model, target_name: str, files: dict[str, Path], eos) -> tuple[dict, dict, dict]:
    """name -> RunFn of the HF methods that work here, name -> why skipped, and the
    assistant's settings as used."""
    T = args.temperature
    made = {REFERENCE: hf_fn(hf_model, eos, T)}
    skipped, info = {}, {}
    candidates = {}
    if not files["layers"].is_file():
        skipped["hf_assisted_layers"] = f"no layers draft at {files['layers']}"
    else:
        # the draft around the untouched HF model, so HF's path never runs our kernels
        assistant = standalone_causal_lm(load_draft(files["layers"], hf_model, target_name), hf_model)
        gc = assistant.generation_config
        gc.num_assistant_tokens_schedule = args.assistant_schedule
        candidates["hf_assisted_layers"] = hf_fn(hf_model, eos, T, assistant_model=assistant)
        info["assistant"] = gc
    candidates["hf_prompt_lookup"] = hf_fn(hf_model, eos, T, prompt_lookup_num_tokens=args.prompt_lookup)
    candidates["hf_early_exit"] = hf_fn(hf_model, eos, T, assistant_early_exit=args.early_exit)
    for name, fn in candidates.items():
        try:
            fn([[1, 2, 3, 4]], 4)  # transformers refuses at the first call, if at all
            made[name] = fn
        except Exception as e:
            skipped[name] = f"transformers refused: {type(e).__name__}: {e}"
    return made, skipped, info


def assistant_settings(gc) -> dict:
    """Schedule, number of assistant tokens and confidence threshold as HF uses them:
    the assistant's generation config, unset fields from HF's global defaults."""
    defaults = gc._get_default_generation_params() if hasattr(gc, "_get_default_generation_params") else {}
    out = {}
    for k in ("num_assistant_tokens_schedule", "num_assistant_tokens", "assistant_confidence_threshold"):
        v = getattr(gc, k, None)
        out[k] = v if v is not None else defaults.get(k)
    return out


def default_tracking_uri() -> str:
    """conf/tracking/sqlite.yaml's: ``sqlite:///<launch directory>/mlflow.db``."""
    return f"sqlite:///{Path.cwd().resolve()}/mlflow.db"


def track(uri: str, data: str, temperature: float, chash: str, tables: dict, md: str, out: Path, args) -> None:
    tracker = Tracker(uri, experiment_name="peers")
    parent = tracker.parent_run(f"peers-{chash}", f"peers {data} T={temperature:g}", context_tags())
    # the parent is found again by the hash: its params are the hashed settings only (MLflow
    # refuses a changed param), the rest (--repeats, --batch-sizes, ...) are tags
    params = {k: getattr(args, k) for k in HASHED}
    rest = {f"peers.{k}": v for k, v in vars(args).items() if k not in HASHED and k != "tracking_uri"}
    for r in tables["overall"]:
        child = tracker.start_child(parent, f"{chash}-{r['method']}-b{r['batch']}", f"{r['method']} b{r['batch']}",
                                    {"stagedspec.peers_method": r["method"]}, redo_finished=True)
        metrics = {"tokens_per_s": r["tokens_per_s"], "speedup_vs_hf": r["speedup_vs_hf"],
                   "speedup_ci_low": r["ci"][0], "speedup_ci_high": r["ci"][1]}
        for k in ("tokens_per_call", "acceptance", "differing_outputs", "s_per_target_call",
                  "min_s_per_target_call"):
            if r[k] is not None:
                metrics[k] = float(r[k])
        tracker.log(child, params={**params, "method": r["method"], "batch": r["batch"]}, metrics=metrics, tags=rest)
        tracker.end(child)
    tracker.log(parent, params={**params, "config_hash": chash}, tags=rest)
    tracker.describe(parent, md)
    for f in ("table.md", "results.json", "peers.png"):
        if (out / f).is_file():
            tracker.log_artifact(parent, out / f)
    tracker.end(parent)
    print(f"MLflow: experiment 'peers' in {uri}, parent run {parent}")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap)
    ap.set_defaults(prompts=8)
    ap.add_argument("--data", default="mt_bench", choices=["mt_bench", "humaneval", "spec_bench"])
    ap.add_argument("--data-path", default=None, help="the JSONL file (spec_bench only)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-sizes", default="1,2,4,8", help="our methods' batch sizes (HF's: 1)")
    ap.add_argument("--temperature", type=float, default=0.0, help="> 0: every method samples")
    ap.add_argument("--k", type=int, default=4, help="draft length of the chains")
    ap.add_argument("--lower-k", type=int, default=2, help="draft length of the lookup and n-gram chains and of the staged method's n-gram level")
    ap.add_argument("--tree", default='{"widths": [2, 2, 1, 1]}', help="the feature tree; '' for none")
    ap.add_argument("--drafts", default=None, help="folder with feature/layers/ngram .safetensors "
                    "(default: the files shipped for the embedded target)")
    ap.add_argument("--kernels", default="fast", choices=["fast", "hf"], help="our methods' kernel plan")
    ap.add_argument("--assistant-schedule", default="heuristic",
                    choices=["heuristic", "heuristic_transient", "constant"])
    ap.add_argument("--prompt-lookup", type=int, default=10, help="HF prompt_lookup_num_tokens")
    ap.add_argument("--early-exit", type=int, default=4, help="HF assistant_early_exit (layers)")
    ap.add_argument("--out", default=None, help="folder (default outputs/peers/<data>)")
    ap.add_argument("--tracking-uri", default=None,
                    help="MLflow URI (default sqlite:///<cwd>/mlflow.db as conf/tracking/sqlite.yaml; 'none': off)")
    ap.add_argument("--max-measurements", type=int, default=None, help="stop after this many new measurements")
    ap.add_argument("--no-figure", action="store_true")
    ap.add_argument("--target", default="smollm2-135m", help="packaged target (stagedspec/packaged.py)")
    ap.add_argument("--draft", default=None, help="packaged draft model for HF assisted generation and our "
                    "'small' level (e.g. qwen2.5-coder-0.5b); with it, --ours names our methods")
    ap.add_argument("--ours", default="ar,copy:10:1,small:8,ngram:4>small:8>copy:24:8",
                    help="with --draft: our hierarchies (see parse_ours)")
    ap.add_argument("--assistant-tokens", type=int, default=8, help="with --draft: HF assisted generation "
                    "also with a constant schedule of this many tokens (0: not)")
    ap.add_argument("--hf-methods", default="all", help="with --draft: which HF methods to time (comma list of "
                    "hf, hf_assisted, hf_assisted_constN, hf_prompt_lookup; without 'hf' the ratios are to our 'ar')")
    ap.add_argument("--first-prompt", type=int, default=0, help="skip this many prompts of the set first")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch

    from bench_drafts import draft_files
    torch.set_num_threads(args.threads)
    out = Path(args.out) if args.out else REPO / "outputs" / "peers" / args.data
    files = draft_files(args.drafts)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    greedy = args.temperature == 0
    spec = ModelSpec(source="embedded", embedded=args.target, dtype=args.dtype, device=args.device)
    target = load_model(spec)
    hf_model = load_model(spec).model  # untouched: HF's own kernels
    qs = pick_prompts(load_prompt_set(args.data, path=args.data_path)[args.first_prompt:], args.prompts)
    prompts = [encode_prompt(target.tokenizer, q.turns[:1]) for q in qs]
    cats = [q.category for q in qs]
    eos = eos_token_ids(target)
    wbytes = weight_bytes(target.model)
    bandwidth = memory_bandwidth()
    floor = wbytes / bandwidth
    plan = kernel_plan(target, args.kernels)
    sampling = SamplingConfig(temperature=args.temperature, seed=0)

    if args.draft:
        dspec = ModelSpec(source="embedded", embedded=args.draft, dtype=args.dtype, device=args.device)
        small, hf_draft = load_model(dspec), load_model(dspec).model  # ours, and HF's untouched
        hf, skipped, info = pair_hf_methods(args, hf_model, hf_draft, eos)
        if args.hf_methods != "all":
            keep = {m.strip() for m in args.hf_methods.split(",")}
            hf = {m: fn for m, fn in hf.items() if m in keep}
        ours = pair_methods(target, small, args.ours)
        files = {}
    else:
        hf, skipped, info = hf_methods(args, hf_model, target.name, files, eos)
        ours, skipped_ours = our_methods(target, files, args.k, args.tree or None, args.lower_k)
        skipped.update(skipped_ours)
    methods = {**hf, **{m: ours_fn(target, make, sampling, eos, plan) for m, make in ours.items()}}
    batches = {m: ([1] if m in hf else batch_sizes) for m in methods}
    chash = config_hash(args, files, list(methods))
    assist = assistant_settings(info["assistant"]) if "assistant" in info else None
    print(f"{len(prompts)} {args.data} prompts x {args.max_new_tokens} tokens, T={args.temperature}, {args.dtype}, "
          f"{args.threads} threads, kernel plan {plan.describe()}, config {chash}")
    for m, why in skipped.items():
        print(f"skipped {m}: {why}")
    if assist:
        print(f"HF assistant (at start): {assist}")
    print(f"physical limit: {wbytes / 1e6:.1f} MB of weights / {bandwidth / 1e9:.2f} GB/s = "
          f"{floor * 1e3:.2f} ms per target call at least")

    records = run_measurements(methods, batches, prompts, args.max_new_tokens, batch_sizes, args.repeats,
                               out / "measurements.jsonl", chash, limit=args.max_measurements)
    if assist:
        after = assistant_settings(info["assistant"])
        print(f"HF assistant (after the runs; 'heuristic' carries its count across calls): {after}")
    tables = summarize(records, cats, greedy, floor, reference=REFERENCE if REFERENCE in methods else "ar")
    head = (f"## Peers: {args.data}, {len(prompts)} prompts x {args.max_new_tokens} new tokens, T={args.temperature:g}, "
            f"{args.dtype}, {args.threads} threads, {args.repeats} repeats\n\n"
            f"Physical limit: {wbytes / 1e6:.1f} MB weights / {bandwidth / 1e9:.2f} GB/s = "
            f"**{floor * 1e3:.2f} ms** per target call (column *floor s/call*).\n"
            + (f"\nHF assisted ({args.draft or 'layers draft'}): schedule {assist['num_assistant_tokens_schedule']}, "
               f"{assist['num_assistant_tokens']} assistant tokens to start, confidence threshold "
               f"{assist['assistant_confidence_threshold']}.\n" if assist else "")
            + "".join(f"\nSkipped {m}: {why}" for m, why in skipped.items()))
    md = markdown(tables, head)
    print(md)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(md)
    results = {"config": chash, "args": vars(args), "prompts": [{"question_id": q.question_id, "category": q.category}
                                                                 for q in qs],
               "physical": {"weight_bytes": wbytes, "bandwidth_bytes_per_s": bandwidth, "min_s_per_target_call": floor},
               "assistant": {"start": assist, "end": assistant_settings(info["assistant"]) if assist else None},
               "skipped": skipped, "plan": plan.describe(), "tables": tables}
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    if not args.no_figure:
        from analysis.peers_figure import draw

        print(f"figure: {draw(out / 'results.json')}")
    uri = args.tracking_uri or default_tracking_uri()
    if uri.lower() != "none":
        track(uri, args.data, args.temperature, chash, tables, md, out, args)


if __name__ == "__main__":
    main()
