"""Prototype (not used by the crate or CI; numpy + scipy): do tests on the EXACT law of the noisy
count (binomial convolved with the discrete noise actually added) give shorter relative-risk
intervals than the crate's normal-approximation score test in the p_y = 0.1 column?

The issue suggests "an interval from the exact likelihood of the noisy counts". Discrete Laplace
noise is far from normal (a Laplace location has twice the Fisher information of a normal one of
the same variance), so the exact law could in principle shorten the interval where the noise
dominates. Checked in split_optimum.py's reduced model (public sizes, n = 200, p_x = 0.5 known,
Y~ = Y + L exact, theta = p_x / p; coverage and median widths exact over the integer law of Y~,
no simulation; median over the integer law, JITTER = 0, for every rule alike). On a log grid of
3,000 p in [1e-3, 0.999], p is accepted iff, with F_p the exact law of Y~ and k the observed
value (mid-p tails, P(< k) + P(= k)/2):
  exact, equal tails:   both tails > alpha/2 (the textbook exact interval);
  exact, crate split:   lower tail > Phi(-z_L(p)), upper > Phi(-z_U(p)), the crate's split
                        (split_optimum.Reduced.d_crate) with exact tails instead of normal ones;
  exact floor:          both tails > alpha: contains every exact split test's interval (each
                        tail's share is at most alpha), the exact analogue of floor2d.
  normal floor:         |t(p)| <= z_alpha, split_optimum's floor (normal approximation).
Width ratios are to the paper's interval with X known (split_optimum "reduced" reference).

Usage, from docs/prototypes (seconds):  python3 exact_tails.py
"""
import sys
import os

import numpy as np
from scipy.stats import binom, norm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import split_optimum as so  # noqa: E402

ALPHA = 0.05
P0S = (0.08, 0.1, 0.12, 0.15, 0.2, 0.3)


def hull(P, accept):
    """[p_lo, p_hi] per outcome (column) of `accept`; p_lo = 0 where the smallest p is accepted."""
    anyk = accept.any(0)
    i_lo = np.argmax(accept, 0)
    i_hi = len(P) - 1 - np.argmax(accept[::-1], 0)
    lo = np.where(anyk, np.where(i_lo == 0, 0.0, P[i_lo]), np.nan)
    hi = np.where(anyk, P[i_hi], np.nan)
    return lo, hi


def run(mech, eps):
    m = so.Reduced(mech, eps)
    m.set_jitter(0)
    P = np.geomspace(1e-3, 0.999, 3000)
    B = binom.pmf(np.arange(m.n + 1)[None, :], m.n, P[:, None])
    F = np.array([np.convolve(b, m.w) for b in B])  # exact law of Y~ over m.kv, per p
    below = np.cumsum(F, axis=1) - 0.5 * F  # mid-p P(Y~ < k) + P(Y~ = k)/2
    above = 1.0 - below  # mid-p P(Y~ > k) + P(Y~ = k)/2
    zl, zu = m.z_of_d(m.d_crate(True))
    a_l = norm.sf(np.interp(np.log(P), np.log(m.p), zl))[:, None]
    a_u = norm.sf(np.interp(np.log(P), np.log(m.p), zu))[:, None]
    rules = {
        "crate (normal)": m.ends(zl, zu),
        "normal floor": m.ends(np.full(m.p.shape, norm.isf(ALPHA)), np.full(m.p.shape, norm.isf(ALPHA))),
        "exact equal tails": hull(P, (below > ALPHA / 2) & (above > ALPHA / 2)),
        "exact crate split": hull(P, (below > a_l) & (above > a_u)),
        "exact floor": hull(P, (below > ALPHA) & (above > ALPHA)),
    }
    print(f"{mech} eps={eps:g}, public sizes, n={m.n}, p_x={m.px} known: median width / paper's (X known)")
    print("  " + " ".join(f"{'p0 = ' + str(p):>11s}" for p in P0S) + "   rule (exact min coverage over p in [0.03, 0.9])")
    cov_ps = np.linspace(0.03, 0.9, 120)
    for name, (lo, hi) in rules.items():
        W = m.widths(lo, hi)
        ratios = []
        for p0 in P0S:
            f0 = m.pmf(p0)
            o = np.argsort(W)
            c = np.cumsum(f0[o])
            ratios.append(W[o][np.searchsorted(c, 0.5)] / m.paper_reduced(p0))
        cov = m.coverage(lo, hi, cov_ps)
        print("  " + " ".join(f"{r:11.3f}" for r in ratios) + f"   {name} ({cov.min():.4f})", flush=True)


if __name__ == "__main__":
    for mech, eps in so.SETTINGS:
        run(mech, eps)
