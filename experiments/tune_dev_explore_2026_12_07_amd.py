"""The explore clock on the dev split: ``peers.py`` where ``--ours``' ``priced:K`` level stands for
the timed router with the clock before 2026-12-07 (every round that did not go below counted toward
``RoutePrices.explore``) beside ``timed:K`` (rounds of copies do not count), interleaved in one run.

    python experiments/tune_dev_explore_2026_12_07_amd.py <peers.py arguments>

(``experiments/tune_dev_explore_2026_12_07_amd.sh`` runs the three dev sets.)"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402

from stagedspec.drafters.bypass import BypassDrafter, RoutePrices  # noqa: E402
from stagedspec.evaluation import bench_methods  # noqa: E402


class EveryRoundClock(BypassDrafter):
    """The clock before: every round that did not go below counts."""

    def _count_round(self, copies, goes_below):
        self._since_lower = 0 if goes_below else self._since_lower + 1


def router(lower, **kw):
    if kw.get("cost_curve") and not kw.get("timed"):  # priced:K -> timed, the old clock
        kw.update(timed=True, prices=RoutePrices())
        return EveryRoundClock(lower, **kw)
    return BypassDrafter(lower, **kw)


if __name__ == "__main__":
    bench_methods.BypassDrafter = router
    peers.main(sys.argv[1:])
