//! The hostile load test (issue 42, "dp-server under a hostile analyst, round two"): one real
//! `dp-server` process (debug build) on loopback, honest analysts (`alice` and `bob`, two
//! connections each) sending DP queries in a loop the whole time, and an attacker (an analyst
//! of the same server, with a fresh account `mallory<n>` per attack, and strangers without a
//! login) running each attack below, one after another, for a bounded time (`DP_HOSTILE_SECONDS`, 3 s by default: the short form
//! run by `.ci/run` through `cargo test --all-features`; set it higher for the long form, and
//! `DP_HOSTILE_ATTACKS=3,8` to run only some):
//!
//! 1. constant statements that aborted the process (a `repeat` of 10^12 bytes, a
//!    `FixedSizeList` of 2^31 - 1 elements);
//! 2. `DoPut` `CommandStatementUpdate` of costly constant queries;
//! 3. `DoGet` of crafted `CommandGetTables` tickets with 1.9 MB `LIKE` patterns;
//! 4. `GetFlightInfo` of long-to-plan statements abandoned after 50 ms;
//! 5. memory-hungry joins filling the attacker's own memory share;
//! 6. a flood of SQL `PREPARE` statements beyond the per-session caps;
//! 7. idle TCP connections (nothing, or only the HTTP/2 preface) from 127.0.0.2-127.0.0.5;
//! 8. costly DP queries cancelled (or their stream dropped) after 1 s;
//! 9. `examples/serve_load.rs`'s mallory statements (memory-hungry aggregations, a cross join,
//!    long statements);
//! 10. a flood of bad logins (last: it backs off logins from 127.0.0.1).
//!
//! It asserts that no honest query failed, that each honest analyst's ledger holds exactly
//! the costs of the honest queries answered (no charge lost nor doubled), that the honest p99
//! latency during each attack stays under 1 s (see [`P99_BOUND_MS`]), that the server's peak
//! resident memory stays under `memory_limit` plus a stated overhead (see [`rss_bound`]), and
//! that the process is alive at the end. Each fails by its `assert!`: an honest error is
//! listed, a ledger mismatch names both totals, a slow p99 or an RSS over the bound prints
//! the figure and the bound, and a crashed server (an abort, the OOM killer) fails `alive()`.
//! The per-attack figures (honest p50/p99, the attacker's outcomes by kind, RSS, connections)
//! are printed for BENCHMARKS.md (`cargo test --all-features --test server_hostile --
//! --nocapture`).

use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandGetTables, ProstMessageExt};
use arrow_flight::{Action, Ticket};
use common::server::{closed_within, fetch, login, query, stranger, Server, H2_PREFACE};
use futures::TryStreamExt;
use prost::Message;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

mod common;

const VISITS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/visits.csv");

/// The honest analysts and their passwords.
const HONEST: [(&str, &str); 2] = [("alice", "pw-a"), ("bob", "pw-b")];
/// Connections (logins) of each honest analyst, each querying in a loop.
const HONEST_CONNECTIONS: usize = 2;
/// The honest queries, alternated, with their epsilon costs.
const QUERIES: [(&str, f64); 2] = [
    ("SELECT dp_count(outcome, 0.01) AS n FROM visits", 0.01),
    (
        "SELECT dp_rr_ci(outcome, exposed, 0.02) AS rr FROM visits",
        0.02,
    ),
];
/// `[limits] memory_limit`, in MiB.
const MEMORY_LIMIT_MIB: u64 = 512;
/// `[limits] query_timeout_seconds`: bounds how long an abandoned attack query can run on.
const QUERY_TIMEOUT_SECONDS: u64 = 10;
/// The longest an honest query may take before it counts as failed (so the test ends).
const HONEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Connections the attacker holds at most (attack 7): the server's `max_connections`.
const MAX_CONNECTIONS: u64 = 512;
/// The largest gRPC message the server decodes (`max_message_bytes`, 4 MiB).
const MAX_MESSAGE_BYTES: u64 = 4 << 20;
/// Large messages (attack 3's tickets) in flight at once: [`GET_TABLES_TASKS`] and one each
/// being encoded, decoded and answered.
const GET_TABLES_TASKS: usize = 4;

fn test_dir(name: &str) -> PathBuf {
    common::scratch(name)
}

/// `data/visits.csv` protected by `patient_id`; the honest analysts and the attacker's
/// accounts (`mallory1`..`mallory10`, one per attack), each with a budget they cannot spend
/// here, ledgers in `dir`; `memory_limit` [`MEMORY_LIMIT_MIB`] (so each of the twelve
/// analysts' share is a twelfth of it, 42 MiB, and one query's a quarter of it).
fn config(dir: &Path) -> PathBuf {
    let mut text = format!(
        "[[table]]\nname = \"visits\"\nlocation = \"{VISITS}\"\nunit = \"patient_id\"\n\
         columns = [\"visit_id BIGINT\", \"patient_id BIGINT\", \"region VARCHAR\", \"month VARCHAR\", \"exposed BOOLEAN\", \"outcome BOOLEAN\"]\n\n\
         [options]\nmax_rows_per_unit = 4\n\n"
    );
    let attackers = (1..=ATTACKS.len()).map(|n| (attacker_name(n), "pw-m".to_string()));
    let honest = HONEST.iter().map(|(n, p)| (n.to_string(), p.to_string()));
    for (name, password) in honest.chain(attackers) {
        text.push_str(&format!(
            "[[analyst]]\nname = \"{name}\"\npassword = \"{password}\"\nepsilon_budget = 1000000\nledger = \"{name}.ledger\"\n\n"
        ));
    }
    text.push_str(&format!(
        "[limits]\nmemory_limit = \"{MEMORY_LIMIT_MIB}MiB\"\nquery_timeout_seconds = {QUERY_TIMEOUT_SECONDS}\n"
    ));
    let path = dir.join("owner.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The attacker's account for attack `n`: a fresh one per attack, so that what one attack
/// leaves behind on its own account (its query slots held by abandoned tickets until
/// `query_timeout_seconds`, its planning queue) does not stop the next attack from reaching
/// the server. The honest analysts are the same throughout.
fn attacker_name(n: usize) -> String {
    format!("mallory{n}")
}

/// A ledger's charges: their number and their epsilon total.
fn ledger_total(path: &Path) -> (usize, f64) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let epsilons: Vec<f64> = text
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split('\t').nth(3).unwrap().parse().unwrap())
        .collect();
    (epsilons.len(), epsilons.iter().sum())
}

/// Each attack's length: `DP_HOSTILE_SECONDS` (the long form), 3 s by default.
fn seconds_per_attack() -> Duration {
    Duration::from_secs_f64(
        std::env::var("DP_HOSTILE_SECONDS")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| *s > 0.0)
            .unwrap_or(3.0),
    )
}

/// The attacks to run: `DP_HOSTILE_ATTACKS` (their numbers, comma-separated, e.g. `3,8`:
/// to look at some alone), all by default.
fn selected_attacks() -> Vec<usize> {
    match std::env::var("DP_HOSTILE_ATTACKS") {
        Ok(list) if !list.trim().is_empty() => list
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("DP_HOSTILE_ATTACKS: attack numbers")
            })
            .collect(),
        _ => (1..=ATTACKS.len()).collect(),
    }
}

/// One honest query's outcome.
struct Record {
    analyst: &'static str,
    /// The phase running when it was sent (0: before the attacks).
    phase: usize,
    latency: Duration,
    cost: f64,
    error: Option<String>,
}

/// One honest connection: the DP queries, alternated, until `stop`.
async fn honest_loop(
    mut client: FlightSqlServiceClient<Channel>,
    analyst: &'static str,
    first: usize,
    phase: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) -> Vec<Record> {
    let mut records = Vec::new();
    let mut i = first;
    while !stop.load(Ordering::Relaxed) {
        let (sql, cost) = QUERIES[i % QUERIES.len()];
        i += 1;
        let phase = phase.load(Ordering::Relaxed);
        let started = Instant::now();
        let result = tokio::time::timeout(HONEST_TIMEOUT, query(&mut client, sql)).await;
        let latency = started.elapsed();
        let error = match result {
            Ok(Ok(batches)) if batches.iter().map(|b| b.num_rows()).sum::<usize>() == 1 => None,
            Ok(Ok(batches)) => Some(format!("{} batches, not one row", batches.len())),
            Ok(Err(e)) => Some(e),
            Err(_) => Some(format!("no answer in {HONEST_TIMEOUT:?}")),
        };
        records.push(Record {
            analyst,
            phase,
            latency,
            cost,
            error,
        });
    }
    records
}

/// What the attacker saw, by kind: outcomes and the first words of each error (digits
/// replaced by `#`, so that errors differing only in a number are counted together).
type Tally = BTreeMap<String, usize>;

fn note<T, E: ToString>(tally: &mut Tally, kind: &str, result: Result<T, E>) {
    let key = match result {
        Ok(_) => format!("{kind}: answered"),
        Err(e) => {
            let e: String = e
                .to_string()
                .replace('\n', " ")
                .chars()
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .take(110)
                .collect();
            format!("{kind}: error {e}")
        }
    };
    *tally.entry(key).or_default() += 1;
}

fn count(tally: &mut Tally, key: impl Into<String>) {
    *tally.entry(key.into()).or_default() += 1;
}

/// `future`, unless `deadline` comes first (the attacker then drops it).
async fn until<F: std::future::Future>(deadline: Instant, future: F) -> Option<F::Output> {
    tokio::time::timeout_at(deadline.into(), future).await.ok()
}

/// What an attack has: the server's address and its account's logged-in connections.
#[derive(Clone)]
struct Attacker {
    url: String,
    address: String,
    clients: Vec<FlightSqlServiceClient<Channel>>,
}

impl Attacker {
    fn client(&self, i: usize) -> FlightSqlServiceClient<Channel> {
        self.clients[i % self.clients.len()].clone()
    }
}

/// Runs `tasks` copies of `task(attacker, index, deadline)` at once; their tallies summed.
async fn spawn_tasks<F, Fut>(attacker: &Attacker, tasks: usize, deadline: Instant, task: F) -> Tally
where
    F: Fn(Attacker, usize, Instant) -> Fut,
    Fut: std::future::Future<Output = Tally> + Send + 'static,
{
    let handles: Vec<_> = (0..tasks)
        .map(|i| tokio::spawn(task(attacker.clone(), i, deadline)))
        .collect();
    let mut total = Tally::new();
    for handle in handles {
        for (key, n) in handle.await.unwrap() {
            *total.entry(key).or_default() += n;
        }
    }
    total
}

/// A loop of `statements` on one of the attacker's connections until `deadline`, each abandoned
/// after `patience` (or at the deadline).
async fn statement_loop(
    mut client: FlightSqlServiceClient<Channel>,
    statements: Vec<(&'static str, String)>,
    patience: Duration,
    deadline: Instant,
) -> Tally {
    let mut tally = Tally::new();
    let mut i = 0;
    while Instant::now() < deadline {
        let (kind, sql) = &statements[i % statements.len()];
        i += 1;
        let limit = deadline.min(Instant::now() + patience);
        match until(limit, query(&mut client, sql)).await {
            Some(result) => note(&mut tally, kind, result),
            None => count(&mut tally, format!("{kind}: abandoned")),
        }
    }
    tally
}

/// The attacks, in the order they run.
const ATTACKS: [&str; 10] = [
    "1 constants that aborted the process",
    "2 DoPut statement updates",
    "3 GetTables with 1.9 MB patterns",
    "4 planning abandoned after 50 ms",
    "5 memory-hungry joins",
    "6 SQL PREPARE flood",
    "7 idle connections from 4 addresses",
    "8 costly DP queries cancelled",
    "9 serve_load's mallory statements",
    "10 bad-login flood",
];

/// Attack number `n` (1-based, as in [`ATTACKS`]) until `deadline`.
async fn attack(n: usize, attacker: Attacker, deadline: Instant) -> Tally {
    match n {
        1 => {
            spawn_tasks(&attacker, 2, deadline, |a, i, deadline| {
                let statements = vec![
                    (
                        "repeat 10^12",
                        "SELECT length(repeat(arrow_cast('a','LargeUtf8'), 1000000000000))"
                            .to_string(),
                    ),
                    (
                        "FixedSizeList 2^31-1",
                        "SELECT arrow_typeof(arrow_cast(NULL, 'FixedSizeList(2147483647, Int64)'))"
                            .to_string(),
                    ),
                ];
                statement_loop(a.client(i), statements, Duration::from_secs(30), deadline)
            })
            .await
        }
        2 => {
            spawn_tasks(&attacker, 2, deadline, |a, i, deadline| async move {
                let mut client = a.client(i);
                let statements = [
                    "SELECT count(*) FROM range(1000000) a CROSS JOIN range(1000000) b",
                    "SELECT count(DISTINCT value) FROM range(400000000)",
                ];
                let mut tally = Tally::new();
                let mut j = i;
                while Instant::now() < deadline {
                    let sql = statements[j % statements.len()];
                    j += 1;
                    let limit = deadline.min(Instant::now() + Duration::from_secs(2));
                    match until(limit, client.execute_update(sql.to_string(), None)).await {
                        Some(result) => note(&mut tally, "update", result),
                        None => count(&mut tally, "update: abandoned"),
                    }
                }
                tally
            })
            .await
        }
        3 => {
            spawn_tasks(&attacker, GET_TABLES_TASKS, deadline, |a, i, deadline| async move {
                let client = a.client(i);
                // Two 1.9 MB patterns (3.8 MB: under the 4 MiB message limit): one that
                // becomes a regular expression, one of single-character wildcards.
                let patterns = ["%a".repeat(950_000), "_".repeat(1_900_000)];
                let mut tally = Tally::new();
                let mut j = i;
                while Instant::now() < deadline {
                    let pattern = patterns[j % patterns.len()].clone();
                    j += 1;
                    let command = CommandGetTables {
                        catalog: None,
                        db_schema_filter_pattern: Some(pattern.clone()),
                        table_name_filter_pattern: Some(pattern),
                        table_types: vec![],
                        include_schema: true,
                    };
                    let ticket = Ticket::new(command.as_any().encode_to_vec());
                    let mut client = client.clone();
                    let call = async move {
                        let stream = client.do_get(ticket).await?;
                        stream.try_collect::<Vec<_>>().await
                    };
                    match until(deadline, call).await {
                        Some(result) => note(&mut tally, "get tables", result),
                        None => count(&mut tally, "get tables: abandoned"),
                    }
                }
                tally
            })
            .await
        }
        4 => {
            spawn_tasks(&attacker, 4, deadline, |a, i, deadline| async move {
                let mut client = a.client(i);
                let sum = vec!["1"; 2_000].join("+");
                let chain = vec!["region"; 200].join(" || ");
                let statements = [
                    format!("SELECT {sum} AS s"),
                    format!("SELECT dp_count(outcome, 0.01) AS n FROM visits WHERE {chain} = 'x'"),
                ];
                let mut tally = Tally::new();
                let mut j = i;
                while Instant::now() < deadline {
                    let sql = statements[j % statements.len()].clone();
                    j += 1;
                    let planning = client.execute(sql, None);
                    match tokio::time::timeout(Duration::from_millis(50), planning).await {
                        Ok(result) => note(&mut tally, "planned within 50 ms", result),
                        Err(_) => count(&mut tally, "dropped after 50 ms"),
                    }
                }
                tally
            })
            .await
        }
        5 => {
            spawn_tasks(&attacker, 14, deadline, |a, i, deadline| async move {
                let mut client = a.client(i);
                let hungry = "SELECT count(*) AS n FROM (SELECT value AS v FROM range(300000)) a \
                              JOIN (SELECT value % 3000000 AS w FROM range(400000000)) b ON a.v = b.w";
                let mut tally = Tally::new();
                while Instant::now() < deadline {
                    match until(deadline, query(&mut client, hungry)).await {
                        Some(result) => note(&mut tally, "join", result),
                        None => count(&mut tally, "join: still running at the end (abandoned)"),
                    }
                }
                tally
            })
            .await
        }
        6 => {
            spawn_tasks(&attacker, 2, deadline, |a, i, deadline| async move {
                let mut client = a.client(i);
                let mut tally = Tally::new();
                let mut j = 0usize;
                while Instant::now() < deadline {
                    let sql = format!(
                        "PREPARE p{i}_{j}(BIGINT) AS SELECT dp_count(outcome, 0.01) AS n \
                         FROM visits WHERE visit_id > $1"
                    );
                    j += 1;
                    match until(deadline, query(&mut client, &sql)).await {
                        Some(result) => note(&mut tally, "prepare", result),
                        None => count(&mut tally, "prepare: abandoned"),
                    }
                }
                tally
            })
            .await
        }
        7 => {
            // 4 addresses x 100 connections, half sending nothing and half only the HTTP/2
            // preface, held until the deadline.
            let mut held = Vec::new();
            let mut tally = Tally::new();
            for i in 0..100u32 {
                for from in 2..=5u8 {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let send = if i.is_multiple_of(2) {
                        &b""[..]
                    } else {
                        H2_PREFACE
                    };
                    match stranger(&attacker.address, from, send).await {
                        Some(tcp) => {
                            count(&mut tally, "idle connection opened");
                            held.push(tcp);
                        }
                        None => count(&mut tally, "idle connection refused"),
                    }
                }
            }
            tokio::time::sleep_until(deadline.into()).await;
            let mut closed = 0;
            for tcp in &mut held {
                if closed_within(tcp, Duration::from_millis(1)).await {
                    closed += 1;
                }
            }
            *tally
                .entry("idle connection closed by the server by the end".to_string())
                .or_default() += closed;
            tally
        }
        8 => {
            spawn_tasks(&attacker, 2, deadline, |a, i, deadline| async move {
                let mut client = a.client(i);
                let hog = common::costly_batch_query();
                let mut tally = Tally::new();
                let mut j = i;
                while Instant::now() < deadline {
                    j += 1;
                    let Some(planned) = until(deadline, client.execute(hog.clone(), None)).await
                    else {
                        count(&mut tally, "planning abandoned at the end");
                        break;
                    };
                    let info = match planned {
                        Ok(info) => info,
                        Err(e) => {
                            note(&mut tally, "plan", Err::<(), _>(e));
                            continue;
                        }
                    };
                    let mut streaming = client.clone();
                    let stream_info = info.clone();
                    let stream =
                        tokio::spawn(async move { fetch(&mut streaming, stream_info).await });
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if j.is_multiple_of(2) {
                        let cancelled = client
                            .do_action(Action::new(
                                "CancelFlightInfo",
                                arrow_flight::CancelFlightInfoRequest::new(info).encode_to_vec(),
                            ))
                            .await;
                        match cancelled {
                            Ok(results) => {
                                let _ = results.try_collect::<Vec<_>>().await;
                            }
                            Err(e) => note(&mut tally, "cancel", Err::<(), _>(e)),
                        }
                        match until(deadline + Duration::from_secs(5), stream).await {
                            Some(Ok(result)) => note(&mut tally, "cancelled query", result),
                            _ => count(&mut tally, "cancelled query: not stopped in 5 s"),
                        }
                    } else {
                        stream.abort();
                        let _ = stream.await;
                        count(&mut tally, "query stream dropped after 1 s");
                    }
                }
                tally
            })
            .await
        }
        9 => {
            let sum = vec!["1"; 2_000].join("+");
            let chain = vec!["region"; 200].join(" || ");
            let memory = vec![
                (
                    "memory",
                    "SELECT count(DISTINCT value) FROM range(400000000)".to_string(),
                ),
                (
                    "memory",
                    "SELECT value % 100000007 AS k, count(*) AS n FROM range(300000000) \
                     GROUP BY k ORDER BY n DESC LIMIT 1"
                        .to_string(),
                ),
            ];
            let slow = vec![(
                "slow",
                "SELECT count(*) FROM range(1000000) a CROSS JOIN range(1000000) b".to_string(),
            )];
            let long = vec![
                ("long", format!("SELECT {sum} AS s")),
                (
                    "long",
                    format!("SELECT dp_count(outcome, 0.01) AS n FROM visits WHERE {chain} = 'x'"),
                ),
            ];
            let kinds = [memory.clone(), memory, slow, long];
            let patience = Duration::from_secs(3600);
            let handles: Vec<_> = kinds
                .into_iter()
                .enumerate()
                .map(|(i, statements)| {
                    tokio::spawn(statement_loop(
                        attacker.client(i),
                        statements,
                        patience,
                        deadline,
                    ))
                })
                .collect();
            let mut total = Tally::new();
            for handle in handles {
                for (key, n) in handle.await.unwrap() {
                    *total.entry(key).or_default() += n;
                }
            }
            total
        }
        10 => {
            spawn_tasks(&attacker, 8, deadline, |a, i, deadline| async move {
                let mut tally = Tally::new();
                let Ok(channel) = Channel::from_shared(a.url.clone()).unwrap().connect().await
                else {
                    count(&mut tally, "login flood: connect failed");
                    return tally;
                };
                let mut j = 0u64;
                while Instant::now() < deadline {
                    let mut client = FlightSqlServiceClient::new(channel.clone());
                    j += 1;
                    match until(deadline, client.handshake(&format!("nobody{i}-{j}"), "guess"))
                        .await
                    {
                        Some(Ok(_)) => count(&mut tally, "bad login: succeeded (!)"),
                        Some(Err(e)) if e.to_string().contains("retry in") => {
                            count(&mut tally, "bad login: refused, backing off")
                        }
                        Some(Err(e)) if e.to_string().contains("invalid user name or password") => {
                            count(&mut tally, "bad login: refused, password checked")
                        }
                        Some(Err(e)) => note(&mut tally, "bad login", Err::<(), _>(e)),
                        None => count(&mut tally, "bad login: abandoned"),
                    }
                }
                tally
            })
            .await
        }
        _ => unreachable!("no attack {n}"),
    }
}

/// The `q` quantile of `latencies` (sorted in place), in ms.
fn quantile(latencies: &mut [Duration], q: f64) -> f64 {
    latencies.sort();
    latencies
        .get(((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1))
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

/// The bound on the honest p99 latency during each attack, and after them (ms): the issue's
/// 1 s. An honest DP query over `visits` takes some 20-40 ms in a debug build here (the
/// no-attack phase's p50 and p99 are printed first), so 1 s is some 25 times the quiet p99: an
/// attack that merely shares the two cores with the honest analysts (the attacker's runtime
/// takes at most its share of them, and the test's attack clients run on the same cores)
/// stays far under it, while one that queues the honest queries (a blocked Flight runtime, a
/// full planning pool, a lost thread, a process swapping) takes seconds, and passes it. It is
/// checked per attack, not over the whole run, so that one attack stalling the honest analysts
/// for seconds is not hidden among the thousands of queries of the others. If a slow machine
/// made the quiet p99 itself approach 1 s, the assertion would say so by printing it.
const P99_BOUND_MS: f64 = 1000.0;

/// The bound on the server's peak resident memory: `memory_limit` (the most its queries'
/// pools may hold) plus the overhead, derived from what it is made of: the process without
/// attacks, as measured before them (`quiet_peak`, about 110 MiB: the binary's mapped pages,
/// the Flight and analysts' runtimes and their threads, the honest queries' own memory, which
/// is within `memory_limit` but counted again here, so the bound is generous by that much),
/// plus the connections' buffers (hyper and h2 keep up to some 64 KiB of read and write
/// buffers per connection, and the HTTP/2 windows; 128 KiB each for `max_connections`: 64
/// MiB), plus the large messages being decoded at once (attack 3: each up to
/// `max_message_bytes`, held twice while decoded, for each of its tasks and as many again
/// queued: 64 MiB).
fn rss_bound(quiet_peak: u64) -> u64 {
    let memory_limit = MEMORY_LIMIT_MIB << 20;
    memory_limit + quiet_peak + connection_allowance() + message_allowance()
}

fn connection_allowance() -> u64 {
    MAX_CONNECTIONS * (128 << 10)
}

fn message_allowance() -> u64 {
    2 * MAX_MESSAGE_BYTES * 2 * GET_TABLES_TASKS as u64
}

/// Resets the server's peak resident memory (`VmHWM`) to its current resident memory (Linux
/// 4.0+, `/proc/PID/clear_refs`), so that each phase reports its own peak.
fn reset_peak_rss(server: &Server) {
    let _ = std::fs::write(format!("/proc/{}/clear_refs", server.pid()), "5");
}

/// Per-phase figures.
struct Phase {
    name: String,
    seconds: f64,
    tally: Tally,
    /// The server's resident memory at the start of the phase (what earlier phases left).
    rss_start: u64,
    /// The server's peak resident memory during the phase (`VmHWM`, reset at its start).
    rss_peak: u64,
    /// The most connections the server held, sampled every 100 ms.
    connections_max: usize,
}

/// Waits until `done` (sampling the server's connections every 100 ms); the phase's figures.
async fn watch_phase(
    server: &Server,
    name: &str,
    tally: impl std::future::Future<Output = Tally>,
) -> Phase {
    let started = Instant::now();
    let rss_start = server.rss();
    let mut connections_max = 0;
    let mut tally = std::pin::pin!(tally);
    let tally = loop {
        connections_max = connections_max.max(server.open_connections());
        if let Ok(tally) = tokio::time::timeout(Duration::from_millis(100), &mut tally).await {
            break tally;
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("{name}: {seconds:.1} s");
    Phase {
        name: name.to_string(),
        seconds,
        tally,
        rss_start,
        rss_peak: server.peak_rss(),
        connections_max,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_analysts_are_served_beside_every_attack() {
    let test_started = Instant::now();
    let dir = test_dir("all");
    let mut server = Server::start(&config(&dir));
    let url = server.url();
    let per_attack = seconds_per_attack();

    let mut honest = Vec::new();
    for c in 0..HONEST_CONNECTIONS {
        for (a, (name, password)) in HONEST.iter().enumerate() {
            let client = login(&url, name, password)
                .await
                .unwrap_or_else(|e| panic!("{name}'s login: {e}"));
            honest.push((client, *name, c * HONEST.len() + a));
        }
    }
    // The attacker's accounts log in (four sessions each, four connections) before the
    // attacks: the last attack's bad logins back off new logins from this address.
    let mut attackers = Vec::new();
    for n in 1..=ATTACKS.len() {
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(
                login(&url, &attacker_name(n), "pw-m")
                    .await
                    .expect("the attacker's login"),
            );
        }
        attackers.push(Attacker {
            url: url.clone(),
            address: server.address.clone(),
            clients,
        });
    }

    let phase = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let honest_tasks: Vec<_> = honest
        .into_iter()
        .map(|(client, name, first)| {
            tokio::spawn(honest_loop(
                client,
                name,
                first,
                Arc::clone(&phase),
                Arc::clone(&stop),
            ))
        })
        .collect();

    // Phase 0: no attack, as long as an attack (at least 4 s), for the quiet p99 and RSS.
    let mut phases = Vec::new();
    reset_peak_rss(&server);
    let quiet = per_attack.max(Duration::from_secs(4));
    phases.push(
        watch_phase(&server, "0 no attack", async {
            tokio::time::sleep(quiet).await;
            Tally::new()
        })
        .await,
    );
    let quiet_peak = phases[0].rss_peak;

    let selected = selected_attacks();
    for (n, (name, attacker)) in ATTACKS.iter().zip(attackers).enumerate() {
        let n = n + 1;
        phase.store(n, Ordering::Relaxed);
        if !selected.contains(&n) {
            phases.push(Phase {
                name: format!("{name} (not run)"),
                seconds: 0.0,
                tally: Tally::new(),
                rss_start: 0,
                rss_peak: 0,
                connections_max: 0,
            });
            continue;
        }
        reset_peak_rss(&server);
        let deadline = Instant::now() + per_attack;
        phases.push(watch_phase(&server, name, attack(n, attacker, deadline)).await);
    }

    // After the attacks: the honest analysts go on for a while (abandoned attack queries end
    // by their clients' going away or their deadline).
    phase.store(ATTACKS.len() + 1, Ordering::Relaxed);
    reset_peak_rss(&server);
    phases.push(
        watch_phase(&server, "after the attacks", async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Tally::new()
        })
        .await,
    );
    stop.store(true, Ordering::Relaxed);
    let mut records = Vec::new();
    for task in honest_tasks {
        records.extend(task.await.unwrap());
    }
    let peak = phases.iter().map(|p| p.rss_peak).max().unwrap();
    let alive = server.alive();

    // The figures.
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "hostile load test: {} honest connections ({} analysts), {:.0} s per attack, \
         memory_limit {MEMORY_LIMIT_MIB} MiB, query_timeout_seconds {QUERY_TIMEOUT_SECONDS}",
        HONEST.len() * HONEST_CONNECTIONS,
        HONEST.len(),
        per_attack.as_secs_f64()
    );
    println!(
        "{:<40} {:>5} {:>6} {:>7} {:>7} {:>17} {:>5}",
        "phase", "s", "honest", "p50 ms", "p99 ms", "RSS start->peak", "conns"
    );
    let mut slow = Vec::new();
    for (i, phase) in phases.iter().enumerate() {
        let mut latencies: Vec<Duration> = records
            .iter()
            .filter(|r| r.phase == i && r.error.is_none())
            .map(|r| r.latency)
            .collect();
        let errors = records
            .iter()
            .filter(|r| r.phase == i && r.error.is_some())
            .count();
        let p99 = quantile(&mut latencies, 0.99);
        // Each attack run and the phase after them (NaN: no honest query started during an
        // attack, which fails too).
        if i > 0 && phase.seconds > 0.0 && (p99.is_nan() || p99 >= P99_BOUND_MS) {
            slow.push(format!("{}: p99 {p99:.0} ms", phase.name));
        }
        println!(
            "{:<40} {:>5.1} {:>6} {:>7.1} {:>7.1} {:>5.0}->{:>5.0} MiB {:>5}{}",
            phase.name,
            phase.seconds,
            latencies.len(),
            quantile(&mut latencies, 0.5),
            p99,
            mib(phase.rss_start),
            mib(phase.rss_peak),
            phase.connections_max,
            if errors > 0 {
                format!("  {errors} HONEST ERRORS")
            } else {
                String::new()
            }
        );
        for (what, n) in &phase.tally {
            println!("    {n:>6} x {what}");
        }
    }
    let mut attacked: Vec<Duration> = records
        .iter()
        .filter(|r| r.phase > 0 && r.error.is_none())
        .map(|r| r.latency)
        .collect();
    println!(
        "honest latency during and after the attacks: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms \
         ({} queries); bound on each phase's p99 {P99_BOUND_MS:.0} ms",
        quantile(&mut attacked, 0.5),
        quantile(&mut attacked, 0.99),
        quantile(&mut attacked, 1.0),
        attacked.len()
    );
    let rss_limit = rss_bound(quiet_peak);
    println!(
        "server peak RSS {:.0} MiB (no attack: {:.0} MiB); bound {:.0} MiB = memory_limit \
         {MEMORY_LIMIT_MIB} + no-attack peak {:.0} + connections {:.0} + messages {:.0}",
        mib(peak),
        mib(quiet_peak),
        mib(rss_limit),
        mib(quiet_peak),
        mib(connection_allowance()),
        mib(message_allowance()),
    );
    let mut mismatches = Vec::new();
    for (name, _) in HONEST {
        let answered: Vec<&Record> = records
            .iter()
            .filter(|r| r.analyst == name && r.error.is_none())
            .collect();
        let cost: f64 = answered.iter().map(|r| r.cost).sum();
        let (lines, total) = ledger_total(&dir.join(format!("{name}.ledger")));
        println!(
            "{name}: {} answered, epsilon {cost:.4}; ledger {lines} charges, epsilon {total:.4}",
            answered.len()
        );
        if lines != answered.len() || (total - cost).abs() > 1e-9 {
            mismatches.push(format!(
                "{name}: ledger {lines} charges, epsilon {total}; answered {}, epsilon {cost}",
                answered.len()
            ));
        }
    }
    println!("wall time {:.0} s", test_started.elapsed().as_secs_f64());

    // The assertions.
    assert!(alive, "the server died: {}", server.stderr_text());
    let errors: Vec<String> = records
        .iter()
        .filter_map(|r| {
            r.error
                .as_ref()
                .map(|e| format!("{} during phase {}: {e}", r.analyst, r.phase))
        })
        .collect();
    assert!(
        errors.is_empty(),
        "{} honest queries failed, first ones: {:#?}",
        errors.len(),
        &errors[..errors.len().min(10)]
    );
    assert!(
        mismatches.is_empty(),
        "charges lost or doubled: {mismatches:?}"
    );
    assert!(
        slow.is_empty(),
        "honest p99 over {P99_BOUND_MS:.0} ms during: {slow:?}"
    );
    assert!(
        peak < rss_limit,
        "the server's peak RSS {:.0} MiB is over the bound {:.0} MiB",
        mib(peak),
        mib(rss_limit)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
