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
/// Largest `ε` searched under [`GaussianCalibration::Classic`]: just below 2, since the
/// classic bound needs `ε/2 < 1` for each of the two cells a row moves.
pub const CLASSIC_PLANNING_EPSILON_MAX: f64 = 2.0 * (1.0 - 1e-12);

/// The study planned for: the sizes `n_x`, `n_y` of the exposed and unexposed groups and the
/// outcome's expected proportion in each, `p_x`, `p_y` (planning reads the counts at their
/// expectations, `X = n_x p_x`, `Y = n_y p_y`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StudyDesign {
    pub n_x: f64,
    pub n_y: f64,
    pub p_x: f64,
    pub p_y: f64,
}

/// The release planned for, as the release function would make it: the statistic and its
/// interval `method` at `confidence`, and the noise it would draw (`mechanism`, `δ`, the
/// Gaussian `calibration`, and whether the group `sizes` are public).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlannedRelease {
    pub statistic: RatioStatistic,
    pub method: IntervalMethod,
    pub confidence: f64,
    pub mechanism: Mechanism,
    pub delta: Option<f64>,
    pub calibration: GaussianCalibration,
    pub sizes: GroupSizes,
}

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
/// The per-cell noise variance `s²` (and fourth cumulant) is that of `TableNoise::calibrate`
/// with `calibration`: the noise the release would actually draw, so the SQL function passes
/// the session's `dp.gaussian_calibration` (or the call's). For Gaussian noise the three
/// calibrations differ (Laplace ignores it): `Analytic` calibrates the two cells a row moves as
/// one vector of L2 sensitivity `√2` (Balle & Wang 2018, Theorem 8, then the discrete law's
/// exact `δ`, Canonne, Kamath & Steinke 2020, arXiv:2004.00010); `PerCell` (the paper's)
/// calibrates each cell at `(ε/2, δ/2)`, more noise for the same `(ε, δ)`, so it needs a larger
/// `ε` for the same width; `Classic` (Dwork & Roth 2014, Theorem A.1) more still, and only
/// below `ε = 2` (`ε/2 < 1` per cell): a target it cannot reach there is an `Err` naming the
/// analytic calibration. Below the smallest ε whose discrete Gaussian can be calibrated exactly
/// (`MAX_GAUSSIAN_SIGMA`) the width counts as infinite. The half-width
/// decreases in `ε`; the answer is found by bisection on `log ε` over
/// `[PLANNING_EPSILON_MIN, PLANNING_EPSILON_MAX]` (`CLASSIC_PLANNING_EPSILON_MAX` for the
/// classic calibration) to a relative precision of about `1e-12` (at most 60 calibrations).
///
/// `Ok(None)` when even `ε = 10⁶` (no noise in practice) leaves the half-width above the target:
/// the sampling variance alone is too large. `Ok(Some(PLANNING_EPSILON_MIN))` when the target is
/// met already there. `Err` for `n` not finite and `> 0`, `p` outside `(0, 1]`, a non-positive
/// `half_width`, a confidence outside `(0, 1)`, or Gaussian noise without a valid `δ`.
pub fn epsilon_for_half_width(
    design: StudyDesign,
    half_width: f64,
    release: PlannedRelease,
) -> Result<Option<f64>, String> {
    let StudyDesign { n_x, n_y, p_x, p_y } = design;
    let PlannedRelease {
        statistic,
        method,
        confidence,
        mechanism,
        delta,
        calibration,
        sizes,
    } = release;
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
    // The half-width at the expected counts with per-cell noise of this variance and fourth
    // cumulant (0 and 0: the sampling variance alone).
    let width_with = |variance: f64, fourth_cumulant: f64| -> f64 {
        let counts = ReleasedCounts::new(x, n_x, y, n_y, sizes, variance)
            .with_noise_fourth_cumulant(fourth_cumulant);
        let half = |(lower, upper): (f64, f64)| 0.5 * (upper - lower);
        match (statistic, method) {
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
                let (center, v) = woolf_log_variance(counts.cells(), sizes, variance);
                center.exp() * (z * v.sqrt()).sinh()
            }
            (RatioStatistic::RiskDifference, _) => risk_difference_wald_at(counts, z, true).1,
        }
    };
    // The classic bound holds only below ε = 1 per noised value (Dwork & Roth 2014, Theorem
    // A.1), and a row moves two cells, each calibrated at ε/2: the release refuses ε ≥ 2, so
    // the search stops just below it.
    let classic = mechanism.law().needs_delta() && calibration == GaussianCalibration::Classic;
    let largest = if classic {
        CLASSIC_PLANNING_EPSILON_MAX
    } else {
        PLANNING_EPSILON_MAX
    };
    let width_at = |epsilon: f64| -> Result<f64, String> {
        // The release's own calibration (the session's `gaussian_calibration`: one vector,
        // per cell or classic); below the smallest ε the exact discrete Gaussian supports,
        // the noise (and so the width) is unboundedly large.
        // The Gaussian calibration stops at ε = 700 per cell (each cell gets ε/2): past it the
        // width is taken at that ε, where the noise is already negligible.
        let epsilon = epsilon.min(2.0 * mechanism.law().max_epsilon());
        let noise = match TableNoise::calibrate(mechanism, epsilon, delta, calibration, sizes) {
            Ok(noise) => noise,
            Err(e) if e.contains("needs Gaussian noise with sigma") => return Ok(f64::INFINITY),
            Err(e) => return Err(e),
        };
        Ok(width_with(noise.cell.variance, noise.cell.fourth_cumulant))
    };
    if width_at(largest)? > half_width {
        if classic && width_with(0.0, 0.0) <= half_width {
            return Err(format!(
                "the classic Gaussian calibration holds only for epsilon < {CLASSIC_PLANNING_EPSILON_MAX:.0} (epsilon/2 < 1 per cell), where the half-width is still {:.6} > {half_width}; use gaussian_calibration=analytic",
                width_at(largest)?
            ));
        }
        return Ok(None);
    }
    if width_at(PLANNING_EPSILON_MIN)? <= half_width {
        return Ok(Some(PLANNING_EPSILON_MIN));
    }
    // Invariant: width(e^lo) > half_width >= width(e^hi).
    let (mut lo, mut hi) = (PLANNING_EPSILON_MIN.ln(), largest.ln());
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

    /// The tests' study: 400 exposed with 30% cases, 300 unexposed with 20% (the released
    /// table of [`expected_table`]).
    const DESIGN: StudyDesign = StudyDesign {
        n_x: 400.0,
        n_y: 300.0,
        p_x: 0.3,
        p_y: 0.2,
    };

    /// What each test varies: the relative risk's conservative interval at 95%, Laplace noise,
    /// public sizes.
    const BASE: PlannedRelease = PlannedRelease {
        statistic: RatioStatistic::RelativeRisk,
        method: IntervalMethod::Conservative,
        confidence: 0.95,
        mechanism: Mechanism::Laplace,
        delta: None,
        calibration: GaussianCalibration::Analytic,
        sizes: GroupSizes::Public,
    };

    fn rel_close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * a.abs().max(b.abs())
    }

    #[test]
    fn epsilon_for_half_width_laplace_matches_closed_form() {
        // Public sizes, Laplace: s² = 2q/(1−q)², q = e^{−ε/2} (discrete Laplace, scale 2/ε).
        // Solve z²p²(V + s²W) = h² for s², then s²(1−q)² = 2q for q.
        let design = DESIGN;
        let StudyDesign {
            n_x: nx,
            n_y: ny,
            p_x: px,
            p_y: py,
        } = design;
        let (x, y) = (nx * px, ny * py);
        let p = px / py;
        let z = two_sided_z(BASE.confidence).unwrap();
        let v = 1.0 / x - 1.0 / nx + 1.0 / y - 1.0 / ny;
        let w = 1.0 / (x * x) + 1.0 / (y * y);
        let sampling_only = z * p * v.sqrt();
        for factor in [1.05, 1.5, 3.0] {
            let h = sampling_only * factor;
            let s2 = ((h / (z * p)).powi(2) - v) / w;
            let q = ((s2 + 1.0) - (2.0 * s2 + 1.0).sqrt()) / s2;
            let want = -2.0 * q.ln();
            let got = epsilon_for_half_width(design, h, BASE).unwrap().unwrap();
            assert!(rel_close(got, want, 1e-8), "{factor}: {got} vs {want}");
        }
        // The sampling variance alone exceeds the target: no ε helps.
        let none = epsilon_for_half_width(design, sampling_only * 0.99, BASE);
        assert_eq!(none.unwrap(), None);
    }

    #[test]
    fn epsilon_for_half_width_gaussian_and_private_sizes() {
        let (nx, ny, px, py, conf, delta) = (500.0, 500.0, 0.2, 0.1, 0.95, Some(1e-6));
        let design = StudyDesign {
            n_x: nx,
            n_y: ny,
            p_x: px,
            p_y: py,
        };
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
                    design,
                    target,
                    PlannedRelease {
                        mechanism,
                        delta,
                        sizes,
                        ..BASE
                    },
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
                        design,
                        target,
                        PlannedRelease {
                            mechanism,
                            delta,
                            ..BASE
                        },
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
            let design = StudyDesign {
                n_x,
                n_y: 100.0,
                p_x,
                p_y: 0.2,
            };
            epsilon_for_half_width(
                design,
                h,
                PlannedRelease {
                    confidence: conf,
                    mechanism: m,
                    delta: d,
                    ..BASE
                },
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
        let StudyDesign { n_x, n_y, p_x, p_y } = DESIGN;
        for mechanism in [Mechanism::Laplace, Mechanism::Gaussian] {
            for sizes in [GroupSizes::Public, GroupSizes::Private] {
                let release = PlannedRelease {
                    method: IntervalMethod::Score,
                    mechanism,
                    delta: (mechanism == Mechanism::Gaussian).then_some(1e-6),
                    sizes,
                    ..BASE
                };
                let (lo, hi) = relative_risk_score_interval(
                    ReleasedCounts::new(n_x * p_x, n_x, n_y * p_y, n_y, sizes, 0.0),
                    two_sided_z(release.confidence).unwrap(),
                );
                let target = 1.3 * (hi - lo) / 2.0;
                planned_and_checked(release, target);
            }
        }
    }

    /// The half width of `release`'s interval on the released table (120 of 400, 60 of 300)
    /// with the noise its calibration draws at `epsilon`: what the planning tests aim at.
    fn half_width(release: PlannedRelease, epsilon: f64) -> f64 {
        let noise = TableNoise::calibrate(
            release.mechanism,
            epsilon,
            release.delta,
            release.calibration,
            release.sizes,
        )
        .unwrap();
        let ci = expected_table(
            release.sizes,
            noise.cell.variance,
            noise.cell.fourth_cumulant,
        )
        .estimate_with_interval(release.statistic, release.confidence, release.method)
        .unwrap()
        .unwrap();
        (ci.upper - ci.lower) / 2.0
    }

    /// The ε planned for `target`, checked against the release it plans for: at that ε the
    /// interval's half width is within the target (to `1e-9` relative), and `1e-6` less ε
    /// misses it.
    fn planned_and_checked(release: PlannedRelease, target: f64) -> f64 {
        let eps = epsilon_for_half_width(DESIGN, target, release)
            .unwrap()
            .unwrap();
        let what = format!("{release:?}");
        assert!(half_width(release, eps) <= target * (1.0 + 1e-9), "{what}");
        assert!(half_width(release, eps * (1.0 - 1e-6)) > target, "{what}");
        eps
    }

    /// The table at the tests' expected counts (120 of 400, 60 of 300), released with noise
    /// of the given variance and fourth cumulant.
    fn expected_table(sizes: GroupSizes, variance: f64, fourth_cumulant: f64) -> ReleasedTable {
        ReleasedTable {
            exposed_cases: 120,
            exposed_total: 400,
            unexposed_cases: 60,
            unexposed_total: 300,
            sizes,
            noise_variance: variance,
            noise_fourth_cumulant: fourth_cumulant,
        }
    }

    #[test]
    fn epsilon_for_half_width_follows_the_log_interval() {
        // At the ε found for the log interval, the released table's own log interval (at the
        // expected counts) has half its width equal to the target; slightly less ε misses.
        let StudyDesign { n_x, n_y, p_x, p_y } = DESIGN;
        for sizes in [GroupSizes::Public, GroupSizes::Private] {
            let release = PlannedRelease {
                method: IntervalMethod::Log,
                sizes,
                ..BASE
            };
            let (c, h) = relative_risk_log_interval_at(
                ReleasedCounts::new(n_x * p_x, n_x, n_y * p_y, n_y, sizes, 0.0),
                two_sided_z(release.confidence).unwrap(),
            );
            let target = 1.3 * c.exp() * h.sinh();
            let eps = epsilon_for_half_width(DESIGN, target, release)
                .unwrap()
                .unwrap();
            assert!(
                half_width(release, eps) <= target * (1.0 + 1e-12),
                "{sizes}"
            );
            assert!(half_width(release, eps * (1.0 - 1e-6)) > target, "{sizes}");
            // The log interval is wider than the symmetric one at the same variance
            // (sinh h > h), so it needs more ε for the same half-width.
            let conservative = PlannedRelease { sizes, ..BASE };
            let conservative = epsilon_for_half_width(DESIGN, target, conservative)
                .unwrap()
                .unwrap();
            assert!(eps > conservative, "{sizes}");
        }
        for method in [IntervalMethod::Plain, IntervalMethod::Bootstrap] {
            let err =
                epsilon_for_half_width(DESIGN, 0.5, PlannedRelease { method, ..BASE }).unwrap_err();
            assert!(err.contains("cannot be planned"), "{err}");
        }
    }

    /// The interval of `release` on the exact (noise-free) table at the tests' expected counts
    /// (120 of 400, 60 of 300).
    fn exact_interval(release: PlannedRelease) -> crate::stats::table::RatioInterval {
        expected_table(release.sizes, 0.0, 0.0)
            .estimate_with_interval(release.statistic, release.confidence, release.method)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn epsilon_for_half_width_follows_the_odds_ratio_and_risk_difference_intervals() {
        // The odds ratio's intervals (score, its default, and Woolf's) and the risk
        // difference's (adjusted Wald): at the ε found, the released table's own interval at
        // the expected counts (120 of 400, 60 of 300) has half its width equal to the target,
        // 1.3 times the sampling-only half-width; slightly less ε misses.
        for (statistic, method) in [
            (RatioStatistic::OddsRatio, IntervalMethod::Score),
            (RatioStatistic::OddsRatio, IntervalMethod::Conservative),
            (RatioStatistic::RiskDifference, IntervalMethod::Conservative),
        ] {
            for mechanism in [Mechanism::Laplace, Mechanism::Gaussian] {
                for sizes in [GroupSizes::Public, GroupSizes::Private] {
                    let release = PlannedRelease {
                        statistic,
                        method,
                        mechanism,
                        delta: (mechanism == Mechanism::Gaussian).then_some(1e-6),
                        sizes,
                        ..BASE
                    };
                    let ci = exact_interval(release);
                    let target = 1.3 * (ci.upper - ci.lower) / 2.0;
                    planned_and_checked(release, target);
                }
            }
        }
        for (statistic, method) in [
            (RatioStatistic::RiskDifference, IntervalMethod::Score),
            (RatioStatistic::RiskDifference, IntervalMethod::Log),
            (RatioStatistic::OddsRatio, IntervalMethod::Plain),
        ] {
            let release = PlannedRelease {
                statistic,
                method,
                ..BASE
            };
            let err = epsilon_for_half_width(DESIGN, 0.05, release).unwrap_err();
            assert!(
                err.contains(&format!("cannot be planned for the {statistic}")),
                "{err}"
            );
        }
    }

    #[test]
    fn epsilon_for_half_width_follows_the_gaussian_calibration() {
        // Each calibration plans for the noise its release draws: at the ε found, the table
        // calibrated that way (`TableNoise::calibrate`, the release's own) has the target
        // half-width at the expected counts (120 of 400, 60 of 300), and slightly less ε
        // misses it. The per-cell calibration (each of the two cells a row moves at (ε/2, δ/2))
        // draws more noise than one vector of L2 sensitivity √2 at (ε, δ), so it needs more ε;
        // the classic bound (Dwork & Roth 2014, Theorem A.1) more still.
        let gaussian = PlannedRelease {
            mechanism: Mechanism::Gaussian,
            delta: Some(1e-6),
            ..BASE
        };
        for sizes in [GroupSizes::Public, GroupSizes::Private] {
            for (statistic, method) in [
                (RatioStatistic::RelativeRisk, IntervalMethod::Score),
                (RatioStatistic::RelativeRisk, IntervalMethod::Conservative),
                (RatioStatistic::OddsRatio, IntervalMethod::Score),
                (RatioStatistic::RiskDifference, IntervalMethod::Conservative),
            ] {
                let interval = PlannedRelease {
                    statistic,
                    method,
                    sizes,
                    ..gaussian
                };
                let ci = exact_interval(interval);
                // Wide enough that the classic calibration reaches it below ε = 2.
                let target = 2.0 * (ci.upper - ci.lower) / 2.0;
                let planned: Vec<f64> = [
                    GaussianCalibration::Analytic,
                    GaussianCalibration::PerCell,
                    GaussianCalibration::Classic,
                ]
                .into_iter()
                .map(|calibration| {
                    let release = PlannedRelease {
                        calibration,
                        ..interval
                    };
                    planned_and_checked(release, target)
                })
                .collect();
                let what = format!("{statistic} {method} {sizes}: {planned:?}");
                println!("analytic, per_cell, classic epsilon for {what}");
                assert!(planned[0] < planned[1], "{what}");
                assert!(planned[1] < planned[2], "{what}");
            }
        }
        // Laplace has no Gaussian calibration: the same ε under each.
        let laplace = |calibration| {
            let release = PlannedRelease {
                method: IntervalMethod::Score,
                calibration,
                sizes: GroupSizes::Private,
                ..BASE
            };
            epsilon_for_half_width(DESIGN, 0.5, release).unwrap()
        };
        assert_eq!(
            laplace(GaussianCalibration::Analytic),
            laplace(GaussianCalibration::PerCell)
        );
        // A half-width the classic bound reaches only at ε ≥ 2 (2% above the sampling-only
        // one) is an error naming the analytic calibration, not `None` (which means the
        // sampling variance alone is too wide).
        let classic = PlannedRelease {
            method: IntervalMethod::Score,
            calibration: GaussianCalibration::Classic,
            sizes: GroupSizes::Private,
            ..gaussian
        };
        let (lo, hi) = relative_risk_score_interval(
            ReleasedCounts::new(120.0, 400.0, 60.0, 300.0, GroupSizes::Private, 0.0),
            two_sided_z(classic.confidence).unwrap(),
        );
        let err = epsilon_for_half_width(DESIGN, 1.02 * (hi - lo) / 2.0, classic).unwrap_err();
        assert!(err.contains("gaussian_calibration=analytic"), "{err}");
    }
}
