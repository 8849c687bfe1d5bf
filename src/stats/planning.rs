//! Privacy-budget planning: the `ε` a study needs for an interval of a given width.
//!
//! Unlike [`super::accuracy`] (the paper's continuous-noise formulas), planning uses the exact
//! variance of the discrete noise the crate really adds, through the table's own calibration.

use super::accuracy::check_positive;
use super::mechanism::{GaussianCalibration, Mechanism};
use super::odds_ratio::woolf_log_variance;
use super::relative_risk::{relative_risk_interval_at, relative_risk_log_interval_at};
use super::risk_difference::risk_difference_wald_at;
use super::score::odds_ratio::odds_ratio_score_interval;
use super::score::relative_risk_score_interval;
use super::table::{
    two_sided_z, GroupSizes, IntervalMethod, RatioStatistic, ReleasedCounts, TableNoise,
};

/// Smallest `ε` searched by [`epsilon_for_half_width`].
pub const PLANNING_EPSILON_MIN: f64 = 1e-6;
/// Largest `ε` searched by [`epsilon_for_half_width`] (practically no noise).
pub const PLANNING_EPSILON_MAX: f64 = 1e6;

/// The smallest total `ε` at which the interval of `method` for `statistic` has half-width
/// `half_width` when the counts equal their expectations `X = n_x p_x`, `Y = n_y p_y` (and the
/// non-cases `n − X`, `n − Y`). For the relative risk:
/// * `IntervalMethod::Conservative`: `z·Ṽ` of the paper's interval (Theorem
///   `Gaussian_Valid_CI`, as `ReleasedTable::interval` computes it);
/// * `IntervalMethod::Log`: half the width of the log interval,
///   `(e^{c+h} − e^{c−h})/2 = p·sinh(z·sqrt(V))` (the same variance on the log scale,
///   [`relative_risk_log_interval_at`]);
/// * `IntervalMethod::Score` (the relative risk interval's default): half the width of the score interval
///   ([`relative_risk_score_interval`]), infinite while its upper end is unbounded.
///
/// For the odds ratio: `Score` (its default), half the width of
/// [`odds_ratio_score_interval`]; `Conservative` or `Log`, half the width of Woolf's log
/// interval with the noise variance ([`woolf_log_variance`]). For the risk difference:
/// `Conservative` (its default and only noise-aware closed form), the adjusted Wald
/// half-width ([`risk_difference_wald_at`]).
///
/// `plain` ignores the noise and `bootstrap` has no closed form, so neither can be planned
/// for (`Err`), nor can a method the statistic does not have. The SQL function passes the
/// statistic's default interval unless `ci_method` is given, so planning follows the interval
/// the release function returns.
///
/// The per-cell noise variance `s²` is that of `TableNoise::calibrate` (the table's own
/// calibration); below the smallest ε whose discrete Gaussian can be calibrated exactly
/// (`MAX_GAUSSIAN_SIGMA`) the width counts as infinite. The half-width
/// decreases in `ε`; the answer is found by bisection on `log ε` over
/// `[PLANNING_EPSILON_MIN, PLANNING_EPSILON_MAX]` to a relative precision of about `1e-12`
/// (at most 60 calibrations).
///
/// `Ok(None)` when even `ε = 10⁶` (no noise in practice) leaves the half-width above the target:
/// the sampling variance alone is too large. `Ok(Some(PLANNING_EPSILON_MIN))` when the target is
/// met already there. `Err` for `n` not finite and `> 0`, `p` outside `(0, 1]`, a non-positive
/// `half_width`, a confidence outside `(0, 1)`, or Gaussian noise without a valid `δ`.
#[allow(clippy::too_many_arguments)]
pub fn epsilon_for_half_width(
    n_x: f64,
    n_y: f64,
    p_x: f64,
    p_y: f64,
    half_width: f64,
    confidence: f64,
    mechanism: Mechanism,
    delta: Option<f64>,
    sizes: GroupSizes,
    statistic: RatioStatistic,
    method: IntervalMethod,
) -> Result<Option<f64>, String> {
    let planned: &[IntervalMethod] = match statistic {
        RatioStatistic::RiskDifference => &[IntervalMethod::Conservative],
        _ => &[
            IntervalMethod::Score,
            IntervalMethod::Conservative,
            IntervalMethod::Log,
        ],
    };
    if !planned.contains(&method) {
        let names: Vec<String> = planned.iter().map(|m| format!("'{m}'")).collect();
        return Err(format!(
            "ci_method '{method}' cannot be planned for the {statistic} (it has no closed-form width that depends on epsilon there); use {}",
            names.join(" or ")
        ));
    }
    check_positive("n_x", n_x)?;
    check_positive("n_y", n_y)?;
    for (name, p) in [("p_x", p_x), ("p_y", p_y)] {
        check_positive(name, p)?;
        if p > 1.0 {
            return Err(format!("{name} must be in (0, 1], got {p}"));
        }
    }
    check_positive("half_width", half_width)?;
    let z = two_sided_z(confidence)?;
    if mechanism.law().needs_delta() {
        match delta {
            Some(d) if d.is_finite() && d > 0.0 && d < 1.0 => {}
            other => {
                return Err(format!(
                    "the gaussian mechanism needs delta in (0, 1), got {other:?}"
                ))
            }
        }
    }
    let (x, y) = (n_x * p_x, n_y * p_y);
    let width_at = |epsilon: f64| -> Result<f64, String> {
        // The table's own calibration; below the smallest ε the exact discrete Gaussian
        // supports, the noise (and so the width) is unboundedly large.
        // The Gaussian calibration stops at ε = 700 per cell (each cell gets ε/2): past it the
        // width is taken at that ε, where the noise is already negligible.
        let epsilon = epsilon.min(2.0 * mechanism.law().max_epsilon());
        let noise = match TableNoise::calibrate(
            mechanism,
            epsilon,
            delta,
            GaussianCalibration::Analytic,
            sizes,
        ) {
            Ok(noise) => noise,
            Err(e) if e.contains("needs Gaussian noise with sigma") => return Ok(f64::INFINITY),
            Err(e) => return Err(e),
        };
        let counts = ReleasedCounts::new(x, n_x, y, n_y, sizes, noise.cell.variance)
            .with_noise_fourth_cumulant(noise.cell.fourth_cumulant);
        let half = |(lower, upper): (f64, f64)| 0.5 * (upper - lower);
        Ok(match (statistic, method) {
            (RatioStatistic::RelativeRisk, IntervalMethod::Score) => {
                half(relative_risk_score_interval(counts, z))
            }
            (RatioStatistic::RelativeRisk, IntervalMethod::Log) => {
                let (center, h) = relative_risk_log_interval_at(counts, z);
                center.exp() * h.sinh()
            }
            (RatioStatistic::RelativeRisk, _) => relative_risk_interval_at(counts, method, z).1,
            (RatioStatistic::OddsRatio, IntervalMethod::Score) => {
                half(odds_ratio_score_interval(counts, z))
            }
            (RatioStatistic::OddsRatio, _) => {
                let (center, v) = woolf_log_variance(counts.cells(), sizes, noise.cell.variance);
                center.exp() * (z * v.sqrt()).sinh()
            }
            (RatioStatistic::RiskDifference, _) => risk_difference_wald_at(counts, z, true).1,
        })
    };
    if width_at(PLANNING_EPSILON_MAX)? > half_width {
        return Ok(None);
    }
    if width_at(PLANNING_EPSILON_MIN)? <= half_width {
        return Ok(Some(PLANNING_EPSILON_MIN));
    }
    // Invariant: width(e^lo) > half_width >= width(e^hi).
    let (mut lo, mut hi) = (PLANNING_EPSILON_MIN.ln(), PLANNING_EPSILON_MAX.ln());
    for _ in 0..60 {
        if hi - lo <= 1e-12 {
            break;
        }
        let mid = 0.5 * (lo + hi);
        if width_at(mid.exp())? > half_width {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(hi.exp()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::table::ReleasedTable;

    fn rel_close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * a.abs().max(b.abs())
    }

    #[test]
    fn epsilon_for_half_width_laplace_matches_closed_form() {
        // Public sizes, Laplace: s² = 2q/(1−q)², q = e^{−ε/2} (discrete Laplace, scale 2/ε).
        // Solve z²p²(V + s²W) = h² for s², then s²(1−q)² = 2q for q.
        let (nx, ny, px, py, conf) = (400.0, 300.0, 0.3, 0.2, 0.95);
        let (x, y) = (nx * px, ny * py);
        let p = px / py;
        let z = two_sided_z(conf).unwrap();
        let v = 1.0 / x - 1.0 / nx + 1.0 / y - 1.0 / ny;
        let w = 1.0 / (x * x) + 1.0 / (y * y);
        let sampling_only = z * p * v.sqrt();
        for factor in [1.05, 1.5, 3.0] {
            let h = sampling_only * factor;
            let s2 = ((h / (z * p)).powi(2) - v) / w;
            let q = ((s2 + 1.0) - (2.0 * s2 + 1.0).sqrt()) / s2;
            let want = -2.0 * q.ln();
            let got = epsilon_for_half_width(
                nx,
                ny,
                px,
                py,
                h,
                conf,
                Mechanism::Laplace,
                None,
                GroupSizes::Public,
                RatioStatistic::RelativeRisk,
                IntervalMethod::Conservative,
            )
            .unwrap()
            .unwrap();
            assert!(rel_close(got, want, 1e-8), "{factor}: {got} vs {want}");
        }
        // The sampling variance alone exceeds the target: no ε helps.
        let none = epsilon_for_half_width(
            nx,
            ny,
            px,
            py,
            sampling_only * 0.99,
            conf,
            Mechanism::Laplace,
            None,
            GroupSizes::Public,
            RatioStatistic::RelativeRisk,
            IntervalMethod::Conservative,
        );
        assert_eq!(none.unwrap(), None);
    }

    #[test]
    fn epsilon_for_half_width_gaussian_and_private_sizes() {
        let (nx, ny, px, py, conf, delta) = (500.0, 500.0, 0.2, 0.1, 0.95, Some(1e-6));
        for sizes in [GroupSizes::Public, GroupSizes::Private] {
            for mechanism in [Mechanism::Gaussian, Mechanism::Laplace] {
                let z = two_sided_z(conf).unwrap();
                let target = 1.2
                    * relative_risk_interval_at(
                        ReleasedCounts::new(nx * px, nx, ny * py, ny, sizes, 0.0),
                        IntervalMethod::Conservative,
                        z,
                    )
                    .1;
                let eps = epsilon_for_half_width(
                    nx,
                    ny,
                    px,
                    py,
                    target,
                    conf,
                    mechanism,
                    delta,
                    sizes,
                    RatioStatistic::RelativeRisk,
                    IntervalMethod::Conservative,
                )
                .unwrap()
                .unwrap();
                // At ε the released table's own interval (at the expected counts, here
                // integers) has the target half-width, and slightly less ε misses it.
                let width = |e: f64| {
                    let noise = crate::stats::TableNoise::calibrate(
                        mechanism,
                        e,
                        delta,
                        GaussianCalibration::Analytic,
                        sizes,
                    )
                    .unwrap();
                    let table = ReleasedTable {
                        exposed_cases: (nx * px) as i64,
                        exposed_total: nx as i64,
                        unexposed_cases: (ny * py) as i64,
                        unexposed_total: ny as i64,
                        sizes,
                        noise_variance: noise.cell.variance,
                        noise_fourth_cumulant: noise.cell.fourth_cumulant,
                    };
                    let ci = table
                        .interval(conf, IntervalMethod::Conservative)
                        .unwrap()
                        .unwrap();
                    ci.upper - table.relative_risk().unwrap()
                };
                assert!(width(eps) <= target * (1.0 + 1e-12), "{mechanism} {sizes}");
                assert!(width(eps * (1.0 - 1e-6)) > target, "{mechanism} {sizes}");
                // Private sizes have less noise weight, so need no more ε than public ones.
                if sizes == GroupSizes::Private {
                    let public = epsilon_for_half_width(
                        nx,
                        ny,
                        px,
                        py,
                        target,
                        conf,
                        mechanism,
                        delta,
                        GroupSizes::Public,
                        RatioStatistic::RelativeRisk,
                        IntervalMethod::Conservative,
                    )
                    .unwrap()
                    .unwrap();
                    assert!(eps < public);
                }
            }
        }
    }

    #[test]
    fn epsilon_for_half_width_rejects_invalid_input() {
        let ok = |n_x: f64, p_x: f64, h: f64, conf: f64, m: Mechanism, d: Option<f64>| {
            epsilon_for_half_width(
                n_x,
                100.0,
                p_x,
                0.2,
                h,
                conf,
                m,
                d,
                GroupSizes::Public,
                RatioStatistic::RelativeRisk,
                IntervalMethod::Conservative,
            )
        };
        assert!(ok(100.0, 0.3, 1.0, 0.95, Mechanism::Laplace, None).is_ok());
        assert!(ok(0.0, 0.3, 1.0, 0.95, Mechanism::Laplace, None).is_err());
        assert!(ok(100.0, 0.0, 1.0, 0.95, Mechanism::Laplace, None).is_err());
        assert!(ok(100.0, 1.5, 1.0, 0.95, Mechanism::Laplace, None).is_err());
        assert!(ok(100.0, 0.3, 0.0, 0.95, Mechanism::Laplace, None).is_err());
        assert!(ok(100.0, 0.3, f64::NAN, 0.95, Mechanism::Laplace, None).is_err());
        assert!(ok(100.0, 0.3, 1.0, 1.0, Mechanism::Laplace, None).is_err());
        assert!(ok(100.0, 0.3, 1.0, 0.95, Mechanism::Gaussian, None).is_err());
        assert!(ok(100.0, 0.3, 1.0, 0.95, Mechanism::Gaussian, Some(0.0)).is_err());
    }
    #[test]
    fn epsilon_for_half_width_follows_the_score_interval() {
        // dp_rr_ci's default: at the ε found, the released table's own score interval (at the
        // expected counts) has half its width equal to the target; slightly less ε misses.
        let (nx, ny, px, py, conf) = (400.0, 300.0, 0.3, 0.2, 0.95);
        for mechanism in [Mechanism::Laplace, Mechanism::Gaussian] {
            for sizes in [GroupSizes::Public, GroupSizes::Private] {
                let delta = (mechanism == Mechanism::Gaussian).then_some(1e-6);
                let z = two_sided_z(conf).unwrap();
                let (lo, hi) = relative_risk_score_interval(
                    ReleasedCounts::new(nx * px, nx, ny * py, ny, sizes, 0.0),
                    z,
                );
                let target = 1.3 * (hi - lo) / 2.0;
                let eps = epsilon_for_half_width(
                    nx,
                    ny,
                    px,
                    py,
                    target,
                    conf,
                    mechanism,
                    delta,
                    sizes,
                    RatioStatistic::RelativeRisk,
                    IntervalMethod::Score,
                )
                .unwrap()
                .unwrap();
                let half = |e: f64| {
                    half_width_at(
                        mechanism,
                        e,
                        delta,
                        sizes,
                        conf,
                        (RatioStatistic::RelativeRisk, IntervalMethod::Score),
                    )
                };
                assert!(half(eps) <= target * (1.0 + 1e-9), "{mechanism} {sizes}");
                assert!(half(eps * (1.0 - 1e-6)) > target, "{mechanism} {sizes}");
            }
        }
    }

    /// The half width of `method`'s interval on the released table (120 of 400, 60 of 300)
    /// with the noise calibrated for `epsilon`: what the planning tests aim at.
    fn half_width_at(
        mechanism: Mechanism,
        epsilon: f64,
        delta: Option<f64>,
        sizes: GroupSizes,
        conf: f64,
        (statistic, method): (RatioStatistic, IntervalMethod),
    ) -> f64 {
        let noise = TableNoise::calibrate(
            mechanism,
            epsilon,
            delta,
            GaussianCalibration::Analytic,
            sizes,
        )
        .unwrap();
        let table = ReleasedTable {
            exposed_cases: 120,
            exposed_total: 400,
            unexposed_cases: 60,
            unexposed_total: 300,
            sizes,
            noise_variance: noise.cell.variance,
            noise_fourth_cumulant: noise.cell.fourth_cumulant,
        };
        let ci = table
            .estimate_with_interval(statistic, conf, method)
            .unwrap()
            .unwrap();
        (ci.upper - ci.lower) / 2.0
    }

    #[test]
    fn epsilon_for_half_width_follows_the_log_interval() {
        // At the ε found for the log interval, the released table's own log interval (at the
        // expected counts) has half its width equal to the target; slightly less ε misses.
        let (nx, ny, px, py, conf) = (400.0, 300.0, 0.3, 0.2, 0.95);
        for sizes in [GroupSizes::Public, GroupSizes::Private] {
            let z = two_sided_z(conf).unwrap();
            let (c, h) = relative_risk_log_interval_at(
                ReleasedCounts::new(nx * px, nx, ny * py, ny, sizes, 0.0),
                z,
            );
            let target = 1.3 * c.exp() * h.sinh();
            let eps = epsilon_for_half_width(
                nx,
                ny,
                px,
                py,
                target,
                conf,
                Mechanism::Laplace,
                None,
                sizes,
                RatioStatistic::RelativeRisk,
                IntervalMethod::Log,
            )
            .unwrap()
            .unwrap();
            let half = |e: f64| {
                half_width_at(
                    Mechanism::Laplace,
                    e,
                    None,
                    sizes,
                    conf,
                    (RatioStatistic::RelativeRisk, IntervalMethod::Log),
                )
            };
            assert!(half(eps) <= target * (1.0 + 1e-12), "{sizes}");
            assert!(half(eps * (1.0 - 1e-6)) > target, "{sizes}");
            // The log interval is wider than the symmetric one at the same variance
            // (sinh h > h), so it needs more ε for the same half-width.
            let conservative = epsilon_for_half_width(
                nx,
                ny,
                px,
                py,
                target,
                conf,
                Mechanism::Laplace,
                None,
                sizes,
                RatioStatistic::RelativeRisk,
                IntervalMethod::Conservative,
            )
            .unwrap()
            .unwrap();
            assert!(eps > conservative, "{sizes}");
        }
        for method in [IntervalMethod::Plain, IntervalMethod::Bootstrap] {
            let err = epsilon_for_half_width(
                nx,
                ny,
                px,
                py,
                0.5,
                conf,
                Mechanism::Laplace,
                None,
                GroupSizes::Public,
                RatioStatistic::RelativeRisk,
                method,
            )
            .unwrap_err();
            assert!(err.contains("cannot be planned"), "{err}");
        }
    }

    #[test]
    fn epsilon_for_half_width_follows_the_odds_ratio_and_risk_difference_intervals() {
        // The odds ratio's intervals (score, its default, and Woolf's) and the risk
        // difference's (adjusted Wald): at the ε found, the released table's own interval at the expected counts
        // (120 of 400, 60 of 300) has half its width equal to the target, 1.3 times the
        // sampling-only half-width; slightly less ε misses.
        let (nx, ny, px, py, conf) = (400.0, 300.0, 0.3, 0.2, 0.95);
        for interval in [
            (RatioStatistic::OddsRatio, IntervalMethod::Score),
            (RatioStatistic::OddsRatio, IntervalMethod::Conservative),
            (RatioStatistic::RiskDifference, IntervalMethod::Conservative),
        ] {
            for mechanism in [Mechanism::Laplace, Mechanism::Gaussian] {
                for sizes in [GroupSizes::Public, GroupSizes::Private] {
                    let delta = (mechanism == Mechanism::Gaussian).then_some(1e-6);
                    let exact = ReleasedTable {
                        exposed_cases: 120,
                        exposed_total: 400,
                        unexposed_cases: 60,
                        unexposed_total: 300,
                        sizes,
                        noise_variance: 0.0,
                        noise_fourth_cumulant: 0.0,
                    };
                    let ci = exact
                        .estimate_with_interval(interval.0, conf, interval.1)
                        .unwrap()
                        .unwrap();
                    let target = 1.3 * (ci.upper - ci.lower) / 2.0;
                    let eps = epsilon_for_half_width(
                        nx, ny, px, py, target, conf, mechanism, delta, sizes, interval.0,
                        interval.1,
                    )
                    .unwrap()
                    .unwrap();
                    let half = |e: f64| half_width_at(mechanism, e, delta, sizes, conf, interval);
                    let what = format!("{interval:?} {mechanism} {sizes}");
                    assert!(half(eps) <= target * (1.0 + 1e-9), "{what}");
                    assert!(half(eps * (1.0 - 1e-6)) > target, "{what}");
                }
            }
        }
        for (statistic, method) in [
            (RatioStatistic::RiskDifference, IntervalMethod::Score),
            (RatioStatistic::RiskDifference, IntervalMethod::Log),
            (RatioStatistic::OddsRatio, IntervalMethod::Plain),
        ] {
            let err = epsilon_for_half_width(
                nx,
                ny,
                px,
                py,
                0.05,
                conf,
                Mechanism::Laplace,
                None,
                GroupSizes::Public,
                statistic,
                method,
            )
            .unwrap_err();
            assert!(
                err.contains(&format!("cannot be planned for the {statistic}")),
                "{err}"
            );
        }
    }
}
