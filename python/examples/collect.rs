//! The baseline of `bench/to_pandas_1m.py`: DataFusion's own `collect` of a query in a
//! session with the DP functions (no Python), timed; prints one line of seconds per run.
//!
//! cargo run -p datafusion-dp-python --example collect -- TABLE.parquet RUNS QUERY

use datafusion::error::Result;
use datafusion::prelude::SessionConfig;
use datafusion_dp::owner::{tables, TableConfig};
use datafusion_dp::Protection;
use std::time::Instant;

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, runs, query] = args.as_slice() else {
        eprintln!("usage: collect TABLE.parquet RUNS QUERY");
        std::process::exit(2);
    };
    let runs: usize = runs.parse().expect("RUNS is a number");
    // The session the Python package makes (python/src/lib.rs: `Session::new`).
    let ctx = tables::session(SessionConfig::new().with_information_schema(true))?;
    // Opened as `register_parquet` in the package opens it (the file's own schema).
    let table = TableConfig {
        name: "t".to_string(),
        location: path.clone(),
        format: Some("parquet".to_string()),
        protection: Protection::Rows,
        columns: None,
        partition_columns: Vec::new(),
        in_memory: false,
    };
    let provider = tables::open_table(&ctx, &table, tables::Reading::Files).await?;
    ctx.register_table("t", provider)?;
    datafusion_dp::protect(&ctx, "t", Protection::Rows)?;
    ctx.sql("SET dp.public_groups = 'assert'").await?;
    for _ in 0..runs {
        let start = Instant::now();
        let batches = ctx.sql(query).await?.collect().await?;
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        println!("{:.4} {rows}", start.elapsed().as_secs_f64());
    }
    Ok(())
}
