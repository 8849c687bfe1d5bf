//! Contribution bounding for tables protected by a unit column
//! (`SET dp.protected_tables = 'visits(patient_id)'`), on the unit column the plan analysis
//! carried to the aggregate ([`crate::sql::privacy::plan::analysis`]).
//!
//! Before a DP aggregation, each unit's rows are bounded as ZetaSQL and SmartNoise do: each
//! unit keeps at most `max_groups_per_unit` of its groups, chosen uniformly at random, and in
//! each of them a uniformly random sample of at most `max_rows_per_unit` rows. The rewrite is
//! one node below the aggregate, visible in `EXPLAIN` ([`node::BoundContributions`]):
//!
//! ```text
//! BoundContributions: unit=visits.patient_id, keys=[visits.region], max_rows_per_unit=1, max_groups_per_unit=1, sample=random
//! ```
//!
//! planned as one streaming operator over its input hash-partitioned by the unit
//! ([`crate::sql::privacy::exec::bound_contributions`]). Each unit's groups are ordered by a
//! keyed hash of (unit, keys) with a fresh random salt per query, or one derived from
//! `dp.seed` ([`keyed_hash`]), then by the keys, so distinct groups never tie; each kept group
//! keeps a uniformly random sample of its rows (under `dp.seed`, the rows of smallest keyed
//! hash of each row's values, so that the sample too is reproducible whatever order the rows
//! arrive in). Every choice depends only on the unit's own rows and the salt, so the bounds
//! hold whatever the data. The calibration then uses sensitivity `max_rows_per_unit` and
//! `ε/max_groups_per_unit` per group ([`crate::sql::functions::aggregate::CallPlan::resolve`]).
//!
//! Before issue 43 the bounding was a window partitioned by a bucket of the unit: DataFusion
//! sorted every row by its bucket and held each bucket's rows, 34x the exact query's time on
//! 10M rows (BENCHMARKS.md).

pub mod keyed_hash;
pub mod node;

use crate::stats::rng::{secure_rng, seeded_rng};
use datafusion::common::{plan_datafusion_err, Column, Result};
use datafusion::logical_expr::{Expr, Extension, LogicalPlan, LogicalPlanBuilder};
use node::BoundContributions;
use rand::RngCore;
use std::sync::Arc;

/// The seeded salt's label of contribution bounding (unchanged since the window, so seeded
/// outputs are too).
const BOUNDING_LABEL: &str = "__dp_unit_group_order";
/// The seeded salt's label of [`sample_rows_per_unit`].
const OWN_ROWS_LABEL: &str = "__dp_own_rows";
/// Columns a computed unit or key is projected to before the node.
const UNIT: &str = "__dp_unit";
const KEY: &str = "__dp_key";

/// `input` with every privacy unit's contribution bounded (see the module docs). `seed` (the
/// non-private `dp.seed`) makes the choice of groups and of rows reproducible.
pub fn bound_contributions(
    input: Arc<LogicalPlan>,
    unit_column: Expr,
    keys: &[Expr],
    (max_rows, max_groups): (u32, u32),
    seed: Option<u64>,
) -> Result<Arc<LogicalPlan>> {
    let bounds = (max_rows, max_groups);
    sample_per_unit(input, unit_column, keys, bounds, seed, BOUNDING_LABEL)
}

/// `input` keeping a uniformly random sample of at most `max_rows` rows of each unit (the
/// same node as [`bound_contributions`] without keys): a cap on what one person's rows can
/// meet of their own rows in a join of two protected relations
/// ([`crate::sql::privacy::rewrite::public_fanout`]). Each unit's sample depends only on its
/// own rows and the salt, so the cap is a per-unit transformation and the contribution bound
/// above it is unchanged.
pub fn sample_rows_per_unit(
    input: Arc<LogicalPlan>,
    unit_column: Expr,
    max_rows: u32,
    seed: Option<u64>,
) -> Result<Arc<LogicalPlan>> {
    sample_per_unit(input, unit_column, &[], (max_rows, 1), seed, OWN_ROWS_LABEL)
}

/// The cap on rows per unit that a [`BoundContributions`] node placed on `plan`, seen through
/// the nodes the optimiser may leave above it.
#[recursive::recursive]
pub fn rows_per_unit_sampled(plan: &LogicalPlan) -> Option<u64> {
    match plan {
        LogicalPlan::Projection(p) => rows_per_unit_sampled(&p.input),
        LogicalPlan::SubqueryAlias(a) => rows_per_unit_sampled(&a.input),
        LogicalPlan::Filter(f) => rows_per_unit_sampled(&f.input),
        LogicalPlan::Extension(e) => e
            .node
            .as_any()
            .downcast_ref::<BoundContributions>()
            .map(BoundContributions::rows_per_unit),
        _ => None,
    }
}

/// The bounding node over `input` (module docs); its seeded salt is derived under `label`.
fn sample_per_unit(
    input: Arc<LogicalPlan>,
    unit_column: Expr,
    keys: &[Expr],
    (max_rows, max_groups): (u32, u32),
    seed: Option<u64>,
    label: &str,
) -> Result<Arc<LogicalPlan>> {
    let schema = input.schema().clone();
    let original: Vec<Column> = schema.columns();
    let salt = match seed {
        Some(seed) => seeded_rng(seed, label).next_u64(),
        None => secure_rng()
            .map_err(|e| plan_datafusion_err!("contribution bounding: {e}"))?
            .next_u64(),
    };
    // The node reads columns: a computed unit or key is projected to a column first.
    let mut extra: Vec<Expr> = vec![];
    let mut as_column = |expr: Expr, name: String| match expr {
        Expr::Column(c) => c,
        other => {
            extra.push(other.alias(&name));
            Column::from_name(name)
        }
    };
    let unit = as_column(unit_column, UNIT.to_string());
    let keys: Vec<Column> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| as_column(k.clone(), format!("{KEY}{i}")))
        .collect();
    let mut builder = LogicalPlanBuilder::from(input);
    if !extra.is_empty() {
        let mut exprs: Vec<Expr> = original.iter().cloned().map(Expr::Column).collect();
        exprs.extend(extra.iter().cloned());
        builder = builder.project(exprs)?;
    }
    // Without GROUP BY every row of a unit is in its one group.
    let max_groups = if keys.is_empty() { 1 } else { max_groups };
    let node = BoundContributions {
        input: builder.build()?,
        unit,
        keys,
        // Seeded (non-private, reproducible) mode: rows arrive in no fixed order, so each
        // group keeps the `max_rows` rows of smallest keyed hash of all their values
        // (identical rows are interchangeable), instead of a random sample.
        row_order: match seed {
            Some(_) => original.clone(),
            None => vec![],
        },
        max_rows,
        max_groups,
        salt,
    };
    let mut builder = LogicalPlanBuilder::from(LogicalPlan::Extension(Extension {
        node: Arc::new(node),
    }));
    if !extra.is_empty() {
        builder = builder.project(original.into_iter().map(Expr::Column))?;
    }
    Ok(Arc::new(builder.build()?))
}
