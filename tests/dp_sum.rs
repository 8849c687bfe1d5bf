//! `dp_sum` and `dp_avg` through SQL: the noise of released sums and means and the coverage
//! of `dp_avg`'s interval (seeded, tolerance from the Monte Carlo standard error), every
//! epsilon refused by name or answered within its noise, and what an analyst would try with
//! the clamping bounds.

mod common;

use common::config;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Float64Type, Int64Type};
use datafusion::error::Result;
use datafusion::prelude::*;
use datafusion_dp::{analyst_sql, lock};

/// Replicates of the accuracy test: one released sum per replicate.
const REPLICATES: usize = 2000;

/// `t`: `rows` people (one row each, protected row by row), replicate `r = id % REPLICATES`,
/// an integer `x` in 0..=12 (so bounds [0, 10] clamp some; person 1 has `x = outlier`) and a
/// double `y = x / 2 + 0.3`; `truth` is a public copy, for the exact sums.
async fn session_with(
    rows: usize,
    skip_partial: bool,
    outlier: i64,
    setup: &[&str],
) -> Result<SessionContext> {
    let ctx = SessionContext::new_with_config(config(4, skip_partial));
    datafusion_dp::register(&ctx)?;
    let x = format!("CASE WHEN value = 1 THEN {outlier} ELSE (value * 7919) % 13 END");
    let columns = format!(
        "CAST(value AS INT) AS id, CAST(value % {REPLICATES} AS INT) AS r,
         CAST({x} AS BIGINT) AS x, CAST((value * 7919) % 13 AS DOUBLE) / 2 + 0.3 AS y"
    );
    common::twin_tables(&ctx, &columns, rows, setup).await?;
    Ok(ctx)
}

async fn session(rows: usize, skip_partial: bool, setup: &[&str]) -> Result<SessionContext> {
    session_with(rows, skip_partial, 1, setup).await
}

async fn run(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    ctx.sql(sql).await?.collect().await
}

/// `(r, value)` rows of a two-column result, as f64.
fn values(batches: &[RecordBatch]) -> Vec<(i64, f64)> {
    let mut out = Vec::new();
    for b in batches {
        let r = b
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        let v = b.column(1);
        for i in 0..b.num_rows() {
            let value = match v.data_type() {
                datafusion::arrow::datatypes::DataType::Int64 => {
                    v.as_primitive::<Int64Type>().value(i) as f64
                }
                _ => v.as_primitive::<Float64Type>().value(i),
            };
            out.push((r.value(i) as i64, value));
        }
    }
    out.sort_by_key(|(r, _)| *r);
    out
}

/// The variance of the discrete Laplace law `P(k) ∝ exp(-|k|/b)`: `2q/(1-q)²`, `q = e^(-1/b)`
/// (Canonne, Kamath & Steinke 2020). For the DOUBLE path `b` is in grid units of at most
/// `10/2^29`, where this is `2b²` to within 1e-15 relative: the test uses the continuous form.
fn discrete_laplace_variance(b: f64) -> f64 {
    let q = (-1.0 / b).exp();
    2.0 * q / (1.0 - q).powi(2)
}

/// Released sums minus the exact clamped sums (computed by DataFusion's own `sum` on the same
/// rows), one per replicate, for `column` at ε = 1 grouped (so ε/2 = 0.5 per group).
async fn errors(column: &str, skip_partial: bool) -> Result<Vec<f64>> {
    let ctx = session(
        REPLICATES * 20,
        skip_partial,
        &["SET dp.public_groups = 'assert'", "SET dp.seed = 29"],
    )
    .await?;
    let noisy = values(
        &run(
            &ctx,
            &format!("SELECT r, dp_sum({column}, 0, 10, 1.0) FROM t GROUP BY r"),
        )
        .await?,
    );
    let exact = values(
        &run(
            &ctx,
            &format!(
                "SELECT r, CAST(sum(least(greatest({column}, 0), 10)) AS DOUBLE) FROM truth GROUP BY r"
            ),
        )
        .await?,
    );
    assert_eq!(noisy.len(), REPLICATES);
    assert_eq!(exact.len(), REPLICATES);
    Ok(noisy
        .iter()
        .zip(&exact)
        .map(|((r1, n), (r2, e))| {
            assert_eq!(r1, r2);
            n - e
        })
        .collect())
}

/// The released sums are the exact clamped sums plus noise of mean 0 and the variance of the
/// discrete Laplace law at scale `b = Δ/(ε/2) = 10/0.5 = 20` (sensitivity 10: one row, bounds
/// [0, 10]; grouped, so ε/2 per group), for BIGINT and DOUBLE, with and without partial
/// aggregation (the states merged).
///
/// Tolerance: with `R = 2000` independent releases (seeded, so deterministic) the mean error has
/// standard error `sqrt(V/R)`, and the sample variance `sqrt((μ4 − V²)/R) = V·sqrt(5/R)` (the
/// Laplace law's fourth moment is `6V²`), 5% of `V`. Both are accepted within 4.5 standard
/// errors (a false alarm below 1e-5 for each); the old bug of ε per group instead of ε/2 (or
/// a sensitivity off by 2) changes the variance by 4x (75% of V, 15 standard errors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_sums_have_the_calibrated_noise() -> Result<()> {
    let b = 10.0 / 0.5;
    for (column, variance) in [("x", discrete_laplace_variance(b)), ("y", 2.0 * b * b)] {
        for skip_partial in [false, true] {
            let errors = errors(column, skip_partial).await?;
            let r = errors.len() as f64;
            let mean = errors.iter().sum::<f64>() / r;
            let var = errors.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / (r - 1.0);
            let mean_se = (variance / r).sqrt();
            let var_se = variance * (5.0 / r).sqrt();
            assert!(
                mean.abs() <= 4.5 * mean_se,
                "{column} skip_partial={skip_partial}: mean error {mean}, standard error {mean_se}"
            );
            assert!(
                (var - variance).abs() <= 4.5 * var_se,
                "{column} skip_partial={skip_partial}: variance {var}, want {variance} ± {var_se}"
            );
        }
    }
    Ok(())
}

/// The epsilons swept, from the smallest positive double to past the largest accepted.
fn sweep() -> Vec<f64> {
    let above = |x: f64| f64::from_bits(x.to_bits() + 1);
    let below = |x: f64| f64::from_bits(x.to_bits() - 1);
    let max = 2f64.powi(40);
    vec![
        f64::from_bits(1),
        f64::MIN_POSITIVE,
        1e-300,
        2f64.powi(-70),
        below(2f64.powi(-40)),
        2f64.powi(-40),
        2f64.powi(-39),
        1e-9,
        1e-3,
        1.0,
        700.0,
        1e9,
        below(max),
        max,
        above(max),
        1e300,
        f64::MAX,
    ]
}

/// Every epsilon is refused with an error naming `dp_sum` and `epsilon`, exactly when the
/// epsilon per group is outside `[2^-40, 2^40]` (the count's range at sensitivity 1 unit), or
/// answered with a finite sum within 60 noise scales (a draw beyond has probability below
/// e^-60) plus the grid's rounding, never with a wrapped or infinite value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_epsilon_is_refused_by_name_or_answered_within_its_noise() -> Result<()> {
    let ctx = session(40, false, &["SET dp.public_groups = 'assert'"]).await?;
    let mut violations = Vec::new();
    for column in ["x", "y"] {
        let sql =
            format!("SELECT CAST(sum(least(greatest({column}, 0), 10)) AS DOUBLE) FROM truth");
        let truth = run(&ctx, &sql).await?[0]
            .column(0)
            .as_primitive::<Float64Type>()
            .value(0);
        for epsilon in sweep() {
            let sql = format!("SELECT dp_sum({column}, 0, 10, {epsilon:e}) FROM t");
            let must_refuse = !(2f64.powi(-40)..=2f64.powi(40)).contains(&epsilon);
            match run(&ctx, &sql).await {
                Ok(batches) => {
                    let column_data = batches[0].column(0);
                    let value = match column_data.data_type() {
                        datafusion::arrow::datatypes::DataType::Int64 => {
                            column_data.as_primitive::<Int64Type>().value(0) as f64
                        }
                        _ => column_data.as_primitive::<Float64Type>().value(0),
                    };
                    // Scale 10/ε; the grid is at most 10/2^29 or a 2^-38 of the scale, and 40
                    // rows round by half a grid step each.
                    let scale = 10.0 / epsilon;
                    let bound =
                        60.0 * scale + 40.0 * (10.0 / 2f64.powi(29)).max(scale / 2f64.powi(38));
                    if must_refuse || !value.is_finite() || (value - truth).abs() > bound {
                        violations.push(format!(
                            "{column} epsilon {epsilon:e}: answered {value} (truth {truth}, bound {bound})"
                        ));
                    }
                }
                Err(e) => {
                    let e = e.to_string();
                    if !must_refuse || !e.contains("dp_sum: argument 'epsilon'") {
                        violations.push(format!("{column} epsilon {epsilon:e}: {e}"));
                    }
                }
            }
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
    Ok(())
}

/// A locked analyst's session over `t` (40 people), person 1 with `x = outlier`.
async fn locked(outlier: i64) -> Result<SessionContext> {
    let ctx = session_with(40, false, outlier, &["SET dp.epsilon_budget = 1e12"]).await?;
    lock(&ctx)?;
    Ok(ctx)
}

/// `dp_sum(x, 0, 10, 1e9)` over `t` with person 1's `x = outlier`.
async fn released(outlier: i64) -> Result<i64> {
    let ctx = locked(outlier).await?;
    let b = analyst(&ctx, "SELECT dp_sum(x, 0, 10, 1e9) FROM t").await?;
    Ok(b[0].column(0).as_primitive::<Int64Type>().value(0))
}

async fn analyst(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    analyst_sql(ctx, sql).await?.collect().await
}

/// What an analyst would do with the clamping bounds: bounds read from the data, bounds that
/// are NaN or infinite, reversed, so wide their sensitivity overflows, or equal and huge, and
/// outliers past the bounds. Each is refused naming the function and the argument, or answered
/// with the clamped sum (at a huge epsilon, where the noise vanishes): one person's outlier
/// moves it by at most the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clamping_bounds_cannot_be_turned_against_the_guarantee() -> Result<()> {
    let ctx = locked(3).await?;
    for (sql, message) in [
        (
            "SELECT dp_sum(x, x, 10, 1.0) FROM t",
            "dp_sum: argument 'lower' must be a constant",
        ),
        (
            "SELECT dp_sum(x, 0, (SELECT max(x) FROM t), 1.0) FROM t",
            "dp_sum",
        ),
        (
            "SELECT dp_sum(x, 0, CAST('NaN' AS DOUBLE), 1.0) FROM t",
            "dp_sum: argument 'upper' must be a finite number",
        ),
        (
            "SELECT dp_sum(x, CAST('-inf' AS DOUBLE), 0, 1.0) FROM t",
            "dp_sum: argument 'lower' must be a finite number",
        ),
        (
            "SELECT dp_sum(x, 10, 0, 1.0) FROM t",
            "dp_sum: argument 'lower'=10 is above argument 'upper'=0",
        ),
        (
            "SELECT dp_sum(y, -1e308, 1e308, 1.0) FROM t",
            "dp_sum: arguments 'lower'=-1e308 and 'upper'=1e308: the sensitivity",
        ),
        (
            "SELECT dp_sum(y, 1e300, 1e300, 1.0) FROM t",
            "dp_sum: arguments 'lower' and 'upper' are too wide",
        ),
        (
            "SELECT dp_sum(x, NULL, 10, 1.0) FROM t",
            "dp_sum: argument 'lower' must be a constant number",
        ),
        (
            "SELECT dp_sum(x, 'a', 10, 1.0) FROM t",
            "dp_sum: argument 'lower' must be a number",
        ),
        (
            "SELECT dp_sum(x, 0, 10, 1.0, 'confidence=0.9') FROM t",
            "dp_sum: argument 'options'",
        ),
        (
            "SELECT dp_sum(x, 0, 1.0) FROM t",
            "dp_sum takes 4 or 5 arguments (expr, lower, upper, epsilon [, options]), got 3",
        ),
    ] {
        match analyst(&ctx, sql).await {
            Ok(_) => panic!("answered: {sql}"),
            Err(e) => assert!(e.to_string().contains(message), "{sql}: {e}"),
        }
    }
    // One person's outlier, far past the bounds, moves the released sum by at most the bound
    // (ε = 1e9: noise of scale 1e-8 in units, zero but with probability 1e-43).
    let (with, without) = (released(i64::MAX).await?, released(0).await?);
    assert_eq!(with - without, 10, "the outlier counts as the upper bound");
    let (with, without) = (released(i64::MIN).await?, released(0).await?);
    assert_eq!(with, without, "the outlier counts as the lower bound");
    // Bounds at the ends of BIGINT: the sum of clamped values is exact in i128; a release past
    // BIGINT is an error (a function of the noisy value only), never a wrap. Person 1's
    // i64::MAX plus the others' values leaves BIGINT whatever the noise.
    let ctx = locked(i64::MAX).await?;
    match analyst(
        &ctx,
        "SELECT dp_sum(x, -9223372036854775808, 9223372036854775807, 1.0) FROM t",
    )
    .await
    {
        Ok(b) => assert!(b[0].column(0).is_valid(0)),
        // In a locked session the text of an execution error is withheld.
        Err(e) => assert!(e.to_string().contains("dp_sum: the"), "{e}"),
    }
    Ok(())
}

/// `dp_avg(y, 0, 10, 1.0)` grouped, over `REPLICATES` groups of 200 rows: its estimate's error
/// around each group's exact clamped mean has the variance of the delta method for the two
/// noises, and its interval covers that mean at the stated 95%.
///
/// The noises: ε = 1 is halved for the sum and the count and halved again per group (GROUP
/// BY), so each is calibrated for 0.25: the sum (sensitivity 10) with Laplace scale 40
/// (variance 2·40² = 3200 on its fine grid), the count (sensitivity 1) with discrete Laplace
/// scale 4. The error of `sum/count` is `(N_s − mean·N_c)/count` to first order, of variance
/// `(3200 + mean²·V_c)/count²` (count = 200, about 0.086 here).
///
/// Tolerance: with `R = 2000` groups, the coverage's standard error is
/// `sqrt(0.95·0.05/R) = 0.0049`, accepted within 4.5 of them (0.022); the error variance's is
/// at most `V·sqrt(5/R)` (Laplace fourth moment `6V²`; the mixture of two Laplace noises has
/// less), 5% of V, accepted within 4.5 of them. A sum or count calibrated for 0.5 instead of
/// 0.25 (a split forgotten) changes the variance by about 4x; an interval without the sum's
/// noise would cover almost never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dp_avg_has_the_delta_method_s_noise_and_covers() -> Result<()> {
    let ctx = session(
        REPLICATES * 200,
        false,
        &["SET dp.public_groups = 'assert'", "SET dp.seed = 29"],
    )
    .await?;
    let released = run(
        &ctx,
        "SELECT r, a['estimate'], a['lower'], a['upper'] FROM
           (SELECT r, dp_avg(y, 0, 10, 1.0) AS a FROM t GROUP BY r) ORDER BY r",
    )
    .await?;
    let exact = values(
        &run(
            &ctx,
            "SELECT r, avg(least(greatest(y, 0), 10)) FROM truth GROUP BY r ORDER BY r",
        )
        .await?,
    );
    let mut rows = Vec::new();
    for b in &released {
        let column = |i: usize| b.column(i).as_primitive::<Float64Type>().clone();
        let (estimate, lower, upper) = (column(1), column(2), column(3));
        for i in 0..b.num_rows() {
            rows.push((estimate.value(i), lower.value(i), upper.value(i)));
        }
    }
    assert_eq!(rows.len(), REPLICATES);
    let r = REPLICATES as f64;
    let covered = rows
        .iter()
        .zip(&exact)
        .filter(|((_, lo, hi), (_, m))| lo <= m && m <= hi)
        .count() as f64
        / r;
    let errors: Vec<f64> = rows
        .iter()
        .zip(&exact)
        .map(|((e, _, _), (_, m))| e - m)
        .collect();
    let mean_of_means = exact.iter().map(|(_, m)| m).sum::<f64>() / r;
    let predicted = (2.0 * 40.0 * 40.0 + mean_of_means.powi(2) * discrete_laplace_variance(4.0))
        / 200f64.powi(2);
    let mean = errors.iter().sum::<f64>() / r;
    let var = errors.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / (r - 1.0);
    let coverage_se = (0.95 * 0.05 / r).sqrt();
    assert!(
        (covered - 0.95).abs() <= 4.5 * coverage_se,
        "coverage {covered}, want 0.95 ± {}",
        4.5 * coverage_se
    );
    assert!(
        (var - predicted).abs() <= 4.5 * predicted * (5.0 / r).sqrt(),
        "error variance {var}, predicted {predicted}"
    );
    assert!(
        mean.abs() <= 4.5 * (predicted / r).sqrt(),
        "mean error {mean}"
    );
    Ok(())
}
