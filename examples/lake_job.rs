//! A data-lake style job: read a hive-partitioned Parquet dataset, compute private relative
//! risks with 95% intervals per region and month, and write the results back to Parquet with
//! the privacy parameters recorded in the file's key-value metadata.
//!
//!     cargo run --example lake_job [input-dir] [output-dir]
//!
//! Without arguments it first lays out data/visits.csv as `region=.../month=.../*.parquet`
//! in a temporary directory. Locations may be `s3://...` (credentials from the environment).

use datafusion::config::TableParquetOptions;
use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::prelude::{CsvReadOptions, SessionConfig};
use datafusion_dp::cli::{format_result, run_statements, session, OutputFormat};
use datafusion_dp::outln;

const EPSILON: f64 = 1.0;

#[tokio::main]
async fn main() -> datafusion::error::Result<()> {
    let mut args = std::env::args().skip(1);
    let tmp = std::env::temp_dir().join(format!("dp-lake-job-{}", std::process::id()));
    let input = match args.next() {
        Some(dir) => dir,
        None => {
            let dir = tmp.join("visits");
            let ctx = session(SessionConfig::new())?;
            let csv = concat!(env!("CARGO_MANIFEST_DIR"), "/data/visits.csv");
            ctx.register_csv("visits", csv, CsvReadOptions::new())
                .await?;
            // The data owner lays the raw data out in the lake: a copy, declared public here.
            ctx.sql("SET dp.public_tables = 'visits'").await?;
            ctx.table("visits")
                .await?
                .write_parquet(
                    &format!("{}/", dir.display()),
                    DataFrameWriteOptions::new()
                        .with_partition_by(vec!["region".into(), "month".into()]),
                    None,
                )
                .await?;
            eprintln!(
                "wrote a partitioned copy of data/visits.csv to {}",
                dir.display()
            );
            format!("{}/", dir.display())
        }
    };
    let output = args
        .next()
        .unwrap_or_else(|| format!("{}/", tmp.join("relative_risks").display()));

    let ctx = session(SessionConfig::new())?;
    // Regions and months are public: every key is known in advance.
    ctx.sql("SET dp.public_groups = 'assert'").await?;
    ctx.sql(&format!(
        "CREATE EXTERNAL TABLE visits STORED AS PARQUET LOCATION '{input}'"
    ))
    .await?;
    let query = format!(
        "SELECT CAST(region AS VARCHAR) AS region, CAST(month AS VARCHAR) AS month,
                ci['estimate'] AS relative_risk, ci['lower'] AS lower_95, ci['upper'] AS upper_95,
                ci['exposed_cases'] AS exposed_cases, ci['exposed_total'] AS exposed_total,
                ci['unexposed_cases'] AS unexposed_cases, ci['unexposed_total'] AS unexposed_total
         FROM (SELECT region, month, dp_rr_ci(outcome, exposed, {EPSILON}) AS ci
               FROM visits GROUP BY region, month)
         ORDER BY region, month"
    );
    let results = ctx.sql(&query).await?;

    // What a reader of the file needs to interpret it.
    let mut parquet = TableParquetOptions::default();
    for (key, value) in [
        ("dp.function", "dp_rr_ci".to_string()),
        ("dp.epsilon_per_group", EPSILON.to_string()),
        ("dp.delta", "0".to_string()),
        (
            "dp.mechanism",
            "laplace (discrete, exact sampler)".to_string(),
        ),
        (
            "dp.group_sizes",
            "private (all four cells noised)".to_string(),
        ),
        ("dp.ci_method", "conservative".to_string()),
        ("dp.confidence", "0.95".to_string()),
        (
            "dp.neighbouring",
            "replace one row; each row one individual".to_string(),
        ),
        ("dp.seeded", "false".to_string()),
        (
            "dp.group_keys",
            "region, month: released exactly, assumed public".to_string(),
        ),
        (
            "dp.library",
            format!("datafusion-dp {}", env!("CARGO_PKG_VERSION")),
        ),
    ] {
        parquet
            .key_value_metadata
            .insert(key.to_string(), Some(value));
    }
    results
        .write_parquet(&output, DataFrameWriteOptions::new(), Some(parquet))
        .await?;
    eprintln!("wrote private results to {output}");

    // Read the results back, as a downstream job would: they are DP releases, public.
    let check = session(SessionConfig::new())?;
    let shown = run_statements(
        &check,
        &format!(
            "CREATE EXTERNAL TABLE rr STORED AS PARQUET LOCATION '{output}';
             SET dp.public_tables = 'rr';
             SELECT region, month, round(relative_risk, 2) AS rr, round(lower_95, 2) AS lower_95,
                    round(upper_95, 2) AS upper_95 FROM rr ORDER BY region, month LIMIT 8;"
        ),
    )
    .await?;
    outln!("{}", format_result(&shown[2], OutputFormat::Table)?);
    Ok(())
}
