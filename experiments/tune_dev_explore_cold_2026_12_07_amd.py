"""The timed router's ``explore_cold`` on the dev split: ``peers.py`` where ``--ours``' ``priced:K``
level stands for the timed router with ``explore_cold`` on (explore pays a new prompt's prefill of the
level below even when earlier prompts' rounds below priced under a plain step: the behaviour before the
setting) and ``route:K`` for it off, beside ``timed:K`` (the default), interleaved in one run.

    python experiments/tune_dev_explore_cold_2026_12_07_amd.py <peers.py arguments>

(``experiments/tune_dev_explore_cold_2026_12_07_amd.sh`` lists the dev runs.)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402

from stagedspec.drafters.bypass import BypassDrafter, RoutePrices  # noqa: E402
from stagedspec.evaluation import bench_methods  # noqa: E402


def router(lower, **kw):
    if kw.get("prices") is not None and not kw.get("timed"):  # priced:K -> explore_cold on, route:K -> off
        kw.update(timed=True, cost_curve=True, prices=RoutePrices(explore_cold=bool(kw.get("cost_curve"))))
    return BypassDrafter(lower, **kw)


if __name__ == "__main__":
    bench_methods.BypassDrafter = router
    peers.main(sys.argv[1:])
