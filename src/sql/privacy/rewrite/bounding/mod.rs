//! Contribution bounding for tables protected by a unit column
//! (`SET dp.protected_tables = 'visits(patient_id)'`), on the unit column the plan analysis
//! carried to the aggregate ([`crate::sql::privacy::plan::analysis`]).
//!
//! Before a DP aggregation, each unit's rows are bounded as ZetaSQL and SmartNoise do: each
//! unit keeps at most `max_groups_per_unit` of its groups, chosen uniformly at random, and in
//! each of them a uniformly random sample of at most `max_rows_per_unit` rows. The rewrite is
//! one window and a filter below the aggregate, visible in `EXPLAIN`:
//!
//! ```text
//! Filter: __dp_unit_sample
//!   WindowAggr: dp_unit_sample(unit, __dp_group_order, 0, keys.., max_rows, max_groups)
//!               PARTITION BY [__dp_unit_bucket]
//!     Projection: *, dp_keyed_hash(salt, unit) % 1024 AS __dp_unit_bucket,
//!                    dp_keyed_hash(salt, unit, keys..) AS __dp_group_order
//! ```
//!
//! Each unit's groups are ordered by a keyed hash of (unit, keys) with a fresh random salt per
//! query, or one derived from `dp.seed` ([`keyed_hash`]), then by the keys, so distinct groups
//! never tie; [`unit_sample`] groups each partition's rows by unit and keeps the first
//! `max_groups_per_unit` groups of each unit and a random sample of rows in each (under
//! `dp.seed`, the rows of smallest keyed hash of each row's values, so that the sample too is
//! reproducible whatever order the rows arrive in). Every choice depends only on the unit's own
//! rows and the salt, so the bounds hold whatever the data. The calibration then uses
//! sensitivity `max_rows_per_unit` and `ε/max_groups_per_unit` per group
//! ([`crate::sql::functions::aggregate::CallPlan::resolve`]). The window is partitioned by a
//! bucket of the unit (a hash of it modulo [`buckets`]: 16 per target partition, at most
//! 1024), not by the unit: every unit stays in one partition, so partitions run in parallel
//! (and on Ballista executors), while DataFusion's per-partition work is done once per bucket
//! instead of once per unit, which made the former `PARTITION BY unit` windows cost 10-15 s
//! for 1M units in 2M rows, and it has no `ORDER BY`, so DataFusion sorts by the bucket only
//! (BENCHMARKS.md, "Contribution bounding"). The count of buckets is the session's
//! configuration, never the data's.

pub mod keyed_hash;
pub mod unit_sample;

use crate::stats::rng::{secure_rng, seeded_rng};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{plan_datafusion_err, Result, ScalarValue};
use datafusion::logical_expr::{col, lit, Expr, ExprFunctionExt, LogicalPlan, LogicalPlanBuilder};
use keyed_hash::keyed_hash;
use rand::RngCore;
use std::sync::Arc;

const BUCKET: &str = "__dp_unit_bucket";
const GROUP_ORDER: &str = "__dp_group_order";
const KEEP: &str = "__dp_unit_sample";
const ROW_ORDER: &str = "__dp_row_order";
/// Buckets of units per target partition: enough that the hash repartitioning by bucket
/// balances the partitions.
const BUCKETS_PER_PARTITION: u64 = 16;
/// The most buckets: DataFusion's per-bucket work (a few microseconds, with the window's
/// argument arrays built again for each) stays far below a query's.
const MAX_BUCKETS: u64 = 1024;

/// Buckets of units, the bounding window's partitions, under `config`: 16 per target
/// partition, at most 1024. With a fixed 1024, the window was about 40% of dp-server's CPU
/// over a 4,000-row table, most of it DataFusion's per-partition work (BENCHMARKS.md,
/// "Session 20").
pub fn buckets(config: &ConfigOptions) -> u64 {
    let partitions = u64::try_from(config.execution.target_partitions).unwrap_or(u64::MAX);
    partitions
        .saturating_mul(BUCKETS_PER_PARTITION)
        .clamp(BUCKETS_PER_PARTITION, MAX_BUCKETS)
}

/// The rewrite's scalar function named `name` (`dp_keyed_hash`), for a codec decoding a plan
/// on another node: these functions are inserted by the rewrite and never registered in a
/// session, so no analyst SQL can name them.
pub fn internal_udf(name: &str) -> Option<Arc<datafusion::logical_expr::ScalarUDF>> {
    (name == keyed_hash::NAME).then(keyed_hash::udf)
}

/// The rewrite's window function named `name` (`dp_unit_sample`, `dp_unit_sample_ordered`),
/// as [`internal_udf`].
pub fn internal_udwf(name: &str) -> Option<Arc<datafusion::logical_expr::WindowUDF>> {
    match name {
        unit_sample::NAME => Some(unit_sample::udwf()),
        unit_sample::ORDERED_NAME => Some(unit_sample::udwf_ordered()),
        _ => None,
    }
}

/// `input` with every privacy unit's contribution bounded (see the module docs), in
/// `buckets` window partitions ([`buckets`]). `seed` (the non-private `dp.seed`) makes the
/// choice of groups and of rows reproducible.
pub fn bound_contributions(
    input: Arc<LogicalPlan>,
    unit_column: Expr,
    keys: &[Expr],
    (max_rows, max_groups): (u32, u32),
    seed: Option<u64>,
    buckets: u64,
) -> Result<Arc<LogicalPlan>> {
    let bounds = (max_rows, max_groups);
    sample_per_unit(input, unit_column, keys, bounds, seed, buckets, KEEP)
}

/// The window column that marks the rows [`sample_rows_per_unit`] keeps.
pub const OWN_ROWS_KEEP: &str = "__dp_own_rows";

/// `input` keeping a uniformly random sample of at most `max_rows` rows of each unit (the
/// same window as [`bound_contributions`] without groups, its column named
/// [`OWN_ROWS_KEEP`]): a cap on what one person's rows can meet of their own rows in a join
/// of two protected relations ([`crate::sql::privacy::rewrite::public_fanout`]). Each unit's sample
/// depends only on its own rows and the salt, so the cap is a per-unit transformation and the
/// contribution bound above it is unchanged.
pub fn sample_rows_per_unit(
    input: Arc<LogicalPlan>,
    unit_column: Expr,
    max_rows: u32,
    seed: Option<u64>,
    buckets: u64,
) -> Result<Arc<LogicalPlan>> {
    let bounds = (max_rows, 1);
    sample_per_unit(
        input,
        unit_column,
        &[],
        bounds,
        seed,
        buckets,
        OWN_ROWS_KEEP,
    )
}

/// The cap [`sample_rows_per_unit`] placed on `plan`, seen through the nodes the optimiser
/// may leave above it.
#[recursive::recursive]
pub fn rows_per_unit_sampled(plan: &LogicalPlan) -> Option<u64> {
    match plan {
        LogicalPlan::Projection(p) => rows_per_unit_sampled(&p.input),
        LogicalPlan::SubqueryAlias(a) => rows_per_unit_sampled(&a.input),
        LogicalPlan::Filter(f) => rows_per_unit_sampled(&f.input),
        LogicalPlan::Window(window) => window.window_expr.iter().find_map(|expr| {
            let Expr::Alias(alias) = expr else {
                return None;
            };
            if alias.name != OWN_ROWS_KEEP {
                return None;
            }
            let Expr::WindowFunction(f) = alias.expr.as_ref() else {
                return None;
            };
            // (unit, group order, row order, max_rows, max_groups)
            match f.params.args.get(3) {
                Some(Expr::Literal(ScalarValue::UInt64(Some(rows)), _)) => Some(*rows),
                _ => None,
            }
        }),
        _ => None,
    }
}

/// The bounding window (module docs), its keep column named `keep_column`.
fn sample_per_unit(
    input: Arc<LogicalPlan>,
    unit_column: Expr,
    keys: &[Expr],
    (max_rows, max_groups): (u32, u32),
    seed: Option<u64>,
    buckets: u64,
    keep_column: &str,
) -> Result<Arc<LogicalPlan>> {
    let schema = input.schema().clone();
    let original: Vec<Expr> = schema.columns().into_iter().map(Expr::Column).collect();
    let salt = match seed {
        // The contribution bounding's label is unchanged, so seeded outputs are too.
        Some(seed) => match keep_column {
            KEEP => seeded_rng(seed, "__dp_unit_group_order"),
            other => seeded_rng(seed, other),
        }
        .next_u64(),
        None => secure_rng()
            .map_err(|e| plan_datafusion_err!("contribution bounding: {e}"))?
            .next_u64(),
    };
    let mut unit_and_keys = vec![unit_column.clone()];
    unit_and_keys.extend(keys.iter().cloned());
    let mut with_order = original.clone();
    with_order.push(
        (keyed_hash(salt, [unit_column.clone()]) % lit(ScalarValue::UInt64(Some(buckets.max(1)))))
            .alias(BUCKET),
    );
    // Without GROUP BY every row is in the one group: the rows are sampled per unit.
    let group_order = if keys.is_empty() {
        lit(ScalarValue::UInt64(Some(0)))
    } else {
        with_order.push(keyed_hash(salt, unit_and_keys).alias(GROUP_ORDER));
        col(GROUP_ORDER)
    };
    // Seeded (non-private, reproducible) mode: rows arrive in no fixed order, so each group
    // keeps the `max_rows` rows of smallest keyed hash of all their values (identical rows are
    // interchangeable), instead of a random sample.
    let (sample, row_order) = match seed {
        Some(_) => {
            with_order.push(keyed_hash(salt, original.clone()).alias(ROW_ORDER));
            (unit_sample::udwf_ordered(), col(ROW_ORDER))
        }
        None => (unit_sample::udwf(), lit(ScalarValue::UInt64(Some(0)))),
    };
    let bounds = [max_rows, if keys.is_empty() { 1 } else { max_groups }];
    let mut args = vec![unit_column, group_order, row_order];
    args.extend(keys.iter().cloned());
    args.extend(bounds.map(|b| lit(ScalarValue::UInt64(Some(u64::from(b))))));
    // No ORDER BY: the function groups each partition's rows by unit itself.
    let keep = sample
        .call(args)
        .partition_by(vec![col(BUCKET)])
        .build()?
        .alias(keep_column);
    let plan = LogicalPlanBuilder::from(input)
        .project(with_order)?
        .window(vec![keep])?
        .filter(col(keep_column))?
        .project(original)?
        .build()?;
    Ok(Arc::new(plan))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 16 buckets per target partition, at least 16 and at most 1024, whatever the setting.
    #[test]
    fn buckets_follow_the_target_partitions_within_bounds() {
        let with = |partitions: usize| {
            let mut config = ConfigOptions::new();
            config.execution.target_partitions = partitions;
            buckets(&config)
        };
        assert_eq!(with(0), 16);
        assert_eq!(with(1), 16);
        assert_eq!(with(2), 32);
        assert_eq!(with(64), 1024);
        assert_eq!(with(65), 1024);
        assert_eq!(with(usize::MAX), 1024);
    }
}
