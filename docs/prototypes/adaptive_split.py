"""Prototype (not used by the crate or CI; numpy + scipy): a data-dependent tail split for the
score intervals of the relative risk (dp_rr_ci, docs/intervals.md section 5) and the odds ratio
(dp_or_ci, section 2), against the crate's fixed 30/70 split, on the same simulated releases.

What. Each end of a score interval is a one-sided score test of H0: ratio = theta. The crate
spends alpha_L = 0.3 alpha on the lower end and alpha_U = 0.7 alpha on the upper end at every
theta. Here the split at a candidate theta is a function of the restricted estimates
(p_x(theta), p_y(theta)) the score test already computes. With v(p) the variance of a released
proportion (section 1, noise included), s(theta) the delta-method SE of the log ratio and c_D the
coefficient of variation of the ratio's denominator factors, all at the restricted estimates,

    RR: s^2 = v_x/p_x^2 + v_y/p_y^2,                  c_D^2 = v_y/p_y^2
    OR: s^2 = v_x/(p_x q_x)^2 + v_y/(p_y q_y)^2,      c_D^2 = v_x/q_x^2 + v_y/p_y^2
        (OR = p_x q_y / (q_x p_y): the denominator factors are q_x and p_y)

    rule "den":  z_L - z_U = d = K c_D^2 / s,  K = 4,
    rule "denf": d = max(K c_D^2 / s, z_.015 - z_.035 = 0.3582)  (never more even than 30/70),

and (z_L, z_U) = (z_c + d/2, z_c - d/2) with z_c solving Phi(-z_L) + Phi(-z_U) = alpha.

Why. (1) Level: under H0 the score statistic is asymptotically N(0, 1) and independent of the
restricted estimates (the efficient score is orthogonal to the nuisance), so given the split the
two tails have sizes alpha_L, alpha_U adding to alpha whatever the split is: coverage stays at
1 - alpha to first order, as with any fixed split (the split only moves error between the ends).
(2) Width: an interval [theta_L, theta_U] whose ends move with z as theta^ + z sigma + z^2 kappa
has, subject to Phi(-z_L) + Phi(-z_U) = alpha, its shortest length where (Lagrange, to first
order) z_L - z_U = 4 kappa / sigma. For the ratio N/D of two noisy terms with relative errors
a = c_N, b = c_D the score (Fieller) ends solve 1 - r = -+ z sqrt(a^2 + r^2 b^2), r = theta/theta^,
so r - 1 = z s + z^2 b^2 + ..., s^2 = a^2 + b^2: kappa/sigma = b^2/s and d = 4 c_D^2 / s. Only the
denominator makes a ratio skewed; an all-numerator error (b = 0) is symmetric (d = 0), a
log-normal one (a = b) gives d = 2 s. (3) The ends stay single crossings: moving theta up
lowers p_y(theta), raising c_D and d, so z_U falls and z_L rises exactly where T falls: T + z_U
and T - z_L stay decreasing where T does (`count_gaps`: no gapped acceptance set for the RR in
the cells checked; the OR's T itself is not monotone near (0.9, 0.1) and (0.1, 0.9), 1-7% of
tables with the fixed split too, about the same with the rule). K = 4 is the theory's value; a screen over
K = 3, 4, 5 (seed 1) was flat, K was not tuned. "denf" adds the crate's own split as a floor: in
the OR's top-right corner (p_x small, p_y large: both numerator factors small, whose binomial
variance grows with theta, a skew the Fieller term omits) "den" goes nearly even and widens the
interval by up to 0.04-0.12 of the reference; the floor removes that.

Variants kept for the record (worse): "log", d = K s with a floor alpha_L >= M alpha (without the
floor z_L -> oo as theta -> 0 and every acceptance set contains a neighbourhood of 0); "curv", d
from the statistic's own curvature in ln theta at the candidate (`curvature_stat`).

Reused: score_prototype.py (release, Noise, paper, fm_restricted, arm_var, score_split),
or_width_bound.paper_or, and off_grid_coverage.py's vectorised OR score functions (or_T,
or_restricted_py, or_score: loaded without running that script's loop). Both intervals are
inverted by `invert`, which searches each end from the estimate like the crate's
invert_score_test; `sanity` checks it against score_split and or_score.

Usage, from docs/prototypes/ (rules: kind:K[:M], comma-separated; default den:4):

    python3 adaptive_split.py grid 200 4000 both --rules=den:4,denf:4      # 8 n=200 settings
    python3 adaptive_split.py grid 100 4000 public --rules=denf:4          # 4 public n=100 settings
    python3 adaptive_split.py grid 50 4000 both 0.5 --rules=denf:4         # n=50, eps=0.5
    python3 adaptive_split.py grid 200 2000 public 0.5 laplace --rules=den:3,den:5 --seed=1 --cells
    python3 adaptive_split.py offgrid 20000 --rules=denf:4                 # rare outcomes, n=200
    python3 adaptive_split.py splits --rules=den:4                         # z_L, z_U against d/K
    python3 adaptive_split.py sanity                                       # invert == prototypes
    python3 adaptive_split.py check                  # exact "denf" ends for the crate's unit tests

Per setting and method: min coverage (where), cells below target - 3 SE, max and median per-cell
median-width ratio to the paper's construction (RR: score_prototype.paper; OR: paper_or), cells
with ratio > 1.05, and the largest share of unbounded intervals in a cell ([inf, inf] counts as
unbounded). `--cells` prints the per-cell "coverage/ratio" grid (rows p_x, columns p_y).
"""
import ast
import os
import sys

import numpy as np
from scipy.stats import norm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import score_prototype as sp  # noqa: E402
from or_width_bound import paper_or  # noqa: E402

ALPHA = 0.05
# --uncentred: the odds ratio's statistic before session 10 (no centring, no skewness term).
UNCENTRED = "--uncentred" in sys.argv
# --unweighted: the second-order terms applied in full, as in sessions 10-11 (the crate since
# session 12 weights them by or_score_mean.expansion_weight).
UNWEIGHTED = "--unweighted" in sys.argv
# The statistics divided by the delta method's variance alone (before session 13).
DELTA_VARIANCE = "--delta-variance" in sys.argv
# --no-skewness: centred, but without the Cornish-Fisher quantiles.
NO_SKEWNESS = "--no-skewness" in sys.argv
# --kurtosis: the Cornish-Fisher quantiles to the next order, with the excess kurtosis of the
# statistic's linear part (or_score_mean.or_kurtosis; not in the crate).
KURTOSIS = "--kurtosis" in sys.argv
# --normal-laplace: instead of the fourth-order term, the quantile of a normal plus a Laplace
# law whose excess kurtosis is the statistic's (3 w^2 for a Laplace share w of the variance),
# then the skewness term as in the crate (session 12; nl_quantile).
NORMAL_LAPLACE = "--normal-laplace" in sys.argv
# The fourth cumulant of the cell noise as a function of its variance, for the odds ratio's
# skewness: 0 (Gaussian) unless run_setting sets the discrete Laplace's.
NOISE_K4 = lambda s2: 0.0  # noqa: E731


def _load_off_grid():
    """off_grid_coverage.py's definitions (imports, constants, functions), not its loop."""
    path = os.path.join(HERE, "off_grid_coverage.py")
    tree = ast.parse(open(path).read(), path)
    keep = [nd for nd in tree.body
            if isinstance(nd, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign))
            and not (isinstance(nd, ast.Assign) and any(getattr(t, "id", "") in ("m", "n") for t in nd.targets))]
    ns = {"__file__": path, "__name__": "off_grid_coverage"}
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), ns)
    return ns


OG = _load_off_grid()
or_T, or_restricted_py, or_score = OG["or_T"], OG["or_restricted_py"], OG["or_score"]
assert abs(OG["ZL"] - 2.1701) < 1e-4 and abs(OG["ZU"] - 1.8119) < 1e-4


# ---- the split rule -------------------------------------------------------------------------

def _zc_table(dmax=12.0, step=1e-3):
    """z_c(d) solving Phi(-(z_c + d/2)) + Phi(-(z_c - d/2)) = alpha (vectorised bisection)."""
    d = np.arange(0.0, dmax + step, step)
    a, b = np.full(d.shape, 0.5), np.full(d.shape, 20.0)
    for _ in range(80):
        mid = (a + b) / 2
        big = norm.sf(mid + d / 2) + norm.sf(mid - d / 2) > ALPHA  # error too large: raise z_c
        a, b = np.where(big, mid, a), np.where(big, b, mid)
    return d, (a + b) / 2


D_GRID, ZC_GRID = _zc_table()


def critical(sr, k=4.0, m=0.0, kind="den"):
    """(z_L, z_U) with z_L - z_U = d, Phi(-z_L) + Phi(-z_U) = alpha, alpha_L >= m alpha;
    d = k c_D^2 / s ("den") or k s ("log"); sr = (s, c_D^2 / s) from rr_stat / or_stat."""
    base = sr[1] if kind in ("den", "denf") else sr[0]
    d = np.minimum(k * np.nan_to_num(base, nan=np.inf, posinf=np.inf), D_GRID[-1])
    if kind == "denf":  # variant: never more symmetric than the crate's 30/70
        d = np.maximum(d, norm.isf(0.3 * ALPHA) - norm.isf(0.7 * ALPHA))
    zc = np.interp(d, D_GRID, ZC_GRID)
    zl, zu = zc + d / 2, zc - d / 2
    if m > 0:
        zl_max = norm.isf(m * ALPHA)
        cap = zl > zl_max
        zl = np.where(cap, zl_max, zl)
        zu = np.where(cap, norm.isf(ALPHA - m * ALPHA), zu)
    if len(sr) > 2:  # the odds ratio's skewness (or_stat, centred), and with --kurtosis its
        # excess kurtosis: Cornish-Fisher quantiles
        zl, zu = cornish_fisher_bounds(zl, zu, sr[2], sr[3] if len(sr) > 3 else None)
    return zl, zu


def fixed_critical(share_up=0.7):
    zl, zu = norm.isf((1 - share_up) * ALPHA), norm.isf(share_up * ALPHA)
    return lambda sr: (np.full(np.shape(sr[0]), zl), np.full(np.shape(sr[0]), zu))


# ---- statistics and log-ratio standard errors at the restricted estimates --------------------

def contrast_variance(cx, cy, vx, vy, px, py, nx, ny, s2, private):
    """The crate's ScoreCounts::contrast_variance (session 13): the exact variance of
    c_x p~_x - c_y p~_y under H0, times n_x n_y a bilinear form in independent arms (Goodman
    1960); with private sizes the delta method's c_x^2 v_x + c_y^2 v_y gains the size noises'
    terms. --delta-variance: the delta method alone, as before session 13."""
    if not private or DELTA_VARIANCE:
        return cx * cx * vx + cy * cy * vy
    kx, ky = s2 * (1 - 2 * px) / nx**2, s2 * (1 - 2 * py) / ny**2
    return cx * cx * vx * (1 + 2 * s2 / ny**2) + cy * cy * vy * (1 + 2 * s2 / nx**2) - 2 * cx * cy * kx * ky


def rr_stat(theta, x, nx, y, ny, s2, private):
    """score_prototype.score_ci's T (FM restricted), divided by the exact contrast variance
    since session 13, and s(theta) at the same restricted risks."""
    pxt, pyt = x / nx, y / ny
    p1, p2 = sp.fm_restricted(theta, np.clip(x, 0, nx), nx, np.clip(y, 0, ny), ny)
    v1, v2 = sp.arm_var(p1, nx, s2, private), sp.arm_var(p2, ny, s2, private)
    t = (pxt - theta * pyt) / np.sqrt(contrast_variance(1.0, theta, v1, v2, p1, p2, nx, ny, s2, private))
    with np.errstate(divide="ignore", invalid="ignore"):
        cn2, cd2 = v1 / p1**2, v2 / p2**2  # squared CVs of numerator and denominator
        s = np.sqrt(cn2 + cd2)
        r = np.where(np.isfinite(cd2), cd2 / s, np.inf)
    return t, (np.where(np.isfinite(s), s, np.inf), np.nan_to_num(r, nan=0.0))


def or_stat(theta, x, nx, y, ny, s2, private):
    """off_grid_coverage.or_T, centred by or_score_mean.or_mean (the crate since session 10;
    --uncentred for the statistic of the runs quoted above), and s(theta) at the same
    restricted risks. The sizes arrive floored (invert floors them), so the crate's numerator
    for a size released below 1 (session 13: X~ - p ñ with ñ as released) is not modelled;
    it differs only in those releases."""
    t = or_T(theta, x, nx, y, ny, s2, private)
    gamma = kurt = None
    if not UNCENTRED:
        from or_score_mean import expansion_weight, or_kurtosis, or_mean, or_skewness
        k4 = NOISE_K4(s2) if s2 > 0 else 0.0
        with np.errstate(all="ignore"):
            # Both second-order terms weighted as the crate does since session 12 (--unweighted
            # for the statistic before it).
            w = 1.0 if UNWEIGHTED else expansion_weight(theta, x, nx, y, ny, s2, private)
            mu = w * or_mean(theta, x, nx, y, ny, s2, private)
            gamma = w * or_skewness(theta, x, nx, y, ny, s2, private, k4)
            if KURTOSIS or NORMAL_LAPLACE:
                kurt = np.nan_to_num(or_kurtosis(theta, x, nx, y, ny, s2, private, k4),
                                     nan=0.0, posinf=0.0, neginf=0.0)
        t = t - np.where(np.isfinite(mu), mu, 0.0)
        gamma = np.clip(np.nan_to_num(gamma, nan=0.0, posinf=0.0, neginf=0.0), -0.5, 0.5)
    xc, yc = np.clip(x, 0, nx), np.clip(y, 0, ny)
    py = or_restricted_py(theta, xc + yc, nx, ny)
    qy = or_restricted_py(1 / theta, (nx - xc) + (ny - yc), nx, ny)
    on, od = theta * py, qy
    with np.errstate(divide="ignore", invalid="ignore"):
        px = on / (on + od)
        qx = od / (on + od)
        vx, vy = sp.arm_var(px, nx, s2, private), sp.arm_var(py, ny, s2, private)
        # or_T and or_mean are in units of the delta method's SD; since session 13 the crate
        # divides the centred numerator by the exact contrast variance's (contrast_variance).
        gx, gy = px * qx, py * (1 - py)
        t = t * np.sqrt((vx * gy * gy + vy * gx * gx)
                        / contrast_variance(gy, gx, vx, vy, px, py, nx, ny, s2, private))
        s = np.sqrt(vx / (px * qx) ** 2 + vy / (py * (1 - py)) ** 2)
        cd2 = vx / qx**2 + vy / py**2  # OR = p_x q_y / (q_x p_y): denominator factors q_x, p_y
        r = np.where(np.isfinite(cd2), cd2 / s, np.inf)
    sr = (np.where(np.isfinite(s), s, np.inf), np.nan_to_num(r, nan=0.0))
    if gamma is None or NO_SKEWNESS:
        return t, sr
    return t, sr + (gamma,) if kurt is None else sr + (gamma, kurt)


def cornish_fisher(z, gamma):
    """The crate's score::cornish_fisher: gamma (z^2 - 1)/6 with z capped at 3 (gamma arrives
    clamped to +-0.5 from or_stat)."""
    zc = np.minimum(z, 3.0)
    return gamma * (zc * zc - 1) / 6


def cornish_fisher_bounds(zl, zu, gamma, kurt=None):
    """The acceptance bounds (z_L', z_U'), -z_U' <= T <= z_L', from the split's quantiles: the
    crate's (TailSplit::quantiles_at, the skewness term) and, given the excess kurtosis `kurt`
    (not in the crate; --kurtosis, or_score_mean.py kurt), the next order of the expansion,
    k (z^3 - 3z)/24 - gamma^2 (2z^3 - 5z)/36, with z capped at 3 as for the first."""
    zl2, zu2 = zl + cornish_fisher(zl, gamma), zu - cornish_fisher(zu, gamma)
    if kurt is None:
        return zl2, zu2
    if NORMAL_LAPLACE:
        w = laplace_share(kurt)
        return zl2 + nl_shift(zl, w), zu2 + nl_shift(zu, w)
    even = lambda z: (kurt * (np.minimum(z, 3.0) ** 3 - 3 * np.minimum(z, 3.0)) / 24  # noqa: E731
                      - gamma**2 * (2 * np.minimum(z, 3.0) ** 3 - 5 * np.minimum(z, 3.0)) / 36)
    return zl2 + even(zl), zu2 + even(zu)


def nl_sf(x, w):
    """P(X > x) for X = sqrt(1 - w) Z + sqrt(w) L, Z standard normal, L a unit-variance Laplace
    (scale b = sqrt(w / 2)): E over Z of the Laplace's tail beyond x - sigma Z, in closed form
    (Reed & Jorgensen 2004, the normal-Laplace law)."""
    sig, b = np.sqrt(1 - w), np.sqrt(w / 2)
    if b == 0:
        return norm.sf(x)
    c, r = x / sig, sig / b
    lead = r * r / 2
    up = np.exp(lead - x / b + norm.logcdf(c - r))
    down = np.exp(lead + x / b + norm.logsf(c + r))
    return norm.sf(c) + 0.5 * (up - down)


def _nl_table(zs=np.arange(0.0, 3.0001, 0.01), ws=np.arange(0.0, 0.9901, 0.01)):
    """shift[w, z] = F_w^-1(Phi(z)) - z, the normal-Laplace quantile over the normal one, by
    bisection on nl_sf."""
    out = np.zeros((len(ws), len(zs)))
    for i, w in enumerate(ws):
        target = norm.sf(zs)
        a, b = zs.copy() - 1, zs.copy() + 6
        for _ in range(60):
            mid = (a + b) / 2
            big = nl_sf(mid, w) > target
            a, b = np.where(big, mid, a), np.where(big, b, mid)
        out[i] = (a + b) / 2 - zs
    return zs, ws, out


NL_Z, NL_W, NL_SHIFT = _nl_table() if NORMAL_LAPLACE else (None, None, None)


def laplace_share(kurt):
    """The Laplace share w of the variance with the same excess kurtosis: 3 w^2 = kurt."""
    return np.clip(np.sqrt(np.clip(kurt, 0, None) / 3), 0.0, NL_W[-1])


def nl_shift(z, w):
    """F_w^-1(Phi(z)) - z by bilinear interpolation, with z capped at 3 like the skewness term
    (beyond it the shift stays constant, so the bound stays increasing in z)."""
    z, w = np.broadcast_arrays(np.minimum(z, 3.0), w)
    fz = np.clip((z - NL_Z[0]) / 0.01, 0, len(NL_Z) - 1.000001)
    fw = np.clip(w / 0.01, 0, len(NL_W) - 1.000001)
    iz, iw = fz.astype(int), fw.astype(int)
    tz, tw = fz - iz, fw - iw
    t = NL_SHIFT
    return ((1 - tw) * ((1 - tz) * t[iw, iz] + tz * t[iw, iz + 1])
            + tw * ((1 - tz) * t[iw + 1, iz] + tz * t[iw + 1, iz + 1]))


def _crossing(g, start, R, iters=60):
    """Where g (decreasing in ln theta) crosses 0, searched from `start` as the crate's
    score::crossing: a bracket grown by doubling steps (0.25, 0.5, ...) towards the sign
    change, then bisection inside it (the crate then uses regula falsi; same root)."""
    lo, hi = start.copy(), start.copy()
    step = np.full(start.shape, 0.25)
    up = g(start) > 0
    active = up.copy()
    while active.any():  # g(start) > 0: grow upwards until g(hi) <= 0
        lo = np.where(active, hi, lo)
        hi = np.where(active, np.minimum(hi + step, R), hi)
        step = np.where(active, 2 * step, step)
        active &= ~((g(hi) <= 0) | (hi >= R))
    active = ~up
    while active.any():  # g(start) <= 0: grow downwards until g(lo) > 0
        hi = np.where(active, lo, hi)
        lo = np.where(active, np.maximum(lo - step, -R), lo)
        step = np.where(active, 2 * step, step)
        active &= ~((g(lo) > 0) | (lo <= -R))
    for _ in range(iters):
        mid = (lo + hi) / 2
        ok = g(mid) > 0
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return (lo + hi) / 2


def curvature_stat(stat, h=0.01):
    """Variant "curv": the split from the statistic's own shape at the candidate u = ln theta.
    If T(u) ~ T1 (u - u^) + T2 (u - u^)^2 / 2, the ends are u^ -+ z/|T1| + z^2 T2 / (2 |T1|^3),
    and on the theta scale the width-optimal split is z_L - z_U = d = 2 (|T1| + T2) / T1^2
    (for T = (ln theta^ - u)/s, T2 = 0: d = 2 s, the log rule). T1, T2 by central differences.
    Unlike "den" this reads the data through T (not only the restricted estimates)."""
    def wrapped(theta, *a):
        t, _ = stat(theta, *a)
        tp, _ = stat(theta * np.exp(h), *a)
        tm, _ = stat(theta * np.exp(-h), *a)
        t1, t2 = (tp - tm) / (2 * h), (tp - 2 * t + tm) / h**2
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.clip(2 * (np.abs(t1) + t2) / t1**2, 0, None)
        d = np.nan_to_num(d, nan=0.0, posinf=np.inf)
        return t, (d, d)
    return wrapped


def invert(stat, crit, x, nx, y, ny, s2, private, R=28.0, iters=60, estimate=None):
    """{theta: -z_U(theta) <= T(theta) <= z_L(theta)} on ln theta in [-R, R], end cases as the
    crate's invert_score_test (all rejected from below: [inf, inf]; from above: [0, 0]; no
    crossing: 0 resp. inf). With `estimate` (the ratio's point estimate per table) each end is
    searched from it as in the crate; without, by whole-range bisection as in
    score_prototype.score_ci and off_grid_coverage.or_score (they differ only where T is not
    monotone)."""
    nx, ny = np.maximum(nx, 1), np.maximum(ny, 1)

    def g(u):
        t, s = stat(np.exp(u), x, nx, y, ny, s2, private)
        zl, zu = crit(s)
        return t - zl, t + zu

    lo_l, lo_u = g(np.full(x.shape, -R))
    hi_l, hi_u = g(np.full(x.shape, R))

    if estimate is None:
        def cross(which):
            a = np.full(x.shape, -R); b = np.full(x.shape, R)
            for _ in range(iters):
                mid = (a + b) / 2
                ok = g(mid)[which] > 0
                a = np.where(ok, mid, a); b = np.where(ok, b, mid)
            return (a + b) / 2
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            ok = (estimate > 0) & np.isfinite(estimate)
            start = np.where(ok, np.clip(np.log(np.where(ok, estimate, 1.0)), -R, R), 0.0)
        cross = lambda which: _crossing(lambda u: g(u)[which], start, R, iters)

    lo = np.where(lo_l > 0, np.exp(cross(0)), 0.0)
    hi = np.where(hi_u >= 0, np.inf, np.exp(cross(1)))
    lo = np.where(hi_l > 0, np.inf, np.where(lo_u < 0, 0.0, lo))
    hi = np.where(hi_l > 0, np.inf, np.where(lo_u < 0, 0.0, hi))
    return lo, hi


def rr_estimate(x, nx, y, ny):
    with np.errstate(divide="ignore", invalid="ignore"):
        return (x / np.maximum(nx, 1)) / (y / np.maximum(ny, 1))


def or_estimate(x, nx, y, ny):
    """The crate's start point (odds_ratio_score_interval): x (n_y - y) / ((n_x - x) y)."""
    nx, ny = np.maximum(nx, 1), np.maximum(ny, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return x * (ny - y) / ((nx - x) * y)


def count_gaps(stat, crit, x, nx, y, ny, s2, private, R=28.0, pts=600):
    """Share of tables whose acceptance set on a ln-theta grid is not one run of points."""
    nx, ny = np.maximum(nx, 1), np.maximum(ny, 1)
    acc = []
    for u in np.linspace(-R, R, pts):
        t, s = stat(np.full(x.shape, np.exp(u)), x, nx, y, ny, s2, private)
        zl, zu = crit(s)
        acc.append((t <= zl) & (t >= -zu))
    acc = np.array(acc, dtype=int)
    runs = (np.diff(acc, axis=0) == 1).sum(axis=0) + acc[0]
    return np.mean(runs > 1)


# ---- driver -----------------------------------------------------------------------------------

def methods(rules):
    """name -> (ratio, interval function): the fixed 30/70 split and each adaptive rule, all
    through `invert` with the crate's search from the estimate (so that the OR reproduces the
    crate where T is not monotone; `sanity` checks `invert` against score_prototype.score_split
    and off_grid_coverage.or_score with whole-range bisection)."""
    rr = lambda c: lambda *a: invert(rr_stat, c, *a, estimate=rr_estimate(a[0], a[1], a[2], a[3]))
    orr = lambda c: lambda *a: invert(or_stat, c, *a, estimate=or_estimate(a[0], a[1], a[2], a[3]))
    out = {"RR fixed": ("rr", rr(fixed_critical(0.7))), "OR fixed": ("or", orr(fixed_critical(0.7)))}
    for kind, k, m in rules:
        lab = f"{kind} K={k:g}" + (f" M={m:g}" if m else "")
        crit = lambda sr, k=k, m=m, kind=kind: critical(sr, k, m, "log" if kind == "curv" else kind)
        if kind == "curv":  # d = k x the curvature rule's d
            out[f"RR {lab}"] = ("rr", lambda *a, c=crit: invert(curvature_stat(rr_stat), c, *a,
                                                                estimate=rr_estimate(*a[:4])))
            out[f"OR {lab}"] = ("or", lambda *a, c=crit: invert(curvature_stat(or_stat), c, *a,
                                                                estimate=or_estimate(*a[:4])))
            continue
        out[f"RR {lab}"] = ("rr", rr(crit))
        out[f"OR {lab}"] = ("or", orr(crit))
    return out


def sanity(tables=4000):
    """invert with the fixed split and whole-range bisection reproduces score_split / or_score."""
    for mech, eps, private in [("laplace", 0.5, False), ("gaussian", 0.5, True)]:
        noise = sp.Noise(mech, eps)
        for px, py in [(0.5, 0.1), (0.5, 0.5), (0.9, 0.1), (0.1, 0.9)]:
            x, nx, y, ny = sp.release(np.random.default_rng(3), 200, px, py, noise, private, tables)
            a = sp.score_split(x, nx, y, ny, noise.var, private, a_low=0.3 * ALPHA, a_up=0.7 * ALPHA)
            # score_ci's [1e8, inf] and [0, 1e-8] are the crate's [inf, inf] and [0, 0]
            a = (np.where(a[0] >= 1e8 * (1 - 1e-9), np.inf, a[0]), np.where(a[1] <= 1e-8 * (1 + 1e-9), 0.0, a[1]))
            b = invert(rr_stat, fixed_critical(0.7), x, nx, y, ny, noise.var, private, R=np.log(1e8))
            c = or_score(x, nx, y, ny, noise.var, private)
            d = invert(or_stat, fixed_critical(0.7), x, nx, y, ny, noise.var, private)
            same = lambda u, v: np.allclose(u, v, rtol=1e-9, atol=0) and np.all(np.isinf(u) == np.isinf(v))
            e = invert(rr_stat, fixed_critical(0.7), x, nx, y, ny, noise.var, private, R=np.log(1e8),
                       estimate=rr_estimate(x, nx, y, ny))
            f = invert(or_stat, fixed_critical(0.7), x, nx, y, ny, noise.var, private,
                       estimate=or_estimate(x, nx, y, ny))
            diff = lambda u, v: np.mean(~np.isclose(u[0], v[0], rtol=1e-9) | ~np.isclose(u[1], v[1], rtol=1e-9))
            print(f"{mech} eps={eps:g} {'private' if private else 'public'} ({px},{py}): RR ends agree "
                  f"{same(a[0], b[0]) and same(a[1], b[1])}, OR ends agree {same(c[0], d[0]) and same(c[1], d[1])}; "
                  f"share of tables where the search from the estimate differs: RR {diff(b, e):.4f}, OR {diff(d, f):.4f}")


def target_of(n, eps):
    return 0.945 if n >= 200 else 0.94 if n >= 100 else 0.93


def run_setting(n, eps, mech, private, tables, rules, seed=0, cells=None, show_cells=False):
    global NOISE_K4
    noise = sp.Noise(mech, eps)
    s2 = noise.var
    if mech == "laplace":
        from or_score_mean import laplace_k4
        NOISE_K4 = laplace_k4
    else:
        NOISE_K4 = lambda s2: 0.0  # noqa: E731
    meth = methods(rules)
    res = {name: {} for name in meth}
    grid = [round(p, 1) for p in sp.GRID]
    for i, px in enumerate(grid):
        for j, py in enumerate(grid):
            if cells and (i, j) not in cells:
                continue
            rng = np.random.default_rng(seed * 100000 + i * 9 + j)
            x, nx, y, ny = sp.release(rng, n, px, py, noise, private, tables)
            truth = {"rr": px / py, "or": px * (1 - py) / ((1 - px) * py)}
            lo, hi, _, _ = sp.paper(x, nx, y, ny, s2, private)
            ref = {"rr": np.median(hi - lo)}
            lo, hi = paper_or(x, nx, y, ny, s2, private)
            ref["or"] = np.median(hi - lo)
            for name, (kind, f) in meth.items():
                lo, hi = f(x, nx, y, ny, s2, private)
                cov = np.mean((lo <= truth[kind]) & (truth[kind] <= hi))
                width = np.where(np.isinf(hi), np.inf, hi - lo)  # [inf, inf] counts as unbounded
                res[name][(i, j)] = (cov, np.median(width) / ref[kind], np.mean(np.isinf(hi)))
    target = target_of(n, eps)
    se = np.sqrt(target * (1 - target) / tables)
    lab = f"n={n} eps={eps:g} {mech} {'private' if private else 'public'}"
    for name, r in res.items():
        covs = {c: v[0] for c, v in r.items()}
        at = min(covs, key=covs.get)
        below = sum(c < target - 3 * se for c in covs.values())
        ratios = np.array([v[1] for v in r.values()])
        print(f"{lab:32s} {name:20s} min cov {covs[at]:.3f} at ({grid[at[0]]},{grid[at[1]]}) "
              f"below {below} (target {target}, -3SE {target - 3 * se:.3f})  "
              f"wmax {np.max(ratios):.3f} wmed {np.median(ratios):.3f} >1.05: {np.sum(ratios > 1.05):2d}  "
              f"unbounded max {max(v[2] for v in r.values()):.3f}", flush=True)
        if show_cells:
            for i in range(9):
                print("      ", " ".join(f"{r[(i, j)][0]:.3f}/{r[(i, j)][1]:.2f}" if (i, j) in r else "     -    "
                                         for j in range(9)))
    return res


def offgrid(tables=20000, rules=(("den", 4.0, 0.0),), n=200):
    pts = [(0.5, 0.011), (0.5, 0.03), (0.5, 0.05), (0.011, 0.5), (0.989, 0.5), (0.5, 0.989)]
    meth = methods(rules)
    worst = {name: (1.0, None) for name in meth}
    for mech, eps in [("gaussian", 0.5), ("laplace", 0.5), ("gaussian", 1.0), ("laplace", 1.0)]:
        noise = sp.Noise(mech, eps)
        for private in (False, True):
            for px, py in pts:
                rng = np.random.default_rng(7)  # off_grid_coverage.py's seed: same releases
                x, nx, y, ny = sp.release(rng, n, px, py, noise, private, tables)
                truth = {"rr": px / py, "or": px * (1 - py) / ((1 - px) * py)}
                line = []
                for name, (kind, f) in meth.items():
                    lo, hi = f(x, nx, y, ny, noise.var, private)
                    cov = np.mean((lo <= truth[kind]) & (truth[kind] <= hi))
                    line.append(f"{name} {cov:.3f}")
                    lab = f"{mech} eps={eps:g} {'private' if private else 'public'} ({px},{py})"
                    if cov < worst[name][0]:
                        worst[name] = (cov, lab)
                print(f"{mech:8s} eps={eps:g} {'private' if private else 'public '} ({px},{py}): "
                      + " | ".join(line), flush=True)
    se = np.sqrt(0.95 * 0.05 / tables)
    print(f"SE of one point's coverage at 0.95 with {tables} tables: {se:.4f}")
    for name, (c, lab) in worst.items():
        print(f"lowest {name}: {c:.3f} at {lab}")


def show_splits(k=2.0, m=0.1):
    print(f"d = {k:g} x, floor M={m:g}: x -> z_L, z_U, lower share alpha_L/alpha")
    for s in [0.0, 0.025, 0.05, 0.1, 0.128, 0.15, 0.2, 0.25, 0.3, 0.37, 0.5, 0.75, 1.0, 2.0]:
        zl, zu = critical((np.array([s]), np.array([s])), k, m)
        print(f"  x={s:5.3f}  z_L={zl[0]:.4f} z_U={zu[0]:.4f}  alpha_L share {norm.sf(zl[0]) / ALPHA:.3f}")


def parse_rules(txt):
    """"den:4,log:2:0.1" -> [("den", 4.0, 0.0), ("log", 2.0, 0.1)]"""
    out = []
    for r in txt.split(","):
        f = r.split(":")
        out.append((f[0], float(f[1]), float(f[2]) if len(f) > 2 else 0.0))
    return out


def exact_ends(stat, x, nx, y, ny, s2, private, k=4.0):
    """The "denf" interval of one table to ~1e-13 (the crate's unit tests): z_c solved exactly
    (brentq) at every theta, each end by brentq on ln theta between the estimate's side of the
    crossing and the range's end (T - z_L and T + z_U decrease there for these tables)."""
    from scipy.optimize import brentq
    d0 = norm.isf(0.3 * ALPHA) - norm.isf(0.7 * ALPHA)

    def ends(u):
        t, sr = stat(np.array([np.exp(u)]), np.array([x]), nx, np.array([y]), ny, s2, private)
        r = sr[1]
        d = min(max(k * float(r[0]), d0), 12.0)
        zc = brentq(lambda c: norm.sf(c + d / 2) + norm.sf(c - d / 2) - ALPHA, -10, 20, xtol=1e-15)
        zl, zu = zc + d / 2, zc - d / 2
        if len(sr) > 2:
            zl, zu = zl + cornish_fisher(zl, float(sr[2][0])), zu - cornish_fisher(zu, float(sr[2][0]))
        return float(t[0]) - zl, float(t[0]) + zu

    u0 = np.log((x / nx) / (y / ny)) if stat is rr_stat else np.log(x * (ny - y) / ((nx - x) * y))
    lo = brentq(lambda u: ends(u)[0], -28, u0, xtol=1e-14)
    hi = brentq(lambda u: ends(u)[1], u0, 28, xtol=1e-14)
    return np.exp(lo), np.exp(hi), ends(lo), ends(hi)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    opts = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "1") for a in sys.argv[1:] if a.startswith("--"))
    rules = parse_rules(opts.get("rules", "den:4"))
    seed = int(opts.get("seed", 0))
    mode = args[0] if args else "grid"
    if mode == "sanity":
        sanity()
    elif mode == "check":  # the ends the crate's unit tests compare with
        for name, stat in (("RR", rr_stat), ("OR", or_stat)):
            for (x, nx, y, ny, s2, private) in [(40, 200, 20, 200, 8.0, False), (40, 200, 20, 200, 8.0, True),
                                                (40, 200, 20, 200, 0.0, False), (7, 34, 1, 34, 0.0, False)]:
                lo, hi, _, _ = exact_ends(stat, float(x), float(nx), float(y), float(ny), s2, private)
                print(f"{name} {x}/{nx} vs {y}/{ny} s2={s2} {'private' if private else 'public'}: [{lo!r}, {hi!r}]")
    elif mode == "splits":
        for kind, k, m in rules:
            show_splits(k, m)
    elif mode == "offgrid":
        offgrid(int(args[1]) if len(args) > 1 else 20000, rules)
    else:
        n = int(args[1]) if len(args) > 1 else 200
        tables = int(args[2]) if len(args) > 2 else 4000
        sizes = args[3] if len(args) > 3 else "both"
        epss = [float(args[4])] if len(args) > 4 else [0.5, 1.0]
        mechs = [args[5]] if len(args) > 5 else ["laplace", "gaussian"]
        cells = None
        if "cellset" in opts:  # e.g. --cellset=4:0,4:4 (indices 0..8)
            cells = {tuple(int(v) for v in c.split(":")) for c in opts["cellset"].split(",")}
        for private in {"public": [False], "private": [True], "both": [True, False]}[sizes]:
            for eps in epss:
                for mech in mechs:
                    run_setting(n, eps, mech, private, tables, rules, seed, cells, "cells" in opts)
