//! `dp_odds_ratio(outcome, exposed, epsilon [, options])`: the odds ratio `ad/bc` from the same
//! private 2x2 table as `dp_relative_risk` (same guarantee, same options except `method`):
//! `a` = outcome ∧ exposed, `b` = ¬outcome ∧ exposed, `c` = outcome ∧ ¬exposed,
//! `d` = ¬outcome ∧ ¬exposed; the noisy denominators `b`, `c` are floored at 1.

use super::statistic::StatisticDoc;
use super::DpRelativeRisk;
use super::table::TableStatistic;
use crate::stats::RatioStatistic;

/// The `dp_odds_ratio` statistic.
#[derive(Debug, Clone, Copy)]
pub struct DpOddsRatio;

impl TableStatistic for DpOddsRatio {
    const NAME: &'static str = "dp_odds_ratio";
    const STATISTIC: RatioStatistic = RatioStatistic::OddsRatio;
    const INTERVAL: bool = false;
    const OPTION_KEYS: &'static [&'static str] = &["mechanism", "delta", "gaussian_calibration", "group_sizes"];
    const DOC: StatisticDoc = StatisticDoc {
        summary: "The odds ratio `ad/bc` from a noisy 2x2 table.",
        details: &[
            "`a` = outcome ∧ exposed, `b` = ¬outcome ∧ exposed, `c` = outcome ∧ ¬exposed, `d` = \
             ¬outcome ∧ ¬exposed, from the same private 2x2 table as `dp_relative_risk`, with \
             the same guarantee and group sizes (no `method`); the noisy denominators `b`, `c` \
             are floored at 1.",
        ],
        sql_example: "SELECT dp_odds_ratio(outcome, exposed, 1.0, 'group_sizes=public') AS odds \
                      FROM visits",
        related: &[&DpRelativeRisk],
    };
}
