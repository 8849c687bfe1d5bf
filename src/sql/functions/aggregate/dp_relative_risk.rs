//! `dp_relative_risk(outcome, exposed, epsilon [, options])`: the relative risk
//! `(X/n_x)/(Y/n_y)` from a noisy 2x2 table (paper, LaplaceNoisedCounts and Claim
//! bias_ratio_counts: noisy denominators floored at 1).
//!
//! `X` = rows with `outcome AND exposed`, `n_x` = rows with `exposed`, `Y` = rows with
//! `outcome AND NOT exposed`, `n_y` = rows with `NOT exposed`; rows where either argument is
//! NULL do not count. Privacy: `(ε, δ)`-DP for the whole table under replace-one neighbours
//! ([`crate::stats::relative_risk`] has the argument). With `group_sizes=public` the exact group sizes
//! are used and the result is NULL for a group without exposed or unexposed rows. `method`
//! selects one of the paper's other ratio methods (public group sizes, one row per unit).

use super::table::TableStatistic;
use crate::stats::RatioStatistic;

/// The `dp_relative_risk` statistic.
#[derive(Debug, Clone, Copy)]
pub struct DpRelativeRisk;

impl TableStatistic for DpRelativeRisk {
    const NAME: &'static str = "dp_relative_risk";
    const STATISTIC: RatioStatistic = RatioStatistic::RelativeRisk;
    const INTERVAL: bool = false;
    const OPTION_KEYS: &'static [&'static str] = &[
        "mechanism",
        "delta",
        "gaussian_calibration",
        "group_sizes",
        "method",
        "bias_correction",
        "ptr_bound",
    ];
}
