"""The README's measured figures, generated from the files under ``docs/`` they come from.

    python -m analysis.readme_results           # rewrite the generated blocks of README.md
    python -m analysis.readme_results --check   # exit 1, naming the block, if README.md differs

Each block sits between ``<!-- begin generated: NAME -->`` and ``<!-- end generated: NAME -->``
and is rendered by ``BLOCKS[NAME]`` from its sources (``SOURCES``); the test suite runs the
check, so a README figure that differs from its source fails CI. Outside these blocks the
README's results sections carry no figures (``figures_outside_blocks``).

One definition throughout: a method's tokens/s is all its new tokens over all its seconds on the
prompts of the run (a ratio of totals); for ours and llama.cpp's programs decode seconds (the
prefill left out: ``peers.py`` records ours, llama.cpp reports its own), for HF's ``generate``
timed whole, prefill included (a peers run from before ours recorded the prefill has only
whole-generate rates, and the block says so); a ratio between two methods is the ratio of those
rates; ms per target call is the target's forward seconds over target calls.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

SOURCES = {
    "peers": "docs/peers/v23-intel-humaneval-t0/results.json",
    "llama_cpp": "docs/peers/v23-intel-llama-cpp-humaneval-t0.json",
    "peers_mtbench": "docs/peers/v23-intel-mtbench-t0/results.json",
    "peers_t07": "docs/peers/v23-intel-humaneval-t07/results.json",
    "step_curve": "docs/bench/step-curve-2026-12-07-intel-v22.json",
    "main_command": "docs/main-command/2026-12-08-amd-v29",
    "paper": "docs/paper/2026-12-06",
}
"""Block sources, relative to the repository root. A new measurement is a new dated file; point
the entry at it and run the module to rewrite the README."""

STAGED = "ngram:1:30>n4:12:50:2>timed:24"
"""The staged default since the 0.5B's re-encoded blocks became its CPU default (``conf/drafter/qwen_coder_0p5b.yaml``)."""
BEFORE = "ngram:1:30>q4:12:50:2>timed:24"
"""The staged default before: the same router, the 0.5B on torch's 4-bit rows."""
LOOKUP = "copy:16:3"
SMALL = "n4:12:50:2"
SMALL_BEFORE = "q4:12:50:2"
ON_LLAMA = "@llama_cpp"
"""The suffix of our methods whose target ran on llama.cpp (``peers.py --weights gguf_q4,llama_cpp``)."""
NATIVE = "@gguf_native"
"""The suffix of our methods whose target ran on its GGUF's own blocks (``--weights ...,gguf_native``)."""


def _load(name: str, root: Path = ROOT):
    path = root / SOURCES[name]
    return json.loads(path.read_text(encoding="utf-8"))


def peers_overall(results: dict) -> dict[str, dict]:
    """``peers.py``'s overall table by method name."""
    return {row["method"]: row for row in results["tables"]["overall"]}


def rate(row: dict) -> float:
    """A peers row's tokens/s: its decode rate where the run recorded the prefill, else whole."""
    return row.get("decode_tokens_per_s") or row["tokens_per_s"]


def llama_rates(llama: dict) -> dict[str, float]:
    """tokens/s per llama.cpp mode as a ratio of totals over the run's prompts (plain decoding
    reports only a rate per prompt: its seconds are tokens / rate)."""
    tokens: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for row in llama["rows"]:
        mode = row["mode"]
        s = row["seconds"] if "seconds" in row else row["tokens"] / row["tokens_per_s"]
        tokens[mode] = tokens.get(mode, 0.0) + row["tokens"]
        seconds[mode] = seconds.get(mode, 0.0) + s
    return {mode: tokens[mode] / seconds[mode] for mode in tokens}


TORCH_LAYERS = "gguf_native_torch_layers"
"""The step curve's native plan with its decoder layers in torch (the layer kernels' A/B; v16 on: one-row
layers only in v16, every row count from v17)."""


VNNI = "gguf_native_vnni"
"""The step curve's native plan with its cols loop on VNNI where the machine's runs on AMX tiles (``--amx-ab``, v22 on)."""


def step_ms(curve: dict, weights: str, rows: int) -> float:
    """Median ms of one target forward of ``rows`` rows (``bench_step_curve.py``)."""
    return statistics.median(curve["ms"][weights][str(rows)])


def _variant(curve: dict, plan: str, label: str) -> str:
    """`` (label: T(1) / T(4) / T(16))`` of a variant plan of the step curve, or nothing where the curve lacks it."""
    if plan not in curve["ms"]:
        return ""
    return f" ({label}: " + " / ".join(f"{step_ms(curve, plan, n):.0f}" for n in (1, 4, 16)) + ")"


def _x(a: float, b: float) -> str:
    return f"{a / b:.2f}x"


def render_results(root: Path = ROOT) -> str:
    results, llama, curve = _load("peers", root), _load("llama_cpp", root), _load("step_curve", root)
    ours = peers_overall(results)
    cpp = llama_rates(llama)
    draft_mode = next(m for m in cpp if m.startswith("draft-simple"))
    cpp_best_mode = max(cpp, key=cpp.get)
    bw = results["physical"]["bandwidth_bytes_per_s"]
    backends = ("", NATIVE, ON_LLAMA)  # torch's 4-bit path, the GGUF-native kernel, llama.cpp

    def tps(m):
        return rate(ours[m])

    def call_ms(m):
        return 1000 * ours[m]["s_per_target_call"]

    def cells(m, fmt):
        return " / ".join(fmt(m + b) for b in backends)

    def row(label, m, bold=False):
        rates = cells(m, lambda x: f"{tps(x):.1f}")
        calls = cells(m, lambda x: f"{ours[x]['tokens_per_call']:.2f}")
        return (
            f"| {label} | {f'**{rates}**' if bold else rates} | {calls} | {cells(m, lambda x: f'{call_ms(x):.0f}')} |"
        )

    plain_cpp_ms = 1000 / cpp["plain"]
    lines = [
        "| method | tokens/s | tokens / target call | ms / target call |",
        "| --- | --- | --- | --- |",
        f"| llama.cpp plain decoding (`llama-bench` tg at the prompt's depth) | {cpp['plain']:.1f} | 1 | {plain_cpp_ms:.0f} |",
        f"| llama.cpp `ngram-simple` / `ngram-mod` (prompt lookup) | {cpp['ngram-simple']:.1f} / {cpp['ngram-mod']:.1f} | | |",
        f"| llama.cpp `{draft_mode}`, the 0.5B (n-max, p-min) | {cpp[draft_mode]:.1f} | | |",
        f"| HF `generate` / prompt lookup (10) / assisted by the 0.5B (its heuristic schedule), bf16 | "
        f"{tps('hf'):.1f} / {tps('hf_prompt_lookup'):.1f} / {tps('hf_assisted'):.1f} | | |",
        row("ours, plain decoding", "ar"),
        row(f"ours, prompt lookup → target (`{LOOKUP}`)", LOOKUP),
        row(f"ours, the 0.5B re-encoded → target (`{SMALL}`)", SMALL),
        row(f"ours, the 0.5B on torch's 4-bit rows → target (`{SMALL_BEFORE}`)", SMALL_BEFORE),
        row(f"**ours, staged default** (`{STAGED}`)", STAGED, bold=True),
        row(f"ours, staged, the 0.5B on torch's 4-bit rows (`{BEFORE}`)", BEFORE),
    ]
    t = {(w, n): step_ms(curve, w, n) for w in ("gguf_q4", "gguf_native", "llama_cpp") for n in (1, 4, 16)}
    native_mb = curve["bytes"]["gguf_native"] / 1e6
    staged = ", ".join(
        f"{name} {tps(STAGED + b):.1f} ({_x(tps(STAGED + b), max(tps(LOOKUP + b), tps(SMALL + b)))} its best two-level "
        f"ablation there, {_x(tps(STAGED + b), cpp[cpp_best_mode])} llama.cpp's best)"
        for name, b in zip(("4-bit", "native", "on llama.cpp"), backends)
    )
    differ = {b: [ours[m + b]["differing_outputs"] for m in ("ar", LOOKUP, SMALL, STAGED)] for b in backends}
    lines += [
        "",
        "- Each cell: the target on torch's 4-bit path (`target.weights=gguf_q4`) / on the GGUF-native "
        "kernel (`target.weights=gguf_native`, the default since) / on llama.cpp (`target.backend=llama_cpp`); draft levels on torch.",
        "- tokens/s: ours and llama.cpp's decode only (the prefill left out); HF's `generate` timed whole, prefill included.",
        f"- Our plain step: native {call_ms('ar' + NATIVE):.0f} ms, {_x(call_ms('ar' + NATIVE), plain_cpp_ms)} llama.cpp's "
        f"own {plain_cpp_ms:.0f} ms and {_x(call_ms('ar' + NATIVE), 1000 * curve['bytes']['gguf_native'] / bw)} the read "
        f"floor of its {native_mb:.0f} MB at {bw / 1e9:.1f} GB/s; on llama.cpp {call_ms('ar' + ON_LLAMA):.0f} ms; "
        f"4-bit {call_ms('ar'):.0f} ms.",
        f"- One forward ([step curve]({SOURCES['step_curve'].replace('.json', '.md')}), medians), T(1) / T(4) / T(16): "
        f"llama.cpp {t['llama_cpp', 1]:.0f} / {t['llama_cpp', 4]:.0f} / {t['llama_cpp', 16]:.0f} ms, native "
        f"{t['gguf_native', 1]:.0f} / {t['gguf_native', 4]:.0f} / {t['gguf_native', 16]:.0f}"
        + _variant(curve, TORCH_LAYERS, "its decoder layers in torch, `native_layers=False`")
        + _variant(curve, VNNI, "its cols loop on VNNI instead of AMX tiles")
        + f", 4-bit {t['gguf_q4', 1]:.0f} / {t['gguf_q4', 4]:.0f} / {t['gguf_q4', 16]:.0f}.",
        f"- The staged default: {staged}; llama.cpp's best is `{cpp_best_mode}` ({cpp[cpp_best_mode]:.1f}).",
        render_native_sets(root),
        f"- Outputs that differ from HF bf16 greedy (of {ours['ar']['prompts']}; plain, lookup, 0.5B, staged): "
        + "; ".join(f"{n} {', '.join(map(str, differ[b]))}" for n, b in zip(("4-bit", "native", "llama.cpp"), backends))
        + " (the last two: the file's own blocks, 8-bit activations).",
    ]
    return "\n".join(lines)


def seed_label(root: Path, name: str) -> str:
    """How the sampled run ``name`` seeded its cells, from its ``measurements.jsonl`` (each row's
    ``seed``): one seed per repeat shared by the prompts (runs before each prompt had its own), or
    ``seed + r + stride x i`` for repeat r of prompt i."""
    args = _load(name, root)["args"]
    first, n = args["seed"], args["repeats"]
    path = root / SOURCES[name].replace("results.json", "measurements.jsonl")
    cells = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    by = {(c["prompts"][0], c["repeat"]): c["seed"] for c in cells if "seed" in c}
    if len({seed for (_, r), seed in by.items() if r == 0}) > 1:
        second = min(p for p, r in by if p > 0 and r == 0)
        stride = (by[second, 0] - by[0, 0]) // second
        reps = "r = 0" if n == 1 else f"r = 0..{n - 1}"
        return (
            f"each prompt its own seeds, {first} + r + {stride} i for repeat {reps} of prompt i; "
            "all samples' tokens over all their seconds"
        )
    if n == 1:
        return f"seed {first}"
    return f"seeds {', '.join(str(first + r) for r in range(n))}, all samples' tokens over all their seconds"


def render_native_sets(root: Path = ROOT) -> str:
    """One line: the native target on MT-bench first turns at T = 0 and on HumanEval at T = 0.7
    (``SOURCES`` peers_mtbench, peers_t07: ``peers.py --weights gguf_native``, one backend)."""
    sets = {name: peers_overall(_load(name, root)) for name in ("peers_mtbench", "peers_t07")}
    seeds = seed_label(root, "peers_t07")

    def rates(m):
        return " / ".join(f"{rate(ours[m]):.1f}" for ours in sets.values())

    def best_two(ours):
        return _x(rate(ours[STAGED]), max(rate(ours[LOOKUP]), rate(ours[SMALL])))

    links = ", ".join(
        f"[{label}]({SOURCES[n].replace('results.json', 'table.md')})"
        for label, n in (("MT-bench", "peers_mtbench"), ("T = 0.7", "peers_t07"))
    )
    return (
        f"- The native target alone ({links}), decode tok/s on the first 6 MT-bench test first turns at T = 0 / the "
        f"same 6 HumanEval problems at T = 0.7 ({seeds}): plain {rates('ar')}, prompt lookup {rates(LOOKUP)}, the 0.5B "
        f"{rates(SMALL)}, the staged default {rates(STAGED)} ({' / '.join(best_two(o) for o in sets.values())} its best "
        f"two-level ablation), with the 0.5B on torch's 4-bit rows {rates(BEFORE)}."
    )


def _timing(name: str, root: Path) -> dict:
    """A sweep's ``timing.json`` (``analysis/timing.py``) in the source folder ``name``."""
    return json.loads((root / SOURCES[name] / "timing.json").read_text(encoding="utf-8"))


def _main_runs(root: Path) -> pd.DataFrame:
    return pd.read_csv(root / SOURCES["main_command"] / "runs.csv")


def render_main_command(root: Path = ROOT) -> str:
    runs = _main_runs(root)
    timing = _timing("main_command", root)
    src = SOURCES["main_command"]
    head = runs[runs["batch_size"] == 1]
    names = {
        "copy>target": "prompt lookup → target",
        "ngram>small>copy>target": "the staged default",
        "small>target": "the 0.5B → target",
    }

    def headline(temp):
        d = head[(head["temperature"] == temp) & (head["max_new_tokens"] == head["max_new_tokens"].max())]
        d = d[d["method"].isin(names)].sort_values("tokens_per_s", ascending=False)
        return "; ".join(
            f"{names[r.method]} {r.tokens_per_s:.1f} tok/s ({r.speedup:.2f}x its plain baseline)"
            for r in d.itertuples()
        )

    staged = runs[(runs["method"] == "ngram>small>copy>target") & (runs["temperature"] == 0)]
    batch_limit = staged["data.limit"].max()  # the batch axis runs on one problem more than the rest
    batch = staged[staged["data.limit"] == batch_limit].sort_values("batch_size")
    k_axis = staged[
        (staged["data.limit"] < batch_limit) & (staged["max_new_tokens"] < head["max_new_tokens"].max())
    ].sort_values("levels.small.k")
    lines = [
        f"On {timing['cpu']}, {timing['threads']} threads ([{src}/timing.json]({src}/timing.json)), it took "
        f"{timing['total_s'] / 60:.1f} minutes ({timing['started']}; the goal is 15): install {timing['install_s'] / 60:.1f} min, "
        f"the 12 jobs {timing['sweep_s'] / 60:.1f} min, the report {timing['report_s'] / 60:.1f} min. "
        f"Its jobs ([{src}/runs.csv]({src}/runs.csv), [report]({src}/report.md)):",
        f"- greedy: {headline(0.0)};",
        f"- T = 0.7: {headline(0.7)};",
        "- the k axis (greedy, "
        + f"{int(k_axis['max_new_tokens'].iloc[0])} tokens): k = "
        + " / ".join(str(int(k)) for k in k_axis["levels.small.k"])
        + " gives "
        + " / ".join(f"{v:.1f}" for v in k_axis["mean_acceptance_length"])
        + " tokens per target call and "
        + " / ".join(f"{v:.1f}" for v in k_axis["tokens_per_s"])
        + " tok/s;",
        "- the batch axis (greedy, "
        + f"{int(batch['data.limit'].iloc[0])} problems): batch "
        + " / ".join(str(int(b)) for b in batch["batch_size"])
        + ": plain decoding "
        + " / ".join(f"{v:.1f}" for v in batch["ar_tokens_per_s"])
        + " tok/s, the staged default "
        + " / ".join(f"{v:.1f}" for v in batch["tokens_per_s"])
        + ", speedup "
        + " / ".join(f"{v:.2f}x" for v in batch["speedup"])
        + ".",
    ]
    return "\n".join(lines)


DATA_NAMES = {"humaneval": "HumanEval", "mt_bench": "MT-bench"}


def crossover(batch: pd.DataFrame) -> str:
    """Where speculation stops paying along the batch axis: the first batch size whose
    speedup interval lies below 1, else where the point estimate does, else none."""
    below = batch[batch["speedup_ci_high"] < 1]
    if not below.empty:
        return f"below 1 from batch {int(below['batch_size'].min())} (its whole interval)"
    below = batch[batch["speedup"] < 1]
    if not below.empty:
        return f"below 1 from batch {int(below['batch_size'].min())} (its interval still reaches 1)"
    return f"above 1 up to batch {int(batch['batch_size'].max())}: no crossover measured"


def _ci(r) -> str:
    low, high = getattr(r, "speedup_ci_low", float("nan")), getattr(r, "speedup_ci_high", float("nan"))
    return f"{r.speedup:.2f}x [{low:.2f}, {high:.2f}]" if low == low else f"{r.speedup:.2f}x"


def render_paper(root: Path = ROOT) -> str:
    runs = pd.read_csv(root / SOURCES["paper"] / "runs.csv")
    timing = _timing("paper", root)
    src = SOURCES["paper"]
    staged_name = "ngram>small>copy>target"
    names = {"copy>target": "lookup", staged_name: "staged", "small>target": "0.5B"}
    lines = [
        f"[{src}/report.md]({src}/report.md) ({timing['cpu']}, {timing['threads']} threads, "
        f"{timing['started']}, {timing['sweep_s'] / 60:.0f} min; [runs.csv]({src}/runs.csv)), test split, "
        "speedup over plain decoding timed in the same job [95% interval over batches]:"
    ]
    for data, d in runs.groupby("data.name", sort=False):
        head = d[(d["batch_size"] == 1) & (d["max_new_tokens"] == d["max_new_tokens"].max())]
        head = head[head["method"].isin(names)]
        cells = []
        for temp, label in ((0.0, "greedy"), (0.7, "T = 0.7")):
            t = head[head["temperature"] == temp].sort_values("tokens_per_s", ascending=False)
            cells.append(
                f"{label}: "
                + ", ".join(f"{names[r.method]} {r.tokens_per_s:.1f} tok/s ({_ci(r)})" for r in t.itertuples())
            )
        batch = d[(d["method"] == staged_name) & (d["data.limit"] == d["data.limit"].max())]
        batch = batch.sort_values("batch_size")
        per_row = " / ".join(f"{1000 * r.batch_size / r.tokens_per_s:.0f}" for r in batch.itertuples())
        lines += [
            f"- {DATA_NAMES.get(data, data)} ({int(head['data.limit'].max())} prompts, "
            f"{int(head['max_new_tokens'].max())} tokens): " + "; ".join(cells) + ".",
            f"- {DATA_NAMES.get(data, data)}, batch "
            + " / ".join(str(int(b)) for b in batch["batch_size"])
            + f" ({int(batch['data.limit'].iloc[0])} prompts, {int(batch['max_new_tokens'].iloc[0])} tokens, greedy): "
            "plain "
            + " / ".join(f"{v:.1f}" for v in batch["ar_tokens_per_s"])
            + " tok/s, staged "
            + " / ".join(f"{v:.1f}" for v in batch["tokens_per_s"])
            + f" ({per_row} ms a token per row), speedup "
            + " / ".join(_ci(r) for r in batch.itertuples())
            + f"; {crossover(batch)}.",
        ]
    return "\n".join(lines)


BLOCKS = {"results": render_results, "main-command": render_main_command, "paper": render_paper}

_BLOCK = re.compile(
    r"(<!-- begin generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)", re.S
)


def rewrite(text: str, root: Path = ROOT) -> str:
    """``text`` with every generated block re-rendered from its sources."""

    def sub(m):
        name = m.group("name")
        if name not in BLOCKS:
            raise KeyError(f"README block {name!r} has no renderer; known: {', '.join(BLOCKS)}")
        return m.group(1) + BLOCKS[name](root) + "\n" + m.group(4)

    return _BLOCK.sub(sub, text)


def stale_blocks(text: str, root: Path = ROOT) -> list[str]:
    """Names of the blocks whose text differs from what their sources render."""
    return [m.group("name") for m in _BLOCK.finditer(text) if m.group("body") != BLOCKS[m.group("name")](root) + "\n"]


RESULT_SECTIONS = ("## Results",)
_FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?=x\b|[^\w.]|$)")  # 36.1, 1.09x; not 1.5B or 2.13.0


def figures_outside_blocks(text: str) -> list[str]:
    """Decimal figures in the README's results sections outside generated blocks and code."""
    found = []
    for heading in RESULT_SECTIONS:
        start = text.index(heading)
        end = text.find("\n## ", start + len(heading))
        section = _BLOCK.sub("", text[start : end if end >= 0 else None])
        section = re.sub(r"`[^`]*`|\([^)]*\.(md|json|csv|png)\)", "", section)
        found += _FIGURE.findall(section)
    return found


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = README.read_text(encoding="utf-8")
    if argv == ["--check"]:
        stale = stale_blocks(text)
        loose = figures_outside_blocks(text)
        for name in stale:
            print(
                f"README.md: generated block {name!r} differs from its sources; run python -m analysis.readme_results"
            )
        if loose:
            print(f"README.md: figures in a results section outside generated blocks: {', '.join(loose)}")
        return 1 if stale or loose else 0
    if argv:
        print(f"usage: python -m analysis.readme_results [--check] (got {' '.join(argv)!r})")
        return 2
    README.write_text(rewrite(text), encoding="utf-8")
    print(f"README.md: {len(_BLOCK.findall(text))} generated blocks rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
