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
