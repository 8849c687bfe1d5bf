//! The planner rule that binds DP aggregate calls to the session.
//!
//! [`DpPlannerRule`] is an `AnalyzerRule`: it runs on every logical plan before optimisation
//! and, for each DP aggregate call, (1) validates the constant arguments and the `dp.*`
//! options, failing the query before anything runs; (2) calibrates the noise once for the
//! query; (3) in seeded mode, passes the GROUP BY expressions to the call so noise is keyed by
//! the group, not by arrival order; (4) refuses DP aggregates used as window functions.
//! Output column names are preserved. For each aggregation with DP calls it then rewrites the
//! input, visibly in `EXPLAIN`: (5) with `dp.privacy_unit`, bounds each unit's contribution
//! ([`crate::sql::privacy::bounding`]); (6) decides how GROUP BY keys may be released: with
//! `dp.public_groups = '<table>'` the table's rows are the public keys — rows of other keys
//! are dropped before bounding, one phantom row per declared key is added after it and every
//! aggregate is filtered to the real rows, so each declared key appears once, with noise on
//! zero when it has no rows ([`crate::sql::privacy::public_groups`]); with `'assert'` the keys are
//! released as they occur; otherwise the query is refused unless private group selection is
//! set ([`crate::sql::privacy::selection`]). Ungrouped aggregations ignore the option. Finally (7) it
//! charges the query to the session's privacy budget ([`crate::sql::accounting::budget`]), refusing it
//! before anything executes when it does not fit; a plan whose DP calls were all bound by an
//! earlier pass is not charged (nor rewritten) again. Declaring keys public costs nothing;
//! private selection is charged with its (ε, δ).

use crate::sql::functions::aggregate::{CallPlan, DpAggregate};
use crate::sql::privacy::bounding::bound_contributions;
use crate::sql::accounting::budget::{self, Accountant};
use crate::sql::options::{DpOptions, PublicGroups};
use crate::sql::privacy::public_groups::DeclaredKeys;
use crate::sql::privacy::selection::select_groups;
use datafusion::catalog::CatalogProviderList;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::expr::{AggregateFunction, WindowFunction};
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{
    Aggregate, AggregateUDF, Expr, LogicalPlan, WindowFunctionDefinition,
};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::optimizer::AnalyzerRule;
use std::sync::Arc;

/// The analyzer rule's name (errors it raises are reported under it).
pub const RULE_NAME: &str = "datafusion_dp";

/// Binds DP aggregate calls to the session options and charges the session's privacy budget
/// (see the module docs).
#[derive(Debug, Default)]
pub struct DpPlannerRule {
    accountant: Arc<Accountant>,
    /// The session's catalogs, where a table of public keys (`dp.public_groups`) is looked up.
    catalogs: Option<Arc<dyn CatalogProviderList>>,
}

impl DpPlannerRule {
    /// A rule that charges `accountant` (the session's; shared with `dp_budget()`).
    pub fn new(accountant: Arc<Accountant>) -> Self {
        Self {
            accountant,
            catalogs: None,
        }
    }

    /// The rule looking tables of public keys up in `catalogs` (the session's
    /// `SessionState::catalog_list()`, shared by every clone of the state, so tables
    /// registered later are found). Without it, `dp.public_groups = '<table>'` is refused.
    pub fn with_catalogs(mut self, catalogs: Arc<dyn CatalogProviderList>) -> Self {
        self.catalogs = Some(catalogs);
        self
    }

    pub fn accountant(&self) -> &Arc<Accountant> {
        &self.accountant
    }
}

impl AnalyzerRule for DpPlannerRule {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let session = config
            .extensions
            .get::<DpOptions>()
            .cloned()
            .unwrap_or_default();
        // Only a plan with calls not yet bound (so not yet charged) is charged: re-analysing a
        // bound plan must not charge twice.
        let charge = budget::has_unbound_calls(&plan)?;
        let bound = plan
            .transform_up_with_subqueries(|node| match node {
                LogicalPlan::Aggregate(aggregate) => {
                    bind_aggregate(aggregate, &session, self.catalogs.as_ref(), config)
                }
                LogicalPlan::Window(window) => {
                    for expr in &window.window_expr {
                        refuse_window_use(expr)?;
                    }
                    Ok(Transformed::no(LogicalPlan::Window(window)))
                }
                other => Ok(Transformed::no(other)),
            })?
            .data;
        if charge {
            self.accountant.charge(&bound, &session)?;
        }
        Ok(bound)
    }

    fn name(&self) -> &str {
        RULE_NAME
    }
}

fn as_dp(func: &AggregateUDF) -> Option<&DpAggregate> {
    func.inner().downcast_ref::<DpAggregate>()
}

fn refuse_window_use(expr: &Expr) -> Result<()> {
    expr.apply(|e| {
        if let Expr::WindowFunction(window) = e {
            let WindowFunction { fun, .. } = window.as_ref();
            if let WindowFunctionDefinition::AggregateUDF(udaf) = fun {
                if let Some(dp) = as_dp(udaf) {
                    return plan_err!(
                        "{} cannot be used as a window function (OVER): each row would be released with its own noise; use GROUP BY",
                        dp.function().name()
                    );
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map(|_| ())
}

/// The value of a constant argument (a literal, possibly cast or negated, or any expression
/// without column references that folds to one); `None` if it depends on the data.
fn constant_value(expr: &Expr) -> Option<ScalarValue> {
    if !expr.column_refs().is_empty() {
        return None;
    }
    let props = ExecutionProps::new();
    let context = SimplifyContext::default();
    let _ = &props;
    match ExprSimplifier::new(context).simplify(expr.clone()) {
        Ok(Expr::Literal(value, _)) => Some(value),
        _ => None,
    }
}

fn bind_aggregate(
    aggregate: Aggregate,
    session: &DpOptions,
    catalogs: Option<&Arc<dyn CatalogProviderList>>,
    config: &ConfigOptions,
) -> Result<Transformed<LogicalPlan>> {
    let needs_binding = aggregate.aggr_expr.iter().any(|e| {
        let inner = match e {
            Expr::Alias(alias) => alias.expr.as_ref(),
            other => other,
        };
        matches!(inner, Expr::AggregateFunction(f) if as_dp(&f.func).is_some_and(|d| d.plan().is_none()))
    });
    if !needs_binding {
        return Ok(Transformed::no(LogicalPlan::Aggregate(aggregate)));
    }
    // The group key expressions, flattened out of GROUPING SETS / ROLLUP / CUBE.
    let mut keys: Vec<Expr> = Vec::new();
    for expr in &aggregate.group_expr {
        match expr {
            Expr::GroupingSet(set) => {
                for e in set.distinct_expr() {
                    if !keys.contains(e) {
                        keys.push(e.clone());
                    }
                }
            }
            other => keys.push(other.clone().unalias()),
        }
    }
    let aggr_expr = aggregate
        .aggr_expr
        .iter()
        .map(|e| bind_call(e, &keys, session))
        .collect::<Result<Vec<_>>>()?;
    // A table of public keys: rows of undeclared keys are dropped before bounding, and
    // every declared key gets a phantom row after it (see crate::sql::privacy::public_groups).
    let declared = match &session.public_groups {
        PublicGroups::Table(name) if !keys.is_empty() => Some(DeclaredKeys::resolve(
            name,
            catalogs,
            config,
            &aggregate.group_expr,
            aggregate.input.schema(),
        )?),
        _ => None,
    };
    let mut input = aggregate.input;
    if let Some(declared) = &declared {
        input = declared.restrict(input)?;
    }
    if let Some(unit) = &session.privacy_unit {
        input = bound_contributions(
            input,
            unit,
            &keys,
            session.max_rows_per_unit,
            session.max_groups_per_unit,
            session.seed,
        )?;
    }
    let rebuilt = match &declared {
        Some(declared) => declared.aggregate(input, aggregate.group_expr, aggr_expr)?,
        None => Aggregate::try_new(input, aggregate.group_expr, aggr_expr)?,
    };
    if !keys.is_empty() && session.public_groups == PublicGroups::None {
        let (Some(epsilon), Some(delta)) = (session.selection_epsilon, session.selection_delta)
        else {
            let name = first_dp_name(&rebuilt.aggr_expr).unwrap_or("a DP aggregate");
            return plan_err!(
                "{name}: the GROUP BY keys come from private data and would be released \
                 exactly. Declare them public with SET dp.public_groups = '<table>', naming a \
                 table of the public keys (every declared key is released, one without rows \
                 as noise on zero; rows of other keys are dropped), or with SET \
                 dp.public_groups = 'assert', asserting every key that occurs is known in \
                 advance (declaring keys is the only option for pure epsilon-DP); or select \
                 groups privately with SET dp.selection_epsilon = ... and dp.selection_delta = ..."
            );
        };
        return Ok(Transformed::yes(select_groups(
            rebuilt, &keys, session, epsilon, delta,
        )?));
    }
    Ok(Transformed::yes(LogicalPlan::Aggregate(rebuilt)))
}

/// The name of the first DP aggregate among `exprs`, for error messages.
fn first_dp_name(exprs: &[Expr]) -> Option<&'static str> {
    exprs.iter().find_map(|e| {
        let inner = match e {
            Expr::Alias(alias) => alias.expr.as_ref(),
            other => other,
        };
        match inner {
            Expr::AggregateFunction(f) => as_dp(&f.func).map(|d| d.function().name()),
            _ => None,
        }
    })
}

fn bind_call(expr: &Expr, keys: &[Expr], session: &DpOptions) -> Result<Expr> {
    let (inner, alias) = match expr {
        Expr::Alias(alias) => (alias.expr.as_ref(), Some(alias)),
        other => (other, None),
    };
    let Expr::AggregateFunction(call) = inner else {
        return Ok(expr.clone());
    };
    let Some(dp) = as_dp(&call.func).filter(|d| d.plan().is_none()) else {
        return Ok(expr.clone());
    };
    let function = dp.function();
    let name = function.name();
    let params = &call.params;
    if params.distinct {
        return plan_err!("{name}: DISTINCT is not supported (each row counts once)");
    }
    let eps_index = function.data_args().len();
    let user_args = params.args.len();
    let constant = |i: usize, arg: &str| -> Result<Option<ScalarValue>> {
        match params.args.get(i) {
            None => Ok(None),
            Some(e) => match constant_value(e) {
                Some(v) => Ok(Some(v)),
                None => plan_err!("{name}: argument '{arg}' must be a constant, got {e}"),
            },
        }
    };
    let epsilon = constant(eps_index, "epsilon")?;
    let options = constant(eps_index + 1, "options")?;
    let stream = inner.schema_name().to_string();
    let seeded = session.seed.is_some();
    let key_args = if seeded { keys.len() } else { 0 };
    let plan = CallPlan::resolve(
        function,
        session,
        epsilon.as_ref(),
        options.as_ref(),
        stream.clone(),
        user_args,
        key_args,
        !keys.is_empty(),
    )?;
    let mut args = params.args.clone();
    if seeded {
        args.extend(keys.iter().cloned());
    }
    let bound = Expr::AggregateFunction(AggregateFunction::new_udf(
        Arc::new(AggregateUDF::new_from_impl(dp.configured(plan))),
        args,
        params.distinct,
        params.filter.clone(),
        params.order_by.clone(),
        params.null_treatment,
    ));
    Ok(match alias {
        Some(alias) => bound.alias_qualified(alias.relation.clone(), alias.name.clone()),
        None => bound.alias(stream),
    })
}
