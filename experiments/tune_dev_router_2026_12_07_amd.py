"""The router's copy prior on the dev split: ``peers.py`` where ``--ours``' ``priced:K`` level stands
for the timed router with copies' prior worth ``prior_weight`` = 2 rounds (as before 2026-12-07),
beside ``timed:K`` (``copy_weight`` 0.5), interleaved in one run; both give the level below the
prompt lazily (``timed:K:1``, plain ``peers.py``, is the eager prefill).

    python experiments/tune_dev_router_2026_12_07_amd.py <peers.py arguments>

(``experiments/tune_dev_router_2026_12_07_amd.sh`` runs the three dev sets.)"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402

from stagedspec.drafters.bypass import BypassDrafter, RoutePrices  # noqa: E402
from stagedspec.evaluation import bench_methods  # noqa: E402


def _router(lower, **kw):
    if kw.get("cost_curve") and not kw.get("timed"):  # priced:K -> timed, copies' prior worth 2 rounds
        kw.update(timed=True, prices=RoutePrices(copy_weight=RoutePrices().prior_weight))
    return BypassDrafter(lower, **kw)


if __name__ == "__main__":
    bench_methods.BypassDrafter = _router
    peers.main(sys.argv[1:])
