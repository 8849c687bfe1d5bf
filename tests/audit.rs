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

/// Honest cases whose bound must also reach 0.9 of what the change can reveal (issue 29), each
/// in a test of its own below with the derivation of its visible ε and of the tolerance.
const TIGHT: [&str; 2] = ["avg_grouped_row_removed", "quantile_last_leaf"];

/// Honest cases with a test of their own below (which also checks the accountant).
const OWN_TEST: [&str; 1] = ["zcdp_sequence"];

/// Runs the catalogue's case `name` at its CI size: within its charge, and at least 0.9 of
/// its visible ε.
async fn tight(name: &str) {
    let case = cases()
        .into_iter()
        .find(|c| c.name == name)
        .expect("a case of the catalogue");
    let outcome = (case.build)(case.ci).run().await.unwrap();
    let lower = outcome.report.epsilon_lower;
    println!(
        "{name} at {} releases: epsilon_lower {lower:.3}, {:.2} of the visible {}\n  {}",
        case.ci,
        lower / case.visible,
        case.visible,
        outcome.summary(case.epsilon)
    );
    assert!(lower <= case.epsilon, "{lower}");
    assert!(
        lower >= 0.9 * case.visible,
        "{lower} below 0.9 of {}",
        case.visible
    );
}

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
    run(|name| {
        !name.starts_with("planted")
            && !name.starts_with("method")
            && !TIGHT.contains(&name)
            && !OWN_TEST.contains(&name)
    })
    .await;
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
    // A sequence of queries runs grouped (each query of it planned once).
    let err = SqlAudit::new(query, "t", ints.clone(), ints.clone(), 100)
        .repetition(Repetition::Executions)
        .then(query)
        .run()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("needs Repetition::Grouped"),
        "{err}"
    );
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

/// dp_quantile's tightness case (issue 29: the auditor's catalogue covers the new aggregates
/// with `epsilon_lower` at least 0.9 of what the change can reveal).
///
/// The query is `dp_quantile(x, 1.0, 0, 65536, 8.0)` grouped by the public replicate key:
/// each tree is noised at `ε/2 = 4` for sensitivity `HEIGHT = 4` (one row adds 1 to one node
/// per level; `dp_quantile.rs`), so every node count gets discrete Laplace noise of scale
/// `b = 4/4 = 1`, `q = e^(−1/b)`. The bounds give leaves of width 1 (`16^4 = 65,536`), and
/// `q = 1` reads the rank 0.995 (Google's clamp; `stats/quantile.rs`).
///
/// Neighbours: 50 rows at 65520 (leaf 0 of the last level-3 node) and one row at 65536 (the
/// last leaf) in D; the same with that row's x NULL in D' (not counted). The row changes four
/// node counts by 1, its leaf and the leaf's three ancestors, so the noisy counts reveal at
/// most `4/b = ε/2 = 4`; but the ancestors hold the 50 background rows too (51 against 50),
/// so the descent takes the same path in D and D' and they reach the release only through
/// the rank `1 − 0.005·Π K/c` passed down (a share `O(S/c²) ≈ 0.3%` per level, `S ≈ 6` the
/// siblings' positive noise, `c = 50`). What the change can reveal through the released
/// quantile is the last leaf's count: 1 + L (D) or L (D'), against leaf 0's 50 + L and 14
/// noise leaves. That leaf is chosen iff it is kept and reaches the rank, i.e. iff its noisy
/// count is at least a threshold `τ ≥ 1` set by the other counts alone (kept: at least
/// 0.0075 of the positive total; chosen: above `(1 − rank)` of the kept total, about 0.4).
/// For the discrete Laplace law `P(L ≥ k) = q^k/(1 + q)` (k ≥ 0; Canonne, Kamath & Steinke
/// 2020, arXiv:2004.00010), so for every `τ ≥ 1`
/// `P(1 + L ≥ τ)/P(L ≥ τ) = 1/q = e^(1/b)`: the event "the quantile lies in the last leaf"
/// reveals exactly `1/b = 1`, with `P_D = 1/(1 + q) = 0.731` and `P_D' = q/(1 + q) = 0.269`.
/// Visible: 1.0 (of the 8.0 charged).
///
/// Tolerance: the auditor's test halves hold `n/2 = 25,000` releases each; the one-sided
/// Clopper-Pearson bounds at `α/2 = 5·10⁻⁴` (z ≈ 3.29) lose about
/// `3.29·√((1−p)/(n p))` in `ln p`: 0.013 for `p = 0.731` and 0.034 for `q = 0.269`, so
/// `epsilon_lower ≈ 1 − 0.047 = 0.953`, with a Monte Carlo standard error of its estimate of
/// `√(0.269/(0.731·25,000) + 0.731/(0.269·25,000)) ≈ 0.011`. The bound 0.9 is 4.8 such
/// errors below; the seed is fixed, so the run is deterministic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dp_quantile_reveals_nearly_all_it_can() {
    tight("quantile_last_leaf").await;
}

/// dp_avg's tightness case: the catalogue's `avg_grouped_row_removed` (one row's value 4 in D,
/// NULL in D', `dp_avg(x, 0, 4, 1.0)` grouped) reveals at most `ε/2 = 0.5`: the sum moves by
/// 4 at Laplace scale `4/(ε/4) = 16` and the count by 1 at scale `1/(ε/4) = 4`, `0.25` each,
/// reached together by the event "both noisy values at or above D's exact ones", of
/// probability about `0.5 · 1/(1 + e^(−1/4)) ≈ 0.28` under D and `e^(−0.5)` times that under
/// D' (`P(L ≥ k) = q^k/(1 + q)` for the discrete Laplace law; Canonne, Kamath & Steinke
/// 2020). At 200,000 releases (the size the catalogue had) the Clopper-Pearson bounds at
/// `α/2 = 5·10⁻⁴` lose `3.29·(√(0.72/(10⁵·0.28)) + √(0.83/(10⁵·0.17))) ≈ 0.040`, so the bound
/// sits at 0.9 of the visible (0.895 measured). At 800,000 releases, the catalogue's CI size
/// now (test halves of 400,000), the loss halves to 0.020 and the standard error of the estimate is
/// `√(0.72/(4·10⁵·0.28) + 0.83/(4·10⁵·0.17)) ≈ 0.0044`: `epsilon_lower ≈ 0.48`, with the bound
/// 0.45 about 7 standard errors below; the seed is fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dp_avg_reveals_nearly_all_it_can() {
    tight("avg_grouped_row_removed").await;
}

/// The composition audit of `k = 4` separate queries under a zCDP budget (issue 45: "a
/// composition audit of k releases checks the zCDP accounting empirically"): the catalogue's
/// `zcdp_sequence` runs four grouped Gaussian `dp_count` queries at (2, 10⁻⁵) one after another
/// in one session whose budget is zCDP (`dp.budget_measure = 'zcdp'`, target (10, 10⁻²)), a row
/// moving from group a to group b, and audits the joint output of all four.
///
/// The accountant: each query is charged the ρ of its calibrated noise's privacy map, one
/// vector of shape (2, 1), `ρ = 2/(2σ²)` (Canonne, Kamath & Steinke 2020, Proposition 5), and
/// the four add (Bun & Steinke 2016, Lemma 2.3). `dp_budget()` after the queries must show
/// that sum, computed independently here from `CountNoise::calibrate_release` (the
/// accountant counts in units of 10⁻¹² per charge, so the two agree within 4·10⁻¹²), and
/// the guarantee `cdp_epsilon(Σρ, 10⁻²)` (Corollary 13) that the audit checks; the linear
/// (ε, δ) sum it keeps beside is (8, 3.9·10⁻⁵): each query's δ is its map's at ε = 2 for the
/// σ drawn, at most the 10⁻⁵ asked for.
///
/// The audit: the four queries' noise is independent (each under its own seed), so the joint
/// release is a Gaussian shift of `μ = √(2Σρ) ≈ 1.0` standard deviations along the sum of the
/// four `b − a` differences (`σ ≈ 2.8`), and the naive-Bayes score over the eight counts is
/// that test. Measured (debug, CI size 200,000, seed 15): epsilon_lower 2.060 for the claim
/// 2.764, on the event "score < −2.12" (5,524 of 100,000 test releases of D', 471 of D).
/// Monte Carlo standard error of the estimate `ln((p − δ)/q)`:
/// `√(p(1−p)/n)/(p − δ) ⊕ √((1−q)/(n q))` = `0.016 ⊕ 0.046 ≈ 0.049` (p = 0.0552,
/// q = 0.0047, δ = 0.01, n = 10⁵), so the claim is 14 standard errors above the bound, and an
/// honest `(ε, δ)`-DP release exceeds it with probability at most α = 10⁻³ anyway. The bound is
/// also asserted to reach 0.6 of the claim (1.66, 8 standard errors below 2.06): an audit that
/// stopped seeing the composed release (for example the four queries drawing the same noise)
/// would fall to the one query's `μ = 0.5`, about 0.80. (Both figures from the same model:
/// the best threshold event on a unit Gaussian shift `μ`, its probabilities bounded at
/// `z = 3.29` with `n = 10⁵`, gives 2.07 at `μ = 1.0` and 0.80 at `μ = 0.5`.)
///
/// The planted variant (`planted_zcdp_sequence_sigma_over_sqrt2`, in `planted_bugs_are_caught`)
/// draws `σ/√2` in each query while the claim stays the honest Σρ: measured 3.292 > 2.764, on
/// 7,480 vs 182 releases, standard error `0.013 ⊕ 0.074 ≈ 0.075`: 7 standard errors above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zcdp_sequence_is_charged_its_summed_rho_and_keeps_the_claim() {
    let case = cases()
        .into_iter()
        .find(|c| c.name == "zcdp_sequence")
        .expect("a case of the catalogue");
    let outcome = (case.build)(case.ci).run().await.unwrap();
    let lower = outcome.report.epsilon_lower;
    println!(
        "zcdp_sequence at {} releases: epsilon_lower {lower:.3}, claim {:.3} ({:.2}); charged {:?}\n  {}",
        case.ci,
        case.epsilon,
        lower / case.epsilon,
        outcome.charged,
        outcome.summary(case.epsilon)
    );
    let charged = outcome.charged;
    let rho = charged.rho.expect("a zCDP charge");
    let want = cases::zcdp_sequence_rho();
    assert!(
        (rho - want).abs() <= 4e-12 * cases::SEQUENCE_QUERIES as f64,
        "{rho} vs {want}"
    );
    let (epsilon, delta) = charged.guarantee.expect("a target's guarantee");
    assert_eq!(delta, cases::SEQUENCE_AUDIT_DELTA);
    assert!(
        (epsilon - case.epsilon).abs() <= 1e-9 * case.epsilon,
        "{epsilon} vs {}",
        case.epsilon
    );
    let queries = cases::SEQUENCE_QUERIES as f64;
    assert!((charged.epsilon - queries * cases::SEQUENCE_EPSILON).abs() < 1e-9);
    // Each query's δ is its map's at ε = 2 for the σ drawn: at most the δ asked for.
    assert!(charged.delta > 0.0 && charged.delta <= queries * cases::SEQUENCE_DELTA);
    assert!(
        lower <= case.epsilon,
        "{lower} above the claim {}",
        case.epsilon
    );
    assert!(
        lower >= 0.6 * case.epsilon,
        "{lower} below 0.6 of the claim {}",
        case.epsilon
    );
}
