//! The DataFusion layer: aggregate and scalar functions, `dp.*` options, the planner rule and
//! privacy budget accounting.
//! It only adapts Arrow arrays and SQL arguments to [`crate::stats`].

pub mod aggregate;
pub mod bounding;
pub mod budget;
pub mod ledger;
pub mod options;
pub mod planner;
pub mod public_groups;
pub mod scalar;
pub mod selection;

use datafusion::common::Result;
use datafusion::execution::context::SessionContext;
use std::sync::Arc;

/// Installs every DP function, the `dp.*` session options, the planner rule and the session's
/// privacy accountant (`dp_budget()`) on `ctx`.
pub fn register(ctx: &SessionContext) -> Result<()> {
    {
        let state = ctx.state_ref();
        let mut state = state.write();
        let options = state.config_mut().options_mut();
        if options.extensions.get::<options::DpOptions>().is_none() {
            options.extensions.insert(options::DpOptions::default());
        }
    }
    ctx.register_udaf(aggregate::dp_count::udaf().as_ref().clone());
    ctx.register_udaf(aggregate::dp_relative_risk::udaf().as_ref().clone());
    ctx.register_udaf(aggregate::dp_rr_ci::udaf().as_ref().clone());
    ctx.register_udaf(aggregate::dp_odds_ratio::udaf().as_ref().clone());
    ctx.register_udaf(aggregate::dp_or_ci::udaf().as_ref().clone());
    ctx.register_udf(scalar::rr_ci_katz::udf().as_ref().clone());
    for udf in scalar::analytic::udfs() {
        ctx.register_udf(udf);
    }
    // One accountant per session, shared by the planner rule (which charges) and dp_budget()
    // (which reports). Registering twice keeps the first rule: a second would charge twice.
    let registered = ctx
        .state_ref()
        .read()
        .analyzer()
        .rules
        .iter()
        .any(|r| r.name() == planner::RULE_NAME);
    if !registered {
        let accountant = Arc::new(budget::Accountant::new());
        ctx.register_udtf(
            "dp_budget",
            Arc::new(budget::DpBudgetFunction::new(Arc::clone(&accountant))),
        );
        // The session's catalogs (one Arc shared by every clone of the state), where a table
        // of public keys (dp.public_groups) is looked up at planning.
        let catalogs = Arc::clone(ctx.state_ref().read().catalog_list());
        ctx.add_analyzer_rule(Arc::new(
            planner::DpPlannerRule::new(accountant).with_catalogs(catalogs),
        ));
    }
    Ok(())
}
