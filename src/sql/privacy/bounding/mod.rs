//! Contribution bounding for tables protected by a unit column
//! (`SET dp.protected_tables = 'visits(patient_id)'`), on the unit column the plan analysis
//! carried to the aggregate ([`crate::sql::privacy::analysis`]).
//!
//! Before a DP aggregation, each unit's rows are bounded as ZetaSQL and SmartNoise do: each
//! unit keeps at most `max_groups_per_unit` of its groups, chosen uniformly at random
//! (`dense_rank() OVER (PARTITION BY unit ORDER BY sha256(salt, unit, keys), keys)` with a
//! fresh random salt per query, or one derived from `dp.seed`), then per (unit, group) a
//! uniformly random sample of at most `max_rows_per_unit` rows (`row_number() OVER
//! (PARTITION BY unit, keys ORDER BY random())`). Each choice depends only on the unit's own
//! rows and the salt, so the bounds hold whatever the data. The calibration then uses
//! sensitivity `max_rows_per_unit` and `ε/max_groups_per_unit` per group
//! ([`crate::sql::functions::aggregate::CallPlan::resolve`]). The rewrite is a plain window + filter below
//! the aggregate, visible in `EXPLAIN`.

use crate::stats::rng::{secure_rng, seeded_rng};
use arrow::datatypes::DataType;
use datafusion::common::{plan_datafusion_err, Result};
use datafusion::functions::crypto::expr_fn::sha256;
use datafusion::functions::math::expr_fn::random;
use datafusion::functions::string::expr_fn::concat_ws;
use datafusion::functions_window::expr_fn::{dense_rank, row_number};
use datafusion::logical_expr::{cast, SortExpr};
use datafusion::logical_expr::{col, lit, Expr, ExprFunctionExt, LogicalPlan, LogicalPlanBuilder};
use rand::RngCore;
use std::sync::Arc;

const ROW_RANK: &str = "__dp_unit_row_rank";
const GROUP_RANK: &str = "__dp_unit_group_rank";

/// `input` with every privacy unit's contribution bounded (see the module docs). `seed` (the
/// non-private `dp.seed`) makes the choice of groups reproducible.
pub fn bound_contributions(
    input: Arc<LogicalPlan>,
    unit_column: Expr,
    keys: &[Expr],
    max_rows: u32,
    max_groups: u32,
    seed: Option<u64>,
) -> Result<Arc<LogicalPlan>> {
    let schema = input.schema().clone();
    // Groups first, then rows: the same result (the row sample keeps at least one row of
    // every (unit, group), so it never changes which groups a unit is in), and the order that
    // Ballista 55 runs correctly: with the row sample below the group rank, its distributed
    // plan ranks groups in the wrong order (see docs/distributed.md).
    let mut plan = LogicalPlanBuilder::from(input);
    if !keys.is_empty() {
        let group_rank = dense_rank()
            .partition_by(vec![unit_column.clone()])
            .order_by(random_key_order(&unit_column, keys, seed)?)
            .build()?
            .alias(GROUP_RANK);
        plan = plan
            .window(vec![group_rank])?
            .filter(col(GROUP_RANK).lt_eq(lit(max_groups as u64)))?;
    }
    let mut per_group = vec![unit_column];
    per_group.extend(keys.iter().cloned());
    let row_rank = row_number()
        .partition_by(per_group)
        .order_by(vec![random().sort(true, false)])
        .build()?
        .alias(ROW_RANK);
    let plan = plan
        .window(vec![row_rank])?
        .filter(col(ROW_RANK).lt_eq(lit(max_rows as u64)))?;
    let original: Vec<Expr> = schema.columns().into_iter().map(Expr::Column).collect();
    Ok(Arc::new(plan.project(original)?.build()?))
}

/// A uniformly random order of each unit's group keys: SHA-256 of a per-query random salt, the
/// unit and the keys (so every row of one (unit, group) gets the same value), then the keys
/// themselves, so distinct groups never tie (a tie would let `dense_rank` keep more than
/// `max_groups_per_unit` groups, whatever the hash does with NULLs or string forms).
fn random_key_order(unit: &Expr, keys: &[Expr], seed: Option<u64>) -> Result<Vec<SortExpr>> {
    let salt = match seed {
        Some(seed) => seeded_rng(seed, "__dp_unit_group_order").next_u64(),
        None => secure_rng()
            .map_err(|e| plan_datafusion_err!("contribution bounding: {e}"))?
            .next_u64(),
    };
    let mut parts = vec![lit(salt.to_string()), cast(unit.clone(), DataType::Utf8)];
    parts.extend(keys.iter().map(|k| cast(k.clone(), DataType::Utf8)));
    let mut order = vec![sha256(concat_ws(lit("\u{1f}"), parts)).sort(true, false)];
    order.extend(keys.iter().map(|k| k.clone().sort(true, false)));
    Ok(order)
}
