//! `dp_rr_ci(outcome, exposed, epsilon [, options])`: the relative risk with its confidence
//! interval, from one noisy 2x2 table (one noise draw, one privacy charge).
//!
//! Returns a struct: `estimate` (as `dp_relative_risk`), `lower`, `upper` (paper, Theorem
//! Gaussian_Valid_CI for `ci_method=conservative`, Theorem Valid_CI for `plain`; see
//! [`crate::stats::ReleasedTable::interval`]), the released counts `exposed_cases`,
//! `exposed_total`, `unexposed_cases`, `unexposed_total` it was computed from, `confidence`,
//! and `seeded`, true when the noise came from `dp.seed` and the result is **not private**.

use super::{DpAggregate, DpFunction};
use crate::stats::ratio::two_sided_z;
use crate::stats::{IntervalMethod, RatioStatistic, ReleasedTable};
use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, StructArray};
use arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::logical_expr::AggregateUDF;
use std::sync::Arc;

/// The `dp_rr_ci` aggregate.
pub fn udaf() -> Arc<AggregateUDF> {
    DpAggregate::udaf(DpFunction::RrCi)
}

fn fields() -> Fields {
    Fields::from(vec![
        Field::new("estimate", DataType::Float64, true),
        Field::new("lower", DataType::Float64, true),
        Field::new("upper", DataType::Float64, true),
        Field::new("exposed_cases", DataType::Int64, false),
        Field::new("exposed_total", DataType::Int64, false),
        Field::new("unexposed_cases", DataType::Int64, false),
        Field::new("unexposed_total", DataType::Int64, false),
        Field::new("confidence", DataType::Float64, false),
        Field::new("seeded", DataType::Boolean, false),
    ])
}

/// The struct type `dp_rr_ci` and `dp_or_ci` return.
pub fn return_type() -> DataType {
    DataType::Struct(fields())
}

/// Builds the result column of `dp_rr_ci` / `dp_or_ci` from the released tables.
pub(crate) fn build(
    name: &str,
    released: &[ReleasedTable],
    statistic: RatioStatistic,
    confidence: f64,
    method: IntervalMethod,
    seeded: bool,
) -> Result<ArrayRef> {
    let z = two_sided_z(confidence).map_err(|e| exec_datafusion_err!("{name}: {e}"))?;
    let intervals: Vec<_> = released
        .iter()
        .map(|t| t.estimate_with_interval_at_z(statistic, z, method))
        .collect();
    let column = |f: &dyn Fn(&ReleasedTable) -> i64| -> ArrayRef {
        Arc::new(released.iter().map(f).collect::<Int64Array>())
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(
            intervals
                .iter()
                .map(|i| i.map(|i| i.estimate))
                .collect::<Float64Array>(),
        ),
        Arc::new(
            intervals
                .iter()
                .map(|i| i.map(|i| i.lower))
                .collect::<Float64Array>(),
        ),
        Arc::new(
            intervals
                .iter()
                .map(|i| i.map(|i| i.upper))
                .collect::<Float64Array>(),
        ),
        column(&|t| t.exposed_cases),
        column(&|t| t.exposed_total),
        column(&|t| t.unexposed_cases),
        column(&|t| t.unexposed_total),
        Arc::new(Float64Array::from(vec![confidence; released.len()])),
        Arc::new(BooleanArray::from(vec![seeded; released.len()])),
    ];
    Ok(Arc::new(StructArray::try_new(fields(), columns, None)?))
}
