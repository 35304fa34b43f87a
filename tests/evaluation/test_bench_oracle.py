"""stagedspec/evaluation/bench_oracle.py: the router against the best fixed routing per prompt, on hand-made records."""

import math

import pytest

from stagedspec.evaluation.bench_oracle import markdown, oracle_table


def rec(method, prompt, tokens, seconds, repeat=0, batch=1):
    return {
        "method": method,
        "prompts": [prompt],
        "tokens": tokens,
        "seconds": seconds,
        "repeat": repeat,
        "batch": batch,
    }


def records():
    return [
        # prompt 0: copy 20 tok/s, small 10 -> oracle copy 20; router 18 -> 0.9
        rec("copy", 0, 100, 5.0),
        rec("small", 0, 100, 10.0),
        rec("route", 0, 90, 5.0),
        # prompt 1: copy 10, small 40 (median of 30, 40, 50 over repeats) -> oracle small 40; router 20 -> 0.5
        rec("copy", 1, 100, 10.0),
        rec("small", 1, 60, 2.0, repeat=0),
        rec("small", 1, 80, 2.0, repeat=1),
        rec("small", 1, 100, 2.0, repeat=2),
        rec("route", 1, 100, 5.0),
        rec("route", 1, 100, 1.0, batch=4),  # other batch sizes are not batch-1 measurements
        # prompt 2: only the router ran it -> left out
        rec("route", 2, 100, 1.0),
    ]


def test_oracle_by_hand():
    rows, s = oracle_table(records(), "route", ["copy", "small"])
    assert [r["prompt"] for r in rows] == [0, 1]
    assert rows[0]["oracle_method"] == "copy" and rows[0]["oracle"] == pytest.approx(20.0)
    assert rows[1]["oracle_method"] == "small" and rows[1]["oracle"] == pytest.approx(40.0)
    assert [r["ratio"] for r in rows] == pytest.approx([0.9, 0.5])
    assert s["router_vs_oracle"] == pytest.approx(math.sqrt(0.45))
    assert s["within_10pct"] == 1  # 0.9 counts, 0.5 does not
    # fixed copy reaches (1, 0.25) of the oracle, small (0.5, 1): geomeans 0.5 and 0.707
    assert s["best_fixed"] == "small" and s["best_fixed_vs_oracle"] == pytest.approx(math.sqrt(0.5))
    text = markdown(rows, s, "route", ["copy", "small"])
    assert "| 0 | 20.0 * | 10.0 | 20.0 | 18.0 | 0.90 |" in text


def test_a_recorded_prefill_is_left_out():
    recs = [rec("copy", 0, 100, 6.0), rec("route", 0, 90, 5.0)]
    recs[0]["prefill_seconds"], recs[1]["prefill_seconds"] = 1.0, 2.0  # decode: 20 and 30 tok/s
    rows, _ = oracle_table(recs, "route", ["copy"])
    assert rows[0]["oracle"] == pytest.approx(20.0) and rows[0]["ratio"] == pytest.approx(1.5)


def test_oracle_refuses_unknown_methods():
    with pytest.raises(ValueError, match=r"no measurements of \['nope'\]"):
        oracle_table(records(), "route", ["copy", "nope"])
    with pytest.raises(ValueError, match="names no method"):
        oracle_table(records(), "route", [])
