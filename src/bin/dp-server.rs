//! `dp-server`: an Arrow Flight SQL server for untrusted analysts (docs/server.md).
//!
//! ```text
//! dp-server --config owner.toml [--listen 127.0.0.1:50051]   serve the owner's tables
//! dp-server --config owner.toml --scheduler df://HOST:50050   ... running the queries on a
//!                                                            trusted Ballista cluster
//! dp-server --hash-password < password.txt                  print an Argon2id hash for the config
//! ```
//! Prints `dp-server listening on ADDRESS` once it accepts connections; errors are one line.

use datafusion_dp::cli::one_line_error;
use datafusion_dp::owner::OwnerConfig;
use datafusion_dp::server::Execution;
use std::io::Write;
use std::process::ExitCode;

const USAGE: &str = "usage: dp-server --config OWNER.toml [--listen HOST:PORT] [--scheduler df://HOST:PORT]\n       dp-server --hash-password   (reads the password from standard input)";

/// The default address: loopback only; listening elsewhere is the owner's explicit choice.
const DEFAULT_LISTEN: &str = "127.0.0.1:50051";

async fn run() -> Result<(), String> {
    let mut config = None;
    let mut listen = None;
    let mut scheduler = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--config" => config = Some(value(&arg)?),
            "--listen" => listen = Some(value(&arg)?),
            "--scheduler" => scheduler = Some(value(&arg)?),
            "--hash-password" => {
                let mut password = String::new();
                std::io::stdin()
                    .read_line(&mut password)
                    .map_err(|e| format!("cannot read the password: {e}"))?;
                let password = password.trim_end_matches(['\n', '\r']);
                if password.is_empty() {
                    return Err("--hash-password: empty password on standard input".to_string());
                }
                println!("{}", datafusion_dp::server::hash_password(password)?);
                return Ok(());
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument '{other}'\n{USAGE}")),
        }
    }
    let path = config.ok_or(format!("--config is required\n{USAGE}"))?;
    let config = OwnerConfig::load(std::path::Path::new(&path)).map_err(|e| one_line_error(&e))?;
    if config.analysts.iter().all(|a| a.credential.is_none()) {
        return Err(format!(
            "config {path}: no analyst can log in: give each [[analyst]] a password_hash (dp-server --hash-password)"
        ));
    }
    let listen = listen
        .or_else(|| config.server.listen.clone())
        .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
    let execution = execution(scheduler.or_else(|| config.server.scheduler.clone()))?;
    let owner = execution
        .open(config)
        .await
        .map_err(|e| one_line_error(&e))?;
    // A ledger that cannot be read or does not verify, or a scheduler that cannot be reached or
    // is not a trusted one, stops the server now, not at a query.
    for analyst in &owner.config().analysts {
        let ctx = execution
            .analyst_session(&owner, analyst)
            .await
            .map_err(|e| format!("analyst '{}': {}", analyst.name, one_line_error(&e)))?;
        ctx.sql("SELECT * FROM dp_budget()")
            .await
            .map_err(|e| format!("analyst '{}': {}", analyst.name, one_line_error(&e)))?;
    }
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let tls = owner.config().server.tls_cert.is_some();
    let on = match &execution {
        Execution::Local => String::new(),
        #[cfg(feature = "ballista")]
        Execution::Cluster(url) => format!(" (queries run on the cluster at {url})"),
    };
    println!(
        "dp-server listening on {address}{}{on}",
        if tls { " (TLS)" } else { "" }
    );
    let _ = std::io::stdout().flush();
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
        eprintln!("dp-server: shutting down");
    };
    datafusion_dp::server::serve(owner, execution, listener, shutdown).await
}

/// Where queries run: on the cluster of `scheduler` (`--scheduler`, or `[server] scheduler`),
/// or in this process.
#[cfg(feature = "ballista")]
fn execution(scheduler: Option<String>) -> Result<Execution, String> {
    Ok(scheduler.map_or(Execution::Local, Execution::Cluster))
}

#[cfg(not(feature = "ballista"))]
fn execution(scheduler: Option<String>) -> Result<Execution, String> {
    match scheduler {
        None => Ok(Execution::Local),
        Some(_) => Err("--scheduler (or [server] scheduler) needs dp-server built with the 'ballista' feature (cargo build --features server,ballista)".to_string()),
    }
}

fn main() -> ExitCode {
    // The Flight calls' runtime; analysts' queries run on runtimes of their own
    // (`server::executors`), both with stacks sized for the limits on a plan.
    let runtime = match datafusion_dp::sql::privacy::session::limits::execution_runtime().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the server's threads: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
