"""Prototype (not used by the crate or CI; numpy + scipy): issue 45's restated width target
(docs/intervals.md section 7) in the cells that miss it, with the Gaussian noise calibrated as
one vector (the SQL default since issue 45).

Reads the output of `coverage_table -- N wref analytic` (examples/coverage_table.rs): per cell
the default score interval's median width, W_ref (the paper's construction at the smallest
z >= 1.96 that covers 95% of the simulated tables) and their ratio. For every cell whose ratio
exceeds 1.05 it computes, at the per-cell noise variance of that run (69.49 at eps = 0.5,
20.31 at eps = 1, delta = 1e-4; a discrete Gaussian of that variance, as the crate samples):

* the Neyman-Pearson lower bound on the median width of ANY interval with coverage >= 0.95 at
  every parameter (section 5): width_bound.width_bound for the relative risk,
  or_width_bound.arm_bound / or_bound for the odds ratio (private sizes: the bound even lets
  the interval know n). The target is proven impossible in a cell iff bound > 1.05 W_ref.
* with `joint`, joint_width_bound.py's sharper bound (both ends at once, null points moving both
  risks, the power bounded on the binned log-likelihood ratio; still a proof).
* the floor of the score-test class (section 6, split_optimum.py floor2d and or_floor_cf):
  every split has quantiles >= z_alpha = 1.645 (for the odds ratio before its Cornish-Fisher
  shift, which increases with z), so every interval of the class contains the set where T is
  within the z_alpha bounds; that set's median width is at most the best width of the class.
  With the crate rule's prototype width on the same simulated tables (adaptive_split.critical
  "denf", k = 4) to show how close the prototype is to the crate.

Usage (from docs/prototypes): python3 wref_bounds.py wref.tsv [tables per cell, 10000] [joint]
"""
import sys
import time

import numpy as np

import adaptive_split as ad
import joint_width_bound as jb
import or_width_bound as ob
import score_prototype as sp
import width_bound as wb
from split_optimum import Z1

N = 200


class VectorNoise(sp.Noise):
    """The discrete Gaussian of per-cell variance `var` (score_prototype.Noise's law, sigma
    set from the crate's variance instead of the per-cell calibration)."""

    def __init__(self, var):
        self.mech = "gaussian"
        s = np.sqrt(var)
        k = np.arange(-int(12 * s) - 2, int(12 * s) + 3)
        w = np.exp(-k * k / (2 * s * s))
        w /= w.sum()
        self.k, self.cdf = k, np.cumsum(w)
        self.var = float((k * k * w).sum())
        self.sigma = s


def load(path):
    rows = []
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if f[0] == "calibration":
            head = f
            continue
        r = dict(zip(head, f))
        for k in ["epsilon"] + head[4:]:
            r[k] = float(r[k])
        rows.append(r)
    return rows


def floor_rr(sr):
    z = np.full(np.shape(sr[0]), Z1)
    return z, z


def floor_or(sr):
    z = np.full(np.shape(sr[0]), Z1)
    return ad.cornish_fisher_bounds(z, z, sr[2]) if len(sr) > 2 else (z, z)


def crate_rule(sr):
    return ad.critical(sr, 4.0, 0.0, "denf")


def median_width(lo, hi):
    return float(np.median(np.where(np.isinf(hi), np.inf, hi - lo)))


def main():
    rows = load(sys.argv[1])
    tables = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    joint = "joint" in sys.argv[3:]
    grid = [round(p, 1) for p in sp.GRID]
    print("| setting | interval | (p_x, p_y) | ratio to W_ref | NP bound / W_ref | joint NP bound / W_ref "
          "| proven impossible | floor / W_ref | width / floor | prototype rule / floor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for eps in sorted({r["epsilon"] for r in rows}):
        for sizes in ("private", "public"):
            miss = [r for r in rows if r["epsilon"] == eps and r["sizes"] == sizes and r["ratio"] > 1.05]
            if not miss:
                continue
            t0 = time.time()
            private = sizes == "private"
            noise = VectorNoise(miss[0]["cell_noise_variance"])
            assert abs(noise.var / miss[0]["cell_noise_variance"] - 1) < 1e-6
            arms_rr, arms_or, laws = {}, {}, {}
            for r in miss:
                px, py = round(r["p_x"], 1), round(r["p_y"], 1)
                i, j = grid.index(px), grid.index(py)
                if r["interval"].startswith("RR"):
                    key = (px, py)
                    if key not in arms_rr:
                        arms_rr[key] = wb.width_bound(N, px, py, noise, private)
                    bound = arms_rr[key]
                    stat, est, floor = ad.rr_stat, ad.rr_estimate, floor_rr
                else:
                    for p in (px, py):
                        for d in (-1, 1):
                            if (p, d) not in arms_or:
                                arms_or[(p, d)] = ob.arm_bound(N, p, noise, private, d)
                    bound = ob.or_bound(px, py, arms_or)[0]
                    stat, est, floor = ad.or_stat, ad.or_estimate, floor_or
                if joint:
                    up = jb.quadrant(px, py, jb.arm_laws(N, px, noise, private, +1, laws),
                                     jb.arm_laws(N, py, noise, private, -1, laws))
                    low = jb.quadrant(px, py, jb.arm_laws(N, px, noise, private, -1, laws),
                                      jb.arm_laws(N, py, noise, private, +1, laws))
                    joint_bound = jb.best_width(up, low, 0 if r["interval"].startswith("RR") else 1)
                else:
                    joint_bound = np.nan
                proven = max(bound, np.nan_to_num(joint_bound)) > 1.05 * r["w_ref"]
                x, nx, y, ny = sp.release(np.random.default_rng(i * 9 + j), N, px, py, noise, private, tables)
                e = est(x, nx, y, ny)
                w_floor = median_width(*ad.invert(stat, floor, x, nx, y, ny, noise.var, private, estimate=e))
                w_rule = median_width(*ad.invert(stat, crate_rule, x, nx, y, ny, noise.var, private, estimate=e))
                w_ref = r["w_ref"]
                print(f"| n = 200, ε = {eps:g}, gaussian, {sizes} sizes | {r['interval']} | ({px}, {py}) "
                      f"| {r['ratio']:.3f} | {bound / w_ref:.3f} | {joint_bound / w_ref:.3f} | {'yes' if proven else 'no'} "
                      f"| {w_floor / w_ref:.3f} | {r['median_width'] / w_floor:.3f} | {w_rule / w_floor:.3f} |",
                      flush=True)
            print(f"<!-- eps {eps:g} {sizes}: {time.time() - t0:.0f} s, {tables} tables per cell -->", flush=True)


if __name__ == "__main__":
    main()
