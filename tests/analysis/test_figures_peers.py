"""The peers figure (``analysis/peers_figure.py``) read back: what the bars show, not only
that a PNG was written (``tests/evaluation/test_peers.py::test_figure_from_results``)."""

from __future__ import annotations

import json

import numpy as np
from matplotlib.collections import LineCollection

from analysis.peers_figure import draw, figure

ROWS = [
    {"method": "hf", "batch": 1, "speedup_vs_hf": 1.0, "ci": [1.0, 1.0]},
    {"method": "ngram>small>copy>target", "batch": 1, "speedup_vs_hf": 1.8, "ci": [1.5, 2.2]},
    {"method": "ar", "batch": 2, "speedup_vs_hf": 1.5, "ci": [1.2, 1.8]},
    {"method": "bad", "batch": 1, "speedup_vs_hf": float("nan"), "ci": [float("nan")] * 2},
]


def test_bars_labels_and_intervals_read_back():
    (ax,) = figure(ROWS, "mt_bench").axes
    bars = ax.patches
    assert len(bars) == 3  # the NaN row is not drawn
    np.testing.assert_allclose([b.get_height() for b in bars], [1.0, 1.8, 1.5])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["hf", "ngram>small>copy>target", "ar (B=2)"]
    assert ax.get_ylabel().startswith("tokens/s ÷ HF generate") and ax.get_title() == "mt_bench"
    # HF's own bars grey, ours blue
    assert bars[0].get_facecolor() != bars[1].get_facecolor()
    # each bar's 95% interval, low to high, at its x
    (segments,) = [c.get_segments() for c in ax.collections if isinstance(c, LineCollection)]
    ends = sorted((float(s[0][0]), float(s[0][1]), float(s[1][1])) for s in segments)
    np.testing.assert_allclose(ends, [(0, 1.0, 1.0), (1, 1.5, 2.2), (2, 1.2, 1.8)])
    # the HF reference at 1
    (ref,) = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    np.testing.assert_allclose(ref.get_ydata(), [1.0, 1.0])


def test_draw_writes_the_figure_next_to_the_results(tmp_path):
    res = tmp_path / "results.json"
    res.write_text(json.dumps({"args": {"data": "humaneval", "temperature": 0}, "tables": {"overall": ROWS}}))
    png = draw(res)
    assert png == tmp_path / "peers.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
