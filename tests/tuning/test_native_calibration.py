"""The native kernel's calibration: from how many rows its ``cols`` loop runs, and the cost
curve the router reads, from timings given by hand."""

from __future__ import annotations

import pytest

from stagedspec.engine.kernels import KernelChoice
from stagedspec.tuning.kernel_calibration import Calibration, cols_from, native_cost, step_curve


def _ms(rows: list[float], cols: list[float]) -> dict[str, dict[str, float]]:
    """Timings as ``_time_native`` records them: both loops up to len(rows), cols beyond."""
    out = {str(m): {"rows": r, "cols": c} for m, (r, c) in enumerate(zip(rows, cols), start=1)}
    out.update({str(m): {"cols": c} for m, c in enumerate(cols, start=1) if m > len(rows)})
    return out


ROWS = [10.0 * m for m in range(1, 17)]  # the 4-row loop: 10 ms a row
COLS = [35.0 + 3.0 * m for m in range(1, 33)]  # the cols loop: 35 ms and 3 a row


def test_cols_run_from_the_least_row_count_where_they_win_at_every_count_above():
    assert cols_from(_ms(ROWS, COLS)) == 6  # 5 rows: 50 against 50 (a tie stays on the 4-row loop); 6: 60 against 53
    wobbly = COLS.copy()
    wobbly[9] = 101.0  # at 10 rows cols lost once: only from 11 rows do they win throughout
    assert cols_from(_ms(ROWS, wobbly)) == 11
    assert cols_from(_ms(ROWS, [500.0] * 32)) == 0
    assert cols_from({str(m): {"rows": 10.0 * m} for m in range(1, 17)}) == 0  # a build without cols


@pytest.mark.parametrize(
    "m,want",
    [
        (3, 30.0),  # below cols_from: the 4-row loop
        (6, 53.0),
        (32, 131.0),
        (64, 262.0),  # past the timed rows: the last time scaled by the rows
    ],
)
def test_the_cost_of_m_rows_is_its_loops_time(m, want):
    assert native_cost(_ms(ROWS, COLS), 6, m) == pytest.approx(want)


def test_without_cols_the_four_row_loop_is_scaled_past_its_timed_rows():
    assert native_cost({str(m): {"rows": 10.0 * m} for m in range(1, 17)}, 0, 20) == pytest.approx(200.0)


def test_a_native_plans_step_curve_is_its_kernels_cost_over_one_row():
    cal = Calibration(key={}, native_ms=_ms(ROWS, COLS))
    plan = KernelChoice(name="n", native=True, native_cols_from=6)
    curve = step_curve(cal, plan)
    assert len(curve) == 32 and curve[0] == 1.0
    assert curve[4] == pytest.approx(5.0) and curve[5] == pytest.approx(5.3) and curve[31] == pytest.approx(13.1)
