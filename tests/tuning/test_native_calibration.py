"""The native kernel's calibration: from how many rows the 16-row tiles run, and the cost
curve the router reads, from timings given by hand."""

from __future__ import annotations

import pytest

from stagedspec.engine.kernels import KernelChoice
from stagedspec.tuning.kernel_calibration import Calibration, native_cost, step_curve, tiles_from


def _ms(rows: list[float], tiles: list[float]) -> dict[str, dict[str, float]]:
    return {str(m): {"rows": r, "tiles": t} for m, (r, t) in enumerate(zip(rows, tiles), start=1)}


# rows loop 10 ms a row; a tile 45 ms for any count up to 16
ROWS = [10.0 * m for m in range(1, 17)]
TILE = [45.0] * 16


def test_tiles_run_from_the_least_row_count_where_they_win_at_every_count_above():
    assert tiles_from(_ms(ROWS, TILE)) == 5  # 50 > 45 from 5 rows on
    wobbly = TILE.copy()
    wobbly[9] = 101.0  # at 10 rows the tile lost once: only from 11 rows do they win throughout
    assert tiles_from(_ms(ROWS, wobbly)) == 11
    assert tiles_from(_ms(ROWS, [500.0] * 16)) == 0
    assert tiles_from({str(m): {"rows": 10.0 * m} for m in range(1, 17)}) == 0  # a build without tiles


@pytest.mark.parametrize(
    "m,want",
    [
        (3, 30.0),  # below tiles_from: the rows loop
        (5, 45.0),  # one tile
        (16, 45.0),
        (17, 45.0 + 10.0),  # a whole tile and 1 row through the rows loop
        (20, 45.0 + 40.0),
        (21, 90.0),  # the remainder 5 >= tiles_from: a second tile
        (32, 90.0),
    ],
)
def test_the_cost_of_m_rows_follows_the_split_between_tiles_and_rows(m, want):
    assert native_cost(_ms(ROWS, TILE), 5, m) == want


def test_a_native_plans_step_curve_is_its_kernels_cost_over_one_row():
    cal = Calibration(key={}, native_ms=_ms(ROWS, TILE))
    plan = KernelChoice(name="n", native=True, native_tiles_from=5)
    curve = step_curve(cal, plan)
    assert len(curve) == 32 and curve[0] == 1.0
    assert curve[3] == 4.0 and curve[4] == 4.5 and curve[16] == 5.5 and curve[31] == 9.0
    # 17 -> 20 rows: 5.5, 6.5, 7.5, 8.5; then 21 rows is 9.0: non-decreasing as given
    assert list(curve[16:21]) == [5.5, 6.5, 7.5, 8.5, 9.0]
