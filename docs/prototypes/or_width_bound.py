"""Prototype (not used by the crate or CI; numpy + scipy): the Neyman-Pearson lower bound on the
median width of ANY interval for the ODDS RATIO with coverage >= 1 - a at every parameter,
against the median width of the paper's construction for the odds ratio.

The argument is width_bound.py's (docs/intervals.md section 5) with theta = p_x q_y/(q_x p_y).
Moving p_y alone to p_y' changes theta to theta' = odds(p_x)/odds(p_y') and changes only the law
of the unexposed arm's released counts. An interval valid at (p_x, p_y') excludes theta' with
probability <= a there, so "exclude theta'" is a level-a test of p_y' against p_y whose power at
p_y is at most beta(p_y'), that of the most powerful (likelihood-ratio, randomised) level-a test
on that arm's released counts. Under (p_x, p_y) the interval then contains theta' with
probability >= 1 - beta and theta with probability >= 1 - a, so P(width >= |theta' - theta|) >=
1 - beta - a; where that is >= 1/2 the median width is >= |theta' - theta|. Alternatives: p_y' <
p_y and p_x' > p_x (upper arm, theta' > theta), p_y' > p_y and p_x' < p_x (lower arm). The bound
is the largest of the four |theta' - theta|.

Arm laws: public sizes: X + L (binomial convolved with the discrete noise law); private sizes:
(X + L1, n - X + L2), which even lets the interval know n (so the bound is, if anything, smaller
than for intervals that see only the release). Noise laws truncated at 25 b (Laplace, mass
outside ~e^-25) and 7 sigma (discrete Gaussian, ~1e-12) and renormalised, as in width_bound.py.
The per-arm search depends only on (n, p, noise, sizes, direction), so it is done once per
risk in the grid (18 searches per setting, not 4 x 81). The bisection returns the end of its
bracket that was verified to satisfy 1 - beta - a >= 1/2 (width_bound.arm_bound returns the
other end, off by < p 2^-22; immaterial, but this way each reported bound is a proven one).

Reference: the paper's construction for the odds ratio (ReleasedTable::
odds_ratio_paper_construction_at_z, src/stats/odds_ratio.rs): all four cells floored at 1,
OR = ad/(bc), V = Woolf + noise variance (public: s^2((1/a + 1/b)^2 + (1/c + 1/d)^2), private:
s^2(1/a^2 + 1/b^2 + 1/c^2 + 1/d^2)), [max(OR - z OR sqrt(V), 0), OR + z OR sqrt(V)], on tables
simulated with score_prototype.release (fixed seed per cell). Its median width is a Monte Carlo
estimate: each ratio is also given against the ends of the distribution-free 95% confidence
interval of that median (order statistics), and cells are flagged only on the point estimate.

Usage (from docs/prototypes):

    python3 or_width_bound.py 200                    # public sizes, 4,000 tables per cell
    python3 or_width_bound.py 200 10000 both         # public and private sizes, 10,000 tables
    python3 or_width_bound.py 200 4000 private grid  # private only, print the 9x9 ratio grids
"""
import sys
import time

import numpy as np
from scipy.stats import binom, norm

import score_prototype as sim
from width_bound import A, np_power, released_pmf

STEPS = 30
Z = norm.ppf(0.975)


def odds(p):
    return p / (1 - p)


def arm_bound(n, p, noise, private, direction, need=0.5):
    """Most extreme p' beyond p in `direction` verified to satisfy 1 - beta(p') - A >= need."""
    f1 = released_pmf(n, p, noise, private)
    ok_end = p  # at p' = p the power is A: 1 - 2A >= need
    far = 1e-6 if direction < 0 else 1 - 1e-6
    for _ in range(STEPS):
        mid = (ok_end + far) / 2
        f0 = released_pmf(n, mid, noise, private)
        if 1 - np_power(f0, f1) - A >= need:  # p' = mid cannot be rejected often enough
            ok_end = mid
        else:
            far = mid
    return ok_end


def or_bound(px, py, arms):
    """Lower bound on the median width at (px, py); arms[(p, dir)] = arm_bound(...)."""
    th = odds(px) / odds(py)
    up = max(odds(px) / odds(arms[(py, -1)]), odds(arms[(px, +1)]) / odds(py)) - th
    low = th - min(odds(px) / odds(arms[(py, +1)]), odds(arms[(px, -1)]) / odds(py))
    return max(up, low), up, low


def paper_or(x, nx, y, ny, s2, private):
    """The paper's construction for the odds ratio, as odds_ratio_paper_construction_at_z."""
    a, b = np.maximum(x, 1), np.maximum(nx - x, 1)
    c, d = np.maximum(y, 1), np.maximum(ny - y, 1)
    v = 1 / a + 1 / b + 1 / c + 1 / d
    if private:
        v = v + s2 * (1 / a**2 + 1 / b**2 + 1 / c**2 + 1 / d**2)
    else:
        v = v + s2 * ((1 / a + 1 / b) ** 2 + (1 / c + 1 / d) ** 2)
    center = a * d / (b * c)
    h = Z * center * np.sqrt(v)
    return np.maximum(center - h, 0), center + h


def median_ci(w):
    """Median and a distribution-free ~95% interval for it (order statistics)."""
    w = np.sort(w)
    m = len(w)
    k = int(binom.ppf(0.025, m, 0.5))
    return np.median(w), w[max(k - 1, 0)], w[min(m - k, m - 1)]


def run_setting(n, eps, mech, private, tables, grid=False):
    t0 = time.time()
    noise = sim.Noise(mech, eps)
    grid_p = [round(p, 1) for p in sim.GRID]
    arms = {}
    for p in grid_p:
        for d in (-1, +1):
            arms[(p, d)] = arm_bound(n, p, noise, private, d)
    rows = []
    for i, px in enumerate(grid_p):
        for j, py in enumerate(grid_p):
            rng = np.random.default_rng(i * 9 + j)
            x, nx, y, ny = sim.release(rng, n, px, py, noise, private, tables)
            lo, hi = paper_or(x, nx, y, ny, noise.var, private)
            med, mlo, mhi = median_ci(hi - lo)
            b, up, low = or_bound(px, py, arms)
            rows.append((px, py, b / med, b / mhi, b / mlo, b, med, "up" if up >= low else "low"))
    lab = f"n={n} eps={eps} {mech} {'private' if private else 'public'} sizes ({tables} tables/cell)"
    big = [r for r in rows if r[2] > 1.05]
    rest = [r[2] for r in rows if r[2] <= 1.05]
    print(f"{lab}: {len(big)} cells where the bound > 1.05 x the paper's OR median width", flush=True)
    for r in big:
        print(f"   (p_x={r[0]}, p_y={r[1]}): ratio {r[2]:.3f} [{r[3]:.3f}, {r[4]:.3f} over the median's"
              f" 95% CI], bound {r[5]:.4g} ({r[7]} arm), paper median width {r[6]:.4g}", flush=True)
    if rest:
        print(f"   elsewhere: ratio {min(rest):.3f}-{max(rest):.3f}"
              f" (largest of them at {max(rows, key=lambda r: r[2] if r[2] <= 1.05 else -1)[:2]})", flush=True)
    close = [r for r in rows if (r[3] <= 1.05 < r[4])]
    if close:
        print(f"   undecided by the Monte Carlo error (1.05 inside the ratio's CI): {[(r[0], r[1], round(r[2], 3)) for r in close]}")
    print(f"   arm searches: " + " ".join(f"{p}:{arms[(p, -1)]:.4f}/{arms[(p, 1)]:.4f}" for p in grid_p)
          + f"   ({time.time() - t0:.0f} s)", flush=True)
    if grid:
        print("   ratio grid (rows p_x = 0.1..0.9, columns p_y = 0.1..0.9):")
        for i in range(9):
            print("     ", " ".join(f"{rows[i * 9 + j][2]:6.3f}" for j in range(9)))
    return rows


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    tables = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
    sizes = sys.argv[3] if len(sys.argv) > 3 else "public"
    grid = len(sys.argv) > 4 and sys.argv[4] == "grid"
    modes = {"public": [False], "private": [True], "both": [False, True]}[sizes]
    for private in modes:
        for eps in [0.5, 1.0]:
            for mech in ["laplace", "gaussian"]:
                run_setting(n, eps, mech, private, tables, grid)
