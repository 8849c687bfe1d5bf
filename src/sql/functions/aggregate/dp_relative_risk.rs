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

use super::statistic::StatisticDoc;
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
    const DOC: StatisticDoc = StatisticDoc {
        summary: "The relative risk `(X/n_x) / (Y/n_y)` from a noisy 2x2 table.",
        details: &[
            "`X` = rows with `outcome AND exposed`, `n_x` = rows with `exposed`, `Y` = rows with \
             `outcome AND NOT exposed`, `n_y` = rows with `NOT exposed`. Both arguments must be \
             BOOLEAN; rows where either is NULL do not count. Computed from a noisy 2x2 table; \
             every noisy count in a denominator is floored at 1 (the paper's Claim \
             bias_ratio_counts), so the estimate always exists; it can be 0 or negative when the \
             noisy numerator is.",
            "- Guarantee: `(ε, δ)`-DP for the whole table (δ = 0 for Laplace). A replaced row \
             changes at most two cells by 1: Laplace noise for `ε/2` per cell (scale `2/ε`, as \
             the paper's LaplaceNoisedCounts); the Gaussian is calibrated once for the table, \
             one vector of L2 sensitivity `√2` (`gaussian_calibration=per_cell`: the paper's \
             `(ε/2, δ/2)` per cell).\n\
             - `group_sizes=private` (default): all four cells are noised; `n_x`, `n_y` are sums \
             of noisy cells. `group_sizes=public`: only `X` and `Y` are noised and the exact \
             `n_x`, `n_y` are used and released — this reproduces the paper, and **you assert \
             that the number of exposed and unexposed rows in every group is public** (fixed by \
             the study design). With public sizes the result is NULL for a group with no exposed \
             or no unexposed rows.",
            "Ratio methods (`method=...`):",
            "| method | release | guarantee | needs |\n\
             |---|---|---|---|\n\
             | `noisy_counts` (default) | noisy 2x2 table, then the ratio | (ε, δ) as above | — |\n\
             | `noised_log` | `exp(log(X/Y) + Lap(log 2/ε))` (NoisedLog); `bias_correction=true` \
             multiplies by `1 − (log 2/ε)²` (Claim bias_log_RR, refused for ε ≤ log 2) | (ε, 0) | \
             `group_sizes=public` |\n\
             | `naive` | `X/Y + Lap(max(n_x/2, 1)/ε)` (NaiveRelativeRisk; the paper's `n_x/2` \
             assumes `X ≥ 1`, see [paper-notes.md](paper-notes.md)) | (ε, 0) | \
             `group_sizes=public` |\n\
             | `smooth_sensitivity` | `X/Y + Lap(2S/ε)`, S the β-smooth sensitivity, β = ε/(2 \
             ln(2/δ)) | (ε, δ) | `group_sizes=public`, `delta` |\n\
             | `ptr` | Propose-Test-Release with `ptr_bound` as the proposed local sensitivity, \
             ε/2 for the test and ε/2 for the release; **NULL means FAIL** | (ε, δ) | \
             `group_sizes=public`, `delta`, `ptr_bound` |",
            "These release the ratio `X/Y`, multiplied by the public `n_y/n_x`; they release no \
             interval, so the interval functions refuse them. They support one row per unit in \
             one group only (`max_rows_per_unit = max_groups_per_unit = 1`). Noise on these real \
             values is floating-point safe: the value is rounded to a power-of-two grid `2^k`, \
             `k = max(⌈log2(Δ/ε)⌉ − 30, −30)`, and integer discrete-Laplace noise is added in \
             grid units, calibrated for sensitivity `Δ + 2^k` (OpenDP's approach); values beyond \
             `2^62` grid steps are clamped. For `smooth_sensitivity`, whose `Δ = 2S` depends on \
             the data, the grid comes from the public bound `2·max(n_x/2, 1)` instead (a \
             data-dependent grid would tell neighbouring tables apart).",
        ],
        sql_example: "SELECT dp_relative_risk(outcome, exposed, 1.0) AS rr FROM visits",
        related: &[],
    };
}
