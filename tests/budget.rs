//! Privacy budget enforcement end to end: concurrent queries cannot overspend, charges survive
//! in the ledger across sessions and a killed process, a damaged ledger is refused, and
//! EXPLAIN / failed / cancelled / re-planned queries cost what the docs say.

mod common;

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
async fn a_charge_keeps_what_a_ledger_line_keeps_of_its_description() {
    // A charge's description is built from the analyst's own expressions: the session keeps
    // (for `dp_budget()`) at most the 500 characters a ledger line keeps, however long the
    // statement.
    let ctx = session().await;
    let long = format!("'{}'", "a".repeat(5000));
    run(
        &ctx,
        &format!("SELECT dp_count(CASE WHEN x > 0 THEN {long} END, 1.0) FROM t"),
    )
    .await
    .unwrap();
    let rows = budget_rows(&ctx).await;
    let query = rows
        .iter()
        .find(|r| r.0 == "charge")
        .and_then(|r| r.3.clone())
        .unwrap();
    assert!(query.starts_with("dp_count(CASE WHEN"), "{query}");
    assert_eq!(query.chars().count(), 500);
}

#[tokio::test]
async fn dp_budget_shows_the_latest_charges_of_a_long_ledger_and_counts_them_all() {
    // A ledger of more charges than `dp_budget()` shows (other processes' charges, written
    // through the crate's own append): its history is the latest HISTORY_CHARGES of them, in
    // time order, and `spent` counts every one.
    use datafusion_dp::sql::accounting::{
        amount, budget::HISTORY_CHARGES, ledger, measure::BudgetMeasure,
    };
    let path = common::scratch("long-ledger").join("long.ledger");
    let total = HISTORY_CHARGES + 50;
    for i in 0..total {
        ledger::append_with(&path, BudgetMeasure::EpsilonDelta, |_, _| {
            Ok(ledger::NewCharge {
                unix_ms: 1_700_000_000_000 + i as i64,
                epsilon_units: amount::charge_units(0.001, amount::EPSILON_DIGITS).unwrap(),
                delta_units: 0,
                rho_units: None,
                query: format!("charge {i}"),
            })
        })
        .unwrap();
    }
    let ctx = session().await;
    run(&ctx, &format!("SET dp.ledger = '{}'", path.display()))
        .await
        .unwrap();
    run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await.unwrap();
    let rows = budget_rows(&ctx).await;
    let charges: Vec<&str> = rows
        .iter()
        .filter(|r| r.0 == "charge")
        .map(|r| r.3.as_deref().unwrap())
        .collect();
    assert_eq!(charges.len(), HISTORY_CHARGES);
    assert_eq!(charges[0], "charge 51");
    assert_eq!(
        charges[HISTORY_CHARGES - 2],
        format!("charge {}", total - 1)
    );
    assert!(charges[HISTORY_CHARGES - 1].starts_with("dp_count("));
    let (epsilon, _, _) = spent(&ctx).await;
    assert!(
        (epsilon - (total as f64 * 0.001 + 1.0)).abs() < 1e-9,
        "{epsilon}"
    );
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
async fn a_ledger_replaced_by_a_copy_of_itself_keeps_the_session_charging() {
    // A copy renamed over the ledger is a new file (a new inode): the session finds its
    // charges in its lines and charges on; a copy without the session's last charge refuses.
    let ledger = TempFile::new("copied");
    let ctx = session().await;
    run(&ctx, &ledger.sql()).await.unwrap();
    run(&ctx, "SET dp.epsilon_budget = 10").await.unwrap();
    run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await.unwrap();
    run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await.unwrap();
    let copy = ledger.path().with_extension("copy");
    let replace_by = |text: String| {
        std::fs::write(&copy, text).unwrap();
        std::fs::rename(&copy, ledger.path()).unwrap();
    };
    replace_by(std::fs::read_to_string(ledger.path()).unwrap());
    run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await.unwrap();
    run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await.unwrap();
    assert_eq!(ledger_lines(ledger.path()).len(), 5);
    assert_eq!(spent(&ctx).await.0, 4.0);
    let lines = ledger_lines(ledger.path());
    replace_by(format!("{}\n", lines[..4].join("\n")));
    assert_refused(
        run(&ctx, "SELECT dp_count(x, 1.0) FROM t").await,
        "no longer holds charge #4 that this session wrote",
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
    let bad = common::scratch_dir().join("bad.csv");
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

// ---- Budget measures: (ε, δ) and zCDP (issue 45) ----

/// The zCDP budget equivalent to the target `(epsilon, delta)`, computed here independently of
/// the crate's bisections: the largest ρ whose Canonne, Kamath & Steinke (2020, Corollary 13)
/// conversion `inf_α exp((α−1)(αρ−ε))/(α−1)·(1−1/α)^α` is at most δ, the infimum taken over a
/// grid of α (which can only overstate δ, so the ρ found is never above the exact one).
fn rho_of_target(epsilon: f64, delta: f64) -> f64 {
    let log_delta = |rho: f64| {
        let mut best = f64::INFINITY;
        let mut alpha = 1.0 + 1e-6;
        while alpha < 1e4 {
            let log = (alpha - 1.0) * (alpha * rho - epsilon) + alpha * (1.0 - 1.0 / alpha).ln()
                - (alpha - 1.0).ln();
            best = best.min(log);
            alpha *= 1.0002;
        }
        best
    };
    let (mut lo, mut hi) = (0.0, epsilon);
    for _ in 0..50 {
        let mid = (lo + hi) / 2.0;
        if log_delta(mid) <= delta.ln() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The complementary error function (Numerical Recipes' `erfcc`, fractional error below
/// 1.2e-7), for [`analytic_sigma`].
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// The analytic Gaussian mechanism's σ for a value of sensitivity 1 at `(epsilon, delta)`
/// (Balle & Wang 2018, Theorem 8: the smallest σ with
/// `Φ(1/(2σ) − εσ) − e^ε·Φ(−1/(2σ) − εσ) ≤ δ`), computed here by bisection.
fn analytic_sigma(epsilon: f64, delta: f64) -> f64 {
    let phi = |x: f64| 0.5 * erfc(-x / std::f64::consts::SQRT_2);
    let delta_at = |s: f64| {
        phi(1.0 / (2.0 * s) - epsilon * s) - epsilon.exp() * phi(-1.0 / (2.0 * s) - epsilon * s)
    };
    let (mut lo, mut hi) = (1e-3, 1e4);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if delta_at(mid) > delta {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// The `rho` column of `dp_budget()`'s rows, in order.
async fn budget_rho(ctx: &SessionContext) -> Vec<(String, Option<f64>)> {
    let batches = run(ctx, "SELECT entry, rho FROM dp_budget()")
        .await
        .unwrap();
    let mut rows = Vec::new();
    for b in &batches {
        let entry = b.column(0).as_string::<i32>();
        let rho = b.column(1).as_primitive::<Float64Type>();
        for i in 0..b.num_rows() {
            rows.push((
                entry.value(i).to_string(),
                (!rho.is_null(i)).then(|| rho.value(i)),
            ));
        }
    }
    rows
}

/// Runs the one-value query `sql` and returns its value.
async fn one_count(ctx: &SessionContext, sql: &str) -> datafusion::error::Result<i64> {
    let batches = run(ctx, sql).await?;
    Ok(batches[0]
        .column(0)
        .as_primitive::<arrow::datatypes::Int64Type>()
        .value(0))
}

#[tokio::test]
async fn a_zcdp_budget_answers_100_gaussian_counts_with_a_seventh_of_the_noise() {
    // The budget (10, 1e-4) as zCDP: ρ ≈ 2.117. 100 queries may spend ρ ≈ 0.02117 each, i.e. a
    // Gaussian count (sensitivity 1, ρ = 1/(2σ²)) with σ ≥ 1/√(2·0.02117) ≈ 4.86.
    let rho_budget = rho_of_target(10.0, 1e-4);
    assert!((2.116..2.118).contains(&rho_budget), "{rho_budget}");
    let sigma_min = (1.0 / (2.0 * rho_budget / 100.0)).sqrt();
    assert!((4.85..4.87).contains(&sigma_min), "{sigma_min}");

    let ctx = session().await;
    let ledger = TempFile::new("zcdp-100");
    run(&ctx, &ledger.sql()).await.unwrap();
    for set in [
        "SET dp.budget_measure = 'zcdp'",
        "SET dp.epsilon_budget = 10",
        "SET dp.delta_budget = 1e-4",
    ] {
        run(&ctx, set).await.unwrap();
    }
    // The analyst's calibration: the analytic Gaussian at (1.05, 1e-8), whose σ (≈ 4.87) is
    // just above σ_min, so its ρ is just below a hundredth of the budget (and above a 101st).
    let query = "SELECT dp_count(x, 1.05, 'mechanism=gaussian, delta=1e-8') FROM t";
    let mut answers = Vec::new();
    for _ in 0..100 {
        answers.push(one_count(&ctx, query).await.unwrap() as f64);
    }
    assert_refused(
        run(&ctx, query).await,
        "dp budget exceeded: this query needs rho=0.0210",
    );
    let rows = budget_rho(&ctx).await;
    let charged: Vec<f64> = rows
        .iter()
        .filter(|r| r.0 == "charge")
        .map(|r| r.1.unwrap())
        .collect();
    assert_eq!(charged.len(), 100);
    assert!(charged.iter().all(|r| *r == charged[0]));
    // The σ the charge is computed from: within the budget's hundredth, and Balle & Wang's
    // analytic σ at (1.05, 1e-8) (computed here), raised a little for the discrete Gaussian.
    let sigma = (1.0 / (2.0 * charged[0])).sqrt();
    let sigma_bw = analytic_sigma(1.05, 1e-8);
    assert!((4.86..4.88).contains(&sigma_bw), "{sigma_bw}");
    assert!(sigma >= sigma_min, "{sigma} < {sigma_min}");
    assert!(
        sigma >= sigma_bw && sigma < sigma_bw * 1.01,
        "{sigma} vs {sigma_bw}"
    );
    assert!(charged[0] * 101.0 > rho_budget, "the 101st would fit");
    // The noise drawn has that spread: the 100 answers around the true count 4 (the sample
    // standard deviation of 100 normal draws is within 35% of σ except with probability
    // about 1e-6).
    let mean = answers.iter().sum::<f64>() / 100.0;
    let sd = (answers.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / 99.0).sqrt();
    assert!(
        (0.65 * sigma..1.35 * sigma).contains(&sd),
        "sd {sd} vs sigma {sigma}"
    );
    // dp_budget(): spent in ρ, and as (ε, δ) at the target's δ: within the target.
    let rows = run(
        &ctx,
        "SELECT measure, rho, guarantee_epsilon, guarantee_delta FROM dp_budget() WHERE entry = 'spent'",
    )
    .await
    .unwrap();
    let b = &rows[0];
    assert_eq!(b.column(0).as_string::<i32>().value(0), "zcdp");
    let spent_rho = b.column(1).as_primitive::<Float64Type>().value(0);
    assert!((spent_rho - 100.0 * charged[0]).abs() < 1e-9, "{spent_rho}");
    let epsilon = b.column(2).as_primitive::<Float64Type>().value(0);
    assert!(epsilon <= 10.0 && epsilon > 9.9, "{epsilon}");
    assert_eq!(b.column(3).as_primitive::<Float64Type>().value(0), 1e-4);
    // The ledger counts in zCDP, ρ on every line.
    let lines = ledger_lines(ledger.path());
    assert!(lines[0].contains("v2, budget measure zcdp"), "{}", lines[0]);
    assert_eq!(lines.len(), 101);

    // The same budget summed as (ε, δ): 100 queries get (0.1, 1e-6) each, σ ≈ 36.3.
    let sigma_summed =
        datafusion_dp::stats::mechanism::analytic_gaussian_sigma(0.1, 1e-6, 1.0).unwrap();
    assert!(
        (sigma_summed / analytic_sigma(0.1, 1e-6) - 1.0).abs() < 1e-6,
        "{sigma_summed}"
    );
    assert!((36.0..36.6).contains(&sigma_summed), "{sigma_summed}");
    assert!(sigma_summed > 7.0 * sigma, "{sigma_summed} vs {sigma}");
    let summed = session().await;
    run(&summed, "SET dp.epsilon_budget = 10").await.unwrap();
    run(&summed, "SET dp.delta_budget = 1e-4").await.unwrap();
    let summed_query = "SELECT dp_count(x, 0.1, 'mechanism=gaussian, delta=1e-6') FROM t";
    for _ in 0..100 {
        one_count(&summed, summed_query).await.unwrap();
    }
    assert_refused(
        run(&summed, summed_query).await,
        "dp budget exceeded: this query needs epsilon=0.1",
    );
    // There the zCDP calibration above costs (1.05, ~1e-8): 9 of them fit, not 100.
    let again = session().await;
    run(&again, "SET dp.epsilon_budget = 10").await.unwrap();
    run(&again, "SET dp.delta_budget = 1e-4").await.unwrap();
    let mut answered = 0;
    while one_count(&again, query).await.is_ok() {
        answered += 1;
        assert!(answered <= 100);
    }
    assert_eq!(answered, 9);
}

#[tokio::test]
async fn releases_without_a_zcdp_map_are_refused_under_zcdp() {
    let ctx = session().await;
    run(
        &ctx,
        "CREATE TABLE r (o BOOLEAN, e BOOLEAN, g INT) AS VALUES \
         (true, true, 1), (false, true, 1), (true, false, 2), (false, false, 2)",
    )
    .await
    .unwrap();
    let ledger = TempFile::new("zcdp-refused");
    run(&ctx, &ledger.sql()).await.unwrap();
    run(&ctx, "SET dp.budget_measure = 'zcdp'").await.unwrap();
    run(&ctx, "SET dp.rho_budget = 10").await.unwrap();
    // The paper's local methods whose δ is a failure probability: (ε, δ)-DP only.
    for method in [
        "ptr, delta=1e-6, ptr_bound=1",
        "smooth_sensitivity, delta=1e-6",
    ] {
        let sql = format!(
            "SELECT dp_relative_risk(o, e, 1.0, 'group_sizes=public, method={method}') FROM r"
        );
        let name = method.split(',').next().unwrap();
        assert_refused(
            run(&ctx, &sql).await,
            &format!("dp budget: dp_relative_risk: method '{name}' has no zCDP privacy map"),
        );
        assert_refused(
            run(&ctx, &sql).await,
            "this budget is in zCDP (dp.budget_measure = 'zcdp')",
        );
    }
    // Private group selection: its δ is a failure probability.
    run(&ctx, "SET dp.public_groups = 'none'").await.unwrap();
    run(&ctx, "SET dp.selection_epsilon = 1").await.unwrap();
    run(&ctx, "SET dp.selection_delta = 1e-6").await.unwrap();
    assert_refused(
        run(&ctx, "SELECT g, dp_count(o, 1.0) FROM r GROUP BY g").await,
        "private group selection (dp.selection_epsilon, dp.selection_delta) has no zCDP privacy map",
    );
    // Refused before anything ran: nothing charged, nothing written.
    assert_eq!(spent(&ctx).await, (0.0, 0.0, 0));
    assert_eq!(
        std::fs::read(ledger.path()).map_or(0, |b| b.len()),
        0,
        "nothing written"
    );
    // The default method has a map (noisy 2x2 table of Laplace cells) and is charged its ρ: a
    // replaced row moves between two cells, each noised at ε/2 (docs/privacy-model.md), and
    // each is (ε/2)²/2-zCDP (Bun & Steinke, Proposition 1.4): 2·(1/2)²/2 = 0.25.
    run(&ctx, "SELECT dp_relative_risk(o, e, 1.0) FROM r")
        .await
        .unwrap();
    let rows = budget_rho(&ctx).await;
    assert_eq!(rows[1], ("spent".to_string(), Some(0.25)));
    // The naive ratio is pure ε-DP (a Laplace release whose map is at most ε): ρ = ε²/2.
    run(
        &ctx,
        "SELECT dp_relative_risk(o, e, 1.0, 'group_sizes=public, method=naive') FROM r",
    )
    .await
    .unwrap();
    let rows = budget_rho(&ctx).await;
    assert_eq!(rows[1], ("spent".to_string(), Some(0.75)));
    // Under an (ε, δ) budget the same ptr query is answered and charged its map: ε from its
    // two Laplace draws, δ from its test's threshold (below the δ it was asked for).
    let summed = session().await;
    run(
        &summed,
        "CREATE TABLE r (o BOOLEAN, e BOOLEAN) AS VALUES (true, true), (false, false)",
    )
    .await
    .unwrap();
    run(&summed, "SET dp.epsilon_budget = 2").await.unwrap();
    run(&summed, "SET dp.delta_budget = 1e-5").await.unwrap();
    run(
        &summed,
        "SELECT dp_relative_risk(o, e, 1.0, 'group_sizes=public, method=ptr, delta=1e-6, ptr_bound=1') FROM r",
    )
    .await
    .unwrap();
    let map = datafusion_dp::stats::methods::LocalRatioRelease::calibrate(
        datafusion_dp::stats::RatioMethod::Ptr,
        1.0,
        Some(1e-6),
        false,
        Some(1.0),
    )
    .unwrap()
    .loss();
    assert!(map.delta > 0.0 && map.delta < 1e-6, "{map:?}");
    let (epsilon, delta, queries) = spent(&summed).await;
    assert_eq!((epsilon, queries), (1.0, 1));
    assert!(
        (delta - map.delta).abs() <= 1e-30 + 1e-15 * map.delta,
        "{delta} {map:?}"
    );
}

#[tokio::test]
async fn dp_budget_shows_each_measure() {
    /// `(entry, measure, epsilon, delta, rho, guarantee_epsilon, guarantee_delta)` rows.
    type Row = (
        String,
        Option<String>,
        Option<f64>,
        Option<f64>,
        Option<f64>,
        Option<f64>,
        Option<f64>,
    );
    async fn rows(ctx: &SessionContext) -> Vec<Row> {
        let batches = run(
            ctx,
            "SELECT entry, measure, epsilon, delta, rho, guarantee_epsilon, guarantee_delta FROM dp_budget()",
        )
        .await
        .unwrap();
        let mut rows = Vec::new();
        for b in &batches {
            let s = |c: usize, i: usize| {
                let a = b.column(c).as_string::<i32>();
                (!a.is_null(i)).then(|| a.value(i).to_string())
            };
            let f = |c: usize, i: usize| {
                let a = b.column(c).as_primitive::<Float64Type>();
                (!a.is_null(i)).then(|| a.value(i))
            };
            for i in 0..b.num_rows() {
                rows.push((
                    s(0, i).unwrap(),
                    s(1, i),
                    f(2, i),
                    f(3, i),
                    f(4, i),
                    f(5, i),
                    f(6, i),
                ));
            }
        }
        rows
    }
    let schema = run(&session().await, "SELECT * FROM dp_budget()")
        .await
        .unwrap()[0]
        .schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "entry",
            "epsilon",
            "delta",
            "charged_at",
            "query",
            "measure",
            "rho",
            "guarantee_epsilon",
            "guarantee_delta"
        ]
    );
    let laplace = "SELECT dp_count(x, 0.5) FROM t";

    // Pure ε: today's rows, with the measure and the (informational) ρ of each Laplace charge.
    let pure = session().await;
    run(&pure, "SET dp.epsilon_budget = 2").await.unwrap();
    run(&pure, laplace).await.unwrap();
    let e = Some("epsilon".to_string());
    assert_eq!(
        rows(&pure).await,
        vec![
            (
                "budget".into(),
                e.clone(),
                Some(2.0),
                Some(0.0),
                None,
                Some(2.0),
                Some(0.0)
            ),
            (
                "spent".into(),
                e.clone(),
                Some(0.5),
                Some(0.0),
                Some(0.125),
                Some(0.5),
                Some(0.0)
            ),
            (
                "remaining".into(),
                e,
                Some(1.5),
                Some(0.0),
                None,
                None,
                None
            ),
            (
                "charge".into(),
                None,
                Some(0.5),
                Some(0.0),
                Some(0.125),
                None,
                None
            ),
        ]
    );

    // (ε, δ).
    let approx = session().await;
    run(&approx, "SET dp.epsilon_budget = 2").await.unwrap();
    run(&approx, "SET dp.delta_budget = 1e-6").await.unwrap();
    run(&approx, laplace).await.unwrap();
    let rows_approx = rows(&approx).await;
    assert_eq!(rows_approx[0].1.as_deref(), Some("epsilon_delta"));
    assert_eq!(rows_approx[0].5, Some(2.0));
    assert_eq!(rows_approx[0].6, Some(1e-6));

    // zCDP from a target: the budget row has the target and its ρ, spent is ρ and its (ε, δ)
    // at the target's δ, remaining is ρ only.
    let target = session().await;
    for set in [
        "SET dp.budget_measure = 'zcdp'",
        "SET dp.epsilon_budget = 10",
        "SET dp.delta_budget = 1e-4",
    ] {
        run(&target, set).await.unwrap();
    }
    run(&target, laplace).await.unwrap();
    let r = rows(&target).await;
    let z = Some("zcdp".to_string());
    let rho_budget = r[0].4.unwrap();
    assert!(
        (rho_budget - rho_of_target(10.0, 1e-4)).abs() < 1e-4,
        "{rho_budget}"
    );
    assert_eq!(
        (&r[0].0, &r[0].1, r[0].2, r[0].3, r[0].5, r[0].6),
        (
            &"budget".to_string(),
            &z,
            Some(10.0),
            Some(1e-4),
            Some(10.0),
            Some(1e-4)
        )
    );
    assert_eq!(
        (&r[1].1, r[1].2, r[1].4, r[1].6),
        (&z, Some(0.5), Some(0.125), Some(1e-4))
    );
    // ε of ρ = 0.125 at δ = 1e-4: between ρ and Bun & Steinke's ρ + 2√(ρ ln(1/δ)) ≈ 2.27.
    let epsilon = r[1].5.unwrap();
    assert!(epsilon > 0.125 && epsilon < 0.125 + 2.0 * (0.125 * 1e4f64.ln()).sqrt());
    assert_eq!((r[2].2, r[2].3, r[2].5), (None, None, None));
    assert!((r[2].4.unwrap() - (rho_budget - 0.125)).abs() < 1e-9);
    assert_eq!(r[3].4, Some(0.125));

    // zCDP from ρ alone: no δ is named, so no (ε, δ) is shown.
    let alone = session().await;
    run(&alone, "SET dp.budget_measure = 'zcdp'").await.unwrap();
    run(&alone, "SET dp.rho_budget = 0.5").await.unwrap();
    run(&alone, laplace).await.unwrap();
    let r = rows(&alone).await;
    assert_eq!(
        r[..3],
        [
            (
                "budget".into(),
                z.clone(),
                None,
                None,
                Some(0.5),
                None,
                None
            ),
            (
                "spent".into(),
                z.clone(),
                Some(0.5),
                Some(0.0),
                Some(0.125),
                None,
                None
            ),
            ("remaining".into(), z, None, None, Some(0.375), None, None),
        ]
    );
    // Four more fill it exactly (0.125 each, exact in units); a fifth is refused.
    for _ in 0..3 {
        run(&alone, laplace).await.unwrap();
    }
    assert_refused(
        run(&alone, laplace).await,
        "dp budget exceeded: this query needs rho=0.125 (zCDP); spent rho=0.5 of 0.5; remaining rho=0",
    );
    // A declaration in two measures is refused, naming the keys.
    run(&alone, "SET dp.epsilon_budget = 1").await.unwrap();
    assert_refused(run(&alone, laplace).await, "not both");
    run(&alone, "SET dp.budget_measure = 'epsilon_delta'")
        .await
        .unwrap();
    assert_refused(
        run(&alone, "SELECT * FROM dp_budget()").await,
        "dp.rho_budget is a zCDP budget, but dp.budget_measure is 'epsilon_delta'",
    );
}

/// The text of a ledger in the first format (v1), as versions before budget measures wrote
/// it, rebuilt here from its definition: the header, then `seq, unix_ms, pid, epsilon, delta,
/// query` and the first 16 hex digits of SHA-256 over the previous line's hash, a newline and
/// the line, chained from the empty string.
fn first_format_ledger(amounts: &[(&str, &str)]) -> String {
    use sha2::{Digest, Sha256};
    let mut text = String::from(
        "# datafusion-dp privacy ledger v1: seq, unix_ms, pid, epsilon, delta, query, chained sha256 prefix\n",
    );
    let mut previous = String::new();
    for (i, (epsilon, delta)) in amounts.iter().enumerate() {
        let content = format!(
            "{}\t1700000000000\t7\t{epsilon}\t{delta}\tdp_count(t.x) FROM t",
            i + 1
        );
        let mut hasher = Sha256::new();
        hasher.update(format!("{previous}\n{content}").as_bytes());
        let hash: String = hasher.finalize()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        text.push_str(&format!("{content}\t{hash}\n"));
        previous = hash;
    }
    text
}

#[tokio::test]
async fn ledgers_of_the_first_format_still_load_and_count() {
    let ledger = TempFile::new("v1");
    // An f64-era amount (0.30000000000000004, charged rounded up) and an exact one.
    let text = first_format_ledger(&[("0.30000000000000004", "0"), ("1", "0.0000001")]);
    std::fs::write(ledger.path(), &text).unwrap();
    let ctx = session().await;
    run(&ctx, &ledger.sql()).await.unwrap();
    run(&ctx, "SET dp.epsilon_budget = 2").await.unwrap();
    run(&ctx, "SET dp.delta_budget = 1e-6").await.unwrap();
    assert_eq!(spent(&ctx).await, (1.300000000001, 1e-7, 2));
    assert_refused(
        run(&ctx, "SELECT dp_count(x, 0.7) FROM t").await,
        "spent epsilon=1.300000000001 of 2",
    );
    run(&ctx, "SELECT dp_count(x, 0.5) FROM t").await.unwrap();
    // The new charge is a line of the file's own format: seven fields, no ρ.
    let lines = ledger_lines(ledger.path());
    assert_eq!(lines.len(), 4);
    assert!(lines[0].contains("ledger v1:"), "{}", lines[0]);
    assert_eq!(lines[3].split('\t').count(), 7, "{}", lines[3]);
    assert!(std::fs::read_to_string(ledger.path())
        .unwrap()
        .starts_with(&text));
    // A v1 ledger is an (ε, δ) ledger: a zCDP budget on it is refused, and it is not touched.
    let zcdp = session().await;
    run(&zcdp, &ledger.sql()).await.unwrap();
    run(&zcdp, "SET dp.budget_measure = 'zcdp'").await.unwrap();
    run(&zcdp, "SET dp.rho_budget = 1").await.unwrap();
    let before = std::fs::read(ledger.path()).unwrap();
    let expected = "counts charges in the budget measure 'epsilon_delta' (its header), but this budget is in 'zcdp'";
    assert_refused(run(&zcdp, "SELECT dp_count(x, 0.5) FROM t").await, expected);
    assert_refused(run(&zcdp, "SELECT * FROM dp_budget()").await, expected);
    assert_eq!(std::fs::read(ledger.path()).unwrap(), before);

    // And the reverse: a zCDP ledger refuses an (ε, δ) budget.
    let zledger = TempFile::new("v2-zcdp");
    run(&zcdp, &zledger.sql()).await.unwrap();
    run(&zcdp, "SELECT dp_count(x, 0.5) FROM t").await.unwrap();
    let approx = session().await;
    run(&approx, &zledger.sql()).await.unwrap();
    run(&approx, "SET dp.epsilon_budget = 100").await.unwrap();
    assert_refused(
        run(&approx, "SELECT dp_count(x, 0.5) FROM t").await,
        "counts charges in the budget measure 'zcdp' (its header), but this budget is in 'epsilon_delta'",
    );
    assert_eq!(ledger_lines(zledger.path()).len(), 2);
}

#[tokio::test]
async fn a_zcdp_analyst_in_the_owner_configuration() {
    use datafusion_dp::owner::{Owner, OwnerConfig};
    let dir = common::scratch("owner");
    let visits = concat!(env!("CARGO_MANIFEST_DIR"), "/data/visits.csv");
    let text = format!(
        "[[table]]\nname = \"visits\"\nlocation = \"{visits}\"\nunit = \"patient_id\"\n\
         columns = [\"visit_id BIGINT\", \"patient_id BIGINT\", \"region VARCHAR\", \"month VARCHAR\", \"exposed BOOLEAN\", \"outcome BOOLEAN\"]\n\n\
         [[analyst]]\nname = \"zoe\"\nbudget_measure = \"zcdp\"\nepsilon_budget = 1\ndelta_budget = 1e-6\nledger = \"zoe.ledger\"\n"
    );
    let config = OwnerConfig::parse(&text, &dir, "owner.toml").unwrap();
    let owner = Owner::open(config).await.unwrap();
    let zoe = owner.config().analyst("zoe").unwrap().clone();
    let ctx = owner.analyst_session(&zoe).unwrap();
    let sql = |q: &'static str| {
        let ctx = ctx.clone();
        async move { datafusion_dp::analyst_sql(&ctx, q).await?.collect().await }
    };
    // (1, 1e-6) is ρ ≈ 0.0244 (here, independently): two Laplace counts at ε = 0.15 (ρ = 0.01125
    // each) fit, a third does not, though 3·0.15 is far below the target's ε = 1.
    let rho_budget = rho_of_target(1.0, 1e-6);
    assert!((0.0243..0.0244).contains(&rho_budget), "{rho_budget}");
    sql("SELECT dp_count(outcome, 0.15) FROM visits")
        .await
        .unwrap();
    sql("SELECT dp_count(outcome, 0.15) FROM visits")
        .await
        .unwrap();
    assert_refused(
        sql("SELECT dp_count(outcome, 0.15) FROM visits").await,
        "dp budget exceeded: this query needs rho=0.01125 (zCDP); spent rho=0.0225 of 0.02435",
    );
    // The owner's measure cannot be changed by the analyst.
    assert_refused(
        sql("SET dp.budget_measure = 'epsilon_delta'").await,
        "budget_measure is set by the data owner",
    );
    assert_refused(
        sql("SET dp.rho_budget = 100").await,
        "rho_budget is set by the data owner",
    );
    // Private group selection (an analyst's option) has no zCDP map.
    sql("SET dp.selection_epsilon = 0.01").await.unwrap();
    sql("SET dp.selection_delta = 1e-9").await.unwrap();
    assert_refused(
        sql("SELECT region, dp_count(outcome, 1e-6) FROM visits GROUP BY region").await,
        "private group selection (dp.selection_epsilon, dp.selection_delta) has no zCDP privacy map",
    );
    let rows = sql("SELECT measure, rho FROM dp_budget() WHERE entry = 'spent'")
        .await
        .unwrap();
    assert_eq!(rows[0].column(0).as_string::<i32>().value(0), "zcdp");
    assert_eq!(
        rows[0].column(1).as_primitive::<Float64Type>().value(0),
        0.0225
    );
    let lines = ledger_lines(&dir.join("zoe.ledger"));
    assert!(lines[0].contains("budget measure zcdp"), "{}", lines[0]);
    assert_eq!(lines.len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn grouping_sets_multiply_rho() {
    let ctx = session().await;
    run(&ctx, "SET dp.budget_measure = 'zcdp'").await.unwrap();
    run(&ctx, "SET dp.rho_budget = 1").await.unwrap();
    // A grouped count: a replaced row moves between two groups, each noised at ε/2
    // (docs/privacy-model.md), so one GROUP BY is 2·(0.5/2)²/2 = 0.0625-zCDP; CUBE over two
    // keys is four grouping sets: 0.25.
    run(
        &ctx,
        "SELECT x % 2, x % 3, dp_count(x, 0.5) FROM t GROUP BY CUBE(x % 2, x % 3)",
    )
    .await
    .unwrap();
    let rows = budget_rho(&ctx).await;
    assert_eq!(rows[1], ("spent".to_string(), Some(0.25)));
    // Three more fill the budget exactly; a fifth is refused.
    for _ in 0..3 {
        run(
            &ctx,
            "SELECT x % 2, x % 3, dp_count(x, 0.5) FROM t GROUP BY CUBE(x % 2, x % 3)",
        )
        .await
        .unwrap();
    }
    assert_refused(
        run(&ctx, "SELECT x % 2, dp_count(x, 0.5) FROM t GROUP BY x % 2").await,
        "this query needs rho=0.0625 (zCDP); spent rho=1 of 1",
    );
}
