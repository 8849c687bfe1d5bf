//! End-to-end properties of the SQL aggregates: noise drawn once per group after the merge,
//! reproducible seeded mode independent of partitioning, fresh noise without a seed.

mod common;

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use arrow::datatypes::{Float64Type, Int64Type};
use datafusion::prelude::SessionContext;

const GROUPS: i64 = 2000;

async fn session(partitions: usize, skip_partial: bool) -> SessionContext {
    let ctx = SessionContext::new_with_config(common::config(partitions, skip_partial));
    datafusion_dp::register(&ctx).unwrap();
    // The group keys (g = value % 2000) are public: every key is known in advance.
    ctx.sql("SET dp.public_groups = 'assert'").await.unwrap();
    // The tests compare DP releases with the exact counts, so the table is declared public
    // (a table protected row by row gets the same calibration: one row in one group).
    ctx.sql("SET dp.public_tables = 'big'").await.unwrap();
    // 2000 groups of 20 rows; every batch of 1000 rows touches half the groups, and batches
    // are spread round-robin over the partitions, so each group is split across partitions.
    ctx.sql(&format!(
        "CREATE TABLE big AS SELECT value % {GROUPS} AS g, value AS x,
                value % 3 = 0 AS o, (value / {GROUPS}) % 2 = 0 AS e
         FROM generate_series(1, {}) t(value)",
        GROUPS * 20
    ))
    .await
    .unwrap();
    ctx
}

async fn collect(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql).await.unwrap().collect().await.unwrap()
}

fn int_column(batches: &[RecordBatch], col: usize) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| b.column(col).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

const SEEDED_QUERY: &str = "SELECT g, dp_count(x, 0.7) AS n,
        dp_relative_risk(o, e, 0.9) AS rr,
        dp_rr_ci(o, e, 0.9, 'mechanism=gaussian, delta=1e-6')['exposed_cases'] AS ci_x
    FROM big GROUP BY g ORDER BY g";

async fn seeded_run(partitions: usize, skip_partial: bool) -> Vec<RecordBatch> {
    let ctx = session(partitions, skip_partial).await;
    ctx.sql("SET dp.seed = 12345").await.unwrap();
    collect(&ctx, SEEDED_QUERY).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_output_does_not_depend_on_partitioning() {
    let one = seeded_run(1, false).await;
    let eight = seeded_run(8, false).await;
    let three_skipping = seeded_run(3, true).await;
    let concat = |b: &[RecordBatch]| arrow::compute::concat_batches(&b[0].schema(), b).unwrap();
    assert_eq!(concat(&one).num_rows(), GROUPS as usize);
    assert_eq!(concat(&one), concat(&eight));
    assert_eq!(concat(&one), concat(&three_skipping));
    // And it is noisy: not every released count equals the exact count of 20.
    let counts = int_column(&one, 1);
    assert!(counts.iter().filter(|&&c| c != 20).count() > GROUPS as usize / 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noise_is_added_once_per_group_after_the_merge() {
    // Each group's 20 rows are spread over 8 partitions. If noise were added per partial
    // state, the released count would carry the sum of up to 8 noise draws (variance ×8).
    // A grouped dp_count at ε = 2 uses ε/2 = 1 per group (a replaced row can change two
    // groups): Laplace scale 1, exact discrete variance 2q/(1−q)², q = e^{-1}, ≈ 1.841.
    // Over 2000 groups the sample variance has standard error sqrt((μ4 − σ⁴)/n) (estimated
    // from the sample, ≈ 0.06); the assertion allows 5 of them, far below the ×8 alternative.
    let ctx = session(8, false).await;
    let batches = collect(
        &ctx,
        "SELECT dp_count(x, 2.0) - count(x) FROM big GROUP BY g",
    )
    .await;
    let noise: Vec<f64> = int_column(&batches, 0).iter().map(|&v| v as f64).collect();
    let (_, var, _, se) = common::moments(&noise);
    let q = (-1.0f64).exp();
    let expected = 2.0 * q / (1.0 - q).powi(2);
    assert!(
        (var - expected).abs() < 5.0 * se,
        "variance {var}, expected {expected} (se {se})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_seed_every_query_draws_fresh_noise() {
    let ctx = session(4, false).await;
    let sql = "SELECT g, dp_count(x, 0.5) FROM big GROUP BY g ORDER BY g";
    let first = int_column(&collect(&ctx, sql).await, 1);
    let second = int_column(&collect(&ctx, sql).await, 1);
    // Scale-2 Laplace: P(two draws equal) < 0.25 per group; all 2000 equal is impossible.
    let same = first.iter().zip(&second).filter(|(a, b)| a == b).count();
    assert!(same < GROUPS as usize / 2, "{same} identical groups");
    // The struct says whether the result came from a seed.
    let batches = collect(&ctx, "SELECT dp_rr_ci(o, e, 1.0)['seeded'] FROM big").await;
    let seeded: &BooleanArray = batches[0].column(0).as_boolean();
    assert!(!seeded.value(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_relative_risk_is_consistent_with_exact_counts_at_large_epsilon() {
    // At ε = 1e9 the noise is 0 with overwhelming probability, so the SQL estimate must equal
    // the relative risk computed from DataFusion's own exact counts in every group.
    let ctx = session(8, false).await;
    let batches = collect(
        &ctx,
        "SELECT dp_relative_risk(o, e, 1e9) AS dp,
                (count(*) FILTER (WHERE o AND e) * 1.0 / count(*) FILTER (WHERE e))
                / (greatest(count(*) FILTER (WHERE o AND NOT e), 1) * 1.0 / count(*) FILTER (WHERE NOT e)) AS exact
         FROM big GROUP BY g",
    )
    .await;
    for b in &batches {
        let dp = b.column(0).as_primitive::<Float64Type>();
        let exact = b.column(1).as_primitive::<Float64Type>();
        for i in 0..b.num_rows() {
            assert!(dp.is_valid(i));
            assert!((dp.value(i) - exact.value(i)).abs() < 1e-12);
        }
    }
}

/// Contribution bounding keeps a sample of each unit's rows; under `dp.seed` that sample, like
/// the noise, must not depend on the order the rows arrive in or on the partitioning. 300
/// patients with 12 visits each, at most 3 kept per patient, at ε = 1e9 (noise 0), so the
/// released case counts are those of the rows kept: the same rows in reverse order, over 1 and
/// 8 partitions, must give the same release. (Each patient has C(12, 3) = 220 possible samples;
/// two independent draws agree on all 300 patients with probability far below 1e-100.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_row_sample_does_not_depend_on_row_order_or_partitioning() {
    async fn run(partitions: usize, order: &str) -> Vec<i64> {
        let ctx = SessionContext::new_with_config(common::config(partitions, false));
        datafusion_dp::register(&ctx).unwrap();
        ctx.sql(&format!(
            "CREATE TABLE visits AS SELECT value % 300 AS patient_id, value % 7 < 3 AS outcome,
                    value % 5 < 2 AS exposed, value AS visit
             FROM generate_series(1, 3600) t(value) ORDER BY value {order}"
        ))
        .await
        .unwrap();
        for set in [
            "SET dp.protected_tables = 'visits(patient_id)'",
            "SET dp.max_rows_per_unit = 3",
            "SET dp.seed = 7",
        ] {
            ctx.sql(set).await.unwrap();
        }
        let batches = collect(
            &ctx,
            "SELECT ci['exposed_cases'], ci['exposed_total'], ci['unexposed_cases'],
                    ci['unexposed_total']
             FROM (SELECT dp_rr_ci(outcome, exposed, 1e9) AS ci FROM visits)",
        )
        .await;
        (0..4)
            .map(|c| batches[0].column(c).as_primitive::<Int64Type>().value(0))
            .collect()
    }
    let first = run(1, "ASC").await;
    assert_eq!(first, run(8, "DESC").await);
    assert_eq!(first, run(3, "ASC").await);
    // 900 rows kept in all (3 of each patient's 12), and the sample is not all of one kind.
    assert_eq!(first[1] + first[3], 900, "{first:?}");
    assert!(first[0] > 0 && first[0] < first[1], "{first:?}");
}
