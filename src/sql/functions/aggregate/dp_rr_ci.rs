//! `dp_rr_ci(outcome, exposed, epsilon [, options])`: the relative risk with its confidence
//! interval, from one noisy 2x2 table (one noise draw, one privacy charge).
//!
//! Returns the interval struct ([`super::table::interval_type`]): `estimate` (as
//! `dp_relative_risk`), `lower`, `upper` (by default the noise-aware score interval,
//! [`crate::stats::score`], whose upper end may be `+∞`; paper, Theorem Gaussian_Valid_CI for
//! `ci_method=conservative`, Theorem Valid_CI for `plain`, the noise-aware Katz log interval
//! for `log`, see [`crate::stats::ReleasedTable::interval`]; the parametric bootstrap for
//! `bootstrap`, [`crate::stats::bootstrap`], pure post-processing at no extra privacy cost),
//! the released counts it was computed from, `confidence`, and `seeded`, true when the noise
//! came from `dp.seed` and the result is **not private**. `method` is accepted to refuse the
//! paper's other ratio methods by name: they release no interval.

use super::table::TableStatistic;
use crate::stats::RatioStatistic;

/// The `dp_rr_ci` statistic.
#[derive(Debug, Clone, Copy)]
pub struct DpRrCi;

impl TableStatistic for DpRrCi {
    const NAME: &'static str = "dp_rr_ci";
    const STATISTIC: RatioStatistic = RatioStatistic::RelativeRisk;
    const INTERVAL: bool = true;
    const OPTION_KEYS: &'static [&'static str] = &[
        "mechanism",
        "delta",
        "gaussian_calibration",
        "group_sizes",
        "confidence",
        "ci_method",
        "method",
    ];
}
