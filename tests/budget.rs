//! Privacy budget enforcement end to end: concurrent queries cannot overspend, charges survive
//! in the ledger across sessions and a killed process, a damaged ledger is refused, and
//! EXPLAIN / failed / cancelled / re-planned queries cost what the docs say.

use arrow::array::{Array, AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Float64Type, Schema, SchemaRef};
use datafusion::catalog::streaming::StreamingTable;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::prelude::SessionContext;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A fresh session with the DP functions and a small table `t(x)`.
async fn session() -> SessionContext {
    let ctx = SessionContext::new();
    datafusion_dp::register(&ctx).unwrap();
    // The test tables' GROUP BY keys are public.
    ctx.sql("SET dp.public_groups = 'assert'").await.unwrap();
    ctx.sql("CREATE TABLE t (x INT) AS VALUES (1), (2), (3), (4)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    ctx
}

async fn run(ctx: &SessionContext, sql: &str) -> datafusion::error::Result<Vec<RecordBatch>> {
    ctx.sql(sql).await?.collect().await
}

/// `(entry, epsilon, delta, query)` rows of `dp_budget()`.
async fn budget_rows(
    ctx: &SessionContext,
) -> Vec<(String, Option<f64>, Option<f64>, Option<String>)> {
    let batches = run(ctx, "SELECT entry, epsilon, delta, query FROM dp_budget()")
        .await
        .unwrap();
    let mut rows = Vec::new();
    for b in &batches {
        let entry = b.column(0).as_string::<i32>();
        let eps = b.column(1).as_primitive::<Float64Type>();
        let delta = b.column(2).as_primitive::<Float64Type>();
        let query = b.column(3).as_string::<i32>();
        for i in 0..b.num_rows() {
            let f = |a: &arrow::array::Float64Array| (!a.is_null(i)).then(|| a.value(i));
            rows.push((
                entry.value(i).to_string(),
                f(eps),
                f(delta),
                (!query.is_null(i)).then(|| query.value(i).to_string()),
            ));
        }
    }
    rows
}

/// Spent `(epsilon, delta)` and the number of charges, from `dp_budget()`.
async fn spent(ctx: &SessionContext) -> (f64, f64, usize) {
    let rows = budget_rows(ctx).await;
    let spent = rows.iter().find(|r| r.0 == "spent").expect("a spent row");
    let charges = rows.iter().filter(|r| r.0 == "charge").count();
    (spent.1.unwrap(), spent.2.unwrap(), charges)
}

/// A unique path in the temp directory (removed by the caller's [`TempFile`]).
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        Self(std::env::temp_dir().join(format!(
            "dp-budget-{name}-{}-{nanos}-{n}.ledger",
            std::process::id()
        )))
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn sql(&self) -> String {
        format!("SET dp.ledger = '{}'", self.0.display())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn ledger_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn assert_refused(result: datafusion::error::Result<Vec<RecordBatch>>, expected: &str) {
    match result {
        Ok(_) => panic!("expected an error containing '{expected}', the query ran"),
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains(expected), "expected '{expected}' in: {text}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_queries_cannot_overspend() {
    let ctx = session().await;
    run(&ctx, "SET dp.epsilon_budget = 10").await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let ctx = ctx.clone();
            tokio::spawn(async move { run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await })
        })
        .collect();
    let mut ok = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => ok += 1,
            Err(e) => assert!(e.to_string().contains("dp budget exceeded"), "{e}"),
        }
    }
    assert_eq!(ok, 10, "exactly the budget's worth of queries may run");
    assert_eq!(spent(&ctx).await, (10.0, 0.0, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_sharing_a_ledger_cannot_overspend_together() {
    let ledger = TempFile::new("shared");
    let mut contexts = Vec::new();
    for _ in 0..2 {
        let ctx = session().await;
        run(&ctx, &ledger.sql()).await.unwrap();
        run(&ctx, "SET dp.epsilon_budget = 10").await.unwrap();
        contexts.push(ctx);
    }
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let ctx = contexts[i % 2].clone();
            tokio::spawn(async move { run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await })
        })
        .collect();
    let mut ok = 0;
    for task in tasks {
        ok += usize::from(task.await.unwrap().is_ok());
    }
    assert_eq!(ok, 10);
    // Header plus one line per charge; both sessions see every charge.
    assert_eq!(ledger_lines(ledger.path()).len(), 11);
    for ctx in &contexts {
        assert_eq!(spent(ctx).await, (10.0, 0.0, 10));
    }
}

#[tokio::test]
async fn ledger_charges_persist_across_sessions() {
    let ledger = TempFile::new("persist");
    let first = session().await;
    run(&first, &ledger.sql()).await.unwrap();
    run(&first, "SET dp.epsilon_budget = 3").await.unwrap();
    run(&first, "SET dp.delta_budget = 1e-6").await.unwrap();
    run(&first, "SELECT dp_count(x, 1.0) FROM t").await.unwrap();
    run(
        &first,
        "SELECT dp_count(x, 0.5, 'mechanism=gaussian, delta=1e-7') FROM t",
    )
    .await
    .unwrap();
    assert_eq!(ledger_lines(ledger.path()).len(), 3);

    // A second session (as after a restart) reads the charges back before spending.
    let second = session().await;
    run(&second, &ledger.sql()).await.unwrap();
    run(&second, "SET dp.epsilon_budget = 3").await.unwrap();
    run(&second, "SET dp.delta_budget = 1e-6").await.unwrap();
    let rows = budget_rows(&second).await;
    // The Gaussian call is charged the δ its noise achieves at its ε (its privacy map): at most
    // the 1e-7 asked, and close to it (the calibration raises σ only as far as it must).
    let charged_delta = rows[1].2.unwrap();
    assert!(
        charged_delta <= 1e-7 && charged_delta > 0.9e-7,
        "{charged_delta}"
    );
    assert_eq!(
        rows[1],
        ("spent".into(), Some(1.5), Some(charged_delta), None)
    );
    assert_eq!(
        (&rows[2].0, rows[2].1),
        (&"remaining".to_string(), Some(1.5))
    );
    assert!((rows[2].2.unwrap() - (1e-6 - charged_delta)).abs() < 1e-21);
    let history: Vec<_> = rows.iter().filter(|r| r.0 == "charge").collect();
    assert_eq!(history.len(), 2);
    assert_eq!(
        history[0].3.as_deref(),
        Some("dp_count(t.x, Float64(1)) FROM t")
    );
    let refused = run(&second, "SELECT dp_count(x, 2.0) FROM t").await;
    assert_refused(
        refused,
        "needs epsilon=2, delta=0; spent epsilon=1.5 of 3, delta=0.0000000",
    );
    assert_refused(
        run(&second, "SELECT dp_count(x, 2.0) FROM t").await,
        " of 0.000001; remaining epsilon=1.5",
    );
    run(&second, "SELECT dp_count(x, 1.0) FROM t")
        .await
        .unwrap();
    // The first session re-reads the ledger and sees the second session's charge.
    assert_refused(
        run(&first, "SELECT dp_count(x, 1.0) FROM t").await,
        "spent epsilon=2.5 of 3",
    );
    assert_eq!(spent(&first).await, (2.5, charged_delta, 3));
    assert_eq!(ledger_lines(ledger.path()).len(), 4);
}

#[tokio::test]
async fn session_charges_made_before_the_ledger_still_count() {
    let ledger = TempFile::new("before");
    let ctx = session().await;
    run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await.unwrap();
    run(&ctx, &ledger.sql()).await.unwrap();
    run(&ctx, "SET dp.epsilon_budget = 1.5").await.unwrap();
    assert_refused(
        run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await,
        "spent epsilon=1 of 1.5",
    );
    run(&ctx, "SELECT dp_count(x, 0.5) FROM t").await.unwrap();
    assert_eq!(spent(&ctx).await, (1.5, 0.0, 2));
    // Only the charge made with the ledger set is in the file.
    assert_eq!(ledger_lines(ledger.path()).len(), 2);
}

/// Writes a ledger with two charges through a session and returns its text.
async fn two_charge_ledger(ledger: &TempFile) -> String {
    let ctx = session().await;
    run(&ctx, &ledger.sql()).await.unwrap();
    run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await.unwrap();
    run(&ctx, "SELECT dp_count(x, 2.0) FROM t").await.unwrap();
    std::fs::read_to_string(ledger.path()).unwrap()
}

/// A fresh session on `ledger` must refuse both a DP query and `dp_budget()`, and leave the file
/// as it was.
async fn assert_ledger_refused(ledger: &TempFile, expected: &str) {
    let before = std::fs::read(ledger.path()).unwrap();
    let ctx = session().await;
    run(&ctx, &ledger.sql()).await.unwrap();
    run(&ctx, "SET dp.epsilon_budget = 100").await.unwrap();
    assert_refused(run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await, expected);
    assert_refused(run(&ctx, "SELECT * FROM dp_budget()").await, expected);
    assert_eq!(
        std::fs::read(ledger.path()).unwrap(),
        before,
        "never reset or repaired"
    );
    // Queries without DP aggregates are unaffected.
    run(&ctx, "SELECT count(*) FROM (VALUES (1), (2))")
        .await
        .unwrap();
}

#[tokio::test]
async fn corrupt_ledgers_are_refused() {
    // An edited amount: 2 -> 0.2.
    let ledger = TempFile::new("edited");
    let text = two_charge_ledger(&ledger).await;
    let edited = text.replacen("\t2\t0\t", "\t0.2\t0\t", 1);
    assert_ne!(edited, text, "the test must change the second charge");
    std::fs::write(ledger.path(), edited).unwrap();
    assert_ledger_refused(&ledger, "is corrupt at line 3: checksum mismatch").await;

    // A deleted charge in the middle breaks the chain of checksums.
    let ledger = TempFile::new("deleted");
    let text = two_charge_ledger(&ledger).await;
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(ledger.path(), format!("{}\n{}\n", lines[0], lines[2])).unwrap();
    assert_ledger_refused(&ledger, "is corrupt at line 2: checksum mismatch").await;

    // A truncated file (a partial last line).
    let ledger = TempFile::new("truncated");
    let text = two_charge_ledger(&ledger).await;
    std::fs::write(ledger.path(), &text[..text.len() - 7]).unwrap();
    assert_ledger_refused(&ledger, "is corrupt at line 3: the last line is incomplete").await;

    // Not a ledger: never appended to.
    let ledger = TempFile::new("foreign");
    std::fs::write(ledger.path(), "some,csv,data\n1,2,3\n").unwrap();
    assert_ledger_refused(&ledger, "is corrupt at line 1: not a datafusion-dp ledger").await;
}

#[tokio::test]
async fn a_reset_ledger_is_refused_by_the_session_that_wrote_it() {
    let ledger = TempFile::new("reset");
    let ctx = session().await;
    run(&ctx, &ledger.sql()).await.unwrap();
    run(&ctx, "SET dp.epsilon_budget = 3").await.unwrap();
    run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await.unwrap();
    run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await.unwrap();
    // Drop the last charge as a whole line: the file itself still verifies...
    let lines = ledger_lines(ledger.path());
    std::fs::write(ledger.path(), format!("{}\n{}\n", lines[0], lines[1])).unwrap();
    // ...but this session knows it wrote charge #2.
    assert_refused(
        run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await,
        "no longer holds charge #2 that this session wrote",
    );
    std::fs::remove_file(ledger.path()).unwrap();
    assert_refused(
        run(&ctx, "SELECT * FROM dp_budget()").await,
        "no longer holds charge #1",
    );
}

#[tokio::test]
async fn unusable_ledger_path_refuses_dp_queries() {
    let dir = TempFile::new("dir");
    std::fs::create_dir(dir.path()).unwrap();
    let ctx = session().await;
    run(
        &ctx,
        &format!(
            "SET dp.ledger = '{}'",
            dir.path().join("missing/x").display()
        ),
    )
    .await
    .unwrap();
    assert_refused(
        run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await,
        "cannot open",
    );
    assert_eq!(spent(&ctx).await, (0.0, 0.0, 0));
    std::fs::remove_dir(dir.path()).unwrap();
}

#[tokio::test]
async fn explain_failed_repeated_and_replanned_queries() {
    let ctx = session().await;
    // EXPLAIN is charged like the query.
    run(&ctx, "EXPLAIN SELECT dp_count(x, 0.5) FROM t")
        .await
        .unwrap();
    assert_eq!(spent(&ctx).await, (0.5, 0.0, 1));

    // A query that fails while executing stays charged: a value of the file that does not
    // parse as its column's type (an expression cannot fail in a DP query: `x / (x - x)` is
    // NULL, tests/attacks.rs). The error's text, which names the value, is withheld.
    let bad = std::env::temp_dir().join(format!("dp-budget-bad-{}.csv", std::process::id()));
    std::fs::write(&bad, "x\n1\nnot-a-number\n").unwrap();
    let table = format!(
        "CREATE EXTERNAL TABLE bad (x INT) STORED AS CSV LOCATION '{}' \
         OPTIONS ('format.has_header' 'true')",
        bad.display()
    );
    run(&ctx, &table).await.unwrap();
    let err = run(&ctx, "SELECT dp_count(x, 0.25) FROM bad")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("The error is withheld"), "{err}");
    assert!(!err.contains("not-a-number"), "{err}");
    std::fs::remove_file(&bad).unwrap();
    assert_eq!(spent(&ctx).await, (0.75, 0.0, 2));

    // Collecting one DataFrame twice draws noise twice: charged twice.
    let df = ctx.sql("SELECT dp_count(x, 0.125) FROM t").await.unwrap();
    df.clone().collect().await.unwrap();
    df.collect().await.unwrap();
    assert_eq!(spent(&ctx).await, (1.0, 0.0, 4));

    // Re-optimising an already analysed (bound) plan is not charged again.
    let state = ctx.state();
    let plan = ctx
        .sql("SELECT dp_count(x, 1.0) FROM t")
        .await
        .unwrap()
        .into_unoptimized_plan();
    let optimized = state.optimize(&plan).unwrap();
    assert_eq!(spent(&ctx).await, (2.0, 0.0, 5));
    let again = state.optimize(&optimized).unwrap();
    let physical = state.create_physical_plan(&again).await.unwrap();
    datafusion::physical_plan::collect(physical, state.task_ctx())
        .await
        .unwrap();
    assert_eq!(spent(&ctx).await, (2.0, 0.0, 5));

    // An EXPLAIN that does not fit shows the refusal instead of a plan, and costs nothing.
    run(&ctx, "SET dp.epsilon_budget = 2.5").await.unwrap();
    let batches = run(&ctx, "EXPLAIN SELECT dp_count(x, 1.0) FROM t")
        .await
        .unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    assert!(
        text.contains(
            "dp budget exceeded: this query needs epsilon=1, delta=0; spent epsilon=2 of 2.5"
        ),
        "{text}"
    );
    assert!(!text.contains("physical_plan"), "{text}");
    assert_eq!(spent(&ctx).await, (2.0, 0.0, 5));
}

/// A one-column table `slow(x)` whose scan sends one batch, prints [`SCANNING`] and then never
/// finishes: a query over it is in the middle of execution for as long as we like.
#[derive(Debug)]
struct SlowPartition(SchemaRef);

const SCANNING: &str = "DP_TEST_SCANNING";

impl PartitionStream for SlowPartition {
    fn schema(&self) -> &SchemaRef {
        &self.0
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let schema = Arc::clone(&self.0);
        let mut builder = RecordBatchReceiverStream::builder(Arc::clone(&schema), 1);
        let tx = builder.tx();
        builder.spawn(async move {
            let batch =
                RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3]))])?;
            let _ = tx.send(Ok(batch)).await;
            println!("{SCANNING}");
            std::future::pending::<()>().await;
            Ok(())
        });
        builder.build()
    }
}

fn register_slow_table(ctx: &SessionContext) {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    let table = StreamingTable::try_new(Arc::clone(&schema), vec![Arc::new(SlowPartition(schema))])
        .unwrap();
    ctx.register_table("slow", Arc::new(table)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_query_stays_charged() {
    let ctx = session().await;
    register_slow_table(&ctx);
    run(&ctx, "SET dp.epsilon_budget = 1").await.unwrap();
    let query = {
        let ctx = ctx.clone();
        tokio::spawn(async move { run(&ctx, "SELECT dp_count(x, 0.75) FROM slow").await })
    };
    // Wait until the query has been planned (charged), then cancel it.
    for _ in 0..500 {
        if spent(&ctx).await.2 == 1 {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(10));
    }
    query.abort();
    assert!(query.await.unwrap_err().is_cancelled());
    assert_eq!(spent(&ctx).await, (0.75, 0.0, 1));
    assert_refused(
        run(&ctx, "SELECT dp_count(x, 0.5) FROM t").await,
        "remaining epsilon=0.25",
    );
}

/// Environment variable that turns [`a_killed_process_keeps_its_charge`] into the child.
const CHILD_LEDGER: &str = "DP_BUDGET_TEST_CHILD_LEDGER";

/// The child: charges 2.0 to the ledger with a query over `slow`, which never finishes.
fn child(ledger: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    runtime.block_on(async {
        let ctx = session().await;
        register_slow_table(&ctx);
        run(&ctx, &format!("SET dp.ledger = '{ledger}'"))
            .await
            .unwrap();
        run(&ctx, "SET dp.epsilon_budget = 5").await.unwrap();
        let result = run(&ctx, "SELECT dp_count(x, 2.0) FROM slow").await;
        panic!("the slow query returned: {result:?}");
    });
}

/// A process killed (SIGKILL) in the middle of a DP query: its charge is already durable in the
/// ledger, a restarted session sees the reduced budget, and nothing is charged twice.
#[test]
fn a_killed_process_keeps_its_charge() {
    if let Ok(ledger) = std::env::var(CHILD_LEDGER) {
        child(&ledger);
        return;
    }
    let ledger = TempFile::new("killed");
    let mut process = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_killed_process_keeps_its_charge",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_LEDGER, ledger.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = process.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let scanning = loop {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(line) if line.contains(SCANNING) => break true,
            Ok(line) => seen.push(line),
            Err(_) => break false,
        }
    };
    // The child is executing the query (or failed to get there): kill it either way.
    process.kill().unwrap();
    let status = process.wait().unwrap();
    if !scanning {
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut process.stderr.take().unwrap(), &mut stderr).unwrap();
        panic!(
            "the child never reached the scan:\n{}\n{stderr}",
            seen.join("\n")
        );
    }
    assert!(!status.success(), "the child was killed mid-query");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // Exactly one charge, from the killed process, intact.
        let lines = ledger_lines(ledger.path());
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[1].contains("dp_count(slow.x, Float64(2)) FROM slow"),
            "{lines:?}"
        );
        let ctx = session().await;
        run(&ctx, &ledger.sql()).await.unwrap();
        run(&ctx, "SET dp.epsilon_budget = 5").await.unwrap();
        assert_eq!(spent(&ctx).await, (2.0, 0.0, 1));
        assert_refused(
            run(&ctx, "SELECT dp_count(x, 3.5) FROM t").await,
            "spent epsilon=2 of 5, delta=0 of 0 (dp.delta_budget not set); remaining epsilon=3",
        );
        run(&ctx, "SELECT dp_count(x, 3.0) FROM t").await.unwrap();
        assert_refused(
            run(&ctx, "SELECT dp_count(x, 0.5) FROM t").await,
            "spent epsilon=5 of 5",
        );
        assert_eq!(ledger_lines(ledger.path()).len(), 3);
    });
}

#[tokio::test]
async fn composition_over_ctes_and_grouping_sets() {
    let ctx = session().await;
    // A CTE used twice is computed twice, with independent noise: charged twice.
    run(
        &ctx,
        "WITH c AS (SELECT dp_count(x, 0.5) AS n FROM t) SELECT * FROM c a CROSS JOIN c b",
    )
    .await
    .unwrap();
    assert_eq!(spent(&ctx).await, (1.0, 0.0, 1));
    // CUBE over two keys is four grouping sets: each row is in four groups.
    run(
        &ctx,
        "SELECT x % 2, x % 3, dp_count(x, 0.25) FROM t GROUP BY CUBE(x % 2, x % 3)",
    )
    .await
    .unwrap();
    assert_eq!(spent(&ctx).await, (2.0, 0.0, 2));
    run(
        &ctx,
        "SELECT x % 2, x % 3, dp_count(x, 0.125, 'mechanism=gaussian, delta=1e-8') FROM t
         GROUP BY GROUPING SETS ((x % 2), (x % 3))",
    )
    .await
    .unwrap();
    // Two grouping sets: twice the call's δ, at most 2·1e-8 (its map's δ at ε = 0.125).
    let (epsilon, delta, calls) = spent(&ctx).await;
    assert_eq!((epsilon, calls), (2.25, 3));
    assert!(delta <= 2e-8 && delta > 1.8e-8, "{delta}");
}

#[tokio::test]
async fn untrusted_sql_cannot_raise_the_budget() {
    use datafusion::execution::context::SQLOptions;
    let ctx = session().await;
    run(&ctx, "SET dp.epsilon_budget = 1").await.unwrap();
    let untrusted = SQLOptions::new().with_allow_statements(false);
    assert!(ctx
        .sql_with_options("SET dp.epsilon_budget = 100", untrusted)
        .await
        .is_err());
    let query = "SELECT dp_count(x, 1.0) FROM t";
    ctx.sql_with_options(query, untrusted)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let second = ctx.sql_with_options(query, untrusted).await.unwrap();
    assert_refused(second.collect().await, "spent epsilon=1 of 1");
}
