//! `dp_rd_ci(outcome, exposed, epsilon [, options])`: the risk difference `p_x − p_y` with its
//! confidence interval, from one noisy 2x2 table (one noise draw, one privacy charge, the
//! guarantee of `dp_relative_risk`). Returns the interval struct
//! ([`super::table::interval_type`]), with `estimate` the risk difference. `ci_method`:
//! `conservative` (default; Wald with the noise variance,
//! [`crate::stats::ReleasedTable::risk_difference_interval_at_z`]), `plain` or `bootstrap`
//! ([`crate::stats::bootstrap`]); `log` and `score` are refused (no ratio). No `method`: the
//! paper's other methods release a ratio.

use super::statistic::StatisticDoc;
use super::DpRiskDifference;
use super::table::{TableStatistic, INTERVAL_FIELDS};
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
    const DOC: StatisticDoc = StatisticDoc {
        summary: "The risk difference and its confidence interval from one noisy 2x2 table.",
        details: &[
            "One noise draw, one privacy charge, the risk difference's guarantee and group \
             sizes; `estimate` is the risk difference `X/n_x − Y/n_y` from these counts (sizes \
             floored at 1). No `method`: the paper's other methods release a ratio.",
            INTERVAL_FIELDS,
            "`ci_method=conservative` (the default) is the Wald interval with the noise \
             variance added for the size mode, `plain` drops the noise term, `bootstrap` is the \
             parametric bootstrap from the released table (Ferrando, Wang & Sheldon 2022; pure \
             post-processing); `log` and `score` are refused (no ratio). `confidence` sets the \
             level (default 0.95).",
        ],
        sql_example: "SELECT dp_rd_ci(outcome, exposed, 1.0, 'mechanism=gaussian, delta=1e-6') \
                      AS rd FROM visits",
        related: &[&DpRiskDifference],
    };
}
