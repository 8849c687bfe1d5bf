//! `BoundContributions`, the logical node of contribution bounding: below a DP aggregation,
//! each privacy unit keeps at most `max_groups_per_unit` of its groups and, in each, at most
//! `max_rows_per_unit` of its rows ([`super::bound_contributions`]). It is planned as
//! [`crate::sql::privacy::exec::bound_contributions::BoundContributionsExec`], which streams
//! its input hash-partitioned by the unit and keeps each unit's sample in memory.
//!
//! In `EXPLAIN`:
//!
//! ```text
//! BoundContributions: unit=visits.patient_id, keys=[visits.region], max_rows_per_unit=1, max_groups_per_unit=1, sample=random
//! ```
//!
//! Its output is a subset of its input's rows, chosen for each unit from that unit's rows and
//! the query's salt only, so the plan analysis reads it as the per-unit transformation it is
//! ([`crate::sql::privacy::plan::analysis`]), and a node whose GROUP BY keys are empty caps
//! the rows of each unit at `max_rows_per_unit` ([`super::rows_per_unit_sampled`]).

use datafusion::common::{plan_err, Column, DFSchemaRef, Result};
use datafusion::logical_expr::{Expr, LogicalPlan, UserDefinedLogicalNodeCore};
use std::cmp::Ordering;
use std::fmt;

/// The node's name, in `EXPLAIN` and in the codec.
pub const NAME: &str = "BoundContributions";

/// Contribution bounding over `input` (module docs). Every column it names is a column of
/// `input`, whose schema it keeps.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BoundContributions {
    pub input: LogicalPlan,
    /// The privacy unit.
    pub unit: Column,
    /// The GROUP BY keys of the aggregation above (none: every row of a unit is in one group).
    pub keys: Vec<Column>,
    /// Seeded (non-private, reproducible) mode only: the columns whose keyed hash orders a
    /// group's rows, of which it keeps the smallest (every column of the aggregation's input as
    /// the rewrite saw it). Empty: a uniformly random sample from the operating system's source.
    pub row_order: Vec<Column>,
    pub max_rows: u32,
    /// 1 without keys (every row of a unit is in its one group).
    pub max_groups: u32,
    /// The key of the keyed hash that orders each unit's groups (fresh per query, or derived
    /// from `dp.seed`).
    pub salt: u64,
}

impl BoundContributions {
    /// Whether the row sample is the seeded, reproducible one.
    pub fn seeded(&self) -> bool {
        !self.row_order.is_empty()
    }

    /// The most rows one unit keeps.
    pub fn rows_per_unit(&self) -> u64 {
        u64::from(self.max_rows) * u64::from(self.max_groups)
    }
}

impl PartialOrd for BoundContributions {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        let key = |n: &Self| {
            (
                n.unit.clone(),
                n.keys.clone(),
                n.row_order.clone(),
                n.max_rows,
                n.max_groups,
                n.salt,
            )
        };
        match key(self).cmp(&key(other)) {
            Ordering::Equal => self.input.partial_cmp(&other.input),
            ordering => Some(ordering),
        }
    }
}

fn column(expr: &Expr) -> Result<Column> {
    match expr {
        Expr::Column(c) => Ok(c.clone()),
        other => plan_err!("{NAME}: expected a column, got {other}"),
    }
}

impl UserDefinedLogicalNodeCore for BoundContributions {
    fn name(&self) -> &str {
        NAME
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        self.input.schema()
    }

    /// The unit, the keys, then the row-order columns.
    fn expressions(&self) -> Vec<Expr> {
        std::iter::once(&self.unit)
            .chain(&self.keys)
            .chain(&self.row_order)
            .map(|c| Expr::Column(c.clone()))
            .collect()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let keys: Vec<String> = self.keys.iter().map(|k| k.to_string()).collect();
        write!(
            f,
            "{NAME}: unit={}, keys=[{}], max_rows_per_unit={}, max_groups_per_unit={}, sample={}",
            self.unit,
            keys.join(", "),
            self.max_rows,
            self.max_groups,
            if self.seeded() {
                "seeded (non-private)"
            } else {
                "random"
            }
        )
    }

    fn with_exprs_and_inputs(
        &self,
        exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        if inputs.len() != 1 || exprs.len() != 1 + self.keys.len() + self.row_order.len() {
            return plan_err!(
                "{NAME} takes one input and {} columns, got {} and {}",
                1 + self.keys.len() + self.row_order.len(),
                inputs.len(),
                exprs.len()
            );
        }
        let columns = exprs.iter().map(column).collect::<Result<Vec<_>>>()?;
        let (keys, row_order) = columns[1..].split_at(self.keys.len());
        Ok(Self {
            input: inputs.swap_remove(0),
            unit: columns[0].clone(),
            keys: keys.to_vec(),
            row_order: row_order.to_vec(),
            ..self.clone()
        })
    }

    /// The columns the parent needs and those the node reads: its output is its input's rows.
    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        let schema = self.input.schema();
        let mut needed = output_columns.to_vec();
        for c in std::iter::once(&self.unit)
            .chain(&self.keys)
            .chain(&self.row_order)
        {
            needed.push(schema.index_of_column(c).ok()?);
        }
        needed.sort_unstable();
        needed.dedup();
        Some(vec![needed])
    }
}
