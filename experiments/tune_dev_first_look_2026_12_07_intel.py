"""The timed router's ``first_look`` on the dev split: ``peers.py`` where ``--ours``' ``priced:K``
level stands for the timed router with ``first_look`` = A and ``route:K`` for it with ``first_look`` = B
(``--looks A,B``), beside ``timed:K`` (the default), interleaved in one run.

    python experiments/tune_dev_first_look_2026_12_07_intel.py --looks 3,6 <peers.py arguments>

(``experiments/tune_dev_first_look_2026_12_07_intel.sh`` lists the dev runs.)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402

from stagedspec.drafters.bypass import BypassDrafter, RoutePrices  # noqa: E402
from stagedspec.evaluation import bench_methods  # noqa: E402

LOOKS = (0.0, 0.0)


def router(lower, **kw):
    if kw.get("prices") is not None and not kw.get("timed"):  # priced:K -> first_look A, route:K -> B
        look = LOOKS[0] if kw.get("cost_curve") else LOOKS[1]
        kw.update(timed=True, cost_curve=True, prices=RoutePrices(first_look=look))
    return BypassDrafter(lower, **kw)


if __name__ == "__main__":
    argv = sys.argv[1:]
    i = argv.index("--looks")
    LOOKS = tuple(float(x) for x in argv[i + 1].split(","))
    del argv[i : i + 2]
    bench_methods.BypassDrafter = router
    peers.main(argv)
