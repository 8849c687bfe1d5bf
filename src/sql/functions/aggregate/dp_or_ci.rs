//! `dp_or_ci(outcome, exposed, epsilon [, options])`: the odds ratio with the noise-aware score
//! interval after Miettinen & Nurminen 1985 (the default) or, with `ci_method=conservative`,
//! Woolf's log interval widened for the noise ([`crate::stats::ReleasedTable::odds_ratio_interval`]),
//! from one noisy table. Returns the same struct as `dp_rr_ci`, with `estimate` the odds ratio.

use super::{DpAggregate, DpFunction};
use datafusion::logical_expr::AggregateUDF;
use std::sync::Arc;

/// The `dp_or_ci` aggregate.
pub fn udaf() -> Arc<AggregateUDF> {
    DpAggregate::udaf(&DpFunction::OrCi)
}
