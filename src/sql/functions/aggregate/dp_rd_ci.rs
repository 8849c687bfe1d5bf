//! `dp_rd_ci(outcome, exposed, epsilon [, options])`: the risk difference `p_x − p_y` with its
//! confidence interval, from one noisy 2x2 table (one noise draw, one privacy charge, the
//! guarantee of `dp_relative_risk`). Returns the interval struct
//! ([`super::table::interval_type`]), with `estimate` the risk difference. `ci_method`:
//! `conservative` (default; Wald with the noise variance,
//! [`crate::stats::ReleasedTable::risk_difference_interval_at_z`]), `plain` or `bootstrap`
//! ([`crate::stats::bootstrap`]); `log` and `score` are refused (no ratio). No `method`: the
//! paper's other methods release a ratio.

use super::table::TableStatistic;
use crate::stats::RatioStatistic;

/// The `dp_rd_ci` statistic.
#[derive(Debug, Clone, Copy)]
pub struct DpRdCi;

impl TableStatistic for DpRdCi {
    const NAME: &'static str = "dp_rd_ci";
    const STATISTIC: RatioStatistic = RatioStatistic::RiskDifference;
    const INTERVAL: bool = true;
    const OPTION_KEYS: &'static [&'static str] = &[
        "mechanism",
        "delta",
        "gaussian_calibration",
        "group_sizes",
        "confidence",
        "ci_method",
    ];
}
