//! What the integration tests share: session configurations and sample moments for the
//! statistical SQL tests, and a moto S3-compatible server on loopback (from PyPI;
//! `.ci/install-tools` installs it) with plain HTTP requests to it. A test tool that is missing
//! skips its test with a SKIPPED line, or fails it under `CI=true` ([`missing_tool`]).

// Each test crate compiles this module and uses part of it.
#![allow(dead_code)]

#[cfg(feature = "ballista")]
pub mod cluster;
#[cfg(feature = "server")]
pub mod server;

use datafusion::prelude::SessionConfig;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A session configuration with `partitions` partitions and 1000-row batches; `skip_partial`
/// forces DataFusion's skip-partial-aggregation path (`convert_to_state`).
pub fn config(partitions: usize, skip_partial: bool) -> SessionConfig {
    let mut config = SessionConfig::new()
        .with_target_partitions(partitions)
        .with_batch_size(1000);
    if skip_partial {
        let options = config.options_mut();
        options
            .execution
            .skip_partial_aggregation_probe_rows_threshold = 10;
        options
            .execution
            .skip_partial_aggregation_probe_ratio_threshold = 0.0;
    }
    config
}

/// Tables `t` (protected row by row) and `truth` (public, for the exact answer) in `ctx`, with
/// the same rows: `columns` selected from `generate_series(0, rows - 1)` (its column `value`),
/// after the statements `setup`.
pub async fn twin_tables(
    ctx: &datafusion::prelude::SessionContext,
    columns: &str,
    rows: usize,
    setup: &[&str],
) -> datafusion::error::Result<()> {
    use datafusion_dp::{protect, Protection};
    for table in ["t", "truth"] {
        let sql = format!(
            "CREATE TABLE {table} AS SELECT {columns} FROM generate_series(0, {})",
            rows - 1
        );
        ctx.sql(&sql).await?.collect().await?;
    }
    for sql in setup {
        ctx.sql(sql).await?.collect().await?;
    }
    protect(ctx, "t", Protection::Rows)?;
    protect(ctx, "truth", Protection::Public)?;
    Ok(())
}

/// Sample mean, sample variance, and the standard errors of both (`sqrt(σ²/n)` and
/// `sqrt((μ4 − σ⁴)/n)`, from the sample's own moments).
pub fn moments(xs: &[f64]) -> (f64, f64, f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let m4 = xs.iter().map(|x| (x - mean).powi(4)).sum::<f64>() / n;
    (mean, var, (var / n).sqrt(), ((m4 - var * var) / n).sqrt())
}

/// A running `moto_server`, killed when dropped.
pub struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends one raw HTTP/1.1 request (with `Connection: close`) and returns the whole response.
pub fn http(port: u16, request: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

/// A request with a body: `method path` to the server on `port`, with `headers` (each
/// `Name: value`) and `Content-Length` added.
pub fn http_with_body(
    port: u16,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
) -> std::io::Result<String> {
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    http(port, &request)
}

/// Creates `bucket` (moto accepts unsigned requests until authentication is switched on).
pub fn create_bucket(port: u16, bucket: &str) {
    let created = http_with_body(port, "PUT", &format!("/{bucket}"), &[], "").unwrap();
    assert!(created.starts_with("HTTP/1.1 200"), "{created}");
}

/// Whether the tests run under CI (`CI=true`, as CI services set it and `.ci/run` does): then
/// every tool a test needs must be there.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// This test process's scratch directory, `<target>/tmp/scratch/<pid>` (Cargo's
/// `CARGO_TARGET_TMPDIR`, inside the target directory, not the machine's temporary directory).
/// The first call removes the directories of test processes that have ended, so files of a
/// failed test stay until the next test binary runs, and the runs do not pile up.
pub fn scratch_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let root = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("scratch");
        if let Ok(entries) = std::fs::read_dir(&root) {
            for entry in entries.flatten() {
                let ended = entry
                    .file_name()
                    .to_str()
                    .and_then(|pid| pid.parse::<u32>().ok())
                    .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
                if ended {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let dir = root.join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).expect("the test's scratch directory");
        dir
    })
}

/// An empty directory `name` in this test process's [`scratch_dir`].
pub fn scratch(name: &str) -> std::path::PathBuf {
    let dir = scratch_dir().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Reports that `tool`, which a test needs, is missing: under `CI=true` the test fails, naming
/// the command that installs it; elsewhere it prints a SKIPPED line (the caller then returns).
pub fn missing_tool(tool: &str, install: &str) {
    assert!(
        !under_ci(),
        "{tool} is missing and CI=true needs it: run .ci/install-tools (it runs {install})"
    );
    println!(
        "SKIPPED: {tool} is missing (install the test tools with .ci/install-tools: {install})"
    );
}

/// The pip command `.ci/install-tools` runs for moto.
pub const MOTO_INSTALL: &str = "python3 -m pip install 'moto[server]==5.2.1'";

/// Starts `moto_server` on a free loopback port; `None` (after [`missing_tool`]) if it is not
/// installed.
pub fn start_moto() -> Option<(Server, u16)> {
    let port = TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = match Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            missing_tool("moto_server", MOTO_INSTALL);
            return None;
        }
        Err(e) => panic!("cannot start moto_server: {e}"),
    };
    let server = Server(child);
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "moto_server did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Some((server, port))
}

/// Creates an IAM user allowed everything on S3 and returns its (access key id, secret),
/// for a server whose authentication is switched on afterwards by [`enforce_credentials`].
pub fn create_s3_user(port: u16, user: &str) -> (String, String) {
    // moto routes by the service in the credential scope; the signature is not checked yet.
    let scope = "Authorization: AWS4-HMAC-SHA256 Credential=setup/20260101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0";
    let form = "Content-Type: application/x-www-form-urlencoded";
    let call = |pairs: &[(&str, &str)]| {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs.iter().copied().chain([("Version", "2010-05-08")]))
            .finish();
        let response = http_with_body(port, "POST", "/", &[scope, form], &body).unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        response
    };
    call(&[("Action", "CreateUser"), ("UserName", user)]);
    let key = call(&[("Action", "CreateAccessKey"), ("UserName", user)]);
    let element = |name: &str| {
        let from = key.find(&format!("<{name}>")).unwrap() + name.len() + 2;
        let to = from + key[from..].find(&format!("</{name}>")).unwrap();
        key[from..to].to_string()
    };
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}"#;
    call(&[
        ("Action", "PutUserPolicy"),
        ("UserName", user),
        ("PolicyName", "s3"),
        ("PolicyDocument", policy),
    ]);
    (element("AccessKeyId"), element("SecretAccessKey"))
}

/// From now on every request must be signed with an IAM user's credentials (moto's
/// `INITIAL_NO_AUTH_ACTION_COUNT`, reset through its API).
pub fn enforce_credentials(port: u16) {
    let response = http_with_body(
        port,
        "POST",
        "/moto-api/reset-auth",
        &["Content-Type: text/plain"],
        "0",
    )
    .unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

/// A DP query over `data/visits.csv` whose one batch takes seconds of CPU without yielding to
/// the runtime: five CTEs of 45 nested `initcap`s each over every row's region repeated to
/// 8,000 bytes (within the 8 KiB a row the total forms allow at the default 8,192 rows a
/// batch), 225 calls of about 30 ms each over the batch's 4,000 rows (7 s in a debug build),
/// within the expression depth limit of 256. For the tests that a stopped query stops inside
/// its batch (issue 42).
pub fn costly_batch_query() -> String {
    let nest = |x: &str| (0..45).fold(x.to_string(), |e, _| format!("initcap({e})"));
    let mut ctes = vec![format!(
        "c0 AS (SELECT patient_id, outcome, {} AS s FROM visits)",
        nest("repeat(region, 1600)")
    )];
    for i in 1..5 {
        ctes.push(format!(
            "c{i} AS (SELECT patient_id, outcome, {} AS s FROM c{})",
            nest("s"),
            i - 1
        ));
    }
    format!(
        "WITH {} SELECT dp_count(outcome, 0.1) AS n FROM c4 WHERE length(s) > 3",
        ctes.join(", ")
    )
}

/// The CPU time process `pid` has used so far (user and system, all threads; from
/// `/proc/PID/stat`, Linux), in seconds.
pub fn cpu_seconds_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // The fields after the command name (which may hold spaces) in parentheses: utime and
    // stime are the 14th and 15th of the line, the 12th and 13th after it.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / clock_ticks_per_second()
}

/// A field of process `pid`'s `/proc/PID/status` given in kB (`VmHWM:`, `VmRSS:`), in bytes;
/// 0 if unknown.
pub fn status_bytes_of(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The unit of `/proc/PID/stat`'s times (`getconf CLK_TCK`; 100 on Linux when unknown).
fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}
