//! Load test of `dp-server` on loopback (BENCHMARKS.md, "Serving analysts"): the server (the
//! same `datafusion_dp::server::serve` the binary runs, in this process) on 127.0.0.1, and N
//! concurrent analyst connections (arrow-flight's Flight SQL client, one login each, spread
//! over A analysts) issuing DP queries until a deadline. Reports queries per second, p50/p99
//! latency (GetFlightInfo + DoGet), and checks that each analyst's ledger total equals the sum of
//! the costs of that analyst's answered queries (nothing charged twice or lost). For scale, the
//! same queries first run in-process on one locked session (no network, no server) for a
//! third of the time: the median of those is the baseline the server's latencies compare to.
//!
//! ```text
//! cargo run --release --features server --example serve_load -- [--connections 64] [--analysts 8] [--seconds 20]
//! ```

use arrow_flight::sql::client::FlightSqlServiceClient;
use datafusion_dp::outln;
use datafusion_dp::owner::{Owner, OwnerConfig};
use futures::TryStreamExt;
use std::path::Path;
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

struct Outcome {
    analyst: usize,
    latencies: Vec<Duration>,
    spent: f64,
    errors: Vec<String>,
}

async fn analyst_loop(url: String, analyst: usize, deadline: Instant) -> Outcome {
    let mut outcome = Outcome {
        analyst,
        latencies: Vec::new(),
        spent: 0.0,
        errors: Vec::new(),
    };
    let channel = Channel::from_shared(url).unwrap().connect().await.unwrap();
    let mut client = FlightSqlServiceClient::new(channel);
    client
        .handshake(&format!("analyst{analyst}"), "load-test")
        .await
        .unwrap();
    let mut i = analyst;
    while Instant::now() < deadline {
        let (sql, cost) = QUERIES[i % QUERIES.len()];
        i += 1;
        let start = Instant::now();
        let result = async {
            let info = client
                .execute(sql.to_string(), None)
                .await
                .map_err(|e| e.to_string())?;
            let ticket = info.endpoint[0].ticket.clone().unwrap();
            let stream = client.do_get(ticket).await.map_err(|e| e.to_string())?;
            let batches: Vec<_> = stream.try_collect().await.map_err(|e| e.to_string())?;
            Ok::<_, String>(batches.iter().map(|b| b.num_rows()).sum::<usize>())
        }
        .await;
        match result {
            Ok(1) => {
                outcome.latencies.push(start.elapsed());
                outcome.spent += cost;
            }
            Ok(n) => outcome.errors.push(format!("{n} rows")),
            Err(e) => outcome.errors.push(e),
        }
    }
    outcome
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

#[tokio::main]
async fn main() {
    let mut connections = 64usize;
    let mut analysts = 8usize;
    let mut seconds = 20u64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().expect("a value");
        match arg.as_str() {
            "--connections" => connections = value.parse().unwrap(),
            "--analysts" => analysts = value.parse().unwrap(),
            "--seconds" => seconds = value.parse::<u64>().unwrap().min(300),
            other => panic!("unknown argument {other}"),
        }
    }
    let dir = std::env::temp_dir().join(format!("dp-serve-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let visits = concat!(env!("CARGO_MANIFEST_DIR"), "/data/visits.csv");
    let mut config =
        format!("[[table]]\nname = \"visits\"\nlocation = \"{visits}\"\nunit = \"patient_id\"\n\
                 columns = [\"visit_id BIGINT\", \"patient_id BIGINT\", \"region VARCHAR\", \"month VARCHAR\", \"exposed BOOLEAN\", \"outcome BOOLEAN\"]\n\n");
    for a in 0..analysts {
        config.push_str(&format!(
            "[[analyst]]\nname = \"analyst{a}\"\npassword = \"load-test\"\nepsilon_budget = 1000000\nledger = \"analyst{a}.ledger\"\n\n"
        ));
    }
    let config = OwnerConfig::parse(&config, &dir, "serve_load").unwrap();
    let owner = Owner::open(config).await.unwrap();

    // Baseline: the same queries through analyst_sql on one locked session, one at a time.
    let baseline_ledger = dir.join("baseline.ledger");
    let ctx = owner
        .locked_session(&datafusion_dp::owner::SessionBudget {
            epsilon: 1e6,
            delta: None,
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

    eprintln!("{connections} connections, {analysts} analysts, {seconds} s on {url}");
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..connections)
        .map(|c| tokio::spawn(analyst_loop(url.clone(), c % analysts, deadline)))
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    let elapsed = start.elapsed().as_secs_f64();
    let _ = stop.send(());
    let _ = server.await;

    let mut latencies: Vec<Duration> = outcomes.iter().flat_map(|o| o.latencies.clone()).collect();
    latencies.sort();
    let answered = latencies.len();
    let errors: Vec<&String> = outcomes.iter().flat_map(|o| &o.errors).collect();
    let quantile = |q: f64| {
        latencies
            .get(((answered as f64 * q).ceil() as usize).saturating_sub(1))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    };
    outln!("connections            {connections} ({analysts} analysts)");
    outln!("duration               {elapsed:.1} s");
    outln!("answered queries       {answered}");
    outln!("errors                 {}", errors.len());
    outln!("queries per second     {:.1}", answered as f64 / elapsed);
    outln!(
        "in-process baseline    {} queries, p50 {baseline_p50:.1} ms (one session, sequential)",
        baseline.len()
    );
    outln!(
        "latency p50            {:.1} ms ({:.1}x the in-process p50)",
        quantile(0.5),
        quantile(0.5) / baseline_p50
    );
    outln!("latency p99            {:.1} ms", quantile(0.99));
    let mut all_match = true;
    for a in 0..analysts {
        let answered_cost: f64 = outcomes
            .iter()
            .filter(|o| o.analyst == a)
            .map(|o| o.spent)
            .sum();
        let answered_count: usize = outcomes
            .iter()
            .filter(|o| o.analyst == a)
            .map(|o| o.latencies.len())
            .sum();
        let (lines, total) = ledger_total(&dir.join(format!("analyst{a}.ledger")));
        let matches = lines == answered_count && (total - answered_cost).abs() < 1e-9;
        all_match &= matches;
        outln!(
            "analyst{a}: ledger {lines} lines, epsilon {total:.4}; answered {answered_count}, epsilon {answered_cost:.4} {}",
            if matches { "(equal)" } else { "(MISMATCH)" }
        );
    }
    for e in errors.iter().take(5) {
        outln!("error: {e}");
    }
    outln!(
        "ledger totals equal the answered queries' costs: {}",
        if all_match { "yes" } else { "NO" }
    );
    let _ = std::fs::remove_dir_all(&dir);
    if !all_match || !errors.is_empty() {
        std::process::exit(1);
    }
}
