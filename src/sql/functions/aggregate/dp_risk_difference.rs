//! `dp_risk_difference(outcome, exposed, epsilon [, options])`: the risk difference
//! `p_x − p_y = X/n_x − Y/n_y` from the same private 2x2 table as `dp_relative_risk` (same
//! guarantee, same options except `method`), sizes floored at 1
//! ([`crate::stats::ReleasedTable::risk_difference`]). Fairness audits report it (demographic
//! parity) beside the ratio (disparate impact).

use super::{DpAggregate, DpFunction};
use datafusion::logical_expr::AggregateUDF;
use std::sync::Arc;

/// The `dp_risk_difference` aggregate.
pub fn udaf() -> Arc<AggregateUDF> {
    DpAggregate::udaf(&DpFunction::RiskDifference)
}
