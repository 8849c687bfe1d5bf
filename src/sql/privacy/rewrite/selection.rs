//! Private group selection: GROUP BY keys computed from private data are released only if a
//! noisy count of the group's rows passes a threshold (the Laplace thresholding of Google's
//! and SmartNoise's partition selection).
//!
//! Mechanism (`SET dp.selection_epsilon = ε, dp.selection_delta = δ`): each group gets a noisy
//! count of its rows (after contribution bounding: a unit adds at most `k` rows to at most `g`
//! groups; without a privacy unit `k = g = 1`). Under replace-one a unit can leave `g` groups
//! and join `g` others, so each count is calibrated for `ε' = ε/(2g)` at sensitivity `k`
//! (discrete Laplace, parameter `q = e^{-ε'/k}`) — the same calibration as a grouped
//! noisy count. A group is released iff its noisy count is at least
//! `T = k + ⌈b·ln(1/((1+q)·δ'))⌉`, `b = k/ε'`, `δ' = δ/(2g)`: a group that exists only because
//! of one unit (true count ≤ k) is then released with probability
//! `P(X ≥ T − k) = q^{T−k}/(1+q) ≤ δ'`, and every other group's decision is `ε'`-DP, so the
//! selection is `(ε, δ)`-DP in total and is charged to the budget as such.

use crate::sql::functions::aggregate::{CallPlan, CountRelease, DpAggregate, DpCount};
use crate::sql::options::DpOptions;
use crate::stats::{Contribution, Mechanism, RatioMethod};
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{
    col, lit, Aggregate, AggregateUDF, Expr, LogicalPlan, LogicalPlanBuilder,
};
use std::sync::Arc;

/// The hidden column holding each group's noisy selection count.
pub const SELECTION_COLUMN: &str = "__dp_selection_count";
const SELECTION_STREAM: &str = "__dp_group_selection";

/// The release threshold `T` for a selection count calibrated as in the module docs.
pub fn selection_threshold(scale: f64, rows_per_unit: u32, per_group_delta: f64) -> i64 {
    let q = (-1.0 / scale).exp();
    rows_per_unit as i64 + (scale * (1.0 / ((1.0 + q) * per_group_delta)).ln()).ceil() as i64
}

/// `aggregate` (its DP calls already bound) releasing only the groups that pass selection.
pub fn select_groups(
    aggregate: Aggregate,
    keys: &[Expr],
    session: &DpOptions,
    epsilon: f64,
    delta: f64,
    contribution: Contribution,
) -> Result<LogicalPlan> {
    if aggregate
        .group_expr
        .iter()
        .any(|e| matches!(e, Expr::GroupingSet(_)))
    {
        return plan_err!(
            "private group selection does not support GROUPING SETS, ROLLUP or CUBE; declare the keys public (SET dp.public_groups = 'assert')"
        );
    }
    // Each group's count is calibrated for ε/(2g) at sensitivity k (module docs): refused
    // here, naming the setting, when its noise would be past the largest supported scale.
    let Contribution { rows, groups } = contribution;
    crate::stats::mechanism::check_count_epsilon(
        Mechanism::Laplace,
        epsilon / groups.max(1) as f64 / 2.0,
        rows,
    )
    .map_err(|e| {
        datafusion::common::plan_datafusion_err!(
            "private group selection: dp.selection_epsilon={} is out of range: with dp.selection_epsilon / {} (2 x max_groups_per_unit), {e}",
            crate::stats::mechanism::short_number(epsilon),
            2 * groups.max(1) as u64
        )
    })?;
    let mut options = session.clone();
    options.mechanism = Mechanism::Laplace;
    options.delta = None;
    options.method = RatioMethod::NoisyCounts;
    let seeded = session.seed.is_some();
    let mut plan = CallPlan::resolve(
        &DpCount,
        &options,
        &[],
        Some(&ScalarValue::Float64(Some(epsilon))),
        None,
        SELECTION_STREAM.to_string(),
        2,
        if seeded { keys.len() } else { 0 },
        true,
        contribution,
    )?;
    plan.selection_delta = Some(delta);
    let CountRelease(noise) = plan
        .release
        .noise::<CountRelease>("private group selection")?;
    let threshold = selection_threshold(noise.scale, rows, delta / (2.0 * groups as f64));
    let mut args = vec![lit(1i64), lit(epsilon)];
    if seeded {
        args.extend(keys.iter().cloned());
    }
    let count = Expr::AggregateFunction(AggregateFunction::new_udf(
        Arc::new(AggregateUDF::new_from_impl(
            DpAggregate::new(&DpCount).configured(plan),
        )),
        args,
        false,
        None,
        vec![],
        None,
    ))
    .alias(SELECTION_COLUMN);
    let released: Vec<Expr> = aggregate
        .schema
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let mut aggr_expr = aggregate.aggr_expr;
    aggr_expr.push(count);
    let with_count = Aggregate::try_new(aggregate.input, aggregate.group_expr, aggr_expr)?;
    LogicalPlanBuilder::from(LogicalPlan::Aggregate(with_count))
        .filter(col(SELECTION_COLUMN).gt_eq(lit(threshold)))?
        .project(released)?
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_bounds_the_release_probability_of_a_one_unit_group() {
        // For scale b and δ', the smallest T with q^{T-k}/(1+q) <= δ'.
        for (b, k, d) in [(2.0, 1u32, 1e-5), (0.5, 1, 1e-6), (6.0, 3, 1e-4)] {
            let t = selection_threshold(b, k, d);
            let q = (-1.0f64 / b).exp();
            let p = |t: i64| q.powi((t - k as i64) as i32) / (1.0 + q);
            assert!(p(t) <= d, "{b} {k} {d}: {}", p(t));
            assert!(p(t - 1) > d, "threshold not minimal");
        }
    }
}
