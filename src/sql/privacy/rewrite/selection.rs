//! Private group selection: GROUP BY keys computed from private data are released only if a
//! noisy count of the group's rows passes a threshold (the Laplace thresholding of Google's
//! and SmartNoise's partition selection).
//!
//! Mechanism (`SET dp.selection_epsilon = ε, dp.selection_delta = δ`, and
//! `dp.selection_mechanism = 'gaussian'` for discrete Gaussian counts calibrated as one vector
//! over the groups at `(ε, δ/2)`, the threshold getting the other `δ/2`): each group gets a noisy
//! count of its rows (after contribution bounding: a unit adds at most `k` rows to at most `g`
//! groups; without a privacy unit `k = g = 1`). Under replace-one a unit can leave `g` groups
//! and join `g` others, so each count is calibrated for `ε' = ε/(2g)` at sensitivity `k`
//! (discrete Laplace, parameter `q = e^{-ε'/k}`) — the same calibration as a grouped
//! noisy count. A group is released iff its noisy count is at least
//! `T = k + ⌈b·ln(1/((1+q)·δ'))⌉`, `b = k/ε'`, `δ' = δ/(2g)`: a group that exists only because
//! of one unit (true count ≤ k) is then released with probability
//! `P(X ≥ T − k) = q^{T−k}/(1+q) ≤ δ'`, and every other group's decision is `ε'`-DP, so the
//! selection is `(ε, δ)`-DP in total. The threshold and its privacy map, which states the `δ`
//! charged from the threshold and the counts' noise, are
//! [`crate::stats::mechanism::GroupSelection`].

use crate::sql::functions::aggregate::{CallPlan, DpAggregate, DpCount};
use crate::sql::options::DpOptions;
use crate::stats::{Contribution, RatioMethod};
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{
    col, lit, Aggregate, AggregateUDF, Expr, LogicalPlan, LogicalPlanBuilder,
};
use std::sync::Arc;

/// The hidden column holding each group's noisy selection count.
pub const SELECTION_COLUMN: &str = "__dp_selection_count";
const SELECTION_STREAM: &str = "__dp_group_selection";

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
    let mechanism = session.selection_mechanism;
    crate::stats::mechanism::check_count_epsilon(
        mechanism,
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
    // Gaussian counts spend half of δ on their noise (calibrated as one vector over the
    // groups) and half on the threshold; Laplace counts are pure ε-DP and the threshold gets
    // all of it.
    let threshold_delta = if mechanism.law().needs_delta() {
        delta / 2.0
    } else {
        delta
    };
    let mut options = session.clone();
    options.mechanism = mechanism;
    options.delta = mechanism.law().needs_delta().then_some(delta / 2.0);
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
    let threshold = plan.select_groups(threshold_delta)?;
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
