//! `dp_odds_ratio(outcome, exposed, epsilon [, options])`: the odds ratio `ad/bc` from the same
//! private 2x2 table as `dp_relative_risk` (same guarantee, same options except `method`):
//! `a` = outcome ∧ exposed, `b` = ¬outcome ∧ exposed, `c` = outcome ∧ ¬exposed,
//! `d` = ¬outcome ∧ ¬exposed; the noisy denominators `b`, `c` are floored at 1.

use super::{DpAggregate, DpFunction};
use datafusion::logical_expr::AggregateUDF;
use std::sync::Arc;

/// The `dp_odds_ratio` aggregate.
pub fn udaf() -> Arc<AggregateUDF> {
    DpAggregate::udaf(&DpFunction::OddsRatio)
}
