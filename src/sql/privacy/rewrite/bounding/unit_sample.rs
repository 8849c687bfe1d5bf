//! `dp_unit_sample(unit, group_order, row_order, key, ..., max_rows, max_groups)`: the window
//! function that bounds each unit's contribution in one pass over a window partition's rows, in
//! any order ([`super::bound_contributions`]).
//!
//! It groups the partition's rows by `unit` and, within each unit, by `(unit, keys)` (hash
//! tables over Arrow's row format, exact: distinct values never share a group). Each unit keeps
//! its `max_groups` groups of smallest `(group_order, keys)` (the rewrite makes `group_order` a
//! keyed hash of `(unit, keys)` with a secret salt per query, so the choice is uniform), and in
//! each of them a uniformly random sample of `max_rows` rows (all of them if the group has
//! fewer), drawn from the operating system's random source, or, in the seeded (non-private,
//! reproducible) variant `dp_unit_sample_ordered`, the `max_rows` rows of smallest `row_order`
//! (the rewrite's keyed hash of each row's values). The function is `true` on the rows kept.
//!
//! Stability: each row's value depends only on the rows of its own unit in its own partition,
//! whatever the partitioning and the order, so the bound holds whatever the other rows are; the
//! plan analysis accepts the function as a window over one unit when its first argument is the
//! unit column ([`crate::sql::privacy::plan::analysis`]). Needing no order, the window is partitioned
//! by a bucket of the unit with no `ORDER BY`: DataFusion sorts by one `UInt64` only, where the
//! earlier form (`ORDER BY unit, group_order, keys`) sorted every row lexicographically, about
//! half of the bounded query's time (BENCHMARKS.md, "Contribution bounding").

use crate::stats::rng::secure_rng;
use arrow::array::{ArrayRef, AsArray, BooleanArray};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, UInt64Type};
use arrow::row::{Row, RowConverter, Rows, SortField};
use datafusion::common::{exec_err, plan_err, HashMap, Result};
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
        // The bounds are the rewrite's constants: read from a row, one person's row would
        // bound every other person's (the evaluator takes them from its first row).
        let exprs = args.input_exprs();
        let constant = |e: &Arc<dyn datafusion::physical_expr::PhysicalExpr>| {
            e.downcast_ref::<datafusion::physical_expr::expressions::Literal>()
                .is_some()
        };
        if exprs.len() >= 2 && !exprs[exprs.len() - 2..].iter().all(constant) {
            return plan_err!("{NAME}: 'max_rows' and 'max_groups' must be constants");
        }
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

/// `unit, group_order, row_order, keys..., max_rows, max_groups`: the orders and the bounds are
/// UInt64.
fn check_types(fields: &[FieldRef]) -> Result<()> {
    let n = fields.len();
    let uint64 = |f: &FieldRef| f.data_type() == &DataType::UInt64;
    if n < 5 || !uint64(&fields[1]) || !uint64(&fields[2]) || !fields[n - 2..].iter().all(uint64) {
        return plan_err!(
            "{NAME} takes (unit, group_order UInt64, row_order UInt64, key, ..., max_rows UInt64, max_groups UInt64), got ({})",
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

/// The rows of `columns` in Arrow's row format (equal values, nulls included, give equal rows);
/// `None` for no columns.
fn row_format(columns: &[ArrayRef]) -> Result<Option<Rows>> {
    if columns.is_empty() {
        return Ok(None);
    }
    let fields = columns
        .iter()
        .map(|c| SortField::new(c.data_type().clone()))
        .collect();
    Ok(Some(RowConverter::new(fields)?.convert_columns(columns)?))
}

/// One `(unit, keys)` group of a partition: its unit's index, its order, and its first row
/// (whose keys stand for the group's).
struct Group {
    unit: u32,
    order: u64,
    first: u32,
}

impl PartitionEvaluator for UnitSampleEvaluator {
    fn evaluate_all(&mut self, values: &[ArrayRef], num_rows: usize) -> Result<ArrayRef> {
        let n = values.len();
        if num_rows == 0 {
            return Ok(Arc::new(BooleanArray::from(Vec::<bool>::new())));
        }
        let max_rows = bound(&values[n - 2], "max_rows")?;
        let max_groups = bound(&values[n - 1], "max_groups")?;
        let group_order = values[1].as_primitive::<UInt64Type>();
        let row_order = values[2].as_primitive::<UInt64Type>();
        let units = row_format(&values[..1])?.expect("one unit column");
        let keys = row_format(&values[3..n - 2])?;
        let key = |row: u32| keys.as_ref().map(|k| k.row(row as usize));

        // Each row's group, and the groups in order of first appearance.
        let mut unit_ids: HashMap<Row<'_>, u32> = HashMap::with_capacity(num_rows);
        let mut group_ids: HashMap<(u32, Option<Row<'_>>), u32> = HashMap::with_capacity(num_rows);
        let mut groups: Vec<Group> = Vec::with_capacity(num_rows);
        let mut group_of_row = Vec::with_capacity(num_rows);
        for row in 0..num_rows {
            let next_unit = unit_ids.len() as u32;
            let unit = *unit_ids.entry(units.row(row)).or_insert(next_unit);
            let next_group = groups.len() as u32;
            let group = *group_ids
                .entry((unit, key(row as u32)))
                .or_insert(next_group);
            if group == next_group {
                groups.push(Group {
                    unit,
                    order: group_order.value(row),
                    first: row as u32,
                });
            }
            group_of_row.push(group);
        }

        // Each unit's first `max_groups` groups by (order, keys): distinct groups never tie.
        let mut by_unit: Vec<u32> = (0..groups.len() as u32).collect();
        by_unit.sort_unstable_by(|&a, &b| {
            let (a, b) = (&groups[a as usize], &groups[b as usize]);
            (a.unit, a.order, key(a.first)).cmp(&(b.unit, b.order, key(b.first)))
        });
        let mut chosen = vec![false; groups.len()];
        let mut rank = 0;
        for (i, &g) in by_unit.iter().enumerate() {
            let unit = groups[g as usize].unit;
            rank = if i > 0 && groups[by_unit[i - 1] as usize].unit == unit {
                rank + 1
            } else {
                0
            };
            chosen[g as usize] = rank < max_groups;
        }

        // The rows of each group, contiguous (counting sort by group, stable).
        let mut start = vec![0u32; groups.len() + 1];
        for &g in &group_of_row {
            start[g as usize + 1] += 1;
        }
        for g in 0..groups.len() {
            start[g + 1] += start[g];
        }
        let mut next = start.clone();
        let mut rows_by_group = vec![0u32; num_rows];
        for (row, &g) in group_of_row.iter().enumerate() {
            rows_by_group[next[g as usize] as usize] = row as u32;
            next[g as usize] += 1;
        }

        let mut keep = vec![false; num_rows];
        let mut rng = None;
        for (g, &chosen) in chosen.iter().enumerate() {
            if !chosen {
                continue;
            }
            let rows = &mut rows_by_group[start[g] as usize..start[g + 1] as usize];
            if rows.len() <= max_rows {
                rows.iter().for_each(|&r| keep[r as usize] = true);
            } else if self.ordered {
                rows.sort_unstable_by_key(|&r| (row_order.value(r as usize), r));
                rows[..max_rows]
                    .iter()
                    .for_each(|&r| keep[r as usize] = true);
            } else {
                let rng = match &mut rng {
                    Some(rng) => rng,
                    None => rng.insert(secure_rng().map_err(|e| {
                        datafusion::common::DataFusionError::Execution(format!("{NAME}: {e}"))
                    })?),
                };
                for i in sample(rng, rows.len(), max_rows) {
                    keep[rows[i] as usize] = true;
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

    /// Runs the evaluator on one partition: `units` and `keys` per row, the groups' order
    /// `group_order` and the rows' `row_order`, bounds `rows` and `groups`.
    fn run_with(
        ordered: bool,
        units: &[Option<&str>],
        keys: &[i64],
        group_order: &[u64],
        row_order: &[u64],
        rows: u64,
        groups: u64,
    ) -> Vec<bool> {
        let n = units.len();
        let values: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(units.to_vec())),
            Arc::new(UInt64Array::from(group_order.to_vec())),
            Arc::new(UInt64Array::from(row_order.to_vec())),
            Arc::new(Int64Array::from(keys.to_vec())),
            Arc::new(UInt64Array::from(vec![rows; n])),
            Arc::new(UInt64Array::from(vec![groups; n])),
        ];
        let out = UnitSampleEvaluator { ordered }
            .evaluate_all(&values, n)
            .unwrap();
        out.as_boolean().iter().map(|v| v.unwrap()).collect()
    }

    /// Rows in no order: p1 has groups 1 (rows 0, 4, 7), 2 (row 2) and 3 (row 5); the NULL
    /// unit is one unit with groups 1 (row 3) and 2 (row 6); p2 has group 1 (row 1).
    const UNITS: [Option<&str>; 8] = [
        Some("p1"),
        Some("p2"),
        Some("p1"),
        None,
        Some("p1"),
        Some("p1"),
        None,
        Some("p1"),
    ];
    const KEYS: [i64; 8] = [1, 1, 2, 1, 1, 3, 2, 1];

    #[test]
    fn keeps_the_first_groups_of_each_unit_and_a_sample_of_their_rows() {
        // Groups ordered by their key (group_order = key).
        let order: Vec<u64> = KEYS.iter().map(|&k| k as u64).collect();
        let run = |rows, groups| run_with(false, &UNITS, &KEYS, &order, &[0; 8], rows, groups);
        let p1_group_1 = |kept: &[bool]| [0, 4, 7].iter().filter(|&&r| kept[r]).count();
        let kept = run(2, 2);
        assert_eq!(p1_group_1(&kept), 2);
        let others: Vec<bool> = [1, 2, 3, 5, 6].iter().map(|&r| kept[r]).collect();
        assert_eq!(others, [true, true, true, false, true]);
        let kept = run(1, 1);
        assert_eq!(p1_group_1(&kept), 1);
        let others: Vec<bool> = [1, 2, 3, 5, 6].iter().map(|&r| kept[r]).collect();
        assert_eq!(others, [true, false, true, false, false]);
        // The group order decides, not the keys: reversed, p1 keeps group 3 and the NULL unit
        // group 2.
        let reversed: Vec<u64> = KEYS.iter().map(|&k| 10 - k as u64).collect();
        let kept = run_with(false, &UNITS, &KEYS, &reversed, &[0; 8], 1, 1);
        assert_eq!(kept, [false, true, false, false, false, true, true, false]);
        // Equal group orders: the keys break the tie.
        let kept = run_with(false, &UNITS, &KEYS, &[5; 8], &[0; 8], 3, 1);
        assert_eq!(kept, [true, true, false, true, true, false, false, true]);
    }

    #[test]
    fn the_seeded_variant_keeps_the_rows_of_smallest_row_order() {
        let order: Vec<u64> = KEYS.iter().map(|&k| k as u64).collect();
        let row_order = [7, 6, 5, 4, 3, 2, 1, 0];
        let kept = run_with(true, &UNITS, &KEYS, &order, &row_order, 2, 2);
        // p1's group 1: rows 4 and 7 (row orders 3 and 0), not row 0 (7).
        assert_eq!(kept, [false, true, true, true, true, false, true, true]);
    }

    #[test]
    fn the_row_sample_is_uniform() {
        // One group of 4 rows, 1 kept: each row is kept with probability 1/4. Over 4000 draws
        // each count is Binomial(4000, 1/4): mean 1000, sd sqrt(4000·3/16) ≈ 27.4; 5 sd = 137.
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            let kept = run_with(false, &[Some("p"); 4], &[1; 4], &[0; 4], &[0; 4], 1, 1);
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
            Arc::new(UInt64Array::from(vec![0])),
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
