//! The one-machine cluster of docs/distributed.md, as a user starts it: a `dp-scheduler` process, two
//! `dp-executor` processes and `dpsql --scheduler` (or `dp-server --scheduler`), on free
//! loopback ports. A seeded query must print exactly what the single-node `dpsql` prints, and
//! run on the executors.
#![cfg(feature = "ballista")]

mod common;

use common::cluster::{free_port, start, start_executors, start_locked_scheduler, Cluster};

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one `dpsql` run may take before the test fails: a query that hangs on the cluster
/// (an executor that dies at task launch leaves the job waiting forever) fails the test
/// instead of blocking it. Queries of the test data take about a second.
const QUERY_LIMIT: Duration = Duration::from_secs(120);

/// Runs `dpsql args` to completion, killing it and failing the test after [`QUERY_LIMIT`].
fn dpsql(args: &[&str]) -> Output {
    dpsql_with(args, &[])
}

/// [`dpsql`] with the environment variables `env` (a locked cluster's `DP_PASSWORD`).
fn dpsql_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    run_limited_with(env!("CARGO_BIN_EXE_dpsql"), args, env)
}

/// Runs `binary args` to completion, killing it and failing the test after [`QUERY_LIMIT`].
fn run_limited(binary: &str, args: &[&str]) -> Output {
    run_limited_with(binary, args, &[])
}

/// [`run_limited`] with the environment variables `env`, and none of the test runner's
/// credentials for a locked cluster.
fn run_limited_with(binary: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(binary)
        .args(args)
        .env_remove("DP_USER")
        .env_remove("DP_PASSWORD")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drain both pipes while waiting (a full pipe would stall the child).
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).map(|_| bytes)
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > QUERY_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{binary} {args:?} did not finish in {QUERY_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    Output {
        status,
        stdout: stdout.join().unwrap().unwrap(),
        stderr: stderr.join().unwrap().unwrap(),
    }
}

/// A `dp-scheduler` process (trusted, push scheduling) on a free loopback port, logging to
/// `dir/scheduler.log`.
fn start_scheduler(dir: &Path) -> (Cluster, u16) {
    let port = free_port();
    let scheduler = start(
        env!("CARGO_BIN_EXE_dp-scheduler"),
        &[
            "--bind-host".into(),
            "127.0.0.1".into(),
            "--bind-port".into(),
            port.to_string(),
        ],
        &dir.join("scheduler.log"),
    );
    (Cluster(vec![scheduler]), port)
}

/// Runs `dpsql args` until it succeeds (the servers take a moment to start and register) or
/// 60 s pass.
fn dpsql_on_cluster(args: &[&str]) -> Output {
    dpsql_on_cluster_with(args, &[])
}

/// [`dpsql_on_cluster`] with the environment variables `env`.
fn dpsql_on_cluster_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let started = Instant::now();
    loop {
        let out = dpsql_with(args, env);
        if out.status.success() || started.elapsed() > Duration::from_secs(60) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// How many tasks the executors ran, from their logs.
/// Waits until the cluster at `url` answers `sql` over the `--table` argument `table`.
fn wait_for_cluster(url: &str, table: &str, sql: &str) {
    wait_for_cluster_with(url, table, sql, &[])
}

/// [`wait_for_cluster`] with the environment variables `env`.
fn wait_for_cluster_with(url: &str, table: &str, sql: &str, env: &[(&str, &str)]) {
    let ready = dpsql_on_cluster_with(&["--scheduler", url, "--table", table, "-c", sql], env);
    assert!(
        ready.status.success(),
        "{}",
        String::from_utf8_lossy(&ready.stderr)
    );
}

fn tasks_run(logs: &[PathBuf]) -> usize {
    logs.iter()
        .map(|log| {
            std::fs::read_to_string(log)
                .unwrap()
                .matches("Finished task")
                .count()
        })
        .sum()
}

#[test]
fn a_scheduler_and_two_executor_processes_run_dpsql_queries() {
    let dir = common::scratch("cluster");
    let (mut cluster, scheduler_port) = start_scheduler(&dir);
    let logs = start_executors(&mut cluster, &dir, scheduler_port);
    let visits = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/visits.csv");
    let table = format!("visits={}", visits.display());
    let sql = "SET dp.public_groups = 'assert'; SET dp.seed = 11; \
               SELECT region, dp_rr_ci(outcome, exposed, 1.0) AS rr, dp_count(1, 0.5) AS n \
               FROM visits GROUP BY region ORDER BY region";
    let single = dpsql(&["--table", &table, "-c", sql, "--format", "csv"]);
    assert!(single.status.success(), "{single:?}");
    let url = format!("df://127.0.0.1:{scheduler_port}");
    let distributed = dpsql_on_cluster(&[
        "--scheduler",
        &url,
        "--table",
        &table,
        "-c",
        sql,
        "--format",
        "csv",
    ]);
    assert!(
        distributed.status.success(),
        "{}",
        String::from_utf8_lossy(&distributed.stderr)
    );
    let text = String::from_utf8(single.stdout).unwrap();
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(
        text.starts_with("region,rr.estimate,rr.lower,rr.upper,"),
        "CSV flattens the struct: {text}"
    );
    assert_eq!(String::from_utf8(distributed.stdout).unwrap(), text);
    let tasks = tasks_run(&logs);
    assert!(tasks > 0, "the executors ran no task");
}

/// Panic messages in the executors' logs (a panicking task launch kills the executor's
/// connection and the job never finishes).
fn panics(logs: &[PathBuf]) -> Vec<String> {
    logs.iter()
        .flat_map(|log| {
            std::fs::read_to_string(log)
                .unwrap()
                .lines()
                .filter(|line| line.contains("panicked"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn push_scheduling_runs_a_query_grouped_by_a_public_keys_table() {
    // Ballista's default (push) scheduling on a unit-protected query grouped by a table of
    // public keys: the phantom rows of the keys are a union branch beside the bounded rows,
    // so a task of the stage's phantom partitions holds the bounding's sort restricted to no
    // partition, which DataFusion's SortExec::reset_state (run at task launch) asserts
    // against in debug builds (src/distributed/unread_sort.rs). Must run, and give one node's
    // result.
    let dir = common::scratch("push");
    let (mut cluster, scheduler_port) = start_scheduler(&dir);
    let logs = start_executors(&mut cluster, &dir, scheduler_port);
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let visits = format!("visits={}", data.join("visits.csv").display());
    let regions = format!("regions={}", data.join("regions.csv").display());
    let sql = "SET dp.protected_tables = 'visits(patient_id)'; SET dp.public_tables = 'regions'; \
               SET dp.public_groups = 'regions'; SET dp.seed = 11; \
               SELECT region, dp_count(1, 0.5) AS n FROM visits GROUP BY region ORDER BY region";
    let args = [
        "--table", &visits, "--table", &regions, "-c", sql, "--format", "csv",
    ];
    let single = dpsql(&args);
    assert!(single.status.success(), "{single:?}");
    let url = format!("df://127.0.0.1:{scheduler_port}");
    // Wait for the cluster with a query without bounding, then run the query once.
    wait_for_cluster(
        &url,
        &regions,
        "SET dp.public_tables = 'regions'; SELECT count(*) FROM regions",
    );
    let distributed = dpsql(&[&["--scheduler", url.as_str()][..], &args[..]].concat());
    assert!(
        distributed.status.success(),
        "{}",
        String::from_utf8_lossy(&distributed.stderr)
    );
    assert_eq!(panics(&logs), Vec::<String>::new());
    let text = String::from_utf8(single.stdout).unwrap();
    assert_eq!(
        text.lines().count(),
        5,
        "a header and the four public regions: {text}"
    );
    assert_eq!(String::from_utf8(distributed.stdout).unwrap(), text);
    assert!(tasks_run(&logs) > 0, "the executors ran no task");
}

/// An owner configuration `dir/NAME.toml` over the bundled data: `visits` protected by
/// `patient_id`, `regions` public and the table of public keys, one analyst `alice` (ε budget
/// 1, with `password` if given) whose ledger is `dir/NAME.ledger`; returns both paths.
fn owner_config(dir: &Path, name: &str, password: Option<&str>) -> (PathBuf, PathBuf) {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let (config, ledger) = (
        dir.join(format!("{name}.toml")),
        dir.join(format!("{name}.ledger")),
    );
    let password = password.map_or(String::new(), |p| format!("password = \"{p}\"\n"));
    std::fs::write(
        &config,
        format!(
            "[[table]]\nname = \"visits\"\nlocation = \"{}\"\nunit = \"patient_id\"\n\
             columns = [\"visit_id BIGINT\", \"patient_id BIGINT\", \"region VARCHAR\", \"month VARCHAR\", \"exposed BOOLEAN\", \"outcome BOOLEAN\"]\n\n\
             [[table]]\nname = \"regions\"\nlocation = \"{}\"\nprotection = \"public\"\n\n\
             [options]\npublic_groups = \"regions\"\n\n\
             [[analyst]]\nname = \"alice\"\n{password}epsilon_budget = 1.0\nledger = \"{}\"\n",
            data.join("visits.csv").display(),
            data.join("regions.csv").display(),
            ledger.display()
        ),
    )
    .unwrap();
    (config, ledger)
}

#[test]
fn a_locked_scheduler_process_charges_the_owners_ledger() {
    // docs/distributed.md's locked cluster: `dp-scheduler --owner-config`, executors on its internal
    // port, `dpsql --scheduler df://alice@...` (password in DP_PASSWORD) on its client port with
    // a budget it sets itself (ignored).
    let dir = common::scratch("locked");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let (config, ledger) = owner_config(&dir, "owner", Some("alice-pw"));
    let password = [("DP_PASSWORD", "alice-pw")];
    let (mut cluster, internal, clients) = start_locked_scheduler(&dir, &config);
    // Ballista's default (push) scheduling, with the owner's table of public keys.
    let logs = start_executors(&mut cluster, &dir, internal);
    let visits = format!("visits={}", data.join("visits.csv").display());
    let regions = format!("regions={}", data.join("regions.csv").display());
    let url = format!("df://alice@127.0.0.1:{clients}");
    // Wait for the cluster with a query of the public table (no charge), then charge once.
    wait_for_cluster_with(&url, &regions, "SELECT count(*) FROM regions", &password);
    // Without the password, with a wrong one, or as no analyst, dpsql is refused at connection
    // and nothing is charged.
    let query = "SELECT dp_count(visit_id, 0.5) FROM visits";
    let anonymous = format!("df://127.0.0.1:{clients}");
    for (url, env, expected) in [
        (url.as_str(), &[][..], "DP_PASSWORD"),
        (
            url.as_str(),
            &[("DP_PASSWORD", "wrong")][..],
            "invalid user name or password",
        ),
        (anonymous.as_str(), &password[..], "df://NAME@host:port"),
    ] {
        let out = dpsql_with(&["--scheduler", url, "--table", &visits, "-c", query], env);
        assert!(!out.status.success(), "{url} {env:?}: answered");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{url} {env:?}: {err}");
    }
    assert!(
        datafusion_dp::sql::accounting::ledger::read(&ledger).map_or(true, |e| e.is_empty()),
        "refused clients charged nothing"
    );
    let out = dpsql_with(
        &[
            "--scheduler",
            &url,
            "--table",
            &visits,
            "--table",
            &regions,
            "-c",
            "SET dp.epsilon_budget = 100; \
         SELECT region, dp_count(visit_id, 0.75) AS n FROM visits GROUP BY region",
            "--format",
            "csv",
        ],
        &password,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().count(),
        5,
        "a header and the four public regions: {text}"
    );
    let charged: Vec<f64> = datafusion_dp::sql::accounting::ledger::read(&ledger)
        .unwrap()
        .iter()
        .map(|e| e.epsilon)
        .collect();
    assert_eq!(charged, vec![0.75]);
    // dp_budget() on the client reports the owner's analyst, read from the scheduler.
    let budget = dpsql_with(
        &[
            "--scheduler",
            &url,
            "-c",
            "SET dp.epsilon_budget = 100; SELECT entry, epsilon FROM dp_budget() ORDER BY entry",
            "--format",
            "csv",
        ],
        &password,
    );
    assert!(
        budget.status.success(),
        "{}",
        String::from_utf8_lossy(&budget.stderr)
    );
    assert_eq!(
        String::from_utf8(budget.stdout).unwrap(),
        "entry,epsilon\nbudget,1.0\ncharge,0.75\nremaining,0.25\nspent,0.75\n"
    );
    // 0.25 is left of the owner's budget of 1, whatever the client set.
    let refused = dpsql_with(
        &[
            "--scheduler",
            &url,
            "--table",
            &visits,
            "-c",
            "SET dp.epsilon_budget = 100; SELECT dp_count(visit_id, 0.5) FROM visits",
        ],
        &password,
    );
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("budget"), "{err}");
    assert_eq!(panics(&logs), Vec::<String>::new());
    assert!(tasks_run(&logs) > 0, "the executors ran no task");
    // dp-server binds and charges itself: it refuses to front a locked cluster, whose
    // scheduler would charge its own owner's ledger.
    #[cfg(feature = "server")]
    {
        let (config, _) = owner_config(&dir, "server", Some("pw"));
        let out = run_limited(
            env!("CARGO_BIN_EXE_dp-server"),
            &[
                "--config",
                config.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
                "--scheduler",
                &url,
            ],
        );
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is locked"), "{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
}

#[cfg(feature = "server")]
#[test]
fn dp_server_runs_analysts_queries_on_a_trusted_cluster() {
    // `dp-server --scheduler`: an analyst's Flight SQL query is bound and charged by the
    // server and run by the executors; the server still refuses what a locked session refuses,
    // answers `dp_budget()` for the caller, and stops at the budget.
    use arrow::array::AsArray;
    use arrow::datatypes::Float64Type;
    use common::server::{login, query, Server};
    let dir = common::scratch("serve");
    let (mut cluster, scheduler_port) = start_scheduler(&dir);
    let logs = start_executors(&mut cluster, &dir, scheduler_port);
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let regions = format!("regions={}", data.join("regions.csv").display());
    let url = format!("df://127.0.0.1:{scheduler_port}");
    wait_for_cluster(
        &url,
        &regions,
        "SET dp.public_tables = 'regions'; SELECT count(*) FROM regions",
    );
    let (config, ledger) = owner_config(&dir, "server", Some("pw"));
    let server = Server::start_with(&config, &["--scheduler", &url]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut alice = login(&server.url(), "alice", "pw").await.unwrap();
        let tasks_before = tasks_run(&logs);
        let batches = query(
            &mut alice,
            "SELECT region, dp_count(visit_id, 0.75) AS n FROM visits GROUP BY region",
        )
        .await
        .unwrap();
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 4, "the four public regions");
        assert!(
            tasks_run(&logs) > tasks_before,
            "the executors ran no task of the analyst's query"
        );
        let err = query(&mut alice, "SELECT * FROM visits").await.unwrap_err();
        assert!(err.contains("visits"), "{err}");
        let spent = query(
            &mut alice,
            "SELECT epsilon FROM dp_budget() WHERE entry = 'spent'",
        )
        .await
        .unwrap();
        assert_eq!(
            spent[0].column(0).as_primitive::<Float64Type>().value(0),
            0.75
        );
        let err = query(&mut alice, "SELECT dp_count(visit_id, 0.5) FROM visits")
            .await
            .unwrap_err();
        assert!(err.contains("budget"), "{err}");
    });
    let charged: Vec<f64> = datafusion_dp::sql::accounting::ledger::read(&ledger)
        .unwrap()
        .iter()
        .map(|e| e.epsilon)
        .collect();
    assert_eq!(charged, vec![0.75], "one ledger line per answered query");
    assert_eq!(panics(&logs), Vec::<String>::new());
}

/// A query over public rows that runs far longer than [`DEADLINE`] on the cluster: 4^13
/// (about 67 million) rows of a cross join of the 4-row `regions` table, counted.
const SLOW_ON_A_CLUSTER: &str = "SELECT count(*) FROM regions a, regions b, regions c, \
    regions d, regions e, regions f, regions g, regions h, regions i, regions j, regions k, \
    regions l, regions m";

/// The owner's `[limits]` of the deadline tests: 2 s.
const DEADLINE: &str = "[limits]\nquery_timeout_seconds = 2\n";

/// An owner configuration of [`owner_config`] with [`DEADLINE`].
fn owner_config_with_deadline(dir: &Path, name: &str, password: &str) -> PathBuf {
    let (config, _) = owner_config(dir, name, Some(password));
    let text = std::fs::read_to_string(&config).unwrap() + DEADLINE;
    std::fs::write(&config, text).unwrap();
    config
}

/// Whether the processes `pids` stop using the CPU: their CPU time grows by less than 0.5 s in
/// the 3 s from a second after now (a job running on would take both cores of this machine).
fn assert_stop_using_the_cpu(pids: &[u32]) {
    let cpu = || {
        pids.iter()
            .map(|&pid| common::cpu_seconds_of(pid))
            .sum::<f64>()
    };
    std::thread::sleep(Duration::from_secs(1));
    let before = cpu();
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu() - before;
    eprintln!("executors' CPU time in the 3 s after the stop: {used:.2} s");
    assert!(
        used < 0.5,
        "the executors ran on: {used:.2} s of CPU in 3 s"
    );
}

#[test]
fn a_locked_scheduler_stops_a_job_at_the_owners_deadline() {
    // `[limits] query_timeout_seconds` on a locked cluster: its scheduler cancels a job still
    // running at the deadline, with its tasks on the executors, and the analyst's error names
    // the limit. Before, the job ran on to its end whatever the owner's limit said.
    let dir = common::scratch("locked-deadline");
    let config = owner_config_with_deadline(&dir, "owner", "alice-pw");
    let password = [("DP_PASSWORD", "alice-pw")];
    let (mut cluster, internal, clients) = start_locked_scheduler(&dir, &config);
    let logs = start_executors(&mut cluster, &dir, internal);
    let executors: Vec<u32> = cluster.0[1..].iter().map(|c| c.id()).collect();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let regions = format!("regions={}", data.join("regions.csv").display());
    let url = format!("df://alice@127.0.0.1:{clients}");
    wait_for_cluster_with(&url, &regions, "SELECT count(*) FROM regions", &password);
    let started = Instant::now();
    let out = dpsql_with(
        &[
            "--scheduler",
            &url,
            "--table",
            &regions,
            "-c",
            SLOW_ON_A_CLUSTER,
        ],
        &password,
    );
    let stopped = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("stopped after {stopped:?}: {err}");
    assert!(!out.status.success(), "answered after {stopped:?}");
    assert!(
        err.contains("over the limit of 2 s (query_timeout_seconds)"),
        "{err}"
    );
    assert_stop_using_the_cpu(&executors);
    // The cluster answers the next query.
    wait_for_cluster_with(&url, &regions, "SELECT count(*) FROM regions", &password);
    assert_eq!(panics(&logs), Vec::<String>::new());
}

#[cfg(feature = "server")]
#[test]
fn dp_server_stops_a_cluster_query_at_the_owners_deadline() {
    // `dp-server --scheduler` under `[limits] query_timeout_seconds`: the analyst's stream ends
    // with the deadline's error, and the server cancels the job on the trusted cluster, which
    // every analyst shares. Before, the server's sessions on a cluster had no deadline, and a
    // stream dropped for any reason (`CancelFlightInfo`, a client gone) left its job running
    // on the executors to its end.
    use common::server::{login, query, Server};
    let dir = common::scratch("serve-deadline");
    let (mut cluster, scheduler_port) = start_scheduler(&dir);
    let logs = start_executors(&mut cluster, &dir, scheduler_port);
    let executors: Vec<u32> = cluster.0[1..].iter().map(|c| c.id()).collect();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let regions = format!("regions={}", data.join("regions.csv").display());
    let url = format!("df://127.0.0.1:{scheduler_port}");
    wait_for_cluster(
        &url,
        &regions,
        "SET dp.public_tables = 'regions'; SELECT count(*) FROM regions",
    );
    let config = owner_config_with_deadline(&dir, "server", "pw");
    let server = Server::start_with(&config, &["--scheduler", &url]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut alice = login(&server.url(), "alice", "pw").await.unwrap();
        let started = Instant::now();
        let err = query(&mut alice, SLOW_ON_A_CLUSTER).await.unwrap_err();
        let stopped = started.elapsed();
        eprintln!("stopped after {stopped:?}: {err}");
        assert!(err.contains("query_timeout_seconds"), "{err}");
        assert!(stopped < Duration::from_secs(30), "{stopped:?}");
        assert_stop_using_the_cpu(&executors);
        let regions = query(&mut alice, "SELECT count(*) FROM regions")
            .await
            .unwrap();
        assert_eq!(regions.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    });
    assert_eq!(panics(&logs), Vec::<String>::new());
}
