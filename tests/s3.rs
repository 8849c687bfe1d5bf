//! Data-lake path end to end: a real S3-compatible server on loopback (moto, from PyPI;
//! `.ci/run` installs it), hive-partitioned Parquet written to `s3://` through DataFusion, and a
//! seeded DP query over it that must equal the same query over the local file.
//! Without `moto_server` on PATH the test says so and does nothing else.

use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::prelude::{CsvReadOptions, SessionConfig, SessionContext};
use datafusion_dp::cli::session;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn http(port: u16, request: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

fn start_moto() -> Option<(Server, u16)> {
    let port = TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
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
    let Some((_server, port)) = start_moto() else {
        println!("SKIPPED: moto_server is not installed (pip install 'moto[server]')");
        return;
    };
    let created = http(
        port,
        &format!("PUT /dp-test HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    )
    .unwrap();
    assert!(created.starts_with("HTTP/1.1 200"), "{created}");
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
    // Write the data to S3, partitioned by region (hive layout: region=north/...).
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

    // A missing object is one clear error, not a panic.
    let err = lake
        .sql("CREATE EXTERNAL TABLE missing STORED AS PARQUET LOCATION 's3://dp-test/nothing/'")
        .await
        .expect_err("no files");
    let line = datafusion_dp::cli::one_line_error(&err);
    assert!(!line.contains('\n') && line.contains("nothing"), "{line}");
}
