//! Runs every `sql-tests/*.slt` file through the sqllogictest runner with the DP functions
//! installed. `SLT_UPDATE=1 cargo test --test sqllogictests` rewrites the expected outputs
//! (review the diff: it must only change where behaviour was meant to change);
//! `SLT_FILTER=name` runs (or rewrites) only the files whose name contains `name`.

use datafusion_dp::slt::DpSltDb;
use sqllogictest::{default_column_validator, default_normalizer, default_validator, Runner};
use std::path::PathBuf;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_tests() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sql-tests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("sql-tests/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .filter(|p| {
            std::env::var("SLT_FILTER").map_or(true, |f| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains(&f))
            })
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    let update = std::env::var_os("SLT_UPDATE").is_some();
    let mut failures = Vec::new();
    for file in &files {
        let mut runner = Runner::new(|| async { DpSltDb::new() });
        let result = if update {
            runner
                .update_test_file(
                    file,
                    " ",
                    default_validator,
                    default_normalizer,
                    default_column_validator,
                )
                .await
                .map_err(|e| e.to_string())
        } else {
            runner
                .run_file_async(file)
                .await
                .map_err(|e| e.display(true).to_string())
        };
        match result {
            Ok(()) => println!("ok   {}", file.display()),
            Err(e) => failures.push(format!("FAIL {}\n{e}", file.display())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
