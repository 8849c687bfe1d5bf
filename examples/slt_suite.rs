//! A downstream project's sqllogictest suite, written as DataFusion's own runner expects
//! (numbers normalised, `DataFusion error:` patterns, numbered `EXPLAIN` lines, strict column
//! types), with DP queries in it: `examples/slt/*.slt`, run through `datafusion_dp::slt`.
//!
//! ```sh
//! cargo run --example slt_suite                 # the suite in examples/slt/
//! cargo run --example slt_suite -- my_suite.slt # other files
//! ```
//!
//! The suite sets its own options with file directives (`# datafusion-dp: seed = 42`, ...);
//! `tests/sqllogictests.rs` runs the same files in CI. See docs/dpsql.md, "sqllogictest".

use datafusion_dp::slt::{run_file, DpSltOptions};
use std::path::PathBuf;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let mut files: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    if files.is_empty() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/slt");
        files = std::fs::read_dir(&dir)
            .expect("examples/slt")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "slt"))
            .collect();
        files.sort();
    }
    let mut failed = false;
    for file in &files {
        // No driver options: the files carry their directives.
        match run_file(file, &DpSltOptions::new()).await {
            Ok(report) if report.failures.is_empty() => {
                println!("ok   {}: {} records", file.display(), report.ran);
            }
            Ok(report) => {
                failed = true;
                for failure in &report.failures {
                    eprintln!("{failure}");
                }
                eprintln!(
                    "FAIL {}: {} of {} records",
                    file.display(),
                    report.failures.len(),
                    report.ran
                );
            }
            Err(e) => {
                failed = true;
                eprintln!("FAIL {}: {e}", file.display());
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
