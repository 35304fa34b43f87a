"""95% confidence intervals for a job's rates and speedups. Standard library only.

A job's speedup is a ratio of pooled rates over its *units* (a batch of prompts that the
method and the plain baseline both decoded; one prompt turn at batch size 1):

    S = (sum a_i / sum b_i) / (sum c_i / sum d_i)

with a_i, b_i the method's tokens and seconds on unit i and c_i, d_i the baseline's.
Its interval is a t interval on log S by the delta method: unit i's influence on log S
is psi_i = a_i/mean(a) - b_i/mean(b) - c_i/mean(c) + d_i/mean(d), so
se(log S) = sd(psi) / sqrt(n) and the interval is S * exp(+-t(0.975, n - 1) * se). This
keeps the point estimate the report shows (the pooled ratio, not a mean of per-prompt
ratios) and, with the t quantile, stays honest for the handful of prompts a CPU sweep
affords. A unit decoded several times (``repeats``) enters with its repeats summed; with a
single unit the repeats themselves are the units, and the interval then covers timing
noise only (``Interval.basis`` says which).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
"""Student's t 0.975 quantiles for 1..30 degrees of freedom."""


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964  # Cornish-Fisher expansion around the normal quantile (error < 1e-4 past 30)
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    n: int
    """Units the interval rests on."""
    basis: str
    """"prompts" (units of prompts, repeats summed) or "repeats" (one unit's repeats)."""


def ratio_interval(units: list[list[tuple[float, ...]]], signs: tuple[int, ...]) -> Interval | None:
    """Interval of prod_j (sum_i x_ij)^signs[j] over units i, e.g. signs (1, -1) for a
    rate (tokens / seconds) and (1, -1, -1, 1) for a speedup (a / b) / (c / d).

    ``units[i]``: the repeats of unit i, each a tuple of len(signs) values. None when
    there is only one unit with one repeat (nothing to estimate the spread from)."""
    if len(units) >= 2:
        rows, basis = [tuple(sum(col) for col in zip(*reps)) for reps in units], "prompts"
    elif units and len(units[0]) >= 2:
        rows, basis = [tuple(r) for r in units[0]], "repeats"
    else:
        return None
    n = len(rows)
    means = [sum(col) / n for col in zip(*rows)]
    if any(m <= 0 for m in means):
        return None
    log_est = sum(s * math.log(m) for s, m in zip(signs, means))
    psi = [sum(s * x / m for s, x, m in zip(signs, row, means)) for row in rows]
    mu = sum(psi) / n
    sd = math.sqrt(sum((p - mu) ** 2 for p in psi) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return Interval(math.exp(log_est), math.exp(log_est - half), math.exp(log_est + half), n, basis)


def speedup_interval(units: list[list[tuple[float, float, float, float]]]) -> Interval | None:
    """(method tokens, method seconds, baseline tokens, baseline seconds) per repeat per unit."""
    return ratio_interval(units, (1, -1, -1, 1))


def rate_interval(units: list[list[tuple[float, float]]]) -> Interval | None:
    """(tokens, seconds) per repeat per unit: tokens per second."""
    return ratio_interval(units, (1, -1))


def interval_metrics(name: str, interval: Interval | None) -> dict[str, float]:
    """``<name>_ci_low``, ``<name>_ci_high`` (``speedup/qa`` -> ``speedup_ci_low/qa``), and
    what the interval is over: ``<name>_ci_n`` units, ``<name>_ci_over_prompts`` 1 when
    they are prompts (timing and content), 0 when they are repeats of one prompt (timing
    noise only: a narrower interval that says nothing about other prompts)."""
    if interval is None:
        return {}
    head, sep, tail = name.partition("/")
    return {
        f"{head}_ci_low{sep}{tail}": interval.low,
        f"{head}_ci_high{sep}{tail}": interval.high,
        f"{head}_ci_n{sep}{tail}": float(interval.n),
        f"{head}_ci_over_prompts{sep}{tail}": float(interval.basis == "prompts"),
    }
