"""Copies priced by the match each token continues, on the dev split: ``peers.py`` where ``--ours``'
``priced:K`` level stands for the timed router as it was before (every token of a copy priced by the
one acceptance of the match the copy follows, ``MatchPriced``) beside ``timed:K`` (the i-th token by
the acceptance of an (m + i - 1)-token match), interleaved in one run.

    python experiments/tune_dev_runs_2026_12_07_intel.py <peers.py arguments>

(``experiments/tune_dev_runs_2026_12_07_intel.sh`` runs the three dev sets.)"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402

from stagedspec.drafters import bypass  # noqa: E402
from stagedspec.drafters.bypass import BypassDrafter, RoutePrices  # noqa: E402
from stagedspec.evaluation import bench_methods  # noqa: E402


class MatchPriced(bypass._RouteStats):
    """Before: a copy after an m-token match has every token accepted with one a_m, learnt from
    the accepted tokens and short copies of copies after m-token matches."""

    def copy_offer(self, match, length):
        a = self.copy_alpha(match)
        best, best_len, expected, power = -1.0, 1, 0.0, 1.0
        for n in range(1, length + 1):
            power *= a
            expected += power
            rate = (expected + 1) / self.verify_cost(n + 1)
            if rate > best:
                best, best_len = rate, n
        return best, best_len

    def record(self, route, accepted, forwards, seconds=0.0):
        kind, match, offered = route
        if kind != "copy":
            return super().record(route, accepted, forwards, seconds)
        b = min(match, bypass.MATCH_BUCKETS)
        self.copy_acc[b] += accepted
        self.copy_short[b] += accepted < offered


def router(lower, **kw):
    if kw.get("cost_curve") and not kw.get("timed"):  # priced:K -> timed, copies priced as before
        kw.update(timed=True, prices=RoutePrices())
        d = BypassDrafter(lower, **kw)
        d._stats.__class__ = MatchPriced
        return d
    return BypassDrafter(lower, **kw)


if __name__ == "__main__":
    bench_methods.BypassDrafter = router
    peers.main(sys.argv[1:])
