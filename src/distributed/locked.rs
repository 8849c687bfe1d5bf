//! A Ballista cluster locked by its data owner: the scheduler is the privacy authority.
//!
//! On a trusted cluster ([`super::scheduler_config`]) the client binds and charges every DP
//! call and the scheduler runs what it receives: whoever reaches the scheduler is trusted like
//! the owner of an unlocked session. A locked cluster (`dp-scheduler --owner-config owner.toml`,
//! [`LockedCluster`]) trusts no client:
//! - **The owner's sessions.** Each job's session holds the owner's tables, their protection,
//!   the owner's options and one analyst's budget and ledger, and is locked. A client's plan has
//!   every scan replaced by the owner's table of that name (a name the owner did not register is
//!   refused: [`crate::sql::privacy::pass::owner_tables_only`]). Of the client's `dp.*` settings
//!   only the accuracy options are kept ([`DpOptions::without_owner_settings`]), and of its other
//!   settings only those a locked session lets an analyst set, in their ranges
//!   ([`ANALYST_SETTINGS`]); `EXPLAIN` shows the logical plan only. The client port refuses the
//!   plans a locked session refuses as statements (`EXPLAIN ANALYZE`/`VERBOSE`, `COPY`, DML,
//!   DDL): `queries_only`.
//! - **The scheduler binds and charges.** Its planner rule binds, checks and charges every DP
//!   call ([`Placement::Authority`]); a call a client bound is refused by its logical codec
//!   ([`DpLogicalCodec::refusing_bound_calls`]), and so is a physical or Substrait plan, which
//!   would skip the planner rule. Each job gets a new session, so the budget is the analyst's
//!   ledger, which every job charges.
//! - **Two ports.** The client port ([`serve`]) answers queries and job status and serves only
//!   the final (released) partitions of finished jobs through its Flight proxy. Executor
//!   registration, task status, job metrics (exact row counts of every operator) and data
//!   clean-up are refused there and served on the internal port (Ballista's own server, with
//!   its unrestricted proxy), which the owner keeps off the analysts' network together with the
//!   executors' own ports (an executor serves any shuffle partition, exact partial aggregates
//!   included, to whoever asks it).
//! - **The analyst's budget.** A client's `dp_budget()` asks the client port
//!   ([`cluster_budget`]) and shows the rows of the analyst whose budget and ledger the
//!   cluster spends, not the client's own (empty) session.
//! - **Credentials.** Only that analyst may call the client port: a Flight handshake with the
//!   owner's credentials for the analyst gives a bearer token, which every call carries
//!   (`door.rs`); a call without valid credentials is refused before anything runs or is
//!   charged. Job status, results and cancellation are answered for the jobs submitted through
//!   the port only; any other job id is answered as one that does not exist.

use super::door::{self, Caller, Door, Job};
use super::{session_config, session_state_placed, start_executors};
use super::{DpLogicalCodec, DpPhysicalCodec};
use crate::owner::connections::ConnectionInfo;
use crate::owner::{Owner, OwnerConfig, SessionBudget};
use crate::sql::accounting::budget::DpBudgetFunction;
use crate::sql::options::DpOptions;
use crate::sql::privacy::pass::Placement;
use crate::sql::privacy::session::limits::deadline_error;
use crate::sql::privacy::session::lock::{in_analyst_range, ANALYST_SETTINGS};
use crate::sql::privacy::session::release_time::ReleaseSchedule;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use ballista_core::flight_proxy_service::BallistaFlightProxyService;
use ballista_core::serde::protobuf::execute_query_params::Query;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::scheduler_grpc_server::{SchedulerGrpc, SchedulerGrpcServer};
use ballista_core::serde::protobuf::{
    execute_query_result, job_status, CancelJobParams, CancelJobResult, CleanJobDataParams,
    CleanJobDataResult, CreateUpdateSessionParams, CreateUpdateSessionResult, ExecuteQueryParams,
    ExecuteQueryResult, ExecutorStoppedParams, ExecutorStoppedResult, FailedJob,
    GetJobMetricsParams, GetJobMetricsResult, GetJobStatusParams, GetJobStatusResult,
    HeartBeatParams, HeartBeatResult, JobStatus, PollWorkParams, PollWorkResult,
    RegisterExecutorParams, RegisterExecutorResult, RemoveSessionParams, RemoveSessionResult,
    RunningJob, UpdateTaskStatusParams, UpdateTaskStatusResult,
};
use ballista_core::serde::scheduler::Action as BallistaAction;
use ballista_core::JobId;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::{create_scheduler, start_grpc_service_with_listener};
use ballista_scheduler::scheduler_server::SchedulerServer;
use base64::prelude::{Engine, BASE64_STANDARD};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionState;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use futures::stream::BoxStream;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status, Streaming};

/// The job whose status a client asks for to learn whether a cluster is locked
/// ([`is_locked_cluster`]); a locked cluster's client port answers with [`LOCKED_MARKER`].
const PROBE_JOB: &str = "datafusion-dp/locked-cluster-probe";
const LOCKED_MARKER: &str = "datafusion-dp locked cluster";
/// The job id a client asks for the analyst's `dp_budget()` rows ([`cluster_budget`]): the
/// client port answers with them in Arrow IPC, base64-encoded, as the job's name.
const BUDGET_JOB: &str = "datafusion-dp/budget";
/// How often the client port asks the scheduler for the status of a job whose client tracks
/// it by push (as often as Ballista's pull client asks).
const STATUS_POLL: std::time::Duration = std::time::Duration::from_millis(50);

type Scheduler = SchedulerServer<LogicalPlanNode, PhysicalPlanNode>;

/// The data owner's side of a locked cluster: the owner's tables, opened once, the budget
/// and ledger of the analyst every job is charged to, and the client port's door (that
/// analyst's logins and the jobs submitted).
#[derive(Debug)]
pub struct LockedCluster {
    owner: Arc<Owner>,
    budget: SessionBudget,
    door: Door,
    /// The analyst's release schedule (`[limits] release_quantum_ms`), the one the jobs'
    /// sessions carry: the client port shows a job's end on it.
    schedule: Option<Arc<ReleaseSchedule>>,
}

impl LockedCluster {
    /// Opens the tables of `config` and chooses the analyst whose budget and ledger the
    /// cluster spends (`analyst`, or the only one), who must have a password or password
    /// hash: the client port logs that analyst in.
    pub async fn open(config: OwnerConfig, analyst: Option<&str>) -> Result<Arc<Self>> {
        let analyst = config
            .spending_analyst(analyst)
            .map_err(DataFusionError::Configuration)?
            .clone();
        let budget = analyst.budget();
        // Executors read the files themselves: a copy in the scheduler's memory would be
        // shipped in every plan.
        if let Some(table) = config.tables.iter().find(|t| t.in_memory) {
            return Err(DataFusionError::Configuration(format!(
                "table '{}': in_memory tables are for dp-server and dpsql; on a cluster the \
                 executors read the files (remove in_memory = true)",
                table.name
            )));
        }
        let owner = Arc::new(Owner::open_files(config).await?);
        let door =
            Door::new(Arc::clone(&owner), &analyst).map_err(DataFusionError::Configuration)?;
        let schedule = owner.release_schedule(&budget.ledger);
        Ok(Arc::new(Self {
            owner,
            budget,
            door,
            schedule,
        }))
    }

    /// The session of one job, from the configuration Ballista built of the client's
    /// settings: the client's accuracy options and analyst settings, the owner's everything
    /// else, locked.
    pub fn job_session(&self, config: SessionConfig) -> Result<SessionState> {
        let client = config
            .options()
            .extensions
            .get::<DpOptions>()
            .cloned()
            .unwrap_or_default();
        // Of the client's other settings, only those a locked session lets an analyst set
        // (in their ranges); the rest are the owner's defaults, as in `analyst_sql`.
        let sent = config.options().entries();
        let mut config = session_config();
        for (key, low, high) in ANALYST_SETTINGS {
            let Some(value) = sent
                .iter()
                .find(|e| e.key == *key)
                .and_then(|e| e.value.clone())
            else {
                continue;
            };
            if !in_analyst_range(&value, *low, *high) {
                return Err(DataFusionError::Plan(format!(
                    "{key} = {value}: this cluster is locked; the value must be an integer \
                     from {low} to {high}"
                )));
            }
            config
                .options_mut()
                .set(key, value.trim().trim_matches('\''))?;
        }
        if let Some(name) = sent.iter().find(|e| e.key == "ballista.job.name") {
            if let Some(value) = &name.value {
                config.options_mut().set("ballista.job.name", value)?;
            }
        }
        let explain = &mut config.options_mut().explain;
        explain.logical_plan_only = true;
        explain.physical_plan_only = false;
        explain.show_statistics = false;
        config
            .options_mut()
            .extensions
            .insert(client.without_owner_settings());
        // The catalog is the owner's: the default catalog and schema, where the owner's
        // tables are registered and a client's table names are resolved.
        config.options_mut().catalog = datafusion::common::config::CatalogOptions {
            information_schema: true,
            ..Default::default()
        };
        let ctx =
            SessionContext::new_with_state(session_state_placed(config, Placement::Authority)?);
        self.owner.lock_into(&ctx, &self.budget)?;
        Ok(ctx.state())
    }

    /// The owner's `[limits] query_timeout_seconds`, at which a job still running is stopped.
    fn deadline(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.owner.config().limits.query_timeout_seconds)
    }

    /// When the end of `job`, stamped `ended_at` (milliseconds since the epoch) by the
    /// scheduler, is shown to the analyst: on the analyst's release schedule, counted from
    /// the job's submission, so that the moment does not tell how long the job ran
    /// ([`crate::sql::privacy::session::release_time`]); when it ended without a schedule.
    /// Fixed the first time the port sees the job ended (that is when a late job raises
    /// the analyst's level), whoever asks.
    fn shown_end(&self, job: &Job, ended_at: u64) -> Instant {
        *job.shown_end.get_or_init(|| {
            let ran = Duration::from_millis(ended_at.saturating_sub(job.submitted_ms));
            let ready = job
                .submitted
                .checked_add(ran)
                .map_or_else(Instant::now, |at| at.min(Instant::now()));
            match &self.schedule {
                Some(schedule) => schedule.release_at(job.submitted, ready),
                None => ready,
            }
        })
    }

    /// `dp_budget()` of the analyst this cluster charges, read from that analyst's ledger.
    async fn budget_rows(&self) -> Result<Vec<RecordBatch>> {
        let ctx = self.owner.locked_session(&self.budget)?;
        ctx.sql("SELECT * FROM dp_budget()").await?.collect().await
    }

    /// `config` with this cluster's session builder, the codecs (bound calls from clients
    /// refused) and the Flight proxy the client port guards: what `dp-scheduler
    /// --owner-config` runs.
    pub fn scheduler_config(self: &Arc<Self>, mut config: SchedulerConfig) -> SchedulerConfig {
        config.override_logical_codec = Some(Arc::new(DpLogicalCodec::refusing_bound_calls()));
        config.override_physical_codec = Some(Arc::new(DpPhysicalCodec::default()));
        // Clients fetch results through the client port (never from an executor).
        config.enable_embedded_flight_proxy = true;
        config.advertise_flight_endpoint = None;
        let cluster = Arc::clone(self);
        config
            .with_override_config_producer(Arc::new(session_config))
            .with_override_session_builder(Arc::new(move |c| cluster.job_session(c)))
    }
}

/// The status the scheduler at `url` (`http://host:port`) gives for `job_id`, asked with the
/// bearer `token` if any: the locked cluster's own requests ride on job status, which every
/// Ballista scheduler answers. The outer error is a scheduler that cannot be reached.
async fn ask(
    url: &str,
    job_id: &str,
    token: Option<&str>,
) -> Result<std::result::Result<Option<JobStatus>, Status>> {
    let mut client = SchedulerGrpcClient::connect(url.to_string())
        .await
        .map_err(|e| {
            DataFusionError::Execution(format!("cannot reach the Ballista scheduler at {url}: {e}"))
        })?;
    let mut request = Request::new(GetJobStatusParams {
        job_id: job_id.to_string(),
    });
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", bearer(token)?);
    }
    let answer = client.get_job_status(request).await;
    Ok(answer.map(|r| r.into_inner().status))
}

/// `authorization: Bearer token`.
pub(crate) fn bearer(token: &str) -> Result<MetadataValue<tonic::metadata::Ascii>> {
    MetadataValue::try_from(format!("Bearer {token}"))
        .map_err(|_| DataFusionError::Execution("a malformed bearer token".to_string()))
}

/// Whether the scheduler at `url` (`http://host:port`) is a locked cluster's client port (it
/// answers this without credentials).
pub(crate) async fn is_locked_cluster(url: &str) -> Result<bool> {
    let answer = ask(url, PROBE_JOB, None).await?;
    Ok(answer.is_ok_and(|s| s.is_some_and(|s| s.job_name == LOCKED_MARKER)))
}

/// Logs `user` in to the locked cluster whose client port is `url` (`http://host:port`) with
/// `password` (a Flight handshake with `authorization: Basic`, as with `dp-server`): the bearer
/// token every further call carries.
pub(crate) async fn log_in(url: &str, user: &str, password: &str) -> Result<String> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| DataFusionError::Configuration(format!("scheduler URL {url}: {e}")))?
        .connect()
        .await
        .map_err(|e| {
            DataFusionError::Execution(format!("cannot reach the Ballista scheduler at {url}: {e}"))
        })?;
    let mut request = Request::new(futures::stream::iter([HandshakeRequest::default()]));
    let basic = MetadataValue::try_from(format!(
        "Basic {}",
        BASE64_STANDARD.encode(format!("{user}:{password}"))
    ))
    .map_err(|_| DataFusionError::Configuration("a malformed user name".to_string()))?;
    request.metadata_mut().insert("authorization", basic);
    let response = FlightServiceClient::new(channel)
        .handshake(request)
        .await
        .map_err(|e| {
            DataFusionError::Execution(format!(
                "cannot log in to the locked cluster at {url} as {}: {}",
                crate::owner::auth::log_name(user),
                e.message()
            ))
        })?;
    door::header(response.metadata())
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::to_string)
        .ok_or_else(|| {
            DataFusionError::Execution(format!(
                "the locked cluster at {url} answered the login without a bearer token"
            ))
        })
}

/// The `dp_budget()` rows of the locked cluster whose client port is `url` (`http://host:port`):
/// the budget and charges of the analyst it spends, asked with the analyst's bearer `token`.
pub(crate) async fn cluster_budget(url: &str, token: &str) -> Result<Vec<RecordBatch>> {
    let answer = ask(url, BUDGET_JOB, Some(token))
        .await?
        .map_err(|e| DataFusionError::Execution(format!("dp_budget: {}", e.message())))?;
    let bytes = BASE64_STANDARD
        .decode(answer.map(|s| s.job_name).unwrap_or_default())
        .map_err(|_| DataFusionError::Execution("dp_budget: malformed answer".to_string()))?;
    StreamReader::try_new(bytes.as_slice(), None)?
        .map(|batch| batch.map_err(DataFusionError::from))
        .collect()
}

/// Builds the scheduler of `config` (from [`LockedCluster::scheduler_config`]) and serves it:
/// clients on `clients`, executors on `internal` (see the module docs); `cluster` answers the
/// clients' `dp_budget()`.
pub async fn serve(
    cluster: &Arc<LockedCluster>,
    config: SchedulerConfig,
    clients: TcpListener,
    internal: TcpListener,
) -> Result<()> {
    let locked = Arc::clone(cluster);
    let locked_server = cluster.door.owner().config().server.clone();
    let to_df = |e: ballista_core::error::BallistaError| DataFusionError::External(Box::new(e));
    let cluster = BallistaCluster::new_from_config(&config)
        .await
        .map_err(to_df)?;
    let scheduler: Scheduler = create_scheduler(cluster, Arc::new(config))
        .await
        .map_err(to_df)?;
    let config = &scheduler.state.config;
    let (decoding, encoding) = (
        config.grpc_server_max_decoding_message_size as usize,
        config.grpc_server_max_encoding_message_size as usize,
    );
    let proxy = ReleasedPartitions {
        scheduler: scheduler.clone(),
        proxy: BallistaFlightProxyService::new(decoding, encoding, config.use_tls, None),
        cluster: Arc::clone(&locked),
    };
    // Ballista's own server for the internal port (executors register with the address
    // their connection comes from, which only its server records).
    let internal_port = async {
        start_grpc_service_with_listener(internal, scheduler.clone())
            .await
            .map_err(to_df)
    };
    let client_port = tonic::transport::Server::builder()
        .add_service(
            SchedulerGrpcServer::new(ClientPort {
                scheduler: scheduler.clone(),
                cluster: locked,
            })
            .max_decoding_message_size(decoding)
            .max_encoding_message_size(encoding),
        )
        .add_service(
            FlightServiceServer::new(proxy)
                .max_decoding_message_size(decoding)
                .max_encoding_message_size(encoding),
        )
        // dp-server's connection limits (`[server]` max_connections and the rest): strangers'
        // connections capped, replaced oldest first and closed after the login window, so
        // idle connections cannot lock the analyst out of the port (issue 42).
        .serve_with_incoming(crate::owner::connections::incoming(
            clients,
            crate::owner::connections::ConnectionGate::new(
                crate::owner::connections::ConnectionLimits::of(&locked_server),
            ),
            |tcp| std::future::ready(Some(tcp)),
        ));
    let client_port = async {
        client_port
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))
    };
    tokio::try_join!(internal_port, client_port).map(|_| ())
}

/// Starts a locked cluster inside this process (its scheduler on two loopback ports the OS
/// picks, and `executors` executors with `vcores` task slots each on the internal one) and
/// returns the client port's `df://` URL. For tests and demos; a real cluster runs
/// `dp-scheduler --owner-config` and `dp-executor` processes.
pub async fn start_local_cluster(
    cluster: &Arc<LockedCluster>,
    executors: usize,
    vcores: usize,
) -> Result<String> {
    Ok(
        start_local_cluster_with_internal(cluster, executors, vcores)
            .await?
            .0,
    )
}

/// [`start_local_cluster`], also returning the internal port's URL (`http://host:port`), which
/// tests use to submit a job the client port did not see.
pub async fn start_local_cluster_with_internal(
    cluster: &Arc<LockedCluster>,
    executors: usize,
    vcores: usize,
) -> Result<(String, String)> {
    // Ballista's standalone executors (`start_executors`) poll for work: pull scheduling.
    let config = cluster.scheduler_config(
        SchedulerConfig::default()
            .with_scheduler_policy(ballista_core::config::TaskSchedulingPolicy::PullStaged),
    );
    let clients = TcpListener::bind("localhost:0").await?;
    let internal = TcpListener::bind("localhost:0").await?;
    let (client_port, internal_port) =
        (clients.local_addr()?.port(), internal.local_addr()?.port());
    let locked = Arc::clone(cluster);
    tokio::spawn(async move {
        if let Err(e) = serve(&locked, config, clients, internal).await {
            eprintln!("locked scheduler stopped: {e}");
        }
    });
    let internal = format!("http://localhost:{internal_port}");
    start_executors(&internal, executors, vcores).await?;
    Ok((format!("df://localhost:{client_port}"), internal))
}

fn executor_only() -> Status {
    Status::permission_denied(
        "this is a locked cluster's client port: executors connect to the scheduler's internal port",
    )
}

/// The scheduler's gRPC service as clients see it (see the module docs).
#[derive(Clone)]
struct ClientPort {
    scheduler: Scheduler,
    cluster: Arc<LockedCluster>,
}

/// The address a request came from (the login back-off counts failures per address).
fn peer<T>(request: &Request<T>) -> Option<IpAddr> {
    match request.extensions().get::<ConnectionInfo>() {
        Some(connection) => connection.peer.map(|address| address.ip()),
        None => request.remote_addr().map(|address| address.ip()),
    }
}

/// Marks the connection of `request` an analyst's (it leaves the strangers' share and login
/// window: [`crate::owner::connections`]), once its credentials or its result capability
/// passed.
fn authenticated<T>(request: &Request<T>) {
    if let Some(connection) = request.extensions().get::<ConnectionInfo>() {
        connection.authenticated();
    }
}

impl ClientPort {
    /// The caller of `request`: refused without the analyst's credentials.
    async fn caller<T>(&self, request: &Request<T>) -> std::result::Result<Caller, Status> {
        let caller = self
            .cluster
            .door
            .caller(request.metadata(), peer(request))
            .await?;
        authenticated(request);
        Ok(caller)
    }

    /// Submits the job of `request` as the analyst, after the port's checks: its deadline is
    /// set ([`stop_at_deadline`]), and a job tracked by pull is watched for its client going
    /// away ([`cancel_when_unwatched`]; a push client's stream does that itself).
    async fn submit(
        &self,
        request: Request<ExecuteQueryParams>,
        tracking: Tracking,
    ) -> std::result::Result<Response<ExecuteQueryResult>, Status> {
        let caller = self.caller(&request).await?;
        // The release schedule counts from here: the scheduler's planning of the job is part
        // of what it hides (a login's checks are not).
        let received = Instant::now();
        logical_plans_only(request.get_ref())?;
        queries_only(request.get_ref())?;
        let response = SchedulerGrpc::execute_query(&self.scheduler, request).await?;
        if let Some(execute_query_result::Result::Success(success)) = &response.get_ref().result {
            if self
                .cluster
                .door
                .submitted(&success.job_id, &caller, received)?
            {
                stop_at_deadline(&self.scheduler, &self.cluster, &success.job_id);
                if tracking == Tracking::Pull {
                    cancel_when_unwatched(&self.scheduler, &self.cluster, &success.job_id);
                }
            }
        }
        Ok(response)
    }

    /// The job `job_id` if it was submitted through this port, answered as not found
    /// otherwise (whether or not the scheduler has it).
    fn own_job(&self, job_id: &str) -> std::result::Result<Job, Status> {
        self.cluster
            .door
            .job(job_id)
            .ok_or_else(|| door::not_found(job_id))
    }
}

/// A job's status as the client port shows it; `Some(at)` while its end is held until `at`.
///
/// - **When it ends.** A job that ended is shown as still running until its end is released
///   on the analyst's schedule ([`LockedCluster::shown_end`]), and its end is stamped with that
///   moment, not the scheduler's: neither the status nor a fetch of its partitions
///   ([`ReleasedPartitions::do_get`]) tells how long it ran. A running job's status names no
///   scheduler, so a held one looks the same. A job the analyst cancelled before its end was
///   shown is shown cancelled ("Cancelled", Ballista's text), whether it had finished, failed
///   or was still running.
/// - **Where its results are.** The executor of each released partition is replaced by the
///   job's result capability, which Ballista's client sends back as the host in its Flight
///   ticket ([`ReleasedPartitions::do_get`] checks it and fetches from the real executor).
///   Clients learn no executor address either.
/// - **Why it failed.** A job the deadline stopped ([`stop_at_deadline`]) fails with the
///   deadline's error, naming the limit.
fn as_the_client_sees_it(
    result: &mut GetJobStatusResult,
    job: &Job,
    cluster: &LockedCluster,
) -> Option<Instant> {
    let status = result.status.as_mut()?.status.as_mut()?;
    let (queued_at, started_at, ended_at) = match status {
        job_status::Status::Successful(s) => (s.queued_at, s.started_at, s.ended_at),
        job_status::Status::Failed(f) => (f.queued_at, f.started_at, f.ended_at),
        job_status::Status::Running(running) => {
            running.scheduler.clear();
            return None;
        }
        job_status::Status::Queued(_) => return None,
    };
    let shown = cluster.shown_end(job, ended_at);
    if Instant::now() < shown {
        *status = job_status::Status::Running(RunningJob {
            queued_at,
            started_at,
            scheduler: String::new(),
        });
        return Some(shown);
    }
    // Whatever the job's end was (success, or an error of its own): a job cancelled before it
    // ended would show this.
    if job.cancelled_before(shown) {
        *status = job_status::Status::Failed(FailedJob {
            error: CANCELLED.to_string(),
            queued_at,
            started_at,
            ended_at,
        });
    }
    let stamp = |at: &mut u64| {
        if cluster.schedule.is_some() {
            let held = shown.saturating_duration_since(job.submitted).as_millis();
            *at = job
                .submitted_ms
                .saturating_add(u64::try_from(held).unwrap_or(u64::MAX));
        }
    };
    match status {
        job_status::Status::Successful(successful) => {
            stamp(&mut successful.ended_at);
            for location in &mut successful.partition_location {
                if let Some(executor) = &mut location.executor_meta {
                    executor.host = job.result.clone();
                }
            }
        }
        job_status::Status::Failed(failed) => {
            stamp(&mut failed.ended_at);
            if job.stopped_at_deadline() {
                failed.error = deadline_error(cluster.deadline()).to_string();
            } else if let Some(readable) = readable_planning_failure(&failed.error) {
                failed.error = readable;
            }
        }
        _ => {}
    }
    None
}

/// A job refused at planning as the analyst reads it. Ballista's scheduler states the
/// failure as `Error planning job {id}: {e:?}` (ballista-scheduler 55
/// `query_stage_scheduler.rs`): the error's `Debug` form, its variants named and its quotes
/// escaped (`DataFusionError(Context("datafusion_dp", Plan("join of protected relations
/// ('visits', 'visits'): ...")))`), where a locked session shows the message. This keeps the
/// head and the message, the last string of the `Debug` form, unescaped; `None` for any
/// other failure, or a form it cannot read (then shown as it is).
fn readable_planning_failure(error: &str) -> Option<String> {
    let (head, debug) = error.split_once(": ")?;
    if !head.starts_with("Error planning job ") {
        return None;
    }
    let mut last = None;
    let mut chars = debug.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut text = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => text.push('\n'),
                    't' => text.push('\t'),
                    'r' => text.push('\r'),
                    '0' => text.push('\0'),
                    'u' => {
                        if chars.next()? != '{' {
                            return None;
                        }
                        let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                        text.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                    }
                    escaped => text.push(escaped),
                },
                other => text.push(other),
            }
        }
        last = Some(text);
    }
    Some(format!("{head}: {}", last?))
}

/// How a client follows its job: by asking for its status (Ballista's `execute_query`, then
/// `get_job_status`), or by a stream of its changes (`execute_query_push`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tracking {
    Pull,
    Push,
}

/// Whether `status` shows its job ended (succeeded or failed).
fn ended(status: &GetJobStatusResult) -> bool {
    matches!(
        status.status.as_ref().and_then(|s| s.status.as_ref()),
        Some(job_status::Status::Successful(_) | job_status::Status::Failed(_))
    )
}

/// Cancels a push client's job when the client's status stream is dropped before the job's
/// end was shown to the client: the client went away (Ctrl-C, a query stopped by its caller, a
/// lost connection), possibly while its submission was still in flight, when Ballista's client
/// has no job id to cancel ([`super::job_cancel`]). The job is recorded as cancelled by its
/// analyst, so its end is shown cancelled whatever it was ([`as_the_client_sees_it`]), and the
/// scheduler cancels it and its running tasks.
struct CancelUnlessShown {
    scheduler: Scheduler,
    cluster: Arc<LockedCluster>,
    job_id: String,
}

impl Drop for CancelUnlessShown {
    fn drop(&mut self) {
        let Some(job) = self.cluster.door.job(&self.job_id) else {
            return;
        };
        if job.end_delivered() {
            return;
        }
        job.cancel_requested();
        // Dropped by the server's connection task, on its runtime.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (scheduler, job_id) = (self.scheduler.clone(), self.job_id.clone());
        runtime.spawn(async move {
            let cancel = Request::new(CancelJobParams { job_id });
            let _ = SchedulerGrpc::cancel_job(&scheduler, cancel).await;
        });
    }
}

/// Whether the scheduler has job `id` still queued or running (not ended, and known).
async fn queued_or_running(scheduler: &Scheduler, id: &JobId) -> bool {
    matches!(
        scheduler.state.task_manager.get_job_status(id).await,
        Ok(Some(JobStatus {
            status: Some(job_status::Status::Queued(_) | job_status::Status::Running(_)),
            ..
        }))
    )
}

/// How long a job tracked by pull may go without its client asking for its status, before its
/// end was shown, until the port takes the client to have gone away and cancels the job
/// ([`cancel_when_unwatched`]). Ballista's client asks every 50 ms (ballista-core 55
/// `distributed_query.rs`), so this is a hundred missed polls.
pub(crate) const STATUS_LEASE: Duration = Duration::from_secs(5);

/// Cancels the job `job_id`, tracked by pull, once its client has not asked for its status for
/// [`STATUS_LEASE`] and its end has not been shown to it: the client went away, possibly while
/// its submission was still in flight, when Ballista's client has no job id to cancel
/// ([`super::job_cancel`]); without this the job ran to its deadline. It is the cancellation
/// the analyst could have sent at that moment: recorded as theirs, so the end is shown
/// cancelled by the same rule ([`as_the_client_sees_it`]), whether the job had ended or not,
/// and the scheduler stops the job if it is still queued or running. The watch ends when the
/// end is shown, at the owner's deadline ([`stop_at_deadline`] takes over), or when the job's
/// credentials end. The lease counts from now, when the client is answered with the job's id
/// (the scheduler's planning of the job may take longer than the lease).
fn cancel_when_unwatched(scheduler: &Scheduler, cluster: &Arc<LockedCluster>, job_id: &str) {
    if let Some(job) = cluster.door.job(job_id) {
        job.asked();
    }
    let (scheduler, cluster, id) = (scheduler.clone(), Arc::clone(cluster), JobId::new(job_id));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(STATUS_LEASE / 10).await;
            let Some(job) = cluster.door.job(id.as_str()) else {
                return;
            };
            if job.end_delivered() || job.submitted.elapsed() >= cluster.deadline() {
                return;
            }
            if job.unasked_for() < STATUS_LEASE {
                continue;
            }
            job.cancel_requested();
            // A job that ended is not cancelled on the scheduler, which would drop its
            // partitions (ballista-scheduler 55 `clean_up_failed_job`).
            if queued_or_running(&scheduler, &id).await {
                if let Err(e) = scheduler.cancel_job(id.clone()).await {
                    eprintln!("dp-scheduler: could not cancel unwatched job {id}: {e}");
                }
            }
            return;
        }
    });
}

/// The error of a job cancelled before its end, as Ballista's scheduler words it
/// (ballista-scheduler 55 `query_stage_scheduler.rs`, `JobCancel`).
const CANCELLED: &str = "Cancelled";

/// Stops the job `job_id` at the owner's `[limits] query_timeout_seconds` from its submission,
/// if it is still queued or running then: the scheduler cancels it (and its running tasks on
/// the executors), and its status says the deadline stopped it ([`as_the_client_sees_it`]).
/// Without it a job ran to its end, holding the executors' task slots, whatever the owner's
/// limit said.
fn stop_at_deadline(scheduler: &Scheduler, cluster: &Arc<LockedCluster>, job_id: &str) {
    let (scheduler, cluster, id) = (scheduler.clone(), Arc::clone(cluster), JobId::new(job_id));
    tokio::spawn(async move {
        tokio::time::sleep(cluster.deadline()).await;
        if !queued_or_running(&scheduler, &id).await {
            return;
        }
        // Stopped whether or not the credentials that submitted it still hold.
        if let Some(job) = cluster.door.job(id.as_str()) {
            job.stop_at_deadline();
        }
        if let Err(e) = scheduler.cancel_job(id.clone()).await {
            eprintln!("dp-scheduler: could not stop job {id} at its deadline: {e}");
        }
    });
}

/// Refuses a query that is not a logical plan: a physical (or Substrait) plan would run
/// without the planner rule that binds, checks and charges.
fn logical_plans_only(params: &ExecuteQueryParams) -> std::result::Result<(), Status> {
    match &params.query {
        Some(Query::LogicalPlan(_)) => Ok(()),
        _ => Err(Status::permission_denied(
            "a locked cluster plans and checks every query itself: send SQL through \
             datafusion_dp::distributed::remote_context (dpsql --scheduler); a physical or \
             Substrait plan would skip its privacy analysis and is refused",
        )),
    }
}

/// Refuses a plan that a locked session refuses as a statement
/// ([`crate::sql::privacy::session::lock::analyst_sql`]): a client sends plans, not SQL, so the checks
/// run on the plan's root. `EXPLAIN ANALYZE` prints every operator's exact row counts;
/// `EXPLAIN VERBOSE`, other formats than the indented one and statistics print the physical
/// plan (file paths, byte ranges, Parquet statistics); `COPY`, `INSERT` and DDL write on the
/// owner's machines or change the owner's catalog.
fn queries_only(params: &ExecuteQueryParams) -> std::result::Result<(), Status> {
    use datafusion_proto::protobuf::logical_plan_node::LogicalPlanType as Node;
    use prost::Message;
    let Some(Query::LogicalPlan(bytes)) = &params.query else {
        return Ok(());
    };
    let plan = LogicalPlanNode::decode(bytes.as_slice())
        .map_err(|e| Status::invalid_argument(format!("a malformed logical plan: {e}")))?;
    let refused = |what: &str, why: &str| {
        Err(Status::permission_denied(format!(
            "{what}: this cluster is locked by its data owner; {why}"
        )))
    };
    match plan.logical_plan_type {
        Some(Node::Analyze(_)) => refused(
            "EXPLAIN ANALYZE",
            "it would print every operator's exact row counts. Use EXPLAIN",
        ),
        Some(Node::Explain(explain)) => {
            let indented = datafusion_proto::protobuf::ExplainFormat::Indent as i32;
            if explain.verbose
                || explain.format != indented
                || explain.show_statistics == Some(true)
            {
                return refused(
                    "EXPLAIN VERBOSE, FORMAT or statistics",
                    "they would print the physical plan (files, byte ranges, statistics). Use \
                     EXPLAIN (the logical plan)",
                );
            }
            Ok(())
        }
        Some(
            Node::CopyTo(_)
            | Node::Dml(_)
            | Node::CreateExternalTable(_)
            | Node::CreateCatalogSchema(_)
            | Node::CreateCatalog(_)
            | Node::CreateView(_)
            | Node::DropView(_)
            | Node::Prepare(_),
        ) => refused(
            "COPY, INSERT, PREPARE or DDL",
            "the owner manages tables and files; send a query",
        ),
        _ => Ok(()),
    }
}

#[tonic::async_trait]
impl SchedulerGrpc for ClientPort {
    type ExecuteQueryPushStream =
        BoxStream<'static, std::result::Result<GetJobStatusResult, Status>>;

    async fn poll_work(
        &self,
        _: Request<PollWorkParams>,
    ) -> std::result::Result<Response<PollWorkResult>, Status> {
        Err(executor_only())
    }

    async fn register_executor(
        &self,
        _: Request<RegisterExecutorParams>,
    ) -> std::result::Result<Response<RegisterExecutorResult>, Status> {
        Err(executor_only())
    }

    async fn heart_beat_from_executor(
        &self,
        _: Request<HeartBeatParams>,
    ) -> std::result::Result<Response<HeartBeatResult>, Status> {
        Err(executor_only())
    }

    async fn update_task_status(
        &self,
        _: Request<UpdateTaskStatusParams>,
    ) -> std::result::Result<Response<UpdateTaskStatusResult>, Status> {
        Err(executor_only())
    }

    async fn executor_stopped(
        &self,
        _: Request<ExecutorStoppedParams>,
    ) -> std::result::Result<Response<ExecutorStoppedResult>, Status> {
        Err(executor_only())
    }

    async fn create_update_session(
        &self,
        request: Request<CreateUpdateSessionParams>,
    ) -> std::result::Result<Response<CreateUpdateSessionResult>, Status> {
        self.caller(&request).await?;
        SchedulerGrpc::create_update_session(&self.scheduler, request).await
    }

    async fn remove_session(
        &self,
        request: Request<RemoveSessionParams>,
    ) -> std::result::Result<Response<RemoveSessionResult>, Status> {
        self.caller(&request).await?;
        SchedulerGrpc::remove_session(&self.scheduler, request).await
    }

    /// Push job tracking, served as the pull path and a status stream the port polls: the
    /// scheduler's own push path gives the job's id only with the job's first change of status,
    /// which for a job of one stage is its end, so the port would learn of the job (and start
    /// its deadline, [`stop_at_deadline`]) only once it had run.
    async fn execute_query_push(
        &self,
        request: Request<ExecuteQueryParams>,
    ) -> std::result::Result<Response<Self::ExecuteQueryPushStream>, Status> {
        let submitted = self.submit(request, Tracking::Push).await?;
        let (metadata, submitted, extensions) = submitted.into_parts();
        let job_id = match submitted.result {
            Some(execute_query_result::Result::Success(success)) => success.job_id,
            Some(execute_query_result::Result::Failure(failure)) => {
                return Err(Status::internal(format!(
                    "the job was not submitted: {failure:?}"
                )))
            }
            None => return Err(Status::internal("the job was not submitted")),
        };
        let (scheduler, cluster) = (self.scheduler.clone(), Arc::clone(&self.cluster));
        let gone = CancelUnlessShown {
            scheduler: scheduler.clone(),
            cluster: Arc::clone(&cluster),
            job_id: job_id.clone(),
        };
        // Each change of the job's status, polled as Ballista's pull client polls, until it
        // succeeds or fails (the scheduler shows a job's status once it has queued it).
        let submitted = std::time::Instant::now();
        let updates = futures::stream::unfold(
            (Some(job_id), None::<JobStatus>),
            move |(job_id, previous)| {
                let (scheduler, cluster) = (scheduler.clone(), Arc::clone(&cluster));
                async move {
                    let job_id = job_id?;
                    loop {
                        let asked = Request::new(GetJobStatusParams {
                            job_id: job_id.clone(),
                        });
                        let mut update =
                            match SchedulerGrpc::get_job_status(&scheduler, asked).await {
                                Ok(update) => update.into_inner(),
                                Err(e) => return Some((Err(e), (None, previous))),
                            };
                        // As `get_job_status` answers: a job whose credentials ended, or
                        // that the scheduler no longer knows (it did once, or not by the
                        // deadline), is not found (its status would name the executors).
                        let known = previous.is_some() || submitted.elapsed() > cluster.deadline();
                        let job = match (cluster.door.job(&job_id), &update.status) {
                            (Some(job), Some(_)) => job,
                            (Some(_), None) if !known => {
                                tokio::time::sleep(STATUS_POLL).await;
                                continue;
                            }
                            _ => return Some((Err(door::not_found(&job_id)), (None, previous))),
                        };
                        let held = as_the_client_sees_it(&mut update, &job, &cluster);
                        let ended = ended(&update);
                        if update.status != previous || ended {
                            if ended {
                                job.deliver_end();
                            }
                            let next = (Some(job_id).filter(|_| !ended), update.status.clone());
                            return Some((Ok(update), next));
                        }
                        // An ended job held by the schedule changes next at its release.
                        match held {
                            Some(at) => tokio::time::sleep_until(at.into()).await,
                            None => tokio::time::sleep(STATUS_POLL).await,
                        }
                    }
                }
            },
        );
        // The guard lives as long as the stream: dropped with it when the client goes away.
        let updates = futures::StreamExt::map(updates, move |update| {
            let _ = &gone;
            update
        });
        Ok(Response::from_parts(
            metadata,
            Box::pin(updates) as Self::ExecuteQueryPushStream,
            extensions,
        ))
    }

    async fn execute_query(
        &self,
        request: Request<ExecuteQueryParams>,
    ) -> std::result::Result<Response<ExecuteQueryResult>, Status> {
        self.submit(request, Tracking::Pull).await
    }

    async fn get_job_status(
        &self,
        request: Request<GetJobStatusParams>,
    ) -> std::result::Result<Response<GetJobStatusResult>, Status> {
        // Whether the port is a locked cluster's is told to anyone (a client asks before it
        // logs in); everything else needs the analyst's credentials.
        if request.get_ref().job_id == PROBE_JOB {
            return Ok(Response::new(GetJobStatusResult {
                status: Some(JobStatus {
                    job_id: PROBE_JOB.to_string(),
                    job_name: LOCKED_MARKER.to_string(),
                    status: None,
                }),
                ..Default::default()
            }));
        }
        self.caller(&request).await?;
        if request.get_ref().job_id == BUDGET_JOB {
            let internal = |e: &dyn std::fmt::Display| Status::internal(format!("dp_budget: {e}"));
            let batches = self.cluster.budget_rows().await.map_err(|e| internal(&e))?;
            let mut bytes = Vec::new();
            let schema = DpBudgetFunction::schema();
            let mut writer =
                StreamWriter::try_new(&mut bytes, &schema).map_err(|e| internal(&e))?;
            for batch in &batches {
                writer.write(batch).map_err(|e| internal(&e))?;
            }
            writer.finish().map_err(|e| internal(&e))?;
            drop(writer);
            return Ok(Response::new(GetJobStatusResult {
                status: Some(JobStatus {
                    job_id: BUDGET_JOB.to_string(),
                    job_name: BASE64_STANDARD.encode(&bytes),
                    status: None,
                }),
                ..Default::default()
            }));
        }
        let job = self.own_job(&request.get_ref().job_id)?;
        job.asked();
        let mut response = SchedulerGrpc::get_job_status(&self.scheduler, request).await?;
        as_the_client_sees_it(response.get_mut(), &job, &self.cluster);
        if ended(response.get_ref()) {
            job.deliver_end();
        }
        Ok(response)
    }

    async fn get_job_metrics(
        &self,
        _: Request<GetJobMetricsParams>,
    ) -> std::result::Result<Response<GetJobMetricsResult>, Status> {
        Err(Status::permission_denied(
            "job metrics count the rows of every operator exactly (private data); a locked \
             cluster serves them on its internal port only",
        ))
    }

    async fn cancel_job(
        &self,
        request: Request<CancelJobParams>,
    ) -> std::result::Result<Response<CancelJobResult>, Status> {
        self.caller(&request).await?;
        let job = self.own_job(&request.get_ref().job_id)?;
        job.cancel_requested();
        SchedulerGrpc::cancel_job(&self.scheduler, request).await
    }

    async fn clean_job_data(
        &self,
        _: Request<CleanJobDataParams>,
    ) -> std::result::Result<Response<CleanJobDataResult>, Status> {
        Err(Status::permission_denied(
            "a locked cluster cleans job data itself",
        ))
    }
}

/// Ballista's Flight proxy, serving only the final partitions of finished jobs submitted
/// through the client port, to their analyst: what the query released. An intermediate
/// shuffle partition holds exact partial aggregates.
struct ReleasedPartitions {
    scheduler: Scheduler,
    proxy: BallistaFlightProxyService,
    cluster: Arc<LockedCluster>,
}

impl ReleasedPartitions {
    /// The executor (host and port) holding the partition `action` fetches, if it is a final
    /// partition of `job`, which finished successfully and whose end is shown
    /// ([`as_the_client_sees_it`]): a fetch does not tell that a job has ended before its
    /// status does.
    async fn released(
        &self,
        action: &BallistaAction,
        job: &Job,
    ) -> std::result::Result<Option<(String, u16)>, Status> {
        let BallistaAction::FetchPartition {
            job_id,
            stage_id,
            partition_id,
            ..
        } = action;
        let status = self
            .scheduler
            .state
            .task_manager
            .get_job_status(job_id)
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let Some(JobStatus {
            status: Some(job_status::Status::Successful(finished)),
            ..
        }) = status
        else {
            return Ok(None);
        };
        let shown = self.cluster.shown_end(job, finished.ended_at);
        if Instant::now() < shown || job.cancelled_before(shown) {
            return Ok(None);
        }
        Ok(finished.partition_location.iter().find_map(|location| {
            let id = location.partition_id.as_ref()?;
            let executor = location.executor_meta.as_ref()?;
            (id.job_id == job_id.to_string()
                && id.stage_id as usize == *stage_id
                && id.partition_id as usize == *partition_id)
                .then(|| (executor.host.clone(), executor.port as u16))
        }))
    }

    /// The job `action` fetches from, if the request may: the analyst's credentials with a
    /// job submitted through the port, or no credentials and the job's result capability as
    /// the ticket's host (what Ballista's client sends; it cannot add metadata to a fetch).
    async fn authorised(
        &self,
        request: &Request<Ticket>,
        action: &BallistaAction,
    ) -> std::result::Result<Job, Status> {
        let BallistaAction::FetchPartition { job_id, host, .. } = action;
        let door = &self.cluster.door;
        let job_id = job_id.to_string();
        let job = door.job(&job_id);
        if door::header(request.metadata()).is_some() {
            door.caller(request.metadata(), peer(request)).await?;
            authenticated(request);
            return job.ok_or_else(|| door::not_found(&job_id));
        }
        // The same refusal for a job that does not exist, is not the port's, or whose
        // capability is wrong: existence does not leak.
        match job {
            Some(job)
                if crate::owner::auth::constant_time_eq(job.result.as_bytes(), host.as_bytes()) =>
            {
                authenticated(request);
                Ok(job)
            }
            _ => Err(door::no_credentials()),
        }
    }
}

fn unimplemented<T>(what: &str) -> std::result::Result<Response<T>, Status> {
    Err(Status::unimplemented(format!(
        "{what}: this port serves query results only"
    )))
}

#[tonic::async_trait]
impl FlightService for ReleasedPartitions {
    type HandshakeStream = BoxStream<'static, std::result::Result<HandshakeResponse, Status>>;
    type ListFlightsStream = BoxStream<'static, std::result::Result<FlightInfo, Status>>;
    type DoGetStream = <BallistaFlightProxyService as FlightService>::DoGetStream;
    type DoPutStream = BoxStream<'static, std::result::Result<PutResult, Status>>;
    type DoExchangeStream = BoxStream<'static, std::result::Result<FlightData, Status>>;
    type DoActionStream = BoxStream<'static, std::result::Result<arrow_flight::Result, Status>>;
    type ListActionsStream = BoxStream<'static, std::result::Result<ActionType, Status>>;

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<Self::DoGetStream>, Status> {
        let action = ballista_core::serde::decode_protobuf(&request.get_ref().ticket)
            .map_err(|e| Status::invalid_argument(format!("invalid ticket: {e}")))?;
        let job = self.authorised(&request, &action).await?;
        let Some((host, port)) = self.released(&action, &job).await? else {
            return Err(Status::permission_denied(
                "a locked cluster serves only the final partitions of finished jobs (what a \
                 query released); intermediate partitions hold exact partial aggregates",
            ));
        };
        // The fetch goes to the executor that holds the partition (the ticket's host is the
        // job's capability, or whatever a client put there).
        let BallistaAction::FetchPartition {
            job_id,
            stage_id,
            partition_id,
            file_id,
            layout,
            file_kind,
            byte_ranges,
            ..
        } = action;
        let fetch = BallistaAction::FetchPartition {
            job_id,
            stage_id,
            partition_id,
            host,
            port,
            file_id,
            layout,
            file_kind,
            byte_ranges,
        };
        let ticket: ballista_core::serde::protobuf::Action = fetch
            .try_into()
            .map_err(|e| Status::internal(format!("ticket: {e}")))?;
        self.proxy
            .do_get(Request::new(Ticket {
                ticket: prost::Message::encode_to_vec(&ticket).into(),
            }))
            .await
    }

    /// Logs the analyst in: `authorization: Basic` with the owner's credentials for the
    /// analyst this cluster spends, answered with `authorization: Bearer TOKEN` (and the token
    /// as the payload), as `dp-server` answers.
    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> std::result::Result<Response<Self::HandshakeStream>, Status> {
        let token = self
            .cluster
            .door
            .log_in(request.metadata(), peer(&request))
            .await?;
        let bearer = MetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| Status::internal("token header"))?;
        let answer = futures::stream::iter([Ok(HandshakeResponse {
            protocol_version: 0,
            payload: token.into(),
        })]);
        let mut response = Response::new(Box::pin(answer) as Self::HandshakeStream);
        response.metadata_mut().insert("authorization", bearer);
        Ok(response)
    }

    async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> std::result::Result<Response<Self::ListFlightsStream>, Status> {
        unimplemented("list_flights")
    }

    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        unimplemented("get_flight_info")
    }

    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<PollInfo>, Status> {
        unimplemented("poll_flight_info")
    }

    async fn get_schema(
        &self,
        _: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<SchemaResult>, Status> {
        unimplemented("get_schema")
    }

    async fn do_put(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoPutStream>, Status> {
        unimplemented("do_put")
    }

    async fn do_exchange(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoExchangeStream>, Status> {
        unimplemented("do_exchange")
    }

    async fn do_action(
        &self,
        _: Request<Action>,
    ) -> std::result::Result<Response<Self::DoActionStream>, Status> {
        unimplemented("do_action")
    }

    async fn list_actions(
        &self,
        _: Request<Empty>,
    ) -> std::result::Result<Response<Self::ListActionsStream>, Status> {
        unimplemented("list_actions")
    }
}

#[cfg(test)]
mod tests {
    use super::readable_planning_failure;

    #[test]
    fn a_planning_failure_reads_as_its_message() {
        // As the scheduler of the neighbour test's cluster stated it.
        let stated =
            "Error planning job 038HAWNKYE000: DataFusionError(Context(\"datafusion_dp\", \
                      Plan(\"join of protected relations ('visits', 'visits'): allowed only on \
                      equality of their unit columns\")))";
        assert_eq!(
            readable_planning_failure(stated).as_deref(),
            Some(
                "Error planning job 038HAWNKYE000: join of protected relations ('visits', \
                 'visits'): allowed only on equality of their unit columns"
            )
        );
        // Escapes are undone: quotes, backslashes, new lines, unicode.
        let stated = r#"Error planning job 1: DataFusionError(Plan("a \"b\" \\ c\nd \u{e9}"))"#;
        assert_eq!(
            readable_planning_failure(stated).as_deref(),
            Some("Error planning job 1: a \"b\" \\ c\nd \u{e9}")
        );
    }

    #[test]
    fn other_failures_and_unreadable_forms_are_left_as_they_are() {
        for stated in [
            "Task failed due to runtime execution error",
            "Cancelled",
            "Error planning job 1: DataFusionError(NotImplemented)",
            "Error planning job 1: DataFusionError(Plan(\"unterminated",
            "Error planning job 1: DataFusionError(Plan(\"bad \\u{zz}\"))",
        ] {
            assert_eq!(readable_planning_failure(stated), None, "{stated}");
        }
    }
}
