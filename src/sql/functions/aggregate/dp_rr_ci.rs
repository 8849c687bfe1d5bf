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

use super::statistic::StatisticDoc;
use super::DpRelativeRisk;
use super::table::{TableStatistic, INTERVAL_FIELDS};
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
    const DOC: StatisticDoc = StatisticDoc {
        summary: "The relative risk and its confidence interval from one noisy 2x2 table.",
        details: &[
            "One noise draw, one privacy charge, the same guarantee and group sizes as \
             `dp_relative_risk`; `estimate` is the relative risk as `dp_relative_risk` computes \
             it from these counts. `method` is accepted only to refuse the paper's other ratio \
             methods by name: they release no interval.",
            INTERVAL_FIELDS,
            "`confidence` sets the level (default 0.95); `ci_method` the interval:",
            "| `ci_method` | interval |\n\
             |---|---|\n\
             | `score` (default) | the noise-aware score interval: Koopman's / Miettinen & \
             Nurminen's test inversion with the variance of each noisy proportion (sampling plus \
             the exact noise variance) evaluated under the hypothesis; the error split between \
             the two ends by the ratio's skew at each candidate value (never more even than \
             30/70); the upper end is `+∞` when the release cannot exclude `Y = 0` \
             (`Ỹ ≤ 1.645·s` at 95%), the lower end 0 when it cannot exclude `X = 0` \
             ([intervals.md](intervals.md), section 5) |\n\
             | `conservative` | the paper's: `p̃ ± z·Ṽ` with sampling plus noise variance \
             (Theorem Gaussian_Valid_CI, with the exact variance of the discrete noise) |\n\
             | `plain` | sampling variance only (Theorem Valid_CI): asymptotically valid, \
             under-covers at small counts |\n\
             | `log` | Katz's log interval `exp(ln p̃ ± z·sqrt(V))` with the delta-method noise \
             variance for the size mode in use: better coverage than `conservative` where counts \
             are small, short of the target with Gaussian noise at ε ≤ 0.5 \
             ([intervals.md](intervals.md)) |\n\
             | `bootstrap` | parametric bootstrap from the released table (Ferrando, Wang & \
             Sheldon 2022) for counts in the tens; pure post-processing (no extra privacy cost), \
             deterministic for a given release, ~B = 199 replays per group |",
            "`ci_method=default` (or leaving it unset) picks each interval function's own \
             default: `score` here. Access fields with `ci['lower']`. How well each method \
             covers, and how wide it is: [research notes](#research-notes) below, \
             [coverage.md](coverage.md) and [intervals.md](intervals.md).",
        ],
        sql_example: "SELECT dp_rr_ci(outcome, exposed, 1.0, 'confidence=0.9') AS rr FROM visits",
        related: &[&DpRelativeRisk],
    };
}
