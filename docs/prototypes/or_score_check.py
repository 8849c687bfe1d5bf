"""Independent check of the noise-aware score interval for the odds ratio
(src/stats/score/odds_ratio.rs, docs/intervals.md section 2); values for the unit test
`odds_ratio_score_interval_matches_independent_computation`.

Written apart from the Rust code, with a different algorithm at every step:
* the restricted MLE under OR = theta by root-finding (brentq) on the margin equation
  n_x p_x(p_y) + n_y p_y = x + y, p_x(p_y) = theta p_y / (1 - p_y + theta p_y), not the quadratic;
* the statistic in Miettinen & Nurminen's (1985) form Delta / sqrt(Var Delta), Delta = x - n_x p_x,
  with Var Delta = (B^2 V_x + A^2 V_y) / (A + B)^2, A = n_x p_x q_x, B = n_y p_y q_y and
  V = n^2 v(p) the variance of a released count (v of docs/intervals.md section 1, noise included):
  the first-order variance of Delta when the restricted MLE moves with the margin
  (d(n_x p_x)/d(x + y) = A/(A + B)). Without noise V_x = A, V_y = B and T^2 is MN's chi-square
  Delta^2 (1/A + 1/B) (without their factor N/(N - 1));
* the ends by brentq on ln theta.

    python3 or_score_check.py
"""
import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm


def restricted(theta, x, nx, y, ny):
    m = x + y
    px_of = lambda py: theta * py / (1 - py + theta * py)
    f = lambda py: nx * px_of(py) + ny * py - m
    py = brentq(f, 0.0, min(1.0, m / ny), xtol=1e-15, rtol=1e-15)
    return px_of(py), py


def arm_var(p, n, s2, private):
    w = p * p + (1 - p) ** 2 if private else 1.0
    return p * (1 - p) / n + s2 * w / n**2


def T(theta, x, nx, y, ny, s2, private):
    px, py = restricted(theta, x, nx, y, ny)
    A, B = nx * px * (1 - px), ny * py * (1 - py)
    Vx, Vy = nx**2 * arm_var(px, nx, s2, private), ny**2 * arm_var(py, ny, s2, private)
    delta = x - nx * px
    return delta / np.sqrt((B * B * Vx + A * A * Vy) / (A + B) ** 2)


def interval(x, nx, y, ny, s2, private, conf=0.95, upper_share=0.7):
    alpha = 1 - conf
    zl, zu = norm.ppf(1 - (1 - upper_share) * alpha), norm.ppf(1 - upper_share * alpha)
    t = lambda lt: T(np.exp(lt), x, nx, y, ny, s2, private)
    lo = brentq(lambda lt: t(lt) - zl, -20, 20, xtol=1e-14)
    hi = brentq(lambda lt: t(lt) + zu, -20, 20, xtol=1e-14)
    return np.exp(lo), np.exp(hi)


if __name__ == "__main__":
    # No noise, equal tails: the classical Miettinen-Nurminen odds-ratio interval (without
    # N/(N-1)); 30/70 split: the crate's tails.
    for share in (0.5, 0.7):
        print("no noise 40/200 vs 20/200, upper share", share,
              interval(40, 200, 20, 200, 0.0, False, upper_share=share))
        print("no noise 7/34 vs 1/34, upper share", share,
              interval(7, 34, 1, 34, 0.0, False, upper_share=share))
    # With noise s^2 = 8, both size modes (the worked example of docs/intervals.md).
    for private in (False, True):
        print("s2=8 40/200 vs 20/200 private" if private else "s2=8 40/200 vs 20/200 public",
              interval(40, 200, 20, 200, 8.0, private))
    th = 3.0
    px, py = restricted(th, 40, 200, 20, 200)
    print("restricted at theta=3:", px, py, "T public:", T(th, 40, 200, 20, 200, 8.0, False))
