//! The relative-risk estimator and its intervals from a released 2x2 table
//! ([`super::table`]): the paper's conservative and log intervals and the classical Katz
//! interval (the score interval is `score/relative_risk.rs`).
//!
//! Notation (paper, Section 4): `X` = exposed cases, `n_x` = exposed rows, `Y` = unexposed cases,
//! `n_y` = unexposed rows; the relative risk is `p = p_x / p_y`, estimated by `(X/n_x)/(Y/n_y)`.

use super::table::{
    two_sided_z, GroupSizes, IntervalMethod, RatioInterval, ReleasedCounts, ReleasedTable,
};

impl ReleasedTable {
    /// The relative risk `(X̃/n_x) / (max(Ỹ,1)/n_y)`: every noisy count in a denominator is
    /// floored at 1 (paper, Claim bias_ratio_counts), so the estimate always exists and its
    /// expectation is finite. With public sizes a group without exposed or unexposed rows has
    /// no relative risk (NULL); that reveals nothing beyond the declared-public sizes.
    pub fn relative_risk(&self) -> Option<f64> {
        let (nx, ny) = self.sizes_floored()?;
        Some((self.exposed_cases as f64 / nx) / (self.unexposed_cases.max(1) as f64 / ny))
    }

    pub(crate) fn sizes_floored(&self) -> Option<(f64, f64)> {
        if self.sizes == GroupSizes::Public
            && (self.exposed_total <= 0 || self.unexposed_total <= 0)
        {
            return None;
        }
        Some((
            self.exposed_total.max(1) as f64,
            self.unexposed_total.max(1) as f64,
        ))
    }

    /// The released counts with the sizes floored at 1 ([`Self::sizes_floored`]); `None`
    /// where that is `None`.
    pub fn counts(&self) -> Option<ReleasedCounts> {
        let (n_x, n_y) = self.sizes_floored()?;
        Some(
            ReleasedCounts::new(
                self.exposed_cases as f64,
                n_x,
                self.unexposed_cases as f64,
                n_y,
                self.sizes,
                self.noise_variance,
            )
            .with_noise_fourth_cumulant(self.noise_fourth_cumulant)
            .with_released_sizes([self.exposed_total as f64, self.unexposed_total as f64]),
        )
    }

    /// The normal-approximation interval for `p_x/p_y` (paper, Theorems Valid_CI and
    /// Gaussian_Valid_CI), computed as the paper's coverage study does: all counts floored at
    /// 1, `p̃ ± z·Ṽ` with
    /// `Ṽ² = p̃² [ (1/X̃ − 1/n_x) + (1/Ỹ − 1/n_y) + s²(w_x/X̃² + w_y/Ỹ²) ]`,
    /// `s²` the per-cell noise variance (conservative only). With public sizes `w = 1`, the
    /// paper's formula. With private sizes `p̃_x = X̃/(X̃ + B̃)` has noise in both parts; the delta
    /// method gives noise variance `s²((1−p_x)² + p_x²)/n_x²` for `p̃_x`, i.e.
    /// `w_x = p̃_x² + (1 − p̃_x)²` (≤ 1: noise in numerator and denominator partly cancels).
    /// The lower end is clamped at 0 (the parameter is non-negative) and negative sampling
    /// terms (noise pushing a count above its size) at 0.
    pub fn interval(
        &self,
        confidence: f64,
        method: IntervalMethod,
    ) -> Result<Option<RatioInterval>, String> {
        Ok(self.interval_at_z(two_sided_z(confidence)?, method))
    }

    /// [`Self::interval`] for a precomputed quantile `z = two_sided_z(confidence)`.
    /// `IntervalMethod::Log` gives `exp(ln p̃ ± z·Ṽ/p̃)` (see [`relative_risk_log_interval_at`]);
    /// `IntervalMethod::Bootstrap` needs the noise law and is computed by
    /// [`TableNoise::interval`], so here it gives `None`.
    pub fn interval_at_z(&self, z: f64, method: IntervalMethod) -> Option<RatioInterval> {
        let counts = self.counts()?;
        let estimate = self.relative_risk().expect("sizes are valid");
        let (lower, upper) = match method {
            IntervalMethod::Bootstrap => return None,
            IntervalMethod::Score => super::score::relative_risk_score_interval(counts, z),
            IntervalMethod::Log => {
                let (log_center, half_width) = relative_risk_log_interval_at(counts, z);
                (
                    (log_center - half_width).exp(),
                    (log_center + half_width).exp(),
                )
            }
            IntervalMethod::Conservative | IntervalMethod::Plain => {
                let (center, half_width) = relative_risk_interval_at(counts, method, z);
                ((center - half_width).max(0.0), center + half_width)
            }
        };
        Some(RatioInterval {
            estimate,
            lower,
            upper,
        })
    }
}

/// `Ṽ²/p̃²` of the paper's interval (Theorems Valid_CI and Gaussian_Valid_CI) at counts
/// already floored at 1: `(1/X − 1/n_x) + (1/Y − 1/n_y)` (negative terms at 0), plus for
/// `with_noise` the noise term `s²(w_x/X² + w_y/Y²)`, `w = 1` for public sizes and
/// `p̂² + (1 − p̂)²` for private ones (see [`ReleasedTable::interval`]). By the delta method it
/// is also the variance of `ln p̃` (docs/intervals.md), which the log interval uses.
pub fn relative_risk_relative_variance(counts: ReleasedCounts, with_noise: bool) -> f64 {
    let ReleasedCounts { x, n_x, y, n_y, .. } = counts;
    let mut v2 = (1.0 / x - 1.0 / n_x).max(0.0) + (1.0 / y - 1.0 / n_y).max(0.0);
    if with_noise {
        let weight = |cases: f64, total: f64| {
            let p = (cases / total).clamp(0.0, 1.0);
            counts.sizes.noise_weight(p, 1.0 - p)
        };
        v2 += counts.noise_variance * (weight(x, n_x) / (x * x) + weight(y, n_y) / (y * y));
    }
    v2
}

/// The centre and half-width of the relative-risk interval at (possibly real-valued) counts:
/// the formula of [`ReleasedTable::interval`] (counts floored at 1), shared with the planning
/// function [`crate::stats::planning::epsilon_for_half_width`].
pub fn relative_risk_interval_at(
    counts: ReleasedCounts,
    method: IntervalMethod,
    z: f64,
) -> (f64, f64) {
    let counts = counts.floored();
    let center = (counts.x / counts.n_x) / (counts.y / counts.n_y);
    let v2 = relative_risk_relative_variance(counts, method != IntervalMethod::Plain);
    (center, z * center * v2.sqrt())
}

/// The noise-aware log interval for the relative risk at (possibly real-valued) counts, as
/// `(ln centre, half-width on the log scale)`: Katz et al. (1978; paper, Appendix C, Equation
/// conf_int_RR) `ln T ± z·sqrt(V)` with `V` the delta-method variance of `ln p̃` including the
/// noise ([`relative_risk_relative_variance`], extending Theorem Gaussian_Valid_CI's variance
/// to the log scale; for private sizes the noise of a size partly cancels that of its count).
/// All counts floored at 1, as for the paper's interval. Derivation: docs/intervals.md.
pub fn relative_risk_log_interval_at(counts: ReleasedCounts, z: f64) -> (f64, f64) {
    let counts = counts.floored();
    let v = relative_risk_relative_variance(counts, true);
    (
        ((counts.x / counts.n_x) / (counts.y / counts.n_y)).ln(),
        z * v.sqrt(),
    )
}

/// The classical, **non-private** log interval for the relative risk (Katz et al. 1978; paper,
/// Appendix C, Equation conf_int_RR): `exp(ln T ± z·sqrt(1/X − 1/n_x + 1/Y − 1/n_y))`.
/// `None` when a count of cases is 0 (the log is undefined).
pub fn katz_interval(
    exposed_cases: u64,
    exposed_total: u64,
    unexposed_cases: u64,
    unexposed_total: u64,
    confidence: f64,
) -> Result<Option<RatioInterval>, String> {
    katz_interval_at_z(
        exposed_cases,
        exposed_total,
        unexposed_cases,
        unexposed_total,
        two_sided_z(confidence)?,
    )
}

/// [`katz_interval`] for a precomputed quantile `z = two_sided_z(confidence)`.
pub fn katz_interval_at_z(
    exposed_cases: u64,
    exposed_total: u64,
    unexposed_cases: u64,
    unexposed_total: u64,
    z: f64,
) -> Result<Option<RatioInterval>, String> {
    if exposed_cases > exposed_total || unexposed_cases > unexposed_total {
        return Err("cases cannot exceed the total".into());
    }
    if exposed_cases == 0 || unexposed_cases == 0 {
        return Ok(None);
    }
    let (x, nx, y, ny) = (
        exposed_cases as f64,
        exposed_total as f64,
        unexposed_cases as f64,
        unexposed_total as f64,
    );
    let t = (x / nx) / (y / ny);
    let se = (1.0 / x - 1.0 / nx + 1.0 / y - 1.0 / ny).max(0.0).sqrt();
    Ok(Some(RatioInterval {
        estimate: t,
        lower: (t.ln() - z * se).exp(),
        upper: (t.ln() + z * se).exp(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::table::released;

    #[test]
    fn size_modes_noise_weights_come_from_their_noised_cells() {
        for sizes in [GroupSizes::Public, GroupSizes::Private] {
            for p in [0.0, 0.1, 0.37, 0.9] {
                let q = 1.0 - p;
                let cells = sizes.noised_cells(p, q).into_iter().flatten();
                let (w, c) = cells.fold((0.0, 0.0), |(w, c), (u, dn)| (w + u * u, c + u * dn));
                assert!((w - sizes.noise_weight(p, q)).abs() < 1e-15, "{sizes} {p}");
                assert!(
                    (c - sizes.size_noise_covariance(p, q)).abs() < 1e-15,
                    "{sizes} {p}"
                );
            }
        }
    }

    #[test]
    fn estimate_floors_only_denominators() {
        let t = released(-3, 100, -5, 100, GroupSizes::Private, 8.0);
        assert_eq!(t.relative_risk(), Some(-3.0));
        let t = released(30, 100, 20, 200, GroupSizes::Public, 8.0);
        assert!((t.relative_risk().unwrap() - 3.0).abs() < 1e-12);
        assert_eq!(
            released(3, 0, 2, 5, GroupSizes::Public, 8.0).relative_risk(),
            None
        );
        // Private sizes never give NULL: a NULL would depend on exact data.
        assert!(released(3, -2, 2, 5, GroupSizes::Private, 8.0)
            .relative_risk()
            .is_some());
    }

    #[test]
    fn interval_matches_hand_computation() {
        // Public, conservative: p = (40/200)/(20/200) = 2,
        // V² = 4 (1/40 - 1/200 + 1/20 - 1/200 + 8 (1/1600 + 1/400)).
        let t = released(40, 200, 20, 200, GroupSizes::Public, 8.0);
        let ci = t
            .interval(0.95, IntervalMethod::Conservative)
            .unwrap()
            .unwrap();
        let v = 2.0
            * (1.0f64 / 40.0 - 0.005 + 0.05 - 0.005 + 8.0 * (1.0 / 1600.0 + 1.0 / 400.0)).sqrt();
        let z = 1.959963984540054;
        assert!((ci.upper - (2.0 + z * v)).abs() < 1e-9);
        assert!((ci.lower - (2.0 - z * v)).abs() < 1e-9);
        let plain = t.interval(0.95, IntervalMethod::Plain).unwrap().unwrap();
        assert!(plain.upper < ci.upper && plain.lower > ci.lower);
        // Private sizes shrink the noise term by w = p² + (1-p)².
        let p = released(40, 200, 20, 200, GroupSizes::Private, 8.0)
            .interval(0.95, IntervalMethod::Conservative)
            .unwrap()
            .unwrap();
        assert!(p.upper < ci.upper && p.upper > plain.upper);
    }

    #[test]
    fn log_interval_matches_hand_computation() {
        // X̃=40 of 200, Ỹ=20 of 200, s² = 8 (docs/intervals.md, worked example).
        // Public: V = 1/40 − 1/200 + 1/20 − 1/200 + 8(1/1600 + 1/400) = 0.09 = 0.0650 + 0.0250.
        // Private: w_x = 0.2² + 0.8² = 0.68, w_y = 0.1² + 0.9² = 0.82,
        // V = 0.065 + 8(0.68/1600 + 0.82/400) = 0.065 + 0.0198 = 0.0848.
        let z = 1.959963984540054;
        for (sizes, v) in [
            (GroupSizes::Public, 0.09),
            (
                GroupSizes::Private,
                0.065 + 8.0 * (0.68 / 1600.0 + 0.82 / 400.0),
            ),
        ] {
            let t = released(40, 200, 20, 200, sizes, 8.0);
            let ci = t.interval(0.95, IntervalMethod::Log).unwrap().unwrap();
            let h = z * f64::sqrt(v);
            assert!((ci.estimate - 2.0).abs() < 1e-12);
            assert!((ci.lower - 2.0 * (-h).exp()).abs() < 1e-12, "{sizes}");
            assert!((ci.upper - 2.0 * h.exp()).abs() < 1e-12, "{sizes}");
            // Same variance as the paper's conservative interval, on the log scale: the log
            // interval is the conservative one's half-width mapped through exp, so it is wider
            // and shifted up (e^h − 1 > h > 1 − e^{−h}).
            let cons = t
                .interval(0.95, IntervalMethod::Conservative)
                .unwrap()
                .unwrap();
            assert!((cons.upper - 2.0 * (1.0 + h)).abs() < 1e-12);
            assert!(ci.upper > cons.upper && ci.lower > cons.lower);
        }
        // No noise: the log interval is Katz's.
        let t = released(30, 100, 15, 100, GroupSizes::Public, 0.0);
        let katz = katz_interval(30, 100, 15, 100, 0.95).unwrap().unwrap();
        let ci = t.interval(0.95, IntervalMethod::Log).unwrap().unwrap();
        assert!((ci.lower - katz.lower).abs() < 1e-12 && (ci.upper - katz.upper).abs() < 1e-12);
        // The bootstrap needs the noise law: not from the table alone.
        assert_eq!(t.interval(0.95, IntervalMethod::Bootstrap).unwrap(), None);
    }

    #[test]
    fn confidence_is_checked() {
        let t = released(40, 200, 20, 200, GroupSizes::Public, 8.0);
        assert!(t.interval(1.0, IntervalMethod::Plain).is_err());
        assert!(t.interval(f64::NAN, IntervalMethod::Plain).is_err());
    }

    #[test]
    fn katz_matches_textbook_example() {
        // X=30/100, Y=15/100: RR=2, se = sqrt(1/30-1/100+1/15-1/100) = 0.2828...
        let ci = katz_interval(30, 100, 15, 100, 0.95).unwrap().unwrap();
        let se = (1.0f64 / 30.0 - 0.01 + 1.0 / 15.0 - 0.01).sqrt();
        assert!((ci.estimate - 2.0).abs() < 1e-12);
        assert!((ci.lower - (2f64.ln() - 1.959963984540054 * se).exp()).abs() < 1e-9);
        assert_eq!(katz_interval(0, 10, 3, 10, 0.95).unwrap(), None);
        assert!(katz_interval(11, 10, 3, 10, 0.95).is_err());
    }
}
