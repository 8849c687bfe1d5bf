"""Prototype (not used by the crate or CI; numpy + scipy): how short can a score interval for the
relative risk be in the p_y = 0.1 column at n = 200, and is there a better tail-split rule than
the crate's "denf:4" (adaptive_split.py)?

Reduced model. Public sizes n_x = n_y = n = 200; the exposed risk p_x = 0.5 is KNOWN, only the
unexposed arm is random: Y~ = Y + L, Y ~ Bin(n, p0), L the exact discrete noise of
score_prototype.Noise (two-sided geometric for Laplace; discrete Gaussian, delta = 1e-4), pmf
truncated as width_bound.noise_pmf (tail < e^-25 resp. 7 sigma). theta = p_x / p. A split
procedure is a function d(p) >= 0: with sigma(p)^2 = n p (1 - p) + s2 (s2 = Var L) and
t(p) = (Y~ - n p) / sigma(p), p is accepted iff -z_L(p) <= t(p) <= z_U(p), z_L - z_U = d,
Phi(-z_L) + Phi(-z_U) = alpha = 0.05 (normal approximation as in the crate; z_c(d) from
adaptive_split.D_GRID/ZC_GRID, d capped at 12 as adaptive_split.critical). z_U sets the upper
end of theta (small p), z_L the lower. The p-interval is the hull of the accepted set on a log
grid of 40,001 candidates in [1e-6, 1]; theta in [p_x/p_hi, p_x/p_lo], unbounded if p -> 0 is
accepted. No simulation: coverage is exact over the integer law of Y~ (binomial * noise pmf);
the median width is exact for Y~ + U, U ~ Uniform(-1/2, 1/2) (J = 40 sub-points per integer;
JITTER=0 gives the lower median of the integer law, whose ratio to a smooth reference has a
sawtooth of several % in p0: the median of Y~ moves in unit steps).

Rules, with r = n p / sigma(p) = 1/c_D (c_D^2 = v_y/p^2) and c_x^2 = v_x(p_x)/p_x^2:
  crate "denf:4":  d = max(4 c_D^2/s, d0), s^2 = c_x^2 + c_D^2, d0 = z_.015 - z_.035 (c_x at p_x)
  family fam:K:a:  d = max(K c_D^(1+a)/s, d0) (K = 4, a = 1 is the crate's)
  knots:           d piecewise linear in ln r at KNOTS_R, constant outside, non-increasing, 0..12
  gamed@p0:        z_U = z_.05, z_L = inf for p < p0; z_L = z_.05, z_U = inf for p >= p0 (tailored
                   one-sided tests: coverage 1 at p0, 1 - alpha elsewhere). Within this class of
                   normal-approximation split tests no rule has a shorter width at p0.
References: the paper's interval (score_prototype.paper, public sizes), median width exact from
  the pmfs. "full": X~ noisy too (p_x = 0.5), 2-D pmf, checked against 20k tables of
  score_prototype.release (`ref`); "reduced": X known (x = n p_x, no c_x term). Reduced-model
  widths / the "reduced" reference reproduce the crate's 2-D ratios (docs/coverage.md), so the
  optimisation uses that reference; ratios to "full" are printed as "alt".
Lower bound, any procedure (`gamed`, `curve`): one-arm Neyman-Pearson as joint_width_bound.py:
  median width >= p_x/p_U - p_x/p_L for p_U < p0 < p_L with beta(p_U) + beta(p_L) <= 1/2.
Continuum optimisation (`minimax`, knots rule, p0 on 60 points of [0.06, 0.5] plus 0.1/0.2/0.3,
  coverage >= the crate's own minimum on 400 p in [0.02, 0.9], Powell then Nelder-Mead on a
  log-sum-exp soft max, 2-3 starts): (a) max ratio on [0.06, 0.5]; (a') on [0.1, 0.5];
  (b) max ratio / gamed bound; (c) ratio at 0.1 s.t. ratio <= max(1.05, crate + 0.002) at every
  p0; (d) the same with ratio <= crate + 0.002 (no p0 worse than the crate). Not a proof of
  optimality: a 12-knot monotone family and local searches.
2-D split-class floor (`floor2d`, the lead's addition): every split has z_L, z_U >= z_alpha, so
  every score interval contains {theta: |T(theta)| <= 1.645} at every outcome; the median width
  of that set over the paper's, per cell, RR and OR, 8 settings at n = 200, is a floor for the
  whole class (split rules tuned to the cell included). Result in docs/intervals.md section 6.
  `corner`: constant splits at the OR's corner (0.1, 0.9), the one OR miss the floor leaves.
2-D check (`check2d`): adaptive_split.invert(rr_stat, ...) with the crate's critical and the
  candidates (r = 1/c_D with c_D^2 = s * sr[1] at the restricted estimates), public and private
  sizes, seeds as adaptive_split.run_setting; coverage and median-width ratio to paper per cell.

Usage, from docs/prototypes (each run < 6 min on one core):
    python3 split_optimum.py validate        # crate rule: reduced-model ratios, exact coverage
    python3 split_optimum.py ref             # exact paper reference vs 20k simulated tables
    python3 split_optimum.py gamed           # crate / best constant / tailored / NP at 0.1-0.3
    python3 split_optimum.py curve           # the same along p0 in [0.06, 0.5]
    python3 split_optimum.py family          # screen of fam:K:a
    python3 split_optimum.py floor2d 4000    # 2-D split-class floor, RR and OR, 81 cells x 8
    python3 split_optimum.py corner 10000    # the OR's corner (0.1, 0.9): constant splits
    python3 split_optimum.py or_floor_cf 4000   # the OR's floor for its centred, CF statistic
    python3 split_optimum.py minimax reduced 800 max01,focus,pareto   # objectives (a') (c) (d)
    python3 split_optimum.py check2d 4000 fam:8:2 '{"name": {"laplace:0.5": [12 knots],
                                                            "gaussian:1": [12 knots]}}'
    CELLS=0:2,4:2 python3 split_optimum.py check2d 4000 fam:8:2   # chosen cells (indices 0..8)
"""
import json
import os
import sys
import time

import numpy as np
from scipy.optimize import minimize
from scipy.stats import binom, norm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import score_prototype as sp  # noqa: E402
import adaptive_split as ad  # noqa: E402
from width_bound import noise_pmf, np_power  # noqa: E402

ALPHA = 0.05
N, PX = 200, 0.5
SETTINGS = [("laplace", 0.5), ("gaussian", 1.0)]
D0 = norm.isf(0.3 * ALPHA) - norm.isf(0.7 * ALPHA)
Z1 = norm.isf(ALPHA)
P0_GRID = np.unique(np.r_[np.linspace(0.06, 0.5, 60), 0.1, 0.2, 0.3])
COV_GRID = np.linspace(0.02, 0.9, 400)
KNOTS_R = np.geomspace(0.3, 20.0, 12)
JITTER = int(os.environ.get("JITTER", 40))


class Reduced:
    """The reduced model for one noise setting: candidate grid, pmfs, exact widths/coverage."""

    def __init__(self, mech, eps, n=N, px=PX):
        self.noise = sp.Noise(mech, eps)
        self.s2 = self.noise.var
        self.n, self.px = n, px
        k, w = noise_pmf(self.noise)
        self.k0, self.w = int(k[0]), w
        self.kv = np.arange(k[0], n + k[-1] + 1).astype(float)  # support of Y~
        self.p = np.geomspace(1e-6, 1.0, 40001)
        self.sig = np.sqrt(n * self.p * (1 - self.p) + self.s2)
        self.r = n * self.p / self.sig
        self.cx2 = sp.arm_var(px, n, self.s2, False) / px**2
        self._pmf = {}
        self.set_jitter(JITTER)

    def set_jitter(self, J):
        """J = 0: exact lower median over the integer law of Y~; J > 0: median of the width at
        Y~ + U, U ~ Uniform(-1/2, 1/2), on J sub-points per integer (the width at real-valued Y~
        is the same construction; removes the sawtooth that the integer median puts on the ratio
        to a smooth reference)."""
        self.J = J
        if J:
            self.kk = (self.kv[:, None] + (np.arange(J) + 0.5) / J - 0.5).ravel()
        else:
            self.kk = self.kv

    def pmf(self, p0):
        key = float(p0)
        if key not in self._pmf:
            self._pmf[key] = np.convolve(binom.pmf(np.arange(self.n + 1), self.n, p0), self.w)
        return self._pmf[key]

    def pmfs(self, p0s, jitter=True):
        f = np.array([self.pmf(p) for p in p0s])
        return np.repeat(f, self.J, axis=1) / self.J if (jitter and self.J) else f

    # -- rules: d on the candidate grid, or (z_L, z_U) directly
    def d_crate(self, cx=True):
        cd2 = 1 / self.r**2
        s = np.sqrt(cd2 + (self.cx2 if cx else 0.0))
        return np.maximum(4 * cd2 / s, D0)

    def d_knots(self, v, knots=KNOTS_R):
        """d piecewise linear in ln r through the knot values knot_d(v), constant outside."""
        return np.interp(np.log(self.r), np.log(knots), knot_d(v))

    @staticmethod
    def z_of_d(d):
        d = np.minimum(d, ad.D_GRID[-1])  # as adaptive_split.critical
        zc = np.interp(d, ad.D_GRID, ad.ZC_GRID)
        return zc + d / 2, zc - d / 2

    def ends(self, zl, zu, k=None):
        """p-interval [p_lo, p_hi] per Y~ = k (hull of the accepted set); p_lo = 0 if p -> 0 is
        accepted, nan (empty) if nothing is accepted."""
        np_ = self.n * self.p
        B = np.maximum.accumulate(np_ + zu * self.sig)  # accept needs k <= n p + z_U sigma
        A = np.minimum.accumulate((np_ - zl * self.sig)[::-1])[::-1]  # and k >= n p - z_L sigma
        k = self.kv if k is None else k
        lo = np.interp(k, B, self.p)
        lo = np.where(k <= B[0], 0.0, lo)
        hi = np.interp(k, A, self.p)
        hi = np.where(k >= A[-1], 1.0, hi)
        empty = (k < A[0]) | (k > B[-1]) | (lo > hi)
        return np.where(empty, np.nan, lo), np.where(empty, np.nan, hi)

    def widths(self, lo, hi):
        with np.errstate(divide="ignore", invalid="ignore"):
            w = self.px / lo - self.px / hi
        return np.where(np.isnan(w) | (lo <= 0), np.inf, w)

    def median_width(self, W, p0s):
        """Lower weighted median of W under the exact law at each p0."""
        order = np.argsort(W, kind="stable")
        F = np.cumsum(self.pmfs(p0s)[:, order], axis=1)
        idx = np.array([np.searchsorted(f, 0.5 * f[-1]) for f in F])
        return W[order][idx]

    def coverage(self, lo, hi, ps):
        f = self.pmfs(ps, jitter=False)
        inside = (lo[None, :] <= ps[:, None]) & (ps[:, None] <= hi[None, :])
        return (f * inside).sum(axis=1)

    def evaluate(self, zl, zu, p0s=P0_GRID, cov_ps=COV_GRID):
        lo, hi = self.ends(zl, zu)
        W = self.widths(*self.ends(zl, zu, self.kk))
        return self.median_width(W, p0s), self.coverage(lo, hi, cov_ps), (lo, hi, W)

    # -- references
    def paper_full(self, p0):
        """Exact median width of the paper's interval, X~ and Y~ both noisy, public sizes."""
        fx, fy = self.pmf(self.px), self.pmf(p0)
        kx, ky = np.meshgrid(self.kv, self.kv, indexing="ij")
        f = np.outer(fx, fy)
        keep = f > 1e-14
        x, y, f = kx[keep], ky[keep], f[keep]
        nn = np.full(x.shape, float(self.n))
        lo, hi, _, _ = sp.paper(x, nn, y, nn, self.s2, False)
        w = hi - lo
        o = np.argsort(w)
        c = np.cumsum(f[o])
        return w[o][np.searchsorted(c, 0.5 * c[-1])]

    def paper_reduced(self, p0):
        """Exact median width of the paper's interval with X known (x = n p_x, no c_x term)."""
        y = np.maximum(self.kk, 1)
        c = self.px / (y / self.n)
        v2 = np.maximum(1 / y - 1 / self.n, 0) + self.s2 / y**2
        lo = np.maximum(c - sp.Z * c * np.sqrt(v2), 0)
        w = c + sp.Z * c * np.sqrt(v2) - lo
        return self.median_width(w, [p0])[0]

    def refs(self, p0s, kind="full"):
        f = self.paper_full if kind == "full" else self.paper_reduced
        return np.array([f(p) for p in p0s])


def gamed(m, p0):
    """Split tailored to p0: all alpha on the side facing p0 (z = z_.05 one-sided)."""
    below = m.p < p0
    zl = np.where(below, 60.0, Z1)
    zu = np.where(below, Z1, 60.0)
    return zl, zu


def np_lower_bound(m, p0, steps=80):
    """Median width >= px/pU - px/pL for any valid interval, best pair with beta_U + beta_L <= 1/2."""
    f1 = m.pmf(p0)
    sd = np.sqrt(p0 * (1 - p0) / m.n + m.s2 / m.n**2)
    us = np.clip(p0 - np.linspace(0, 5, steps) * sd, 1e-4, None)
    ls = np.clip(p0 + np.linspace(0, 5, steps) * sd, None, 1 - 1e-4)
    bu = np.array([np_power(m.pmf(q), f1) for q in us])
    bl = np.array([np_power(m.pmf(q), f1) for q in ls])
    best = 0.0
    for i, q in enumerate(us):
        ok = bl <= 0.5 - bu[i]
        if ok.any():
            best = max(best, m.px / q - m.px / ls[ok].min())
    return best


# ---- optimisation --------------------------------------------------------------------------

def objective_factory(m, ref, cov_floor, mode="max", cap=None, tau=0.01, gam=None, p0s=P0_GRID):
    """mode "max": soft max over p0 of ratio; "rel": of ratio / gamed(p0); "focus": ratio at
    p0 = 0.1 with a penalty where ratio > cap(p0). Coverage below cov_floor is penalised."""
    i01 = int(np.argmin(np.abs(p0s - 0.1)))

    def obj(v):
        zl, zu = m.z_of_d(m.d_knots(v))
        med, cov, _ = m.evaluate(zl, zu, p0s)
        ratio = med / ref
        if not np.all(np.isfinite(ratio)):
            return 1e3
        pen = 1e4 * np.sum(np.maximum(cov_floor - cov, 0) ** 2)
        if mode == "focus":
            return ratio[i01] + 1e5 * np.sum(np.maximum(ratio - cap, 0) ** 2) + pen
        q = ratio / gam if mode == "rel" else ratio
        if mode == "max01":  # the raw ratio on p0 >= 0.1 only
            q = q[p0s >= 0.1 - 1e-12]
        soft = tau * np.log(np.sum(np.exp((q - q.max()) / tau))) if tau > 0 else 0.0
        return q.max() + soft + pen
    return obj


def knot_d(v):
    """Knot values from parameters: d_j = min(12, sum_{i >= j} |v_i|), i.e. d >= 0 and
    non-increasing in r (the skew of the ratio falls as the denominator's signal grows); without
    this the optimiser builds bumps that tailor the split to single p0's of the grid."""
    return np.minimum(np.cumsum(np.abs(np.asarray(v, float))[::-1])[::-1], ad.D_GRID[-1])


def fit_knots(m, d_target):
    """Parameters whose knot values reproduce a (non-increasing) d(r) curve (a starting point)."""
    t = np.minimum(np.interp(np.log(KNOTS_R), np.log(m.r), d_target), ad.D_GRID[-1])
    t = np.minimum.accumulate(t)
    return np.append(t[:-1] - t[1:], t[-1])


def optimise(m, ref, cov_floor, starts, mode="max", cap=None, gam=None, fev=3000):
    best = None
    for j, v0 in enumerate(starts):
        v = np.array(v0, float)
        for tau in ([0.01, 0.002] if mode != "focus" else [0.0]):
            obj = objective_factory(m, ref, cov_floor, mode, cap, tau, gam)
            for meth, opts in (("Powell", {"maxfev": fev, "xtol": 1e-3, "ftol": 1e-6}),
                               ("Nelder-Mead", {"maxfev": fev, "xatol": 1e-3, "fatol": 1e-6, "adaptive": True})):
                v = minimize(obj, v, method=meth, options=opts).x
        val = objective_factory(m, ref, cov_floor, mode, cap, 0.0, gam)(v)
        print(f"   start {j}: objective {val:.4f}", flush=True)
        if best is None or val < best[0]:
            best = (val, v)
    return best


def report_rule(m, name, zl, zu, ref, ref_alt, gam=None):
    """One line: ratios (to `ref`; `alt` = to the other reference) at chosen p0 and coverage."""
    med, cov, _ = m.evaluate(zl, zu)
    ratio, alt = med / ref, med / ref_alt
    at = lambda a, p: a[int(np.argmin(np.abs(P0_GRID - p)))]
    big = P0_GRID[ratio > 1.05]
    rel = f" | max ratio/gamed {np.max(ratio / gam):.3f} at {P0_GRID[np.argmax(ratio / gam)]:.3f}" if gam is not None else ""
    print(f"  {name:22s} 0.06 {at(ratio, 0.06):.3f} 0.08 {at(ratio, 0.08):.3f} 0.1 {at(ratio, 0.1):.3f} "
          f"0.12 {at(ratio, 0.12):.3f} 0.15 {at(ratio, 0.15):.3f} 0.2 {at(ratio, 0.2):.3f} 0.3 {at(ratio, 0.3):.3f} "
          f"0.5 {at(ratio, 0.5):.3f} | >1.05 on p0 <= {big.max() if len(big) else 0:.3f}{rel} | alt ref: 0.1 "
          f"{at(alt, 0.1):.3f} 0.2 {at(alt, 0.2):.3f} 0.3 {at(alt, 0.3):.3f} | cov min {cov.min():.4f} "
          f"(p={COV_GRID[np.argmin(cov)]:.3f}) max {cov.max():.4f}", flush=True)
    return ratio, cov


# ---- modes -----------------------------------------------------------------------------------

def setup(mech, eps):
    m = Reduced(mech, eps)
    ref = m.refs(P0_GRID)
    ref_red = m.refs(P0_GRID, "reduced")
    return m, ref, ref_red


def mode_validate():
    for mech, eps in SETTINGS:
        m, ref, ref_red = setup(mech, eps)
        print(f"{mech} eps={eps:g} public, n={N}, p_x={PX} known; s2={m.s2:.3f}, c_x^2={m.cx2:.5f}")
        i = int(np.argmin(np.abs(P0_GRID - 0.1)))
        print(f"  paper width at p0~0.1 ({P0_GRID[i]:.4f}): full {ref[i]:.4f}, X known {ref_red[i]:.4f}"
              f" (ratio {ref[i] / ref_red[i]:.3f})")
        for name, d in (("crate denf:4 (c_x true)", m.d_crate(True)), ("denf:4, c_x = 0", m.d_crate(False)),
                        ("fixed 30/70", np.full(m.p.shape, D0)), ("equal tails", np.zeros(m.p.shape))):
            report_rule(m, name, *m.z_of_d(d), ref, ref_red)
        # exactly at the grid cells
        for p0 in (0.1, 0.2, 0.3):
            zl, zu = m.z_of_d(m.d_crate(True))
            med, cov, (lo, hi, W) = m.evaluate(zl, zu, np.array([p0]), np.array([p0]))
            mono = np.all(np.diff(W[np.isfinite(W)]) <= 1e-12)
            print(f"  crate rule at p0={p0}: ratio full {med[0] / m.paper_full(p0):.3f}, reduced "
                  f"{med[0] / m.paper_reduced(p0):.3f}, exact coverage {cov[0]:.4f}, width decreasing in Y~: {mono}")


def mode_ref(tables=20000):
    for mech, eps in SETTINGS:
        m = Reduced(mech, eps)
        for p0 in (0.06, 0.1, 0.2, 0.3, 0.5):
            x, nx, y, ny = sp.release(np.random.default_rng(11), N, PX, p0, m.noise, False, tables)
            lo, hi, _, _ = sp.paper(x, nx, y, ny, m.s2, False)
            w = hi - lo
            # SE of the median: bootstrap-free approximation by order statistics (+-1.96 sqrt(m)/2)
            ws = np.sort(w)
            h = int(np.ceil(1.96 * np.sqrt(tables) / 2))
            print(f"{mech} eps={eps:g} p0={p0}: exact {m.paper_full(p0):.4f}, simulated {np.median(w):.4f} "
                  f"(95% order-stat CI {ws[tables // 2 - h]:.4f}-{ws[tables // 2 + h]:.4f}), X known {m.paper_reduced(p0):.4f}",
                  flush=True)


def mode_gamed():
    for mech, eps in SETTINGS:
        m = Reduced(mech, eps)
        print(f"{mech} eps={eps:g} public")
        for p0 in (0.1, 0.2, 0.3):
            ref, ref_red = m.paper_full(p0), m.paper_reduced(p0)
            crate = m.evaluate(*m.z_of_d(m.d_crate(True)), np.array([p0]), np.array([p0]))
            g = m.evaluate(*gamed(m, p0), np.array([p0]), np.array([p0 * 0.999, p0 * 1.001]))
            # per-cell best within the split class at this p0 (any d(p) profile; tailored): the
            # one-sided split above; also the best constant split (the best the metric allows
            # without tailoring to a side of p0)
            best_c = min((m.evaluate(*m.z_of_d(np.full(m.p.shape, dd)), np.array([p0]), np.array([p0]))[0][0], dd)
                         for dd in np.linspace(0, 8, 161))
            lb = np_lower_bound(m, p0)
            print(f"  p0={p0}: crate {crate[0][0] / ref:.3f} (cov {crate[1][0]:.4f}) | best constant d "
                  f"{best_c[0] / ref:.3f} (d={best_c[1]:.2f}) | gamed one-sided {g[0][0] / ref:.3f} "
                  f"(cov just below/above p0 {g[1][0]:.4f}/{g[1][1]:.4f}) | NP bound any procedure {lb / ref:.3f} "
                  f"| vs X-known paper: crate {crate[0][0] / ref_red:.3f} gamed {g[0][0] / ref_red:.3f} NP {lb / ref_red:.3f}",
                  flush=True)


def mode_curve():
    """Per p0: crate rule, best constant split, one-sided tailored split, NP bound (ratios)."""
    ps = np.array([0.06, 0.07, 0.08, 0.09, 0.1, 0.11, 0.12, 0.14, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5])
    for mech, eps in SETTINGS:
        m = Reduced(mech, eps)
        print(f"{mech} eps={eps:g} public; J={m.J}; columns: ratio to full-problem paper / to X-known paper")
        crate, cov, _ = m.evaluate(*m.z_of_d(m.d_crate(True)), ps, ps)
        for i, p0 in enumerate(ps):
            ref, ref_red = m.paper_full(p0), m.paper_reduced(p0)
            g = m.evaluate(*gamed(m, p0), np.array([p0]), np.array([p0]))[0][0]
            lb = np_lower_bound(m, p0)
            print(f"  p0={p0:.2f}: crate {crate[i] / ref:.3f}/{crate[i] / ref_red:.3f} (cov {cov[i]:.4f}) | "
                  f"gamed {g / ref:.3f}/{g / ref_red:.3f} | NP {lb / ref:.3f}/{lb / ref_red:.3f}", flush=True)


def d_family(m, K, a, cx=True):
    """d = max(K c_D^(1+a) / s, d0): the crate's denf:4 at K = 4, a = 1; with c_x = 0, K / r^a."""
    cd2 = 1 / m.r**2
    s = np.sqrt(cd2 + (m.cx2 if cx else 0.0))
    return np.maximum(K * cd2 ** ((1 + a) / 2) / s, D0)


def mode_family(ref_kind="reduced"):
    """Screen of d = max(K c_D^(1+a)/s, d0): ratio at 0.1, worst excess over max(1.05, crate)."""
    Ks, As = [2, 3, 4, 5, 6, 8, 12, 16], [0.5, 1.0, 1.5, 2.0, 3.0]
    for mech, eps in SETTINGS:
        m = Reduced(mech, eps)
        ref = m.refs(P0_GRID, ref_kind)
        crate = m.evaluate(*m.z_of_d(m.d_crate(True)))[0] / ref
        cap = np.maximum(1.05, crate + 0.002)
        i01 = int(np.argmin(np.abs(P0_GRID - 0.1)))
        print(f"{mech} eps={eps:g}: ratio at 0.1 [worst excess over max(1.05, crate+0.002) on p0 in (0.1, 0.5] | "
              f"min coverage]; crate {crate[i01]:.3f}")
        for a in As:
            line = []
            for K in Ks:
                med, cov, _ = m.evaluate(*m.z_of_d(d_family(m, K, a)))
                r = med / ref
                ex = np.max((r - cap)[P0_GRID > 0.1 + 1e-9])
                line.append(f"K={K:<2g} {r[i01]:.3f} [{ex:+.3f}|{cov.min():.4f}]")
            print(f"  a={a:<3g} " + "  ".join(line), flush=True)


def mode_minimax(ref_kind="reduced", fev=3000, modes=("max", "max01", "rel", "focus")):
    """Three continuum objectives over P0_GRID (61 + 0.1/0.2/0.3 points on [0.06, 0.5])."""
    out = {}
    for mech, eps in SETTINGS:
        t0 = time.time()
        m = Reduced(mech, eps)
        ref, alt = m.refs(P0_GRID, ref_kind), m.refs(P0_GRID, "full" if ref_kind == "reduced" else "reduced")
        gam = np.array([m.evaluate(*gamed(m, p0), np.array([p0]), COV_GRID[:1])[0][0] for p0 in P0_GRID]) / ref
        print(f"{mech} eps={eps:g} public; ratios to the {ref_kind} paper width (alt: the other); "
              f"{len(P0_GRID)} p0 in [0.06, 0.5], coverage on {len(COV_GRID)} p in [0.02, 0.9]")
        at = lambda a, p: a[int(np.argmin(np.abs(P0_GRID - p)))]
        print(f"  per-p0 tailored one-sided bound (split class): 0.06 {at(gam, 0.06):.3f} 0.1 {at(gam, 0.1):.3f} "
              f"0.2 {at(gam, 0.2):.3f} 0.3 {at(gam, 0.3):.3f}")
        r_crate, c_crate = report_rule(m, "crate denf:4", *m.z_of_d(m.d_crate(True)), ref, alt, gam)
        floor = min(0.945, c_crate.min())
        v_crate = fit_knots(m, m.d_crate(True))
        report_rule(m, "crate on the knots", *m.z_of_d(m.d_knots(v_crate)), ref, alt, gam)
        starts = [v_crate, fit_knots(m, 2 * m.d_crate(False)), fit_knots(m, np.full(m.p.shape, 1.0))]
        rows = {"crate denf:4": knot_d(v_crate), "4/r": np.minimum(4 / KNOTS_R, 12)}
        params = {}
        objectives = (("(a) minimax ratio", "max"), ("(a') same, p0 >= 0.1", "max01"),
                      ("(b) minimax ratio/gamed", "rel"), ("(c) 0.1, rest<=crate", "focus"),
                      ("(d) 0.1, Pareto", "pareto"))
        for lab, mode in [o for o in objectives if o[1] in modes]:
            if mode == "pareto":  # no p0 worse than the crate (+0.002): spends none of the 1.05 slack
                cap, mode = r_crate + 0.002, "focus"
            else:
                cap = np.maximum(1.05, r_crate + 0.002)
            print(f" {lab} (coverage floor {floor:.4f}):", flush=True)
            st = starts if mode != "focus" else [v_crate, fit_knots(m, d_family(m, 8, 2))] + list(params.values())
            val, v = optimise(m, ref, floor, st, mode, cap, gam, fev)
            rr, _ = report_rule(m, lab, *m.z_of_d(m.d_knots(v)), ref, alt, gam)
            print(f"     worst excess over the cap: {np.max(rr - cap):+.4f} at p0 = "
                  f"{P0_GRID[np.argmax(rr - cap)]:.3f}")
            rows[lab], params[lab] = knot_d(v), v
        print("  d at knots r:           " + " ".join(f"{r:6.2f}" for r in KNOTS_R))
        for lab, vals in rows.items():
            print(f"  {lab:23s} " + " ".join(f"{x:6.3f}" for x in vals))
        out[f"{mech}:{eps:g}"] = {k: [round(float(x), 3) for x in v] for k, v in rows.items()}
        print(f"  ({time.time() - t0:.0f} s)", flush=True)
    print("knots:", json.dumps(out))


def knots_critical(vals, floor=0.0):
    """critical() for adaptive_split.invert from knot values of d(r), r = 1/c_D at the
    restricted estimates (c_D^2 = s * sr[1]); d >= floor."""
    vals = np.asarray(vals, float)

    def crit(sr):
        with np.errstate(divide="ignore", invalid="ignore"):
            r = 1 / np.sqrt(sr[0] * sr[1])
        lr = np.log(np.clip(np.nan_to_num(r, nan=1e-9, posinf=1e9), 1e-9, 1e9))
        d = np.maximum(np.interp(lr, np.log(KNOTS_R), vals), floor)
        return Reduced.z_of_d(d)
    return crit


def mode_check2d(tables, rules, cells=None):
    """2-D check: coverage / median-width ratio to score_prototype.paper per cell, rules as
    name -> (setting -> knot values) or the crate's "denf:4"; seeds as adaptive_split.run_setting."""
    grid = [round(p, 1) for p in sp.GRID]
    if os.environ.get("CELLS"):  # e.g. CELLS=0:2,4:2 (indices 0..8 of p_x, p_y)
        cells = [tuple(int(v) for v in c.split(":")) for c in os.environ["CELLS"].split(",")]
    cells = cells or [(i, 0) for i in range(9)] + [(i, 1) for i in range(9)] + [(4, 2), (4, 4), (0, 8), (8, 8)]
    for mech, eps in SETTINGS:
        noise = sp.Noise(mech, eps)
        for private in (False, True):
            lab = f"{mech} eps={eps:g} {'private' if private else 'public'}"
            meth = {"crate denf:4": lambda sr: ad.critical(sr, 4.0, 0.0, "denf")}
            for name, per in rules.items():
                if name.startswith("fam:"):  # d = max(K c_D^(1+a)/s, d0), c_D^2 = s sr[1]
                    K, a = (float(v) for v in name.split(":")[1:])
                    meth[name] = lambda sr, K=K, a=a: Reduced.z_of_d(np.maximum(
                        K * np.nan_to_num(sr[0] * sr[1], nan=np.inf) ** ((1 + a) / 2) / sr[0], D0))
                else:
                    meth[name] = knots_critical(per[f"{mech}:{eps:g}"])
            res = {nm: {} for nm in meth}
            for (i, j) in cells:
                px, py = grid[i], grid[j]
                rng = np.random.default_rng(i * 9 + j)
                x, nx, y, ny = sp.release(rng, N, px, py, noise, private, tables)
                lo, hi, _, _ = sp.paper(x, nx, y, ny, noise.var, private)
                ref = np.median(hi - lo)
                est = ad.rr_estimate(x, nx, y, ny)
                for nm, crit in meth.items():
                    lo, hi = ad.invert(ad.rr_stat, crit, x, nx, y, ny, noise.var, private, estimate=est)
                    cov = np.mean((lo <= px / py) & (px / py <= hi))
                    w = np.where(np.isinf(hi), np.inf, hi - lo)
                    res[nm][(i, j)] = (cov, np.median(w) / ref)
            se = np.sqrt(0.95 * 0.05 / tables)
            print(f"{lab} ({tables} tables; coverage SE {se:.4f}); cells (p_x,p_y): coverage/ratio", flush=True)
            for nm, r in res.items():
                print(f"  {nm:24s} " + " ".join(f"({grid[i]},{grid[j]}) {c:.3f}/{w:.3f}" for (i, j), (c, w) in r.items()),
                      flush=True)

def mode_floor2d(tables=4000, settings=None):
    """Split-class floor in 2-D, every cell: any split has z_L, z_U >= z_alpha (both tails of
    Phi(-z_L) + Phi(-z_U) = alpha are at most alpha), so its interval contains
    {theta: |T(theta)| <= z_alpha} at every outcome (for the crate's search from the estimate:
    a rejection by T > z_L or T < -z_U is one at z_alpha too). The median width of that set over
    the paper's is therefore a floor for every rule of the class, tuned to the cell or not. RR
    and OR, the 8 settings at n = 200, seeds as adaptive_split.run_setting (seed 0)."""
    from or_width_bound import paper_or
    grid = [round(p, 1) for p in sp.GRID]
    floor = lambda sr: (np.full(np.shape(sr[0]), Z1), np.full(np.shape(sr[0]), Z1))
    settings = settings or [(m, e) for e in (0.5, 1.0) for m in ("laplace", "gaussian")]
    for mech, eps in settings:
        noise = sp.Noise(mech, eps)
        for private in (True, False):
            lab = f"n={N} eps={eps:g} {mech} {'private' if private else 'public'}"
            out = {"rr": np.zeros((9, 9)), "or": np.zeros((9, 9))}
            for i, px in enumerate(grid):
                for j, py in enumerate(grid):
                    rng = np.random.default_rng(i * 9 + j)
                    x, nx, y, ny = sp.release(rng, N, px, py, noise, private, tables)
                    for kind, stat, est, paper in (
                            ("rr", ad.rr_stat, ad.rr_estimate, lambda *a: sp.paper(*a)[:2]),
                            ("or", ad.or_stat, ad.or_estimate, paper_or)):
                        lo, hi = paper(x, nx, y, ny, noise.var, private)
                        ref = np.median(hi - lo)
                        lo, hi = ad.invert(stat, floor, x, nx, y, ny, noise.var, private,
                                           estimate=est(x, nx, y, ny))
                        out[kind][i, j] = np.median(np.where(np.isinf(hi), np.inf, hi - lo)) / ref
            for kind, r in out.items():
                over = [(grid[i], grid[j]) for i in range(9) for j in range(9) if r[i, j] > 1.05]
                print(f"{lab:34s} {kind.upper()} floor: max {r.max():.3f} median {np.median(r):.3f}, "
                      f"{len(over)} cells > 1.05: {' '.join(f'({a},{b}) {r[grid.index(a), grid.index(b)]:.3f}' for a, b in over)}",
                      flush=True)


def mode_or_floor_cf(tables=4000):
    """Session 13: the split-class floor for the odds ratio's statistic as the crate has it
    since session 10 (centred, quantiles moved by the Cornish-Fisher term, session 12's weight,
    session 13's contrast variance). Every split has base quantiles z_L, z_U >= z_alpha and the
    shift is increasing in z, so every interval of the class contains the set where T lies
    between the shifted z_alpha quantiles. Cells of the p_y <= 0.2 columns and p_x >= 0.8 rows
    at n = 200, Laplace eps = 0.5 and Gaussian eps = 1 (the settings with misses), seeds as
    mode_floor2d: the crate's rule and the floor, each as median width over paper_or."""
    from or_score_mean import laplace_k4
    from or_width_bound import paper_or
    grid = [round(p, 1) for p in sp.GRID]

    def floor(sr):
        z = np.full(np.shape(sr[0]), Z1)
        return ad.cornish_fisher_bounds(z, z, sr[2]) if len(sr) > 2 else (z, z)
    for mech, eps in [("laplace", 0.5), ("gaussian", 1.0)]:
        noise = sp.Noise(mech, eps)
        ad.NOISE_K4 = laplace_k4 if mech == "laplace" else (lambda s2: 0.0)
        for private in (True, False):
            rows = []
            for i, px in enumerate(grid):
                for j, py in enumerate(grid):
                    if not (py <= 0.2 or px >= 0.8):
                        continue
                    x, nx, y, ny = sp.release(np.random.default_rng(i * 9 + j), N, px, py, noise, private, tables)
                    lo, hi = paper_or(x, nx, y, ny, noise.var, private)
                    ref = np.median(hi - lo)
                    est = ad.or_estimate(x, nx, y, ny)
                    ratio = []
                    for crit in (lambda sr: ad.critical(sr, 4.0, 0.0, "denf"), floor):
                        lo, hi = ad.invert(ad.or_stat, crit, x, nx, y, ny, noise.var, private, estimate=est)
                        ratio.append(np.median(np.where(np.isinf(hi), np.inf, hi - lo)) / ref)
                    if ratio[0] > 1.05:
                        rows.append((px, py, ratio[0], ratio[1]))
            print(f"n={N} eps={eps:g} {mech} {'private' if private else 'public'}: rule > 1.05 in {len(rows)} cells, "
                  f"floor > 1.05 in {sum(r[3] > 1.05 for r in rows)} of them: "
                  + " ".join(f"({a},{b}) {u:.3f}/{f:.3f}" for a, b, u, f in rows), flush=True)


def mode_corner(tables=10000):
    """The odds ratio's corners (0.1, 0.9), (0.2, 0.9), (0.1, 0.8) with constant splits
    d = z_L - z_U against the crate's rule: coverage / median-width ratio to paper_or, seeds as
    adaptive_split.run_setting (seed 0)."""
    from or_width_bound import paper_or

    def const(d):
        zc = np.interp(abs(d), ad.D_GRID, ad.ZC_GRID)
        return lambda sr: (np.full(np.shape(sr[0]), zc + d / 2), np.full(np.shape(sr[0]), zc - d / 2))
    for mech, eps in SETTINGS:
        noise = sp.Noise(mech, eps)
        for private in (False, True):
            for px, py in [(0.1, 0.9), (0.2, 0.9), (0.1, 0.8)]:
                i, j = round(px * 10) - 1, round(py * 10) - 1
                x, nx, y, ny = sp.release(np.random.default_rng(i * 9 + j), N, px, py, noise, private, tables)
                lo, hi = paper_or(x, nx, y, ny, noise.var, private)
                ref, truth = np.median(hi - lo), px * (1 - py) / ((1 - px) * py)
                est = ad.or_estimate(x, nx, y, ny)
                out = []
                for name, crit in [("rule", lambda sr: ad.critical(sr, 4.0, 0.0, "denf"))] + \
                        [(f"d={d}", const(d)) for d in (-0.5, 0.0, 0.36, 0.8, 1.4, 2.0)]:
                    lo, hi = ad.invert(ad.or_stat, crit, x, nx, y, ny, noise.var, private, estimate=est)
                    cov = np.mean((lo <= truth) & (truth <= hi))
                    out.append(f"{name} {cov:.3f}/{np.median(np.where(np.isinf(hi), np.inf, hi - lo)) / ref:.3f}")
                print(f"{mech} eps={eps:g} {'private' if private else 'public'} ({px},{py}) " + " | ".join(out), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "validate"
    if mode == "validate":
        mode_validate()
    elif mode == "ref":
        mode_ref(int(sys.argv[2]) if len(sys.argv) > 2 else 20000)
    elif mode == "check2d":
        # rule specs: fam:K:a, or a JSON {name: {"laplace:0.5": knots, "gaussian:1": knots}}
        rules = {}
        for spec in sys.argv[3:]:
            rules.update({spec: None} if spec.startswith("fam:") else json.loads(spec))
        mode_check2d(int(sys.argv[2]) if len(sys.argv) > 2 else 4000, rules)
    elif mode == "corner":
        mode_corner(int(sys.argv[2]) if len(sys.argv) > 2 else 10000)
    elif mode == "or_floor_cf":
        mode_or_floor_cf(int(sys.argv[2]) if len(sys.argv) > 2 else 4000)
    elif mode == "floor2d":
        mode_floor2d(int(sys.argv[2]) if len(sys.argv) > 2 else 4000)
    elif mode == "family":
        mode_family(sys.argv[2] if len(sys.argv) > 2 else "reduced")
    elif mode == "curve":
        mode_curve()
    elif mode == "gamed":
        mode_gamed()
    elif mode == "minimax":
        mode_minimax(sys.argv[2] if len(sys.argv) > 2 else "reduced", int(sys.argv[3]) if len(sys.argv) > 3 else 3000,
                     sys.argv[4].split(",") if len(sys.argv) > 4 else ("max", "max01", "rel", "focus", "pareto"))
