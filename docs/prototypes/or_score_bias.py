"""Prototype (not used by the crate or CI; numpy): the law of the odds ratio's score statistic
at the true odds ratio, where both a and d are small (docs/intervals.md section 6, "Two
shortfalls").

Public sizes, n = 200, discrete Laplace noise at eps/2 per cell (as the crate's release), the
released proportions p~ = X~/n. At theta = the true odds ratio it computes
  - the crate's statistic (Miettinen & Nurminen's score with the noise variance, section 2):
    [(p~_x - pbar_x) pbar_y qbar_y - (p~_y - pbar_y) pbar_x qbar_x] / sqrt(...), the restricted
    estimates from the released counts clamped to [0, n];
  - the bilinear contrast p~_x q~_y - theta q~_x p~_y over its delta-method standard deviation at
    the restricted estimates (exactly unbiased under H0 with public sizes: the arms are
    independent);
and prints the mean, standard deviation, skewness and the tail probabilities at the crate's
30/70 split (z_U = 1.8119, z_L = 2.1701) and at 1.96.

Usage (seconds):  python3 or_score_bias.py [eps] [p_x] [p_y]      # default 0.5 0.1 0.9
"""
import sys

import numpy as np

rng = np.random.default_rng(5)
N_TABLES = 400_000
N = 200


def discrete_laplace(eps_cell, size):
    """P(k) proportional to exp(-eps_cell |k|): a difference of two geometric variables."""
    p = 1 - np.exp(-eps_cell)
    return rng.geometric(p, size) - rng.geometric(p, size)


def restricted(theta, x, nx, y, ny):
    """Binomial MLE restricted to OR = theta keeping the margin m = x + y (section 2)."""
    m = x + y
    a = ny * (theta - 1)
    b = nx * theta + ny - m * (theta - 1)
    disc = np.sqrt(np.maximum(b * b + 4 * a * m, 0))
    py = np.clip(2 * m / (b + disc), 0, 1)
    odds_x = theta * py / (1 - py + 1e-300)
    return odds_x / (1 + odds_x), py


def report(name, t):
    m, s = t.mean(), t.std()
    g = ((t - m) ** 3).mean() / s**3
    print(f"{name}: mean {m:+.4f} sd {s:.4f} skew {g:+.4f}  P(T<-1.812)={np.mean(t < -1.8119):.4f} "
          f"P(T>2.170)={np.mean(t > 2.1701):.4f}  P(T<-1.96)={np.mean(t < -1.96):.4f} P(T>1.96)={np.mean(t > 1.96):.4f}")


def main():
    eps = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5
    px0, py0 = (float(v) for v in sys.argv[2:4]) if len(sys.argv) > 3 else (0.1, 0.9)
    s2 = 2 * np.exp(-eps / 2) / (1 - np.exp(-eps / 2)) ** 2  # variance of the cell noise
    x_rel = rng.binomial(N, px0, N_TABLES) + discrete_laplace(eps / 2, N_TABLES)
    y_rel = rng.binomial(N, py0, N_TABLES) + discrete_laplace(eps / 2, N_TABLES)
    theta = px0 * (1 - py0) / ((1 - px0) * py0)
    px, py = restricted(theta, np.clip(x_rel, 0, N).astype(float), N,
                        np.clip(y_rel, 0, N).astype(float), N)
    qx, qy = 1 - px, 1 - py
    vx, vy = px * qx / N + s2 / N**2, py * qy / N + s2 / N**2
    tx, ty = x_rel / N, y_rel / N
    gx, gy = px * qx, py * qy
    with np.errstate(all="ignore"):
        score = ((tx - px) * gy - (ty - py) * gx) / np.sqrt(vx * gy**2 + vy * gx**2)
    score = score[np.isfinite(score)]
    bilinear = (tx * (1 - ty) - theta * (1 - tx) * ty) / np.sqrt(
        (qy + theta * py) ** 2 * vx + (px + theta * qx) ** 2 * vy + (theta - 1) ** 2 * vx * vy)
    print(f"eps={eps} cell=({px0}, {py0}) theta={theta:.4g} noise variance={s2:.2f}, {N_TABLES} tables")
    report("MN score (crate)", score)
    report("bilinear contrast", bilinear)


if __name__ == "__main__":
    main()
