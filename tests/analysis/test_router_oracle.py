"""The router-against-oracle comparison, by hand."""

from __future__ import annotations

import json
import math

import pytest

from analysis.router_oracle import against_oracle, decode_totals


def _write(tmp_path, rows):
    p = tmp_path / "measurements.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    return p


def _row(method, group, tokens, seconds, prefill=1.0):
    return {"method": method, "group": group, "tokens": tokens, "seconds": seconds, "prefill_seconds": prefill}


def test_the_oracle_is_each_prompts_fastest_fixed_method_by_hand(tmp_path):
    """Prompt 0: lookup 100 tokens in 2 s of decode (50/s), plain 100 in 4 (25/s), router 100 in 2.5
    (40/s): 0.8. Prompt 1: plain 20/s beats lookup 10/s; the router 40 tokens over two repeats of 1 s
    each (20/s): 1.0. Geomean sqrt(0.8); totals (140 / 4.5) / (140 / 4). HF's row (no prefill) is
    left out."""
    rows = [
        _row("copy", 0, 100, 3.0),
        _row("ar", 0, 100, 5.0),
        _row("timed", 0, 100, 3.5),
        _row("copy", 1, 40, 5.0),
        _row("ar", 1, 40, 3.0),
        _row("timed", 1, 20, 2.0),
        _row("timed", 1, 20, 2.0),
        {"method": "hf", "group": 0, "tokens": 100, "seconds": 9.0, "prefill_seconds": None},
    ]
    totals = decode_totals(_write(tmp_path, rows))
    assert "hf" not in totals and totals["timed"][1] == (40, 2.0)
    res = against_oracle(totals, "timed", ["ar", "copy"])
    assert [r["oracle"] for r in res["prompts"]] == ["copy", "ar"]
    assert res["geomean"] == pytest.approx(math.sqrt(0.8))
    assert res["totals"] == pytest.approx((140 / 4.5) / (140 / 4))
    with pytest.raises(SystemExit, match=r"methods not in the run: \['q4'\]; present: \['ar', 'copy', 'timed'\]"):
        against_oracle(totals, "timed", ["ar", "q4"])
