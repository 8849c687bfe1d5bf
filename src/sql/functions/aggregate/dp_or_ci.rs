//! `dp_or_ci(outcome, exposed, epsilon [, options])`: the odds ratio with the noise-aware score
//! interval after Miettinen & Nurminen 1985 (the default) or, with `ci_method=conservative`,
//! Woolf's log interval widened for the noise ([`crate::stats::ReleasedTable::odds_ratio_interval`]),
//! from one noisy table. Returns the interval struct ([`super::table::interval_type`]), with
//! `estimate` the odds ratio.

use super::statistic::StatisticDoc;
use super::DpOddsRatio;
use super::table::{TableStatistic, INTERVAL_FIELDS};
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
    const DOC: StatisticDoc = StatisticDoc {
        summary: "The odds ratio and its confidence interval from one noisy 2x2 table.",
        details: &[
            "One noise draw, one privacy charge, the odds ratio's guarantee and group sizes; \
             `estimate` is the odds ratio `ad/bc` from these counts (noisy denominators floored \
             at 1). `method` is accepted only to refuse the paper's other ratio methods by name: \
             they release no interval.",
            INTERVAL_FIELDS,
            "Its default interval (`ci_method=score`) is the noise-aware score interval for the \
             odds ratio (Miettinen & Nurminen's test inversion with the noise variance in the \
             test, as for the relative risk; the upper end is `+∞` when the release cannot \
             exclude a zero `c` or `b`, the lower end 0 for `a` or `d`). \
             `ci_method=conservative` is Woolf's log interval `exp(log OR ± z·sqrt(1/a + 1/b + \
             1/c + 1/d + noise variance term))`, widened for the noise the way the paper widens \
             the relative-risk interval, and `plain` drops the noise term; `log` and `bootstrap` \
             as for the relative risk's interval. `confidence` sets the level (default 0.95). Why \
             the score interval is the default, and how well it covers: \
             [research notes](#research-notes).",
        ],
        sql_example: "SELECT dp_or_ci(outcome, exposed, 1.0, 'ci_method=conservative') AS odds \
                      FROM visits",
        related: &[&DpOddsRatio],
    };
}
