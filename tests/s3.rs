//! Data-lake path end to end: a real S3-compatible server on loopback (moto, from PyPI;
//! `.ci/install-tools` installs it), hive-partitioned Parquet written to `s3://` through DataFusion, and a
//! seeded DP query over it that must equal the same query over the local file.
//! Without `moto_server` on PATH the test says so and does nothing else, or fails under
//! `CI=true` naming the command that installs it.

use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::prelude::{CsvReadOptions, SessionConfig, SessionContext};
use datafusion_dp::cli::session;
use datafusion_dp::owner::{analyst_sql, Owner, OwnerConfig};
mod common;
use common::{create_bucket, start_moto};

async fn seeded_counts(ctx: &SessionContext) -> String {
    ctx.sql("SET dp.seed = 5").await.unwrap();
    ctx.sql("SET dp.public_groups = 'assert'").await.unwrap();
    ctx.sql(
        "SELECT CAST(region AS VARCHAR) AS region, dp_count(patient_id, 1.0) AS n,
                dp_rr_ci(outcome, exposed, 1.0)['estimate'] AS rr
         FROM visits GROUP BY region ORDER BY region",
    )
    .await
    .unwrap()
    .collect()
    .await
    .map(|b| {
        arrow::util::pretty::pretty_format_batches(&b)
            .unwrap()
            .to_string()
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dp_query_over_partitioned_parquet_on_s3() {
    // None: moto_server is missing (a SKIPPED line, or a failure under CI=true).
    let Some((_server, port)) = start_moto() else {
        return;
    };
    create_bucket(port, "dp-test");
    for (key, value) in [
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ALLOW_HTTP", "true"),
    ] {
        std::env::set_var(key, value);
    }
    std::env::set_var("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"));

    let csv = concat!(env!("CARGO_MANIFEST_DIR"), "/data/visits.csv");
    let local = session(SessionConfig::new()).unwrap();
    local
        .register_csv("visits", csv, CsvReadOptions::new())
        .await
        .unwrap();
    // Write the data to S3, partitioned by region (hive layout: region=north/...): the data
    // owner's copy, so visits is declared public in this session.
    local.sql("SET dp.public_tables = 'visits'").await.unwrap();
    local
        .table("visits")
        .await
        .unwrap()
        .write_parquet(
            "s3://dp-test/visits/",
            DataFrameWriteOptions::new().with_partition_by(vec!["region".to_string()]),
            None,
        )
        .await
        .unwrap();

    let lake = session(SessionConfig::new()).unwrap();
    lake.sql("CREATE EXTERNAL TABLE visits STORED AS PARQUET LOCATION 's3://dp-test/visits/'")
        .await
        .unwrap();
    // The owner checks the copy: every row arrived (the table is declared public for that).
    lake.sql("SET dp.public_tables = 'visits'").await.unwrap();
    let listed = lake
        .sql("SELECT count(*) FROM visits")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let listed = arrow::util::pretty::pretty_format_batches(&listed)
        .unwrap()
        .to_string();
    assert!(listed.contains("4000"), "{listed}");
    assert_eq!(seeded_counts(&lake).await, seeded_counts(&local).await);

    // The owner's configuration serves the same layout: Parquet's own schema (every file has
    // the same), the hive partition column declared with its type.
    let dir = common::scratch("s3-owner");
    let owner = |partitions: &str| {
        let text = format!(
            "[[table]]\nname = \"visits\"\nlocation = \"s3://dp-test/visits/\"\n\
             format = \"parquet\"\nunit = \"patient_id\"\n{partitions}\n\
             [[analyst]]\nname = \"a\"\nepsilon_budget = 1\nledger = \"a.ledger\"\n"
        );
        OwnerConfig::parse(&text, &dir, "s3.toml").unwrap()
    };
    let served = Owner::open(owner("partition_columns = [\"region VARCHAR\"]\n"))
        .await
        .unwrap();
    let ctx = served
        .analyst_session(served.config().analyst("a").unwrap())
        .unwrap();
    let described = analyst_sql(&ctx, "DESCRIBE visits")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let described = arrow::util::pretty::pretty_format_batches(&described)
        .unwrap()
        .to_string();
    assert!(
        described.contains("region") && !described.contains("Dictionary"),
        "{described}"
    );
    analyst_sql(
        &ctx,
        "SELECT dp_count(patient_id, 0.5) FROM visits WHERE region = 'north'",
    )
    .await
    .unwrap()
    .collect()
    .await
    .unwrap();
    let refused = Owner::open(owner(""))
        .await
        .expect_err("undeclared partitions");
    let line = datafusion_dp::cli::one_line_error(&refused);
    assert!(
        line.contains("partition_columns = [\"region TYPE\"]"),
        "{line}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    // A missing object is one clear error, not a panic.
    let err = lake
        .sql("CREATE EXTERNAL TABLE missing STORED AS PARQUET LOCATION 's3://dp-test/nothing/'")
        .await
        .expect_err("no files");
    let line = datafusion_dp::cli::one_line_error(&err);
    assert!(!line.contains('\n') && line.contains("nothing"), "{line}");
}
