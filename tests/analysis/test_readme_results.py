"""The README's measured figures equal what their committed sources render
(``analysis/readme_results.py``), and the checks catch a typed or stale figure."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis import readme_results as rr


def test_readme_blocks_match_their_sources():
    text = rr.README.read_text(encoding="utf-8")
    names = [m.group("name") for m in rr._BLOCK.finditer(text)]
    assert {"results", "main-command"} <= set(names) <= set(rr.BLOCKS) and len(names) == len(set(names))
    assert rr.stale_blocks(text) == []
    assert rr.figures_outside_blocks(text) == []


def test_a_changed_figure_is_caught():
    text = rr.README.read_text(encoding="utf-8")
    block = next(m for m in rr._BLOCK.finditer(text) if m.group("name") == "results")
    body = block.group("body")
    figure = next(f for f in rr._FIGURE.findall(body))
    mutated = text.replace(body, body.replace(figure, f"{float(figure) + 1:.1f}", 1))
    assert rr.stale_blocks(mutated) == ["results"]


def test_a_typed_figure_outside_the_blocks_is_caught():
    text = rr.README.read_text(encoding="utf-8")
    typed = text.replace("## Results\n", "## Results\n\nStaging ran 1.25x faster than the 1.5B alone.\n", 1)
    assert rr.figures_outside_blocks(typed) == ["1.25"]


def test_llama_rates_are_ratios_of_totals():
    llama = {
        "rows": [
            {"mode": "plain", "tokens": 96, "tokens_per_s": 16.0},  # 6 s
            {"mode": "plain", "tokens": 96, "tokens_per_s": 12.0},  # 8 s
            {"mode": "ngram-simple", "tokens": 100, "seconds": 2.0},
            {"mode": "ngram-simple", "tokens": 50, "seconds": 3.0},
        ]
    }
    rates = rr.llama_rates(llama)
    assert rates["plain"] == pytest.approx(192 / 14)  # not the mean of rates, 14.0
    assert rates["ngram-simple"] == pytest.approx(150 / 5)  # not the mean of rates, 33.3


def _run(method, k, batch, limit, tokens, temp, tps, speedup, ar, calls):
    return {
        "method": method,
        "levels.small.k": k,
        "batch_size": batch,
        "data.limit": limit,
        "max_new_tokens": tokens,
        "temperature": temp,
        "tokens_per_s": tps,
        "speedup": speedup,
        "ar_tokens_per_s": ar,
        "mean_acceptance_length": calls,
    }


def test_main_command_block_by_hand(tmp_path, monkeypatch):
    src = tmp_path / "docs" / "main"
    src.mkdir(parents=True)
    staged = "ngram>small>copy>target"
    pd.DataFrame(
        [
            _run(staged, 12, 1, 3, 64, 0.0, 30.0, 4.0, 7.5, 15.0),
            _run("copy>target", None, 1, 3, 64, 0.0, 20.0, 2.5, 8.0, 6.0),
            _run(staged, 12, 1, 3, 64, 0.7, 25.0, 3.0, 8.3, 12.0),
            _run(staged, 4, 1, 3, 32, 0.0, 21.0, 2.0, 10.5, 4.5),
            _run(staged, 8, 1, 3, 32, 0.0, 22.0, 2.1, 10.5, 8.5),
            _run(staged, 12, 1, 4, 32, 0.0, 23.0, 3.0, 7.6, 14.0),
            _run(staged, 12, 4, 4, 32, 0.0, 27.0, 1.1, 24.5, 14.0),
        ]
    ).to_csv(src / "runs.csv", index=False)
    (src / "timing.json").write_text(
        json.dumps(
            {
                "started": "S",
                "install_s": 60,
                "sweep_s": 540,
                "report_s": 30,
                "total_s": 630,
                "cpu": "CPU",
                "threads": 2,
            }
        )
    )
    monkeypatch.setitem(rr.SOURCES, "main_command", "docs/main")
    text = rr.render_main_command(tmp_path)
    assert "it took 10.5 minutes" in text and "install 1.0 min, the 12 jobs 9.0 min, the report 0.5 min" in text
    assert "- greedy: the staged default 30.0 tok/s (4.00x its plain baseline); prompt lookup → target 20.0" in text
    assert "- T = 0.7: the staged default 25.0 tok/s (3.00x" in text
    assert "k = 4 / 8 gives 4.5 / 8.5 tokens per target call and 21.0 / 22.0 tok/s" in text
    assert "batch 1 / 4: plain decoding 7.6 / 24.5 tok/s, the staged default 23.0 / 27.0, speedup 3.00x / 1.10x" in text


def test_crossover_by_hand():
    def axis(*rows):
        return pd.DataFrame(rows, columns=["batch_size", "speedup", "speedup_ci_low", "speedup_ci_high"])

    assert rr.crossover(axis((1, 3.0, 2.0, 4.0), (4, 1.2, 0.9, 1.5))) == "above 1 up to batch 4: no crossover measured"
    assert rr.crossover(axis((1, 3.0, 2.0, 4.0), (4, 0.9, 0.7, 1.1), (8, 0.6, 0.5, 0.7))) == (
        "below 1 from batch 8 (its whole interval)"
    )
    assert (
        rr.crossover(axis((1, 3.0, 2.0, 4.0), (4, 0.9, 0.7, 1.1)))
        == "below 1 from batch 4 (its interval still reaches 1)"
    )


def test_paper_block_by_hand(tmp_path, monkeypatch):
    src = tmp_path / "docs" / "paper"
    src.mkdir(parents=True)
    staged = "ngram>small>copy>target"
    rows = []
    for b, tps, ar, s in ((1, 20.0, 8.0, 2.5), (8, 40.0, 50.0, 0.8)):
        rows.append(
            {
                **_run(staged, 12, b, 24, 24, 0.0, tps, s, ar, 10.0),
                "data.name": "humaneval",
                "speedup_ci_low": s - 0.1,
                "speedup_ci_high": s + 0.1,
            }
        )
    for temp in (0.0, 0.7):
        rows.append(
            {
                **_run(staged, 12, 1, 6, 64, temp, 30.0, 4.0, 7.5, 15.0),
                "data.name": "humaneval",
                "speedup_ci_low": 3.0,
                "speedup_ci_high": 5.0,
            }
        )
    pd.DataFrame(rows).to_csv(src / "runs.csv", index=False)
    (src / "timing.json").write_text(
        json.dumps(
            {
                "started": "S",
                "install_s": 0,
                "sweep_s": 1800,
                "report_s": 30,
                "total_s": 1830,
                "cpu": "CPU",
                "threads": 2,
            }
        )
    )
    monkeypatch.setitem(rr.SOURCES, "paper", "docs/paper")
    text = rr.render_paper(tmp_path)
    assert "- HumanEval (6 prompts, 64 tokens): greedy: staged 30.0 tok/s (4.00x [3.00, 5.00]); T = 0.7: staged" in text
    # per-row latency: batch / tokens per second (1 / 20 s = 50 ms; 8 / 40 s = 200 ms)
    assert "plain 8.0 / 50.0 tok/s, staged 20.0 / 40.0 (50 / 200 ms a token per row)" in text
    assert "speedup 2.50x [2.40, 2.60] / 0.80x [0.70, 0.90]; below 1 from batch 8 (its whole interval)." in text


@pytest.mark.parametrize(
    ("seeds", "repeats", "label"),
    [
        ({(0, 0): 5, (1, 0): 5, (2, 0): 5}, 1, "seed 5"),
        ({(0, 0): 5, (0, 1): 6, (1, 0): 5, (1, 1): 6}, 2, "seeds 5, 6, all samples'"),
        ({(0, 0): 5, (0, 1): 6, (2, 0): 5 + 2 * 1009, (2, 1): 6 + 2 * 1009}, 2, "5 + r + 1009 i for repeat r = 0..1"),
    ],
)
def test_the_seed_label_reads_how_the_cells_were_seeded(tmp_path, monkeypatch, seeds, repeats, label):
    """Shared by the prompts (one label per repeat) or each prompt its own (the stride read off prompt 2's
    seed: (2023 - 5) / 2 = 1009)."""
    src = tmp_path / "docs" / "t07"
    src.mkdir(parents=True)
    (src / "results.json").write_text(json.dumps({"args": {"seed": 5, "repeats": repeats}}))
    rows = [{"prompts": [p], "repeat": r, "seed": s} for (p, r), s in seeds.items()]
    (src / "measurements.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    monkeypatch.setitem(rr.SOURCES, "peers_t07", "docs/t07/results.json")
    assert label in rr.seed_label(tmp_path, "peers_t07")
