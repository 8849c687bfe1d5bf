//! Distributed execution on Apache Ballista 55 (cargo feature `ballista`).
//!
//! A Ballista cluster runs the same SQL as a single node once every process has the DP
//! functions, the `dp.*` options and the codecs that carry a bound call:
//!
//! - **client** ([`remote_context`]): plans the SQL. The planner rule binds every DP call,
//!   calibrates its noise and charges the privacy budget *here*, before the plan leaves the
//!   process; the bound plan is sent to the scheduler with the session's `dp.*` settings.
//! - **scheduler** ([`scheduler_config`], [`session_state`]): decodes the plan with
//!   [`DpLogicalCodec`] and re-optimises it. Its planner rule finds every call already bound,
//!   so it neither re-binds nor charges again (re-planning costs nothing because the query was
//!   charged in full on the client; a plan with an *unbound* call, from a client without the
//!   rule, is bound and charged by the scheduler's session instead — never released
//!   unaccounted).
//! - **executors** ([`executor_config`]): run the stages. The partial aggregates before the
//!   shuffle emit exact cell counts only; the final aggregate after the shuffle draws the noise,
//!   once per group (`evaluate`), keyed by the group in seeded mode, so a seeded query gives the
//!   same result on any number of executors and partitions as on one node.
//!
//! The budget is the client session's (and its `dp.ledger`); the scheduler and executors hold
//! no budget of their own for bound plans.

pub mod codec;
mod door;
mod job_cancel;
pub mod locked;
mod stage_stop;
mod unread_sort;

pub use codec::{DpLogicalCodec, DpPhysicalCodec};
pub use locked::LockedCluster;

use crate::owner::tables::EnvObjectStoreRegistry;
use crate::sql::accounting::budget::DpBudgetFunction;
use crate::sql::options::DpOptions;
use crate::sql::privacy::pass::Placement;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use ballista::prelude::SessionContextExt;
use ballista_core::extension::{
    ballista_aggregate_functions, ballista_scalar_functions, ballista_window_functions,
    SessionConfigExt,
};
use ballista_core::planner::BallistaQueryPlanner;
use ballista_core::registry::BallistaFunctionRegistry;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::BallistaCodec;
use ballista_executor::executor_process::ExecutorProcessConfig;
use ballista_scheduler::config::SchedulerConfig;
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::plan_err;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::TableType;
use datafusion::datasource::{source_as_provider, MemTable};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_proto::protobuf::LogicalPlanNode;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// The session configuration of every node: Ballista's defaults but for adaptive planning, the
/// `dp.*` options and the DP-aware codecs.
///
/// Ballista's adaptive query planner (AQE, on by default in Ballista 55) re-plans the rest of a
/// job from the sizes of the stages it has run: it replaces a join whose side came out empty
/// by an empty plan, picks broadcast or partitioned joins and merges partitions by the bytes it
/// saw. That makes the work of a job depend on the rows, which a locked cluster must not (an
/// empty side skips the other, as `PublicBuildSide` and the drained joins prevent on one node:
/// docs/privacy-analysis.md), and over a DP plan it does not end: with one side of a protected
/// join empty, the bounding above it (`BoundContributionsExec`, which requires its input
/// partitioned by the unit) got a new shuffle stage over the empty plan at each re-plan,
/// thousands of stages a second until the deadline, the scheduler's memory growing with
/// them. So every node plans jobs with Ballista's static planner; a locked cluster's jobs
/// always do (the setting is not one an analyst may send), a trusted client may turn it on.
pub fn session_config() -> SessionConfig {
    SessionConfig::new_with_ballista()
        .with_ballista_adaptive_query_planner(false)
        .with_information_schema(true)
        .with_option_extension(DpOptions::default())
        .with_ballista_logical_extension_codec(Arc::new(DpLogicalCodec::default()))
        .with_ballista_physical_extension_codec(Arc::new(DpPhysicalCodec::default()))
}

/// The runtime of every node: local files, and `s3://` stores from the usual AWS environment
/// variables, as in `dpsql` (each node reads its own environment).
pub fn runtime(_config: &SessionConfig) -> Result<Arc<RuntimeEnv>> {
    RuntimeEnvBuilder::new()
        .with_object_store_registry(Arc::new(EnvObjectStoreRegistry::default()))
        .build_arc()
}

/// A Ballista session state with the DP functions, options and planner rule installed (the
/// scheduler's session builder, and the base of the client's session).
pub fn session_state(config: SessionConfig) -> Result<SessionState> {
    session_state_placed(config, Placement::Local)
}

/// [`session_state`] with the planner rule placed as `placement` says.
pub(crate) fn session_state_placed(
    config: SessionConfig,
    placement: Placement,
) -> Result<SessionState> {
    let runtime = runtime(&config)?;
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_config(config)
        .with_runtime_env(runtime)
        // A client of a locked cluster sends its plan as analysed, not optimised: the
        // scheduler's privacy analysis then sees what one node's sees (the optimizer would
        // prune the unit column out of scans before the scheduler bounds on it); the
        // scheduler optimises after binding.
        .with_optimizer_rules(match placement {
            Placement::Deferred => vec![],
            _ => ballista_core::optimizer::ballista_default_optimizer_rules(),
        })
        .with_scalar_functions(ballista_scalar_functions())
        .with_aggregate_functions(ballista_aggregate_functions())
        .with_window_functions(ballista_window_functions())
        .build();
    let ctx = SessionContext::new_with_state(state);
    crate::sql::register_placed(&ctx, placement)?;
    Ok(ctx.state())
}

/// The codecs every node encodes and decodes plans with.
pub fn codec() -> BallistaCodec {
    BallistaCodec::new(
        Arc::new(DpLogicalCodec::default()),
        Arc::new(DpPhysicalCodec::default()),
    )
}

/// The functions an executor resolves by name (the DP scalar functions, and the unbound DP
/// aggregates; bound calls arrive with their codec bytes).
pub fn function_registry() -> Result<BallistaFunctionRegistry> {
    Ok((&session_state(session_config())?).into())
}

/// `config` (from Ballista's command-line `Config`, or built by hand) with the DP session
/// builder, options and codecs installed: what `dp-scheduler` runs.
pub fn scheduler_config(mut config: SchedulerConfig) -> SchedulerConfig {
    config.override_logical_codec = Some(Arc::new(DpLogicalCodec::default()));
    config.override_physical_codec = Some(Arc::new(DpPhysicalCodec::default()));
    config
        .with_override_config_producer(Arc::new(session_config))
        .with_override_session_builder(Arc::new(session_state))
}

/// `config` with the DP functions, options, codecs and object stores installed: what
/// `dp-executor` runs.
pub fn executor_config(mut config: ExecutorProcessConfig) -> Result<ExecutorProcessConfig> {
    config.override_function_registry = Some(Arc::new(function_registry()?));
    config.override_config_producer = Some(Arc::new(session_config));
    config.override_runtime_producer = Some(Arc::new(runtime));
    config.override_logical_codec = Some(Arc::new(DpLogicalCodec::default()));
    config.override_physical_codec = Some(Arc::new(DpPhysicalCodec::default()));
    // A cancelled task stops working (stage_stop.rs).
    config.override_execution_engine = Some(Arc::new(stage_stop::StoppableEngine::new(
        config.client_ttl,
    )));
    Ok(config)
}

/// A client session on the Ballista scheduler at `url` (`df://host:port`) with the DP
/// functions, options and planner rule. On a trusted cluster the rule binds and charges on
/// this side; on a cluster its data owner locked ([`locked`]) the plan leaves unbound and the
/// scheduler binds and charges it with the owner's settings (the client asks which at
/// connection; the scheduler enforces it whatever the client does).
///
/// A locked cluster needs its analyst's credentials: the user name from the URL
/// (`df://alice@host:port`) or the environment variable `DP_USER`, and the password from
/// `DP_PASSWORD` (or the URL, `df://alice:PASSWORD@host:port`, for programs; a command line
/// shows it to every user of the machine). See [`remote_context_as`].
pub async fn remote_context(url: &str) -> Result<SessionContext> {
    let scheduler = scheduler_endpoint(url)?;
    if !locked::is_locked_cluster(&scheduler).await? {
        return remote_context_placed(scheduler, Placement::Local, None).await;
    }
    let (user, password) = credentials(url)?;
    let token = locked::log_in(&scheduler, &user, &password).await?;
    remote_context_placed(scheduler, Placement::Deferred, Some(token)).await
}

/// [`remote_context`] logging in to a locked cluster as `user` with `password` (ignored by a
/// trusted cluster).
pub async fn remote_context_as(url: &str, user: &str, password: &str) -> Result<SessionContext> {
    let scheduler = scheduler_endpoint(url)?;
    if !locked::is_locked_cluster(&scheduler).await? {
        return remote_context_placed(scheduler, Placement::Local, None).await;
    }
    let token = locked::log_in(&scheduler, user, password).await?;
    remote_context_placed(scheduler, Placement::Deferred, Some(token)).await
}

/// The user name and password for the locked cluster at `url`: the URL's, else `DP_USER` and
/// `DP_PASSWORD`.
fn credentials(url: &str) -> Result<(String, String)> {
    let parsed = Url::parse(url)
        .map_err(|e| DataFusionError::Configuration(format!("scheduler URL '{url}': {e}")))?;
    let user = Some(percent_decoded(parsed.username()))
        .filter(|u| !u.is_empty())
        .or_else(|| std::env::var("DP_USER").ok().filter(|u| !u.is_empty()));
    let password = parsed
        .password()
        .map(percent_decoded)
        .or_else(|| std::env::var("DP_PASSWORD").ok());
    let shown = scheduler_endpoint(url)?.replace("http://", "df://");
    match (user, password) {
        (Some(user), Some(password)) => Ok((user, password)),
        (None, _) => Err(DataFusionError::Configuration(format!(
            "the Ballista scheduler at {shown} is a locked cluster: connect as its analyst, \
             df://NAME@host:port (or DP_USER=NAME), with the password in DP_PASSWORD"
        ))),
        (Some(user), None) => Err(DataFusionError::Configuration(format!(
            "the Ballista scheduler at {shown} is a locked cluster: set DP_PASSWORD to the \
             password of analyst {user}"
        ))),
    }
}

/// `text` with its `%XX` escapes decoded (a URL's user name or password).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// [`remote_context`] for a caller that binds and charges every query itself, `dp-server`: the
/// cluster must be a trusted one. A locked cluster is refused, since its scheduler binds and
/// charges with its own owner's settings and ledger, not the caller's analysts'.
pub async fn trusted_remote_context(url: &str) -> Result<SessionContext> {
    let scheduler = scheduler_endpoint(url)?;
    if locked::is_locked_cluster(&scheduler).await? {
        return Err(DataFusionError::Configuration(format!(
            "the Ballista scheduler at {url} is locked (dp-scheduler --owner-config), so it \
             would bind and charge with its own owner's ledger: dp-server needs a trusted \
             scheduler (dp-scheduler without --owner-config) that only the server can reach"
        )));
    }
    remote_context_placed(scheduler, Placement::Local, None).await
}

/// The scheduler's gRPC endpoint (`http://host:port`, port 50050 by default) of `df://host:port`.
fn scheduler_endpoint(url: &str) -> Result<String> {
    let parsed = Url::parse(url)
        .map_err(|e| DataFusionError::Configuration(format!("scheduler URL '{url}': {e}")))?;
    let host = parsed.host_str().ok_or_else(|| {
        DataFusionError::Configuration(format!("scheduler URL '{url}' has no host"))
    })?;
    Ok(format!("http://{host}:{}", parsed.port().unwrap_or(50050)))
}

/// The client session on `scheduler` (`http://host:port`); `token` is the bearer
/// token of a locked cluster's analyst, sent with every call to the scheduler.
async fn remote_context_placed(
    scheduler: String,
    placement: Placement,
    token: Option<String>,
) -> Result<SessionContext> {
    let mut config = session_config();
    // Pull job tracking: the job's id is known as soon as the scheduler accepts it, so a
    // dropped stream can cancel its job (job_cancel.rs). Under push the client learns it only
    // at the job's first change of status, which for a job of one stage is its end.
    config
        .options_mut()
        .set(ballista_core::config::BALLISTA_CLIENT_PULL, "true")?;
    if let Some(token) = &token {
        config = config.with_ballista_grpc_metadata(HashMap::from([(
            "authorization".to_string(),
            format!("Bearer {token}"),
        )]));
    }
    // Ballista's URL, without the credentials.
    let url = scheduler.replace("http://", "df://");
    let url = url.as_str();
    let budget_source = scheduler.clone();
    let cluster = BallistaQueryPlanner::<LogicalPlanNode>::with_extension(
        scheduler.clone(),
        config.ballista_config(),
        config.ballista_logical_extension_codec(),
    );
    let config = config.with_ballista_query_planner(Arc::new(DpQueryPlanner {
        cluster,
        scheduler,
        token: token.clone(),
    }));
    let ctx =
        SessionContext::remote_with_state(url, session_state_placed(config, placement)?).await?;
    // Ballista's upgrade of the state replaces its function registries: install ours again
    // (the planner rule and the budget survive the upgrade and are not added twice).
    crate::sql::register_placed(&ctx, placement)?;
    if let (Placement::Deferred, Some(token)) = (placement, token) {
        // The budget a locked cluster spends is the owner's analyst's, kept by its scheduler.
        ctx.register_udtf(
            "dp_budget",
            Arc::new(ClusterBudgetFunction {
                scheduler: budget_source,
                token,
            }),
        );
    }
    Ok(ctx)
}

/// `dp_budget()` on a client of a locked cluster: the rows of the analyst the cluster charges,
/// asked of its client port when the query runs ([`locked::cluster_budget`]).
struct ClusterBudgetFunction {
    scheduler: String,
    token: String,
}

impl std::fmt::Debug for ClusterBudgetFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterBudgetFunction")
            .field("scheduler", &self.scheduler)
            .finish_non_exhaustive()
    }
}

impl TableFunctionImpl for ClusterBudgetFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        if !args.exprs().is_empty() {
            return plan_err!("dp_budget takes no arguments, got {}", args.exprs().len());
        }
        Ok(Arc::new(ClusterBudgetTable {
            scheduler: self.scheduler.clone(),
            token: self.token.clone(),
        }))
    }
}

/// The table [`ClusterBudgetFunction`] returns; it runs on the client.
struct ClusterBudgetTable {
    scheduler: String,
    token: String,
}

impl std::fmt::Debug for ClusterBudgetTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterBudgetTable")
            .field("scheduler", &self.scheduler)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl TableProvider for ClusterBudgetTable {
    fn schema(&self) -> SchemaRef {
        DpBudgetFunction::schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batches = locked::cluster_budget(&self.scheduler, &self.token).await?;
        MemTable::try_new(self.schema(), vec![batches])?
            .scan(state, projection, filters, limit)
            .await
    }
}

/// The client's query planner: a plan that reads only the client's own session tables
/// (`dp_budget()`, `information_schema`) runs on the client, where they live (they cannot be
/// serialised, and the budget is the client's); every other plan goes to the cluster, as a
/// job cancelled when its result is dropped before its end ([`job_cancel`]).
#[derive(Debug)]
struct DpQueryPlanner {
    cluster: BallistaQueryPlanner<LogicalPlanNode>,
    /// The scheduler's gRPC endpoint (`http://host:port`) and the analyst's bearer token on a
    /// locked cluster, with which a job is cancelled.
    scheduler: String,
    token: Option<String>,
}

#[async_trait]
impl QueryPlanner for DpQueryPlanner {
    async fn create_physical_plan(
        &self,
        plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if reads_only_session_tables(plan)? {
            DefaultPhysicalPlanner::default()
                .create_physical_plan(plan, session)
                .await
        } else {
            // The scheduler plans the physical plan, and hides protected tables' statistics
            // there when the client's session is locked (`dp.locked` travels with it).
            let plan =
                crate::sql::privacy::exec::protected_scan::unwrap_protected_tables(plan.clone())?;
            let plan = self.cluster.create_physical_plan(&plan, session).await?;
            Ok(Arc::new(job_cancel::CancelJobOnDropExec::new(
                plan,
                self.scheduler.clone(),
                self.token.clone(),
            )))
        }
    }
}

/// Whether every table `plan` reads (subqueries included) is `dp_budget()` or in
/// `information_schema`, and it reads at least one.
fn reads_only_session_tables(plan: &LogicalPlan) -> Result<bool> {
    let (mut local, mut other) = (false, false);
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let budget = scan.table_name.table() == "dp_budget()"
                && source_as_provider(&scan.source).is_ok_and(|p| {
                    p.downcast_ref::<MemTable>().is_some()
                        || p.downcast_ref::<ClusterBudgetTable>().is_some()
                });
            if budget || scan.table_name.schema() == Some("information_schema") {
                local = true;
            } else {
                other = true;
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(local && !other)
}

/// Starts a scheduler and `executors` executors (each with `vcores` task slots) inside this
/// process, on loopback ports the OS picks, and returns the scheduler's `df://` URL. For tests
/// and single-machine demos; the processes of a real cluster are `dp-scheduler` and
/// `dp-executor`.
pub async fn start_local_cluster(executors: usize, vcores: usize) -> Result<String> {
    let to_df = |e: ballista_core::error::BallistaError| DataFusionError::External(Box::new(e));
    let addr = ballista_scheduler::standalone::new_standalone_scheduler_with_builder(
        Arc::new(session_state),
        Arc::new(session_config),
        codec(),
    )
    .await
    .map_err(to_df)?;
    start_executors(
        &format!("http://localhost:{}", addr.port()),
        executors,
        vcores,
    )
    .await?;
    Ok(format!("df://localhost:{}", addr.port()))
}

/// Starts `executors` executors in this process, each with `vcores` task slots, polling the
/// scheduler at `http` (`http://host:port`).
async fn start_executors(http: &str, executors: usize, vcores: usize) -> Result<()> {
    let to_df = |e: ballista_core::error::BallistaError| DataFusionError::External(Box::new(e));
    let registry = function_registry()?;
    for _ in 0..executors {
        // The scheduler serves on a spawned task: retry while it starts (up to 10 s).
        let mut attempts = 0;
        let scheduler = loop {
            match SchedulerGrpcClient::connect(http.to_string()).await {
                Ok(client) => break client,
                Err(e) if attempts >= 100 => {
                    return Err(DataFusionError::Execution(format!(
                        "cannot reach the Ballista scheduler at {http}: {e}"
                    )))
                }
                Err(_) => attempts += 1,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        ballista_executor::new_standalone_executor_from_builder(
            scheduler,
            vcores,
            Arc::new(session_config),
            Arc::new(runtime),
            codec(),
            BallistaFunctionRegistry {
                scalar_functions: registry.scalar_functions.clone(),
                aggregate_functions: registry.aggregate_functions.clone(),
                window_functions: registry.window_functions.clone(),
                higher_order_functions: registry.higher_order_functions.clone(),
            },
        )
        .await
        .map_err(to_df)?;
    }
    Ok(())
}
