//! Audits the engine's privacy claims empirically, through SQL: every case of the catalogue
//! (`cases.rs`, the same one `tests/audit.rs` runs in `cargo test` at smaller sizes) at full
//! size.
//!
//! cargo run --release --example audit              # every case
//! cargo run --release --example audit -- smooth     # the cases whose name contains "smooth"
//! cargo run --release --example audit -- --ci count # CI sizes
//!
//! For each case it prints the lower confidence bound `epsilon_lower` (false-alarm rate
//! 1e-3) next to the epsilon the engine charges, the event that gave it, and the time taken.
//! See docs/auditing.md for the method and for how to audit a query of your own.

use datafusion_dp::outln;
mod cases;

use cases::{cases, Expect};

#[tokio::main]
async fn main() -> datafusion::error::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ci = args.iter().any(|a| a == "--ci");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let mut failures = 0;
    // "case: name" while a case runs (only when stderr is a terminal).
    let mut progress = datafusion_dp::cli::terminal::Progress::new("audit");
    outln!("| case | releases per dataset | charged (eps, delta) | epsilon_lower | lower / charged | lower / visible | expected | seconds |");
    outln!("|---|---|---|---|---|---|---|---|");
    for case in cases() {
        if !filters.is_empty() && !filters.iter().any(|f| case.name.contains(f.as_str())) {
            continue;
        }
        let n = if ci { case.ci } else { case.full };
        let start = std::time::Instant::now();
        progress.update(&format!("{} at {n} releases per dataset", case.name));
        let outcome = (case.build)(n).run().await?;
        let lower = outcome.report.epsilon_lower;
        let ok = match case.expect {
            Expect::WithinClaim => lower <= case.epsilon,
            Expect::Exceeds => lower > case.epsilon,
        };
        if !ok {
            failures += 1;
        }
        outln!(
            "| {} | {} | ({}, {}) | {:.3} | {:.2} | {:.2} | {} | {:.1} |",
            case.name,
            n,
            case.epsilon,
            case.delta,
            lower,
            lower / case.epsilon,
            lower / case.visible,
            match (case.expect, ok) {
                (Expect::WithinClaim, true) => "within claim: ok",
                (Expect::Exceeds, true) => "exceeds (planted): caught",
                (Expect::WithinClaim, false) => "EXCEEDS THE CLAIM",
                (Expect::Exceeds, false) => "PLANTED BUG MISSED",
            },
            start.elapsed().as_secs_f64()
        );
        progress.finish();
        datafusion_dp::cli::terminal::note(&format!(
            "  {}: {}",
            case.name,
            outcome.summary(case.epsilon)
        ));
    }
    if failures > 0 {
        datafusion_dp::cli::terminal::note(&format!(
            "{failures} audit(s) did not find what they expected"
        ));
        std::process::exit(1);
    }
    Ok(())
}
