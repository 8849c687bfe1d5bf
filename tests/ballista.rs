//! The DP functions on an in-process Apache Ballista cluster (one scheduler, two executors,
//! real gRPC and Arrow Flight shuffles on loopback), against a single DataFusion node.
#![cfg(feature = "ballista")]

mod common;

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_dp::distributed::{remote_context, start_local_cluster};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tokio::sync::OnceCell;

/// Rows of the test table: group `g = v / 4` has exactly one row in each of the four Parquet
/// files (`v % 4`), so every group's partial states come from four partitions.
const ROWS: i64 = 8000;
const GROUPS: i64 = ROWS / 4;
const FILES: i64 = 4;

/// One cluster for the whole test binary (each test gets its own client session). Its servers
/// run on a runtime of their own: each test's runtime ends with the test.
fn cluster() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let (started, url) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                started.send(start_local_cluster(2, 2).await).unwrap();
                std::future::pending::<()>().await
            })
        });
        url.recv().unwrap().expect("cluster starts")
    })
}

/// The test data as four Parquet files, written once.
async fn data() -> &'static Path {
    static DIR: OnceCell<PathBuf> = OnceCell::const_new();
    DIR.get_or_init(|| async {
        let dir = common::scratch("ballista");
        let ctx = SessionContext::new();
        for file in 0..FILES {
            let sql = format!(
                "COPY (SELECT value / 4 AS g, value % 40 AS region, value % 7 < 3 AS outcome,
                              value % 5 < 2 AS exposed, value / 2 AS patient
                       FROM range(0, {ROWS}) WHERE value % {FILES} = {file})
                 TO '{}/t/part-{file}.parquet' STORED AS PARQUET",
                dir.display()
            );
            ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        }
        let keys = format!(
            "COPY (SELECT value AS region FROM range(38, 42)) TO '{}/keys.parquet' STORED AS PARQUET",
            dir.display()
        );
        ctx.sql(&keys).await.unwrap().collect().await.unwrap();
        dir
    })
    .await
}

async fn register(ctx: &SessionContext) {
    let dir = data().await;
    ctx.register_parquet(
        "t",
        dir.join("t").to_str().unwrap(),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    ctx.register_parquet(
        "keys",
        dir.join("keys.parquet").to_str().unwrap(),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
}

/// A client session on the cluster, four partitions per scan.
async fn remote() -> SessionContext {
    let ctx = remote_context(cluster()).await.unwrap();
    ctx.sql("SET datafusion.execution.target_partitions = 4")
        .await
        .unwrap();
    register(&ctx).await;
    ctx
}

/// A single-node session reading the same files in one partition.
async fn local() -> SessionContext {
    let ctx = datafusion_dp::cli::session(SessionConfig::new().with_target_partitions(1)).unwrap();
    register(&ctx).await;
    ctx
}

async fn run(ctx: &SessionContext, sql: &str) -> String {
    let mut text = String::new();
    for statement in sql.split(';').filter(|s| !s.trim().is_empty()) {
        let batches = ctx
            .sql(statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"))
            .collect()
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
        text = pretty_format_batches(&batches).unwrap().to_string();
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seeded_queries_give_the_single_node_result() {
    // The same seed must give the same released values on the cluster (four partitions, two
    // executors, a hash shuffle between partial and final aggregates) as on one node reading
    // one partition: noise is keyed by the group and drawn once, after the merge. Covers the
    // 2x2 statistics with intervals, odds ratios, counts, contribution bounding (every
    // patient has rows in two regions, one of which bounding drops; no patient has more rows
    // in a region than the bound, so the random row sample keeps every row), private group selection,
    // call options, and a DP scalar function resolved on the executors.
    let queries = [
        "SET dp.public_groups = 'assert';
         SELECT region, dp_rr_ci(outcome, exposed, 1.0) AS rr, dp_count(1, 0.5) AS n
         FROM t GROUP BY region ORDER BY region",
        "SET dp.public_groups = 'assert';
         SELECT region, dp_or_ci(outcome, exposed, 2.0, 'mechanism=gaussian, delta=1e-6') AS ci,
                dp_odds_ratio(outcome, exposed, 1.0) AS odds
         FROM t GROUP BY region ORDER BY region",
        // The risk difference and the log / bootstrap intervals (bound calls round-trip with
        // their interval method; the bootstrap is a function of the released table).
        "SET dp.public_groups = 'assert';
         SELECT region, dp_rd_ci(outcome, exposed, 1.0, 'ci_method=bootstrap') AS rd,
                dp_risk_difference(outcome, exposed, 0.5) AS d,
                dp_rr_ci(outcome, exposed, 1.0, 'ci_method=log') AS l
         FROM t GROUP BY region ORDER BY region",
        "SELECT dp_relative_risk(outcome, exposed, 0.5) AS rr, dp_count(patient, 1.0) AS n FROM t",
        "SET dp.protected_tables = 't(patient)'; SET dp.max_rows_per_unit = 2; SET dp.public_groups = 'assert';
         SELECT region, dp_count(1, 1.0) AS n FROM t GROUP BY region ORDER BY region",
        "SET dp.selection_epsilon = 1.0; SET dp.selection_delta = 1e-6;
         SELECT region, dp_count(1, 1.0) AS n FROM t GROUP BY region ORDER BY region",
        "SELECT rr_ci_katz(30, 100, 20, 100, 0.95) AS katz",
        // A table of public keys: keys 38..41 are declared (40 and 41 have no rows: noise on
        // zero), every other region is dropped.
        "SET dp.public_groups = 'keys'; SET dp.public_tables = 'keys';
         SELECT region, dp_count(1, 1.0) AS n, dp_rr_ci(outcome, exposed, 1.0)['estimate'] AS rr
         FROM t GROUP BY region ORDER BY region",
    ];
    for sql in queries {
        let seeded = format!("SET dp.seed = 7; {sql}");
        let single = run(&local().await, &seeded).await;
        let distributed = run(&remote().await, &seeded).await;
        assert!(single.lines().count() > 4, "{single}");
        assert_eq!(distributed, single, "{sql}");
    }
}

/// Planning (`epsilon_for_half_width`) reads the session's `dp.*` options where it runs; on
/// the cluster that is an executor, so the client's `SET`s must travel with the plan: the
/// per-cell calibration and a 90% interval need another ε than the defaults, on one node and
/// on the cluster alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn planning_on_the_cluster_follows_the_clients_options() {
    let sql = "SET dp.public_tables = 'keys';
               SELECT region, epsilon_for_half_width(200 + region, 300, 0.3, 0.2, 0.5,
                                                     'mechanism=gaussian, delta=1e-6') AS e
               FROM keys ORDER BY region";
    let set = "SET dp.gaussian_calibration = 'per_cell'; SET dp.confidence = 0.9;";
    let defaults = run(&local().await, sql).await;
    let single = run(&local().await, &format!("{set} {sql}")).await;
    assert_ne!(single, defaults, "the options change the plan on one node");
    let distributed = run(&remote().await, &format!("{set} {sql}")).await;
    assert_eq!(distributed, single);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn noise_is_drawn_once_per_group_after_the_shuffle() {
    // Secure noise on the cluster. Each of the 2000 groups has one row in each of four files
    // (four partitions): noise added per partial state would carry four draws (variance ×4).
    // A grouped dp_count at ε = 1 uses ε/2 per group: discrete Laplace of scale 2, exact
    // variance 2q/(1−q)², q = e^{-1/2}, ≈ 7.84. The sample variance over 2000 groups has
    // standard error sqrt((μ4 − σ⁴)/n), estimated from the sample (≈ 0.4); the assertion
    // allows 5 of them, far below the ×4 alternative (≈ 31). The mean noise is 0 within 5
    // standard errors sqrt(σ²/n) ≈ 0.06.
    let ctx = remote().await;
    run(&ctx, "SET dp.public_groups = 'assert'").await;
    // The test reads the exact count beside the noisy one: t is declared public (its DP
    // calibration is the same as for a table protected row by row: one row, one group).
    run(&ctx, "SET dp.public_tables = 't'").await;
    let batches = ctx
        .sql("SELECT dp_count(1, 1.0) - count(*) AS noise, count(*) AS n FROM t GROUP BY g")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut noise = Vec::new();
    for b in &batches {
        let column = b.column(0).as_primitive::<Int64Type>();
        let sizes = b.column(1).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            assert_eq!(sizes.value(i), FILES, "every group has one row per file");
            noise.push(column.value(i) as f64);
        }
    }
    assert_eq!(noise.len() as i64, GROUPS);
    let (mean, var, _, se) = common::moments(&noise);
    let n = noise.len() as f64;
    let q = (-0.5f64).exp();
    let expected = 2.0 * q / (1.0 - q).powi(2);
    assert!(
        (var - expected).abs() < 5.0 * se,
        "variance {var}, expected {expected} (se {se})"
    );
    assert!(
        mean.abs() < 5.0 * (expected / n).sqrt(),
        "mean noise {mean}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_budget_is_charged_once_per_query_on_the_client() {
    // The client binds and charges; the scheduler re-optimises the bound plan and must not
    // charge again. The ledger is shared by every node that could charge (the setting travels
    // with the query), so it holds exactly one entry per query.
    let ledger = data().await.join("budget.ledger");
    let _ = std::fs::remove_file(&ledger);
    let ctx = remote().await;
    run(
        &ctx,
        &format!(
            "SET dp.epsilon_budget = 2.5; SET dp.ledger = '{}'; SET dp.public_groups = 'assert'",
            ledger.display()
        ),
    )
    .await;
    for _ in 0..2 {
        run(
            &ctx,
            "SELECT region, dp_rr_ci(outcome, exposed, 1.0) FROM t GROUP BY region",
        )
        .await;
    }
    let entries = datafusion_dp::sql::accounting::ledger::read(&ledger).unwrap();
    let charged: Vec<f64> = entries.iter().map(|e| e.epsilon).collect();
    assert_eq!(charged, vec![1.0, 1.0]);
    // What is left (0.5) does not cover a third query: refused before it reaches the cluster.
    let refused = match ctx.sql("SELECT dp_count(1, 1.0) FROM t").await {
        Ok(df) => df.collect().await.map(|_| ()),
        Err(e) => Err(e),
    };
    let err = refused.unwrap_err().to_string();
    assert!(err.contains("budget"), "{err}");
    assert_eq!(
        datafusion_dp::sql::accounting::ledger::read(&ledger)
            .unwrap()
            .len(),
        2
    );
    // dp_budget() reads the client's session: it runs on the client, not on the cluster.
    let status = run(
        &ctx,
        "SELECT entry, epsilon FROM dp_budget() WHERE entry <> 'charge'",
    )
    .await;
    for line in [
        "| budget    | 2.5     |",
        "| spent     | 2.0     |",
        "| remaining | 0.5     |",
    ] {
        assert!(status.contains(line), "{status}");
    }
}

#[tokio::test]
async fn the_release_guard_travels_with_the_stage() {
    // The physical plan of a grouped DP query holds a ReleaseOnceExec above the noise-drawing
    // aggregation; the physical codec carries it to the executors (each decoded copy runs each
    // of its partitions once).
    use datafusion_proto::physical_plan::AsExecutionPlan;
    use datafusion_proto::protobuf::PhysicalPlanNode;
    let ctx = SessionContext::new_with_state(
        datafusion_dp::distributed::session_state(datafusion_dp::distributed::session_config())
            .unwrap(),
    );
    run(
        &ctx,
        "CREATE TABLE r (g INT, x INT) AS VALUES (1, 1), (2, 2); SET dp.public_groups = 'assert'",
    )
    .await;
    let plan = ctx
        .sql("SELECT g, dp_count(x, 1.0) FROM r GROUP BY g")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let shown = |p: &dyn datafusion::physical_plan::ExecutionPlan| {
        datafusion::physical_plan::displayable(p)
            .indent(false)
            .to_string()
    };
    assert!(shown(plan.as_ref()).contains("ReleaseOnceExec"));
    let codec = datafusion_dp::distributed::DpPhysicalCodec::default();
    let node = PhysicalPlanNode::try_from_physical_plan(plan.clone(), &codec).unwrap();
    let back = node
        .try_into_physical_plan(&ctx.task_ctx(), &codec)
        .unwrap();
    assert_eq!(shown(back.as_ref()), shown(plan.as_ref()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn total_expressions_run_on_the_executors() {
    // In a DP query a cast, a function and an operator that can fail on a row are made total
    // (`try_cast_to_Int32`; `regexp_like` simplifies to the `~` operator, made `try_regex_match`;
    // `try_divide`: NULL where they fail). The last two are functions of this crate's: the
    // executors must decode them as themselves (by name alone they would not exist there).
    // Every third patient's division fails (by zero).
    let sql = "SET dp.public_groups = 'assert';
         SELECT region, dp_count(1, 1.0) FILTER (WHERE CAST(CAST(region AS VARCHAR) || 'x' AS INT) IS NULL
                AND regexp_like(CAST(patient AS VARCHAR), '^1') AND patient / (patient % 3) >= 0) AS n
         FROM t GROUP BY region ORDER BY region";
    let ctx = remote().await;
    let plan = run(
        &ctx,
        &format!(
            "{}; EXPLAIN {}",
            &sql[..sql.find(';').unwrap()],
            &sql[sql.find(';').unwrap() + 1..]
        ),
    )
    .await;
    for total in ["try_cast_to_Int32", "try_regex_match", "try_divide"] {
        assert!(plan.contains(total), "{total} missing from {plan}");
    }
    let released = run(&ctx, sql).await;
    assert_eq!(released.lines().count(), 40 + 4, "{released}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bounding_runs_on_the_executors_after_one_shuffle_by_the_unit() {
    // Contribution bounding is one operator (issue 43): its input is hash-partitioned by the
    // unit, which Ballista makes one shuffle; the operator runs in the next stage, on the
    // executors, below the partial aggregate. The distributed plan shows it.
    let ctx = remote().await;
    let sql = "SET dp.protected_tables = 't(patient)'; SET dp.public_groups = 'assert';
         EXPLAIN SELECT region, dp_count(1, 1.0) AS n FROM t GROUP BY region";
    let text = run(&ctx, sql).await;
    let distributed = text
        .split("distributed_plan")
        .nth(1)
        .unwrap_or_else(|| panic!("no distributed plan: {text}"));
    // The stages: each line under its `Stage[stage_id=...]` header.
    let mut stages: Vec<Vec<&str>> = vec![];
    for line in distributed.lines() {
        if line.contains("Stage[stage_id=") {
            stages.push(vec![]);
        } else if let Some(stage) = stages.last_mut() {
            stage.push(line);
        }
    }
    let has = |stage: &Vec<&str>, what: &str| stage.iter().filter(|l| l.contains(what)).count();
    let bounding: Vec<&Vec<&str>> = stages
        .iter()
        .filter(|s| has(s, "BoundContributionsExec: unit=patient") == 1)
        .collect();
    assert_eq!(bounding.len(), 1, "{distributed}");
    // It reads one shuffle, written by a stage that hash-partitions the scan by the unit.
    let reads = has(bounding[0], "UnresolvedShuffleExec") + has(bounding[0], "ShuffleReaderExec");
    assert_eq!(reads, 1, "{distributed}");
    let by_unit = stages
        .iter()
        .filter(|s| has(s, "ShuffleWriterExec: partitioning=Hash([patient@") == 1)
        .count();
    assert_eq!(by_unit, 1, "{distributed}");
    assert!(!distributed.contains("SortExec"), "{distributed}");
}
