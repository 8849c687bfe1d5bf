"""Prototype (not used by the crate or CI; numpy + scipy): coverage at rare outcomes off the
paper's grid, n = 200, 95%, 20,000 tables per point, of the relative risk's score interval, the
paper's interval, Woolf + noise (dp_or_ci's `conservative`) and the odds ratio's score interval
(ported from src/stats/score/odds_ratio.rs: the restricted risks, the statistic, whole-range
bisection). docs/intervals.md section 6 quotes its output. Usage, from docs/prototypes/:

    python3 off_grid_coverage.py
"""
import os, sys, numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import score_prototype as sp
from scipy.stats import norm
ZL, ZU = norm.ppf(1 - 0.3 * 0.05), norm.ppf(1 - 0.7 * 0.05)
Z = norm.ppf(0.975)

def or_restricted_py(theta, m, nx, ny):
    a = ny * (theta - 1.0); b = nx * theta + ny - m * (theta - 1.0)
    rd = np.sqrt(np.maximum(b * b + 4 * a * m, 0))
    with np.errstate(divide='ignore', invalid='ignore'):
        root = np.where(b >= 0, 2 * m / (b + rd), (rd - b) / (2 * a))
    root = np.where(m <= 0, 0.0, root)
    return np.clip(root, 0, np.minimum(m / ny, 1))

def or_T(theta, x, nx, y, ny, s2, private):
    xc, yc = np.clip(x, 0, nx), np.clip(y, 0, ny)
    py = or_restricted_py(theta, xc + yc, nx, ny)
    qy = or_restricted_py(1 / theta, (nx - xc) + (ny - yc), nx, ny)
    on, od = theta * py, qy
    px, qx = on / (on + od), od / (on + od)
    gx, gy = px * qx, py * qy
    num = (x / nx - px) * gy - (y / ny - py) * gx
    def av(p, q, n):
        w = p * p + q * q if private else 1.0
        return p * q / n + s2 * w / n**2
    v = av(px, qx, nx) * gy * gy + av(py, qy, ny) * gx * gx
    with np.errstate(divide='ignore', invalid='ignore'):
        # as the crate's score::standardised: 0 where both vanish (no cases left after clamping)
        return np.where(v > 0, num / np.sqrt(v), np.where(num == 0, 0.0, np.sign(num) * np.inf))

def or_score(x, nx, y, ny, s2, private):
    nx, ny = np.maximum(nx, 1), np.maximum(ny, 1)
    T = lambda u: or_T(np.exp(u), x, nx, y, ny, s2, private)
    R = 28.0
    tl, th = T(np.full(x.shape, -R)), T(np.full(x.shape, R))
    def cross(level):
        a = np.full(x.shape, -R); b = np.full(x.shape, R)
        for _ in range(60):
            mid = (a + b) / 2; ok = T(mid) - level > 0
            a = np.where(ok, mid, a); b = np.where(ok, b, mid)
        return (a + b) / 2
    lo = np.where(tl > ZL, np.exp(cross(ZL)), 0.0)
    hi = np.where(th >= -ZU, np.inf, np.exp(cross(-ZU)))
    lo = np.where(th > ZL, np.inf, np.where(tl < -ZU, 0.0, lo))
    hi = np.where(th > ZL, np.inf, np.where(tl < -ZU, 0.0, hi))
    return lo, hi

def woolf(x, nx, y, ny, s2, private):
    a = np.maximum(x, 1); b = np.maximum(nx - x, 1); c = np.maximum(y, 1); d = np.maximum(ny - y, 1)
    v = 1/a + 1/b + 1/c + 1/d
    v = v + s2 * ((1/a**2 + 1/b**2 + 1/c**2 + 1/d**2) if private else ((1/a + 1/b)**2 + (1/c + 1/d)**2))
    lc = np.log(a * d / (b * c)); h = Z * np.sqrt(v)
    return np.exp(lc - h), np.exp(lc + h)

def rr_score(*a):
    return sp.score_split(*a, a_low=0.015, a_up=0.035)

m = 20000; n = 200
for mech, eps in [('gaussian', 0.5), ('laplace', 0.5), ('gaussian', 1.0), ('laplace', 1.0)]:
    noise = sp.Noise(mech, eps)
    for private in (False, True):
        for px, py in [(0.5, 0.011), (0.5, 0.03), (0.5, 0.05), (0.011, 0.5), (0.989, 0.5), (0.5, 0.989)]:
            rng = np.random.default_rng(7)
            x, nx, y, ny = sp.release(rng, n, px, py, noise, private, m)
            rr = px / py; orr = px * (1 - py) / ((1 - px) * py)
            cov = lambda f, t: np.mean((lambda l, h: (l <= t) & (t <= h))(*f(x, nx, y, ny, noise.var, private)))
            print(f"{mech} eps={eps} {'private' if private else 'public '} ({px},{py}): RR score {cov(rr_score, rr):.3f} RR paper {cov(lambda *a: sp.paper(*a)[:2], rr):.3f} | OR woolf {cov(woolf, orr):.3f} OR score {cov(or_score, orr):.3f}", flush=True)
