//! The DataFusion layer, in three parts:
//! - [`functions`]: the DP aggregates and the scalar functions (Arrow in, [`crate::stats`] out);
//! - [`privacy`]: the planner rule and the rewrites that make a query private (binding a call
//!   to its calibration, bounding each unit's contribution, public and privately selected
//!   group keys);
//! - [`accounting`]: the privacy budget and its durable ledger.
//!
//! [`options`] holds the `dp.*` session options every part reads; [`audit`] runs a DP query on
//! neighbouring datasets and bounds the ε its outputs reveal ([`crate::stats::audit`]);
//! [`errors`] writes errors as one line; [`cooperative`] makes every join of a locked session
//! yield to the runtime, so a stopped query stops.

pub mod accounting;
pub mod audit;
pub mod cooperative;
pub mod errors;
pub mod functions;
pub mod options;
pub mod privacy;

use datafusion::common::Result;
use datafusion::execution::context::SessionContext;
use datafusion::execution::SessionStateBuilder;
use std::sync::Arc;

/// Installs every DP function, the `dp.*` session options, the planner rule and the session's
/// privacy accountant (`dp_budget()`) on `ctx`.
pub fn register(ctx: &SessionContext) -> Result<()> {
    register_placed(ctx, privacy::pass::Placement::Local)
}

/// [`register`], with the planner rule placed as `placement` says (a Ballista client or
/// scheduler: [`crate::distributed`]). A session that already has the rule keeps it.
pub fn register_placed(ctx: &SessionContext, placement: privacy::pass::Placement) -> Result<()> {
    {
        let state = ctx.state_ref();
        let mut state = state.write();
        let options = state.config_mut().options_mut();
        if options.extensions.get::<options::DpOptions>().is_none() {
            options.extensions.insert(options::DpOptions::default());
        }
    }
    functions::register_all(ctx)?;
    // One accountant per session, shared by the planner rule (which charges) and dp_budget()
    // (which reports). Registering twice keeps the first rule: a second would charge twice.
    let registered = ctx
        .state_ref()
        .read()
        .analyzer()
        .rules
        .iter()
        .any(|r| r.name() == privacy::pass::RULE_NAME);
    if !registered {
        let accountant = Arc::new(accounting::budget::Accountant::new());
        ctx.register_udtf(
            "dp_budget",
            Arc::new(accounting::budget::DpBudgetFunction::new(Arc::clone(
                &accountant,
            ))),
        );
        // The session's catalogs (one Arc shared by every clone of the state), where a table
        // of public keys (dp.public_groups) is looked up at planning.
        let catalogs = Arc::clone(ctx.state_ref().read().catalog_list());
        ctx.add_analyzer_rule(Arc::new(
            privacy::pass::DpPlannerRule::new(accountant)
                .with_catalogs(catalogs)
                .with_placement(placement),
        ));
        // Joins multiply protected rows by a bounded number of public rows: after the
        // optimiser's own rules (which move equalities into joins' keys).
        ctx.add_optimizer_rule(Arc::new(privacy::rewrite::public_fanout::BoundPublicFanout));
        // One charge, one release: the physical rule runs last.
        let state = ctx.state_ref();
        let mut state = state.write();
        // The public side of a join with protected rows is built first (public_fanout).
        let rules = privacy::rewrite::public_fanout::with_public_build_side(
            state.physical_optimizers().to_vec(),
        );
        // The privacy layer's logical nodes (contribution bounding) are planned by its own
        // extension planner: `privacy::session::planner::DpQueryPlanner`.
        let planner =
            privacy::session::planner::DpQueryPlanner::new(Arc::clone(state.query_planner()));
        let rebuilt = SessionStateBuilder::new_from_existing(state.clone())
            .with_query_planner(Arc::new(planner))
            .with_physical_optimizer_rules(rules)
            // Over protected rows, no join or limit stops reading an input early by what
            // another held: `privacy::exec::drain`.
            .with_physical_optimizer_rule(Arc::new(privacy::exec::drain::DrainInputs))
            .with_physical_optimizer_rule(Arc::new(privacy::exec::constant_args::DropConstantArgs))
            .with_physical_optimizer_rule(Arc::new(privacy::exec::release::ReleaseOnce))
            .build();
        *state = rebuilt;
    }
    Ok(())
}
