//! The order of a release is a function of the released rows alone.
//!
//! DataFusion emits a grouped aggregation's rows in the order its partitions finish, and a
//! `UNION ALL`'s branches interleave as they finish: a race. In a release the rows from the
//! owner's declared keys and those from real data race, so an analyst who slows one side (a
//! heavy filter on one person's rows) decides the race with that person's presence, and reads
//! it from the order of the rows, or from which row a `LIMIT` keeps (session 15's review,
//! issue 27). In a locked session a query with a DP call therefore ends in a total order: its
//! `ORDER BY` keys (if any) and then every output column, ascending; a `LIMIT` anywhere
//! keeps the first rows of such an order; an `ORDER BY` anywhere has every column as its tie
//! breaker. Windows and order-sensitive aggregates (`first_value`, `array_agg`, ...) over DP
//! releases are refused: their values would follow the arrival order.

use crate::sql::functions::aggregate::DpAggregate;
use crate::sql::privacy::session::costs::is_order_sensitive;
use arrow::row::{RowConverter, SortField};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_err, Column, DFSchema, Result};
use datafusion::logical_expr::{Expr, Limit, LogicalPlan, Sort, SortExpr};
use std::sync::Arc;

/// `plan` (a locked session's query with a DP call) with a total, value-determined order
/// wherever order shows: see the module docs. Idempotent.
pub fn order_releases(plan: LogicalPlan) -> Result<LogicalPlan> {
    refuse_order_sensitive(&plan)?;
    let plan = plan
        .transform_up_with_subqueries(|node| match node {
            LogicalPlan::Sort(sort) => {
                let input_schema = Arc::clone(sort.input.schema());
                let expr = with_tie_breakers(sort.expr.clone(), &input_schema);
                if expr.len() == sort.expr.len() {
                    return Ok(Transformed::no(LogicalPlan::Sort(sort)));
                }
                Ok(Transformed::yes(LogicalPlan::Sort(Sort { expr, ..sort })))
            }
            LogicalPlan::Limit(limit) if !matches!(limit.input.as_ref(), LogicalPlan::Sort(_)) => {
                let input = sorted(Arc::clone(&limit.input));
                Ok(Transformed::yes(LogicalPlan::Limit(Limit {
                    input: Arc::new(input),
                    ..limit
                })))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data;
    Ok(match ends_ordered(&plan) {
        true => plan,
        false => sorted(Arc::new(plan)),
    })
}

/// `input` sorted by all its columns.
fn sorted(input: Arc<LogicalPlan>) -> LogicalPlan {
    let expr = with_tie_breakers(Vec::new(), input.schema());
    LogicalPlan::Sort(Sort {
        expr,
        input,
        fetch: None,
    })
}

/// `expr` followed by every column of `schema` it does not already sort by, ascending
/// (columns of a type Arrow cannot order are left out).
pub(crate) fn with_tie_breakers(mut expr: Vec<SortExpr>, schema: &DFSchema) -> Vec<SortExpr> {
    for (qualifier, field) in schema.iter() {
        let column = Column::new(qualifier.cloned(), field.name());
        let present = expr
            .iter()
            .any(|s| matches!(&s.expr, Expr::Column(c) if *c == column));
        let orderable = RowConverter::supports_fields(&[SortField::new(field.data_type().clone())]);
        if !present && orderable {
            expr.push(SortExpr::new(Expr::Column(column), true, false));
        }
    }
    expr
}

/// Whether `plan`'s rows come out in the order of a `Sort` (seen through the nodes that keep
/// their input's order).
#[recursive::recursive]
fn ends_ordered(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Sort(_) => true,
        LogicalPlan::Projection(p) => ends_ordered(&p.input),
        LogicalPlan::SubqueryAlias(a) => ends_ordered(&a.input),
        LogicalPlan::Limit(l) => ends_ordered(&l.input),
        _ => false,
    }
}

/// Whether `plan` (or a subquery of it) holds a DP aggregate call.
fn releases(plan: &LogicalPlan) -> Result<bool> {
    plan.exists(|node| {
        Ok(node.expressions().iter().any(|e| {
            e.exists(|e| {
                Ok(matches!(e, Expr::AggregateFunction(f)
                    if f.func.inner().downcast_ref::<DpAggregate>().is_some()))
            })
            .unwrap_or(false)
        }))
    })
}

/// Refuses windows, and order-sensitive aggregates, over DP releases (module docs).
fn refuse_order_sensitive(plan: &LogicalPlan) -> Result<()> {
    let mut refused = None;
    plan.apply_with_subqueries(|node| {
        let over_release = || {
            node.inputs()
                .into_iter()
                .any(|i| releases(i).unwrap_or(true))
        };
        match node {
            LogicalPlan::Window(window) if over_release() => {
                let name = window
                    .window_expr
                    .first()
                    .map(|e| e.schema_name().to_string());
                refused = Some(format!(
                    "window function {} over DP releases",
                    name.unwrap_or_default()
                ));
            }
            LogicalPlan::Aggregate(aggregate) if over_release() => {
                for expr in &aggregate.aggr_expr {
                    let sensitive = is_order_sensitive(expr);
                    if sensitive {
                        refused = Some(format!("{} over DP releases", expr.schema_name()));
                    }
                }
            }
            _ => {}
        }
        Ok(match refused {
            Some(_) => TreeNodeRecursion::Stop,
            None => TreeNodeRecursion::Continue,
        })
    })?;
    match refused {
        Some(what) => plan_err!(
            "{what}: this session is locked, and its value would follow the order in which \
             the released rows arrive, which is a race. Order the releases with ORDER BY \
             (ties are broken by every column) and compute it in your client"
        ),
        None => Ok(()),
    }
}
