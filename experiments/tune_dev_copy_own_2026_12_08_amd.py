"""The timed router's ``copy_own`` on the dev split: ``peers.py`` where ``--ours``' ``priced:K`` level stands
for the timed router with ``copy_own`` 2 and ``route:K`` for 8, beside ``timed:K`` (the default then, 0: the
job's pooled copy record alone), interleaved in one run.

    python experiments/tune_dev_copy_own_2026_12_08_amd.py <peers.py arguments>

(``experiments/tune_dev_copy_own_2026_12_08_amd.sh`` lists the dev runs.)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402

from stagedspec.drafters.bypass import BypassDrafter, RoutePrices  # noqa: E402
from stagedspec.evaluation import bench_methods  # noqa: E402


def router(lower, **kw):
    if kw.get("prices") is not None and not kw.get("timed"):  # priced:K -> 2, route:K -> 8
        own = 2.0 if kw.get("cost_curve") else 8.0
        kw.update(timed=True, cost_curve=True, prices=RoutePrices(copy_own=own))
    return BypassDrafter(lower, **kw)


if __name__ == "__main__":
    bench_methods.BypassDrafter = router
    peers.main(sys.argv[1:])
