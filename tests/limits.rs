//! One analyst cannot take the process down (issue 28): long and deep statements are refused
//! with the limit's message or answered, through `dpsql --config` (a child process, so a stack
//! overflow is a failed assertion on its exit status, not an aborted test binary) and through a
//! real `dp-server`, which keeps serving afterwards.

use common::server::{login, query, Server};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

mod common;

const VISITS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/visits.csv");

fn test_dir(name: &str) -> PathBuf {
    common::scratch(name)
}

/// `data/visits.csv` protected by `patient_id`, analyst `alice` (password `pw`); `extra` is
/// appended verbatim.
fn config(dir: &Path, extra: &str) -> PathBuf {
    let text = format!(
        "[[table]]\nname = \"visits\"\nlocation = \"{VISITS}\"\nunit = \"patient_id\"\n\
         columns = [\"visit_id BIGINT\", \"patient_id BIGINT\", \"region VARCHAR\", \"month VARCHAR\", \"exposed BOOLEAN\", \"outcome BOOLEAN\"]\n\n\
         [[analyst]]\nname = \"alice\"\npassword = \"pw\"\nepsilon_budget = 5.0\nledger = \"alice.ledger\"\n\n{extra}"
    );
    let path = dir.join("owner.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the statements of `file` in `dpsql --config`.
fn dpsql(config: &Path, file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dpsql"))
        .args([
            "--config",
            config.to_str().unwrap(),
            "--format",
            "csv",
            "-f",
        ])
        .arg(file)
        .stdin(Stdio::null())
        .output()
        .expect("run dpsql")
}

/// A statement of family `kind` with `n` terms, operands, CTEs or levels.
fn statement(kind: &str, n: usize) -> String {
    let list = |item: &str, separator: &str| vec![item; n].join(separator);
    // `WITH c0 AS (first), c1 AS (SELECT columns FROM c0), ...`: n CTEs, each reading the last.
    let ctes = |first: &str, columns: &str| {
        let chain: Vec<String> = (1..n)
            .map(|i| format!(", c{i} AS (SELECT {columns} FROM c{})", i - 1))
            .collect();
        format!("WITH c0 AS ({first}){}", chain.concat())
    };
    // n one-row tables, cross joined.
    let joined = || {
        let tables: Vec<String> = (0..n).map(|i| format!("(SELECT 1 AS x{i}) t{i}")).collect();
        tables.join(" CROSS JOIN ")
    };
    match kind {
        "sum" => format!("SELECT {}", list("1", "+")),
        "or" => format!("SELECT 1 WHERE {}", list("1 = 1", " OR ")),
        "and" => format!("SELECT 1 WHERE {}", list("1 = 1", " AND ")),
        "concat" => format!("SELECT {}", list("'a'", " || ")),
        "union" => list("SELECT 1", " UNION ALL "),
        "cte" => format!("{} SELECT x FROM c{}", ctes("SELECT 1 AS x", "x"), n - 1),
        "subqueries" => format!("SELECT {}1{}", "(SELECT ".repeat(n), ")".repeat(n)),
        "parentheses" => format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n)),
        "joins" => format!("SELECT 1 FROM {}", joined()),
        "dp_where" => format!(
            "SELECT dp_count(outcome, 0.01) FROM visits WHERE {} >= 0",
            list("visit_id", " + ")
        ),
        // DP over a chain of CTEs, a union and a chain of joins of the protected table: the
        // privacy analysis and the rewrites walk each level.
        "dp_cte" => format!(
            "{} SELECT dp_count(outcome, 0.01) FROM c{}",
            ctes("SELECT * FROM visits", "*"),
            n - 1
        ),
        "dp_union" => format!(
            "SELECT dp_count(outcome, 0.01) FROM ({}) u",
            list("SELECT patient_id, outcome FROM visits", " UNION ALL ")
        ),
        "dp_join" => format!(
            "SELECT dp_count(outcome, 0.01) FROM visits CROSS JOIN {}",
            joined()
        ),
        // A chain of CTEs, each two levels of expression over the last: as written, each is
        // shallow; inlined by the optimiser, one expression about 2n levels deep (issue 41:
        // refused over 256 levels, `max_expression_depth`).
        "dp_inlined" => format!(
            "{} SELECT dp_count(outcome, 0.01) FROM c{} WHERE x > 0",
            ctes(
                "SELECT patient_id, outcome, visit_id AS x FROM visits",
                "patient_id, outcome, CASE WHEN outcome THEN x + 1 ELSE 0 END AS x"
            ),
            n - 1
        ),
        other => panic!("unknown family {other}"),
    }
}

const FAMILIES: &[&str] = &[
    "sum",
    "or",
    "and",
    "concat",
    "union",
    "cte",
    "subqueries",
    "parentheses",
    "joins",
    "dp_where",
    "dp_cte",
    "dp_union",
    "dp_join",
    "dp_inlined",
];

/// Every family, from small to several thousand: answered, or refused with one line naming a
/// limit; never a crash. The deep ones (2,000 terms and more) overflowed the stack before the
/// limits, and `dpsql` aborted (SIGABRT).
#[test]
fn long_and_deep_statements_are_refused_or_answered() {
    let dir = test_dir("family");
    let cfg = config(&dir, "");
    let mut refused = Vec::new();
    for kind in FAMILIES {
        for n in [10, 200, 1000, 3000, 10_000] {
            if n > 3000 && !matches!(*kind, "sum" | "concat" | "or") {
                continue;
            }
            let file = dir.join(format!("{kind}-{n}.sql"));
            std::fs::write(&file, statement(kind, n)).unwrap();
            let out = dpsql(&cfg, &file);
            let stderr = String::from_utf8_lossy(&out.stderr);
            match out.status.code() {
                Some(0) => assert!(n <= 256, "{kind} {n}: answered over the nesting limit"),
                Some(1) => {
                    let lines: Vec<&str> = stderr.lines().collect();
                    assert_eq!(lines.len(), 1, "{kind} {n}: not one line: {stderr}");
                    assert!(
                        lines[0].contains("limit"),
                        "{kind} {n}: refused without naming a limit: {stderr}"
                    );
                    refused.push((*kind, n));
                }
                _ => panic!("{kind} {n}: dpsql died ({}): {stderr}", out.status),
            }
        }
    }
    // Small statements are answered; every family of a thousand or more is refused.
    assert!(refused.iter().all(|(_, n)| *n >= 200), "{refused:?}");
    for kind in FAMILIES {
        assert!(
            refused.contains(&(*kind, 3000)),
            "{kind} 3000 not refused: {refused:?}"
        );
    }
}

/// The Rust API, as an embedding application calls it (`analyst_sql(..)` then `collect()` on
/// its own thread), answers every family at 250 levels, within the nesting limit, on a thread
/// of 2 MiB (a tokio worker's stack), or refuses it by a limit: never a crash. Before the
/// crate's plan walks grew their stack on demand (`#[recursive]`, as DataFusion's own do),
/// `cte` and `joins` at 120 and `union` at 250 overflowed it (debug build) in the privacy
/// analysis (`PlanAnalysis::relation`) or the join bound (`Bounder::bound`), and a stack
/// overflow aborts the embedding process. Run in a child process (this test binary again), so
/// that an overflow is a failed assertion.
#[test]
fn the_rust_api_answers_statements_within_the_limits_on_a_small_stack() {
    const CHILD: &str = "DP_LIMITS_EMBEDDED_CHILD";
    if std::env::var_os(CHILD).is_some() {
        return embedded_families();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_rust_api_answers_statements_within_the_limits_on_a_small_stack",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .stdin(Stdio::null())
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    // Just within the expression limit once inlined (about 250 levels of CASE and + over
    // 124 CTEs): evaluated on this 2 MiB stack.
    assert!(
        stdout.contains("dp_inlined 124: answered, 1 row"),
        "{stdout}"
    );
    for kind in FAMILIES {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{kind} 250: ")))
            .unwrap_or_else(|| panic!("no line for {kind}: {stdout}"));
        match *kind {
            // sqlparser's own recursion limit (50) refuses nested subqueries and parentheses.
            "subqueries" | "parentheses" => {
                assert!(line.contains("RecursionLimitExceeded"), "{line}")
            }
            // 250 CTEs of two levels each inline to about 500.
            "dp_inlined" => assert!(line.contains("max_expression_depth"), "{line}"),
            _ => assert!(
                line.ends_with(": answered, 1 row") || line.ends_with(": answered, 250 rows"),
                "{line}"
            ),
        }
    }
}

/// The child of [`the_rust_api_answers_statements_within_the_limits_on_a_small_stack`]: each
/// family at 250 levels through `analyst_sql` and `collect`, on a 2 MiB thread running a
/// current-thread runtime (planning and execution on that thread), one line each.
fn embedded_families() {
    std::thread::Builder::new()
        .name("embedded-2mib".to_string())
        .stack_size(2 << 20)
        .spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let ctx = locked_session().await;
                let cases = FAMILIES
                    .iter()
                    .map(|kind| (*kind, 250))
                    .chain([("dp_inlined", 124)]);
                for (kind, n) in cases {
                    let sql = statement(kind, n);
                    let answer = match datafusion_dp::analyst_sql(&ctx, &sql).await {
                        Ok(frame) => frame.collect().await,
                        Err(e) => Err(e),
                    };
                    match answer {
                        Ok(batches) => {
                            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                            let s = if rows == 1 { "" } else { "s" };
                            println!("{kind} {n}: answered, {rows} row{s}");
                        }
                        Err(e) => {
                            println!("{kind} {n}: refused: {}", e.to_string().replace('\n', " "))
                        }
                    }
                }
            });
        })
        .unwrap()
        .join()
        .unwrap();
}

/// The message names the limit and its value.
#[test]
fn refusals_name_the_limit_and_its_value() {
    let dir = test_dir("messages");
    let cfg = config(&dir, "");
    let deep = dir.join("deep.sql");
    std::fs::write(&deep, statement("sum", 2000)).unwrap();
    let out = dpsql(&cfg, &deep);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("over the limit of 256 levels (max_nesting_depth)"),
        "{stderr}"
    );
    // 300,000 bytes of a flat list: too long, whatever its depth.
    let long = dir.join("long.sql");
    let values = vec!["1"; 150_000].join(",");
    std::fs::write(&long, format!("SELECT 1 WHERE 1 IN ({values})")).unwrap();
    let out = dpsql(&cfg, &long);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("over the limit of 262144 bytes (max_statement_bytes)"),
        "{stderr}"
    );
}

/// Statements within the limits on the statement as written (size, nesting) that the plan
/// which would run is not (issue 41), each with the limit its refusal names: they aborted
/// or exhausted the process before.
fn over_the_plan_limits() -> Vec<(String, &'static str)> {
    // Forty CTEs of 200 terms, the last gated on one patient: one expression 8,000 levels
    // deep once inlined, a stack overflow (exit 134) on a worker's stack with the patient.
    let terms = " + 1".repeat(200);
    let mut deep = vec!["a0 AS (SELECT patient_id, visit_id AS x FROM visits)".to_string()];
    for i in 1..=40 {
        deep.push(format!(
            "a{i} AS (SELECT patient_id, x{terms} AS x FROM a{})",
            i - 1
        ));
    }
    let deep = format!(
        "WITH {} SELECT dp_count(patient_id, 0.01) FROM a40 WHERE CASE WHEN patient_id = \
         100002 THEN x > 0 ELSE true END",
        deep.join(", ")
    );
    // Forty CTEs each reading the last twice: 2^40 tables for DataFusion's SQL planner (40
    // levels were killed at 23 GB).
    let mut doubled = vec!["c0 AS (SELECT 1 AS x)".to_string()];
    for i in 1..=40 {
        doubled.push(format!(
            "c{i} AS (SELECT a.x FROM c{p} a CROSS JOIN c{p} b)",
            p = i - 1
        ));
    }
    let doubled = format!("WITH {} SELECT x FROM c40", doubled.join(", "));
    vec![
        (deep, "max_expression_depth"),
        (doubled, "max_table_references"),
        // A type of 16 GiB a value: its NULL literal, folded at planning, killed the process.
        (
            "SELECT arrow_cast(NULL, 'FixedSizeList(2147483647, Int64)') IS NULL".to_string(),
            "max_value_bytes",
        ),
        (
            "SELECT dp_count(patient_id, 0.01) FROM visits WHERE CASE WHEN patient_id = 100002 \
             THEN arrow_cast(make_array(visit_id), 'FixedSizeList(100000000, Int64)') IS NULL \
             ELSE true END"
                .to_string(),
            "max_value_bytes",
        ),
    ]
}

/// Each of [`over_the_plan_limits`] in `dpsql --config`: one line naming its limit, exit
/// status 1 (never a signal), and nothing charged (the ledger stays empty).
#[test]
fn statements_over_the_plan_limits_are_refused_before_the_charge() {
    let dir = test_dir("plan-limits");
    let cfg = config(&dir, "");
    for (i, (sql, limit)) in over_the_plan_limits().into_iter().enumerate() {
        let file = dir.join(format!("over-{i}.sql"));
        std::fs::write(&file, &sql).unwrap();
        let out = dpsql(&cfg, &file);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{limit}: {}: {stderr}",
            out.status
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(limit), "{limit}: {stderr}");
    }
    let budget = dir.join("budget.sql");
    std::fs::write(
        &budget,
        "SELECT entry, epsilon FROM dp_budget() WHERE entry = 'spent'",
    )
    .unwrap();
    let out = dpsql(&cfg, &budget);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "entry,epsilon\nspent,0.0",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const HONEST: &str = "SELECT dp_count(outcome, 0.25) AS n FROM visits";

/// A deep statement sent to a real `dp-server`, as a query and as a prepared statement, is
/// refused, and the server answers the next honest query. Before the limits the first one
/// aborted the server (stack overflow on a tokio worker) with every session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dp_server_refuses_deep_statements_and_keeps_serving() {
    let dir = test_dir("server");
    let server = Server::start(&config(&dir, ""));
    let mut client = login(&server.url(), "alice", "pw").await.unwrap();
    for kind in ["sum", "union", "cte", "concat"] {
        let err = query(&mut client, &statement(kind, 3000))
            .await
            .unwrap_err();
        assert!(err.contains("max_nesting_depth"), "{kind}: {err}");
        let err = client
            .prepare(statement(kind, 3000), None)
            .await
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_nesting_depth"), "prepared {kind}: {err}");
    }
    // Over the limits on the plan that would run (issue 41): refused, and the server up.
    for (sql, limit) in over_the_plan_limits() {
        let err = query(&mut client, &sql).await.unwrap_err();
        assert!(err.contains(limit), "{limit}: {err}");
    }
    // A chain of joins within the nesting limit, each join's output yielding
    // (`datafusion_dp::sql::cooperative`), is executed on a query thread.
    let joins = query(&mut client, &statement("joins", 250)).await.unwrap();
    assert_eq!(joins.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    let batches = query(&mut client, HONEST).await.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    // A new login works too: the process is up.
    let mut again = login(&server.url(), "alice", "pw").await.unwrap();
    assert_eq!(query(&mut again, HONEST).await.unwrap().len(), 1);
}

/// An aggregation of 15 million groups over `range()`, far over 64 MiB.
const HUGE: &str =
    "SELECT count(*) AS n FROM (SELECT value % 15000000 AS k FROM range(30000000) GROUP BY k)";

const SMALL_MEMORY: &str = "[limits]\nmemory_limit = \"64MiB\"\n";

/// With `[limits] memory_limit = "64MiB"`, a huge aggregation in a locked shell fails with one
/// resources line (naming the pool's size, or that spilling is off). Before the limit the pool was unbounded and the query
/// ran to the end, the process growing to about 900 MB (debug build).
#[test]
fn memory_limit_refuses_a_huge_aggregation_in_a_locked_shell() {
    let dir = test_dir("memory-shell");
    let cfg = config(&dir, SMALL_MEMORY);
    let file = dir.join("huge.sql");
    std::fs::write(&file, HUGE).unwrap();
    let out = dpsql(&cfg, &file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("Resources exhausted"), "{stderr}");
    // Which operator meets the limit first varies with the run (the aggregation's reservation
    // names the pool and its size; a spill without a spill directory says so instead).
    assert!(
        stderr.contains("pool_size: 64.0 MB") || stderr.contains("DiskManager is disabled"),
        "{stderr}"
    );
}

/// A locked shell holds a statement's whole result before it prints it: with 64 MiB, a public
/// query of 1 GB of rows fails with one resources line naming the limit (before, the process
/// grew until the system killed it), and a small one is answered.
#[test]
fn a_locked_shell_s_result_counts_against_its_memory_limit() {
    let dir = test_dir("memory-result");
    let cfg = config(&dir, SMALL_MEMORY);
    let file = dir.join("large.sql");
    std::fs::write(&file, "SELECT value, repeat('x', 1000) FROM range(1000000)").unwrap();
    let out = dpsql(&cfg, &file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}: {stderr}", out.status);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("[limits] memory_limit"), "{stderr}");
    std::fs::write(&file, "SELECT value, repeat('x', 1000) FROM range(1000)").unwrap();
    let out = dpsql(&cfg, &file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1001);
}

/// The same through a real `dp-server` with 64 MiB: refused with `ResourceExhausted`, and the
/// server answers an honest query afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_limit_refuses_a_huge_aggregation_and_the_server_keeps_serving() {
    let dir = test_dir("memory-server");
    let server = Server::start(&config(&dir, SMALL_MEMORY));
    let mut client = login(&server.url(), "alice", "pw").await.unwrap();
    let err = query(&mut client, HUGE).await.unwrap_err();
    assert!(err.contains("Resources exhausted"), "{err}");
    let batches = query(&mut client, HONEST).await.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
}

/// An aggregation that runs about 9 s in a debug build, over a one-second deadline.
const SLOW: &str =
    "SELECT count(*) AS n FROM (SELECT value % 15000000 AS k FROM range(30000000) GROUP BY k)";

const ONE_SECOND: &str = "[limits]\nquery_timeout_seconds = 1\n";

/// With `[limits] query_timeout_seconds = 1`, a slow query in a locked shell is stopped with
/// one line naming the limit. Before the deadline it ran to the end (about 9 s).
#[test]
fn query_deadline_stops_a_slow_query_in_a_locked_shell() {
    let dir = test_dir("deadline-shell");
    let cfg = config(&dir, ONE_SECOND);
    let file = dir.join("slow.sql");
    std::fs::write(&file, SLOW).unwrap();
    let started = std::time::Instant::now();
    let out = dpsql(&cfg, &file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("over the limit of 1 s (query_timeout_seconds)"),
        "{stderr}"
    );
    assert!(started.elapsed().as_secs() < 6, "{:?}", started.elapsed());
}

/// Through a real `dp-server`: the stream of a slow query ends with the deadline's error, and
/// the server answers an honest query afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_deadline_stops_a_slow_stream_and_the_server_keeps_serving() {
    let dir = test_dir("deadline-server");
    let server = Server::start(&config(&dir, ONE_SECOND));
    let mut client = login(&server.url(), "alice", "pw").await.unwrap();
    let started = std::time::Instant::now();
    let err = query(&mut client, SLOW).await.unwrap_err();
    assert!(err.contains("query_timeout_seconds"), "{err}");
    assert!(started.elapsed().as_secs() < 6, "{:?}", started.elapsed());
    let batches = query(&mut client, HONEST).await.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
}

/// A locked session over `data/visits.csv` (protected by `patient_id`), from the public API.
async fn locked_session() -> datafusion::prelude::SessionContext {
    use datafusion::prelude::{CsvReadOptions, SessionConfig, SessionContext};
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
    datafusion_dp::register(&ctx).unwrap();
    ctx.register_csv("visits", VISITS, CsvReadOptions::new())
        .await
        .unwrap();
    datafusion_dp::protect(
        &ctx,
        "visits",
        datafusion_dp::Protection::Unit("patient_id".into()),
    )
    .unwrap();
    ctx.sql("SET dp.epsilon_budget = 10").await.unwrap();
    datafusion_dp::lock(&ctx).unwrap();
    ctx
}

/// The joins of `plan` (operators of two inputs or more), each with whether its output is
/// wrapped in a `YieldExec` and whether an aggregation is above it.
fn joins(
    plan: &std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    wrapped: bool,
    under_aggregate: bool,
    found: &mut Vec<(String, bool, bool)>,
) {
    use datafusion::physical_plan::aggregates::AggregateExec;
    use datafusion_dp::sql::cooperative::YieldExec;
    if plan.children().len() >= 2 {
        found.push((plan.name().to_string(), wrapped, under_aggregate));
    }
    let wraps = plan.downcast_ref::<YieldExec>().is_some();
    let aggregate = under_aggregate || plan.downcast_ref::<AggregateExec>().is_some();
    for child in plan.children() {
        joins(child, wraps, aggregate, found);
    }
}

/// Every physical plan of a locked session yields to the runtime from every join, so that a
/// query stopped by its deadline, a cancel or Ctrl-C stops (`datafusion_dp::sql::cooperative`):
/// a cross join under an aggregation, public or joined with a protected table, is wrapped in
/// a `YieldExec`. DataFusion's own `EnsureCooperative` wraps only scans and exchanges,
/// and before the rule was the session's (it was applied by `dp-server` alone) these joins
/// were bare in the session's plans (`dpsql --config`, a locked Ballista scheduler).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_session_s_joins_yield_to_the_runtime() {
    let ctx = locked_session().await;
    for sql in [
        "SELECT count(*) FROM range(1000000) a CROSS JOIN range(1000000) b",
        "SELECT dp_count(visits.region, 1.0) FROM visits CROSS JOIN range(100000)",
    ] {
        let plan = datafusion_dp::analyst_sql(&ctx, sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let mut found = Vec::new();
        joins(&plan, false, false, &mut found);
        let shown = datafusion::physical_plan::displayable(plan.as_ref()).indent(true);
        assert_eq!(found.len(), 1, "{sql}\n{shown}");
        assert!(
            found
                .iter()
                .all(|(_, wrapped, aggregated)| *wrapped && *aggregated),
            "{sql}: {found:?}\n{shown}"
        );
    }
}

/// A trusted session with the DP functions (the owner's, `dpsql` without `--config`) keeps
/// DataFusion's plans: no `YieldExec` above its joins (issue 46: the rule is the locked
/// sessions'), and the plan is the one a session without the extension makes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_session_s_joins_are_datafusion_s() {
    use datafusion::prelude::{SessionConfig, SessionContext};
    let sql = "SELECT count(*) FROM range(1000) a JOIN range(1000) b ON a.value = b.value";
    let config = || SessionConfig::new().with_target_partitions(2);
    let plain = SessionContext::new_with_config(config());
    let trusted = SessionContext::new_with_config(config());
    datafusion_dp::register(&trusted).unwrap();
    let mut shown = Vec::new();
    for ctx in [&plain, &trusted] {
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let mut found = Vec::new();
        joins(&plan, false, false, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(!found[0].1, "{found:?}");
        shown.push(
            datafusion::physical_plan::displayable(plan.as_ref())
                .indent(true)
                .to_string(),
        );
    }
    assert_eq!(shown[0], shown[1]);
    // Locking the same session adds the rule.
    ctx_lock(&trusted).await;
    let plan = datafusion_dp::analyst_sql(&trusted, sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let mut found = Vec::new();
    joins(&plan, false, false, &mut found);
    assert!(found.iter().all(|(_, wrapped, _)| *wrapped), "{found:?}");
}

async fn ctx_lock(ctx: &datafusion::prelude::SessionContext) {
    ctx.sql("SET dp.epsilon_budget = 1").await.unwrap();
    datafusion_dp::lock(ctx).unwrap();
}

/// A locked session's cross join under an aggregation, executed on a runtime of one thread
/// and stopped by a timeout of half a second, stops: the timeout fires only when the query's
/// task yields. Before every join yielded, the task yielded only when the join next read its
/// probe side's scan (after 1,000,000 batches of the join's output): the timeout fired after
/// 7.4 s (debug build); now within a few batches of the join, at about 0.5 s.
#[test]
fn a_locked_session_s_cross_join_stops_at_a_timeout() {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let outcome = runtime.block_on(async {
            let ctx = locked_session().await;
            let sql = "SELECT count(*) FROM range(1000000) a CROSS JOIN range(1000000) b";
            let frame = datafusion_dp::analyst_sql(&ctx, sql).await.unwrap();
            let started = std::time::Instant::now();
            let run = tokio::time::timeout(Duration::from_millis(500), frame.collect()).await;
            (run.is_err(), started.elapsed())
        });
        let _ = sender.send(outcome);
    });
    let (timed_out, took) = receiver
        .recv_timeout(Duration::from_secs(60))
        .expect("the query stopped at its timeout");
    assert!(timed_out, "the query ended before its timeout");
    assert!(took < Duration::from_secs(2), "stopped after {took:?}");
}

/// A chain of 150 cross joins of one row each is answered at once in a locked session. When
/// each join was wrapped in DataFusion's `CooperativeExec`, which spends the task's tokio
/// budget of 128 before it polls its input, more than 128 nested in one task never reached
/// the leaves: the query ran until its deadline (600 s; 130 joins: more than 60 s, 100
/// joins: 0.1 s). Planned and run on a thread with a large stack, as `dp-server` and `dpsql`
/// plan.
#[test]
fn a_locked_session_s_long_join_chain_is_answered() {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let rows = runtime.block_on(async {
                let ctx = locked_session().await;
                let tables: Vec<String> = (0..150)
                    .map(|i| format!("(SELECT 1 AS x{i}) t{i}"))
                    .collect();
                let sql = format!("SELECT 1 AS one FROM {}", tables.join(" CROSS JOIN "));
                let frame = datafusion_dp::analyst_sql(&ctx, &sql).await.unwrap();
                let batches = frame.collect().await.unwrap();
                batches.iter().map(|b| b.num_rows()).sum::<usize>()
            });
            let _ = sender.send(rows);
        })
        .unwrap();
    let rows = receiver
        .recv_timeout(Duration::from_secs(60))
        .expect("answered within 60 s");
    assert_eq!(rows, 1);
}
