//! `dp_quantile` through SQL: the accuracy of released medians (seeded, tolerance derived
//! below), every epsilon refused by name or answered within the bounds, and what an analyst
//! would try with `q` and the clamping bounds.

mod common;

use common::config;
use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Float64Type, Int32Type};
use datafusion::error::Result;
use datafusion::prelude::*;
use datafusion_dp::{analyst_sql, lock};

/// Groups of the accuracy test, and values per group.
const REPLICATES: usize = 400;
const PER_GROUP: usize = 2000;

/// `t` (protected row by row) and its public copy `truth`: `rows` rows, group
/// `r = id % REPLICATES`, `x = (id / REPLICATES) / 20`: every group of `PER_GROUP` rows holds
/// the same values 0, 0.05, ..., 99.95 (independent noise per group).
async fn session(rows: usize, setup: &[&str]) -> Result<SessionContext> {
    let ctx = SessionContext::new_with_config(config(4, false));
    datafusion_dp::register(&ctx)?;
    let columns = format!(
        "CAST(value AS INT) AS id, CAST(value % {REPLICATES} AS INT) AS r,
         CAST(value / {REPLICATES} AS DOUBLE) / 20 AS x"
    );
    common::twin_tables(&ctx, &columns, rows, setup).await?;
    Ok(ctx)
}

async fn run(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    ctx.sql(sql).await?.collect().await
}

/// `(r, value)` rows of a two-column result, sorted by `r`.
fn values(batches: &[RecordBatch]) -> Vec<(i32, f64)> {
    let mut out: Vec<(i32, f64)> = batches
        .iter()
        .flat_map(|b| {
            let r = b.column(0).as_primitive::<Int32Type>().clone();
            let v = b.column(1).as_primitive::<Float64Type>().clone();
            (0..b.num_rows()).map(move |i| (r.value(i), v.value(i)))
        })
        .collect();
    out.sort_by_key(|(r, _)| *r);
    out
}

/// Released medians against the exact ones (DataFusion's `median` on the public copy), 400
/// groups of 2,000 values over [0, 100), at ε = 1 grouped: ε/2 = 0.5 per tree at sensitivity
/// 4, discrete Laplace of scale 8 (sd 8√2 ≈ 11.3) on every node count.
///
/// Tolerance. At each of the first two levels the descent's cut falls after about 8 of 16
/// children, whose summed noise has sd 11.3·√8 ≈ 32 counts, against 2,000 and 125 values
/// under the node: a value error of 32/2,000·100 = 32/125·6.25 = 1.6 each; at the third level
/// the node is 0.39 wide (noise dominates its ~8 values), at the last 0.024. So one group's
/// error has sd at most about √(2·1.6² + 0.39²) ≈ 2.3 (the statistics core's test measured
/// half its own such estimate). Each group must be within 6 sd (13.8); the mean of the 400
/// errors within 4 standard errors, 4·2.3/√400 = 0.46 (the descent is symmetric for these
/// evenly spread values, so it has no bias to first order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_medians_are_accurate() -> Result<()> {
    let ctx = session(
        REPLICATES * PER_GROUP,
        &["SET dp.public_groups = 'assert'", "SET dp.seed = 31"],
    )
    .await?;
    let noisy = values(
        &run(
            &ctx,
            "SELECT r, dp_quantile(x, 0.5, 0, 100, 1.0) FROM t GROUP BY r",
        )
        .await?,
    );
    let exact = values(&run(&ctx, "SELECT r, median(x) FROM truth GROUP BY r").await?);
    assert_eq!(noisy.len(), REPLICATES);
    assert_eq!(exact.len(), REPLICATES);
    let errors: Vec<f64> = noisy
        .iter()
        .zip(&exact)
        .map(|((r1, n), (r2, e))| {
            assert_eq!(r1, r2);
            n - e
        })
        .collect();
    let worst = errors.iter().map(|e| e.abs()).fold(0.0, f64::max);
    assert!(worst < 13.8, "a median off by {worst}");
    let mean = errors.iter().sum::<f64>() / errors.len() as f64;
    assert!(mean.abs() < 0.46, "mean error {mean}");
    Ok(())
}

/// Every epsilon, from the smallest positive double to the largest, is refused with an error
/// naming `dp_quantile` and `epsilon`, or answered with a value within the bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_epsilon_is_refused_by_name_or_answered_within_the_bounds() -> Result<()> {
    let ctx = session(40, &[]).await?;
    let above = |x: f64| f64::from_bits(x.to_bits() + 1);
    let mut answered = 0;
    for epsilon in [
        f64::from_bits(1),
        f64::MIN_POSITIVE,
        1e-300,
        1e-12,
        1e-9,
        1e-3,
        1.0,
        700.0,
        1e9,
        2f64.powi(40),
        above(2f64.powi(40)),
        1e300,
        f64::MAX,
    ] {
        let sql = format!("SELECT dp_quantile(x, 0.5, 0, 100, {epsilon:e}) FROM t");
        match run(&ctx, &sql).await {
            Ok(batches) => {
                let v = batches[0].column(0).as_primitive::<Float64Type>().value(0);
                assert!((0.0..=100.0).contains(&v), "epsilon {epsilon:e}: {v}");
                answered += 1;
            }
            Err(e) => {
                let e = e.to_string();
                assert!(
                    e.contains("dp_quantile: argument 'epsilon'"),
                    "epsilon {epsilon:e}: {e}"
                );
            }
        }
    }
    // 1e-3 .. 1e9 at least are answered.
    assert!(answered >= 5, "only {answered} epsilons answered");
    Ok(())
}

/// What an analyst would try with `q` and the bounds, in a locked session: each refused by
/// name, or answered within the declared bounds (one person's extreme value cannot pull the
/// answer outside them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_analyst_cannot_use_q_or_the_bounds_to_read_a_value() -> Result<()> {
    let ctx = session(
        40,
        &[
            "SET dp.epsilon_budget = 1e12",
            // One person with an extreme value.
            "INSERT INTO t VALUES (1000, 0, 1e300)",
        ],
    )
    .await?;
    lock(&ctx)?;
    let refused = [
        (
            "SELECT dp_quantile(x, x, 0, 100, 1.0) FROM t",
            "argument 'q'",
        ),
        (
            "SELECT dp_quantile(x, (SELECT max(x) FROM t), 0, 100, 1.0) FROM t",
            "",
        ),
        (
            "SELECT dp_quantile(x, 0.5, (SELECT min(x) FROM t), 100, 1.0) FROM t",
            "",
        ),
        (
            "SELECT dp_quantile(x, 'NaN'::double, 0, 100, 1.0) FROM t",
            "argument 'q'",
        ),
        (
            "SELECT dp_quantile(x, -0.0000001, 0, 100, 1.0) FROM t",
            "argument 'q'",
        ),
        (
            "SELECT dp_quantile(x, 0.5, 0, 'NaN'::double, 1.0) FROM t",
            "argument 'upper'",
        ),
        (
            "SELECT dp_quantile(x, 0.5, 100, 0, 1.0) FROM t",
            "argument 'lower'",
        ),
        (
            "SELECT dp_quantile(x, 0.5, -1e308, 1e308, 1.0) FROM t",
            "argument 'upper' - 'lower'",
        ),
        ("SELECT dp_quantile(x, 0.5, 0, 100, 1.0, 'q=1') FROM t", ""),
    ];
    for (sql, named) in refused {
        let error = match analyst_sql(&ctx, sql).await {
            Ok(df) => df.collect().await.err(),
            Err(e) => Some(e),
        };
        let error = error.map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("dp_quantile"), "{sql}: {error}");
        assert!(error.contains(named), "{sql}: {error}");
    }
    // The extreme value counts as the upper bound: at q = 1 the answer is at most 100, at
    // any epsilon.
    for epsilon in ["1.0", "1e9"] {
        let sql = format!("SELECT dp_quantile(x, 1, 0, 100, {epsilon}) FROM t");
        let batches = analyst_sql(&ctx, &sql).await?.collect().await?;
        let v = batches[0].column(0).as_primitive::<Float64Type>().value(0);
        assert!((0.0..=100.0).contains(&v), "{sql}: {v}");
    }
    Ok(())
}
