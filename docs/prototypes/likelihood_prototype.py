"""Prototype (not used by the crate or CI; numpy + scipy): a profile-likelihood interval for the
relative risk from the EXACT law of the released counts (binomial convolved with the discrete
noise), public sizes, against the paper's conservative interval and the crate's score interval
(30/70 split). docs/intervals.md section 6 quotes its output. Usage, from docs/prototypes/:

    python3 likelihood_prototype.py laplace 0.5 2000 [equal]

The signed root r(theta) = sign(theta_hat - theta) * sqrt(2 (l_max - l_profile(theta))) is
inverted at z_L / z_U (the score interval's 30/70 split) or at 1.96 both ("equal").
"""
import os, sys, numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import score_prototype as sp
from scipy.stats import binom, norm

def law_matrix(n, noise, G):
    # f[g, xt - lo] = P(Xt = xt | p = G[g]) for the exact discrete noise law
    if noise.mech == 'laplace':
        K = int(np.ceil(60 / -np.log(noise.q)))
        k = np.arange(-K, K + 1)
        w = (1 - noise.q) / (1 + noise.q) * noise.q ** np.abs(k)
    else:
        k = noise.k; w = np.diff(np.concatenate([[0], noise.cdf]))
    lo = -k.max(); hi = n + k.max()
    xs = np.arange(lo, hi + 1)
    B = binom.pmf(np.arange(n + 1)[None, :], n, G[:, None])  # g x (n+1)
    C = np.zeros((n + 1, len(xs)))
    for j in range(n + 1):
        C[j, j - lo + k.min(): j - lo + k.max() + 1] = w
    F = B @ C
    return np.log(np.maximum(F, 1e-300)), lo

def lr_ci(xt, yt, n, logF, lo, G, thetas, zl, zu):
    M = len(G) - 1
    Py = G[1:-1]                                  # p_y candidates
    ly = logF[1:-1, int(yt) - lo]                 # log f_y(yt; p_y)
    lxall = logF[:, int(xt) - lo]
    # unrestricted max
    lmax = lxall.max() + ly.max()
    prof = np.empty(len(thetas))
    for i, t in enumerate(thetas):
        px = t * Py
        ok = px <= 1
        idx = np.rint(px[ok] * M).astype(int)
        prof[i] = (lxall[idx] + ly[ok]).max()
    d = 2 * (lmax - prof)
    d = np.maximum(d, 0)
    that = thetas[np.argmin(d)]
    r = np.sign(that - thetas) * np.sqrt(d)       # signed root, decreasing in theta
    acc = (r <= zl) & (r >= -zu)
    if not acc.any():
        return that, that
    lo_t = thetas[acc].min() if not acc[0] else 0.0
    hi_t = thetas[acc].max() if not acc[-1] else np.inf
    return lo_t, hi_t

def cell(n, eps, mech, px, py, m, zl, zu, seed=1):
    """Coverage and median width (over the paper's) of the three intervals in one cell."""
    noise = sp.Noise(mech, eps)
    G = np.linspace(0, 1, 2001)
    logF, lo = law_matrix(n, noise, G)
    rng = np.random.default_rng(seed)
    x, nx, y, ny = sp.release(rng, n, px, py, noise, False, m)
    plo, phi, _, _ = sp.paper(x, nx, y, ny, noise.var, False)
    slo, shi = sp.score_split(x, nx, y, ny, noise.var, False, a_low=0.015, a_up=0.035)
    thetas = np.exp(np.linspace(np.log(0.02), np.log(200), 700))
    L = np.empty(m); H = np.empty(m)
    for i in range(m):
        L[i], H[i] = lr_ci(x[i], y[i], n, logF, lo, G, thetas, zl, zu)
    t = px / py
    cov = lambda a, b: np.mean((a <= t) & (t <= b))
    wref = np.median(phi - plo)
    print(f"{mech} eps={eps} n={n} ({px},{py}) paper cov {cov(plo,phi):.3f} | score cov {cov(slo,shi):.3f} w {np.median(shi-slo)/wref:.3f} | LR cov {cov(L,H):.3f} w {np.median(H-L)/wref:.3f} inf {np.mean(np.isinf(H)):.3f}", flush=True)

if __name__ == '__main__':
    mech = sys.argv[1]; eps = float(sys.argv[2]); m = int(sys.argv[3])
    zl, zu = norm.ppf(1 - 0.015), norm.ppf(1 - 0.035)
    if len(sys.argv) > 4 and sys.argv[4] == 'equal':
        zl = zu = norm.ppf(0.975)
    for px, py in [(0.5, 0.1), (0.1, 0.1), (0.9, 0.1), (0.5, 0.2), (0.5, 0.5)]:
        cell(200, eps, mech, px, py, m, zl, zu)
