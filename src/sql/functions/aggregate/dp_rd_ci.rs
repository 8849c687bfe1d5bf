//! `dp_rd_ci(outcome, exposed, epsilon [, options])`: the risk difference `p_x − p_y` with its
//! confidence interval, from one noisy 2x2 table (one noise draw, one privacy charge, the
//! guarantee of `dp_relative_risk`). Returns the same struct as `dp_rr_ci`, with `estimate`
//! the risk difference. `ci_method`: `conservative` (default; Wald with the noise variance,
//! [`crate::stats::ReleasedTable::risk_difference_interval_at_z`]), `plain` or `bootstrap`
//! ([`crate::stats::bootstrap`]); `log` is refused (no ratio).

use super::{DpAggregate, DpFunction};
use datafusion::logical_expr::AggregateUDF;
use std::sync::Arc;

/// The `dp_rd_ci` aggregate.
pub fn udaf() -> Arc<AggregateUDF> {
    DpAggregate::udaf(&DpFunction::RdCi)
}
