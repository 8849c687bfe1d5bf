//! Analyst programs run in child processes (issue 41): a statement that aborts the process
//! (a failed allocation, a stack overflow) must be observed, not take the harness down, and
//! the time and peak memory a program costs must be measured in a process that runs nothing
//! else.
//!
//! **Why a re-executed test binary, not `dpsql`.** The deterministic aspects the D1 == D2 rule
//! compares (error text, schema, row count, values, `EXPLAIN`, budget) come from
//! [`super::observe`], in process; `dpsql --format json` shows fewer of them and would need a
//! second, parallel observation. So the `neighbours` test binary re-executes itself
//! ([`std::env::current_exe`], `--exact fuzz_worker --ignored --nocapture --test-threads=1`,
//! with [`WORKER_ENV`] naming the datasets) as a long-lived worker: it opens every dataset once
//! with `datafusion_dp::owner` (as `dpsql --config` and `dp-server` do), then reads one request
//! a line on stdin and answers one line on stdout (after [`MARK`]: libtest prints too), with
//! the [`Observation`] of the program in a fresh locked session and its [`Cost`]. Queries run on
//! [`datafusion_dp::sql::privacy::session::limits::execution_runtime`], the runtime `dpsql` and
//! `dp-server` execute analysts' queries on (worker threads with their stack, not the 2 MiB of
//! `#[tokio::test]`'s), so a stack overflow here is one there. Starting a worker (about 0.3 s in
//! a debug build) is paid once, not per run as a `dpsql` process per query would be (25 ms, a
//! third of a typical run).
//!
//! When a worker dies (EOF on its stdout: an abort, a signal, an exit), the program is recorded
//! as an abort with the worker's exit status and the last line of its stderr ("has overflowed
//! its stack", "memory allocation of N bytes failed"), and a new worker is started. A program
//! that runs past the timeout has its worker killed (by its pid) and replaced.

use super::observe::{Observation, Program};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Marks the worker's answers on stdout (libtest prints its own lines there too).
pub const MARK: &str = "@@dp-fuzz@@";
/// The ignored test that is the worker's entry point.
pub const WORKER_TEST: &str = "fuzz_worker";
/// Set in a worker's environment: the file listing its ledger and datasets.
pub const WORKER_ENV: &str = "DP_FUZZ_WORKER";

/// What running the observed statement cost, measured in the worker around it (planning,
/// optimisation and execution; not the session's creation, `EXPLAIN` or `dp_budget()`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    /// User and system CPU time of the whole process (every thread, including threads that
    /// ended during the statement: `getrusage(RUSAGE_SELF)`), microseconds.
    pub cpu_us: u64,
    /// Wall time, microseconds.
    pub wall_us: u64,
    /// Peak resident memory above the resident size before the statement, KiB (`VmHWM`
    /// after `/proc/self/clear_refs` reset it, less `VmRSS` before); `None` where the
    /// high-water mark cannot be reset.
    pub peak_kib: Option<u64>,
}

/// A measurement in progress.
pub struct Usage {
    cpu_us: u64,
    wall: Instant,
    rss_kib: u64,
    reset: bool,
}

fn cpu_us() -> u64 {
    // SAFETY: getrusage writes into the struct we pass; RUSAGE_SELF is always valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// A `Vm*` line of `/proc/self/status`, KiB.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

impl Usage {
    /// Starts measuring: returns freed memory to the system first (glibc keeps it in its
    /// arenas, and an earlier program's leftovers would hide this one's growth), then resets
    /// the high-water mark to the current resident size.
    pub fn start() -> Self {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only releases free memory of the allocator's arenas.
        unsafe {
            libc::malloc_trim(0);
        }
        let rss_kib = status_kib("VmRSS:");
        let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        Self {
            cpu_us: cpu_us(),
            wall: Instant::now(),
            rss_kib,
            reset,
        }
    }

    pub fn stop(self) -> Cost {
        let wall_us = self.wall.elapsed().as_micros() as u64;
        let cpu = cpu_us().saturating_sub(self.cpu_us);
        let hwm = status_kib("VmHWM:");
        Cost {
            cpu_us: cpu,
            wall_us,
            peak_kib: self.reset.then(|| hwm.saturating_sub(self.rss_kib)),
        }
    }
}

// ---- the wire format: one line per request and per answer ----

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

fn encode_order(order: &Option<Vec<(usize, bool)>>) -> String {
    match order {
        None => "-".into(),
        Some(keys) => keys
            .iter()
            .map(|(c, d)| format!("{c}{}", if *d { 'd' } else { 'a' }))
            .collect::<Vec<_>>()
            .join(","),
    }
}

fn decode_order(s: &str) -> Option<Vec<(usize, bool)>> {
    if s == "-" {
        return None;
    }
    Some(
        s.split(',')
            .filter(|k| !k.is_empty())
            .map(|k| {
                let (n, d) = k.split_at(k.len() - 1);
                (n.parse().unwrap_or(0), d == "d")
            })
            .collect(),
    )
}

/// A request: the dataset's index and the program.
pub fn encode_request(dataset: usize, program: &Program) -> String {
    let statements: Vec<String> = program.statements.iter().map(|s| escape(s)).collect();
    format!(
        "{dataset}\t{}\t{}",
        encode_order(&program.order_by),
        statements.join("\t")
    )
}

pub fn decode_request(line: &str) -> (usize, Program) {
    let mut fields = line.split('\t');
    let dataset = fields.next().and_then(|d| d.parse().ok()).unwrap_or(0);
    let order_by = decode_order(fields.next().unwrap_or("-"));
    let statements = fields.map(unescape).collect();
    (
        dataset,
        Program {
            statements,
            order_by,
        },
    )
}

/// The aspects [`super::observe`] records, as the static names [`Observation`] holds.
const ASPECTS: [&str; 7] = [
    "outcome", "error", "explain", "schema", "rows", "values", "budget",
];

pub fn encode_answer(o: &Observation, cost: &Cost) -> String {
    let order = match &o.order {
        None => "-".to_string(),
        Some(Ok(())) => "ok".to_string(),
        Some(Err(e)) => format!("!{}", escape(e)),
    };
    let mut fields = vec![
        cost.cpu_us.to_string(),
        cost.wall_us.to_string(),
        cost.peak_kib.map_or("-".into(), |k| k.to_string()),
        order,
    ];
    for (aspect, text) in &o.aspects {
        fields.push(aspect.to_string());
        fields.push(escape(text));
    }
    fields.join("\t")
}

pub fn decode_answer(line: &str) -> (Observation, Cost) {
    let fields: Vec<&str> = line.split('\t').collect();
    let number = |i: usize| fields.get(i).and_then(|f| f.parse().ok());
    let cost = Cost {
        cpu_us: number(0).unwrap_or(0),
        wall_us: number(1).unwrap_or(0),
        peak_kib: number(2),
    };
    let order = match fields.get(3).copied() {
        Some("ok") => Some(Ok(())),
        Some(e) if e.starts_with('!') => Some(Err(unescape(&e[1..]))),
        _ => None,
    };
    let aspects = fields
        .get(4..)
        .unwrap_or_default()
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| {
            let name = ASPECTS
                .iter()
                .find(|a| **a == c[0])
                .copied()
                .unwrap_or("unknown aspect");
            (name, unescape(c[1]))
        })
        .collect();
    (Observation { aspects, order }, cost)
}

// ---- the worker ----

/// The worker's entry point (the ignored test `fuzz_worker`): returns at once unless
/// [`WORKER_ENV`] names a worker file (first line: the ledger; then one owner configuration a
/// line, the datasets requests name by index).
pub fn worker_main() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let text = std::fs::read_to_string(&spec).expect("worker file");
    let mut lines = text.lines();
    let ledger: std::sync::Arc<Path> = std::sync::Arc::from(Path::new(lines.next().unwrap()));
    let configs: Vec<PathBuf> = lines.map(PathBuf::from).collect();
    limit_address_space();
    let runtime = datafusion_dp::sql::privacy::session::limits::execution_runtime()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let mut datasets = Vec::new();
        for config in &configs {
            datasets.push(std::sync::Arc::new(
                super::data::Dataset::open(config).await.expect("dataset"),
            ));
        }
        // The first queries of a process pay for what is made once (thread arenas, lazy
        // statics, the functions' registries): paid here, not by the first measured run.
        for sql in [
            "SELECT dp_count(region, 1.0) FROM visits WHERE length(repeat(region, 100)) > 3",
            "SELECT region, dp_count(patient_id, 1.0) FROM visits GROUP BY region",
            "SELECT k, count(*) FROM lookup GROUP BY k",
        ] {
            super::observe::observe_measured(
                std::sync::Arc::clone(&datasets[0]),
                Program::one(sql),
                std::sync::Arc::clone(&ledger),
            )
            .await;
        }
        println!("\n{MARK}ready");
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            let (index, program) = decode_request(&line);
            let data = std::sync::Arc::clone(&datasets[index.min(datasets.len() - 1)]);
            let (observation, cost) =
                super::observe::observe_measured(data, program, std::sync::Arc::clone(&ledger))
                    .await;
            let cost = cost.unwrap_or_default();
            println!("\n{MARK}{}", encode_answer(&observation, &cost));
        }
    });
}

/// The address space a worker may reserve (`DP_FUZZ_ADDRESS_SPACE_GIB`, default 8 GiB), so
/// that a type-sized allocation (16 GiB for a `FixedSizeList(2147483647, Int64)` row) fails in
/// the worker, as it would in a server with that much memory, instead of taking the machine's
/// memory from everything else on it. Threads' stacks are reserved within it (64 MiB per
/// query thread, 256 MiB while a statement is planned), and glibc's arenas (64 MiB each).
fn limit_address_space() {
    let gib: u64 = std::env::var("DP_FUZZ_ADDRESS_SPACE_GIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let bytes = gib << 30;
    let limit = libc::rlimit {
        rlim_cur: bytes as libc::rlim_t,
        rlim_max: bytes as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct we pass.
    unsafe {
        libc::setrlimit(libc::RLIMIT_AS, &limit);
    }
}

// ---- the parent's side ----

/// What one run of a program in a worker gave.
#[derive(Clone, Debug)]
pub enum Run {
    Answered(Observation, Cost),
    /// The worker died while running it: how (exit status or signal, and the last line of
    /// its stderr).
    Died(String),
    /// No answer within the timeout; the worker was killed.
    TimedOut,
}

/// A long-lived worker process.
pub struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    spec: PathBuf,
    log: PathBuf,
    /// Workers started (the first, and one per death or timeout), and the time it took.
    pub started: usize,
    pub starting: Duration,
}

/// The last non-empty line of a file that does not merely report the test's progress.
fn last_line(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("note:"))
        .unwrap_or("")
        .chars()
        .take(300)
        .collect()
}

impl Worker {
    /// Starts a worker over the datasets listed in `spec` (see [`worker_main`]), its stderr
    /// written to `log`.
    pub fn start(spec: &Path, log: &Path) -> Self {
        let mut w = Self::spawn(spec, log);
        w.started = 1;
        w
    }

    fn spawn(spec: &Path, log: &Path) -> Self {
        let begun = Instant::now();
        let exe = std::env::current_exe().expect("current_exe");
        let stderr = std::fs::File::create(log).expect("worker log");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                WORKER_TEST,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WORKER_ENV, spec)
            // The panic hook's backtrace is not wanted in the log; its message is.
            .env("RUST_BACKTRACE", "0")
            // glibc's default, fixed: without it the threshold follows the largest block freed,
            // and a buffer's memory goes back to the system or stays in an arena depending on
            // what ran before, so the same query's peak memory varied by 0.3 to 16 MiB.
            .env("MALLOC_MMAP_THRESHOLD_", "131072")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("start a worker");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find(MARK) {
                    if tx.send(line[at + MARK.len()..].to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        let mut worker = Self {
            child,
            stdin,
            lines: rx,
            spec: spec.to_path_buf(),
            log: log.to_path_buf(),
            started: 0,
            starting: Duration::ZERO,
        };
        match worker.lines.recv_timeout(Duration::from_secs(120)) {
            Ok(l) if l == "ready" => {
                worker.starting = begun.elapsed();
                worker
            }
            other => panic!(
                "worker did not start ({other:?}): {}",
                last_line(&worker.log)
            ),
        }
    }

    /// Replaces the worker by a new one.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (started, starting) = (self.started, self.starting);
        *self = Self::spawn(&self.spec.clone(), &self.log.clone());
        self.started = started + 1;
        self.starting += starting;
    }

    /// How the worker ended (after its stdout closed).
    fn death(&mut self) -> String {
        use std::os::unix::process::ExitStatusExt;
        let status = match self.child.wait() {
            Ok(s) => match (s.code(), s.signal()) {
                (_, Some(sig)) => format!("signal {sig}"),
                (Some(code), _) => format!("exit status {code}"),
                _ => "ended".to_string(),
            },
            Err(e) => format!("wait failed: {e}"),
        };
        format!("{status}: {}", last_line(&self.log))
    }

    /// Runs `program` on dataset `index`; a worker that dies or times out is replaced.
    pub fn run(&mut self, index: usize, program: &Program, timeout: Duration) -> Run {
        let request = encode_request(index, program);
        let sent = writeln!(self.stdin, "{request}").and_then(|_| self.stdin.flush());
        let answer = match sent {
            Ok(()) => self.lines.recv_timeout(timeout),
            Err(_) => Err(RecvTimeoutError::Disconnected),
        };
        match answer {
            Ok(line) => {
                let (o, c) = decode_answer(&line);
                Run::Answered(o, c)
            }
            Err(RecvTimeoutError::Timeout) => {
                self.restart();
                Run::TimedOut
            }
            Err(RecvTimeoutError::Disconnected) => {
                let how = self.death();
                self.restart();
                Run::Died(how)
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes a worker file: the ledger, then the datasets' configurations.
pub fn write_spec(path: &Path, ledger: &Path, configs: &[PathBuf]) {
    let mut text = format!("{}\n", ledger.display());
    for c in configs {
        text.push_str(&format!("{}\n", c.display()));
    }
    std::fs::write(path, text).unwrap();
}
