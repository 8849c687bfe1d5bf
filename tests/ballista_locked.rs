//! A Ballista cluster locked by its data owner (an in-process scheduler on two loopback ports
//! and two executors): the scheduler binds and charges with the owner's tables, options and
//! analyst budget, whatever a client sends, its client port serves nothing else, and only to
//! that analyst's credentials.
#![cfg(feature = "ballista")]

mod common;

use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{HandshakeRequest, Ticket};
use ballista_core::serde::protobuf::execute_query_params::Query;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::{
    execute_query_result, job_status, CancelJobParams, CreateUpdateSessionParams,
    ExecuteQueryParams, GetJobMetricsParams, GetJobStatusParams, KeyValuePair, PartitionLocation,
    RegisterExecutorParams,
};
use base64::prelude::{Engine, BASE64_STANDARD};
use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Float64Type;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{CsvReadOptions, SessionContext};
use datafusion_dp::distributed::{locked, remote_context_as, DpLogicalCodec, LockedCluster};
use datafusion_dp::owner::OwnerConfig;
use datafusion_proto::logical_plan::AsLogicalPlan;
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use prost::Message;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const BUDGET: f64 = 1.5;
/// The analyst's password in the owner's configuration.
const PASSWORD: &str = "team-pw";

fn data(file: &str) -> String {
    format!("{}/data/{file}", env!("CARGO_MANIFEST_DIR"))
}

fn dir() -> &'static Path {
    common::scratch_dir()
}

fn ledger() -> PathBuf {
    dir().join("team.ledger")
}

/// The locked cluster for the whole test binary: the owner protects `visits` by patient and
/// declares `regions` public (and its keys the public GROUP BY keys); analyst `team` (password
/// [`PASSWORD`]) has an epsilon budget of 1.5, and analyst `other` (password `other-pw`) is
/// not the one the cluster spends. Returns the client port's `df://` URL.
fn cluster() -> &'static str {
    &ports().0
}

/// The client port's `df://` URL, the internal port's `http://` URL, and a bearer token of
/// analyst `team` (logged in once).
fn ports() -> &'static (String, String, String) {
    static URL: OnceLock<(String, String, String)> = OnceLock::new();
    URL.get_or_init(|| {
        let config = dir().join("owner.toml");
        std::fs::write(
            &config,
            format!(
                "[[table]]\nname = \"visits\"\nlocation = \"{}\"\nunit = \"patient_id\"\n\
                 columns = [\"visit_id BIGINT\", \"patient_id BIGINT\", \"region VARCHAR\", \"month VARCHAR\", \"exposed BOOLEAN\", \"outcome BOOLEAN\"]\n\n\
                 [[table]]\nname = \"regions\"\nlocation = \"{}\"\nprotection = \"public\"\n\n\
                 [options]\npublic_groups = \"regions\"\nmax_rows_per_unit = 4\n\n\
                 [server]\nlogin_name_failures = 100\nlogin_peer_failures = 100\n\n\
                 [[analyst]]\nname = \"team\"\npassword = \"{PASSWORD}\"\nepsilon_budget = {BUDGET}\nledger = \"{}\"\n\n\
                 [[analyst]]\nname = \"other\"\npassword = \"other-pw\"\nepsilon_budget = 1.0\nledger = \"{}\"\n",
                data("visits.csv"),
                data("regions.csv"),
                ledger().display(),
                dir().join("other.ledger").display()
            ),
        )
        .unwrap();
        let (started, url) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let owner = OwnerConfig::load(&config).unwrap();
                let cluster = LockedCluster::open(owner, Some("team")).await.unwrap();
                let (client, internal) = locked::start_local_cluster_with_internal(&cluster, 2, 2)
                    .await
                    .expect("cluster starts");
                let token = log_in(&client.replace("df://", "http://"), "team", PASSWORD)
                    .await
                    .expect("the analyst logs in");
                started.send((client, internal, token)).unwrap();
                std::future::pending::<()>().await
            })
        });
        url.recv().unwrap()
    })
}

fn grpc_url() -> String {
    cluster().replace("df://", "http://")
}

/// `authorization: Basic base64(user:password)`.
fn basic(user: &str, password: &str) -> tonic::metadata::MetadataValue<tonic::metadata::Ascii> {
    format!(
        "Basic {}",
        BASE64_STANDARD.encode(format!("{user}:{password}"))
    )
    .parse()
    .unwrap()
}

/// Logs in on the client port at `url` (`http://host:port`) with a Flight handshake, as
/// `dp-server`'s clients do: the bearer token.
async fn log_in(url: &str, user: &str, password: &str) -> Result<String, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut request = tonic::Request::new(futures::stream::iter([HandshakeRequest::default()]));
    request
        .metadata_mut()
        .insert("authorization", basic(user, password));
    let response = FlightServiceClient::new(channel).handshake(request).await?;
    let header = response.metadata().get("authorization").unwrap();
    Ok(header
        .to_str()
        .unwrap()
        .strip_prefix("Bearer ")
        .unwrap()
        .to_string())
}

/// `request` with the analyst's bearer token.
fn authorised<T>(mut request: tonic::Request<T>) -> tonic::Request<T> {
    let bearer = format!("Bearer {}", ports().2).parse().unwrap();
    request.metadata_mut().insert("authorization", bearer);
    request
}

/// `request` with `authorization` set to `value`, or without one.
fn with_authorization<T>(mut request: tonic::Request<T>, value: Option<&str>) -> tonic::Request<T> {
    match value {
        Some(value) => {
            request
                .metadata_mut()
                .insert("authorization", value.parse().unwrap());
        }
        None => {
            request.metadata_mut().remove("authorization");
        }
    }
    request
}

/// An analyst's client with the tables declared as the analyst likes.
async fn analyst() -> SessionContext {
    let ctx = remote_context_as(cluster(), "team", PASSWORD)
        .await
        .unwrap();
    for (name, file) in [("visits", "visits.csv"), ("regions", "regions.csv")] {
        ctx.register_csv(name, &data(file), CsvReadOptions::new())
            .await
            .unwrap();
    }
    ctx
}

async fn run(ctx: &SessionContext, sql: &str) -> datafusion::error::Result<usize> {
    let mut rows = 0;
    for statement in sql.split(';').filter(|s| !s.trim().is_empty()) {
        let batches = ctx.sql(statement).await?.collect().await?;
        rows = batches.iter().map(|b| b.num_rows()).sum();
    }
    Ok(rows)
}

async fn refused(ctx: &SessionContext, sql: &str, expected: &str) {
    let err = run(ctx, sql)
        .await
        .expect_err(&format!("answered: {sql}"))
        .to_string();
    assert!(err.contains(expected), "{sql}: {err}");
    // The scheduler's planning errors read as their message, not as a `Debug` form.
    assert!(!err.contains("DataFusionError("), "{sql}: {err}");
}

fn charges() -> Vec<f64> {
    match datafusion_dp::sql::accounting::ledger::read(&ledger()) {
        Ok(entries) => entries.iter().map(|e| e.epsilon).collect(),
        Err(_) => Vec::new(),
    }
}

/// One test for everything that spends the analyst's budget, so the charges are in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_scheduler_binds_and_charges_with_the_owners_settings() {
    let ctx = analyst().await;
    // What the analyst declares for itself is ignored: the budget, the ledger, the tables.
    let own_ledger = dir().join("mine.ledger");
    run(
        &ctx,
        &format!(
            "SET dp.epsilon_budget = 100; SET dp.ledger = '{}'; SET dp.public_tables = '*'; \
             SET dp.public_groups = 'assert'; SET dp.confidence = 0.9",
            own_ledger.display()
        ),
    )
    .await
    .unwrap();
    let regions = std::fs::read_to_string(data("regions.csv"))
        .unwrap()
        .lines()
        .count()
        - 1;
    let rows = run(
        &ctx,
        "SELECT region, dp_rr_ci(outcome, exposed, 0.5) FROM visits GROUP BY region",
    )
    .await
    .unwrap();
    assert_eq!(rows, regions, "the owner's public keys, one row each");
    assert_eq!(charges(), vec![0.5], "charged to the owner's ledger once");
    // A DP query from a client without the analyst's credentials (none, a wrong password,
    // another analyst's) is refused before it is bound or charged.
    let mut raw = SchedulerGrpcClient::connect(grpc_url()).await.unwrap();
    for value in [
        None,
        Some(basic("team", "not-the-password")),
        Some(basic("other", "other-pw")),
    ] {
        let query = unbound_dp_query("SELECT dp_count(visit_id, 0.25) FROM visits").await;
        let value = value.as_ref().map(|v| v.to_str().unwrap());
        let err = raw
            .execute_query(with_authorization(submit(query), value))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err.code(),
                tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
            ),
            "{value:?}: {err}"
        );
    }
    assert_eq!(charges(), vec![0.5], "refused calls charge nothing");
    assert!(!own_ledger.exists(), "the client's ledger is not used");
    // A second client session spends the same analyst budget: 0.5 + 0.5 of 1.5, then 0.6 does
    // not fit.
    // Its query joins two protected relations and gates on a CASE and an OR: the
    // executors run the eager branches and the drained join the scheduler planned (issue 41;
    // `rewrite::eager`, `exec::drain`), decoded by the codecs.
    let other = analyst().await;
    run(
        &other,
        "SELECT dp_count(v.visit_id, 0.5) FROM visits v JOIN (SELECT patient_id FROM visits \
         WHERE CASE WHEN region = 'north' THEN outcome ELSE exposed OR outcome END) w ON \
         v.patient_id = w.patient_id",
    )
    .await
    .unwrap();
    refused(
        &other,
        "SELECT dp_count(visit_id, 0.6) FROM visits",
        "budget",
    )
    .await;
    assert_eq!(charges(), vec![0.5, 0.5]);
    // dp_budget() on any client shows the analyst the cluster charges, whatever the client set
    // (its own budget of 100 is not it): budget 1.5, spent 1.0, two charges.
    let budget = ctx
        .sql("SELECT entry, epsilon FROM dp_budget()")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let rows: Vec<(String, f64)> = budget
        .iter()
        .flat_map(|b| {
            let entry = b.column(0).as_string::<i32>().clone();
            let epsilon = b.column(1).as_primitive::<Float64Type>().clone();
            (0..b.num_rows())
                .map(move |i| (entry.value(i).to_string(), epsilon.value(i)))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("budget".to_string(), BUDGET),
            ("spent".to_string(), 1.0),
            ("remaining".to_string(), BUDGET - 1.0),
            ("charge".to_string(), 0.5),
            ("charge".to_string(), 0.5),
        ]
    );
    assert_eq!(
        charges(),
        vec![0.5, 0.5],
        "reading the budget costs nothing"
    );
    // Exact outputs stay refused though the client declared every table public.
    refused(&ctx, "SELECT count(*) FROM visits", "visits").await;
    // So does a call whose work per row would tell about one person (issue 41), before the
    // charge; over the public table it runs.
    refused(
        &ctx,
        "SELECT dp_count(visit_id, 0.1) FROM visits WHERE levenshtein(region, month) > 3",
        "levenshtein over protected rows",
    )
    .await;
    run(&ctx, "SELECT levenshtein(region, 'nord') FROM regions")
        .await
        .unwrap();
    assert_eq!(charges(), vec![0.5, 0.5]);
}

/// An analyst whose budget is in zCDP (issue 45): the cluster charges each release the ρ of
/// its privacy map (a Laplace count at ε = 0.25: 0.25²/2 = 0.03125), so four fill ρ = 0.125 and
/// the fifth is refused before it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zcdp_analyst_is_charged_rho_on_the_cluster() {
    // A cluster of its own (one executor) that spends analyst zeta's budget.
    let dir = dir().join("zcdp");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("owner.toml");
    std::fs::write(
        &config,
        format!(
            "[[table]]\nname = \"visits\"\nlocation = \"{}\"\nunit = \"patient_id\"\n\
             columns = [\"visit_id BIGINT\", \"patient_id BIGINT\", \"region VARCHAR\", \"month VARCHAR\", \"exposed BOOLEAN\", \"outcome BOOLEAN\"]\n\n\
             [[analyst]]\nname = \"zeta\"\npassword = \"zeta-pw\"\nbudget_measure = \"zcdp\"\nrho_budget = 0.125\nledger = \"{}\"\n",
            data("visits.csv"),
            dir.join("zeta.ledger").display(),
        ),
    )
    .unwrap();
    let cluster = LockedCluster::open(OwnerConfig::load(&config).unwrap(), None)
        .await
        .unwrap();
    let url = locked::start_local_cluster(&cluster, 1, 2).await.unwrap();
    let ctx = remote_context_as(&url, "zeta", "zeta-pw").await.unwrap();
    ctx.register_csv("visits", &data("visits.csv"), CsvReadOptions::new())
        .await
        .unwrap();
    let sql = "SELECT dp_count(visit_id, 0.25) FROM visits";
    for _ in 0..4 {
        run(&ctx, sql).await.unwrap();
    }
    refused(&ctx, sql, "budget").await;
    let entries = datafusion_dp::sql::accounting::ledger::read(&dir.join("zeta.ledger")).unwrap();
    let rhos: Vec<Option<f64>> = entries.iter().map(|e| e.rho).collect();
    assert_eq!(rhos, vec![Some(0.03125); 4]);
    let spent = ctx
        .sql("SELECT measure, rho FROM dp_budget() WHERE entry = 'spent'")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(spent[0].column(0).as_string::<i32>().value(0), "zcdp");
    assert_eq!(
        spent[0].column(1).as_primitive::<Float64Type>().value(0),
        0.125
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_table_is_the_owners_table_or_nothing() {
    let ctx = analyst().await;
    // The analyst's own copy of the protected file, under another name.
    ctx.register_csv("mine", &data("visits.csv"), CsvReadOptions::new())
        .await
        .unwrap();
    refused(
        &ctx,
        "SELECT count(*) FROM mine",
        "not one of the tables this cluster's data owner registered",
    )
    .await;
    // The protected file registered under the public table's name.
    let renamed = remote_context_as(cluster(), "team", PASSWORD)
        .await
        .unwrap();
    renamed
        .register_csv("regions", &data("visits.csv"), CsvReadOptions::new())
        .await
        .unwrap();
    refused(
        &renamed,
        "SELECT * FROM regions",
        "does not have the columns of the data owner's table",
    )
    .await;
}

/// The same unbound query a client sends, for the raw gRPC tests.
async fn unbound_plan(sql: &str) -> LogicalPlan {
    let ctx = client_tables().await;
    ctx.sql("SET dp.public_tables = '*'").await.unwrap();
    if sql.contains("dp_") {
        // Bound by this trusted-mode session (its own settings).
        ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap()
    } else {
        ctx.state().create_logical_plan(sql).await.unwrap()
    }
}

/// A client's session with `visits` and `regions` read from the bundled files.
async fn client_tables() -> SessionContext {
    let ctx = SessionContext::new_with_state(
        datafusion_dp::distributed::session_state(datafusion_dp::distributed::session_config())
            .unwrap(),
    );
    ctx.register_csv("visits", &data("visits.csv"), CsvReadOptions::new())
        .await
        .unwrap();
    ctx.register_csv("regions", &data("regions.csv"), CsvReadOptions::new())
        .await
        .unwrap();
    ctx
}

/// A job submission as Ballista's client makes it (with its version header), with the
/// analyst's bearer token.
fn submit(query: Query) -> tonic::Request<ExecuteQueryParams> {
    submit_with(query, &[])
}

fn submit_with(query: Query, settings: &[(&str, &str)]) -> tonic::Request<ExecuteQueryParams> {
    let mut request = tonic::Request::new(ExecuteQueryParams {
        session_id: String::new(),
        settings: settings
            .iter()
            .map(|(key, value)| KeyValuePair {
                key: key.to_string(),
                value: Some(value.to_string()),
            })
            .collect(),
        operation_id: "locked-cluster-test".to_string(),
        query: Some(query),
    });
    ballista_core::version::insert_version_header(request.metadata_mut());
    authorised(request)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plans_that_skip_the_schedulers_analysis_are_refused() {
    cluster();
    let mut client = SchedulerGrpcClient::connect(grpc_url()).await.unwrap();
    // A logical plan whose DP call a client bound (with its own epsilon and tables).
    let bound = unbound_plan("SELECT dp_count(visit_id, 1.0) FROM visits").await;
    let bytes = LogicalPlanNode::try_from_logical_plan(&bound, &DpLogicalCodec::default())
        .unwrap()
        .encode_to_vec();
    let answer = client
        .execute_query(submit(Query::LogicalPlan(bytes)))
        .await
        .unwrap()
        .into_inner();
    let Some(execute_query_result::Result::Failure(failure)) = answer.result else {
        panic!("a client-bound plan was accepted: {answer:?}");
    };
    assert!(
        format!("{failure:?}").contains("refuses a call a client bound"),
        "{failure:?}"
    );
    // A physical plan of an exact count.
    let plain = SessionContext::new();
    plain
        .register_csv("visits", &data("visits.csv"), CsvReadOptions::new())
        .await
        .unwrap();
    let physical = plain
        .sql("SELECT count(*) FROM visits")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let bytes = PhysicalPlanNode::try_from_physical_plan(
        physical,
        &datafusion_dp::distributed::DpPhysicalCodec::default(),
    )
    .unwrap()
    .encode_to_vec();
    let err = client
        .execute_query(submit(Query::PhysicalPlan(bytes)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    assert!(err.message().contains("physical"), "{err}");
    // Executors' and operators' endpoints are not on the client port.
    let err = client
        .register_executor(RegisterExecutorParams::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    let err = client
        .get_job_metrics(GetJobMetricsParams::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_released_partitions_are_served() {
    cluster();
    let mut client = SchedulerGrpcClient::connect(grpc_url()).await.unwrap();
    // A query of the public table with shuffle stages (a partitioned self-join): its final
    // partitions are served and its intermediate ones are not.
    let plan =
        unbound_plan("SELECT a.region FROM regions a JOIN regions b ON a.region = b.region").await;
    let bytes = LogicalPlanNode::try_from_logical_plan(&plan, &DpLogicalCodec::default())
        .unwrap()
        .encode_to_vec();
    let answer = client
        .execute_query(submit_with(
            Query::LogicalPlan(bytes),
            &[
                ("datafusion.execution.target_partitions", "2"),
                (
                    "datafusion.optimizer.hash_join_single_partition_threshold",
                    "0",
                ),
                (
                    "datafusion.optimizer.hash_join_single_partition_threshold_rows",
                    "0",
                ),
                ("ballista.planner.adaptive.enabled", "false"),
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    let Some(execute_query_result::Result::Success(success)) = answer.result else {
        panic!("a public query was refused: {answer:?}");
    };
    let job_id = success.job_id;
    let locations = finished(&mut client, &job_id).await;
    // A final partition with rows (Ballista's client expects a schema batch from a fetch).
    let final_location = locations
        .iter()
        .find(|l| l.partition_stats.as_ref().is_some_and(|s| s.num_rows > 0))
        .expect("a final partition with rows")
        .clone();
    let fetch = |location: PartitionLocation| async move {
        let (host, port) = {
            let url = url::Url::parse(cluster()).unwrap();
            (url.host_str().unwrap().to_string(), url.port().unwrap())
        };
        let mut proxy = ballista_core::client::BallistaClient::try_new(
            &host,
            port,
            16 << 20,
            false,
            None,
            1,
            0,
            0,
            0,
        )
        .await
        .unwrap();
        let executor = location.executor_meta.clone().unwrap();
        proxy
            .fetch_partition_proxied(
                &executor.id,
                &location.partition_id.clone().unwrap().into(),
                location.file_id,
                location.layout(),
                &executor.host,
                executor.port as u16,
                true,
            )
            .await
    };
    assert!(
        fetch(final_location.clone()).await.is_ok(),
        "a released partition is served"
    );
    let mut intermediate = final_location;
    let id = intermediate.partition_id.as_mut().unwrap();
    assert!(
        id.stage_id > 1,
        "the query has a shuffle stage before the final one"
    );
    id.stage_id -= 1;
    let err = match fetch(intermediate).await {
        Ok(_) => panic!("an intermediate partition was served"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("final partitions"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_client_port_refuses_what_a_locked_session_refuses() {
    // A client sends plans, not SQL: the statement checks of a locked session run on them.
    cluster();
    let mut client = SchedulerGrpcClient::connect(grpc_url()).await.unwrap();
    for (sql, expected) in [
        (
            "EXPLAIN VERBOSE SELECT region FROM regions",
            "EXPLAIN VERBOSE",
        ),
        (
            "EXPLAIN FORMAT TREE SELECT region FROM regions",
            "EXPLAIN VERBOSE, FORMAT",
        ),
        (
            "EXPLAIN ANALYZE SELECT region FROM regions",
            "EXPLAIN ANALYZE",
        ),
        (
            "COPY (SELECT region FROM regions) TO '/tmp/dp-locked-cluster-copy.csv'",
            "COPY",
        ),
        ("CREATE VIEW mine AS SELECT region FROM regions", "DDL"),
    ] {
        let plan = unbound_plan(sql).await;
        let bytes = LogicalPlanNode::try_from_logical_plan(&plan, &DpLogicalCodec::default())
            .unwrap()
            .encode_to_vec();
        let err = client
            .execute_query(submit(Query::LogicalPlan(bytes)))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied, "{sql}: {err}");
        assert!(err.message().contains(expected), "{sql}: {err}");
        assert!(err.message().contains("locked"), "{sql}: {err}");
    }
    assert!(!Path::new("/tmp/dp-locked-cluster-copy.csv").exists());
    // The client's settings: only the analyst's, in their ranges.
    let plan = unbound_plan("SELECT region FROM regions").await;
    let bytes = LogicalPlanNode::try_from_logical_plan(&plan, &DpLogicalCodec::default())
        .unwrap()
        .encode_to_vec();
    let answer = client
        .execute_query(submit_with(
            Query::LogicalPlan(bytes),
            &[("datafusion.execution.batch_size", "1")],
        ))
        .await;
    let text = format!("{answer:?}");
    assert!(
        text.contains("batch_size = 1: this cluster is locked"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_push_client_follows_its_job_to_its_released_partitions() {
    // Push job tracking (the default of Ballista's client): the port answers with the job's
    // changes of status, which it polls (so it knows the job, and starts its deadline, at
    // submission), ending at its success, with each released partition located by the job's
    // result capability, not an executor's address.
    cluster();
    let mut client = SchedulerGrpcClient::connect(grpc_url()).await.unwrap();
    let response = client
        .execute_query_push(submit(public_query().await))
        .await
        .unwrap();
    assert_eq!(
        ballista_core::version::version_from_metadata(response.metadata()),
        Some(ballista_core::BALLISTA_VERSION),
        "the scheduler's version header is passed on"
    );
    let mut updates = response.into_inner();
    let mut statuses = Vec::new();
    while let Some(update) = updates.message().await.unwrap() {
        statuses.push(update.status.expect("each update has a status"));
    }
    let last = statuses.last().expect("at least one update").clone();
    let Some(job_status::Status::Successful(job)) = last.status else {
        panic!("the job did not succeed: {statuses:?}");
    };
    assert!(
        statuses.windows(2).all(|w| w[0] != w[1]),
        "each update is a change: {statuses:?}"
    );
    assert!(!job.partition_location.is_empty());
    for location in &job.partition_location {
        let host = &location.executor_meta.as_ref().unwrap().host;
        assert!(
            host.len() >= 32 && !host.contains("localhost"),
            "an executor's address: {host}"
        );
    }
    // The job is the client's: its status is answered on the port.
    assert_eq!(
        finished(&mut client, &last.job_id).await.len(),
        job.partition_location.len()
    );
}

/// Asserts that `answer` is a refusal for want of credentials.
fn unauthenticated<T>(answer: Result<T, tonic::Status>, what: &str) {
    let err = answer.map(|_| ()).expect_err(&format!("{what}: answered"));
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{what}: {err}");
}

/// The public query a raw client submits in the credentials test, as a job submission.
async fn public_query() -> Query {
    let plan = unbound_plan("SELECT region FROM regions").await;
    Query::LogicalPlan(
        LogicalPlanNode::try_from_logical_plan(&plan, &DpLogicalCodec::default())
            .unwrap()
            .encode_to_vec(),
    )
}

/// A DP query with its call unbound, as a client of a locked cluster sends it: the scheduler
/// would bind and charge it.
async fn unbound_dp_query(sql: &str) -> Query {
    let ctx = SessionContext::new_with_state(
        datafusion_dp::distributed::session_state(datafusion_dp::distributed::session_config())
            .unwrap(),
    );
    ctx.register_csv("visits", &data("visits.csv"), CsvReadOptions::new())
        .await
        .unwrap();
    let plan = ctx.state().create_logical_plan(sql).await.unwrap();
    Query::LogicalPlan(
        LogicalPlanNode::try_from_logical_plan(&plan, &DpLogicalCodec::default())
            .unwrap()
            .encode_to_vec(),
    )
}

/// The partitions of job `job_id` once it has finished on the scheduler `client` talks to,
/// asked with the analyst's token.
async fn finished(
    client: &mut SchedulerGrpcClient<tonic::transport::Channel>,
    job_id: &str,
) -> Vec<PartitionLocation> {
    let bearer = format!("Bearer {}", ports().2);
    match ended_status(client.clone(), job_id.to_string(), Some(bearer))
        .await
        .0
    {
        job_status::Status::Successful(job) => job.partition_location,
        failed => panic!("job failed: {failed:?}"),
    }
}

/// A Flight ticket for `location`'s partition, naming `host` as the executor.
fn ticket(location: &PartitionLocation, host: &str) -> Ticket {
    let id = location.partition_id.clone().unwrap();
    let action = ballista_core::serde::scheduler::Action::FetchPartition {
        job_id: id.job_id.clone().into(),
        stage_id: id.stage_id as usize,
        partition_id: id.partition_id as usize,
        host: host.to_string(),
        port: location.executor_meta.as_ref().unwrap().port as u16,
        file_id: location.file_id,
        layout: location.layout(),
        file_kind: ballista_core::serde::scheduler::ShuffleFileKind::Data,
        byte_ranges: vec![],
    };
    let action: ballista_core::serde::protobuf::Action = action.try_into().unwrap();
    Ticket {
        ticket: action.encode_to_vec().into(),
    }
}

/// A Flight `DoGet` of `ticket` on the client port with `authorization` set to `value`: the
/// number of messages streamed, or the refusal.
async fn do_get(ticket: Ticket, value: Option<&str>) -> Result<usize, tonic::Status> {
    do_get_at(&grpc_url(), ticket, value).await
}

/// [`do_get`] on the client port at `url`.
async fn do_get_at(url: &str, ticket: Ticket, value: Option<&str>) -> Result<usize, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let request = with_authorization(tonic::Request::new(ticket), value);
    let mut stream = FlightServiceClient::new(channel)
        .do_get(request)
        .await?
        .into_inner();
    let mut messages = 0;
    while let Some(message) = stream.message().await? {
        let _ = message;
        messages += 1;
    }
    Ok(messages)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_client_port_needs_the_analysts_credentials() {
    cluster();
    let token = format!("Bearer {}", ports().2);
    let mut client = SchedulerGrpcClient::connect(grpc_url()).await.unwrap();
    let basic_right = basic("team", PASSWORD);
    let basic_right = basic_right.to_str().unwrap();
    let basic_wrong = basic("team", "not-the-password");
    let basic_wrong = basic_wrong.to_str().unwrap();

    // Logins: a wrong password and another analyst of the owner are refused; the analyst whose
    // budget the cluster spends is answered with a token.
    let err = log_in(&grpc_url(), "team", "not-the-password")
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err}");
    assert!(
        err.message().contains("invalid user name or password"),
        "{err}"
    );
    let err = log_in(&grpc_url(), "other", "other-pw").await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    assert!(err.message().contains("not the analyst"), "{err}");
    assert_eq!(
        log_in(&grpc_url(), "team", PASSWORD).await.unwrap().len(),
        64
    );

    // A job submitted with the right password on the call itself is answered.
    let answer = client
        .execute_query(with_authorization(
            submit(public_query().await),
            Some(basic_right),
        ))
        .await
        .unwrap()
        .into_inner();
    let Some(execute_query_result::Result::Success(success)) = answer.result else {
        panic!("an authenticated public query was refused: {answer:?}");
    };
    let job_id = success.job_id;
    let locations = finished(&mut client, &job_id).await;
    let location = locations
        .iter()
        .find(|l| l.partition_stats.as_ref().is_some_and(|s| s.num_rows > 0))
        .expect("a final partition with rows")
        .clone();
    // The executor's address is replaced by the job's result capability.
    let capability = location.executor_meta.as_ref().unwrap().host.clone();
    assert_eq!(capability.len(), 64, "{capability}");

    // Without credentials, with a wrong password or an unknown token, every call is refused.
    for value in [None, Some(basic_wrong), Some("Bearer 0123456789abcdef")] {
        let what = format!("authorization {value:?}");
        unauthenticated(
            client
                .execute_query(with_authorization(submit(public_query().await), value))
                .await,
            &format!("execute_query, {what}"),
        );
        unauthenticated(
            client
                .get_job_status(with_authorization(
                    tonic::Request::new(GetJobStatusParams {
                        job_id: job_id.clone(),
                    }),
                    value,
                ))
                .await,
            &format!("get_job_status, {what}"),
        );
        unauthenticated(
            client
                .get_job_status(with_authorization(
                    tonic::Request::new(GetJobStatusParams {
                        job_id: "datafusion-dp/budget".to_string(),
                    }),
                    value,
                ))
                .await,
            &format!("dp_budget, {what}"),
        );
        unauthenticated(
            client
                .cancel_job(with_authorization(
                    tonic::Request::new(CancelJobParams {
                        job_id: job_id.clone(),
                    }),
                    value,
                ))
                .await,
            &format!("cancel_job, {what}"),
        );
        unauthenticated(
            client
                .create_update_session(with_authorization(
                    tonic::Request::new(CreateUpdateSessionParams::default()),
                    value,
                ))
                .await,
            &format!("create_update_session, {what}"),
        );
        unauthenticated(
            do_get(ticket(&location, "localhost"), value).await,
            &format!("do_get, {what}"),
        );
    }
    // A fetch without metadata (Ballista's client) needs the job's capability as its host.
    unauthenticated(
        do_get(ticket(&location, &"0".repeat(64)), None).await,
        "do_get with a wrong capability",
    );
    assert!(do_get(ticket(&location, &capability), None).await.unwrap() > 0);
    assert!(
        do_get(ticket(&location, "localhost"), Some(&token))
            .await
            .unwrap()
            > 0
    );

    // A job the client port did not see (submitted on the internal port) is answered as one
    // that does not exist, and is not cancelled.
    let mut internal = SchedulerGrpcClient::connect(ports().1.clone())
        .await
        .unwrap();
    let answer = internal
        .execute_query(submit(public_query().await))
        .await
        .unwrap()
        .into_inner();
    let Some(execute_query_result::Result::Success(other)) = answer.result else {
        panic!("the internal port refused a public query: {answer:?}");
    };
    let other_locations = finished(&mut internal, &other.job_id).await;
    let nonexistent = "zzzzzzz".to_string();
    let not_found = |err: tonic::Status, id: &str| {
        assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
        err.message().replace(id, "ID")
    };
    let status = |id: String| {
        let mut client = client.clone();
        async move {
            client
                .get_job_status(authorised(tonic::Request::new(GetJobStatusParams {
                    job_id: id,
                })))
                .await
                .unwrap_err()
        }
    };
    let cancel = |id: String| {
        let mut client = client.clone();
        async move {
            client
                .cancel_job(authorised(tonic::Request::new(CancelJobParams {
                    job_id: id,
                })))
                .await
                .unwrap_err()
        }
    };
    assert_eq!(
        not_found(status(other.job_id.clone()).await, &other.job_id),
        not_found(status(nonexistent.clone()).await, &nonexistent)
    );
    assert_eq!(
        not_found(cancel(other.job_id.clone()).await, &other.job_id),
        not_found(cancel(nonexistent.clone()).await, &nonexistent)
    );
    let other_location = other_locations
        .iter()
        .find(|l| l.partition_stats.as_ref().is_some_and(|s| s.num_rows > 0))
        .expect("a final partition with rows");
    let err = do_get(ticket(other_location, "localhost"), Some(&token))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    unauthenticated(
        do_get(ticket(other_location, "localhost"), None).await,
        "do_get of another job without credentials",
    );
    assert_eq!(
        finished(&mut internal, &other.job_id).await.len(),
        other_locations.len(),
        "the other job was not cancelled"
    );

    // The analyst may cancel the analyst's own job.
    client
        .cancel_job(authorised(tonic::Request::new(CancelJobParams {
            job_id: job_id.clone(),
        })))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_locked_cluster_shows_a_jobs_end_on_the_analysts_schedule() {
    // A locked cluster whose owner sets a release quantum of 2 s. A query of the public table
    // finishes on the executors long before; the client port shows it running until 2 s after
    // its submission (its status, its end's stamp, a fetch of its partitions), then ended, so
    // the moment an analyst sees says nothing of how long the job ran. Without the schedule
    // the job's success showed as soon as it finished.
    const QUANTUM: std::time::Duration = std::time::Duration::from_secs(2);
    let Scheduled {
        url,
        bearer,
        client,
        internal,
    } = scheduled_cluster("scheduled", QUANTUM).await;
    // Submits `query` as the analyst: its job id, and when (monotonic, and ms since the epoch).
    let submit_job = |query: Query| {
        let mut client = client.clone();
        let bearer = bearer.clone();
        async move {
            let started = std::time::Instant::now();
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64;
            let answer = client
                .execute_query(with_authorization(submit(query), Some(&bearer)))
                .await
                .unwrap()
                .into_inner();
            let Some(execute_query_result::Result::Success(success)) = answer.result else {
                panic!("the query was refused: {answer:?}");
            };
            (success.job_id, started, wall)
        }
    };
    // The job's end as the scheduler has it, and as the client port shows it.
    let on_scheduler = |job_id: String| ended_status(internal.clone(), job_id, None);
    let on_port = |job_id: String| ended_status(client.clone(), job_id, Some(bearer.clone()));
    // Cancels the job (submitted at `started`) before its release and sees it shown
    // cancelled at the release, as a running job cancelled then would be.
    let cancelled_at_release = |job_id: String, started: std::time::Instant| {
        let mut client = client.clone();
        let bearer = bearer.clone();
        async move {
            client
                .cancel_job(with_authorization(
                    tonic::Request::new(CancelJobParams {
                        job_id: job_id.clone(),
                    }),
                    Some(&bearer),
                ))
                .await
                .unwrap();
            assert!(
                started.elapsed() < QUANTUM,
                "the cancellation came too late"
            );
            let (shown, _) = ended_status(client, job_id, Some(bearer)).await;
            assert!(
                started.elapsed() >= QUANTUM,
                "shown ended before the release"
            );
            assert!(
                matches!(&shown, job_status::Status::Failed(f) if f.error == "Cancelled"),
                "a job cancelled before its end was shown: {shown:?}"
            );
        }
    };

    // 1. A job's success is shown at its release, not when it finished.
    let (job_id, started, wall) = submit_job(public_query().await).await;
    let job_status::Status::Successful(finished) = on_scheduler(job_id.clone()).await.0 else {
        panic!("the public query failed");
    };
    let ran = started.elapsed();
    assert!(
        ran < QUANTUM / 2,
        "the job took {ran:?}: too long for this test to tell a held end"
    );
    // Its final partitions, where the executor holds them, fetched with the analyst's
    // credentials: refused while the end is held, as a job still running.
    let location = finished
        .partition_location
        .iter()
        .find(|l| l.partition_stats.as_ref().is_some_and(|s| s.num_rows > 0))
        .expect("a final partition with rows")
        .clone();
    let host = location.executor_meta.as_ref().unwrap().host.clone();
    let early = do_get_at(&url, ticket(&location, &host), Some(&bearer)).await;
    assert!(started.elapsed() < QUANTUM, "the check came too late");
    assert_eq!(
        early.map_err(|e| e.code()),
        Err(tonic::Code::PermissionDenied),
        "a fetch before the job's end is shown"
    );
    let (shown, before) = on_port(job_id).await;
    let seen = started.elapsed();
    let job_status::Status::Successful(shown) = shown else {
        panic!("shown as {shown:?}");
    };
    for status in &before {
        if let job_status::Status::Running(running) = status {
            assert!(
                running.scheduler.is_empty(),
                "a running job names its scheduler: {running:?}"
            );
        }
    }
    assert!(
        seen >= QUANTUM && seen < QUANTUM * 2,
        "the end was shown after {seen:?}, not at the 2 s release"
    );
    // The port's clock starts after this client's (`wall`); each stamp is truncated to the
    // millisecond, hence the 1 ms.
    assert!(
        shown.ended_at + 1 >= wall + QUANTUM.as_millis() as u64
            && shown.ended_at > finished.ended_at,
        "the end is stamped at its release: {} against the scheduler's {} (submitted at {wall})",
        shown.ended_at,
        finished.ended_at,
    );
    assert!(
        do_get_at(&url, ticket(&location, &host), Some(&bearer))
            .await
            .unwrap()
            > 0,
        "the released partition is served"
    );

    // 2. A job cancelled after it finished, before its end was shown, is shown cancelled; its
    // partitions are not served.
    let (job_id, started, _) = submit_job(public_query().await).await;
    let job_status::Status::Successful(finished) = on_scheduler(job_id.clone()).await.0 else {
        panic!("the public query failed");
    };
    cancelled_at_release(job_id, started).await;
    let location = &finished.partition_location[0];
    let host = location.executor_meta.as_ref().unwrap().host.clone();
    assert_eq!(
        do_get_at(&url, ticket(location, &host), Some(&bearer))
            .await
            .map_err(|e| e.code()),
        Err(tonic::Code::PermissionDenied),
        "a cancelled job's partition"
    );

    // A job that failed on its own (a DP call past the analyst's budget, refused when the
    // scheduler plans the job), cancelled before its failure was shown, is shown cancelled
    // too.
    // Planned without binding, as the locked cluster's clients send DP calls.
    let plan = client_tables()
        .await
        .state()
        .create_logical_plan("SELECT dp_count(region, 1000.0) FROM regions")
        .await
        .unwrap();
    let failing = Query::LogicalPlan(
        LogicalPlanNode::try_from_logical_plan(&plan, &DpLogicalCodec::default())
            .unwrap()
            .encode_to_vec(),
    );
    let (job_id, started, _) = submit_job(failing).await;
    let failed = on_scheduler(job_id.clone()).await.0;
    assert!(
        matches!(&failed, job_status::Status::Failed(f) if f.error != "Cancelled"),
        "a call past the budget: {failed:?}"
    );
    cancelled_at_release(job_id, started).await;

    // Submits the public query as the analyst with push tracking: the job's status stream.
    let push_public_query = || {
        let mut client = client.clone();
        let bearer = bearer.clone();
        async move {
            client
                .execute_query_push(with_authorization(
                    submit(public_query().await),
                    Some(&bearer),
                ))
                .await
                .unwrap()
                .into_inner()
        }
    };
    // 3. Push tracking shows the same: its last update, the success, comes at the release.
    let started = std::time::Instant::now();
    let mut updates = push_public_query().await;
    let mut last = None;
    while let Some(update) = updates.message().await.unwrap() {
        last = update.status.and_then(|s| s.status);
    }
    assert!(
        matches!(last, Some(job_status::Status::Successful(_))),
        "{last:?}"
    );
    let seen = started.elapsed();
    assert!(
        seen >= QUANTUM && seen < QUANTUM * 2,
        "push: the end was shown after {seen:?}"
    );
    // 4. A push client that goes away before its job's end is shown (its status stream dropped
    // after the first update) never cancels the job itself: the port does, and the job's end
    // is shown cancelled. Ballista's client cannot cancel a job whose submission was in
    // flight when it stopped (it has no id yet); without this the job ran to its end.
    let mut updates = push_public_query().await;
    let first = updates.message().await.unwrap().expect("a first update");
    let job_id = first.status.expect("a status").job_id;
    drop(updates);
    let (shown, _) = on_port(job_id.clone()).await;
    assert!(
        matches!(&shown, job_status::Status::Failed(f) if f.error == "Cancelled"),
        "a job whose push client went away: {shown:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_locked_cluster_cancels_a_job_whose_pull_client_went_away() {
    // A pull client asks for its job's status every 50 ms until it sees the end; one that stops
    // asking has gone away (Ctrl-C, possibly while its submission was in flight, when it has no
    // job id to cancel). The port cancels such a job after 5 s unasked for (`STATUS_LEASE`),
    // as the analyst's own cancellation. The owner's release quantum of 8 s holds both jobs'
    // ends past that: job A, never asked for again, is shown cancelled at its release; job B,
    // submitted with it and asked for throughout, is shown successful. Without the watch both
    // were shown successful.
    const QUANTUM: std::time::Duration = std::time::Duration::from_secs(8);
    const LEASE: std::time::Duration = std::time::Duration::from_secs(5);
    let Scheduled {
        bearer,
        client,
        internal,
        ..
    } = scheduled_cluster("lease", QUANTUM).await;
    let started = std::time::Instant::now();
    let mut job_ids = Vec::new();
    for _ in 0..2 {
        let answer = client
            .clone()
            .execute_query(with_authorization(
                submit(public_query().await),
                Some(&bearer),
            ))
            .await
            .unwrap()
            .into_inner();
        let Some(execute_query_result::Result::Success(success)) = answer.result else {
            panic!("the query was refused: {answer:?}");
        };
        job_ids.push(success.job_id);
    }
    let (unwatched, watched) = (job_ids[0].clone(), job_ids[1].clone());
    // B, asked for every 20 ms, is shown successful at its release.
    let (shown, _) = ended_status(client.clone(), watched, Some(bearer.clone())).await;
    assert!(
        matches!(shown, job_status::Status::Successful(_)),
        "a job whose client kept asking: {shown:?}"
    );
    let seen = started.elapsed();
    assert!(
        seen >= QUANTUM && seen > LEASE * 3 / 2,
        "B's end came after {seen:?}: too early for A's lease to have run out"
    );
    // A ended on the scheduler and was not stopped there (it had ended); its end, not yet
    // shown to its client, is shown cancelled.
    let (on_scheduler, _) = ended_status(internal, unwatched.clone(), None).await;
    assert!(
        matches!(on_scheduler, job_status::Status::Successful(_)),
        "A on the scheduler: {on_scheduler:?}"
    );
    let (shown, _) = ended_status(client, unwatched, Some(bearer)).await;
    assert!(
        matches!(&shown, job_status::Status::Failed(f) if f.error == "Cancelled"),
        "a job whose pull client went away: {shown:?}"
    );
}

/// A locked cluster of its own whose owner declares `regions` public and sets the release
/// quantum `quantum`, with the analyst logged in on its client port.
struct Scheduled {
    /// The client port, `http://`.
    url: String,
    /// The analyst's `authorization` value.
    bearer: String,
    client: SchedulerGrpcClient<tonic::transport::Channel>,
    /// A client of the internal port (the scheduler's own view of each job).
    internal: SchedulerGrpcClient<tonic::transport::Channel>,
}

async fn scheduled_cluster(name: &str, quantum: std::time::Duration) -> Scheduled {
    let (client_url, internal_url) = own_cluster(
        name,
        &format!(
            "[[table]]\nname = \"regions\"\nlocation = \"{}\"\nprotection = \"public\"\n\n\
             [limits]\nrelease_quantum_ms = {}\n",
            data("regions.csv"),
            quantum.as_millis(),
        ),
    )
    .await;
    let url = client_url.replace("df://", "http://");
    let bearer = format!("Bearer {}", log_in(&url, "team", PASSWORD).await.unwrap());
    Scheduled {
        client: SchedulerGrpcClient::connect(url.clone()).await.unwrap(),
        internal: SchedulerGrpcClient::connect(internal_url.replace("df://", "http://"))
            .await
            .unwrap(),
        url,
        bearer,
    }
}

/// The status job `job_id` ends with (succeeded or failed) on the scheduler `client` talks to,
/// asked with `authorization` set to `value`, polled every 20 ms; and every status before it.
async fn ended_status(
    mut client: SchedulerGrpcClient<tonic::transport::Channel>,
    job_id: String,
    value: Option<String>,
) -> (job_status::Status, Vec<job_status::Status>) {
    let mut before = Vec::new();
    loop {
        let request = with_authorization(
            tonic::Request::new(GetJobStatusParams {
                job_id: job_id.clone(),
            }),
            value.as_deref(),
        );
        let status = client
            .get_job_status(request)
            .await
            .unwrap()
            .into_inner()
            .status
            .and_then(|s| s.status);
        match status {
            Some(ended @ (job_status::Status::Successful(_) | job_status::Status::Failed(_))) => {
                return (ended, before)
            }
            Some(other) => before.push(other),
            None => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A locked cluster of its own with one executor, in `dir()/name`: the owner's configuration
/// `owner` (tables, limits) and analyst `team` (password [`PASSWORD`], epsilon budget 10).
/// Returns the client port's and the internal port's `df://` URLs.
async fn own_cluster(name: &str, owner: &str) -> (String, String) {
    locked::start_local_cluster_with_internal(&opened(name, owner).await, 1, 2)
        .await
        .unwrap()
}

/// The locked cluster's owner side, in `dir()/name`: the owner's configuration `owner` (tables,
/// limits, server) and analyst `team` (password [`PASSWORD`], epsilon budget 10).
async fn opened(name: &str, owner: &str) -> std::sync::Arc<LockedCluster> {
    let dir = dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("owner.toml");
    std::fs::write(
        &config,
        format!(
            "{owner}\n[[analyst]]\nname = \"team\"\npassword = \"{PASSWORD}\"\nepsilon_budget = 10.0\nledger = \"{}\"\n",
            dir.join("team.ledger").display(),
        ),
    )
    .unwrap();
    LockedCluster::open(OwnerConfig::load(&config).unwrap(), None)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_protected_join_with_an_empty_side_is_answered() {
    // Ballista's adaptive planner replaced a join whose side came out empty by an empty plan,
    // skipping the other side (work that depends on the rows), and under the bounding it then
    // added a shuffle stage over the empty plan at each re-plan: thousands of stages until the
    // owner's deadline, an error where the same query with the person's rows was answered.
    // The cluster plans jobs statically, whatever the client sends.
    let (url, _) = own_cluster(
        "empty-join",
        &format!(
            "[[table]]\nname = \"visits\"\nlocation = \"{}\"\nunit = \"patient_id\"\n\
             columns = [\"visit_id BIGINT\", \"patient_id BIGINT\", \"region VARCHAR\", \"month VARCHAR\", \"exposed BOOLEAN\", \"outcome BOOLEAN\"]\n\n\
             [limits]\nquery_timeout_seconds = 60\n",
            data("visits.csv"),
        ),
    )
    .await;
    let ctx = remote_context_as(&url, "team", PASSWORD).await.unwrap();
    ctx.register_csv("visits", &data("visits.csv"), CsvReadOptions::new())
        .await
        .unwrap();
    for (who, setting) in [
        ("absent", ""),
        (
            "absent, adaptive asked for",
            "SET ballista.planner.adaptive.enabled = true; ",
        ),
        ("present", ""),
    ] {
        let id = if who == "present" { 100001 } else { -1 };
        let sql = format!(
            "{setting}SELECT dp_count(a.patient_id, 0.01) FROM (SELECT * FROM visits WHERE \
             patient_id = {id}) a JOIN visits b ON a.patient_id = b.patient_id"
        );
        let started = std::time::Instant::now();
        let answered =
            tokio::time::timeout(std::time::Duration::from_secs(20), run(&ctx, &sql)).await;
        assert!(
            matches!(answered, Ok(Ok(1))),
            "{who}: {answered:?} after {:?}",
            started.elapsed()
        );
    }
}

/// A second locked cluster without executors, in `dir()/name`: the public `regions` table,
/// analyst `team` (password [`PASSWORD`]), and `server` as the `[server]` section's body.
/// Returns the client port's `http://` URL.
async fn second_cluster(name: &str, server: &str) -> String {
    let owner = format!(
        "[[table]]\nname = \"regions\"\nlocation = \"{}\"\nprotection = \"public\"\n\n\
         [server]\n{server}\n",
        data("regions.csv"),
    );
    locked::start_local_cluster(&opened(name, &owner).await, 0, 1)
        .await
        .unwrap()
        .replace("df://", "http://")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_logins_back_off_as_on_dp_server() {
    // A second locked cluster (no executors) whose owner makes every failed login wait: the
    // first failure starts a wait of 1 s, during which even the right password is refused
    // without a password check.
    let url = second_cluster("backoff", "login_name_failures = 0").await;
    let mut attempts = Vec::new();
    for password in ["wrong", "wrong", PASSWORD] {
        attempts.push(log_in(&url, "team", password).await.unwrap_err());
    }
    assert!(
        attempts[0]
            .message()
            .contains("invalid user name or password"),
        "{}",
        attempts[0]
    );
    for err in &attempts[1..] {
        assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err}");
        assert!(err.message().contains("too many failed logins"), "{err}");
    }
}

/// The client port has `dp-server`'s connection limits (issue 42): strangers' connections
/// that never log in (sending nothing, or only the HTTP/2 preface) are closed at the end of
/// `login_window_seconds`, and the analyst, logged in on a connection of their own, keeps it
/// and is answered. Before, the port was Ballista's plain tonic server: no idle connection was
/// ever closed, so enough of them locked the analyst out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_locked_cluster_closes_strangers_idle_connections() {
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let url = second_cluster("idle", "login_window_seconds = 2").await;
    let address = url.trim_start_matches("http://").to_string();
    let opened = std::time::Instant::now();
    let mut idle = Vec::new();
    for preface in [&b""[..], b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"] {
        for _ in 0..3 {
            let mut tcp = tokio::net::TcpStream::connect(&address).await.unwrap();
            tcp.write_all(preface).await.unwrap();
            idle.push(tcp);
        }
    }
    // The analyst logs in (a connection of its own) and keeps being answered past the window.
    log_in(&url, "team", PASSWORD).await.unwrap();
    for mut tcp in idle {
        let mut buffer = [0u8; 256];
        let closed = loop {
            match tokio::time::timeout(Duration::from_secs(6), tcp.read(&mut buffer)).await {
                Err(_) => break false,
                Ok(Ok(0) | Err(_)) => break true,
                Ok(Ok(_)) => {}
            }
        };
        assert!(closed, "a stranger's idle connection is closed");
    }
    let took = opened.elapsed();
    assert!(
        took >= Duration::from_millis(1800) && took < Duration::from_secs(5),
        "closed {took:?} after they were opened, not at the 2 s window"
    );
    log_in(&url, "team", PASSWORD).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_locked_cluster_needs_its_analysts_credential() {
    let err = refused_cluster("no-credential", "", "").await;
    assert!(err.contains("no password or password_hash"), "{err}");
}

/// A locked cluster refuses `in_memory` tables: its executors read the files (a copy in the
/// scheduler's memory would travel in every plan).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_locked_cluster_refuses_in_memory_tables() {
    let password = format!("password = \"{PASSWORD}\"\n");
    let err = refused_cluster("in-memory", "in_memory = true\n", &password).await;
    assert!(
        err.contains("table 'regions'") && err.contains("in_memory"),
        "{err}"
    );
}

/// The error of opening a locked cluster over the public `regions` table (`table` added to
/// its section) and analyst `team` (`analyst` added to hers), in a directory named `name`.
async fn refused_cluster(name: &str, table: &str, analyst: &str) -> String {
    let dir = dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("owner.toml");
    std::fs::write(
        &config,
        format!(
            "[[table]]\nname = \"regions\"\nlocation = \"{}\"\nprotection = \"public\"\n{table}\n\
             [[analyst]]\nname = \"team\"\n{analyst}epsilon_budget = 1.0\nledger = \"{}\"\n",
            data("regions.csv"),
            dir.join("team.ledger").display(),
        ),
    )
    .unwrap();
    LockedCluster::open(OwnerConfig::load(&config).unwrap(), None)
        .await
        .unwrap_err()
        .to_string()
}
