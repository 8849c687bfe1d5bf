//! `dp_relative_risk(outcome, exposed, epsilon [, options])`: the relative risk
//! `(X/n_x)/(Y/n_y)` from a noisy 2x2 table (paper, LaplaceNoisedCounts and Claim
//! bias_ratio_counts: noisy denominators floored at 1).
//!
//! `X` = rows with `outcome AND exposed`, `n_x` = rows with `exposed`, `Y` = rows with
//! `outcome AND NOT exposed`, `n_y` = rows with `NOT exposed`; rows where either argument is
//! NULL do not count. Privacy: `(ε, δ)`-DP for the whole table under replace-one neighbours
//! ([`crate::stats::relative_risk`] has the argument). With `group_sizes=public` the exact group sizes
//! are used and the result is NULL for a group without exposed or unexposed rows.

use super::{DpAggregate, DpFunction};
use datafusion::logical_expr::AggregateUDF;
use std::sync::Arc;

/// The `dp_relative_risk` aggregate.
pub fn udaf() -> Arc<AggregateUDF> {
    DpAggregate::udaf(&DpFunction::RelativeRisk)
}
