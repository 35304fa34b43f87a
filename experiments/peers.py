"""Peers benchmark (issue 15): our decoders against Hugging Face's, same target, same prompts.

    python experiments/peers.py --data mt_bench --prompts 16 --max-new-tokens 128 --threads 2

Prompts come from ``--split`` (default ``test``: the questions results are reported on;
``dev``: the ones settings are tuned on; ``stagedspec/prompts/splits.py``), then
``--first-prompt`` / ``--stride`` / ``--prompts`` pick among them.

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
an order rotated per group and repeat) and repeated ``--repeats`` times, repeat r on a group whose
first prompt is i with seed ``--seed`` + r + 1009 i (each prompt its own stream; sampled repeats are
different samples, so a sampled method's median over repeats is over samples as well as timing
noise; greedy runs do not depend on it); each one is
appended to ``<out>/measurements.jsonl`` as it ends, keyed by a hash of the settings that
affect the numbers, so a killed run resumes where it stopped (``--max-measurements``
stops early on purpose).

Table (per category at batch 1, overall at every batch size): tokens/s (all new tokens /
all seconds), ratio to HF ``generate``: the geometric mean over prompt groups of the
group's median tokens/s over repeats divided by HF's on the same prompts (a group is one
prompt at batch 1), with a bootstrap 95% interval; tokens per target call per sequence and
acceptance (ours); outputs that differ from HF greedy (T = 0); seconds per target call
beside the physical floor: the weight bytes one step reads / the best read bandwidth probed
before and after the runs (``experiments/bench_floor.py`` probes beside every step).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from pathlib import Path

import torch
import transformers

from analysis.peers_figure import draw
from stagedspec.app.tracking import Tracker, context_tags
from stagedspec.engine.kernels import HF_KERNELS
from stagedspec.engine.sampling import COUPLINGS, SamplingConfig
from stagedspec.evaluation.bench_log import run_measurements
from stagedspec.evaluation.bench_machine import copy_bandwidth, read_bandwidth, step_bytes
from stagedspec.evaluation.bench_methods import (
    assistant_settings,
    constant_assistant_tokens,
    hf_methods,
    our_methods,
    ours_fn,
    pair_hf_methods,
    pair_methods,
    parse_ours,
    prompt_lookup_settings,
)
from stagedspec.evaluation.bench_setup import add_common_args, add_split_arg, draft_files, pick_prompts
from stagedspec.evaluation.bench_table import REFERENCE, markdown, summarize
from stagedspec.models.chat_text import encode_prompt, eos_token_ids
from stagedspec.tuning.kernel_calibration import kernel_plan
from stagedspec.engine.llama_cpp_kv import LlamaCppKV
from stagedspec.models.llama_cpp_model import gguf_path, load_llama_cpp
from stagedspec.models.model_loading import ModelSpec, load_model
from stagedspec.prompts.prompt_sets import load_prompt_set

REPO = Path(__file__).resolve().parent.parent


HASHED = (
    "data",
    "data_path",
    "prompts",
    "max_new_tokens",
    "threads",
    "device",
    "dtype",
    "temperature",
    "k",
    "tree",
    "lower_k",
    "kernels",
    "assistant_schedule",
    "prompt_lookup",
    "early_exit",
    "target",
    "draft",
    "ours",
    "assistant_tokens",
    "first_prompt",
    "stride",
    "seed",
    "weights",
)
"""The arguments that change the numbers: the measurements' key (with the draft files)."""


def config_hash(args, files: dict[str, Path], methods: list[str] | None = None) -> str:
    """The settings that change the numbers (not --repeats or --batch-sizes: more of
    either resumes the same measurements), draft files by size and mtime, and the list of
    methods: a run with a method added re-times every method, HF's included, so each ratio
    comes from one interleaved run."""
    d = {k: getattr(args, k, None) for k in HASHED}
    if getattr(args, "split", "all") != "all":  # all: the prompts of before splits, the same hash
        d["split"] = args.split
    if getattr(args, "coupling", "residual") != "residual":  # residual: the runs of before the option
        d["coupling"] = args.coupling
    if not getattr(args, "fresh_drafters", True):  # kept drafters (2026-12-07): not resumed from fresh ones
        d["kept_drafters"] = True
    d["files"] = {
        k: [str(p), p.stat().st_size, p.stat().st_mtime_ns] if p.is_file() else None for k, p in files.items()
    }
    d["versions"] = [torch.__version__, transformers.__version__]
    d["methods"] = sorted(methods or [])
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


WEIGHT_CHOICES = ("gguf_q4", "dense", "llama_cpp", "gguf_native")


def weight_plans(plan, weights: str) -> dict:
    """Name suffix -> kernel plan for each of ``--weights``: gguf_q4 the calibrated plan as it
    is, dense the same plan without its 4-bit rows (the same model object, every GEMM dense),
    llama_cpp the calibrated plan for the draft levels while the target runs on llama.cpp
    (``llama_cpp_suffix``), gguf_native a second target object on its GGUF's own blocks (its
    plan calibrated for it: ``main`` replaces this one); with one value the suffix is empty."""
    names = _weight_names(weights)
    bad = [w for w in names if w not in WEIGHT_CHOICES]
    if bad or not names:
        raise SystemExit(f"--weights: {weights!r}; valid: {', '.join(WEIGHT_CHOICES)}, or several comma-separated")
    dense = dataclasses.replace(plan, int4_rows=0, int4_exact=False, name=plan.name + "-dense")
    plans = {w: dense if w == "dense" else plan for w in names}
    return {_suffix(w, names): p for w, p in plans.items()}


def _weight_names(weights: str) -> list[str]:
    return [w.strip() for w in weights.split(",") if w.strip()]


def _suffix(weights: str, names: list[str]) -> str:
    return "" if len(names) == 1 or weights == "gguf_q4" else "@" + weights


def llama_cpp_suffix(weights: str) -> str | None:
    """The name suffix of our methods whose target runs on llama.cpp, None if none does."""
    names = _weight_names(weights)
    return _suffix("llama_cpp", names) if "llama_cpp" in names else None


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
        child = tracker.start_child(
            parent,
            f"{chash}-{r['method']}-b{r['batch']}",
            f"{r['method']} b{r['batch']}",
            {"stagedspec.peers_method": r["method"]},
            redo_finished=True,
        )
        metrics = {
            "tokens_per_s": r["tokens_per_s"],
            "speedup_vs_hf": r["speedup_vs_hf"],
            "speedup_ci_low": r["ci"][0],
            "speedup_ci_high": r["ci"][1],
        }
        for k in ("tokens_per_call", "acceptance", "differing_outputs", "s_per_target_call", "min_s_per_target_call"):
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
    add_split_arg(ap)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-sizes", default="1,2,4,8", help="our methods' batch sizes (HF's: 1)")
    ap.add_argument("--temperature", type=float, default=0.0, help="> 0: every method samples")
    ap.add_argument(
        "--seed",
        type=int,
        default=0,
        help="repeat r of prompt i samples with seed SEED + r + 1009 i, every method (HF: torch's global generator)",
    )
    ap.add_argument(
        "--coupling",
        default="residual",
        choices=COUPLINGS,
        help="our methods' sampling rule (gumbel: every one of them emits the same tokens for a cell's seed, "
        "so per-prompt ratios compare the same text; engine/coupling.py)",
    )
    ap.add_argument("--k", type=int, default=4, help="draft length of the chains")
    ap.add_argument(
        "--lower-k",
        type=int,
        default=2,
        help="draft length of the lookup and n-gram chains and of the staged method's n-gram level",
    )
    ap.add_argument("--tree", default='{"widths": [2, 2, 1, 1]}', help="the feature tree; '' for none")
    ap.add_argument(
        "--drafts",
        default=None,
        help="folder with feature/layers/ngram .safetensors (default: the files shipped for the embedded target)",
    )
    ap.add_argument("--kernels", default="fast", choices=["fast", "hf"], help="our methods' kernel plan")
    ap.add_argument(
        "--assistant-schedule", default="heuristic", choices=["heuristic", "heuristic_transient", "constant"]
    )
    ap.add_argument(
        "--prompt-lookup",
        default="10",
        help="HF prompt lookup settings, comma-separated N or N:M "
        "(prompt_lookup_num_tokens N, max_matching_ngram_size M; HF's default M is 2), e.g. 10,10:3,20:4",
    )
    ap.add_argument("--early-exit", type=int, default=4, help="HF assistant_early_exit (layers)")
    ap.add_argument("--out", default=None, help="folder (default outputs/peers/<data>)")
    ap.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow URI (default sqlite:///<cwd>/mlflow.db as conf/tracking/sqlite.yaml; 'none': off)",
    )
    ap.add_argument("--max-measurements", type=int, default=None, help="stop after this many new measurements")
    ap.add_argument("--no-figure", action="store_true")
    ap.add_argument("--target", default="smollm2-135m", help="packaged target (stagedspec/models/packaged.py)")
    ap.add_argument(
        "--weights",
        default="gguf_q4",
        help="our target's weights: gguf_q4 (the GGUF's own 4-bit "
        "blocks where the kernel plan finds them faster), gguf_native (the GGUF's own blocks x int8 activations "
        "at every row count), llama_cpp (the target on llama.cpp) or dense (--dtype throughout), or several "
        "(gguf_q4,dense: every method of ours twice, interleaved, '@dense' after the dense one's name); "
        "HF's are dense",
    )
    ap.add_argument(
        "--draft",
        default=None,
        help="packaged draft model for HF assisted generation and our "
        "'small' level (e.g. qwen2.5-coder-0.5b); with it, --ours names our methods",
    )
    ap.add_argument(
        "--ours",
        default="ar,copy:10:1,small:8,ngram:4>small:8>copy:24:8",
        help="with --draft: our hierarchies (see parse_ours)",
    )
    ap.add_argument(
        "--fresh-drafters",
        action="store_true",
        help="a fresh drafter of ours for every prompt (before 2026-12-07): each prompt routed from the "
        "priors; default: one drafter per method through the run, as the runner's jobs keep theirs (a "
        "router's statistics carry over from prompt to prompt; a resumed run starts them afresh)",
    )
    ap.add_argument(
        "--assistant-tokens",
        default="8",
        help="with --draft: HF assisted generation also with a constant schedule of these many tokens, "
        "comma-separated (e.g. 4,8,12; 0: not)",
    )
    ap.add_argument(
        "--hf-methods",
        default="all",
        help="with --draft: which HF methods to time (comma list of "
        "hf, hf_assisted, hf_assisted_constN, hf_prompt_lookup; without 'hf' the ratios are to our 'ar')",
    )
    ap.add_argument("--first-prompt", type=int, default=0, help="skip this many prompts of the set first")
    ap.add_argument("--stride", type=int, default=1, help="then take every N-th prompt (a spread sample of the set)")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    weight_plans(HF_KERNELS, args.weights)  # a bad --weights, --prompt-lookup or --assistant-tokens fails here,
    prompt_lookup_settings(args.prompt_lookup)  # before anything loads
    constant_assistant_tokens(args.assistant_tokens)
    torch.set_num_threads(args.threads)
    out = Path(args.out) if args.out else REPO / "outputs" / "peers" / args.data
    files = draft_files(args.drafts)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    greedy = args.temperature == 0
    spec = ModelSpec(
        source="embedded",
        embedded=args.target,
        dtype=args.dtype,
        device=args.device,
        weights=next((w for w in ("gguf_q4", "gguf_native") if w in _weight_names(args.weights)), "dense"),
    )
    target = load_model(spec)
    native = None
    if "gguf_native" in _weight_names(args.weights):
        # a second target object on the GGUF's own blocks, its own plan; its dense copy is untouched
        # (gguf_q4 rounds the 4-bit modules' copy to its kernel's weights): HF's methods run on it
        native = (
            target if spec.weights == "gguf_native" else load_model(dataclasses.replace(spec, weights="gguf_native"))
        )
    hf_model = (  # untouched: HF's own kernels
        native.model if native is not None else load_model(dataclasses.replace(spec, weights="dense")).model
    )
    if args.stride < 1:
        raise SystemExit(f"--stride must be >= 1, got {args.stride}")
    qs = pick_prompts(
        load_prompt_set(args.data, path=args.data_path, split=args.split)[args.first_prompt :: args.stride],
        args.prompts,
    )
    if not qs:
        raise SystemExit(f"no {args.data} prompts in --split {args.split} (a spec_bench file is all dev: --split dev)")
    prompts = [encode_prompt(target.tokenizer, q.turns[:1]) for q in qs]
    cats = [q.category for q in qs]
    eos = eos_token_ids(target)
    probes = {"read": [read_bandwidth()], "copy": [copy_bandwidth()]}  # again after the runs: it drifts
    plan = kernel_plan(target, args.kernels)
    wbytes = step_bytes(target.model, plan=plan)
    # a cell: bench_log.Cell.seed
    sampling = SamplingConfig(temperature=args.temperature, seed=args.seed, coupling=args.coupling)

    if args.draft:
        dspec = ModelSpec(source="embedded", embedded=args.draft, dtype=args.dtype, device=args.device)
        requant = any(kind == "n4" for levels in parse_ours(args.ours).values() for kind, _ in levels)
        small = load_model(dataclasses.replace(dspec, weights="requant_q4k") if requant else dspec)
        hf_draft = load_model(dspec).model  # HF's untouched
        hf, skipped, info = pair_hf_methods(args, hf_model, hf_draft, eos)
        if args.hf_methods != "all":
            keep = {m.strip() for m in args.hf_methods.split(",")}
            hf = {m: fn for m, fn in hf.items() if m in keep or any(m.startswith(k + "_") for k in keep)}
        ours = pair_methods(target, small, args.ours, curve=plan.step_curve)
        files = {}
    else:
        hf, skipped, info = hf_methods(args, hf_model, target.name, files, eos)
        ours, skipped_ours = our_methods(target, files, args.k, args.tree or None, args.lower_k)
        skipped.update(skipped_ours)
    on_llama = llama_cpp_suffix(args.weights)
    # per name suffix, who runs our methods' target: (model, plan, llama.cpp cache or None)
    backends = {suffix: (target, p, None) for suffix, p in weight_plans(plan, args.weights).items()}
    if on_llama is not None:  # our methods' target on llama.cpp, over the same GGUF file
        handle = load_llama_cpp(gguf_path(spec), threads=args.threads, vocab_size=target.vocab_size)
        backends[on_llama] = (target, backends[on_llama][1], LlamaCppKV(handle))
    if native is not None:  # the second target object, its own plan
        backends[_suffix("gguf_native", _weight_names(args.weights))] = (
            native,
            kernel_plan(native, args.kernels),
            None,
        )
    methods = {
        **hf,
        **{
            m + suffix: ours_fn(model, make, sampling, eos, p, kv=kv, keep=not args.fresh_drafters)
            for m, make in ours.items()
            for suffix, (model, p, kv) in backends.items()
        },
    }
    batches = {m: ([1] if m in hf else batch_sizes) for m in methods}
    chash = config_hash(args, files, list(methods))
    assist = assistant_settings(info["assistant"]) if "assistant" in info else None
    print(
        f"{len(prompts)} {args.data} prompts ({args.split} split) x {args.max_new_tokens} tokens, T={args.temperature}, {args.dtype}, "
        f"{args.threads} threads, kernel plan {plan.describe()}, config {chash}"
    )
    for m, why in skipped.items():
        print(f"skipped {m}: {why}")
    if assist:
        print(f"HF assistant (at start): {assist}")
    print(
        f"physical limit (before the runs): {wbytes / 1e6:.1f} MB of weights per step / "
        f"{probes['read'][0] / 1e9:.2f} GB/s read = {wbytes / probes['read'][0] * 1e3:.2f} ms per target call at least"
    )

    records = run_measurements(
        methods,
        batches,
        prompts,
        args.max_new_tokens,
        batch_sizes,
        args.repeats,
        out / "measurements.jsonl",
        chash,
        limit=args.max_measurements,
        seed=args.seed,
    )
    if assist:
        after = assistant_settings(info["assistant"])
        print(f"HF assistant (after the runs; 'heuristic' carries its count across calls): {after}")
    probes["read"].append(read_bandwidth())
    probes["copy"].append(copy_bandwidth())
    bandwidth = max(probes["read"])  # the strictest floor the run saw
    floor = wbytes / bandwidth
    ref = REFERENCE if REFERENCE in methods else "ar"
    # gumbel: only our methods share the seed's tokens (HF's generate samples its own way)
    same = args.coupling == "gumbel" and ref == "ar"
    tables = summarize(records, cats, greedy, floor, reference=ref, same_samples=same)
    head = (
        f"## Peers: {args.data}, {len(prompts)} {args.split}-split prompts x {args.max_new_tokens} new tokens, T={args.temperature:g}"
        f"{' (gumbel coupling: our methods emit the same tokens per seed)' if args.coupling == 'gumbel' and not greedy else ''}, "
        f"{args.dtype}, {args.threads} threads, {args.repeats} repeats\n\n"
        f"Physical limit: {wbytes / 1e6:.1f} MB of weights read per step / {bandwidth / 1e9:.2f} GB/s read "
        f"bandwidth = **{floor * 1e3:.2f} ms** per target call (column *floor s/call*). Probes before and after "
        f"the runs: read {', '.join(f'{b / 1e9:.1f}' for b in probes['read'])} GB/s, copy "
        f"{', '.join(f'{b / 1e9:.1f}' for b in probes['copy'])} GB/s (bytes copied / s; floor at the faster "
        f"copy: {wbytes / max(probes['copy']) * 1e3:.2f} ms). The bandwidth drifts: "
        f"experiments/bench_floor.py compares the plain step with probes taken beside each step.\n"
        + (
            f"\nHF assisted ({args.draft or 'layers draft'}): schedule {assist['num_assistant_tokens_schedule']}, "
            f"{assist['num_assistant_tokens']} assistant tokens to start, confidence threshold "
            f"{assist['assistant_confidence_threshold']}.\n"
            if assist
            else ""
        )
        + "".join(f"\nSkipped {m}: {why}" for m, why in skipped.items())
    )
    md = markdown(tables, head)
    print(md)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(md)
    results = {
        "config": chash,
        "args": vars(args),
        "prompts": [{"question_id": q.question_id, "category": q.category} for q in qs],
        "physical": {
            "step_bytes": wbytes,
            "bandwidth_bytes_per_s": bandwidth,
            "min_s_per_target_call": floor,
            "read_probes": probes["read"],
            "copy_probes": probes["copy"],
        },
        "assistant": {"start": assist, "end": assistant_settings(info["assistant"]) if assist else None},
        "skipped": skipped,
        "plan": plan.describe(),
        "tables": tables,
    }
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    if not args.no_figure:
        print(f"figure: {draw(out / 'results.json')}")
    uri = args.tracking_uri or default_tracking_uri()
    if uri.lower() != "none":
        track(uri, args.data, args.temperature, chash, tables, md, out, args)


if __name__ == "__main__":
    main()
