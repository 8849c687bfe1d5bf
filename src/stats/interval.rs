//! The interval dispatch of a released 2x2 table ([`super::table`]): one entry point
//! ([`TableNoise::interval`]) from a statistic and an interval method to the estimator's own
//! formulas (`relative_risk.rs`, `odds_ratio.rs` and `score/`, `risk_difference.rs`) or to the
//! bootstrap (`bootstrap.rs`), shared by the SQL functions and the coverage simulations.

use super::table::{
    two_sided_z, IntervalMethod, RatioInterval, RatioStatistic, ReleasedTable, TableNoise,
};

/// A validated interval request for the tables one [`TableNoise`] releases: confidence level,
/// its normal quantile, the method and, for the bootstrap, the noise law tabulated once per
/// call ([`super::bootstrap::ReplayNoise`]).
#[derive(Clone, Debug)]
pub struct IntervalSpec {
    pub confidence: f64,
    pub z: f64,
    pub method: IntervalMethod,
    replay: Option<std::sync::Arc<super::bootstrap::ReplayNoise>>,
}

impl TableNoise {
    /// The interval request for tables this noise releases (checks the confidence level).
    pub fn interval_spec(
        &self,
        confidence: f64,
        method: IntervalMethod,
    ) -> Result<IntervalSpec, String> {
        Ok(IntervalSpec {
            confidence,
            z: two_sided_z(confidence)?,
            method,
            replay: (method == IntervalMethod::Bootstrap)
                .then(|| std::sync::Arc::new(super::bootstrap::ReplayNoise::new(&self.cell))),
        })
    }

    /// The estimate of `statistic` with its interval, from a table this noise released: the
    /// one entry point for every interval method, used by the SQL functions and by the
    /// coverage simulations alike. The closed forms read the table alone
    /// ([`ReleasedTable::estimate_with_interval_at_z`]); the bootstrap also replays this
    /// noise ([`super::bootstrap::bootstrap_interval`]). Pure post-processing of the release.
    /// `spec` must come from [`Self::interval_spec`] of this noise.
    pub fn interval(
        &self,
        released: &ReleasedTable,
        statistic: RatioStatistic,
        spec: &IntervalSpec,
    ) -> Option<RatioInterval> {
        match (spec.method, &spec.replay) {
            (IntervalMethod::Bootstrap, Some(replay)) => super::bootstrap::bootstrap_interval(
                self,
                replay,
                released,
                statistic,
                spec.confidence,
                super::bootstrap::REPLICATES,
            ),
            (IntervalMethod::Bootstrap, None) => None,
            (method, _) => released.estimate_with_interval_at_z(statistic, spec.z, method),
        }
    }
}

impl ReleasedTable {
    /// The released cells `(a, b, c, d)`: cases and non-cases (size minus cases) per arm.
    pub fn cells(&self) -> [i64; 4] {
        [
            self.exposed_cases,
            self.exposed_total - self.exposed_cases,
            self.unexposed_cases,
            self.unexposed_total - self.unexposed_cases,
        ]
    }

    /// The estimate of `statistic`.
    pub fn estimate(&self, statistic: RatioStatistic) -> Option<f64> {
        match statistic {
            RatioStatistic::RelativeRisk => self.relative_risk(),
            RatioStatistic::OddsRatio => self.odds_ratio(),
            RatioStatistic::RiskDifference => self.risk_difference(),
        }
    }

    /// The estimate of `statistic` with its interval.
    pub fn estimate_with_interval(
        &self,
        statistic: RatioStatistic,
        confidence: f64,
        method: IntervalMethod,
    ) -> Result<Option<RatioInterval>, String> {
        Ok(self.estimate_with_interval_at_z(statistic, two_sided_z(confidence)?, method))
    }

    /// [`Self::estimate_with_interval`] for a precomputed quantile `z`: the closed-form
    /// intervals (`None` for `IntervalMethod::Bootstrap`, which needs the noise law: use
    /// [`TableNoise::interval`], the entry point the SQL functions and simulations share).
    pub fn estimate_with_interval_at_z(
        &self,
        statistic: RatioStatistic,
        z: f64,
        method: IntervalMethod,
    ) -> Option<RatioInterval> {
        match statistic {
            RatioStatistic::RelativeRisk => self.interval_at_z(z, method),
            RatioStatistic::OddsRatio => self.odds_ratio_interval_at_z(z, method),
            RatioStatistic::RiskDifference => self.risk_difference_interval_at_z(z, method),
        }
    }
}

impl ReleasedTable {
    /// The paper's construction applied to `statistic`: the estimate ± z·standard error on the
    /// statistic's own scale, with the noise variance added (Theorem Gaussian_Valid_CI). For
    /// the relative risk it is the paper's conservative interval; for the odds ratio
    /// `OR ± z·OR·sqrt(V)` (Woolf's variance plus the noise's, lower end at 0 at least); for the
    /// risk difference the Wald interval plus the noise. The reference every interval's width is
    /// compared with in docs/coverage.md (part 2); not an SQL `ci_method`.
    pub fn paper_construction_at_z(
        &self,
        statistic: RatioStatistic,
        z: f64,
    ) -> Option<RatioInterval> {
        match statistic {
            RatioStatistic::RelativeRisk => self.interval_at_z(z, IntervalMethod::Conservative),
            RatioStatistic::OddsRatio => self.odds_ratio_paper_construction_at_z(z),
            RatioStatistic::RiskDifference => self.risk_difference_paper_construction_at_z(z),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::table::{released, GroupSizes, Z95};

    #[test]
    fn every_closed_form_interval_is_well_formed_on_any_release() {
        // Noise can release any integers: counts below 0 or above their size, sizes at or
        // below 0 (private). Every closed-form interval of every statistic must then give no
        // interval (public sizes ≤ 0 only) or ends that are not NaN, in order, and for the
        // ratios not below 0; no panic. Tables of 1 to 10⁶ rows, no noise up to the noise of
        // ε = 0.05 (Laplace) and ε = 0.5 (Gaussian, with its κ₄ = 0). (A sweep of 19 million
        // such intervals, with more sizes, counts and quantiles, found none ill-formed.)
        let laplace = crate::stats::CountNoise::calibrate(
            crate::stats::Mechanism::Laplace,
            0.025,
            None,
            1,
            Default::default(),
        )
        .unwrap();
        let mut checked = 0;
        for (s2, k4) in [
            (0.0, 0.0),
            (laplace.variance, laplace.fourth_cumulant),
            (300.0, 0.0),
        ] {
            for sizes in [GroupSizes::Public, GroupSizes::Private] {
                for (nx, ny) in [(1, 1), (1, 200), (5, 5), (200, 200), (1_000_000, 3)] {
                    let counts = |n: i64| [-3, 0, 1, n / 2, n - 1, n, n + 3];
                    let totals = |n: i64| match sizes {
                        GroupSizes::Public => vec![n],
                        GroupSizes::Private => vec![n, 0, -4],
                    };
                    for tx in totals(nx) {
                        for ty in totals(ny) {
                            for x in counts(nx) {
                                for y in counts(ny) {
                                    let table = ReleasedTable {
                                        noise_fourth_cumulant: k4,
                                        ..released(x, tx, y, ty, sizes, s2)
                                    };
                                    for statistic in [
                                        RatioStatistic::RelativeRisk,
                                        RatioStatistic::OddsRatio,
                                        RatioStatistic::RiskDifference,
                                    ] {
                                        for method in [
                                            IntervalMethod::Conservative,
                                            IntervalMethod::Plain,
                                            IntervalMethod::Log,
                                            IntervalMethod::Score,
                                        ] {
                                            if method.check_statistic(statistic).is_err() {
                                                continue;
                                            }
                                            let Some(ci) = table.estimate_with_interval_at_z(
                                                statistic, Z95, method,
                                            ) else {
                                                assert!(
                                                    sizes == GroupSizes::Public && tx.min(ty) <= 0
                                                );
                                                continue;
                                            };
                                            checked += 1;
                                            let ratio = statistic != RatioStatistic::RiskDifference;
                                            assert!(
                                                !ci.estimate.is_nan()
                                                    && !ci.lower.is_nan()
                                                    && !ci.upper.is_nan()
                                                    && ci.lower <= ci.upper
                                                    && (!ratio || ci.lower >= 0.0),
                                                "{statistic} {method}: {ci:?} from {table:?}"
                                            );
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 50_000, "{checked}");
    }
}
