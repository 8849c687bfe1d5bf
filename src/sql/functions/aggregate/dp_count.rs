//! `dp_count(expr, epsilon [, options])`: a noisy count of the non-NULL values of `expr`.
//!
//! Privacy (replace-one neighbours): without GROUP BY, replacing one row changes the count by
//! at most 1, so noise calibrated for `(ε, δ)` at sensitivity 1 (discrete Laplace of scale
//! `1/ε`, or the discrete Gaussian) is `(ε, δ)`-DP. With GROUP BY a replaced row can leave one
//! group and join another, so each group gets noise for `(ε/2, δ/2)` and the whole result is
//! `(ε, δ)`-DP ([`crate::sql::functions::aggregate::CallPlan::resolve`]). The result is the
//! raw noisy count, unbiased and possibly negative. `FILTER (WHERE ...)` restricts the rows.

use super::{DpAggregate, DpFunction};
use datafusion::logical_expr::AggregateUDF;
use std::sync::Arc;

/// The `dp_count` aggregate.
pub fn udaf() -> Arc<AggregateUDF> {
    DpAggregate::udaf(&DpFunction::Count)
}
