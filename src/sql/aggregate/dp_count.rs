//! `dp_count(expr, epsilon [, options])`: a noisy count of the non-NULL values of `expr`.
//!
//! Privacy: replacing one row changes the count by at most 1 (sensitivity 1), so the count
//! with discrete Laplace noise of scale `1/ε` is `(ε, 0)`-DP, and with discrete Gaussian noise
//! calibrated for `(ε, δ)` is `(ε, δ)`-DP (see [`crate::stats::mechanism`]). The result is the
//! raw noisy count, unbiased and possibly negative. `FILTER (WHERE ...)` restricts the rows.

use super::{DpAggregate, DpFunction};
use datafusion::logical_expr::AggregateUDF;
use std::sync::Arc;

/// The `dp_count` aggregate.
pub fn udaf() -> Arc<AggregateUDF> {
    DpAggregate::udaf(DpFunction::Count)
}
