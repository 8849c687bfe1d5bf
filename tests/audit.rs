//! The empirical privacy audits (issue 11), through SQL: each case of the catalogue in
//! `examples/audit/cases.rs` runs the real query on neighbouring datasets `D` and `D'` and
//! bounds from below the epsilon its releases reveal (`datafusion_dp::stats::audit`).
//!
//! Honest cases assert `epsilon_lower <= ` the charged epsilon, planted bugs assert `>`. Every
//! bound is at confidence 1 − 1e-3: an honest `(ε, δ)`-DP query fails its assertion with
//! probability at most 1e-3 (the estimator's false-alarm rate, docs/auditing.md). The grouped
//! cases use fixed seeds (`dp.seed`, per dataset), so they are deterministic; the ungrouped
//! count uses secure noise (one UNION ALL branch per release, which a seed would make
//! identical), so it fails spuriously with probability at most 1e-3. The planted bugs reveal
//! about twice the claim, tens of standard errors above it.
//!
//! Sizes are the CI sizes of the catalogue; `cargo run --release --example audit` runs the
//! full sizes. Cases run one at a time in one test (they each use both cores).

#[path = "../examples/audit/cases.rs"]
mod cases;

use cases::{cases, Expect};

async fn run(filter: impl Fn(&str) -> bool) {
    let mut failures = Vec::new();
    for case in cases().into_iter().filter(|c| filter(c.name)) {
        let outcome = (case.build)(case.ci).run().await.unwrap();
        let lower = outcome.report.epsilon_lower;
        println!(
            "{}: epsilon_lower {lower:.3}, charged epsilon {} (delta {}): {:.2} of the charge, {:.2} of the visible {}\n  {}\n  {}",
            case.name,
            case.epsilon,
            case.delta,
            lower / case.epsilon,
            lower / case.visible,
            case.visible,
            case.what,
            outcome.summary(case.epsilon)
        );
        let ok = match case.expect {
            Expect::WithinClaim => lower <= case.epsilon,
            Expect::Exceeds => lower > case.epsilon,
        };
        if !ok {
            failures.push(format!(
                "{}: epsilon_lower {lower} vs charged {} ({:?})",
                case.name, case.epsilon, case.expect
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_queries_stay_within_their_charge() {
    run(|name| !name.starts_with("planted") && !name.starts_with("method")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratio_methods_stay_within_their_charge() {
    run(|name| name.starts_with("method")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_bugs_are_caught() {
    run(|name| name.starts_with("planted")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_refuses_what_it_cannot_audit() {
    use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use datafusion_dp::sql::audit::{Repetition, SqlAudit};
    use std::sync::Arc;
    let ints = RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![1])) as ArrayRef)])
        .unwrap();
    let text =
        RecordBatch::try_from_iter([("x", Arc::new(StringArray::from(vec!["1"])) as ArrayRef)])
            .unwrap();
    let query = "SELECT dp_count(x, 1.0) AS c FROM t";
    let err = SqlAudit::new(query, "t", ints.clone(), text, 100)
        .run()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("same column names and types"),
        "{err}"
    );
    let err = SqlAudit::new(query, "t", ints.clone(), ints.clone(), 100)
        .repetition(Repetition::Executions)
        .seed(Some(1))
        .run()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("needs secure noise"), "{err}");
    // A grouped query must output the replicate key.
    let err = SqlAudit::new(
        "SELECT dp_count(x, 1.0) AS c FROM t GROUP BY replicate",
        "t",
        ints.clone(),
        ints,
        100,
    )
    .statement("SET dp.public_groups = 'assert'")
    .run()
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("must output the column 'replicate'"),
        "{err}"
    );
}
