//! The README's one-machine cluster, as a user starts it: a `dp-scheduler` process, two
//! `dp-executor` processes and `dpsql --scheduler`, on free loopback ports. A seeded query
//! must print exactly what the single-node `dpsql` prints, and run on the executors.
#![cfg(feature = "ballista")]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Child processes, killed when the test ends (also on failure).
struct Cluster(Vec<Child>);

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A port nothing listens on now (the OS's choice).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start(binary: &str, args: &[String], log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    Command::new(binary)
        .args(args)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{binary}: {e}"))
}

fn dpsql(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dpsql"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_scheduler_and_two_executor_processes_run_dpsql_queries() {
    let dir = std::env::temp_dir().join(format!("datafusion-dp-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scheduler_port = free_port();
    let mut cluster = Cluster(vec![start(
        env!("CARGO_BIN_EXE_dp-scheduler"),
        &[
            "--bind-host".into(),
            "127.0.0.1".into(),
            "--bind-port".into(),
            scheduler_port.to_string(),
        ],
        &dir.join("scheduler.log"),
    )]);
    let logs: Vec<PathBuf> = (0..2)
        .map(|i| dir.join(format!("executor-{i}.log")))
        .collect();
    for (i, log) in logs.iter().enumerate() {
        let work = dir.join(format!("work-{i}"));
        std::fs::create_dir_all(&work).unwrap();
        cluster.0.push(start(
            env!("CARGO_BIN_EXE_dp-executor"),
            &[
                "--bind-host".into(),
                "127.0.0.1".into(),
                "--scheduler-port".into(),
                scheduler_port.to_string(),
                "--scheduler-connect-timeout-seconds".into(),
                "30".into(),
                "--bind-port".into(),
                free_port().to_string(),
                "--bind-grpc-port".into(),
                free_port().to_string(),
                "--work-dir".into(),
                work.display().to_string(),
            ],
            log,
        ));
    }
    let visits = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/visits.csv");
    let table = format!("visits={}", visits.display());
    let sql = "SET dp.public_groups = 'assert'; SET dp.seed = 11; \
               SELECT region, dp_rr_ci(outcome, exposed, 1.0) AS rr, dp_count(1, 0.5) AS n \
               FROM visits GROUP BY region ORDER BY region";
    let single = dpsql(&["--table", &table, "-c", sql, "--format", "csv"]);
    assert!(single.status.success(), "{single:?}");
    let url = format!("df://127.0.0.1:{scheduler_port}");
    // The servers take a moment to start and register: retry for up to 60 s.
    let started = Instant::now();
    let distributed = loop {
        let out = dpsql(&[
            "--scheduler",
            &url,
            "--table",
            &table,
            "-c",
            sql,
            "--format",
            "csv",
        ]);
        if out.status.success() || started.elapsed() > Duration::from_secs(60) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
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
    let tasks: usize = logs
        .iter()
        .map(|log| {
            std::fs::read_to_string(log)
                .unwrap()
                .matches("Finished task")
                .count()
        })
        .sum();
    assert!(tasks > 0, "the executors ran no task");
}
