//! `dp-scheduler`: Apache Ballista's scheduler with the differentially private functions,
//! `dp.*` options, planner rule and plan codecs installed. It takes Ballista's own
//! command-line flags (`dp-scheduler --help`), e.g. `dp-scheduler --bind-port 50050`.

use ballista_core::error::BallistaError;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::{Config, SchedulerConfig};
use ballista_scheduler::scheduler_process::start_server;
use clap::Parser;
use std::sync::Arc;
use tracing_subscriber::EnvFilter;

fn main() -> ballista_core::error::Result<()> {
    // Ballista's own scheduler binary uses a 32 MB stack for deep plans; so do we.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(32 * 1024 * 1024)
        .build()?
        .block_on(run())
}

async fn run() -> ballista_core::error::Result<()> {
    let opt = Config::parse();
    let filter = std::env::var(EnvFilter::DEFAULT_ENV).unwrap_or(opt.log_level_setting.clone());
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_env_filter(EnvFilter::new(filter))
        .init();
    let addr = format!("{}:{}", opt.bind_host, opt.bind_port)
        .parse()
        .map_err(|e: std::net::AddrParseError| BallistaError::Configuration(e.to_string()))?;
    let config: SchedulerConfig = opt.try_into()?;
    let config = datafusion_dp::distributed::scheduler_config(config);
    let cluster = BallistaCluster::new_from_config(&config).await?;
    start_server(cluster, addr, Arc::new(config)).await
}
