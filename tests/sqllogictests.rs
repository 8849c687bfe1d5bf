//! Runs every `sql-tests/*.slt` file through the sqllogictest driver with the DP functions
//! installed (`datafusion_dp::slt`, DataFusion's runner's conventions), the downstream
//! example's suite (`examples/slt/`), and the test files of DataFusion's own runner vendored
//! in `sql-tests/upstream/` with every table public.
//!
//! `SLT_UPDATE=1 cargo test --test sqllogictests` rewrites the expected outputs of this crate's
//! and the example's files (review the diff: it must only change where behaviour was meant to change; the
//! upstream files are never rewritten); `SLT_FILTER=name` runs (or rewrites) only the files
//! whose path contains `name`.

mod common;

use datafusion_dp::slt::{run_file, run_records, update_file, DpColumnType, DpSltOptions};
use sha2::{Digest, Sha256};
use sqllogictest::Record;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `.slt` files under `dir` (with `recursive`, in its subdirectories too), sorted, those
/// `SLT_FILTER` names.
fn slt_files(dir: &Path, recursive: bool) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable directory") {
            let path = entry.expect("readable entry").path();
            if path.is_dir() {
                if recursive {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "slt") {
                files.push(path);
            }
        }
    }
    files
        .retain(|p| std::env::var("SLT_FILTER").map_or(true, |f| p.to_string_lossy().contains(&f)));
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_tests() {
    run_own(&root().join("sql-tests")).await;
}

/// The downstream example's suite (`examples/slt/`, `cargo run --example slt_suite`): DataFusion's
/// conventions with DP queries, options from the files' directives only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downstream_example_suite() {
    run_own(&root().join("examples").join("slt")).await;
}

/// Runs (or with `SLT_UPDATE`, rewrites) the `.slt` files directly in `dir`.
async fn run_own(dir: &Path) {
    let files = slt_files(dir, false);
    if files.is_empty() && std::env::var_os("SLT_FILTER").is_some() {
        return;
    }
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    let update = std::env::var_os("SLT_UPDATE").is_some();
    let mut failures = Vec::new();
    for file in &files {
        let options = DpSltOptions::new();
        if update {
            if let Err(e) = update_file(file, &options).await {
                failures.push(format!("FAIL {}\n{e}", file.display()));
            }
            continue;
        }
        let report = run_file(file, &options).await.unwrap();
        println!("ok   {} ({} records)", file.display(), report.ran);
        if !report.failures.is_empty() {
            failures.push(format!(
                "FAIL {}: {} of {} records\n{}",
                file.display(),
                report.failures.len(),
                report.ran,
                report.failures.join("\n\n")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Records of the upstream files that need data files `datafusion-sqllogictest` does not
/// ship (DataFusion's checkout has them in `datafusion/core/tests/data` and the `testing`
/// submodule): the `CREATE EXTERNAL TABLE` that reads one, and every later record that names
/// its table. Per file: (file, table, records skipped).
const NEEDS_DATA_FILES: &[(&str, &str, usize)] = &[
    ("decimal.slt", "decimal_simple", 47),
    ("decimal.slt", "decimal256_simple", 14),
    ("expr.slt", "aggregate_test_100_by_sql", 2),
    ("math.slt", "aggregate_simple", 5),
];

/// The upstream files, unchanged (`sql-tests/upstream/SHA256SUMS`, the digests of the files
/// the crate ships), pass with every table public, but for the records that need data files
/// the crate does not ship ([`NEEDS_DATA_FILES`], counted so that a skip cannot grow unseen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_files_pass_unchanged() {
    let dir = root().join("sql-tests").join("upstream");
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).expect("SHA256SUMS");
    let sums: BTreeMap<&str, &str> = sums
        .lines()
        .filter_map(|l| l.split_once("  "))
        .map(|(sum, name)| (name, sum))
        .collect();
    let files = slt_files(&dir, true);
    if files.is_empty() && std::env::var_os("SLT_FILTER").is_some() {
        return;
    }
    if std::env::var_os("SLT_FILTER").is_none() {
        assert_eq!(files.len(), sums.len(), "{files:?}");
    }
    let mut failures = Vec::new();
    let (mut ran, mut skipped_all) = (0, 0);
    for file in &files {
        let name = file
            .strip_prefix(&dir)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read(file).unwrap();
        let digest: String = Sha256::digest(&text)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            sums.get(name.as_str()).copied(),
            Some(digest.as_str()),
            "{name} differs from the file datafusion-sqllogictest 55.2.0 ships"
        );
        let records = sqllogictest::parse_file::<DpColumnType>(file).unwrap();
        let (records, skipped) = without_missing_data(records, &dir);
        for (table, lines) in &skipped {
            println!(
                "skip {name}: {} records need table {table} (a data file the crate does not ship), lines {lines:?}",
                lines.len()
            );
        }
        let expected: Vec<(String, usize)> = NEEDS_DATA_FILES
            .iter()
            .filter(|(f, _, _)| *f == name)
            .map(|(_, t, n)| (t.to_string(), *n))
            .collect();
        let found: Vec<(String, usize)> = skipped
            .iter()
            .map(|(t, lines)| (t.clone(), lines.len()))
            .collect();
        if found != expected {
            failures.push(format!(
                "{name}: records skipped for missing data files {found:?}, expected {expected:?}"
            ));
        }
        skipped_all += found.iter().map(|(_, n)| n).sum::<usize>();
        let report = run_records(records, &DpSltOptions::new().with_public_tables())
            .await
            .unwrap();
        println!("ok   {name} ({} records)", report.ran);
        ran += report.ran;
        if !report.failures.is_empty() {
            failures.push(format!(
                "FAIL {name}: {} of {} records\n{}",
                report.failures.len(),
                report.ran,
                report.failures.join("\n\n")
            ));
        }
    }
    println!(
        "{} upstream files: {ran} records run, {skipped_all} skipped",
        files.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Per table made from a missing data file, the lines of the records skipped.
type Skipped = Vec<(String, Vec<u32>)>;

/// `records` without those that need a data file missing under `dir` (a `CREATE EXTERNAL
/// TABLE ... LOCATION 'path'`, the path as upstream's runner resolves it from its crate's
/// directory) or name a table made from one; and, per such table, the lines skipped.
fn without_missing_data(
    records: Vec<Record<DpColumnType>>,
    dir: &Path,
) -> (Vec<Record<DpColumnType>>, Skipped) {
    let mut missing: Skipped = Vec::new();
    let mut kept = Vec::new();
    for record in records {
        let (sql, line) = match &record {
            Record::Statement { sql, loc, .. } | Record::Query { sql, loc, .. } => {
                (sql.clone(), loc.line())
            }
            _ => {
                kept.push(record);
                continue;
            }
        };
        if let Some(table) = external_table_without_file(&sql, dir) {
            missing.push((table, vec![line]));
            continue;
        }
        if let Some((_, lines)) = missing.iter_mut().find(|(t, _)| names(&sql, t)) {
            lines.push(line);
            continue;
        }
        kept.push(record);
    }
    (kept, missing)
}

/// The table `sql` creates if it is `CREATE EXTERNAL TABLE name ... LOCATION 'path'` with no
/// file at `path` (relative to `dir`).
fn external_table_without_file(sql: &str, dir: &Path) -> Option<String> {
    let words: Vec<&str> = sql.split_whitespace().collect();
    let lower: Vec<String> = words.iter().map(|w| w.to_lowercase()).collect();
    let at = lower.iter().position(|w| w == "external")?;
    if lower.get(at + 1).map(String::as_str) != Some("table") {
        return None;
    }
    let mut name = words.get(at + 2)?.to_string();
    if name.eq_ignore_ascii_case("if") {
        name = words.get(at + 5)?.to_string();
    }
    let name = name.split('(').next()?.to_lowercase();
    let location = lower.iter().position(|w| w == "location")?;
    let path = words
        .get(location + 1)?
        .trim_end_matches(';')
        .trim_matches('\'');
    (!dir.join(path).exists()).then_some(name)
}

/// Whether `sql` names `table` (as a whole word, in any case).
fn names(sql: &str, table: &str) -> bool {
    sql.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| w == table)
}

/// `dpsql --slt` runs files with the driver's options (`--public-tables`, `--seed`), reports
/// each failure and exits with status 1 on any.
#[test]
fn dpsql_runs_suites_with_the_driver_s_options() {
    let dir = common::scratch("slt-cli");
    let file = dir.join("plain.slt");
    std::fs::write(
        &file,
        "statement ok\nCREATE TABLE t (x DOUBLE) AS VALUES (1.0), (2.5)\n\n\
         query R rowsort\nSELECT x FROM t\n----\n1\n2.5\n",
    )
    .unwrap();
    let dpsql = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_dpsql"))
            .args(args)
            .output()
            .unwrap()
    };
    let file = file.to_str().unwrap();
    let refused = dpsql(&["--slt", file]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("DataFusion error: "), "{stderr}");
    assert!(stderr.contains("FAIL"), "{stderr}");
    for args in [
        &["--slt", "--public-tables", file][..],
        &["--public-tables", "--seed", "7", "--slt", file][..],
    ] {
        let passed = dpsql(args);
        let stderr = String::from_utf8_lossy(&passed.stderr);
        assert!(passed.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains("ok   ") && stderr.contains("2 records"),
            "{stderr}"
        );
    }
    let misuse = dpsql(&["--public-tables", "-c", "SELECT 1"]);
    assert!(!misuse.status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}
