//! The errors a data engineer hits, through the `dpsql` binary as a user runs it: a missing
//! file or directory (local and `s3://`), bad credentials and a missing bucket (against moto on
//! loopback with authentication on), files that disagree on a column's type, and a column that
//! is not BOOLEAN. Each must exit with status 1, print nothing on stdout and exactly one line on
//! stderr (no backtrace, no nested dump, no Debug output) naming what failed.
//! The S3 cases need `moto_server` (`.ci/install-tools` installs it); without it they say so and stop, or fail under `CI=true`.

mod common;

use common::{create_bucket, create_s3_user, enforce_credentials, start_moto};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const VISITS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/visits.csv");

/// Runs `dpsql` with `args`, without the caller's AWS_* variables but with `env`, and with
/// RUST_BACKTRACE set so that a backtrace, if anything printed one, would show.
fn dpsql(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dpsql"));
    command.args(args).stdin(Stdio::null());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("AWS_") {
            command.env_remove(key);
        }
    }
    command
        .env("RUST_BACKTRACE", "1")
        .envs(env.iter().copied())
        .output()
        .expect("run dpsql")
}

/// Asserts `dpsql` succeeded and returns its stdout.
fn succeeded(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "dpsql failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Asserts `dpsql` failed with one clear error line containing every fact; returns the line.
fn one_error_line(output: &Output, facts: &[&str]) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // 1 is dpsql's error exit; a panic would be 101.
    assert_eq!(output.status.code(), Some(1), "status; stderr:\n{stderr}");
    assert!(stdout.is_empty(), "partial output on stdout:\n{stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "stderr is not one line:\n{stderr}");
    assert!(stderr.ends_with('\n'), "{stderr:?}");
    let line = lines[0];
    assert!(
        line.starts_with("error: ") && line.trim().len() > "error: ".len() + 10,
        "{line}"
    );
    for fact in facts {
        assert!(line.contains(fact), "{fact:?} missing from: {line}");
    }
    for noise in [
        "backtrace",
        "panicked",
        "caused by",
        "<?xml",
        "<Error>",
        "Some(",
        " { ",
        "Error during planning",
        "Invalid or Unsupported Configuration",
        "External error",
    ] {
        assert!(!line.contains(noise), "{noise:?} in: {line}");
    }
    line.to_string()
}

/// A fresh directory under the system's temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        Self(common::scratch(name))
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `select` (over table `visits` = data/visits.csv) to a Parquet file with dpsql.
fn write_parquet(select: &str, file: &str) {
    succeeded(&dpsql(
        &[
            "-q",
            "--table",
            &format!("visits={VISITS}"),
            "-c",
            // The test data's owner writes it out: visits is declared public for that.
            &format!(
                "SET dp.public_tables = 'visits'; COPY ({select}) TO '{file}' STORED AS PARQUET"
            ),
        ],
        &[],
    ));
    assert!(Path::new(file).is_file(), "{file}");
}

#[test]
fn missing_file_or_directory() {
    let dir = TempDir::new("missing");
    let query = "SELECT dp_count(visit_id, 1.0) FROM visits";

    let file = dir.path("visits.parquet");
    let output = dpsql(&["--table", &format!("visits={file}"), "-c", query], &[]);
    one_error_line(
        &output,
        &[&format!("table visits ({file}): "), "No files found at"],
    );

    let missing = dir.path("no_such_dir");
    let output = dpsql(&["--table", &format!("visits={missing}"), "-c", query], &[]);
    one_error_line(
        &output,
        &[&format!("no such file or directory: '{missing}'")],
    );

    let empty = dir.path("empty");
    std::fs::create_dir(&empty).unwrap();
    let output = dpsql(&["--table", &format!("visits={empty}"), "-c", query], &[]);
    one_error_line(&output, &[&format!("no files in directory '{empty}'")]);

    let sql = format!(
        "CREATE EXTERNAL TABLE visits STORED AS CSV LOCATION '{missing}/' \
         OPTIONS ('format.has_header' 'true'); {query}"
    );
    let output = dpsql(&["-c", &sql], &[]);
    one_error_line(
        &output,
        &[&format!("table visits ({missing}/): "), "No files found at"],
    );

    let script = dir.path("job.sql");
    let output = dpsql(&["-f", &script], &[]);
    one_error_line(&output, &[&format!("cannot read {script}: ")]);
}

#[test]
fn column_that_is_not_boolean() {
    let table = format!("visits={VISITS}");
    let output = dpsql(
        &[
            "--table",
            &table,
            "-c",
            "SELECT dp_rr_ci(outcome, region, 1.0) FROM visits",
        ],
        &[],
    );
    one_error_line(
        &output,
        &["dp_rr_ci: argument 'exposed' must be BOOLEAN, got Utf8"],
    );

    // Earlier statements of the same command print nothing either.
    let output = dpsql(
        &[
            "--table",
            &table,
            "-c",
            "SELECT 1; SELECT dp_relative_risk(visit_id, exposed, 1.0) FROM visits",
        ],
        &[],
    );
    one_error_line(
        &output,
        &["dp_relative_risk: argument 'outcome' must be BOOLEAN, got Int64"],
    );

    let sql = format!(
        "CREATE EXTERNAL TABLE visits STORED AS CSV LOCATION '{VISITS}' \
         OPTIONS ('format.has_header' 'true'); SET dp.public_groups = 'assert'; \
         SELECT region, dp_rr_ci(outcome, month, 1.0) FROM visits GROUP BY region"
    );
    one_error_line(
        &dpsql(&["-c", &sql], &[]),
        &["dp_rr_ci: argument 'exposed' must be BOOLEAN, got Utf8"],
    );
}

#[test]
fn parquet_files_that_disagree_on_a_column_type() {
    let dir = TempDir::new("parquet");
    let query = "SELECT dp_rr_ci(outcome, exposed, 1.0) FROM visits";
    let columns = "visit_id, patient_id, region, month, outcome";
    let first = format!("SELECT {columns}, exposed FROM visits WHERE visit_id <= 2000");
    for sub in ["same", "int", "string"] {
        std::fs::create_dir(dir.path(sub)).unwrap();
        write_parquet(&first, &dir.path(&format!("{sub}/part-0.parquet")));
    }
    let rest = |exposed: &str| {
        format!("SELECT {columns}, {exposed} AS exposed FROM visits WHERE visit_id > 2000")
    };
    write_parquet(&rest("exposed"), &dir.path("same/part-1.parquet"));
    write_parquet(
        &rest("CAST(exposed AS INT)"),
        &dir.path("int/part-1.parquet"),
    );
    write_parquet(
        &rest("CASE WHEN exposed THEN 'yes' ELSE 'no' END"),
        &dir.path("string/part-1.parquet"),
    );

    // Files that agree are one table.
    let same = dir.path("same");
    let shown = succeeded(&dpsql(
        &["--table", &format!("visits={same}"), "-c", query],
        &[],
    ));
    assert!(shown.contains("estimate"), "{shown}");

    let int = dir.path("int");
    let output = dpsql(&["--table", &format!("visits={int}"), "-c", query], &[]);
    one_error_line(
        &output,
        &[
            &format!("table visits ({int}): "),
            "'exposed'",
            "Int32",
            "Boolean",
        ],
    );

    let string = dir.path("string");
    let sql =
        format!("CREATE EXTERNAL TABLE visits STORED AS PARQUET LOCATION '{string}/'; {query}");
    one_error_line(
        &dpsql(&["-c", &sql], &[]),
        &[
            &format!("table visits ({string}/): "),
            "'exposed'",
            "Utf8",
            "Boolean",
        ],
    );
}

#[test]
fn csv_files_that_disagree_on_a_column_type() {
    // The schema is inferred from the first file; the second one fails when it is read.
    let dir = TempDir::new("csv");
    let text = std::fs::read_to_string(VISITS).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert_eq!(
        header, "visit_id,patient_id,region,month,exposed,outcome",
        "data/visits.csv changed"
    );
    let rows: Vec<&str> = lines.collect();
    let (first, second) = rows.split_at(rows.len() / 2);
    let as_number = |row: &&str| {
        let mut fields: Vec<&str> = row.split(',').collect();
        fields[4] = if fields[4] == "true" { "1" } else { "0" };
        fields.join(",")
    };
    std::fs::write(
        dir.path("a.csv"),
        format!("{header}\n{}\n", first.join("\n")),
    )
    .unwrap();
    let second: Vec<String> = second.iter().map(as_number).collect();
    std::fs::write(
        dir.path("b.csv"),
        format!("{header}\n{}\n", second.join("\n")),
    )
    .unwrap();

    let output = dpsql(
        &[
            "--table",
            &format!("visits={}", dir.0.display()),
            "-c",
            "SELECT dp_rr_ci(outcome, exposed, 1.0) FROM visits",
        ],
        &[],
    );
    // Reading a protected table: the parser's error names the value, so its text is withheld.
    let line = one_error_line(&output, &["dp_rr_ci", "The error is withheld"]);
    assert!(!line.contains("value '"), "{line}");
}

#[test]
fn s3_missing_objects_bucket_and_bad_credentials() {
    // None: moto_server is missing (a SKIPPED line, or a failure under CI=true).
    let Some((_server, port)) = start_moto() else {
        return;
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let run = |args: &[&str], key: &str, secret: &str| {
        let env = [
            ("AWS_ACCESS_KEY_ID", key),
            ("AWS_SECRET_ACCESS_KEY", secret),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("AWS_ALLOW_HTTP", "true"),
        ];
        dpsql(args, &env)
    };
    let query = "SELECT dp_count(visit_id, 1.0) FROM visits";

    create_bucket(port, "dp-errors");
    succeeded(&run(
        &[
            "-q",
            "--table",
            &format!("visits={VISITS}"),
            "-c",
            "SET dp.public_tables = 'visits'; COPY visits TO 's3://dp-errors/visits/part-0.parquet' STORED AS PARQUET",
        ],
        "test",
        "test",
    ));

    // A key that does not exist, as a file and as a directory.
    let output = run(
        &[
            "--table",
            "visits=s3://dp-errors/missing.parquet",
            "-c",
            query,
        ],
        "test",
        "test",
    );
    one_error_line(
        &output,
        &[
            "table visits (s3://dp-errors/missing.parquet): ",
            "No files found at s3://dp-errors/missing.parquet",
        ],
    );
    let sql = format!(
        "CREATE EXTERNAL TABLE visits STORED AS PARQUET LOCATION 's3://dp-errors/nothing/'; {query}"
    );
    one_error_line(
        &run(&["-c", &sql], "test", "test"),
        &[
            "table visits (s3://dp-errors/nothing/): ",
            "No files found at s3://dp-errors/nothing/",
        ],
    );

    // A bucket that does not exist: the server's code and message, not its XML.
    let sql = format!(
        "CREATE EXTERNAL TABLE visits STORED AS PARQUET LOCATION 's3://no-such-bucket/visits/'; {query}"
    );
    one_error_line(
        &run(&["-c", &sql], "test", "test"),
        &[
            "table visits (s3://no-such-bucket/visits/): ",
            "404 Not Found",
            "NoSuchBucket: The specified bucket does not exist",
        ],
    );

    // From here on the server checks credentials.
    let (key, secret) = create_s3_user(port, "analyst");
    enforce_credentials(port);
    let file = "visits=s3://dp-errors/visits/part-0.parquet";
    let shown = succeeded(&run(&["--table", file, "-c", query], &key, &secret));
    assert!(shown.contains("dp_count"), "{shown}");

    // The right key with a wrong secret: reading one file.
    one_error_line(
        &run(&["--table", file, "-c", query], &key, "not-the-secret"),
        &[
            "table visits (s3://dp-errors/visits/part-0.parquet): ",
            "403 Forbidden",
            "check the credentials",
        ],
    );
    // ... and listing a directory, where the server says why.
    let sql = format!(
        "CREATE EXTERNAL TABLE visits STORED AS PARQUET LOCATION 's3://dp-errors/visits/'; {query}"
    );
    one_error_line(
        &run(&["-c", &sql], &key, "not-the-secret"),
        &[
            "table visits (s3://dp-errors/visits/): ",
            "403 Forbidden",
            "SignatureDoesNotMatch",
        ],
    );
    // An access key the server does not know.
    one_error_line(
        &run(&["-c", &sql], "AKIANOTAKEY000000000", &secret),
        &[
            "table visits (s3://dp-errors/visits/): ",
            "403 Forbidden",
            "InvalidAccessKeyId",
        ],
    );
}
