//! Programs on a locked Ballista cluster of real processes (issue 41): one cluster per side of
//! a neighbouring pair, each a `dp-scheduler --owner-config` and two `dp-executor`s over that
//! side's Parquet tables, the analyst's `dpsql --scheduler` a process per run. What the
//! analyst sees of a run is an [`Observation`] for the D1 == D2 rule ([`super::observe`]).

use super::child::Cost;
use super::data::{self, Layout};
use super::observe::{releases, tokens, Observation, Program};
use crate::common::cluster::{start_executors, start_locked_scheduler, Cluster};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const PASSWORD: &str = "fuzz-pw";

/// The analyst's budget as read before each run: the charges so far, their sums (one line,
/// the header first). The ledger is deterministic (each charge is a function of the query
/// alone), so the first reading at which two sides differ follows the run that charged them
/// apart.
const READING: &str = "SELECT count(*) AS reading_charges, sum(epsilon) AS reading_epsilon, \
                       sum(delta) AS reading_delta FROM dp_budget() WHERE entry = 'charge'";

/// One locked cluster over one side's tables.
pub struct LockedCluster {
    pub processes: Cluster,
    pub dir: PathBuf,
    client_args: Vec<String>,
    /// The budget's reading before each run, and after the last ([`Self::finish`]).
    pub readings: Vec<String>,
}

impl LockedCluster {
    /// Writes `people`'s tables as Parquet under `dir` and starts a cluster over them, its
    /// deadline `deadline_seconds`; returns when it answers a query.
    pub fn start(dir: &Path, people: &[data::Person], deadline_seconds: u64) -> Self {
        let config = data::write_dataset(people, Layout::Parquet, dir);
        let text = std::fs::read_to_string(&config).unwrap().replace(
            "name = \"analyst\"\n",
            &format!("name = \"analyst\"\npassword = \"{PASSWORD}\"\n"),
        ) + &format!("\n[limits]\nquery_timeout_seconds = {deadline_seconds}\n");
        std::fs::write(&config, text).unwrap();
        let (mut processes, internal, clients) = start_locked_scheduler(dir, &config);
        start_executors(&mut processes, dir, internal);
        // The analyst's client declares the owner's tables by name (the scheduler reads its
        // own).
        let mut client_args: Vec<String> = vec![
            "--scheduler".into(),
            format!("df://analyst@127.0.0.1:{clients}"),
            "--format".into(),
            "csv".into(),
        ];
        for table in ["visits", "t", "lookup", "regions", "sink"] {
            client_args.push("--table".into());
            client_args.push(format!(
                "{table}={}",
                dir.join(format!("{table}.parquet")).display()
            ));
        }
        let cluster = Self {
            processes,
            dir: dir.to_path_buf(),
            client_args,
            readings: Vec::new(),
        };
        let probe = ["SELECT dp_count(patient_id, 1.0) FROM visits".to_string()];
        let waited = Instant::now();
        while !cluster.dpsql(&probe).status.success() {
            assert!(
                waited.elapsed() < Duration::from_secs(60),
                "the cluster in {} did not answer within 60 s",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        cluster
    }

    /// One `dpsql --scheduler` process running `statements` (it stops at the first error).
    pub fn dpsql(&self, statements: &[String]) -> Output {
        let mut args = self.client_args.clone();
        for statement in statements {
            args.push("-c".into());
            args.push(statement.clone());
        }
        Command::new(env!("CARGO_BIN_EXE_dpsql"))
            .args(&args)
            .env("DP_PASSWORD", PASSWORD)
            .output()
            .unwrap()
    }

    /// The CPU time the cluster's processes have used so far (the scheduler's and both
    /// executors', every thread, `/proc/PID/stat`: in clock ticks of 10 ms each), µs.
    pub fn cpu_us(&self) -> u64 {
        let seconds: f64 = self
            .processes
            .0
            .iter()
            .map(|child| crate::common::cpu_seconds_of(child.id()))
            .sum();
        (seconds * 1e6) as u64
    }

    /// [`Self::observe`], with what the run cost: the cluster's CPU time, the analyst's wall
    /// time (the whole `dpsql --scheduler` process), and the cluster's peak memory: over the
    /// scheduler and both executors, each one's peak resident size during the run above its
    /// resident size before it (its `VmHWM` reset through `/proc/PID/clear_refs`, as the
    /// fuzzer's worker resets its own). Freed memory a process's allocator keeps from earlier
    /// programs is in the size before, so a run shows only the growth beyond it; `None` where
    /// a high-water mark cannot be reset.
    pub fn observe_cost(&mut self, program: &Program) -> (Observation, Cost) {
        let pids: Vec<u32> = self.processes.0.iter().map(|c| c.id()).collect();
        let before: Vec<u64> = pids
            .iter()
            .map(|&pid| crate::common::status_bytes_of(pid, "VmRSS:"))
            .collect();
        let reset = pids
            .iter()
            .all(|pid| std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok());
        let (cpu, started) = (self.cpu_us(), Instant::now());
        let (observation, _) = self.observe(program);
        let wall_us = started.elapsed().as_micros() as u64;
        // The budget's readings are those of the compared runs: a timed run's is not kept.
        self.readings.pop();
        let cpu_us = self.cpu_us().saturating_sub(cpu);
        let grown: u64 = pids
            .iter()
            .zip(&before)
            .map(|(&pid, &rss)| crate::common::status_bytes_of(pid, "VmHWM:").saturating_sub(rss))
            .sum();
        let cost = Cost {
            cpu_us,
            wall_us,
            peak_kib: reset.then_some(grown / 1024),
        };
        (observation, cost)
    }

    /// Runs `program` as the analyst would, with `EXPLAIN` of its last statement when that is
    /// a query, and observes it; the budget is read before it ([`Self::readings`]).
    pub fn observe(&mut self, program: &Program) -> (Observation, Output) {
        let mut statements = vec![READING.to_string()];
        let (setup, last) = program.statements.split_at(program.statements.len() - 1);
        statements.extend(setup.iter().cloned());
        if super::observe::is_query(&last[0]) {
            statements.push(format!("EXPLAIN {}", last[0]));
        }
        statements.push(last[0].clone());
        let out = self.dpsql(&statements);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        // The reading's header and its one line.
        let (reading, answer) = match stdout.match_indices('\n').nth(1) {
            Some((at, _)) => stdout.split_at(at + 1),
            None => (stdout.as_str(), ""),
        };
        self.readings.push(reading.to_string());
        let answer = self.shown(answer);
        let answer = match releases(&program.text()) {
            // Released values are random: their numbers are not compared, their shape is.
            true => tokens(&answer)
                .into_iter()
                .map(|t| if t.parse::<f64>().is_ok() { "#" } else { t })
                .collect::<Vec<_>>()
                .join(" "),
            false => answer,
        };
        let outcome = match out.status.code() {
            Some(code) => format!("exit {code}"),
            None => format!("{}", out.status),
        };
        let observation = Observation {
            aspects: vec![
                ("outcome", outcome),
                ("error", self.shown(&String::from_utf8_lossy(&out.stderr))),
                ("answer", answer),
            ],
            order: None,
        };
        (observation, out)
    }

    /// Reads the budget once more, after the last run.
    pub fn finish(&mut self) {
        let out = self.dpsql(&[READING.to_string()]);
        self.readings
            .push(String::from_utf8_lossy(&out.stdout).into_owned());
    }

    /// `text` as the analyst's side of the comparison sees it: the side's directory and the
    /// cluster's ports (which differ between the two clusters, not between the tables)
    /// replaced.
    fn shown(&self, text: &str) -> String {
        let dir = self.dir.display().to_string();
        let relative = dir.trim_start_matches('/');
        let text = text.replace(&dir, "<DATA>").replace(relative, "<DATA>");
        let text = replace_after(&text, "127.0.0.1:", "<PORT>", |c| c.is_ascii_digit());
        // Ballista's job ids (snowflake ids: the scheduler's clock at submission) differ
        // from run to run; they read no row.
        let text = replace_after(&text, "Job ", "<JOB>", |c| c.is_ascii_alphanumeric());
        replace_after(&text, "job ", "<JOB>", |c| c.is_ascii_alphanumeric())
    }

    /// The cluster's processes that have exited, by name.
    pub fn exited(&mut self) -> Vec<String> {
        let mut dead = Vec::new();
        for (i, child) in self.processes.0.iter_mut().enumerate() {
            if let Ok(Some(status)) = child.try_wait() {
                let name = ["dp-scheduler", "dp-executor 0", "dp-executor 1"][i];
                dead.push(format!(
                    "{name} in {} exited ({status})",
                    self.dir.display()
                ));
            }
        }
        dead
    }

    /// The scheduler's peak resident memory, in KiB.
    pub fn scheduler_peak_kib(&self) -> u64 {
        crate::common::status_bytes_of(self.processes.0[0].id(), "VmHWM:") / 1024
    }

    /// The text of the cluster's logs.
    pub fn logs(&self) -> String {
        std::fs::read_dir(&self.dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect()
    }
}

/// `text` with each run of characters `part` accepts right after `marker` replaced by `with`.
fn replace_after(text: &str, marker: &str, with: &str, part: fn(&char) -> bool) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(marker) {
        let (before, after) = rest.split_at(at + marker.len());
        out.push_str(before);
        let taken: usize = after.chars().take_while(part).map(char::len_utf8).sum();
        if taken > 0 {
            out.push_str(with);
        }
        rest = &after[taken..];
    }
    out.push_str(rest);
    out
}
