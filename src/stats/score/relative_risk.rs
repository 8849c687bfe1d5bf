//! The relative risk's noise-aware score statistic and interval (the relative risk interval's default):
//! Koopman's (1984) and Miettinen & Nurminen's (1985) test, with the variance of each noisy
//! proportion including the exact variance of the discrete noise added to its cells.
//! Derivation, worked example and coverage: docs/intervals.md §5.
//!
//! For a candidate ratio `θ` the released table tests `H₀: p_x = θ·p_y` with
//!
//! ```text
//! T(θ) = (p̃_x − θ·p̃_y) / sqrt(v_x(p̄_x)(1 + κ_y) + θ²·v_y(p̄_y)(1 + κ_x) − 2θ·k_x k_y),
//! v(p) = p(1 − p)/n + s²·w(p)/n²,   w = 1 (public sizes), p² + (1 − p)² (private sizes),
//! ```
//!
//! `p̃ = X̃/ñ` the released proportions, `(p̄_x, p̄_y)` the binomial maximum-likelihood
//! estimates restricted to `p_x = θ·p_y` (Miettinen & Nurminen's closed form, as given by
//! Farrington & Manning 1990), `v` the delta-method variance of a noisy proportion
//! (docs/intervals.md §1, the paper's Theorem Gaussian_Valid_CI extended to private sizes), and
//! `κ = 2s²/n²`, `k = s²(1 − 2p̄)/n²` the released sizes' noise terms (0 with public sizes) that
//! make the denominator the contrast's exact variance (`ScoreCounts::contrast_variance`).
//! The interval is `{θ ≥ 0 : −z_U ≤ T(θ) ≤ z_L}`, the error split between the ends at each `θ`
//! by the ratio's skew there ([`TailSplit`](super::TailSplit)). Unlike `p̃ ± z·Ṽ` or
//! its log-scale version, the variance is evaluated where each `θ` puts the risks, not at the
//! noisy estimate: a noisy `Ỹ` that is too large no longer shrinks the interval's upper arm.
//! The upper end is `+∞` when the released table cannot exclude `p_y` near 0 (`T` stays above
//! `−z_U` as `θ → ∞`):
//! an honest answer, since any interval with 95% coverage at every `(p_x, p_y)` must then be
//! unbounded or very long (docs/intervals.md §5). Pure post-processing of the release.

use super::{denominator_skew, invert_score_test, standardised, ScoreAt, ScoreCounts};
use crate::stats::table::ReleasedCounts;

/// The restricted maximum-likelihood risks `(p̄_x, p̄_y)` under `p_x = θ·p_y` for `x` cases of
/// `n_x` and `y` of `n_y` (Miettinen & Nurminen 1985; closed form of Farrington & Manning
/// 1990): `p̄_y` is the smaller root of `Aq² + Bq + C = 0`, `A = (n_x + n_y)θ`,
/// `B = −(n_x θ + x + n_y + y θ)`, `C = x + y`, clamped to `[0, min(1, 1/θ)]`.
pub fn restricted_risks(theta: f64, x: f64, n_x: f64, y: f64, n_y: f64) -> (f64, f64) {
    let a = (n_x + n_y) * theta;
    let b = -(n_x * theta + x + n_y + y * theta);
    let c = x + y;
    let disc = (b * b - 4.0 * a * c).max(0.0);
    let p_y = ((-b - disc.sqrt()) / (2.0 * a)).clamp(0.0, 1.0f64.min(1.0 / theta));
    (theta * p_y, p_y)
}

/// The score statistic `T(θ)` of the module docs for released counts (sizes floored at 1),
/// with its skew `c_D²/s`: `c² = v/p̄²` per arm, `c_D` the unexposed arm's, `s² = c_x² + c_y²`
/// (the log ratio's delta-method variance).
pub fn score_statistic(theta: f64, counts: &ReleasedCounts) -> ScoreAt {
    ScoreCounts::new(counts).relative_risk_statistic(theta)
}

impl ScoreCounts {
    /// The relative risk's `T(θ)` with its denominator skew ([`score_statistic`]).
    pub fn relative_risk_statistic(&self, theta: f64) -> ScoreAt {
        let counts = &self.counts;
        let (p_x, p_y) =
            restricted_risks(theta, self.cases[0], counts.n_x, self.cases[1], counts.n_y);
        let v_x = self.proportion_variance(0, p_x, 1.0 - p_x);
        let v_y = self.proportion_variance(1, p_y, 1.0 - p_y);
        let (cv2_x, cv2_y) = (v_x / (p_x * p_x), v_y / (p_y * p_y));
        ScoreAt {
            statistic: standardised(
                self.proportions[0] - theta * self.proportions[1],
                self.contrast_variance([1.0, theta], [v_x, v_y], [p_x, p_y]),
            ),
            denominator_skew: denominator_skew(cv2_y, cv2_x + cv2_y),
            skewness: 0.0,
        }
    }
}

/// The score interval `(lower, upper)` for `p_x/p_y` from released counts (real-valued; sizes
/// floored at 1, cases used as released, negative or above the size included) at the two-sided
/// quantile `z` (split by [`TailSplit`](super::TailSplit)), by [`invert_score_test`] of
/// [`score_statistic`]. As `θ → 0`,
/// `T → X̃/s` and the split is the least uneven, so `lower` is 0 when `X̃ ≤ z_L·s` (the release
/// cannot exclude `X = 0`); as `θ → ∞`, `T → −Ỹ/s` and all the error goes to the upper end, so
/// `upper` is `+∞` when `Ỹ ≤ Φ⁻¹(1 − α)·s` (it cannot exclude `Y = 0`).
pub fn relative_risk_score_interval(counts: ReleasedCounts, z: f64) -> (f64, f64) {
    let test = ScoreCounts::new(&counts);
    let ReleasedCounts { x, n_x, y, n_y, .. } = test.counts;
    invert_score_test(
        |theta| test.relative_risk_statistic(theta),
        z,
        (x / n_x) / (y / n_y),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::score::{tail_quantiles, TailSplit};
    use crate::stats::table::{GroupSizes, Z95};

    #[test]
    fn restricted_risks_solve_the_score_equation() {
        // The restricted MLE sets the derivative of the binomial log-likelihood along
        // p_x = θ p_y to zero: (x + y)/q − θ(n_x − x)/(1 − θq) − (n_y − y)/(1 − q) = 0.
        for (theta, x, nx, y, ny) in [
            (2.0, 40.0, 200.0, 20.0, 200.0),
            (0.5, 12.0, 50.0, 30.0, 80.0),
            (7.0, 90.0, 100.0, 5.0, 100.0),
        ] {
            let (px, py) = restricted_risks(theta, x, nx, y, ny);
            assert!((px - theta * py).abs() < 1e-15);
            let d = (x + y) / py - theta * (nx - x) / (1.0 - px) - (ny - y) / (1.0 - py);
            assert!(d.abs() < 1e-8, "{theta}: {d}");
        }
        // At θ = the observed ratio the restricted estimates are the observed risks.
        let (px, py) = restricted_risks(2.0, 40.0, 200.0, 20.0, 200.0);
        assert!((px - 0.2).abs() < 1e-12 && (py - 0.1).abs() < 1e-12);
    }

    #[test]
    fn score_interval_matches_hand_computation() {
        // docs/intervals.md §5, worked example: X̃ = 40 of 200, Ỹ = 20 of 200, s² = 8, 95%:
        // the least uneven split z_L = Φ⁻¹(0.985) = 2.170090, z_U = Φ⁻¹(0.965) = 1.811911.
        // Public sizes, the statistic at θ = 3.563643: restricted p̄_y = 0.064360, p̄_x = θ p̄_y = 0.229355;
        // v_x = 0.229355·0.770645/200 + 8/200² = 0.00108376, v_y = 0.06436·0.93564/200 + 0.0002
        // = 0.00050109, V = v_x + θ² v_y = 0.0074474, T = (0.2 − 0.3563643)/√V = −1.811911.
        let (zl, zu) = tail_quantiles(Z95);
        assert!((zl - 2.170090).abs() < 1e-6 && (zu - 1.811911).abs() < 1e-6);
        let (px, py) = restricted_risks(3.563643, 40.0, 200.0, 20.0, 200.0);
        assert!((py - 0.064360).abs() < 1e-6 && (px - 0.229355).abs() < 1e-6);
        let counts = ReleasedCounts::new(40.0, 200.0, 20.0, 200.0, GroupSizes::Public, 8.0);
        let test = ScoreCounts::new(&counts);
        let (vx, vy) = (
            test.proportion_variance(0, px, 1.0 - px),
            test.proportion_variance(1, py, 1.0 - py),
        );
        assert!((vx - 0.00108376).abs() < 1e-8 && (vy - 0.00050109).abs() < 1e-8);
        let t = score_statistic(3.563643, &counts);
        assert!((t.statistic + 1.811911).abs() < 1e-5, "{t:?}");
        // The ends with the split of TailSplit, against an independent computation
        // (docs/prototypes/adaptive_split.py check: z_c solved exactly at every θ, ends by
        // brentq): public [1.0359355, 3.3878499], private [1.0581822, 3.3416275] (private sizes
        // weight the noise by w = p² + (1 − p)² < 1, so the interval is shorter; the size
        // noises' terms of contrast_variance widen it by 1e-4; `--delta-variance`, without
        // them, gives the [1.0582949, 3.3412853] of the delta method). The fixed
        // 30/70 split gave [1.077238, 3.563643] (public): the skew at the upper end moves
        // error there and shortens both arms' sum.
        for (sizes, lo, hi) in [
            (GroupSizes::Public, 1.0359355342819265, 3.3878499473115573),
            (GroupSizes::Private, 1.0581821846771187, 3.341627518440479),
        ] {
            let (l, u) = relative_risk_score_interval(
                ReleasedCounts::new(40.0, 200.0, 20.0, 200.0, sizes, 8.0),
                Z95,
            );
            assert!(
                (l / lo - 1.0).abs() < 1e-9 && (u / hi - 1.0).abs() < 1e-9,
                "{sizes}: {l} {u}"
            );
        }
        // Without noise: 40/200 vs 20/200 and 7/34 vs 1/34.
        for (x, n, y, lo, hi) in [
            (40.0, 200.0, 20.0, 1.1328767646473195, 3.0775770369097653),
            (7.0, 34.0, 1.0, 0.7260678912140907, 33.447661221033606),
        ] {
            let (l, u) = relative_risk_score_interval(
                ReleasedCounts::new(x, n, y, n, GroupSizes::Public, 0.0),
                Z95,
            );
            assert!(
                (l / lo - 1.0).abs() < 1e-9 && (u / hi - 1.0).abs() < 1e-9,
                "{x}/{n}: {l} {u}"
            );
        }
    }

    #[test]
    fn ends_are_where_the_statistic_equals_z() {
        let split = TailSplit::at(Z95);
        for sizes in [GroupSizes::Public, GroupSizes::Private] {
            let (lo, hi) = relative_risk_score_interval(
                ReleasedCounts::new(40.0, 200.0, 20.0, 200.0, sizes, 8.0),
                Z95,
            );
            let t = |th: f64| {
                score_statistic(
                    th,
                    &ReleasedCounts::new(40.0, 200.0, 20.0, 200.0, sizes, 8.0),
                )
            };
            let (zl, _) = split.quantiles(t(lo).denominator_skew);
            let (_, zu) = split.quantiles(t(hi).denominator_skew);
            assert!(
                (t(lo).statistic - zl).abs() < 1e-9 && (t(hi).statistic + zu).abs() < 1e-9,
                "{sizes}"
            );
            // Ỹ = 20 against noise s = 2.8: both ends' splits more uneven than 30/70.
            assert!(zu < 1.8119 && zl > 2.1701, "{zl} {zu}");
            assert!(lo < 2.0 && 2.0 < hi);
        }
        // No noise, x ≤ 0: the lower end is 0; a released Ỹ indistinguishable from 0: +∞.
        let (lo, _) = relative_risk_score_interval(
            ReleasedCounts::new(-3.0, 200.0, 20.0, 200.0, GroupSizes::Public, 0.0),
            Z95,
        );
        assert_eq!(lo, 0.0);
        let (_, hi) = relative_risk_score_interval(
            ReleasedCounts::new(40.0, 200.0, 10.0, 200.0, GroupSizes::Public, 200.0),
            Z95,
        );
        assert_eq!(hi, f64::INFINITY);
    }
}
