"""The router's constants on the dev split: ``peers.py`` where ``--ours``' ``priced:K`` level stands
for the timed router with ``--variant-prices`` (``RoutePrices`` fields as JSON; by default copies'
prior worth ``prior_weight`` = 2 rounds, as before 2026-12-07) beside ``timed:K`` (the defaults),
interleaved in one run; both give the level below the prompt lazily (``timed:K:1``, plain
``peers.py``, is the eager prefill).

    python experiments/tune_dev_router_2026_12_07_amd.py [--variant-prices JSON] <peers.py arguments>

(``experiments/tune_dev_router_2026_12_07_amd.sh`` runs the three dev sets.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402

from stagedspec.drafters.bypass import BypassDrafter, RoutePrices  # noqa: E402
from stagedspec.evaluation import bench_methods  # noqa: E402


def main(argv: list[str]) -> None:
    variant = {"copy_weight": RoutePrices().prior_weight}
    if "--variant-prices" in argv:
        i = argv.index("--variant-prices")
        try:
            variant = json.loads(argv[i + 1])
            RoutePrices(**variant)
        except (IndexError, ValueError, TypeError) as e:
            raise SystemExit(
                f"--variant-prices: want a JSON object of RoutePrices fields, e.g. '{{\"copy_weight\": 2}}': {e}"
            )
        argv = argv[:i] + argv[i + 2 :]

    def router(lower, **kw):
        if kw.get("cost_curve") and not kw.get("timed"):  # priced:K -> timed with the variant's prices
            kw.update(timed=True, prices=RoutePrices(**variant))
        return BypassDrafter(lower, **kw)

    bench_methods.BypassDrafter = router
    peers.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
