//! A table of public keys (`SET dp.public_groups = '<table>'`): declared keys without rows are
//! released with noise on zero, calibrated like every other group, and the phantom rows that
//! create them count nothing. Also: a catalog whose table lookup has to wait.

mod common;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use async_trait::async_trait;
use datafusion::catalog::{
    CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider, SchemaProvider, TableProvider,
};
use datafusion::error::Result;
use datafusion::prelude::SessionContext;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Keys 0..FULL have ROWS rows each; keys FULL..DECLARED are declared without rows.
const FULL: i64 = 2000;
const DECLARED: i64 = 4000;
const ROWS: i64 = 20;

async fn session(partitions: usize, skip_partial: bool) -> SessionContext {
    let ctx = SessionContext::new_with_config(common::config(partitions, skip_partial));
    datafusion_dp::register(&ctx).unwrap();
    // Every key declared twice (duplicates collapse), as INT (cast to the BIGINT key).
    ctx.sql(&format!(
        "CREATE TABLE declared AS SELECT CAST(value % {DECLARED} AS INT) AS g
         FROM generate_series(0, {}) t(value)",
        2 * DECLARED - 1
    ))
    .await
    .unwrap();
    // ROWS rows for each key below FULL, plus 100 undeclared keys with 10 rows each.
    ctx.sql(&format!(
        "CREATE TABLE big AS
           SELECT value % {FULL} AS g, value AS x FROM generate_series(1, {}) t(value)
           UNION ALL
           SELECT 100000 + value % 100 AS g, value AS x FROM generate_series(1, 1000) t(value)",
        FULL * ROWS
    ))
    .await
    .unwrap();
    ctx.sql("SET dp.public_groups = 'declared'").await.unwrap();
    // The keys table is public; the data table too, since the tests read its exact counts.
    ctx.sql("SET dp.public_tables = 'declared, big'")
        .await
        .unwrap();
    ctx
}

/// (key, released count) of every output row.
async fn released(ctx: &SessionContext, sql: &str) -> BTreeMap<i64, i64> {
    let batches: Vec<RecordBatch> = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let mut out = BTreeMap::new();
    for b in &batches {
        let keys = b.column(0).as_primitive::<Int64Type>();
        let counts = b.column(1).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            assert!(
                out.insert(keys.value(i), counts.value(i)).is_none(),
                "key {} released twice",
                keys.value(i)
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_declared_keys_get_noise_on_zero_and_phantom_rows_count_nothing() {
    // A grouped dp_count at ε = 2 spends ε/2 = 1 per group (a replaced row can change two
    // groups): discrete Laplace P(k) ∝ q^|k| with q = e^{-1}, mean 0 and variance
    // σ² = 2q/(1−q)² ≈ 1.841.
    //
    // Tolerance: over n = 2000 independent groups (secure noise, drawn per group), the sample
    // mean has standard error σ/√n (≈ 0.030) and the sample variance has standard error
    // √((μ₄ − σ⁴)/n) (delta method; μ₄ and σ² estimated from the sample, ≈ 0.09). Both are
    // close to normal at this n (CLT), so a 5-SE band fails a correct mechanism with
    // probability ≈ 6·10⁻⁷ per check (8 checks per run). The alternatives it must reject are
    // far outside: a phantom row that counted shifts the mean by 1 (≈ 33 SE); an empty key
    // released without noise has variance 0 (≈ 20 SE); a missing or extra key fails the key
    // set check.
    //
    // dp_count(g, ...) counts the key column itself, which is not NULL on the phantom rows:
    // only the `NOT __dp_phantom` filter keeps them out (dp_count(x, ...) would skip them as
    // NULL anyway). Checked with the default path and with skip-partial aggregation.
    let q = (-1.0f64).exp();
    let expected_var = 2.0 * q / (1.0 - q).powi(2);
    for (partitions, skip_partial) in [(4, false), (3, true)] {
        let ctx = session(partitions, skip_partial).await;
        let out = released(&ctx, "SELECT g, dp_count(g, 2.0) FROM big GROUP BY g").await;
        // Exactly the declared keys, once each: no undeclared key, no missing one.
        assert_eq!(
            out.keys().copied().collect::<Vec<_>>(),
            (0..DECLARED).collect::<Vec<_>>(),
            "partitions {partitions}, skip_partial {skip_partial}"
        );
        for (label, keys, exact) in [
            ("empty keys", FULL..DECLARED, 0),
            ("keys with rows", 0..FULL, ROWS),
        ] {
            let noise: Vec<f64> = keys.map(|k| (out[&k] - exact) as f64).collect();
            let (mean, var, se_mean, se_var) = common::moments(&noise);
            let context = format!(
                "{label} (partitions {partitions}, skip_partial {skip_partial}): mean {mean} \
                 (se {se_mean}), variance {var} (se {se_var}), expected 0 and {expected_var}"
            );
            assert!(mean.abs() < 5.0 * se_mean, "{context}");
            assert!((var - expected_var).abs() < 5.0 * se_var, "{context}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_aggregate_skips_the_phantom_rows() {
    // Exact at ε = 1e9: declared keys with rows keep their exact counts (not +1), empty ones
    // give 0 for the DP count and for DataFusion's own count(*) in the same aggregation.
    let ctx = session(4, false).await;
    let batches: Vec<RecordBatch> = ctx
        .sql("SELECT g, dp_count(g, 1e9), count(*) FROM big GROUP BY g")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut rows = 0;
    for b in &batches {
        let keys = b.column(0).as_primitive::<Int64Type>();
        let dp = b.column(1).as_primitive::<Int64Type>();
        let exact = b.column(2).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let want = if keys.value(i) < FULL { ROWS } else { 0 };
            assert_eq!(
                (dp.value(i), exact.value(i)),
                (want, want),
                "key {}",
                keys.value(i)
            );
            rows += 1;
        }
    }
    assert_eq!(rows, DECLARED);
}

/// A schema whose table lookup is not ready at once (as a remote catalog's would not be).
#[derive(Debug)]
struct SlowSchema(MemorySchemaProvider);

#[async_trait]
impl SchemaProvider for SlowSchema {
    fn table_names(&self) -> Vec<String> {
        self.0.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        tokio::task::yield_now().await;
        self.0.table(name).await
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        self.0.register_table(name, table)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.0.table_exist(name)
    }
}

async fn slow_catalog_query() -> Result<Vec<RecordBatch>> {
    let ctx = SessionContext::new();
    datafusion_dp::register(&ctx)?;
    let catalog = MemoryCatalogProvider::new();
    catalog.register_schema("s", Arc::new(SlowSchema(MemorySchemaProvider::new())))?;
    ctx.register_catalog("remote", Arc::new(catalog));
    ctx.sql("CREATE TABLE remote.s.keys (g VARCHAR) AS VALUES ('a'), ('z')")
        .await?;
    ctx.sql("CREATE TABLE t (g VARCHAR, x INT) AS VALUES ('a', 1), ('b', 2)")
        .await?;
    ctx.sql("SET dp.public_groups = 'remote.s.keys'").await?;
    ctx.sql("SET dp.public_tables = 'remote.s.keys'").await?;
    ctx.sql("SELECT g, dp_count(x, 1e9) FROM t GROUP BY g ORDER BY g")
        .await?
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_lookup_that_waits_is_awaited_on_a_multi_thread_runtime() {
    let batches = slow_catalog_query().await.unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| ")).collect();
    assert_eq!(rows.len(), 3, "{text}"); // header, a, z
    assert!(
        rows[1].starts_with("| a ") && rows[1].contains("| 1 "),
        "{text}"
    );
    assert!(
        rows[2].starts_with("| z ") && rows[2].contains("| 0 "),
        "{text}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_table_lookup_that_waits_is_refused_on_a_current_thread_runtime() {
    let err = slow_catalog_query().await.unwrap_err().to_string();
    assert!(
        err.contains("dp.public_groups = 'remote.s.keys'") && err.contains("current-thread"),
        "{err}"
    );
}
