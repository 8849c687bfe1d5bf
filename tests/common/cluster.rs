//! A one-machine Ballista cluster of real processes, as a user starts it: a `dp-scheduler`
//! (trusted, or locked by an owner's configuration) and two `dp-executor`s on free loopback
//! ports, killed when the test ends.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// Child processes, killed when the test ends (also on failure).
pub struct Cluster(pub Vec<Child>);

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A port nothing listens on now (the OS's choice).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `binary args`, its output to `log`.
pub fn start(binary: &str, args: &[String], log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    Command::new(binary)
        .args(args)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{binary}: {e}"))
}

/// A `dp-scheduler --owner-config config` process (push scheduling) logging to
/// `dir/scheduler.log`: the cluster, its internal port and its client port.
pub fn start_locked_scheduler(dir: &Path, config: &Path) -> (Cluster, u16, u16) {
    let (internal, clients) = (free_port(), free_port());
    let scheduler = start(
        env!("CARGO_BIN_EXE_dp-scheduler"),
        &[
            "--bind-host".into(),
            "127.0.0.1".into(),
            "--bind-port".into(),
            internal.to_string(),
            "--owner-config".into(),
            config.display().to_string(),
            "--client-port".into(),
            clients.to_string(),
        ],
        &dir.join("scheduler.log"),
    );
    (Cluster(vec![scheduler]), internal, clients)
}

/// Starts two `dp-executor` processes of the scheduler on `port` (Ballista's default, push
/// scheduling), working in `dir/work-N`; returns their logs.
pub fn start_executors(cluster: &mut Cluster, dir: &Path, port: u16) -> Vec<PathBuf> {
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
                port.to_string(),
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
    logs
}
