//! `dp-executor`: Apache Ballista's executor with the differentially private functions,
//! `dp.*` options, plan codecs and `s3://` object stores (from the usual AWS environment
//! variables) installed. It takes Ballista's own command-line flags (`dp-executor --help`),
//! e.g. `dp-executor --scheduler-port 50050 --bind-port 50051 --bind-grpc-port 50052`.

use ballista_executor::config::Config;
use ballista_executor::executor_process::{start_executor_process, ExecutorProcessConfig};
use clap::Parser;
use std::sync::Arc;
use tracing_subscriber::EnvFilter;

fn main() -> ballista_core::error::Result<()> {
    // Tasks execute on worker threads with stacks sized for the limits on a plan.
    datafusion_dp::sql::privacy::session::limits::execution_runtime()
        .build()?
        .block_on(run())
}

async fn run() -> ballista_core::error::Result<()> {
    let opt = Config::parse();
    let config: ExecutorProcessConfig = opt.try_into()?;
    let config = datafusion_dp::distributed::executor_config(config)?;
    let filter =
        std::env::var(EnvFilter::DEFAULT_ENV).unwrap_or(config.special_mod_log_level.clone());
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_env_filter(EnvFilter::new(filter))
        .init();
    start_executor_process(Arc::new(config)).await
}
