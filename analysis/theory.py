"""Closed-form predictions of speculative decoding (Leviathan et al., 2023).

With a per-token acceptance probability alpha, i.i.d. across positions, a chain of gamma
drafts, a draft forward costing c target forwards, and a verification of gamma + 1
positions costing v single-position target forwards (v = T(gamma + 1) / T(1)):

- expected tokens per target call = (1 - alpha^(gamma+1)) / (1 - alpha)   (eq. 1)
- expected speedup over AR        = (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + v))

The paper takes v = 1; on a CPU scoring more positions costs more (``verify_cost/<n>``),
which is what the runs' ``predicted_speedup`` and ``accounted_speedup``
(``stagedspec/metrics/cost_model.py``) account for. alpha must be the per-token acceptance, ``alpha_hat`` = accepted /
(accepted + rejections); accepted / drafted is alpha (1 - alpha^k) / (k (1 - alpha)) for a
chain of k, so a theory fed with it falls with k by construction.

Both are the geometric sum 1 + alpha + ... + alpha^gamma, whose limit at alpha = 1 is
gamma + 1; the closed form divides 0 by 0 there, so that point is handled separately.
"""

from __future__ import annotations

import numpy as np

# Within this distance of 1 the closed form loses all its digits to cancellation, while
# the limit gamma + 1 is off by at most ~gamma^2 * eps / 2: use the limit.
_ALPHA_ONE_TOL = 1e-9


def expected_tokens_per_call(alpha, gamma):
    """Expected tokens emitted per target call, bonus token included (eq. 1)."""
    alpha = np.asarray(alpha, dtype=float)
    gamma = np.asarray(gamma, dtype=float)
    near_one = np.abs(1.0 - alpha) < _ALPHA_ONE_TOL
    safe = np.where(near_one, 0.0, alpha)  # keep the unused branch free of 0/0 warnings
    closed = (1.0 - safe ** (gamma + 1.0)) / (1.0 - safe)
    out = np.where(near_one, gamma + 1.0, closed)
    return out.item() if out.ndim == 0 else out


def predicted_speedup(alpha, gamma, c, verify_ratio=1.0):
    """Expected wall-time speedup over AR for draft/target cost ratio ``c`` and a
    verification costing ``verify_ratio`` single-position target forwards."""
    tokens = np.asarray(expected_tokens_per_call(alpha, gamma), dtype=float)
    cost = np.asarray(gamma, dtype=float) * np.asarray(c, dtype=float) + np.asarray(verify_ratio, dtype=float)
    out = tokens / cost
    return out.item() if out.ndim == 0 else out


def best_chain(alpha: float, c: float, curve: list[float]) -> tuple[int, float]:
    """(gamma, speedup): the chain length among 1..len(curve) - 1 with the highest predicted speedup
    over AR, a verification of gamma + 1 positions costing ``curve[gamma]`` single-position forwards
    (``curve[n - 1]`` = T(n) / T(1), a machine's calibrated cost curve)."""
    if len(curve) < 2 or abs(curve[0] - 1) > 1e-9:
        raise ValueError(f"a cost curve starts at T(1) / T(1) = 1 and has at least 2 points, got {curve[:4]}")
    best = max(range(1, len(curve)), key=lambda g: predicted_speedup(alpha, g, c, curve[g]))
    return best, float(predicted_speedup(alpha, best, c, curve[best]))


def break_even_alpha(c: float, curve: list[float], tol: float = 1e-9) -> float:
    """The per-token acceptance a draft costing ``c`` target forwards a token needs before any chain
    length beats plain decoding on ``curve`` (``best_chain``'s speedup reaches 1), by bisection (the
    speedup grows with alpha at every length); 1.0 when even alpha = 1 does not pay."""
    if best_chain(1.0, c, curve)[1] < 1.0:
        return 1.0
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if best_chain(mid, c, curve)[1] >= 1.0 else (mid, hi)
    return hi


def main(argv: list[str] | None = None) -> None:
    """``python -m analysis.theory --curve 1,1.35,1.72 --c 0.38``: per acceptance, the best chain length
    and its predicted speedup over plain decoding, and the break-even acceptance."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--curve", required=True, help="T(n) / T(1) for n = 1, 2, ...: comma-separated, starting at 1")
    ap.add_argument("--c", type=float, required=True, help="a draft token's cost in target forwards")
    args = ap.parse_args(argv)
    try:
        curve = [float(x) for x in args.curve.split(",")]
    except ValueError:
        raise SystemExit(f"--curve: comma-separated numbers, got {args.curve!r}") from None
    if not 0 <= args.c < float("inf"):
        raise SystemExit(f"--c: a finite cost >= 0, got {args.c}")
    print("| alpha | best chain | speedup over plain |\n|---|---|---|")
    for alpha in (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99):
        g, s = best_chain(alpha, args.c, curve)
        print(f"| {alpha} | {g} | {s:.3f} |")
    print(f"\nbreak-even acceptance: {break_even_alpha(args.c, curve):.3f}")


if __name__ == "__main__":
    main()
