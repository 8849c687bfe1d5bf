//! Load test of `dp-server` on loopback (BENCHMARKS.md, "Serving analysts"): the server (the
//! same `datafusion_dp::server::serve` the binary runs, in this process) on 127.0.0.1, and N
//! concurrent analyst connections (arrow-flight's Flight SQL client, one login each, spread
//! over A analysts) issuing DP queries until a deadline. Reports queries per second, p50/p99
//! latency (GetFlightInfo + DoGet), and checks that each analyst's ledger total equals the sum of
//! the costs of that analyst's answered queries (nothing charged twice or lost). For scale, the
//! same queries first run in-process on one locked session (no network, no server) for a
//! third of the time: the median of those is the baseline the server's latencies compare to.
//!
//! With `--hostile`, a second phase of the same length follows on the same server: N new
//! honest connections (other analysts, so each phase has its own ledgers) as before and, at
//! the same time, an analyst (`mallory`, 4 connections) sending memory-hungry aggregations over large
//! `range()`s, a cross join that runs until the query deadline, long statements and a DP query
//! with a long filter, and 8 clients flooding the server with bad logins. Every honest query
//! must be answered and its charge recorded once; the process's peak resident memory (server
//! and clients: an upper bound on the server's) is reported per phase beside the configured
//! `memory_limit` (`--memory-limit`, default 1 GiB; `query_timeout_seconds` is 10 s). The
//! honest connections log in before each phase starts: the login flood comes from the same
//! loopback address, whose logins the server backs off (docs/server-limits.md), so it cannot
//! stop logged-in analysts, only new logins from that address.
//!
//! ```text
//! cargo run --release --features server --example serve_load -- [--connections 64] [--analysts 8] [--seconds 20] [--hostile] [--memory-limit 1GiB] [--in-memory] [--release-quantum-ms 0] [--ledger-charges 0]
//! ```
//!
//! `--ledger-charges N` starts each analyst's ledger with N charges already in it (of
//! [`PRIOR_EPSILON`] each, not counted in the check of the totals): the server as it runs after
//! long use, when each charge appends to a long ledger.
//!
//! `--in-memory` declares the table `in_memory = true` (read once, served from memory); by
//! default the CSV file is parsed once and kept (src/owner/parsed.rs).
//! `--release-quantum-ms` sets `[limits] release_quantum_ms`: each analyst's results are
//! released on a schedule (src/sql/privacy/session/release_time.rs), which the latencies show.
//!
//! Exits with status 1 when an honest query failed or a ledger does not match.

use arrow_flight::sql::client::FlightSqlServiceClient;
use datafusion_dp::outln;
use datafusion_dp::owner::{Owner, OwnerConfig};
use futures::TryStreamExt;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// The queries, alternated, with their epsilon costs.
const QUERIES: [(&str, f64); 2] = [
    ("SELECT dp_count(outcome, 0.01) AS n FROM visits", 0.01),
    (
        "SELECT dp_rr_ci(outcome, exposed, 0.02) AS rr FROM visits",
        0.02,
    ),
];

/// The epsilon of each charge `--ledger-charges` writes before the run.
const PRIOR_EPSILON: f64 = 1e-6;

/// Clients flooding the server with bad logins at once, in the hostile phase.
const LOGIN_FLOODERS: usize = 8;

/// The owner's `[limits] query_timeout_seconds` in this test.
const QUERY_TIMEOUT_SECONDS: u64 = 10;

struct Outcome {
    analyst: String,
    latencies: Vec<Duration>,
    /// The cost of the answered queries.
    spent: f64,
    /// Failed after planning (their charge is kept): count and cost.
    charged_failures: (usize, f64),
    errors: Vec<String>,
}

/// A Flight SQL client logged in as `user`.
async fn login(
    url: &str,
    user: &str,
    password: &str,
) -> Result<FlightSqlServiceClient<Channel>, String> {
    let channel = Channel::from_shared(url.to_string())
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let mut client = FlightSqlServiceClient::new(channel);
    client
        .handshake(user, password)
        .await
        .map_err(|e| e.to_string())?;
    Ok(client)
}

/// Runs `sql` and returns its number of rows.
async fn run(client: &mut FlightSqlServiceClient<Channel>, sql: &str) -> Result<usize, String> {
    run_staged(client, sql).await.map_err(|(_, e)| e)
}

/// [`run`], an error saying whether the query was planned (so, with DP calls, charged) first.
async fn run_staged(
    client: &mut FlightSqlServiceClient<Channel>,
    sql: &str,
) -> Result<usize, (bool, String)> {
    let info = client
        .execute(sql.to_string(), None)
        .await
        .map_err(|e| (false, e.to_string()))?;
    fetch_rows(client, info).await.map_err(|e| (true, e))
}

async fn fetch_rows(
    client: &mut FlightSqlServiceClient<Channel>,
    info: arrow_flight::FlightInfo,
) -> Result<usize, String> {
    let ticket = info.endpoint[0]
        .ticket
        .clone()
        .ok_or_else(|| "no ticket".to_string())?;
    let stream = client.do_get(ticket).await.map_err(|e| e.to_string())?;
    let batches: Vec<_> = stream.try_collect().await.map_err(|e| e.to_string())?;
    Ok(batches.iter().map(|b| b.num_rows()).sum::<usize>())
}

/// One honest connection (already logged in): the DP queries, alternated, until `deadline`.
async fn analyst_loop(
    mut client: FlightSqlServiceClient<Channel>,
    analyst: String,
    first: usize,
    deadline: Instant,
) -> Outcome {
    let mut outcome = Outcome {
        analyst,
        latencies: Vec::new(),
        spent: 0.0,
        charged_failures: (0, 0.0),
        errors: Vec::new(),
    };
    let mut i = first;
    while Instant::now() < deadline {
        let (sql, cost) = QUERIES[i % QUERIES.len()];
        i += 1;
        let start = Instant::now();
        match run_staged(&mut client, sql).await {
            Ok(1) => {
                outcome.latencies.push(start.elapsed());
                outcome.spent += cost;
            }
            Ok(n) => outcome.errors.push(format!("{n} rows")),
            Err((planned, e)) => {
                if planned {
                    outcome.charged_failures.0 += 1;
                    outcome.charged_failures.1 += cost;
                }
                outcome.errors.push(e);
            }
        }
    }
    outcome
}

/// What the hostile clients saw, by kind: answers and the first words of each error.
type Tally = BTreeMap<String, usize>;

fn tally(tally: &mut Tally, result: Result<usize, String>) {
    let key = match result {
        Ok(_) => "answered".to_string(),
        Err(e) => {
            let e = e.replace('\n', " ");
            let short: String = e.chars().take(90).collect();
            format!("error: {short}")
        }
    };
    *tally.entry(key).or_default() += 1;
}

/// Mallory's statements, by kind: memory-hungry aggregations over large `range()`s (no
/// protected data, no budget), a cross join running until the deadline, a long statement,
/// and a DP query whose filter is a long chain.
fn hostile_statements() -> Vec<(&'static str, String)> {
    let sum = vec!["1"; 2_000].join("+");
    let chain = vec!["region"; 200].join(" || ");
    vec![
        (
            "memory",
            "SELECT count(DISTINCT value) FROM range(400000000)".to_string(),
        ),
        (
            "memory",
            "SELECT value % 100000007 AS k, count(*) AS n FROM range(300000000) GROUP BY k ORDER BY n DESC LIMIT 1"
                .to_string(),
        ),
        (
            "slow",
            "SELECT count(*) FROM range(1000000) a CROSS JOIN range(1000000) b".to_string(),
        ),
        ("long", format!("SELECT {sum} AS s")),
        (
            "long",
            format!("SELECT dp_count(outcome, 0.01) AS n FROM visits WHERE {chain} = 'x'"),
        ),
    ]
}

/// One of mallory's connections (logged in): statements of `kinds`, in turn, until
/// `deadline`.
async fn mallory_loop(
    mut client: FlightSqlServiceClient<Channel>,
    kinds: &'static [&'static str],
    deadline: Instant,
) -> Tally {
    let mut seen = Tally::new();
    let statements: Vec<(String, String)> = hostile_statements()
        .into_iter()
        .filter(|(kind, _)| kinds.contains(kind))
        .map(|(kind, sql)| (kind.to_string(), sql))
        .collect();
    let mut i = 0;
    while Instant::now() < deadline {
        let (kind, sql) = &statements[i % statements.len()];
        i += 1;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let result = match tokio::time::timeout(remaining, run(&mut client, sql)).await {
            Ok(result) => result,
            // The phase is over: the client gives up (dropping the call).
            Err(_) => {
                *seen
                    .entry(format!("{kind} still running at the end (abandoned)"))
                    .or_default() += 1;
                break;
            }
        };
        let mut kind_tally = Tally::new();
        tally(&mut kind_tally, result);
        for (key, n) in kind_tally {
            *seen.entry(format!("{kind} {key}")).or_default() += n;
        }
    }
    seen
}

/// A client flooding the server with bad logins (made-up names, and mallory's with a wrong
/// password) on one connection until `deadline`.
async fn login_flood(url: String, deadline: Instant) -> Tally {
    let mut seen = Tally::new();
    let Ok(channel) = Channel::from_shared(url).unwrap().connect().await else {
        tally(&mut seen, Err("connect".to_string()));
        return seen;
    };
    let mut i = 0u64;
    while Instant::now() < deadline {
        let mut client = FlightSqlServiceClient::new(channel.clone());
        let name = match i % 4 {
            0 => "mallory".to_string(),
            _ => format!("nobody{i}"),
        };
        i += 1;
        let result = client.handshake(&name, "guess").await;
        let key = match result {
            Ok(_) => "login succeeded (!)".to_string(),
            Err(e) if e.to_string().contains("retry in") => "refused: backing off".to_string(),
            Err(e) if e.to_string().contains("invalid user name or password") => {
                "refused: invalid (password checked)".to_string()
            }
            Err(e) => format!(
                "refused: {}",
                e.to_string().chars().take(60).collect::<String>()
            ),
        };
        *seen.entry(key).or_default() += 1;
    }
    seen
}

/// A ledger of `n` charges of [`PRIOR_EPSILON`] each, written through the crate's own append
/// (so it verifies) in a RAM-backed directory where one is (each append is synced), for
/// `--ledger-charges`.
fn write_prior_charges(n: u64) -> std::path::PathBuf {
    use datafusion_dp::sql::accounting::{amount, budget::BudgetMeasure, ledger};
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("dp-serve-load-prior-{}.ledger", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let epsilon_units = amount::charge_units(PRIOR_EPSILON, amount::EPSILON_DIGITS).unwrap();
    for _ in 0..n {
        ledger::append_with(&path, BudgetMeasure::EpsilonDelta, |_, _| {
            Ok(ledger::NewCharge {
                unix_ms: 0,
                epsilon_units,
                delta_units: 0,
                rho_units: None,
                query: "SELECT dp_count(outcome, 0.000001) AS n FROM visits".into(),
            })
        })
        .unwrap();
    }
    path
}

fn ledger_total(path: &Path) -> (usize, f64) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let epsilons: Vec<f64> = text
        .lines()
        .skip(1)
        .map(|l| l.split('\t').nth(3).unwrap().parse().unwrap())
        .collect();
    (epsilons.len(), epsilons.iter().sum())
}

/// A field of `/proc/self/status` in bytes (Linux; 0 elsewhere).
fn proc_status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Samples the process's resident memory every 20 ms until stopped; returns the largest seen
/// and the kernel's peak (`VmHWM`, reset when sampling starts where Linux allows it).
fn sample_rss() -> (Arc<AtomicBool>, std::thread::JoinHandle<(u64, u64)>) {
    // Resets VmHWM to the current RSS (Linux 4.0+), so each phase reports its own peak.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let stop = Arc::new(AtomicBool::new(false));
    let handle = std::thread::spawn({
        let stop = Arc::clone(&stop);
        move || {
            let mut max = 0;
            while !stop.load(Ordering::Relaxed) {
                max = max.max(proc_status_bytes("VmRSS:"));
                std::thread::sleep(Duration::from_millis(20));
            }
            (max, proc_status_bytes("VmHWM:"))
        }
    });
    (stop, handle)
}

struct Phase {
    label: &'static str,
    elapsed: f64,
    outcomes: Vec<Outcome>,
    hostile: Vec<(String, Tally)>,
    rss_sampled: u64,
    rss_peak: u64,
}

impl Phase {
    fn latencies(&self) -> Vec<Duration> {
        let mut latencies: Vec<Duration> = self
            .outcomes
            .iter()
            .flat_map(|o| o.latencies.clone())
            .collect();
        latencies.sort();
        latencies
    }

    fn quantile(&self, q: f64) -> f64 {
        let latencies = self.latencies();
        latencies
            .get(((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    }

    fn errors(&self) -> usize {
        self.outcomes.iter().map(|o| o.errors.len()).sum()
    }
}

/// One phase: `connections` honest connections over the analysts `names` (logged in first),
/// and, if `hostile`, mallory and the login flood, for `seconds`.
async fn phase(
    label: &'static str,
    url: &str,
    names: &[String],
    connections: usize,
    seconds: u64,
    hostile: bool,
) -> Phase {
    let mut clients = Vec::new();
    for c in 0..connections {
        let name = names[c % names.len()].clone();
        let client = login(url, &name, "load-test")
            .await
            .unwrap_or_else(|e| panic!("honest login of {name}: {e}"));
        clients.push((client, name, c));
    }
    // Mallory logs in before the flood starts (it backs off logins from this address).
    let mut mallory = Vec::new();
    if hostile {
        for _ in 0..4 {
            mallory.push(
                login(url, "mallory", "mallory")
                    .await
                    .expect("mallory's login"),
            );
        }
    }
    let (stop_sampling, sampler) = sample_rss();
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let mut hostile_tasks = Vec::new();
    if hostile {
        for kinds in [
            &["memory"][..],
            &["memory"][..],
            &["slow"][..],
            &["long"][..],
        ] {
            let kinds: &'static [&'static str] = kinds;
            hostile_tasks.push((
                format!("mallory ({})", kinds.join(", ")),
                tokio::spawn(mallory_loop(
                    mallory.pop().expect("one login per connection"),
                    kinds,
                    deadline,
                )),
            ));
        }
        for _ in 0..LOGIN_FLOODERS {
            hostile_tasks.push((
                format!("bad logins ({LOGIN_FLOODERS} clients)"),
                tokio::spawn(login_flood(url.to_string(), deadline)),
            ));
        }
    }
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|(client, name, c)| tokio::spawn(analyst_loop(client, name, c, deadline)))
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    let elapsed = start.elapsed().as_secs_f64();
    // The tallies of the clients of one kind, summed.
    let mut hostile: Vec<(String, Tally)> = Vec::new();
    for (label, task) in hostile_tasks {
        let seen = task.await.unwrap();
        let index = match hostile.iter().position(|(l, _)| *l == label) {
            Some(index) => index,
            None => {
                hostile.push((label, Tally::new()));
                hostile.len() - 1
            }
        };
        for (what, n) in seen {
            *hostile[index].1.entry(what).or_default() += n;
        }
    }
    stop_sampling.store(true, Ordering::Relaxed);
    let (rss_sampled, rss_peak) = sampler.join().unwrap();
    Phase {
        label,
        elapsed,
        outcomes,
        hostile,
        rss_sampled,
        rss_peak,
    }
}

fn parse_bytes(text: &str) -> usize {
    let text = text.trim();
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, ""), |i| text.split_at(i));
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        other => panic!("unknown unit {other} (B, KiB, MiB, GiB)"),
    };
    number.parse::<usize>().expect("a number of bytes") * scale
}

#[tokio::main]
async fn main() {
    let mut connections = 64usize;
    let mut analysts = 8usize;
    let mut seconds = 20u64;
    let mut hostile = false;
    let mut in_memory = false;
    let mut memory_limit = "1GiB".to_string();
    let mut release_quantum_ms = 0u64;
    let mut prior_charges = 0u64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--hostile" {
            hostile = true;
            continue;
        }
        if arg == "--in-memory" {
            in_memory = true;
            continue;
        }
        let value = args.next().expect("a value");
        match arg.as_str() {
            "--connections" => connections = value.parse().unwrap(),
            "--analysts" => analysts = value.parse().unwrap(),
            "--seconds" => seconds = value.parse::<u64>().unwrap().min(300),
            "--memory-limit" => memory_limit = value,
            "--release-quantum-ms" => release_quantum_ms = value.parse().unwrap(),
            "--ledger-charges" => prior_charges = value.parse().unwrap(),
            other => panic!("unknown argument {other}"),
        }
    }
    let memory_limit_bytes = parse_bytes(&memory_limit);
    let dir = std::env::temp_dir().join(format!("dp-serve-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let visits = concat!(env!("CARGO_MANIFEST_DIR"), "/data/visits.csv");
    let mut config =
        format!("[[table]]\nname = \"visits\"\nlocation = \"{visits}\"\nunit = \"patient_id\"\n\
                 columns = [\"visit_id BIGINT\", \"patient_id BIGINT\", \"region VARCHAR\", \"month VARCHAR\", \"exposed BOOLEAN\", \"outcome BOOLEAN\"]\nin_memory = {in_memory}\n\n");
    let phases: &[&str] = if hostile {
        &["quiet", "hostile"]
    } else {
        &["quiet"]
    };
    let names =
        |phase: &str| -> Vec<String> { (0..analysts).map(|a| format!("{phase}{a}")).collect() };
    for phase in phases {
        for name in names(phase) {
            config.push_str(&format!(
                "[[analyst]]\nname = \"{name}\"\npassword = \"load-test\"\nepsilon_budget = 1000000\nledger = \"{name}.ledger\"\n\n"
            ));
        }
    }
    config.push_str(
        "[[analyst]]\nname = \"mallory\"\npassword = \"mallory\"\nepsilon_budget = 1000000\nledger = \"mallory.ledger\"\n\n",
    );
    config.push_str(&format!(
        "[limits]\nmemory_limit = {memory_limit_bytes}\nquery_timeout_seconds = {QUERY_TIMEOUT_SECONDS}\n\
         release_quantum_ms = {release_quantum_ms}\n"
    ));
    if prior_charges > 0 {
        let template = write_prior_charges(prior_charges);
        for phase in phases {
            for name in names(phase) {
                std::fs::copy(&template, dir.join(format!("{name}.ledger"))).unwrap();
            }
        }
        let _ = std::fs::remove_file(&template);
    }
    let config = OwnerConfig::parse(&config, &dir, "serve_load").unwrap();
    let owner = Owner::open(config).await.unwrap();

    // Baseline: the same queries through analyst_sql on one locked session, one at a time.
    let baseline_ledger = dir.join("baseline.ledger");
    let ctx = owner
        .locked_session(&datafusion_dp::owner::SessionBudget {
            budget: datafusion_dp::sql::accounting::budget::Budget::new(
                datafusion_dp::sql::accounting::budget::BudgetMeasure::EpsilonDelta,
                Some(1e6),
                None,
                None,
                "",
            )
            .unwrap(),
            ledger: baseline_ledger.to_string_lossy().into_owned(),
        })
        .unwrap();
    let mut baseline = Vec::new();
    let baseline_end = Instant::now() + Duration::from_secs(seconds.div_ceil(3));
    let mut i = 0;
    while Instant::now() < baseline_end {
        let start = Instant::now();
        let frame = datafusion_dp::owner::analyst_sql(&ctx, QUERIES[i % QUERIES.len()].0)
            .await
            .unwrap();
        frame.collect().await.unwrap();
        baseline.push(start.elapsed());
        i += 1;
    }
    baseline.sort();
    let baseline_p50 = baseline[baseline.len() / 2].as_secs_f64() * 1e3;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(datafusion_dp::server::serve(
        owner,
        datafusion_dp::server::Execution::Local,
        listener,
        async {
            let _ = stopped.await;
        },
    ));

    let mut results = Vec::new();
    for label in phases {
        eprintln!("{label}: {connections} connections, {analysts} analysts, {seconds} s on {url}");
        let label: &'static str = label;
        results.push(
            phase(
                label,
                &url,
                &names(label),
                connections,
                seconds,
                label == "hostile",
            )
            .await,
        );
    }
    let _ = stop.send(());
    let _ = server.await;

    outln!("connections            {connections} ({analysts} analysts)");
    outln!("memory_limit           {memory_limit} ({memory_limit_bytes} bytes); query_timeout_seconds {QUERY_TIMEOUT_SECONDS}");
    outln!(
        "in-process baseline    {} queries, p50 {baseline_p50:.1} ms (one session, sequential)",
        baseline.len()
    );
    let mut all_match = true;
    let mut honest_errors = 0;
    for phase in &results {
        let answered = phase.latencies().len();
        honest_errors += phase.errors();
        outln!("-- {} --", phase.label);
        outln!("duration               {:.1} s", phase.elapsed);
        outln!("answered queries       {answered}");
        outln!("errors                 {}", phase.errors());
        outln!(
            "queries per second     {:.1}",
            answered as f64 / phase.elapsed
        );
        outln!(
            "latency p50            {:.1} ms ({:.1}x the in-process p50)",
            phase.quantile(0.5),
            phase.quantile(0.5) / baseline_p50
        );
        outln!("latency p99            {:.1} ms", phase.quantile(0.99));
        outln!(
            "peak resident memory   {:.0} MiB (VmHWM; sampled every 20 ms: {:.0} MiB), limit {:.0} MiB: {}",
            phase.rss_peak as f64 / (1 << 20) as f64,
            phase.rss_sampled as f64 / (1 << 20) as f64,
            memory_limit_bytes as f64 / (1 << 20) as f64,
            if (phase.rss_peak.max(phase.rss_sampled) as usize) < memory_limit_bytes {
                "under"
            } else {
                "OVER"
            }
        );
        for name in names(phase.label) {
            let own = phase.outcomes.iter().filter(|o| o.analyst == name);
            // Charged: the answered queries and those that failed after planning.
            let answered_cost: f64 = own.clone().map(|o| o.spent + o.charged_failures.1).sum();
            let answered_count: usize = own.map(|o| o.latencies.len() + o.charged_failures.0).sum();
            let (lines, total) = ledger_total(&dir.join(format!("{name}.ledger")));
            let (lines, total) = (
                lines - prior_charges as usize,
                total - prior_charges as f64 * PRIOR_EPSILON,
            );
            let matches = lines == answered_count && (total - answered_cost).abs() < 1e-9;
            all_match &= matches;
            outln!(
                "{name}: ledger {lines} lines, epsilon {total:.4}; answered or failed after planning {answered_count}, epsilon {answered_cost:.4} {}",
                if matches { "(equal)" } else { "(MISMATCH)" }
            );
        }
        for e in phase.outcomes.iter().flat_map(|o| &o.errors).take(5) {
            outln!("error: {e}");
        }
        for (who, seen) in &phase.hostile {
            for (what, n) in seen {
                outln!("{who}: {n} x {what}");
            }
        }
    }
    outln!(
        "ledger totals equal the answered queries' costs: {}",
        if all_match { "yes" } else { "NO" }
    );
    let _ = std::fs::remove_dir_all(&dir);
    if !all_match || honest_errors > 0 {
        std::process::exit(1);
    }
}
