//! `dp_risk_difference(outcome, exposed, epsilon [, options])`: the risk difference
//! `p_x − p_y = X/n_x − Y/n_y` from the same private 2x2 table as `dp_relative_risk` (same
//! guarantee, same options except `method`), sizes floored at 1
//! ([`crate::stats::ReleasedTable::risk_difference`]). Fairness audits report it (demographic
//! parity) beside the ratio (disparate impact).

use super::statistic::StatisticDoc;
use super::DpRelativeRisk;
use super::table::TableStatistic;
use crate::stats::RatioStatistic;

/// The `dp_risk_difference` statistic.
#[derive(Debug, Clone, Copy)]
pub struct DpRiskDifference;

impl TableStatistic for DpRiskDifference {
    const NAME: &'static str = "dp_risk_difference";
    const STATISTIC: RatioStatistic = RatioStatistic::RiskDifference;
    const INTERVAL: bool = false;
    const OPTION_KEYS: &'static [&'static str] = &["mechanism", "delta", "gaussian_calibration", "group_sizes"];
    const DOC: StatisticDoc = StatisticDoc {
        summary: "The risk difference `p_x − p_y = X/n_x − Y/n_y` from a noisy 2x2 table.",
        details: &[
            "Fairness audits report it (demographic parity) beside the disparate-impact ratio. \
             From the same private 2x2 table as `dp_relative_risk`, with the same guarantee and \
             group sizes (no `method`); the sizes are floored at 1.",
        ],
        sql_example: "SELECT dp_risk_difference(outcome, exposed, 1.0) AS rd FROM visits",
        related: &[&DpRelativeRisk],
    };
}
