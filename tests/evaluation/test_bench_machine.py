"""The machine probes the benchmarks print beside their timings
(``stagedspec/evaluation/bench_machine.py``): the bytes a decoding step reads, counted by
hand on a tiny Llama, and the floor comparison's arithmetic on hand-made pairs."""

from __future__ import annotations

import math

import pytest

from stagedspec.evaluation.bench_machine import (
    copy_bandwidth,
    floor_pairs,
    read_bandwidth,
    step_bytes,
    summarize_pairs,
    weight_bytes,
)
from stagedspec.models.model_loading import ModelSpec, load_model

# TINY_DEFAULTS: vocab 128, hidden 64, 2 layers, 4 heads of 16, 2 KV heads, MLP 128, float32.
# Per layer: q 64x64 + k 64x32 + v 64x32 + o 64x64 + gate, up 64x128 each + down 128x64
# + two norms of 64 = 36,992 parameters; final norm 64; embedding and head 128 x 64 each.
LAYERS = 2 * 36_992 + 64
TABLE = 128 * 64


def test_step_bytes_counts_one_row_of_an_untied_embedding_table():
    m = load_model(ModelSpec(source="tiny")).model
    assert weight_bytes(m) == 4 * (LAYERS + 2 * TABLE)
    # the step reads the head whole and the embedding table only at its token's row
    assert step_bytes(m) == 4 * (LAYERS + TABLE + 64)
    assert step_bytes(m, tokens=8) == 4 * (LAYERS + TABLE + 8 * 64)


def test_step_bytes_counts_a_tied_table_once_and_whole():
    m = load_model(ModelSpec(source="tiny", tiny={"tie_word_embeddings": True})).model
    assert weight_bytes(m) == 4 * (LAYERS + TABLE)
    assert step_bytes(m) == 4 * (LAYERS + TABLE)  # the head reads every row


def test_summarize_pairs_by_hand():
    # step 0.1 s on 1e9 bytes beside read 20, 40, 10 GB/s and copy 10, 10, 5 GB/s
    pairs = []
    for rb, cb in ((20e9, 10e9), (40e9, 10e9), (10e9, 5e9)):
        pairs.append(
            {
                "step_s": 0.1,
                "read_bw": rb,
                "copy_bw": cb,
                "read_floor_s": 1e9 / rb,
                "copy_floor_s": 1e9 / cb,
                "vs_read_floor": 0.1 * rb / 1e9,
                "vs_copy_floor": 0.1 * cb / 1e9,
            }
        )
    s = summarize_pairs(pairs)
    assert s["pairs"] == 3
    assert s["read_bw"] == 20e9 and s["read_bw_range"] == (10e9, 40e9)
    assert s["vs_read_floor"] == pytest.approx(2.0)  # median of 2, 4, 1
    assert s["vs_read_floor_geomean"] == pytest.approx(2.0)  # (2 * 4 * 1) ** (1/3)
    assert s["vs_copy_floor_geomean"] == pytest.approx((1 * 1 * 0.5) ** (1 / 3))
    lo, hi = s["vs_read_floor_ci"]
    assert 1.0 <= lo <= 2.0 <= hi <= 4.0


def test_floor_pairs_compares_each_step_with_its_own_probes():
    calls = []
    out = floor_pairs(lambda: calls.append(1), nbytes=10**6, pairs=2, megabytes=8, reps=2)
    assert len(out) == 2 and len(calls) == 4  # best of reps steps per pair
    for p in out:
        assert p["read_bw"] > 0 and p["copy_bw"] > 0
        assert p["vs_read_floor"] == pytest.approx(p["step_s"] / p["read_floor_s"])
        assert p["vs_copy_floor"] == pytest.approx(p["step_s"] / p["copy_floor_s"])
        assert p["read_floor_s"] == pytest.approx(10**6 / p["read_bw"])
    assert math.isfinite(read_bandwidth(megabytes=8, reps=1)) and math.isfinite(copy_bandwidth(megabytes=8, reps=1))
