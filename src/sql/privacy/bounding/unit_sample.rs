//! `dp_unit_sample(unit, key, ..., max_rows, max_groups)`: the window function that bounds
//! each unit's contribution in one pass over rows sorted by unit, then by the order in which
//! its groups are picked ([`super::bound_contributions`]).
//!
//! Over a window `ORDER BY unit, ...`, each unit's rows are one run of consecutive rows and
//! its groups runs of equal (unit, keys) inside it. The function is `true` on the rows kept:
//! in the first `max_groups` groups of each unit run, a uniformly random sample of
//! `max_rows` rows (all of them if the group has fewer), drawn from the operating system's
//! random source, or, in the seeded (non-private, reproducible) mode, the first `max_rows` rows
//! of the run in the window's order, which the rewrite then makes a keyed hash of each row's
//! values (`dp_unit_sample_ordered`). Each row's value depends only on the rows of its own run, so the
//! bound holds whatever the other rows are (the plan analysis accepts it as a window over one
//! unit: [`crate::sql::privacy::analysis`]). The window's `ORDER BY unit, <group order>, keys`
//! makes each group one run (the bounding rewrite sets it). One window over few
//! partitions replaces `dense_rank` / `row_number` windows `PARTITION BY unit`, whose
//! per-partition overhead in DataFusion dominates when units are many (BENCHMARKS.md).

use crate::stats::rng::secure_rng;
use arrow::array::{ArrayRef, AsArray, BooleanArray};
use arrow::buffer::BooleanBuffer;
use arrow::compute::partition;
use arrow::datatypes::{DataType, Field, FieldRef, UInt64Type};
use datafusion::common::{exec_err, plan_err, Result};
use datafusion::logical_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion::logical_expr::{
    PartitionEvaluator, Signature, Volatility, WindowUDF, WindowUDFImpl,
};
use rand::seq::index::sample;
use std::sync::{Arc, LazyLock};

pub const NAME: &str = "dp_unit_sample";
/// The seeded mode's variant: the first rows in the window's order instead of a random sample.
pub const ORDERED_NAME: &str = "dp_unit_sample_ordered";

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct UnitSample {
    signature: Signature,
    /// Keep the first `max_rows` rows of a group (in the window's order) instead of a random
    /// sample of them.
    ordered: bool,
}

impl UnitSample {
    fn new(ordered: bool) -> Self {
        Self {
            // Volatile: the row sample is random (or, ordered, as random as the row order).
            signature: Signature::variadic_any(Volatility::Volatile),
            ordered,
        }
    }
}

static UDWF: LazyLock<Arc<WindowUDF>> =
    LazyLock::new(|| Arc::new(WindowUDF::new_from_impl(UnitSample::new(false))));
static UDWF_ORDERED: LazyLock<Arc<WindowUDF>> =
    LazyLock::new(|| Arc::new(WindowUDF::new_from_impl(UnitSample::new(true))));

/// The `dp_unit_sample` window function.
pub fn udwf() -> Arc<WindowUDF> {
    Arc::clone(&UDWF)
}

/// The `dp_unit_sample_ordered` window function (the seeded mode's).
pub fn udwf_ordered() -> Arc<WindowUDF> {
    Arc::clone(&UDWF_ORDERED)
}

/// Whether `udwf` is `dp_unit_sample`.
pub fn is_unit_sample(udwf: &WindowUDF) -> bool {
    udwf.inner().downcast_ref::<UnitSample>().is_some()
}

impl WindowUDFImpl for UnitSample {
    fn name(&self) -> &str {
        if self.ordered {
            ORDERED_NAME
        } else {
            NAME
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn partition_evaluator(
        &self,
        args: PartitionEvaluatorArgs,
    ) -> Result<Box<dyn PartitionEvaluator>> {
        check_types(args.input_fields())?;
        Ok(Box::new(UnitSampleEvaluator {
            ordered: self.ordered,
        }))
    }

    fn field(&self, field_args: WindowUDFFieldArgs) -> Result<FieldRef> {
        check_types(field_args.input_fields())?;
        Ok(Arc::new(Field::new(
            field_args.name(),
            DataType::Boolean,
            false,
        )))
    }
}

/// `unit, keys..., max_rows, max_groups`: the bounds are UInt64.
fn check_types(fields: &[FieldRef]) -> Result<()> {
    let n = fields.len();
    if n < 3
        || fields[n - 2..]
            .iter()
            .any(|f| f.data_type() != &DataType::UInt64)
    {
        return plan_err!(
            "{NAME} takes (unit, key, ..., max_rows UInt64, max_groups UInt64), got ({})",
            fields
                .iter()
                .map(|f| f.data_type().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

#[derive(Debug)]
struct UnitSampleEvaluator {
    ordered: bool,
}

/// A bound argument (constant, so its first value), at least 1.
fn bound(values: &ArrayRef, name: &str) -> Result<usize> {
    let values = values.as_primitive::<UInt64Type>();
    match values.iter().next().flatten() {
        Some(v) if v >= 1 => Ok(usize::try_from(v).unwrap_or(usize::MAX)),
        other => exec_err!("{NAME}: argument '{name}' must be an integer >= 1, got {other:?}"),
    }
}

impl PartitionEvaluator for UnitSampleEvaluator {
    fn evaluate_all(&mut self, values: &[ArrayRef], num_rows: usize) -> Result<ArrayRef> {
        let n = values.len();
        if num_rows == 0 {
            return Ok(Arc::new(BooleanArray::from(Vec::<bool>::new())));
        }
        let max_rows = bound(&values[n - 2], "max_rows")?;
        let max_groups = bound(&values[n - 1], "max_groups")?;
        let units = partition(&values[..1])?.ranges();
        let groups = partition(&values[..n - 2])?.ranges();
        let mut keep = vec![false; num_rows];
        let mut rng = None;
        let mut unit = 0;
        let mut group_in_unit = 0;
        for group in groups {
            // Groups nest in units (the unit is the first column of both partitions).
            if group.start >= units[unit].end {
                unit += 1;
                group_in_unit = 0;
            }
            group_in_unit += 1;
            if group_in_unit > max_groups {
                continue;
            }
            let len = group.len();
            if len <= max_rows {
                keep[group].fill(true);
            } else if self.ordered {
                keep[group.start..group.start + max_rows].fill(true);
            } else {
                let rng = match &mut rng {
                    Some(rng) => rng,
                    None => rng.insert(secure_rng().map_err(|e| {
                        datafusion::common::DataFusionError::Execution(format!("{NAME}: {e}"))
                    })?),
                };
                for i in sample(rng, len, max_rows) {
                    keep[group.start + i] = true;
                }
            }
        }
        Ok(Arc::new(BooleanArray::new(BooleanBuffer::from(keep), None)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray, UInt64Array};

    fn run(units: Vec<Option<&str>>, keys: Vec<i64>, rows: u64, groups: u64) -> Vec<bool> {
        run_with(false, units, keys, rows, groups)
    }

    fn run_with(
        ordered: bool,
        units: Vec<Option<&str>>,
        keys: Vec<i64>,
        rows: u64,
        groups: u64,
    ) -> Vec<bool> {
        let n = units.len();
        let values: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(units)),
            Arc::new(Int64Array::from(keys)),
            Arc::new(UInt64Array::from(vec![rows; n])),
            Arc::new(UInt64Array::from(vec![groups; n])),
        ];
        let out = UnitSampleEvaluator { ordered }
            .evaluate_all(&values, n)
            .unwrap();
        out.as_boolean().iter().map(|v| v.unwrap()).collect()
    }

    #[test]
    fn keeps_the_first_groups_of_each_unit_and_a_sample_of_their_rows() {
        // p1: groups 1 (3 rows), 2 (1 row), 3 (1 row); NULL unit: one unit; p2: group 1.
        let units = vec![
            Some("p1"),
            Some("p1"),
            Some("p1"),
            Some("p1"),
            Some("p1"),
            None,
            None,
            Some("p2"),
        ];
        let keys = vec![1, 1, 1, 2, 3, 1, 2, 1];
        let kept = run(units.clone(), keys.clone(), 2, 2);
        assert_eq!(kept[..3].iter().filter(|k| **k).count(), 2);
        assert_eq!(&kept[3..], &[true, false, true, true, true]);
        let kept = run(units.clone(), keys.clone(), 1, 1);
        assert_eq!(kept[..3].iter().filter(|k| **k).count(), 1);
        assert_eq!(&kept[3..], &[false, false, true, false, true]);
        // The seeded mode's variant keeps the first rows of each group, the same groups.
        let kept = run_with(true, units, keys, 2, 2);
        assert_eq!(kept, [true, true, false, true, false, true, true, true]);
    }

    #[test]
    fn the_row_sample_is_uniform() {
        // One group of 4 rows, 1 kept: each row is kept with probability 1/4. Over 4000 draws
        // each count is Binomial(4000, 1/4): mean 1000, sd sqrt(4000·3/16) ≈ 27.4; 5 sd = 137.
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            let kept = run(vec![Some("p"); 4], vec![1; 4], 1, 1);
            for (c, k) in counts.iter_mut().zip(kept) {
                *c += usize::from(k);
            }
        }
        for c in counts {
            assert!((c as i64 - 1000).abs() < 137, "{counts:?}");
        }
    }

    #[test]
    fn bounds_must_be_at_least_one() {
        let values: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["p"])),
            Arc::new(UInt64Array::from(vec![0])),
            Arc::new(UInt64Array::from(vec![1])),
        ];
        let err = UnitSampleEvaluator { ordered: false }
            .evaluate_all(&values, 1)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("'max_rows' must be an integer >= 1"),
            "{err}"
        );
    }
}
