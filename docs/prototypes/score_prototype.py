"""Prototype of docs/intervals.md section 5 (not used by the crate or CI; numpy + scipy).

Simulates the release exactly as the crate does (binomial arms, integer noise of the exact
discrete law per cell, private or public sizes, the same floors) and computes the paper's
conservative interval, the log interval and the score interval (equal tails: score_ci; the
crate's 30/70 split: score_split). Usage:

    python3 score_prototype.py 10000 200,100     # min coverage and width ratios per setting
"""
import numpy as np
from scipy.stats import norm
from scipy.optimize import brentq
import sys

Z = norm.ppf(0.975)
GRID = [0.1 * i for i in range(1, 10)]


def analytic_sigma(eps, delta):
    f = lambda s: norm.cdf(1 / (2 * s) - eps * s) - np.exp(eps) * norm.cdf(-1 / (2 * s) - eps * s) - delta
    return brentq(f, 1e-3, 1e4, xtol=1e-12)


class Noise:
    def __init__(self, mech, eps, delta=1e-4):
        e = eps / 2
        self.mech = mech
        if mech == "laplace":
            b = 1 / e
            q = np.exp(-1 / b)
            self.q = q
            self.var = 2 * q / (1 - q) ** 2
        else:
            s = analytic_sigma(e, delta / 2)
            k = np.arange(-int(12 * s) - 2, int(12 * s) + 3)
            w = np.exp(-k * k / (2 * s * s))
            w /= w.sum()
            self.k, self.cdf = k, np.cumsum(w)
            self.var = float((k * k * w).sum())
            self.sigma = s

    def sample(self, rng, size):
        if self.mech == "laplace":
            g1 = rng.geometric(1 - self.q, size) - 1
            g2 = rng.geometric(1 - self.q, size) - 1
            return g1 - g2
        u = rng.random(size)
        return self.k[np.searchsorted(self.cdf, u)]


def release(rng, n, px, py, noise, private, m):
    X = rng.binomial(n, px, m)
    Y = rng.binomial(n, py, m)
    Xt = X + noise.sample(rng, m)
    Yt = Y + noise.sample(rng, m)
    if private:
        nx = Xt + (n - X) + noise.sample(rng, m)
        ny = Yt + (n - Y) + noise.sample(rng, m)
    else:
        nx = np.full(m, n)
        ny = np.full(m, n)
    return Xt.astype(float), nx.astype(float), Yt.astype(float), ny.astype(float)


def paper(x, nx, y, ny, s2, private):
    nx, ny = np.maximum(nx, 1), np.maximum(ny, 1)
    x, y = np.maximum(x, 1), np.maximum(y, 1)
    c = (x / nx) / (y / ny)
    v2 = np.maximum(1 / x - 1 / nx, 0) + np.maximum(1 / y - 1 / ny, 0)
    if private:
        wx = np.clip(x / nx, 0, 1); wx = wx**2 + (1 - wx) ** 2
        wy = np.clip(y / ny, 0, 1); wy = wy**2 + (1 - wy) ** 2
    else:
        wx = wy = 1.0
    v2 = v2 + s2 * (wx / x**2 + wy / y**2)
    h = Z * c * np.sqrt(v2)
    return np.maximum(c - h, 0), c + h, v2, c


def log_ci(x, nx, y, ny, s2, private):
    lo, hi, v2, c = paper(x, nx, y, ny, s2, private)
    h = Z * np.sqrt(v2)
    return c * np.exp(-h), c * np.exp(h)


def arm_var(p, n, s2, private):
    w = p * p + (1 - p) ** 2 if private else 1.0
    return p * (1 - p) / n + s2 * w / n**2


def fm_restricted(theta, x1, n1, x2, n2):
    """Farrington-Manning / MN restricted MLE of (p1, p2) under p1 = theta p2."""
    N = n1 + n2
    A = N * theta
    B = -(n1 * theta + x1 + n2 + x2 * theta)
    C = x1 + x2
    disc = np.maximum(B * B - 4 * A * C, 0)
    p2 = (-B - np.sqrt(disc)) / (2 * A)
    p2 = np.clip(p2, 0, np.minimum(1, 1 / theta))
    return theta * p2, p2


def score_ci(x, nx, y, ny, s2, private, restricted="fm", iters=60, cc=0.0):
    """{theta : (px~ - theta py~)^2 <= z^2 V(theta)} with V at restricted estimates."""
    nx, ny = np.maximum(nx, 1), np.maximum(ny, 1)
    pxt, pyt = x / nx, y / ny  # unclamped noisy proportions
    xc, yc = np.clip(x, 0, nx), np.clip(y, 0, ny)

    def T(theta):
        if restricted == "fm":
            p1, p2 = fm_restricted(theta, xc, nx, yc, ny)
        else:  # plug-in (Fieller-like): unrestricted clamped estimates
            p1, p2 = np.clip(pxt, 0, 1), np.clip(pyt, 0, 1)
        V = arm_var(p1, nx, s2, private) + theta**2 * arm_var(p2, ny, s2, private)
        return (pxt - theta * pyt) / np.sqrt(V)

    # Bisection on log theta; T is decreasing in theta (numerically check)
    lo_b, hi_b = np.log(1e-8), np.log(1e8)
    est = np.where(pyt > 0, np.maximum(pxt, 0) / np.where(pyt > 0, pyt, 1), np.inf)
    # lower: largest theta with T(theta) >= z
    a = np.full(x.shape, lo_b); b = np.full(x.shape, hi_b)
    for _ in range(iters):
        mid = (a + b) / 2
        ok = T(np.exp(mid)) > Z
        a = np.where(ok, mid, a); b = np.where(ok, b, mid)
    lower = np.where(T(np.exp(lo_b)) > Z, np.exp(a), 0.0)
    a = np.full(x.shape, lo_b); b = np.full(x.shape, hi_b)
    for _ in range(iters):
        mid = (a + b) / 2
        ok = T(np.exp(mid)) >= -Z
        a = np.where(ok, mid, a); b = np.where(ok, b, mid)
    upper = np.where(T(np.exp(hi_b)) >= -Z, np.inf, np.exp(b))
    return lower, upper


def run(n, eps, mech, private, methods, m=10000, seed=0, cells=None):
    noise = Noise(mech, eps)
    s2 = noise.var
    res = {}
    for i, px in enumerate(GRID):
        for j, py in enumerate(GRID):
            if cells and (i, j) not in cells:
                continue
            rng = np.random.default_rng(seed * 100000 + i * 9 + j)
            x, nx, y, ny = release(rng, n, px, py, noise, private, m)
            truth = px / py
            lo, hi, _, _ = paper(x, nx, y, ny, s2, private)
            wref = np.median(hi - lo)
            out = {"paper": (np.mean((lo <= truth) & (truth <= hi)), 1.0)}
            for name, f in methods.items():
                lo2, hi2 = f(x, nx, y, ny, s2, private)
                cov = np.mean((lo2 <= truth) & (truth <= hi2))
                out[name] = (cov, np.median(hi2 - lo2) / wref, np.mean(np.isinf(hi2)))
            res[(i, j)] = out
    return res


METHODS = {
    "log": log_ci,
    "score_equal": lambda *a: score_ci(*a, restricted="fm"),
    "fieller": lambda *a: score_ci(*a, restricted="plug"),
    "score": lambda *a: score_split(*a, a_low=0.015, a_up=0.035),
}


def summary(n, eps, mech, private, m=10000, methods=METHODS, grid=False):
    res = run(n, eps, mech, private, methods, m)
    target = 0.945 if n >= 200 else 0.94 if n >= 100 else 0.93
    lab = f"n={n} eps={eps} {mech} {'private' if private else 'public'}"
    for name in ["paper"] + list(methods):
        covs = {k: v[name][0] for k, v in res.items()}
        mn = min(covs.values()); at = min(covs, key=covs.get)
        below = sum(c < target - 3 * np.sqrt(target * (1 - target) / m) for c in covs.values())
        if name == "paper":
            print(f"{lab:40s} {name:8s} min {mn:.3f} at {GRID[at[0]]:.1f},{GRID[at[1]]:.1f} below {below}")
            continue
        ratios = np.array([v[name][1] for v in res.values()])
        wide = np.sum(ratios > 1.05)
        print(f"{lab:40s} {name:8s} min {mn:.3f} at {GRID[at[0]]:.1f},{GRID[at[1]]:.1f} below {below} "
              f"wmax {np.max(ratios):.3f} wmed {np.median(ratios):.3f} wide {wide}")
        if grid:
            for i in range(9):
                print("   ", " ".join(f"{res[(i,j)][name][0]:.3f}/{res[(i,j)][name][1]:.2f}" for j in range(9)))
    sys.stdout.flush()
    return res


def score_split(x, nx, y, ny, s2, private, a_low=0.025, a_up=0.025):
    """Score interval with lower end at level a_low and upper at a_up."""
    global Z
    z0 = Z
    try:
        Z = norm.ppf(1 - a_low)
        lo, _ = score_ci(x, nx, y, ny, s2, private)
        Z = norm.ppf(1 - a_up)
        _, hi = score_ci(x, nx, y, ny, s2, private)
    finally:
        Z = z0
    return lo, hi



if __name__ == "__main__":
    m = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    ns = [int(a) for a in sys.argv[2].split(",")] if len(sys.argv) > 2 else [200]
    for n in ns:
        for eps in [0.5, 1.0]:
            for mech in ["laplace", "gaussian"]:
                for private in [True, False]:
                    summary(n, eps, mech, private, m)
