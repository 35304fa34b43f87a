"""The job hands the target's calibrated cost curve to the priced routers that ask for it."""

from __future__ import annotations

from stagedspec.drafters import BypassDrafter
from stagedspec.drafters.bypass import RoutePrices
from tests.helpers import ProposeOne as BelowOne


PRICES = RoutePrices(row_cost=0.1, draft_cost=0.5, prior_weight=1.0, prior_accepted=2.0)


def test_the_job_gives_nested_priced_routers_the_plans_curve():
    from stagedspec.evaluation.job import price_by_curve

    inner = BypassDrafter(BelowOne(), k=3, prices=PRICES, name="inner", cost_curve=True)
    outer = BypassDrafter(inner, k=3, prices=PRICES, cost_curve=True)
    linear = BypassDrafter(BelowOne(), k=3, prices=PRICES)  # cost_curve off: keeps row_cost
    price_by_curve(outer, (1.0, 2.0))
    price_by_curve(linear, (1.0, 2.0))
    assert outer._stats.curve == inner._stats.curve == (1.0, 2.0) and linear._stats.curve == ()
    price_by_curve(outer, ())  # an uncalibrated plan leaves the curve it had
    assert outer._stats.curve == (1.0, 2.0)
