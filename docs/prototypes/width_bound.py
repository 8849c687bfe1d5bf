"""Prototype of docs/intervals.md section 5 (not used by the crate or CI): lower bound on the median width of ANY interval with coverage >= 1 - a at every parameter.

For a cell (p_x, p_y) and an alternative p_y' < p_y (theta' = p_x/p_y' > theta): an interval
valid at (p_x, p_y') excludes theta' with probability <= a there, so {exclude theta'} is a
level-a test of p_y' against p_y; by Neyman-Pearson its power at p_y is at most beta(p_y'),
the power of the most powerful level-a test (likelihood ratio of the released counts of the
unexposed arm; the exposed arm's law does not depend on p_y). Hence under (p_x, p_y)
P(upper >= theta') >= 1 - beta and P(width >= theta' - theta) >= 1 - beta - a (the interval also
misses theta from below with prob <= a). If 1 - beta - a >= 1/2 the median width is at least
theta' - theta. Same with p_x' > p_x (upper arm), and p_y' > p_y, p_x' < p_x (lower arm).
"""
import numpy as np
import sys
from scipy.stats import binom
import score_prototype as sim

A = 0.05
STEPS = 22
TAIL = 25.0  # Laplace support |k| <= 25 b (tail e^-25)
TAIL_SD = 7.0  # discrete Gaussian support |k| <= 7 sigma


def noise_pmf(noise):
    if noise.mech == "laplace":
        q = noise.q
        K = int(np.ceil(-TAIL / np.log(q)))
        k = np.arange(-K, K + 1)
        w = q ** np.abs(k)
    else:
        k = noise.k
        w = np.diff(np.concatenate([[0], noise.cdf]))
        keep = np.abs(k) <= TAIL_SD * noise.sigma
        k, w = k[keep], w[keep]
    return k, w / w.sum()


def released_pmf(n, p, noise, private):
    """pmf of the released counts of one arm: public: X+L over its support (1-D);
    private: (X+L1, n-X+L2) flattened (2-D)."""
    k, w = noise_pmf(noise)
    bx = binom.pmf(np.arange(n + 1), n, p)
    if not private:
        return np.convolve(bx, w)
    # U = X + L1 (index x + k), V = n - X + L2
    m = len(w)
    out = np.zeros((n + m, n + m))
    for x in range(n + 1):
        if bx[x] < 1e-300:
            continue
        out[x:x + m, n - x:n - x + m] += bx[x] * np.outer(w, w)
    return out.ravel()


def np_power(f0, f1, a=A):
    """Power of the most powerful (randomised) level-a test of f0 against f1."""
    lr = np.where(f0 > 0, f1 / np.maximum(f0, 1e-300), np.inf)
    order = np.argsort(-lr)
    c0 = np.cumsum(f0[order])
    idx = np.searchsorted(c0, a)
    power = f1[order][:idx].sum()
    rest = a - (c0[idx - 1] if idx > 0 else 0.0)
    if idx < len(order) and f0[order][idx] > 0:
        power += f1[order][idx] * rest / f0[order][idx]
    return power


def arm_bound(n, p, noise, private, direction, need=0.5):
    """Most extreme p' (beyond p in `direction`) still accepted with prob >= need + A."""
    f1 = released_pmf(n, p, noise, private)
    lo, hi = (1e-6, p) if direction < 0 else (p, 1 - 1e-6)
    # power decreases as p' approaches p: find p' where 1 - power - A = need
    for _ in range(STEPS):
        mid = (lo + hi) / 2
        f0 = released_pmf(n, mid, noise, private)
        ok = 1 - np_power(f0, f1) - A >= need  # cannot reject p'=mid often enough
        if direction < 0:
            lo, hi = (lo, mid) if ok else (mid, hi)
        else:
            lo, hi = (mid, hi) if ok else (lo, mid)
    return lo if direction < 0 else hi


def width_bound(n, px, py, noise, private):
    th = px / py
    py_lo = arm_bound(n, py, noise, private, -1)
    px_hi = arm_bound(n, px, noise, private, +1)
    py_hi = arm_bound(n, py, noise, private, +1)
    px_lo = arm_bound(n, px, noise, private, -1)
    up = max(px / py_lo, px_hi / py) - th
    low = th - min(px / py_hi, px_lo / py)
    return max(up, low)


if __name__ == "__main__":
    # python3 width_bound.py 200 [private]: cells where the bound exceeds 1.05x the paper's width
    n = int(sys.argv[1]); only_private = len(sys.argv) > 2 and sys.argv[2] == "private"
    for eps in [0.5, 1.0]:
        for mech in ["laplace", "gaussian"]:
            for private in ([True] if only_private else [False]):
                noise = sim.Noise(mech, eps)
                cells = []
                for i, px in enumerate(sim.GRID):
                    for j, py in enumerate(sim.GRID):
                        if private and not (py <= 0.35 or px <= 0.15):
                            continue
                        rng = np.random.default_rng(i * 9 + j)
                        x, nx, y, ny = sim.release(rng, n, px, py, noise, private, 10000)
                        lo, hi, _, _ = sim.paper(x, nx, y, ny, noise.var, private)
                        r = width_bound(n, px, py, noise, private) / np.median(hi - lo)
                        cells.append((round(px, 1), round(py, 1), round(r, 2)))
                big = [c for c in cells if c[2] > 1.05]
                print(f"n={n} eps={eps} {mech} {'private' if private else 'public'}: {len(big)} cells where any valid interval is > 1.05x paper: {big}", flush=True)
                print("  all:", cells, flush=True)
