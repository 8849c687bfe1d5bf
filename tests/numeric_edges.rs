//! Numeric edges of calibration and accounting (issue 27).
//!
//! 1. Noise that wraps its integer type: at a tiny epsilon the discrete Laplace draw was
//!    clamped to `±i64::MAX` and `count + noise` wrapped (or overflowed), so the answer was
//!    `count − i64::MAX`, which carries the exact count. Every call is now either refused, with
//!    an error naming the function and the argument, or answered with noise of a supported
//!    scale (`stats::mechanism::MAX_NOISE_SCALE`).
//! 2. A floating-point budget: a charge below half the last bit of the spent total was lost,
//!    so queries at a tiny epsilon were answered without end after the budget was spent.
//!    Amounts are now exact integers of `10^-12` of epsilon (`sql::accounting::amount`).

mod common;

use common::config;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Float64Type, Int64Type};
use datafusion::error::Result;
use datafusion::prelude::*;
use datafusion_dp::{analyst_sql, lock, protect, Protection};
use std::path::{Path, PathBuf};

/// The limits of `stats::mechanism` (`MAX_NOISE_SCALE`, `MAX_EPSILON`, `MAX_GAUSSIAN_SIGMA`),
/// spelled out so that this file also builds against the code before issue 27 (to show that it
/// fails there); [`the_limits_are_the_library_s`] keeps them equal.
const MAX_NOISE_SCALE: f64 = 1_099_511_627_776.0;
const MAX_EPSILON: f64 = 1_099_511_627_776.0;
const MAX_GAUSSIAN_SIGMA: f64 = 1e5;

#[test]
fn the_limits_are_the_library_s() {
    use datafusion_dp::stats::mechanism as m;
    assert_eq!(
        (MAX_NOISE_SCALE, MAX_EPSILON, MAX_GAUSSIAN_SIGMA),
        (m::MAX_NOISE_SCALE, m::MAX_EPSILON, m::MAX_GAUSSIAN_SIGMA)
    );
    assert_eq!(MAX_NOISE_SCALE, 2f64.powi(40));
}

/// Table cells of `t` for `n` people: a = 11, b = 9, c = 7, d = 13 (40 rows), plus person 41
/// (an exposed case) when `with_extra`.
fn t_rows(with_extra: bool) -> String {
    let mut rows = Vec::new();
    let mut id = 0;
    for (outcome, exposed, n) in [
        (true, true, 11),
        (false, true, 9),
        (true, false, 7),
        (false, false, 13),
    ] {
        for _ in 0..n {
            id += 1;
            let g = if id % 2 == 0 { "a" } else { "b" };
            rows.push(format!("({id}, {id}, {outcome}, {exposed}, '{g}')"));
        }
    }
    if with_extra {
        rows.push("(41, 41, true, true, 'a')".to_string());
    }
    rows.join(", ")
}

/// A session with `t` (one row per person) and the given statements run first.
async fn session(with_extra: bool, setup: &[&str]) -> Result<SessionContext> {
    let ctx = SessionContext::new_with_config(config(2, false));
    datafusion_dp::register(&ctx)?;
    let t = format!(
        "CREATE TABLE t (id INT, x INT, outcome BOOLEAN, exposed BOOLEAN, g VARCHAR) AS VALUES {}",
        t_rows(with_extra)
    );
    ctx.sql(&t).await?.collect().await?;
    for sql in setup {
        ctx.sql(sql).await?.collect().await?;
    }
    protect(&ctx, "t", Protection::Rows)?;
    Ok(ctx)
}

async fn run(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    ctx.sql(sql).await?.collect().await
}

/// The epsilons swept: the smallest positive doubles, powers of two whose exact rational the
/// old sampler accepted (2^-70 drew ±i64::MAX and wrapped), the neighbourhood of the smallest
/// supported scale, ordinary values, and the neighbourhood of the largest accepted epsilon.
fn sweep() -> Vec<f64> {
    let above = |x: f64| f64::from_bits(x.to_bits() + 1);
    let below = |x: f64| f64::from_bits(x.to_bits() - 1);
    vec![
        f64::from_bits(1), // 5e-324, the smallest subnormal
        f64::MIN_POSITIVE,
        1e-300,
        2f64.powi(-100),
        1e-30,
        2f64.powi(-70),
        2f64.powi(-64),
        2f64.powi(-50),
        1e-13,
        below(1.0 / MAX_NOISE_SCALE),
        1.0 / MAX_NOISE_SCALE,
        2.0 / MAX_NOISE_SCALE,
        4.0 / MAX_NOISE_SCALE,
        1e-12,
        1e-9,
        1e-6,
        1e-3,
        0.5,
        1.0,
        10.0,
        700.0,
        1e6,
        1e9,
        below(MAX_EPSILON),
        MAX_EPSILON,
        above(MAX_EPSILON),
        1e13,
        1e300,
        f64::MAX,
    ]
}

/// The largest |noise| consistent with the noise at `epsilon` per call: 60 scales (a draw
/// beyond has probability below e^-60), with the Laplace scale at most `4·Δ/ε` (a table cell
/// or a grouped count is calibrated for ε/2; a size sums two cells) and σ at most
/// `MAX_GAUSSIAN_SIGMA` (larger σ is refused).
fn noise_bound(mechanism: &str, epsilon: f64) -> f64 {
    let scale = match mechanism {
        "laplace" => 4.0 / epsilon,
        _ => 2.0 * MAX_GAUSSIAN_SIGMA,
    };
    60.0 * scale + 1.0
}

/// Checks an answered noisy count against its true value: within the noise's range, and never
/// near the ends of `i64`, where a wrapped or saturated sum lands (`count − i64::MAX` carries
/// the exact count).
fn check_count(what: &str, released: i64, truth: i64, mechanism: &str, epsilon: f64) {
    let distance = (released as f64 - truth as f64).abs();
    assert!(
        distance <= noise_bound(mechanism, epsilon),
        "{what}: released {released} is {distance:e} from the true {truth}"
    );
    assert!(
        released.unsigned_abs() < 1 << 62,
        "{what}: released {released} is at the edge of i64 (a wrapped or clamped sum: {} = truth - i64::MAX?)",
        released.wrapping_sub(truth)
    );
}

/// A refusal must not be an arithmetic panic (the old code's overflow in a debug build, which
/// happened or not depending on the draw and the count), and must name the function and the
/// argument (a violation of the latter is collected in `violations`, reported at the end).
fn check_refusal(what: &str, err: &str, function: &str, violations: &mut Vec<String>) {
    assert!(
        !err.contains("panicked") && !err.contains("attempt to"),
        "{what}: {err}"
    );
    if !(err.contains(function) && (err.contains("epsilon") || err.contains("delta"))) {
        violations.push(format!(
            "{what}: the refusal does not name the function and the argument: {err}"
        ));
    }
}

/// An answered call whose calibration must have refused it (collected, reported at the end:
/// the value checks, which catch a wrapped count, come first).
fn check_answered(what: &str, refuse: bool, violations: &mut Vec<String>) {
    if refuse {
        violations.push(format!(
            "{what}: answered, but its noise is past the limits"
        ));
    }
}

/// Whether the calibration must refuse: the Laplace scale per count is past the limit, or the
/// epsilon is outside the supported range. (Gaussian calls may also be refused for a σ above
/// `MAX_GAUSSIAN_SIGMA` or an epsilon above 700 per value; those are checked by the message.)
fn must_refuse(mechanism: &str, epsilon: f64, per_count_divisor: f64) -> bool {
    let per_count = epsilon / per_count_divisor;
    epsilon > MAX_EPSILON
        || per_count < f64::MIN_POSITIVE
        || (mechanism == "laplace" && 1.0 / per_count > MAX_NOISE_SCALE)
}

#[tokio::test]
async fn every_epsilon_is_refused_or_answered_with_its_noise() -> Result<()> {
    let ctx = session(false, &["SET dp.public_groups = 'assert'"]).await?;
    // True cells (a, b, c, d) = (11, 9, 7, 13); in GROUP BY g each group has 20 rows.
    let (a, b, c, d) = (11i64, 9i64, 7i64, 13i64);
    let mut answered = 0;
    let mut refused = 0;
    let mut violations = Vec::new();
    for epsilon in sweep() {
        for mechanism in ["laplace", "gaussian"] {
            let mut options = format!("mechanism={mechanism}");
            if mechanism == "gaussian" {
                options.push_str(", delta=1e-5");
            }
            // dp_count, ungrouped (ε per count) and grouped (ε/2 per count).
            for (sql, divisor, truth) in [
                (
                    format!("SELECT dp_count(x, {epsilon:e}, '{options}') FROM t"),
                    1.0,
                    a + b + c + d,
                ),
                (
                    format!(
                        "SELECT dp_count(x, {epsilon:e}, '{options}') FROM t GROUP BY g ORDER BY g"
                    ),
                    2.0,
                    20,
                ),
            ] {
                let what = format!("{sql} (epsilon {epsilon:e})");
                match run(&ctx, &sql).await {
                    Ok(batches) => {
                        for batch in &batches {
                            let column = batch.column(0).as_primitive::<Int64Type>();
                            for i in 0..column.len() {
                                check_count(&what, column.value(i), truth, mechanism, epsilon);
                            }
                        }
                        let refuse = must_refuse(mechanism, epsilon, divisor);
                        check_answered(&what, refuse, &mut violations);
                        answered += 1;
                    }
                    Err(e) => {
                        check_refusal(&what, &e.to_string(), "dp_count", &mut violations);
                        refused += 1;
                    }
                }
            }
            // The table functions, both size modes (ε/2 per cell).
            for sizes in ["private", "public"] {
                let options = format!("{options}, group_sizes={sizes}");
                for function in ["dp_rr_ci", "dp_or_ci", "dp_rd_ci"] {
                    let sql = format!(
                        "SELECT {function}(outcome, exposed, {epsilon:e}, '{options}') AS ci FROM t"
                    );
                    let what = format!("{sql} (epsilon {epsilon:e})");
                    match run(&ctx, &sql).await {
                        Ok(batches) => {
                            let ci = batches[0].column(0).as_struct();
                            let field = |name: &str| {
                                ci.column_by_name(name)
                                    .unwrap_or_else(|| panic!("{what}: no field {name}"))
                                    .as_primitive::<Int64Type>()
                                    .value(0)
                            };
                            check_count(&what, field("exposed_cases"), a, mechanism, epsilon);
                            check_count(&what, field("unexposed_cases"), c, mechanism, epsilon);
                            check_count(&what, field("exposed_total"), a + b, mechanism, epsilon);
                            check_count(&what, field("unexposed_total"), c + d, mechanism, epsilon);
                            let refuse = must_refuse(mechanism, epsilon, 2.0);
                            check_answered(&what, refuse, &mut violations);
                            answered += 1;
                        }
                        Err(e) => {
                            check_refusal(&what, &e.to_string(), function, &mut violations);
                            refused += 1;
                        }
                    }
                }
                for function in ["dp_relative_risk", "dp_odds_ratio", "dp_risk_difference"] {
                    let sql = format!(
                        "SELECT {function}(outcome, exposed, {epsilon:e}, '{options}') FROM t"
                    );
                    let what = format!("{sql} (epsilon {epsilon:e})");
                    match run(&ctx, &sql).await {
                        Ok(batches) => {
                            let column = batches[0].column(0).as_primitive::<Float64Type>();
                            assert!(
                                column.is_null(0) || !column.value(0).is_nan(),
                                "{what}: NaN"
                            );
                            let refuse = must_refuse(mechanism, epsilon, 2.0);
                            check_answered(&what, refuse, &mut violations);
                            answered += 1;
                        }
                        Err(e) => {
                            check_refusal(&what, &e.to_string(), function, &mut violations);
                            refused += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
    // Both outcomes occur across the sweep.
    assert!(
        answered > 100 && refused > 100,
        "{answered} answered, {refused} refused"
    );
    Ok(())
}

#[tokio::test]
async fn the_local_ratio_methods_refuse_a_tiny_epsilon() -> Result<()> {
    let ctx = session(false, &["SET dp.delta = 1e-6"]).await?;
    for method in [
        "noised_log",
        "naive",
        "smooth_sensitivity",
        "ptr, ptr_bound=1",
    ] {
        for epsilon in [
            f64::from_bits(1),
            1e-300,
            2f64.powi(-70),
            1e-13,
            above_max(),
        ] {
            let sql = format!(
                "SELECT dp_relative_risk(outcome, exposed, {epsilon:e}, 'group_sizes=public, method={method}') FROM t"
            );
            let err = run(&ctx, &sql).await.unwrap_err().to_string();
            let mut violations = Vec::new();
            check_refusal(&sql, &err, "dp_relative_risk", &mut violations);
            assert!(violations.is_empty(), "{violations:?}");
        }
        // An ordinary epsilon is answered.
        let sql = format!(
            "SELECT dp_relative_risk(outcome, exposed, 1.0, 'group_sizes=public, method={method}') FROM t"
        );
        run(&ctx, &sql).await?;
    }
    Ok(())
}

fn above_max() -> f64 {
    f64::from_bits(MAX_EPSILON.to_bits() + 1)
}

#[tokio::test]
async fn group_selection_refuses_a_tiny_selection_epsilon() -> Result<()> {
    let ctx = session(
        false,
        &[
            "SET dp.selection_epsilon = 1e-300",
            "SET dp.selection_delta = 1e-5",
        ],
    )
    .await?;
    let err = run(&ctx, "SELECT g, dp_count(x, 1.0) FROM t GROUP BY g")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("private group selection: dp.selection_epsilon=1e-300 is out of range"),
        "{err}"
    );
    Ok(())
}

/// The locked session of the attack: `t` with or without person 41, a budget.
async fn locked(with_extra: bool) -> Result<SessionContext> {
    let ctx = session(
        with_extra,
        &[
            "SET dp.epsilon_budget = 1000",
            "SET dp.delta_budget = 0.5",
            "SET dp.selection_epsilon = 1",
            "SET dp.selection_delta = 1e-5",
        ],
    )
    .await?;
    lock(&ctx)?;
    Ok(ctx)
}

/// Every 64-bit integer of `batches` (top-level columns and struct fields) at the edge of the
/// type, where a wrapped or clamped noisy count lands.
fn edge_values(batches: &[RecordBatch]) -> Vec<i64> {
    fn scan(array: &dyn Array, out: &mut Vec<i64>) {
        if let Some(values) = array.as_primitive_opt::<Int64Type>() {
            out.extend(
                values
                    .iter()
                    .flatten()
                    .filter(|v| v.unsigned_abs() >= 1 << 62),
            );
        } else if let Some(fields) = array.as_struct_opt() {
            for column in fields.columns() {
                scan(column.as_ref(), out);
            }
        }
    }
    let mut out = Vec::new();
    for batch in batches {
        for column in batch.columns() {
            scan(column.as_ref(), &mut out);
        }
    }
    out
}

/// Runs one statement as the analyst (the locked path) and collects it.
async fn analyst_run(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    analyst_sql(ctx, sql).await?.collect().await
}

/// The attack of issue 27: at a tiny epsilon, `count + noise` wrapped and the answer was
/// `count − i64::MAX` (or the query failed on the overflow in a debug build only when the
/// draw was +i64::MAX, which also depends on the count). On neighbouring tables, with and
/// without one person, every such query must be refused identically, before it runs.
#[tokio::test]
async fn tiny_epsilons_give_neighbouring_tables_identical_refusals() -> Result<()> {
    let without = locked(false).await?;
    let with = locked(true).await?;
    let mut unnamed = Vec::new();
    for epsilon in [
        f64::from_bits(1),
        f64::MIN_POSITIVE,
        1e-300,
        2f64.powi(-100),
        2f64.powi(-70),
        2f64.powi(-64),
        2f64.powi(-50),
        1e-13,
    ] {
        for query in [
            format!("SELECT dp_count(x, {epsilon:e}) FROM t"),
            format!("SELECT g, dp_count(x, {epsilon:e}) FROM t GROUP BY g"),
            format!("SELECT dp_rr_ci(outcome, exposed, {epsilon:e}) FROM t"),
            format!("SELECT dp_relative_risk(outcome, exposed, {epsilon:e}) FROM t"),
            format!("SELECT dp_rd_ci(outcome, exposed, {epsilon:e}, 'mechanism=laplace') FROM t"),
        ] {
            // Several tries: the old code's outcome depended on the draw.
            for _ in 0..3 {
                let a = analyst_run(&without, &query).await;
                let b = analyst_run(&with, &query).await;
                // First the leak itself: an answer at the edge of i64 is `count − i64::MAX`.
                for (table, result) in [("without", &a), ("with", &b)] {
                    if let Ok(batches) = result {
                        let edge = edge_values(batches);
                        assert!(
                            edge.is_empty(),
                            "{query} ({table} person 41): answered {edge:?}, i.e. exact counts {:?}",
                            edge.iter()
                                .map(|v| v.wrapping_add(i64::MAX))
                                .collect::<Vec<_>>()
                        );
                    }
                }
                let (Err(a), Err(b)) = (a, b) else {
                    panic!("{query}: answered on a neighbouring table (must be refused)");
                };
                let (a, b) = (a.to_string(), b.to_string());
                assert_eq!(a, b, "{query}: the refusals differ");
                if !a.contains("argument 'epsilon'") {
                    unnamed.push(format!("{query}: {a}"));
                }
            }
        }
    }
    assert!(
        unnamed.is_empty(),
        "refusals not naming the argument: {unnamed:#?}"
    );
    // Nothing was charged for the refusals.
    let spent = analyst_run(
        &with,
        "SELECT epsilon FROM dp_budget() WHERE entry = 'spent'",
    )
    .await?;
    assert_eq!(
        spent[0].column(0).as_primitive::<Float64Type>().value(0),
        0.0
    );
    Ok(())
}

/// `(spent epsilon, remaining epsilon)` from `dp_budget()`.
async fn budget_status(ctx: &SessionContext) -> Result<(f64, f64)> {
    let batches = run(
        ctx,
        "SELECT entry, epsilon FROM dp_budget() WHERE entry IN ('spent', 'remaining')",
    )
    .await?;
    let (mut spent, mut remaining) = (f64::NAN, f64::NAN);
    for batch in &batches {
        let entry = batch.column(0).as_string::<i32>();
        let epsilon = batch.column(1).as_primitive::<Float64Type>();
        for i in 0..batch.num_rows() {
            match entry.value(i) {
                "spent" => spent = epsilon.value(i),
                _ => remaining = epsilon.value(i),
            }
        }
    }
    Ok((spent, remaining))
}

/// Spends 999999.999999999 of a budget of 1e6 in ten queries (the f64 total's last bit is then
/// 1.2e-10).
async fn spend_almost_all(ctx: &SessionContext) -> Result<()> {
    for _ in 0..9 {
        run(ctx, "SELECT dp_count(x, 100000) FROM t").await?;
    }
    run(ctx, "SELECT dp_count(x, 99999.999999999) FROM t").await?;
    Ok(())
}

/// Runs `query` up to `tries` times and returns how many were answered before the first
/// refusal (which must be the budget's), or `tries` if none was refused.
async fn answered_until_refused(ctx: &SessionContext, query: &str, tries: usize) -> usize {
    for i in 0..tries {
        if let Err(e) = run(ctx, query).await {
            let e = e.to_string();
            assert!(e.contains("dp budget exceeded"), "{e}");
            return i;
        }
    }
    tries
}

struct TempLedger(PathBuf);

impl TempLedger {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        Self(std::env::temp_dir().join(format!(
            "dp-numeric-{name}-{}-{nanos}.ledger",
            std::process::id()
        )))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempLedger {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test]
async fn tiny_charges_exhaust_a_large_budget() -> Result<()> {
    for ledger in [None, Some(TempLedger::new("exhaust"))] {
        let mut setup = vec!["SET dp.epsilon_budget = 1000000".to_string()];
        if let Some(ledger) = &ledger {
            setup.push(format!("SET dp.ledger = '{}'", ledger.path().display()));
        }
        let setup: Vec<&str> = setup.iter().map(String::as_str).collect();
        let ctx = session(false, &setup).await?;
        spend_almost_all(&ctx).await?;
        let before = budget_status(&ctx).await?;
        // 5e-11 is below half the f64 total's last bit: the old accountant lost every such
        // charge and answered without end. The last 1e-9 holds exactly 20 of them.
        let answered = answered_until_refused(&ctx, "SELECT dp_count(x, 5e-11) FROM t", 200).await;
        assert_eq!(answered, 20, "ledger {}", ledger.is_some());
        assert_eq!(before, (999_999.999_999_999, 1e-9));
        assert_eq!(budget_status(&ctx).await?, (1e6, 0.0));

        if let Some(ledger) = &ledger {
            // Round trip: the ledger's lines hold the exact charges, and a new session on it
            // sees the budget spent to the unit.
            let entries = datafusion_dp::sql::accounting::ledger::read(ledger.path())?;
            assert_eq!(entries.len(), 30);
            let total: u128 = entries.iter().map(|e| e.epsilon_units).sum();
            assert_eq!(total, 1_000_000 * 1_000_000_000_000);
            assert_eq!(entries[9].epsilon, 99_999.999_999_999);
            assert_eq!(entries[10].epsilon, 5e-11);
            let text = std::fs::read_to_string(ledger.path()).unwrap();
            assert!(text.contains("\t99999.999999999\t0\t"), "{text}");
            assert!(text.contains("\t0.00000000005\t0\t"), "{text}");
            let again = session(
                false,
                &[
                    "SET dp.epsilon_budget = 1000000",
                    &format!("SET dp.ledger = '{}'", ledger.path().display()),
                ],
            )
            .await?;
            assert_eq!(budget_status(&again).await?, (1e6, 0.0));
            let err = run(
                &again,
                "SELECT dp_count(x, 1e-12, 'mechanism=gaussian, delta=1e-5') FROM t",
            )
            .await
            .unwrap_err()
            .to_string();
            assert!(err.contains("spent epsilon=1000000 of 1000000"), "{err}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_charge_below_the_unit_costs_one_unit() -> Result<()> {
    // Gaussian calls accept epsilons far below the unit (σ stays bounded as ε → 0); each is
    // charged one unit (1e-12), so 10 units left allow exactly 10 of them.
    let ctx = session(
        false,
        &["SET dp.epsilon_budget = 1000000", "SET dp.delta_budget = 1"],
    )
    .await?;
    spend_almost_all(&ctx).await?;
    run(&ctx, "SELECT dp_count(x, 0.00000000099) FROM t").await?;
    let left = budget_status(&ctx).await?.1;
    let query = "SELECT dp_count(x, 1e-300, 'mechanism=gaussian, delta=1e-5') FROM t";
    let answered = answered_until_refused(&ctx, query, 100).await;
    assert_eq!(answered, 10);
    assert_eq!(left, 1e-11);
    let charges = run(
        &ctx,
        "SELECT epsilon FROM dp_budget() WHERE entry = 'charge' ORDER BY charged_at DESC LIMIT 1",
    )
    .await?;
    assert_eq!(
        charges[0].column(0).as_primitive::<Float64Type>().value(0),
        1e-12
    );
    Ok(())
}
