//! The query planner of a locked session: what the optimiser made of an analyst's statement,
//! checked and made constant in shape, then planned as the session would plan it.
//!
//! DataFusion optimises a plan and hands it to the session's query planner, which makes the
//! physical plan (`SessionState::create_physical_plan`). [`lock`](crate::lock) wraps the
//! session's query planner (DataFusion's own, or Ballista's on a cluster's client) in
//! [`LockedQueryPlanner`], which
//! 1. measures the optimised plan against the limits on a plan ([`size::check_optimized`]),
//!    which [`size::check_plan`] already bounded before the plan was analysed: a second line;
//! 2. in a plan that reads a protected table, evaluates every branch of every `CASE`, `AND`
//!    and `OR` on every row ([`eager`]), so which rows run a function never depends on data;
//! 3. plans it with the wrapped planner, and measures the physical plan
//!    ([`size::check_physical`]).
//!
//! A locked Ballista cluster's scheduler locks each job's session the same way, so its plans
//! are checked and made eager on the scheduler, before they reach the executors.

use crate::sql::functions::aggregate::ReleaseTicket;
use crate::sql::privacy::exec::bound_contributions::BoundingPlanner;
use crate::sql::privacy::exec::protected_scan::ProtectedTable;
use crate::sql::privacy::exec::release;
use crate::sql::privacy::plan::size;
use crate::sql::privacy::rewrite::bounding::node::BoundContributions;
use crate::sql::privacy::rewrite::eager;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Result;
use datafusion::datasource::source_as_provider;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::DefaultPhysicalPlanner;
use std::sync::Arc;

/// A locked session's query planner around the one it had (module docs).
#[derive(Debug)]
pub struct LockedQueryPlanner {
    inner: Arc<dyn QueryPlanner + Send + Sync>,
}

impl LockedQueryPlanner {
    pub fn new(inner: Arc<dyn QueryPlanner + Send + Sync>) -> Self {
        Self { inner }
    }

    /// The planner it wraps.
    pub fn inner(&self) -> &Arc<dyn QueryPlanner + Send + Sync> {
        &self.inner
    }
}

/// Whether `plan` or one of its subqueries has a node that `is` holds for.
fn holds(plan: &LogicalPlan, is: impl Fn(&LogicalPlan) -> bool) -> Result<bool> {
    let mut found = false;
    plan.apply_with_subqueries(|node| {
        found = is(node);
        Ok(match found {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    })?;
    Ok(found)
}

/// Whether `plan` or one of its subqueries scans a protected table (wrapped as a
/// [`ProtectedTable`] by the planner rule in every DP query of a locked session).
fn reads_protected(plan: &LogicalPlan) -> Result<bool> {
    holds(plan, |node| {
        matches!(node, LogicalPlan::TableScan(scan) if source_as_provider(&scan.source)
            .is_ok_and(|p| p.downcast_ref::<ProtectedTable>().is_some()))
    })
}

#[async_trait]
impl QueryPlanner for LockedQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        size::check_optimized(logical_plan)?;
        let physical = match reads_protected(logical_plan)? {
            true => {
                let eager = eager::evaluate_every_branch(logical_plan.clone())?;
                self.inner.create_physical_plan(&eager, session).await?
            }
            false => {
                self.inner
                    .create_physical_plan(logical_plan, session)
                    .await?
            }
        };
        size::check_physical(&physical)?;
        Ok(physical)
    }
}

/// Every DP session's query planner: a plan that holds one of the privacy layer's logical
/// nodes ([`BoundContributions`]) is planned by DataFusion's physical planner with the
/// privacy layer's [`BoundingPlanner`]; every other plan by the planner the session had.
/// [`crate::register`] installs it; a locked session's [`LockedQueryPlanner`] wraps it; a
/// Ballista client replaces it with Ballista's, which sends the plan to the scheduler, whose
/// session plans it with this one.
#[derive(Debug)]
pub struct DpQueryPlanner {
    inner: Arc<dyn QueryPlanner + Send + Sync>,
}

impl DpQueryPlanner {
    pub fn new(inner: Arc<dyn QueryPlanner + Send + Sync>) -> Self {
        Self { inner }
    }
}

/// Whether `plan` or one of its subqueries holds a [`BoundContributions`] node.
fn has_privacy_nodes(plan: &LogicalPlan) -> Result<bool> {
    holds(
        plan,
        |node| matches!(node, LogicalPlan::Extension(e) if e.node.as_any().is::<BoundContributions>()),
    )
}

#[async_trait]
impl QueryPlanner for DpQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // `EXPLAIN` (not `ANALYZE`) prints the physical plan and never runs it: its release
        // tickets go back (`release::untaken_tickets`).
        if let LogicalPlan::Explain(_) = logical_plan {
            let tickets = release::untaken_tickets(logical_plan)?;
            let planned = self.plan(logical_plan, session).await;
            tickets.iter().for_each(ReleaseTicket::put_back);
            return planned;
        }
        self.plan(logical_plan, session).await
    }
}

impl DpQueryPlanner {
    async fn plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if has_privacy_nodes(logical_plan)? {
            use datafusion::physical_planner::PhysicalPlanner;
            let planner =
                DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(BoundingPlanner)]);
            return planner.create_physical_plan(logical_plan, session).await;
        }
        self.inner.create_physical_plan(logical_plan, session).await
    }
}
