//! The DataFusion layer: aggregate and scalar functions, `dp.*` options and the planner rule.
//! It only adapts Arrow arrays and SQL arguments to [`crate::stats`].

pub mod aggregate;
pub mod options;
pub mod planner;
pub mod scalar;

use datafusion::common::Result;
use datafusion::execution::context::SessionContext;
use std::sync::Arc;

/// Installs every DP function, the `dp.*` session options and the planner rule on `ctx`.
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
    ctx.add_analyzer_rule(Arc::new(planner::DpPlannerRule));
    Ok(())
}
