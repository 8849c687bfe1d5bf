//! `dp-scheduler`: Apache Ballista's scheduler with the differentially private functions,
//! `dp.*` options, planner rule and plan codecs installed. It takes Ballista's own
//! command-line flags (`dp-scheduler --help`), e.g. `dp-scheduler --bind-port 50050`.
//!
//! With `--owner-config owner.toml [--analyst NAME]` the cluster is locked by its data owner
//! (`datafusion_dp::distributed::locked`): the scheduler binds and charges every DP call with
//! the owner's tables, protection and options and that analyst's budget and ledger, whatever a
//! client sends. Analysts connect to `--client-port`; executors to `--bind-port`, which the
//! owner keeps off the analysts' network. The client port logs in that analyst only, with the
//! analyst's `password` or `password_hash` from the owner's configuration (as `dp-server`
//! does), and refuses every call without the analyst's credentials.

use ballista_core::error::BallistaError;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::{Config, SchedulerConfig};
use ballista_scheduler::scheduler_process::start_server;
use clap::Parser;
use datafusion_dp::distributed::{locked, LockedCluster};
use datafusion_dp::owner::OwnerConfig;
use std::path::PathBuf;
use std::sync::Arc;
use tracing_subscriber::EnvFilter;

#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Args {
    #[command(flatten)]
    ballista: Config,
    /// Lock the cluster with the data owner's configuration (tables, protection, options,
    /// analysts): the scheduler binds and charges every DP call itself.
    #[arg(long)]
    owner_config: Option<PathBuf>,
    /// With --owner-config: the analyst whose budget and ledger every query spends (default:
    /// the only one), and the only one who may log in on the client port.
    #[arg(long, requires = "owner_config")]
    analyst: Option<String>,
    /// With --owner-config: the port analysts' clients connect to (executors use --bind-port).
    #[arg(long, default_value_t = 50051, requires = "owner_config")]
    client_port: u16,
}

fn main() -> ballista_core::error::Result<()> {
    // Ballista's own scheduler binary uses a 32 MB stack for deep plans; ours is sized for
    // the limits on a plan (`limits::EXECUTION_STACK_BYTES`), as every query runtime's.
    datafusion_dp::sql::privacy::session::limits::execution_runtime()
        .build()?
        .block_on(run())
}

async fn run() -> ballista_core::error::Result<()> {
    let args = Args::parse();
    let opt = args.ballista;
    let filter = std::env::var(EnvFilter::DEFAULT_ENV).unwrap_or(opt.log_level_setting.clone());
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_env_filter(EnvFilter::new(filter))
        .init();
    let host = opt.bind_host.clone();
    let addr = format!("{host}:{}", opt.bind_port)
        .parse()
        .map_err(|e: std::net::AddrParseError| BallistaError::Configuration(e.to_string()))?;
    let config: SchedulerConfig = opt.try_into()?;
    let Some(path) = args.owner_config else {
        let config = datafusion_dp::distributed::scheduler_config(config);
        let cluster = BallistaCluster::new_from_config(&config).await?;
        return start_server(cluster, addr, Arc::new(config)).await;
    };
    let to_ballista =
        |e: datafusion::error::DataFusionError| BallistaError::DataFusionError(Box::new(e));
    let owner = OwnerConfig::load(&path).map_err(to_ballista)?;
    let cluster = LockedCluster::open(owner, args.analyst.as_deref())
        .await
        .map_err(|e| BallistaError::Configuration(format!("{}: {e}", path.display())))?;
    let internal = tokio::net::TcpListener::bind(addr).await?;
    let clients = tokio::net::TcpListener::bind((host.as_str(), args.client_port)).await?;
    eprintln!(
        "locked cluster: analysts connect to {}, executors to {}",
        clients.local_addr()?,
        internal.local_addr()?
    );
    locked::serve(
        &cluster,
        cluster.scheduler_config(config),
        clients,
        internal,
    )
    .await
    .map_err(to_ballista)
}
