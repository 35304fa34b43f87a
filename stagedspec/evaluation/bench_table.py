"""The benchmarks' tables: ratios to a reference method as geometric means of per-prompt
ratios with a bootstrap 95% interval, per category and overall, as markdown."""

from __future__ import annotations

import math
import statistics

import torch

REFERENCE = "hf"
"""The method every ratio is to: Hugging Face ``generate``."""


def geomean_ci(ratios: list[float], n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Geometric mean of per-prompt ratios and a bootstrap 95% interval (prompts resampled)."""
    logs = torch.tensor(ratios, dtype=torch.float64).log()
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, len(logs), (n_boot, len(logs)), generator=g)
    boots = logs[idx].mean(1).exp().sort().values
    return float(logs.mean().exp()), float(boots[int(0.025 * n_boot)]), float(boots[int(0.975 * n_boot) - 1])


def per_token_alpha(sequences) -> float:
    """accepted / (accepted + rejections): each round that stopped before the end of its
    draft had one rejection; a consistent estimate of per-token acceptance for chains."""
    acc = rej = 0
    for s in sequences:
        for r in s.rounds:
            acc += r.accepted_depth
            rej += r.accepted_depth < r.tree_nodes
    return acc / (acc + rej) if acc + rej else 0.0


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def _sum(recs: list[dict], key: str) -> float | None:
    vals = [r.get(key) for r in recs]
    return None if any(v is None for v in vals) or not vals else float(sum(vals))


def _reference(records: list[dict], reference: str) -> tuple[dict[tuple[int, int], dict], dict[int, list[int]]]:
    """The reference method's batch-1 measurements by (prompt, repeat), and its output per
    prompt (HF greedy's output: its first repeat's)."""
    ref = {(r["prompts"][0], r["repeat"]): r for r in records if r["method"] == reference and r["batch"] == 1}
    ref_out: dict[int, list[int]] = {}
    for (i, rep), r in sorted(ref.items()):
        ref_out.setdefault(i, r["outputs"][0])
    return ref, ref_out


def _ref_tps(ref: dict[tuple[int, int], dict], idx: tuple[int, ...], rep: int) -> float | None:
    """The reference's tokens/s over prompts ``idx`` in repeat ``rep`` (None if one is missing)."""
    rs = [ref.get((i, rep)) for i in idx]
    if any(r is None for r in rs):
        return None
    return sum(r["tokens"] for r in rs) / sum(r["seconds"] for r in rs)


def _differing(recs: list[dict], ref_out: dict[int, list[int]]) -> int:
    """How many prompts have an output other than the reference's."""
    bad = set()
    for r in recs:
        for i, o in zip(r["prompts"], r["outputs"]):
            if i in ref_out and o != ref_out[i]:
                bad.add(i)
    return len(bad)


def _differing_samples(recs: list[dict], ref: dict[tuple[int, int], dict]) -> int:
    """How many prompts have, in some repeat, an output other than the reference's in that
    repeat (a sampled run whose methods emit the same tokens per seed: ``coupling=gumbel``)."""
    bad = set()
    for r in recs:
        for j, (i, o) in enumerate(zip(r["prompts"], r["outputs"])):
            other = ref.get((i, r["repeat"]))
            if other is not None and other["prompts"] == r["prompts"] and o != other["outputs"][j]:
                bad.add(i)
    return len(bad)


def _table_row(
    method: str,
    batch: int,
    recs: list[dict],
    ref: dict[tuple[int, int], dict],
    ref_out: dict[int, list[int]],
    greedy: bool,
    min_s_per_call: float | None,
    same_samples: bool = False,
) -> dict:
    """One table row: a method at one batch size over ``recs``, its speedup a geometric mean
    over prompt groups of median-over-repeats ratios to the reference."""
    tokens, seconds = sum(r["tokens"] for r in recs), sum(r["seconds"] for r in recs)
    per_group: dict[tuple[int, ...], list[tuple[float, float]]] = {}
    for r in recs:
        ref_r = _ref_tps(ref, tuple(r["prompts"]), r["repeat"])
        if ref_r is not None:
            per_group.setdefault(tuple(r["prompts"]), []).append((r["tokens"] / r["seconds"], ref_r))
    ratios = [_median([a for a, _ in v]) / _median([b for _, b in v]) for v in per_group.values()]
    g, lo, hi = geomean_ci(ratios) if ratios else (math.nan, math.nan, math.nan)
    prefill = _sum(recs, "prefill_seconds")  # None where a method (HF's) times generate as a whole
    rounds, calls = _sum(recs, "rounds"), _sum(recs, "target_calls")
    fwd, drafted, accepted = _sum(recs, "target_forward_time"), _sum(recs, "drafted"), _sum(recs, "accepted")
    s_call = fwd / calls if fwd is not None and calls else None
    return {
        "method": method,
        "batch": batch,
        "prompts": len({i for r in recs for i in r["prompts"]}),
        "measurements": len(recs),
        "tokens_per_s": tokens / seconds if seconds else math.nan,
        "decode_tokens_per_s": tokens / (seconds - prefill) if prefill is not None and seconds > prefill else None,
        "speedup_vs_hf": g,
        "ci": [lo, hi],
        "groups": len(ratios),
        "tokens_per_call": tokens / rounds if rounds else None,
        "acceptance": accepted / drafted if drafted else None,
        "differing_outputs": (
            _differing(recs, ref_out) if greedy else _differing_samples(recs, ref) if same_samples else None
        ),
        "s_per_target_call": s_call,
        "min_s_per_target_call": min_s_per_call if s_call is not None else None,
    }


def summarize(
    records: list[dict],
    categories: list[str],
    greedy: bool,
    min_s_per_call: float | None = None,
    reference: str = REFERENCE,
    same_samples: bool = False,
) -> dict[str, list[dict]]:
    """Table rows: "overall" (every method x batch size) and one table per category
    (batch 1, where a group is one prompt of one category). ``same_samples``: a sampled run
    whose methods should emit the reference's tokens repeat by repeat (``coupling=gumbel``):
    its *differing outputs* count the prompts where one did not."""
    by_row: dict[tuple[str, int], list[dict]] = {}
    for r in records:
        by_row.setdefault((r["method"], r["batch"]), []).append(r)
    ref, ref_out = _reference(records, reference)

    def row(method: str, batch: int, recs: list[dict]) -> dict:
        return _table_row(method, batch, recs, ref, ref_out, greedy, min_s_per_call, same_samples)

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
        lines += [
            "",
            f"### {name}" + (" (batch 1)" if name != "overall" else ""),
            "",
            "| method | batch | tokens/s | decode tokens/s | vs HF generate (95% CI) | tokens/call | acceptance "
            "| differing outputs | s/target call | floor s/call |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            ci = (
                f"{_fmt(r['speedup_vs_hf'])} [{_fmt(r['ci'][0])}, {_fmt(r['ci'][1])}]"
                if not math.isnan(r["speedup_vs_hf"])
                else ""
            )
            diff = "" if r["differing_outputs"] is None else f"{r['differing_outputs']}/{r['prompts']}"
            lines.append(
                f"| {r['method']} | {r['batch']} | {_fmt(r['tokens_per_s'], '.1f')} | "
                f"{_fmt(r.get('decode_tokens_per_s'), '.1f')} | {ci} | "
                f"{_fmt(r['tokens_per_call'])} | {_fmt(r['acceptance'])} | {diff} | "
                f"{_fmt(r['s_per_target_call'], '.4f')} | {_fmt(r['min_s_per_target_call'], '.4f')} |"
            )
    return "\n".join(lines) + "\n"
