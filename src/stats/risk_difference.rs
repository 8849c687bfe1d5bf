//! The risk difference `p_x − p_y` of a released 2x2 table and its intervals: the adjusted Wald
//! interval of Agresti & Caffo (2000) with the noise variance added (docs/intervals.md §3).

use super::table::{IntervalMethod, RatioInterval, ReleasedCounts, ReleasedTable};

impl ReleasedTable {
    /// The risk difference `p̃_x − p̃_y = X̃/ñ_x − Ỹ/ñ_y`, sizes floored at 1 as for the
    /// relative risk (so with private sizes it always exists); NULL only for public sizes with
    /// an empty arm.
    pub fn risk_difference(&self) -> Option<f64> {
        let (nx, ny) = self.sizes_floored()?;
        Some(self.exposed_cases as f64 / nx - self.unexposed_cases as f64 / ny)
    }

    /// The interval for `p_x − p_y` with the noise variance added as the paper adds it to the
    /// ratio's (Theorem Gaussian_Valid_CI; for a difference of independent arms the variances
    /// add exactly): `conservative` is the adjusted Wald interval of Agresti & Caffo (2000) —
    /// one case and one non-case added to each arm, `p̄ = (X̃ + 1)/(ñ + 2)`, centre
    /// `p̄_x − p̄_y` — with variance `V = p̄(1 − p̄)/(ñ + 2) + s²·w/ñ²` per arm, `w = 1` for
    /// public sizes and `p̄² + (1 − p̄)²` for private ones (`∂(a/(a+b))/∂a = b/n²`,
    /// `∂/∂b = −a/n²`); `plain` is the textbook Wald interval `p̂_x − p̂_y ± z·sqrt(Σ p̂(1 − p̂)/ñ)`
    /// without noise. Proportions clamped to `[0, 1]`, sizes floored at 1, the interval to
    /// `[−1, 1]`. `IntervalMethod::Log` does not apply (no ratio) and
    /// `IntervalMethod::Bootstrap` needs the noise law: both give `None` here.
    pub fn risk_difference_interval_at_z(
        &self,
        z: f64,
        method: IntervalMethod,
    ) -> Option<RatioInterval> {
        if matches!(
            method,
            IntervalMethod::Log | IntervalMethod::Bootstrap | IntervalMethod::Score
        ) {
            return None;
        }
        let adjusted = method == IntervalMethod::Conservative;
        self.risk_difference_wald_at_z(z, adjusted, adjusted)
    }

    /// The paper's construction (Theorem Gaussian_Valid_CI: estimate ± z·standard error with
    /// the noise variance added) applied to the risk difference: the Wald interval
    /// `p̂_x − p̂_y ± z·sqrt(Σ p̂(1 − p̂)/ñ + s²·w/ñ²)`, not adjusted. Not offered in SQL: the
    /// reference the coverage study compares the risk difference's widths with
    /// (docs/coverage.md, part 2).
    pub fn risk_difference_paper_construction_at_z(&self, z: f64) -> Option<RatioInterval> {
        self.risk_difference_wald_at_z(z, false, true)
    }

    /// The Wald interval for `p_x − p_y`, with Agresti & Caffo's adjustment (`adjusted`) and
    /// the noise variance (`with_noise`) or without (see
    /// [`Self::risk_difference_interval_at_z`]).
    fn risk_difference_wald_at_z(
        &self,
        z: f64,
        adjusted: bool,
        with_noise: bool,
    ) -> Option<RatioInterval> {
        let estimate = self.risk_difference()?;
        let mut counts = self.counts()?;
        if !with_noise {
            counts.noise_variance = 0.0;
        }
        let (center, half_width) = risk_difference_wald_at(counts, z, adjusted);
        Some(RatioInterval {
            estimate,
            lower: (center - half_width).max(-1.0),
            upper: (center + half_width).min(1.0),
        })
    }
}

/// `(centre, half-width)` of the Wald interval for `p_x − p_y` at (possibly real-valued)
/// counts, sizes already floored at 1, with Agresti & Caffo's (2000) adjustment (`adjusted`:
/// `p̄ = (X̃ + 1)/(ñ + 2)`) and the noise variance `s²·w/ñ²` per arm (none for `s² = 0`);
/// proportions clamped to `[0, 1]` (see [`ReleasedTable::risk_difference_interval_at_z`]).
pub fn risk_difference_wald_at(counts: ReleasedCounts, z: f64, adjusted: bool) -> (f64, f64) {
    // (centre, variance) of one arm.
    let arm = |cases: f64, n: f64| {
        let (p, m) = if adjusted {
            ((cases + 1.0) / (n + 2.0), n + 2.0)
        } else {
            (cases / n, n)
        };
        let p = p.clamp(0.0, 1.0);
        let noise = counts.noise_variance * counts.sizes.noise_weight(p, 1.0 - p) / (n * n);
        (p, p * (1.0 - p) / m + noise)
    };
    let (px, vx) = arm(counts.x, counts.n_x);
    let (py, vy) = arm(counts.y, counts.n_y);
    (px - py, z * (vx + vy).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::table::{released, GroupSizes, RatioStatistic};

    #[test]
    fn risk_difference_matches_hand_computation() {
        // X̃ = 40 of 200, Ỹ = 20 of 200, s² = 8: RD = 0.1. Adjusted (conservative):
        // p̄_x = 41/202, p̄_y = 21/202, centre 20/202; sampling p̄(1 − p̄)/202 per arm; noise
        // 8/200² per arm (public) or 8(p̄² + (1 − p̄)²)/200² (private).
        let z = 1.959963984540054;
        let (px, py) = (41.0 / 202.0, 21.0 / 202.0);
        let sampling = px * (1.0 - px) / 202.0 + py * (1.0 - py) / 202.0;
        let w = |p: f64| p * p + (1.0 - p) * (1.0 - p);
        for (sizes, noise) in [
            (GroupSizes::Public, 16.0 / 40000.0),
            (GroupSizes::Private, 8.0 * (w(px) + w(py)) / 40000.0),
        ] {
            let t = released(40, 200, 20, 200, sizes, 8.0);
            let ci = t
                .estimate_with_interval(
                    RatioStatistic::RiskDifference,
                    0.95,
                    IntervalMethod::Conservative,
                )
                .unwrap()
                .unwrap();
            let h = z * (sampling + noise).sqrt();
            assert!((ci.estimate - 0.1).abs() < 1e-12);
            assert!((ci.lower - (20.0 / 202.0 - h)).abs() < 1e-12, "{sizes}");
            assert!((ci.upper - (20.0 / 202.0 + h)).abs() < 1e-12, "{sizes}");
            // Plain: the textbook Wald interval, 0.1 ± z·sqrt(0.2·0.8/200 + 0.1·0.9/200).
            let plain = t
                .estimate_with_interval(RatioStatistic::RiskDifference, 0.95, IntervalMethod::Plain)
                .unwrap()
                .unwrap();
            assert!((plain.upper - (0.1 + z * 0.00125f64.sqrt())).abs() < 1e-12);
            assert_eq!(
                t.estimate_with_interval(RatioStatistic::RiskDifference, 0.95, IntervalMethod::Log)
                    .unwrap(),
                None
            );
        }
        // Clamped to [−1, 1]; NULL only for an empty public arm.
        let t = released(10, 10, 0, 10, GroupSizes::Public, 50.0);
        let ci = t
            .estimate_with_interval(
                RatioStatistic::RiskDifference,
                0.95,
                IntervalMethod::Conservative,
            )
            .unwrap()
            .unwrap();
        assert_eq!(ci.upper, 1.0);
        assert_eq!(
            released(1, 0, 1, 5, GroupSizes::Public, 1.0).risk_difference(),
            None
        );
        assert!(IntervalMethod::Log
            .check_statistic(RatioStatistic::RiskDifference)
            .is_err());
    }
}
