//! The audit catalogue: each case is a DP query, two neighbouring datasets `D` and `D'`
//! (one replicate each), the `(ε, δ)` the engine charges for the query, and what the audit
//! must find. `tests/audit.rs` runs every case at CI size in `cargo test`;
//! `cargo run --release --example audit` runs them at full size (see `docs/auditing.md`).
//!
//! Neighbours are replace-one (one row, or with a unit column (`dp.protected_tables = 't(pid)'`) one unit, replaced by
//! another), the engine's privacy model. Queries group by the public `replicate` key, so one
//! query releases one independent result per replicate.

#![allow(dead_code)]

use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use datafusion_dp::sql::audit::{Repetition, SqlAudit};
use datafusion_dp::stats::audit::grid_exponent;
use std::sync::Arc;

/// False-alarm rate of every audit: `P(epsilon_lower > ε) ≤ ALPHA` for an `(ε, δ)`-DP query.
pub const ALPHA: f64 = 1e-3;

/// What an audit must find.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// `epsilon_lower <= ε`: the engine keeps its claim.
    WithinClaim,
    /// `epsilon_lower > ε`: a planted bug the auditor must catch.
    Exceeds,
}

pub struct Case {
    pub name: &'static str,
    /// What is audited (one line).
    pub what: &'static str,
    /// The `(ε, δ)` the engine charges (or, for a planted bug, claims).
    pub epsilon: f64,
    pub delta: f64,
    /// The ε the releases can reveal at most for this neighbouring pair, when it is below the
    /// charge (a change inside one group of a grouped count sees ε/2): the tightness
    /// reference.
    pub visible: f64,
    pub expect: Expect,
    /// Releases per dataset in `cargo test` (debug) and in the full-size example.
    pub ci: usize,
    pub full: usize,
    pub build: fn(usize) -> SqlAudit,
}

fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(columns).expect("a valid batch")
}

/// Rows `(g, x)`: a group key and a nullable value.
fn gx(rows: &[(&str, Option<i64>)]) -> RecordBatch {
    batch(vec![
        (
            "g",
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))) as ArrayRef,
        ),
        (
            "x",
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))) as ArrayRef,
        ),
    ])
}

/// Rows `(pid, g)`: a privacy unit and its group.
fn units(rows: &[(i64, &str)]) -> RecordBatch {
    batch(vec![
        (
            "pid",
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))) as ArrayRef,
        ),
        (
            "g",
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))) as ArrayRef,
        ),
    ])
}

/// A 2x2 table as rows `(o, e)`: `a` exposed cases, `b` exposed non-cases, `c` unexposed
/// cases, `d` unexposed non-cases.
fn table(a: usize, b: usize, c: usize, d: usize) -> RecordBatch {
    let mut o = Vec::new();
    let mut e = Vec::new();
    for (count, outcome, exposed) in [
        (a, true, true),
        (b, false, true),
        (c, true, false),
        (d, false, false),
    ] {
        o.extend(std::iter::repeat_n(outcome, count));
        e.extend(std::iter::repeat_n(exposed, count));
    }
    batch(vec![
        ("o", Arc::new(BooleanArray::from(o)) as ArrayRef),
        ("e", Arc::new(BooleanArray::from(e)) as ArrayRef),
    ])
}

/// A grouped audit over `t` with public replicate keys, seeded (non-private, reproducible).
fn grouped(query: &str, d: RecordBatch, d_prime: RecordBatch, n: usize, seed: u64) -> SqlAudit {
    SqlAudit::new(query, "t", d, d_prime, n)
        .statement("SET dp.public_groups = 'assert'")
        .seed(Some(seed))
        .alpha(ALPHA)
}

/// A unit with 2 rows in each of groups a, b (D) replaced by one with 2 rows in each of c, d
/// (D'), beside one-row units in every group; `t` protected by `pid`, bounded to 2 rows in 2
/// groups per unit, `query` grouped by replicate and `g`.
fn unit_two_groups_change(query: &str, n: usize, seed: u64) -> SqlAudit {
    let background = [(2, "a"), (3, "b"), (4, "c"), (5, "d")];
    let mut d = vec![(1, "a"), (1, "a"), (1, "b"), (1, "b")];
    let mut p = vec![(1, "c"), (1, "c"), (1, "d"), (1, "d")];
    d.extend(background);
    p.extend(background);
    grouped(query, units(&d), units(&p), n, seed)
        .statement("SET dp.protected_tables = 't(pid)'")
        .statement("SET dp.max_rows_per_unit = 2")
        .statement("SET dp.max_groups_per_unit = 2")
        .distinct_per_replicate(&["pid"])
        .group_columns(&["g"])
}

/// `dp_relative_risk` with `options` on tables `d` and `d_prime`, grouped by replicate.
fn ratio(options: &str, d: RecordBatch, d_prime: RecordBatch, n: usize, seed: u64) -> SqlAudit {
    grouped(
        &format!(
            "SELECT replicate, dp_relative_risk(o, e, 1.0, '{options}') AS rr FROM t GROUP BY replicate"
        ),
        d,
        d_prime,
        n,
        seed,
    )
}

/// The cells of `dp_rr_ci`'s released table: post-processing of the struct in SQL.
const CI_CELLS: &str = "SELECT replicate, ci['exposed_cases'] AS a,
        ci['exposed_total'] - ci['exposed_cases'] AS b,
        ci['unexposed_cases'] AS c,
        ci['unexposed_total'] - ci['unexposed_cases'] AS d, ci['estimate'] AS estimate
    FROM (SELECT replicate, dp_rr_ci(o, e, EPS, 'OPTIONS') AS ci FROM t GROUP BY replicate)";

fn ci_cells(epsilon: f64, options: &str) -> String {
    CI_CELLS
        .replace("EPS", &format!("{epsilon:?}"))
        .replace("OPTIONS", options)
}

/// The value and the grid exponent of a ratio release (`rr`), for the smooth-sensitivity
/// audits: a data-dependent grid shows in the exponent.
fn with_grid(audit: SqlAudit) -> SqlAudit {
    audit.features(
        &["rr", "grid exponent of rr"],
        Arc::new(|release: &[f64]| vec![release[0], grid_exponent(release[0])]),
    )
}

/// The δ private group selection is charged at `dp.selection_epsilon = 1`,
/// `dp.selection_delta = 1e-2` with one row per unit in one group: its threshold's privacy
/// map (`GroupSelection::loss`) on the Laplace counts' noise, below the 1e-2 asked because the
/// threshold is a whole number.
fn selection_charged_delta() -> f64 {
    use datafusion_dp::stats::mechanism::GroupSelection;
    let counts = grouped_count_noise(datafusion_dp::stats::Mechanism::Laplace, 1.0, None);
    GroupSelection::calibrate(&counts, 1, 1, 1e-2)
        .expect("calibrates")
        .loss(counts.loss())
        .delta
}

/// The `(ε, 1e-3)` that zCDP accounting claims for `count_composition_zcdp`: each grouped
/// Gaussian count's `ρ` read from its calibrated noise's privacy map (a grouped count is one
/// vector of shape `(2, 1)`), summed (Bun & Steinke 2016, Lemma 2.3) and converted with
/// `cdp_epsilon`. Linear accounting would claim 4.
fn zcdp_composition_claim() -> f64 {
    use datafusion_dp::stats::mechanism::cdp_epsilon;
    let rho: f64 = [1e-6, 2e-6, 3e-6, 4e-6]
        .iter()
        .map(|&delta| grouped_gaussian_count_rho(1.0, delta))
        .sum();
    cdp_epsilon(rho, 1e-3)
}

/// `zcdp_sequence`: `K` separate queries, each a grouped Gaussian `dp_count` at
/// `(SEQUENCE_EPSILON, SEQUENCE_DELTA)`, audited at `SEQUENCE_AUDIT_DELTA`.
pub const SEQUENCE_QUERIES: usize = 4;
pub const SEQUENCE_EPSILON: f64 = 2.0;
pub const SEQUENCE_DELTA: f64 = 1e-5;
/// The δ at which the summed ρ is converted to the claimed ε (any δ is valid for a ρ-zCDP
/// release; at 10⁻² the Gaussian's privacy loss is reached on events of probability a few
/// percent, which 100,000 test releases estimate, docs/auditing.md).
pub const SEQUENCE_AUDIT_DELTA: f64 = 1e-2;

/// The ρ of one query of the sequence, from the privacy map of the noise the engine
/// calibrates for it: a grouped count is one vector of shape `(2, 1)` (a row moving between
/// two groups), `ρ = 2/(2σ²)` for the discrete Gaussian's exact `σ²` (Canonne, Kamath &
/// Steinke 2020, Proposition 5).
fn grouped_gaussian_count_rho(epsilon: f64, delta: f64) -> f64 {
    grouped_count_noise(
        datafusion_dp::stats::Mechanism::Gaussian,
        epsilon,
        Some(delta),
    )
    .loss()
    .rho
    .expect("a zCDP map")
}

/// The noise the engine calibrates for a grouped `dp_count` with one row per unit: one
/// release of shape `(2, 1)` (a row moving between two groups).
fn grouped_count_noise(
    mechanism: datafusion_dp::stats::Mechanism,
    epsilon: f64,
    delta: Option<f64>,
) -> datafusion_dp::stats::CountNoise {
    datafusion_dp::stats::CountNoise::calibrate_release(
        mechanism,
        epsilon,
        delta,
        datafusion_dp::stats::mechanism::ReleaseShape::new(2, 1),
        Default::default(),
    )
    .expect("calibrates")
}

/// The summed ρ of the sequence's `K` queries (Bun & Steinke 2016, Lemma 2.3: ρ adds, also
/// when each query is chosen after the last, Whitehouse, Ramdas, Rogers & Wu 2023): what a
/// zCDP accountant charges.
pub fn zcdp_sequence_rho() -> f64 {
    SEQUENCE_QUERIES as f64 * grouped_gaussian_count_rho(SEQUENCE_EPSILON, SEQUENCE_DELTA)
}

/// The `(ε, SEQUENCE_AUDIT_DELTA)` the zCDP accounting claims for the sequence: the summed ρ
/// converted with `cdp_epsilon` (Canonne, Kamath & Steinke 2020, Corollary 13). Summing
/// `(ε, δ)` would claim `K·2 = 8`.
pub fn zcdp_sequence_claim() -> f64 {
    datafusion_dp::stats::mechanism::cdp_epsilon(zcdp_sequence_rho(), SEQUENCE_AUDIT_DELTA)
}

/// The planted variant's ε per query: the smallest (to 10⁻⁹) at which the calibrated noise's
/// ρ is twice the honest query's, i.e. `σ/√2` (bisection: ρ grows with ε).
fn doubled_rho_epsilon() -> f64 {
    let twice = 2.0 * grouped_gaussian_count_rho(SEQUENCE_EPSILON, SEQUENCE_DELTA);
    let (mut lo, mut hi) = (SEQUENCE_EPSILON, 4.0 * SEQUENCE_EPSILON);
    while hi - lo > 1e-9 {
        let mid = 0.5 * (lo + hi);
        if grouped_gaussian_count_rho(mid, SEQUENCE_DELTA) >= twice {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// `SEQUENCE_QUERIES` separate grouped Gaussian `dp_count` queries at `epsilon` (each
/// `SEQUENCE_DELTA`) in one session with a zCDP budget (a target `(10, 10⁻²)`, converted to
/// ρ), a row moving from group a to group b; audited on the joint output of all of them.
fn zcdp_sequence(epsilon: f64, n: usize, seed: u64) -> SqlAudit {
    let query = format!(
        "SELECT replicate, g, dp_count(x, {epsilon:?}, 'mechanism=gaussian, delta={SEQUENCE_DELTA:e}') AS c FROM t GROUP BY replicate, g"
    );
    let mut audit = grouped(
        &query,
        gx(&[("a", Some(1)), ("a", Some(1)), ("b", Some(1))]),
        gx(&[("a", Some(1)), ("b", Some(1)), ("b", Some(1))]),
        n,
        seed,
    )
    .statement("SET dp.budget_measure = 'zcdp'")
    .statement("SET dp.epsilon_budget = 10")
    .statement(format!("SET dp.delta_budget = {SEQUENCE_AUDIT_DELTA:e}"))
    .group_columns(&["g"])
    .delta(SEQUENCE_AUDIT_DELTA);
    for _ in 1..SEQUENCE_QUERIES {
        audit = audit.then(query.clone());
    }
    audit
}

pub fn cases() -> Vec<Case> {
    vec![
        // ---- dp_count ----
        Case {
            name: "count_ungrouped",
            what: "ungrouped dp_count, Laplace: one row's value NULL in D' (count 1 vs 0); secure noise, the query planned and executed once per release (a physical plan releases once)",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            // Each release is a whole query (about 2.6 ms planned and run in a debug build).
            ci: 10_000,
            full: 1_000_000,
            build: |n| {
                SqlAudit::new(
                    "SELECT dp_count(x, 1.0) AS c FROM t",
                    "t",
                    gx(&[("a", Some(1))]),
                    gx(&[("a", None)]),
                    n,
                )
                .repetition(Repetition::Executions)
                .alpha(ALPHA)
            },
        },
        Case {
            name: "count_grouped_within_group",
            what: "grouped dp_count, Laplace: a row's value NULL in D' (one group's count 1 vs 0; sees the per-group epsilon/2)",
            epsilon: 1.0,
            delta: 0.0,
            visible: 0.5,
            expect: Expect::WithinClaim,
            ci: 1_000_000,
            full: 4_000_000,
            build: |n| {
                grouped(
                    "SELECT replicate, dp_count(x, 1.0) AS c FROM t GROUP BY replicate",
                    gx(&[("a", Some(1))]),
                    gx(&[("a", None)]),
                    n,
                    11,
                )
            },
        },
        Case {
            name: "count_grouped_move",
            what: "grouped dp_count, Laplace: a row moves from group a to group b (joint output of both groups)",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 500_000,
            full: 2_000_000,
            build: |n| {
                grouped(
                    "SELECT replicate, g, dp_count(x, 1.0) AS c FROM t GROUP BY replicate, g",
                    gx(&[("a", Some(1)), ("a", Some(1)), ("b", Some(1))]),
                    gx(&[("a", Some(1)), ("b", Some(1)), ("b", Some(1))]),
                    n,
                    12,
                )
                .group_columns(&["g"])
            },
        },
        Case {
            name: "count_grouped_move_gaussian",
            what: "grouped dp_count, Gaussian (delta 1e-3): a row moves from group a to group b",
            epsilon: 1.0,
            delta: 1e-3,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 2_000_000,
            build: |n| {
                grouped(
                    "SELECT replicate, g, dp_count(x, 1.0, 'mechanism=gaussian, delta=1e-3') AS c FROM t GROUP BY replicate, g",
                    gx(&[("a", Some(1)), ("a", Some(1)), ("b", Some(1))]),
                    gx(&[("a", Some(1)), ("b", Some(1)), ("b", Some(1))]),
                    n,
                    13,
                )
                .group_columns(&["g"])
                .delta(1e-3)
            },
        },
        Case {
            name: "count_composition_zcdp",
            what: "four grouped Gaussian dp_counts in one query (delta 1e-6..4e-6 each), one row's value NULL in D': their joint release against the zCDP accounting, the sum of the four noises' rho converted to (epsilon, 1e-3) (Canonne, Kamath & Steinke 2020, Corollary 13)",
            epsilon: zcdp_composition_claim(),
            delta: 1e-3,
            visible: zcdp_composition_claim(),
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| {
                grouped(
                    "SELECT replicate, dp_count(x, 1.0, 'mechanism=gaussian, delta=1e-6') AS c1, \
                     dp_count(x, 1.0, 'mechanism=gaussian, delta=2e-6') AS c2, \
                     dp_count(x, 1.0, 'mechanism=gaussian, delta=3e-6') AS c3, \
                     dp_count(x, 1.0, 'mechanism=gaussian, delta=4e-6') AS c4 \
                     FROM t GROUP BY replicate",
                    gx(&[("a", Some(1))]),
                    gx(&[("a", None)]),
                    n,
                    14,
                )
                .delta(1e-3)
            },
        },
        Case {
            name: "zcdp_sequence",
            what: "4 separate grouped Gaussian dp_count queries (epsilon 2, delta 1e-5 each) in one session with a zCDP budget, each charged its rho by its privacy map, a row moving from group a to group b: their joint output against the summed rho converted to (epsilon, 1e-2) (Bun & Steinke 2016; Canonne, Kamath & Steinke 2020, Corollary 13); summing (epsilon, delta) would claim 8",
            epsilon: zcdp_sequence_claim(),
            delta: SEQUENCE_AUDIT_DELTA,
            // The move is the vector's whole L2 sensitivity √2 in every query: all of ρ shows.
            visible: zcdp_sequence_claim(),
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| zcdp_sequence(SEQUENCE_EPSILON, n, 15),
        },
        // ---- the 2x2 table functions ----
        Case {
            name: "relative_risk_private_sizes",
            what: "dp_relative_risk (noisy_counts, group_sizes private): an exposed case becomes an exposed non-case",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| ratio("", table(2, 0, 1, 1), table(1, 1, 1, 1), n, 21),
        },
        Case {
            name: "relative_risk_public_sizes",
            what: "dp_relative_risk (noisy_counts, group_sizes public): an exposed case becomes a non-case (sizes fixed)",
            epsilon: 1.0,
            delta: 0.0,
            visible: 0.5,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| ratio("group_sizes=public", table(2, 0, 1, 1), table(1, 1, 1, 1), n, 22),
        },
        Case {
            name: "rr_ci_cells_laplace",
            what: "dp_rr_ci (Laplace, private sizes), released cells and estimate: an exposed case becomes an exposed non-case",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| grouped(&ci_cells(1.0, ""), table(3, 2, 2, 3), table(2, 3, 2, 3), n, 23),
        },
        Case {
            name: "rr_ci_cells_gaussian",
            what: "dp_rr_ci (Gaussian, delta 1e-3, private sizes): an exposed case becomes an unexposed non-case",
            epsilon: 1.0,
            delta: 1e-3,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| {
                grouped(
                    &ci_cells(1.0, "mechanism=gaussian, delta=1e-3"),
                    table(3, 2, 2, 3),
                    table(2, 2, 2, 4),
                    n,
                    24,
                )
                .delta(1e-3)
            },
        },
        Case {
            name: "rr_ci_public_sizes",
            what: "dp_rr_ci (Laplace, group_sizes public): an unexposed case becomes a non-case (only Y changes: epsilon/2 visible)",
            epsilon: 1.0,
            delta: 0.0,
            visible: 0.5,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| {
                grouped(
                    &ci_cells(1.0, "group_sizes=public"),
                    table(3, 2, 2, 3),
                    table(3, 2, 1, 4),
                    n,
                    25,
                )
            },
        },
        Case {
            name: "odds_ratio",
            what: "dp_odds_ratio (Laplace, private sizes): an exposed non-case becomes an unexposed non-case",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| {
                grouped(
                    "SELECT replicate, dp_odds_ratio(o, e, 1.0) AS odds FROM t GROUP BY replicate",
                    table(1, 1, 1, 1),
                    table(1, 0, 1, 2),
                    n,
                    26,
                )
            },
        },
        // ---- dp_relative_risk's methods (group sizes public: outcomes flip, sizes fixed) ----
        Case {
            name: "method_noised_log",
            what: "method=noised_log: X 2 vs 1 of n_x = 2, Y = 2 (log ratio moves by its sensitivity log 2)",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| {
                ratio(
                    "group_sizes=public, method=noised_log",
                    table(2, 0, 2, 0),
                    table(1, 1, 2, 0),
                    n,
                    31,
                )
            },
        },
        Case {
            name: "method_naive",
            what: "method=naive, n_x = 4: Y 1 vs 2 with X = 4 (the ratio moves by n_x/2)",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| {
                ratio(
                    "group_sizes=public, method=naive",
                    table(4, 0, 1, 1),
                    table(4, 0, 2, 0),
                    n,
                    32,
                )
            },
        },
        Case {
            name: "method_naive_one_exposed",
            what: "method=naive, n_x = 1 (regression): X 1 vs 0 with Y = 1 moves the ratio by 1, above the paper's n_x/2",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| {
                ratio(
                    "group_sizes=public, method=naive",
                    table(1, 0, 1, 0),
                    table(0, 1, 1, 0),
                    n,
                    33,
                )
            },
        },
        Case {
            name: "method_smooth_grid",
            what: "method=smooth_sensitivity, epsilon 1, delta 0.01 (regression): X 0 vs 1 of 3, Y = 3 of 3; the old grid followed S (2^-29 vs 2^-28); the ratio moves by 1/3 against noise of scale 2S/epsilon, S about 1",
            epsilon: 1.0,
            delta: 0.01,
            visible: 0.16,
            expect: Expect::WithinClaim,
            ci: 100_000,
            full: 1_000_000,
            build: |n| {
                with_grid(ratio(
                    "group_sizes=public, method=smooth_sensitivity, delta=0.01",
                    table(0, 3, 3, 0),
                    table(1, 2, 3, 0),
                    n,
                    34,
                ))
                .delta(0.01)
            },
        },
        Case {
            name: "method_smooth_issue_example",
            what: "method=smooth_sensitivity, epsilon 0.1, delta 1e-6 (regression, the issue's example): 100 exposed rows without cases, unexposed cases 95 vs 96 of 100; the old grid was 2^-20 vs 2^-21; the ratio is 0 in both, so only the noise scale could differ",
            epsilon: 0.1,
            delta: 1e-6,
            visible: 0.1,
            expect: Expect::WithinClaim,
            ci: 4_000,
            full: 100_000,
            build: |n| {
                with_grid(grouped(
                    "SELECT replicate, dp_relative_risk(o, e, 0.1, 'group_sizes=public, method=smooth_sensitivity, delta=1e-6') AS rr FROM t GROUP BY replicate",
                    table(0, 100, 95, 5),
                    table(0, 100, 96, 4),
                    n,
                    35,
                ))
                .delta(1e-6)
            },
        },
        Case {
            name: "method_smooth_one_exposed",
            what: "method=smooth_sensitivity, epsilon 1, delta 1e-6 (regression): n_x = n_y = 1, X 1 vs 0, Y = 1; the old S was 1/2 at X = Y = 1, below the local sensitivity 1 (value only, no grid feature); noise of scale 2S/epsilon shows epsilon/2",
            epsilon: 1.0,
            delta: 1e-6,
            visible: 0.5,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| {
                ratio(
                    "group_sizes=public, method=smooth_sensitivity, delta=1e-6",
                    table(1, 0, 1, 0),
                    table(0, 1, 1, 0),
                    n,
                    36,
                )
                .delta(1e-6)
            },
        },
        Case {
            name: "method_ptr",
            what: "method=ptr, epsilon 1, delta 1e-3, ptr_bound 1: n_x = n_y = 50, X = 20, Y 19 vs 20: the distance to a table of local sensitivity 1 is 14 vs 15, at the test's threshold 13.8 (NULL is FAIL; the test sees epsilon/2)",
            epsilon: 1.0,
            delta: 1e-3,
            visible: 0.5,
            expect: Expect::WithinClaim,
            ci: 100_000,
            full: 1_000_000,
            build: |n| {
                ratio(
                    "group_sizes=public, method=ptr, delta=1e-3, ptr_bound=1",
                    table(20, 30, 19, 31),
                    table(20, 30, 20, 30),
                    n,
                    37,
                )
                .delta(1e-3)
            },
        },
        // ---- privacy units, public keys, private selection ----
        Case {
            name: "units_two_rows_two_groups",
            what: "unit column pid, max_rows_per_unit = max_groups_per_unit = 2: a unit with 2 rows in each of a, b is replaced by one with 2 rows in each of c, d",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 50_000,
            full: 1_000_000,
            build: |n| unit_two_groups_change("SELECT replicate, g, dp_count(pid, 1.0) AS c FROM t GROUP BY replicate, g", n, 41),
        },
        Case {
            name: "protected_join_amplified",
            what: "a query shape of the protected-tables issue the planner answers: t protected by unit pid, every row repeated 3 times by a join with generate_series, bounding to 2 rows and 2 groups per unit; a unit with 2 rows in each of a, b replaced by one with 2 rows in each of c, d",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 20_000,
            full: 200_000,
            build: |n| unit_two_groups_change("SELECT t.replicate, t.g, dp_count(t.pid, 1.0) AS c FROM t CROSS JOIN generate_series(1, 3) GROUP BY t.replicate, t.g", n, 44),
        },
        Case {
            name: "protected_self_join_on_unit",
            what: "a query shape of the protected-tables issue the planner answers: a self-join of t on its unit column pid (each unit's rows squared), bounded to 2 rows and 2 groups per unit; the same unit change as units_two_rows_two_groups",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 20_000,
            full: 200_000,
            build: |n| unit_two_groups_change("SELECT a.replicate, a.g, dp_count(a.pid, 1.0) AS c FROM t AS a JOIN t AS b ON a.pid = b.pid GROUP BY a.replicate, a.g", n, 45),
        },
        Case {
            name: "protected_union_of_units",
            what: "a query shape of the protected-tables issue the planner answers: UNION ALL of t with itself (the unit column carried in both branches), bounded to 2 rows and 2 groups per unit; the same unit change as units_two_rows_two_groups",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 20_000,
            full: 200_000,
            build: |n| unit_two_groups_change("SELECT replicate, g, dp_count(pid, 1.0) AS c FROM (SELECT replicate, pid, g FROM t UNION ALL SELECT replicate, pid, g FROM t) GROUP BY replicate, g", n, 46),
        },
        Case {
            name: "units_over_the_bounds",
            what: "unit column pid, 2 rows and 2 groups per unit: a unit with 3 rows in each of a, b, c (bounding drops rows and a group) is replaced by one with 3 rows in d (3 groups change by 2 at epsilon/4 each: 3/4 epsilon visible)",
            epsilon: 1.0,
            delta: 0.0,
            visible: 0.75,
            expect: Expect::WithinClaim,
            ci: 50_000,
            full: 1_000_000,
            build: |n| {
                let background = [(2, "a"), (3, "b"), (4, "c"), (5, "d")];
                let mut d = vec![(1, "a"); 3];
                d.extend([(1, "b"); 3]);
                d.extend([(1, "c"); 3]);
                let mut p = vec![(1, "d"); 3];
                d.extend(background);
                p.extend(background);
                grouped(
                    "SELECT replicate, g, dp_count(pid, 1.0) AS c FROM t GROUP BY replicate, g",
                    units(&d),
                    units(&p),
                    n,
                    42,
                )
                .statement("SET dp.protected_tables = 't(pid)'")
                .statement("SET dp.max_rows_per_unit = 2")
                .statement("SET dp.max_groups_per_unit = 2")
                .distinct_per_replicate(&["pid"])
                .group_columns(&["g"])
            },
        },
        Case {
            name: "public_groups_table",
            what: "dp.public_groups = '<table>' of (replicate, g) for g in a, b: the one row is in a in D and in b in D' (the other key is released as noise on zero); a row of an undeclared key z is dropped",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| {
                SqlAudit::new(
                    "SELECT replicate, g, dp_count(x, 1.0) AS c FROM t GROUP BY replicate, g",
                    "t",
                    gx(&[("a", Some(1)), ("z", Some(1))]),
                    gx(&[("b", Some(1))]),
                    n,
                )
                .statement(
                    "CREATE TABLE keys AS SELECT value AS replicate, g FROM generate_series(0, {replicates} - 1) CROSS JOIN (VALUES ('a'), ('b')) v(g)",
                )
                .statement("SET dp.public_tables = 'keys'")
                .statement("SET dp.public_groups = 'keys'")
                .seed(Some(43))
                .alpha(ALPHA)
                .group_columns(&["g"])
            },
        },
        Case {
            name: "private_group_selection",
            what: "private group selection (selection epsilon 1, delta 1e-2, charged its threshold's 8.4e-3) with dp_count at epsilon 1: a row of key x (present in D only) moves to key a (20 rows); x is released with probability below delta, a's count moves by 1 at epsilon/2",
            epsilon: 2.0,
            delta: selection_charged_delta(),
            visible: 0.5,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 1_000_000,
            build: |n| {
                let mut d = vec![("a", Some(1)); 20];
                let mut p = d.clone();
                d.push(("x", Some(1)));
                p.push(("a", Some(1)));
                SqlAudit::new(
                    "SELECT replicate, g, dp_count(x, 1.0) AS c FROM t GROUP BY replicate, g",
                    "t",
                    gx(&d),
                    gx(&p),
                    n,
                )
                .statement("SET dp.selection_epsilon = 1.0")
                .statement("SET dp.selection_delta = 1e-2")
                .seed(Some(44))
                .alpha(ALPHA)
                .group_columns(&["g"])
                .delta(selection_charged_delta())
            },
        },
        // ---- dp_sum ----
        Case {
            name: "sum_grouped_within_group",
            what: "grouped dp_sum(x, 0, 4), Laplace: one row's value 4 in D, 0 in D' (the sum moves by the sensitivity 4 in one group; sees epsilon/2)",
            epsilon: 1.0,
            delta: 0.0,
            visible: 0.5,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 2_000_000,
            build: |n| {
                grouped(
                    "SELECT replicate, dp_sum(x, 0, 4, 1.0) AS s FROM t GROUP BY replicate",
                    gx(&[("a", Some(4)), ("a", Some(1))]),
                    gx(&[("a", Some(0)), ("a", Some(1))]),
                    n,
                    61,
                )
            },
        },
        Case {
            name: "sum_real_straddling_bounds",
            what: "grouped dp_sum(y, -2.0, 2.0) over DOUBLE, Laplace: one row's value 2 in D, -2 in D' (a move of upper - lower = 4, the sensitivity when the bounds straddle 0; sees epsilon/2), with the output's grid exponent as a feature",
            epsilon: 1.0,
            delta: 0.0,
            visible: 0.5,
            expect: Expect::WithinClaim,
            ci: 200_000,
            full: 2_000_000,
            build: |n| {
                let y = |v: f64| {
                    batch(vec![(
                        "y",
                        Arc::new(Float64Array::from(vec![v, 0.5])) as ArrayRef,
                    )])
                };
                grouped(
                    "SELECT replicate, dp_sum(y, -2.0, 2.0, 1.0) AS s FROM t GROUP BY replicate",
                    y(2.0),
                    y(-2.0),
                    n,
                    62,
                )
                .features(
                    &["s", "grid exponent of s"],
                    Arc::new(|release: &[f64]| vec![release[0], grid_exponent(release[0])]),
                )
            },
        },
        Case {
            name: "avg_grouped_row_removed",
            what: "grouped dp_avg(x, 0, 4), Laplace: one row's value 4 in D, NULL in D' (the sum moves by 4 and the count by 1, each noised at epsilon/4: sees epsilon/2), released sum and count",
            epsilon: 1.0,
            delta: 0.0,
            visible: 0.5,
            expect: Expect::WithinClaim,
            // 800,000: the size at which the bound reaches 0.9 of the visible ε
            // (tests/audit.rs, `TIGHT`: 0.895 at 200,000).
            ci: 800_000,
            full: 2_000_000,
            build: |n| {
                grouped(
                    "SELECT replicate, a['sum'] AS s, a['count'] AS c FROM
                       (SELECT replicate, dp_avg(x, 0, 4, 1.0) AS a FROM t GROUP BY replicate)",
                    gx(&[("a", Some(4)), ("a", Some(1))]),
                    gx(&[("a", None), ("a", Some(1))]),
                    n,
                    64,
                )
            },
        },
        // ---- dp_quantile ----
        Case {
            name: "quantile_median_moves",
            what: "grouped dp_quantile(x, 0.5, 0, 10), Laplace: of three values 1, 9 and one row's 1 (D) or 9 (D'), the median moves from 1 to 9 (the row's tree moves by 2 x 4 node counts at epsilon/2 per side: at most epsilon visible, the median shows less)",
            epsilon: 1.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 50_000,
            full: 500_000,
            build: |n| {
                grouped(
                    "SELECT replicate, dp_quantile(x, 0.5, 0, 10, 1.0) AS m FROM t GROUP BY replicate",
                    gx(&[("a", Some(1)), ("a", Some(9)), ("a", Some(1))]),
                    gx(&[("a", Some(1)), ("a", Some(9)), ("a", Some(9))]),
                    n,
                    65,
                )
            },
        },
        Case {
            name: "quantile_last_leaf",
            what: "grouped dp_quantile(x, 1.0, 0, 65536, 8.0), Laplace: 50 rows at 65520 and one row's 65536 (D) or NULL (D'); the row's ancestors also hold the others, so only the last leaf's noisy count, at scale 4/(epsilon/2) = 1, decides whether the maximum is released: e^(1/b) = e^1 visible (tests/audit.rs has the derivation)",
            epsilon: 8.0,
            delta: 0.0,
            visible: 1.0,
            expect: Expect::WithinClaim,
            ci: 50_000,
            full: 500_000,
            build: |n| {
                let data = |row: Option<i64>| {
                    let mut x: Vec<Option<i64>> = vec![Some(65520); 50];
                    x.push(row);
                    batch(vec![("x", Arc::new(Int64Array::from(x)) as ArrayRef)])
                };
                grouped(
                    "SELECT replicate, dp_quantile(x, 1.0, 0, 65536, 8.0) AS m FROM t GROUP BY replicate",
                    data(Some(65536)),
                    data(None),
                    n,
                    67,
                )
            },
        },
        // ---- planted bugs: the auditor must catch each ----
        Case {
            name: "planted_double_epsilon",
            what: "PLANTED: dp_rr_ci noise at twice the calibrated epsilon (the engine run at 2.0, the charge claimed 1.0)",
            epsilon: 1.0,
            delta: 0.0,
            visible: 2.0,
            expect: Expect::Exceeds,
            ci: 200_000,
            full: 1_000_000,
            build: |n| grouped(&ci_cells(2.0, ""), table(3, 2, 2, 3), table(2, 3, 2, 3), n, 51),
        },
        Case {
            name: "planted_epsilon_per_group",
            what: "PLANTED: grouped dp_count noised at epsilon per group instead of epsilon/2 (the old bug; the engine run at 2.0 claiming 1.0), a row moves from a to b",
            epsilon: 1.0,
            delta: 0.0,
            visible: 2.0,
            expect: Expect::Exceeds,
            ci: 200_000,
            full: 2_000_000,
            build: |n| {
                grouped(
                    "SELECT replicate, g, dp_count(x, 2.0) AS c FROM t GROUP BY replicate, g",
                    gx(&[("a", Some(1)), ("a", Some(1)), ("b", Some(1))]),
                    gx(&[("a", Some(1)), ("b", Some(1)), ("b", Some(1))]),
                    n,
                    52,
                )
                .group_columns(&["g"])
            },
        },
        Case {
            name: "planted_gaussian_sigma_over_sqrt2",
            what: "PLANTED: grouped Gaussian dp_count with sigma/sqrt(2) (the vector's L2 sensitivity sqrt(2) forgotten: the engine run at epsilon 1.5137, where the vector's sigma is that of one value at 1.0, claiming (1.0, 1e-3)), a row moves from a to b",
            epsilon: 1.0,
            delta: 1e-3,
            // The continuous analytic Gaussian at L2 sensitivity √2 and σ = σ(1, 1e-3, Δ=1)
            // reaches δ = 1e-3 at ε = 1.5137 (Balle & Wang 2018, solved numerically).
            visible: 1.5137,
            expect: Expect::Exceeds,
            ci: 200_000,
            full: 2_000_000,
            build: |n| {
                grouped(
                    "SELECT replicate, g, dp_count(x, 1.5137445, 'mechanism=gaussian, delta=1e-3') AS c FROM t GROUP BY replicate, g",
                    gx(&[("a", Some(1)), ("a", Some(1)), ("b", Some(1))]),
                    gx(&[("a", Some(1)), ("b", Some(1)), ("b", Some(1))]),
                    n,
                    58,
                )
                .group_columns(&["g"])
                .delta(1e-3)
            },
        },
        Case {
            name: "planted_zcdp_sequence_sigma_over_sqrt2",
            what: "PLANTED: the 4 queries of zcdp_sequence with sigma/sqrt(2) each (noise calibrated for twice the rho: the engine run at the epsilon whose calibrated rho is twice the honest one), while the accountant claims the honest summed rho converted to (epsilon, 1e-2)",
            epsilon: zcdp_sequence_claim(),
            delta: SEQUENCE_AUDIT_DELTA,
            // Twice the ρ: the conversion of 2·Σρ at δ = 10⁻².
            visible: datafusion_dp::stats::mechanism::cdp_epsilon(
                2.0 * zcdp_sequence_rho(),
                SEQUENCE_AUDIT_DELTA,
            ),
            expect: Expect::Exceeds,
            ci: 200_000,
            full: 1_000_000,
            build: |n| zcdp_sequence(doubled_rho_epsilon(), n, 59),
        },
        Case {
            name: "planted_sum_sensitivity",
            what: "PLANTED: grouped dp_sum(x, 0, 4) calibrated for sensitivity 1 (the unit's row bound, forgetting the bounds' width 4; the engine run at epsilon 4.0 claiming 1.0): one row's value 4 in D, 0 in D'",
            epsilon: 1.0,
            delta: 0.0,
            visible: 2.0,
            expect: Expect::Exceeds,
            ci: 200_000,
            full: 2_000_000,
            build: |n| {
                grouped(
                    "SELECT replicate, dp_sum(x, 0, 4, 4.0) AS s FROM t GROUP BY replicate",
                    gx(&[("a", Some(4)), ("a", Some(1))]),
                    gx(&[("a", Some(0)), ("a", Some(1))]),
                    n,
                    63,
                )
            },
        },
        Case {
            name: "planted_quantile_sensitivity",
            what: "PLANTED: grouped dp_quantile(x, 0.5, 0, 10) with its tree noised for one count, not one per level, and neither side of a GROUP BY (the engine run at epsilon 8.0 claiming 1.0): of three values 1, 9 and one row's 1 (D) or 9 (D'), the median moves from 1 to 9",
            epsilon: 1.0,
            delta: 0.0,
            visible: 8.0,
            expect: Expect::Exceeds,
            ci: 50_000,
            full: 500_000,
            build: |n| {
                grouped(
                    "SELECT replicate, dp_quantile(x, 0.5, 0, 10, 8.0) AS m FROM t GROUP BY replicate",
                    gx(&[("a", Some(1)), ("a", Some(9)), ("a", Some(1))]),
                    gx(&[("a", Some(1)), ("a", Some(9)), ("a", Some(9))]),
                    n,
                    66,
                )
            },
        },
        Case {
            name: "planted_avg_split",
            what: "PLANTED: grouped dp_avg(x, 0, 4) with its sum and count each at the call's epsilon per group (neither the sum/count split nor the two sides of a GROUP BY applied; the engine run at 4.0 claiming 1.0): one row's value 4 in D, NULL in D'",
            epsilon: 1.0,
            delta: 0.0,
            visible: 2.0,
            expect: Expect::Exceeds,
            ci: 200_000,
            full: 2_000_000,
            build: |n| {
                grouped(
                    "SELECT replicate, a['sum'] AS s, a['count'] AS c FROM
                       (SELECT replicate, dp_avg(x, 0, 4, 4.0) AS a FROM t GROUP BY replicate)",
                    gx(&[("a", Some(4)), ("a", Some(1))]),
                    gx(&[("a", None), ("a", Some(1))]),
                    n,
                    65,
                )
            },
        },
        Case {
            name: "planted_no_bounding",
            what: "PLANTED: bounding switched off for a unit with two rows (t protected row by row, so each row is calibrated as a unit) while unit-level epsilon 1 is claimed: the unit's 2 rows move from a to b",
            epsilon: 1.0,
            delta: 0.0,
            visible: 2.0,
            expect: Expect::Exceeds,
            ci: 200_000,
            full: 2_000_000,
            build: |n| {
                grouped(
                    "SELECT replicate, g, dp_count(pid, 1.0) AS c FROM t GROUP BY replicate, g",
                    units(&[(1, "a"), (1, "a"), (2, "a"), (3, "b")]),
                    units(&[(1, "b"), (1, "b"), (2, "a"), (3, "b")]),
                    n,
                    53,
                )
                .distinct_per_replicate(&["pid"])
                .group_columns(&["g"])
            },
        },
    ]
}
