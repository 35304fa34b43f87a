"""The timed router's ``copy_decay`` on the dev split: ``peers.py`` where ``--ours``' ``priced:K`` level
stands for the timed router with ``copy_decay`` 0.97 and ``route:K`` for 0.9, beside ``timed:K`` (the default,
1: no decay), interleaved in one run.

    python experiments/tune_dev_copy_decay_2026_12_07_amd.py <peers.py arguments>

(``experiments/tune_dev_copy_decay_2026_12_07_amd.sh`` lists the dev runs.)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402

from stagedspec.drafters.bypass import BypassDrafter, RoutePrices  # noqa: E402
from stagedspec.evaluation import bench_methods  # noqa: E402


def router(lower, **kw):
    if kw.get("prices") is not None and not kw.get("timed"):  # priced:K -> 0.97, route:K -> 0.9
        decay = 0.97 if kw.get("cost_curve") else 0.9
        kw.update(timed=True, cost_curve=True, prices=RoutePrices(copy_decay=decay))
    return BypassDrafter(lower, **kw)


if __name__ == "__main__":
    bench_methods.BypassDrafter = router
    peers.main(sys.argv[1:])
