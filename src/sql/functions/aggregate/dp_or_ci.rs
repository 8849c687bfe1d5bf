//! `dp_or_ci(outcome, exposed, epsilon [, options])`: the odds ratio with the noise-aware score
//! interval after Miettinen & Nurminen 1985 (the default) or, with `ci_method=conservative`,
//! Woolf's log interval widened for the noise ([`crate::stats::ReleasedTable::odds_ratio_interval`]),
//! from one noisy table. Returns the interval struct ([`super::table::interval_type`]), with
//! `estimate` the odds ratio.

use super::table::TableStatistic;
use crate::stats::RatioStatistic;

/// The `dp_or_ci` statistic.
#[derive(Debug, Clone, Copy)]
pub struct DpOrCi;

impl TableStatistic for DpOrCi {
    const NAME: &'static str = "dp_or_ci";
    const STATISTIC: RatioStatistic = RatioStatistic::OddsRatio;
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
