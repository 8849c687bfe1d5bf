//! `dp_rr_ci(outcome, exposed, epsilon [, options])`: the relative risk with its confidence
//! interval, from one noisy 2x2 table (one noise draw, one privacy charge).
//!
//! Returns a struct: `estimate` (as `dp_relative_risk`), `lower`, `upper` (by default the
//! noise-aware score interval, [`crate::stats::score`], whose upper end may be `+∞`; paper,
//! Theorem Gaussian_Valid_CI for `ci_method=conservative`, Theorem Valid_CI for `plain`, the
//! noise-aware Katz log interval for `log`, see [`crate::stats::ReleasedTable::interval`]; the
//! parametric bootstrap for `bootstrap`, [`crate::stats::bootstrap`], pure post-processing at
//! no extra privacy cost), the released counts `exposed_cases`,
//! `exposed_total`, `unexposed_cases`, `unexposed_total` it was computed from, `confidence`,
//! and `seeded`, true when the noise came from `dp.seed` and the result is **not private**.

use super::{DpAggregate, DpFunction};
use crate::stats::{IntervalMethod, IntervalSpec, RatioStatistic, ReleasedTable, TableNoise};
use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, StructArray};
use arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::logical_expr::AggregateUDF;
use std::sync::Arc;

/// The `dp_rr_ci` aggregate.
pub fn udaf() -> Arc<AggregateUDF> {
    DpAggregate::udaf(&DpFunction::RrCi)
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

/// The struct type `dp_rr_ci`, `dp_or_ci` and `dp_rd_ci` return.
pub fn return_type() -> DataType {
    DataType::Struct(fields())
}

/// The result columns of `dp_rr_ci`, `dp_or_ci` and `dp_rd_ci`, filled one released table at a
/// time so no per-group intermediate is kept.
pub(crate) struct IntervalColumns {
    statistic: RatioStatistic,
    noise: TableNoise,
    spec: IntervalSpec,
    seeded: bool,
    estimate: Vec<Option<f64>>,
    lower: Vec<Option<f64>>,
    upper: Vec<Option<f64>>,
    counts: [Vec<i64>; 4],
}

impl IntervalColumns {
    pub(crate) fn new(
        name: &str,
        statistic: RatioStatistic,
        noise: TableNoise,
        confidence: f64,
        method: IntervalMethod,
        seeded: bool,
        capacity: usize,
    ) -> Result<Self> {
        let spec = noise
            .interval_spec(confidence, method)
            .map_err(|e| exec_datafusion_err!("{name}: {e}"))?;
        Ok(Self {
            statistic,
            noise,
            spec,
            seeded,
            estimate: Vec::with_capacity(capacity),
            lower: Vec::with_capacity(capacity),
            upper: Vec::with_capacity(capacity),
            counts: std::array::from_fn(|_| Vec::with_capacity(capacity)),
        })
    }

    pub(crate) fn push(&mut self, table: &ReleasedTable) {
        // The one interval entry point the coverage simulations use too.
        let interval = self.noise.interval(table, self.statistic, &self.spec);
        self.estimate.push(interval.map(|i| i.estimate));
        self.lower.push(interval.map(|i| i.lower));
        self.upper.push(interval.map(|i| i.upper));
        let values = [
            table.exposed_cases,
            table.exposed_total,
            table.unexposed_cases,
            table.unexposed_total,
        ];
        for (column, value) in self.counts.iter_mut().zip(values) {
            column.push(value);
        }
    }

    pub(crate) fn finish(self) -> Result<ArrayRef> {
        let rows = self.estimate.len();
        let [a, b, c, d] = self.counts;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(self.estimate)),
            Arc::new(Float64Array::from(self.lower)),
            Arc::new(Float64Array::from(self.upper)),
            Arc::new(Int64Array::from(a)),
            Arc::new(Int64Array::from(b)),
            Arc::new(Int64Array::from(c)),
            Arc::new(Int64Array::from(d)),
            Arc::new(Float64Array::from(vec![self.spec.confidence; rows])),
            Arc::new(BooleanArray::from(vec![self.seeded; rows])),
        ];
        Ok(Arc::new(StructArray::try_new(fields(), columns, None)?))
    }
}
