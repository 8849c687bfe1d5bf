//! Benchmarks: DP aggregates against DataFusion's own exact aggregates, side by side, on the
//! same generated data (the quickstart schema, with an integer group key).
//!
//!     cargo run --release --example bench -- generate [dataset] # Parquet files (once)
//!     cargo run --release --example bench -- pairs [filter]    # timed pairs, medians, ratios
//!     cargo run --release --example bench -- sampler           # noise samples per second
//!     cargo run --release --example bench -- intervals [filter] # interval step per group
//!     cargo run --release --example bench -- query <dataset> <memory|parquet> <query-name>
//!                                                              # one query (for /usr/bin/time)
//!
//! Data lives in `$DP_BENCH_DIR` (default `$TMPDIR/datafusion-dp-bench`). Each pair is run
//! interleaved (A, B, A, B, ...) after one warm-up of each, so both sides see the same
//! machine state; the report gives the median of each side and the ratio of medians.
//! `DP_BENCH_MEMORY_LIMIT=<bytes>` gives every session a memory pool of that size.

use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::datasource::MemTable;
use datafusion::prelude::*;
use datafusion_dp::outln;
use datafusion_dp::stats::rng::secure_rng;
use datafusion_dp::stats::simulation::Design;
use datafusion_dp::stats::{
    CountNoise, GaussianCalibration, IntervalMethod, Mechanism, RatioStatistic, TableNoise,
    TwoByTwo,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// (name, rows, groups, rows per patient): `patient_id` is the row number divided by the last
/// (for `_scattered`, the number of a row the permutation there maps it to).
/// Datasets with several rows per patient (names with `u` after the number of patients) are
/// for [`UNIT_PAIRS`]; the others, one row per patient, for [`PAIRS`].
const DATASETS: [(&str, u64, u64, u64); 14] = [
    ("10M_100g", 10_000_000, 100, 1),
    ("10M_100kg", 10_000_000, 100_000, 1),
    ("10M_1Mg", 10_000_000, 1_000_000, 1),
    ("20M_1Mg", 20_000_000, 1_000_000, 1),
    ("2M_100g_1Mu", 2_000_000, 100, 2),
    ("2M_100g_200ku", 2_000_000, 100, 10),
    // Issue 43's workload: 10M visits of 1M patients (10 each, in about 10 groups) in 1,000
    // groups.
    ("10M_1000g_1Mu", 10_000_000, 1000, 10),
    // The same with each patient's visits in one group (`_home`: the group is drawn from the
    // patient, as a region of residence is), so each (patient, group) has ten rows.
    ("10M_1000g_1Mu_home", 10_000_000, 1000, 10),
    // The same rows with each patient's visits scattered over the table (`_scattered`: the
    // patient of row r is that of row (r * 7919) mod rows, a permutation), as in a table kept
    // in the order of time: the other datasets hold a patient's visits in adjacent rows.
    ("10M_1000g_1Mu_scattered", 10_000_000, 1000, 10),
    // The same shape at 3x and 10x the rows, for how the bounding scales (`query` mode).
    ("30M_1000g_3Mu", 30_000_000, 1000, 10),
    ("100M_1000g_10Mu", 100_000_000, 1000, 10),
    // And with the units scattered, at the same three sizes.
    ("30M_1000g_3Mu_scattered", 30_000_000, 1000, 10),
    ("100M_1000g_10Mu_scattered", 100_000_000, 1000, 10),
    // One row per patient, 1M patients, for the unique-unit pair (no bounding at all).
    ("1M_1000g", 1_000_000, 1000, 1),
];

/// (name, DP query, exact baseline, session settings for the DP side)
const PAIRS: [(&str, &str, &str, &str); 17] = [
    (
        "dp_count vs count",
        "SELECT grp, dp_count(patient_id, 1.0) FROM visits GROUP BY grp",
        "SELECT grp, count(patient_id) FROM visits GROUP BY grp",
        "",
    ),
    (
        "dp_relative_risk vs 4 exact counts",
        "SELECT grp, dp_relative_risk(outcome, exposed, 1.0) FROM visits GROUP BY grp",
        FOUR_COUNTS,
        "",
    ),
    (
        "dp_rr_ci vs 4 exact counts",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0) FROM visits GROUP BY grp",
        FOUR_COUNTS,
        "",
    ),
    (
        "dp_rr_ci seeded vs secure",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0) FROM visits GROUP BY grp",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0) FROM visits GROUP BY grp",
        "SET dp.seed = 1",
    ),
    (
        "dp_rr_ci gaussian vs laplace",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0, 'mechanism=gaussian, delta=1e-6') FROM visits GROUP BY grp",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0) FROM visits GROUP BY grp",
        "",
    ),
    (
        "dp_rr_ci bootstrap vs score (default, closed form)",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0, 'ci_method=bootstrap') FROM visits GROUP BY grp",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0) FROM visits GROUP BY grp",
        "",
    ),
    (
        "dp_rr_ci score (default) vs conservative",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0) FROM visits GROUP BY grp",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0, 'ci_method=conservative') FROM visits GROUP BY grp",
        "",
    ),
    (
        "dp_rr_ci log vs conservative",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0, 'ci_method=log') FROM visits GROUP BY grp",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0, 'ci_method=conservative') FROM visits GROUP BY grp",
        "",
    ),
    (
        "dp_or_ci (score, default) vs 4 exact counts",
        "SELECT grp, dp_or_ci(outcome, exposed, 1.0) FROM visits GROUP BY grp",
        FOUR_COUNTS,
        "",
    ),
    (
        "dp_rd_ci vs 4 exact counts",
        "SELECT grp, dp_rd_ci(outcome, exposed, 1.0) FROM visits GROUP BY grp",
        FOUR_COUNTS,
        "",
    ),
    (
        // In a DP query a cast, an operator and a function that can fail are made total
        // (try_cast_to_Int32, try_divide, try_abs; docs/privacy-analysis.md "Errors are outputs"); the
        // exact query runs them as they are.
        "dp_count vs count, fallible filter",
        "SELECT grp, dp_count(patient_id, 1.0) FROM visits WHERE CAST(grp AS INT) > -1 AND patient_id / (grp + 1) >= 0 AND abs(patient_id - 5) > 1 GROUP BY grp",
        "SELECT grp, count(patient_id) FROM visits WHERE CAST(grp AS INT) > -1 AND patient_id / (grp + 1) >= 0 AND abs(patient_id - 5) > 1 GROUP BY grp",
        "",
    ),
    (
        // String functions in a DP query run as total forms whose outputs are capped per row
        // and rebuilt without the bytes of NULL rows on every batch (try_concat, try_upper;
        // "Errors are outputs"); the exact query runs them as they are.
        "dp_count vs count, string functions",
        "SELECT grp, dp_count(patient_id, 1.0) FROM visits WHERE concat(upper(CAST(visit_id % 97 AS VARCHAR)), ' visits of group ', CAST(grp AS VARCHAR)) <> 'x' GROUP BY grp",
        "SELECT grp, count(patient_id) FROM visits WHERE concat(upper(CAST(visit_id % 97 AS VARCHAR)), ' visits of group ', CAST(grp AS VARCHAR)) <> 'x' GROUP BY grp",
        "",
    ),
    (
        // The value is an expression of the row so both sides compute it; the DP side clamps it,
        // snaps it to the grid and sums exact integers (dp_sum.rs).
        "dp_sum vs sum, integer",
        "SELECT grp, dp_sum(visit_id % 1000, 0, 999, 1.0) FROM visits GROUP BY grp",
        "SELECT grp, sum(visit_id % 1000) FROM visits GROUP BY grp",
        "",
    ),
    (
        "dp_sum vs sum, double",
        "SELECT grp, dp_sum(CAST(visit_id % 1000 AS DOUBLE) / 8, 0.0, 125.0, 1.0) FROM visits GROUP BY grp",
        "SELECT grp, sum(CAST(visit_id % 1000 AS DOUBLE) / 8) FROM visits GROUP BY grp",
        "",
    ),
    (
        "dp_avg vs avg",
        "SELECT grp, dp_avg(CAST(visit_id % 1000 AS DOUBLE) / 8, 0.0, 125.0, 1.0) FROM visits GROUP BY grp",
        "SELECT grp, avg(CAST(visit_id % 1000 AS DOUBLE) / 8) FROM visits GROUP BY grp",
        "",
    ),
    (
        "dp_count gaussian vs count",
        "SELECT grp, dp_count(patient_id, 1.0, 'mechanism=gaussian, delta=1e-6') FROM visits GROUP BY grp",
        "SELECT grp, count(patient_id) FROM visits GROUP BY grp",
        "",
    ),
    (
        // A unit column declared one row per unit (issue 43): no bounding work.
        "dp_rr_ci unique unit vs 4 exact counts",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0) FROM visits GROUP BY grp",
        FOUR_COUNTS,
        "SET dp.protected_tables = 'visits(patient_id unique)'",
    ),
];

/// Contribution bounding: the same DP query over `visits` protected by its unit column
/// `patient_id` (the bounding rewrite) and protected row by row (no rewrite), and the unit
/// query against DataFusion's exact count. (name, DP query, baseline, DP side's settings,
/// baseline side's settings.)
const UNIT_PAIRS: [(&str, &str, &str, &str, &str); 6] = [
    (
        "dp_count unit vs row protection",
        "SELECT grp, dp_count(patient_id, 1.0) FROM visits GROUP BY grp",
        "SELECT grp, dp_count(patient_id, 1.0) FROM visits GROUP BY grp",
        "SET dp.protected_tables = 'visits(patient_id)'",
        "SET dp.protected_tables = 'visits'",
    ),
    (
        "dp_rr_ci unit vs row protection",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0) FROM visits GROUP BY grp",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0) FROM visits GROUP BY grp",
        "SET dp.protected_tables = 'visits(patient_id)'",
        "SET dp.protected_tables = 'visits'",
    ),
    (
        "dp_count unit vs count",
        "SELECT grp, dp_count(patient_id, 1.0) FROM visits GROUP BY grp",
        "SELECT grp, count(patient_id) FROM visits GROUP BY grp",
        "SET dp.protected_tables = 'visits(patient_id)'",
        "",
    ),
    (
        "dp_rr_ci unit vs 4 exact counts",
        "SELECT grp, dp_rr_ci(outcome, exposed, 1.0) FROM visits GROUP BY grp",
        FOUR_COUNTS,
        "SET dp.protected_tables = 'visits(patient_id)'",
        "",
    ),
    (
        // The floor of any bounding (issue 43): DataFusion's own hash aggregate by the unit,
        // keeping one group of each patient (its smallest), then counting by group. The DP
        // side keeps one keyed-random group of each patient and one row of it.
        "dp_count unit vs exact count of each patient's first group",
        "SELECT grp, dp_count(patient_id, 1.0) FROM visits GROUP BY grp",
        "SELECT grp, count(*) FROM (SELECT patient_id, min(grp) AS grp FROM visits GROUP BY patient_id) GROUP BY grp",
        "SET dp.protected_tables = 'visits(patient_id)'",
        "",
    ),
    (
        // One row per patient proved by the plan (issue 43): the per-patient table, no
        // bounding, against the same exact per-patient table's four counts.
        "dp_rr_ci per patient vs 4 exact counts per patient",
        "SELECT dp_rr_ci(o, e, 1.0) FROM (SELECT patient_id, bool_or(outcome) AS o, bool_or(exposed) AS e FROM visits GROUP BY patient_id)",
        "SELECT count(*) FILTER (WHERE o AND e), count(*) FILTER (WHERE e), count(*) FILTER (WHERE o AND NOT e), count(*) FILTER (WHERE NOT e) FROM (SELECT patient_id, bool_or(outcome) AS o, bool_or(exposed) AS e FROM visits GROUP BY patient_id)",
        "SET dp.protected_tables = 'visits(patient_id)'",
        "",
    ),
];

const FOUR_COUNTS: &str = "SELECT grp,
    count(*) FILTER (WHERE outcome AND exposed),
    count(*) FILTER (WHERE exposed),
    count(*) FILTER (WHERE outcome AND NOT exposed),
    count(*) FILTER (WHERE NOT exposed)
  FROM visits GROUP BY grp";

fn data_dir() -> PathBuf {
    std::env::var_os("DP_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("datafusion-dp-bench"))
}

fn dataset_path(name: &str) -> PathBuf {
    data_dir().join(name)
}

async fn session() -> Result<SessionContext> {
    // DP_BENCH_MEMORY_LIMIT=1073741824: a memory pool of that many bytes (a locked session's
    // default per-query limit is 1 GiB), so that operators spill or fail as they would there:
    // a `FairSpillPool`, as a locked session's (`owner::tables::limited_runtime`).
    let runtime = match std::env::var("DP_BENCH_MEMORY_LIMIT") {
        Ok(bytes) => datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(
                datafusion::execution::memory_pool::FairSpillPool::new(bytes.parse()?),
            ))
            .build_arc()?,
        Err(_) => Arc::new(datafusion::execution::runtime_env::RuntimeEnv::default()),
    };
    let ctx = SessionContext::new_with_config_rt(SessionConfig::new(), runtime);
    datafusion_dp::register(&ctx)?;
    // The generated group keys are public.
    ctx.sql("SET dp.public_groups = 'assert'").await?;
    // The baselines are exact counts over the same table, so the synthetic data is declared
    // public; a DP aggregate over it is calibrated and computed exactly as over a table
    // protected row by row (one row in one group per person, no bounding rewrite).
    ctx.sql("SET dp.public_tables = '*'").await?;
    Ok(ctx)
}

/// Deterministic pseudo-random columns from the row number, so every run sees the same data.
async fn generate(filter: Option<String>) -> Result<()> {
    for (name, rows, groups, per_patient) in DATASETS {
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        let path = dataset_path(name);
        if path.exists() {
            eprintln!("{name}: exists at {}", path.display());
            continue;
        }
        let start = Instant::now();
        let ctx = SessionContext::new();
        // 7919 is prime and divides no number of rows here, so the map is a permutation.
        let patient = match name.ends_with("_scattered") {
            true => format!("((value * 7919) % {rows}) / {per_patient}"),
            false => format!("value / {per_patient}"),
        };
        // A `_home` patient's group is drawn from the patient, any other row's from the row.
        let drawn_from = match name.ends_with("_home") {
            true => patient.clone(),
            false => "value".to_string(),
        };
        let sql = format!(
            "SELECT value AS visit_id, {patient} AS patient_id,
                    ({drawn_from} * 2654435761) % {groups} AS grp,
                    (value * 40503) % 1000 < 400 AS exposed,
                    (value * 69069) % 1000 < 250 AS outcome
             FROM generate_series(0, {}) t(value)",
            rows - 1
        );
        ctx.sql(&sql)
            .await?
            .write_parquet(
                path.to_str().ok_or("non-UTF-8 path")?,
                DataFrameWriteOptions::new(),
                None,
            )
            .await?;
        eprintln!(
            "{name}: {rows} rows, {groups} groups in {:.1?}",
            start.elapsed()
        );
    }
    Ok(())
}

async fn register_visits(ctx: &SessionContext, dataset: &str, source: &str) -> Result<()> {
    // Registered as tables named `visits`, not as views of unnamed scans: protection
    // declarations name tables (a view is inlined into its plan, whose scan has no name).
    let path = dataset_path(dataset);
    let path = path.to_str().ok_or("non-UTF-8 path")?;
    match source {
        "parquet" => {
            ctx.register_parquet("visits", path, ParquetReadOptions::default())
                .await?
        }
        "memory" => {
            let frame = ctx
                .read_parquet(path, ParquetReadOptions::default())
                .await?;
            let schema = Arc::new(frame.schema().as_arrow().clone());
            let table = MemTable::try_new(schema, frame.collect_partitioned().await?)?;
            ctx.register_table("visits", Arc::new(table))?;
        }
        other => return Err(format!("unknown source {other}").into()),
    };
    Ok(())
}

async fn time_query(ctx: &SessionContext, sql: &str) -> Result<Duration> {
    let start = Instant::now();
    let batches = ctx.sql(sql).await?.collect().await?;
    let elapsed = start.elapsed();
    std::hint::black_box(batches);
    Ok(elapsed)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn pairs(filter: Option<String>) -> Result<()> {
    let runs = std::env::var("DP_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    outln!("| dataset | source | pair | DP median (s) | baseline median (s) | ratio |");
    outln!("|---|---|---|---|---|---|");
    let all_pairs = PAIRS
        .iter()
        .map(|&(name, dp, base, setting)| (name, dp, base, setting, "", false))
        .chain(
            UNIT_PAIRS
                .iter()
                .map(|&(name, dp, base, dp_set, base_set)| {
                    (name, dp, base, dp_set, base_set, true)
                }),
        );
    let all_pairs: Vec<_> = all_pairs.collect();
    for (dataset, _, _, per_patient) in DATASETS {
        for source in ["memory", "parquet"] {
            let selected = |name: &str, units: bool| {
                let label = format!("{dataset} {source} {name}");
                units == (per_patient > 1)
                    && filter.as_ref().is_none_or(|f| label.contains(f.as_str()))
            };
            // Only datasets with a selected pair are loaded (the others need not exist).
            if !all_pairs.iter().any(|p| selected(p.0, p.5)) {
                continue;
            }
            // One session per side so session settings (the seed) apply to one side only.
            let dp = session().await?;
            let base = session().await?;
            register_visits(&dp, dataset, source).await?;
            register_visits(&base, dataset, source).await?;
            for &(name, dp_sql, base_sql, dp_setting, base_setting, units) in &all_pairs {
                if !selected(name, units) {
                    continue;
                }
                let dp = session_with(&dp, dp_setting).await?;
                let base = session_with(&base, base_setting).await?;
                time_query(&dp, dp_sql).await?;
                time_query(&base, base_sql).await?;
                let (mut a, mut b) = (Vec::new(), Vec::new());
                for _ in 0..runs {
                    a.push(time_query(&dp, dp_sql).await?);
                    b.push(time_query(&base, base_sql).await?);
                }
                let (ma, mb) = (median(a), median(b));
                outln!(
                    "| {dataset} | {source} | {name} | {:.3} | {:.3} | {:.2} |",
                    ma.as_secs_f64(),
                    mb.as_secs_f64(),
                    ma.as_secs_f64() / mb.as_secs_f64()
                );
            }
        }
    }
    Ok(())
}

/// A copy of `ctx` with one extra `SET` applied (the table registrations are shared).
async fn session_with(ctx: &SessionContext, setting: &str) -> Result<SessionContext> {
    let copy = SessionContext::new_with_state(ctx.state());
    if !setting.is_empty() {
        copy.sql(setting).await?;
    }
    Ok(copy)
}

fn sampler() -> Result<()> {
    let mut rng = secure_rng()?;
    outln!("| mechanism | epsilon (per table) | per-cell scale | samples/s (1 core) | 1M groups x 4 cells (s) |");
    outln!("|---|---|---|---|---|");
    for mechanism in [Mechanism::Laplace, Mechanism::Gaussian] {
        for epsilon in [0.1, 0.5, 1.0, 2.0, 10.0] {
            let delta = (mechanism == Mechanism::Gaussian).then_some(1e-6);
            let noise = CountNoise::calibrate(
                mechanism,
                epsilon / 2.0,
                delta.map(|d| d / 2.0),
                1,
                GaussianCalibration::Analytic,
            )?;
            let n = 4_000_000;
            let start = Instant::now();
            let mut acc = 0i64;
            for _ in 0..n {
                acc = acc.wrapping_add(noise.sample(&mut rng));
            }
            let secs = start.elapsed().as_secs_f64();
            std::hint::black_box(acc);
            // The same work through the table release the aggregates use: 1M tables.
            let table_noise = TableNoise::calibrate(
                mechanism,
                epsilon,
                delta,
                GaussianCalibration::Analytic,
                Default::default(),
            )?;
            let table = TwoByTwo {
                a: 30,
                b: 70,
                c: 20,
                d: 80,
            };
            let start = Instant::now();
            for _ in 0..1_000_000 {
                std::hint::black_box(
                    table_noise
                        .release(&table, &mut rng)
                        .expect("counts fit i64"),
                );
            }
            let release = start.elapsed().as_secs_f64();
            outln!(
                "| {mechanism} | {epsilon} | {:.3} | {:.2e} | {release:.3} |",
                noise.scale,
                n as f64 / secs
            );
        }
    }
    Ok(())
}

/// The interval step alone, per group, as `dp_rr_ci` runs it after the release: 100k released
/// tables (n = 200 per arm, p_x = 0.3, p_y = 0.2, ε = 1, Laplace, private sizes) turned into
/// intervals by `TableNoise::interval` with each method, interleaved, medians of `runs`.
/// `filter` keeps the methods whose "statistic method" label contains it (e.g. "odds ratio
/// score"), and always the reference, the relative risk's log interval.
fn intervals(filter: Option<String>) -> Result<()> {
    use rand::SeedableRng;
    let runs: usize = std::env::var("DP_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let groups = 100_000;
    let noise = TableNoise::calibrate(
        Mechanism::Laplace,
        1.0,
        None,
        GaussianCalibration::Analytic,
        Default::default(),
    )?;
    let design = Design {
        exposed_size: 200,
        unexposed_size: 200,
        exposed_risk: 0.3,
        unexposed_risk: 0.2,
    };
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
    let released: Vec<_> = (0..groups)
        .map(|_| {
            noise
                .release(&design.draw(&mut rng), &mut rng)
                .expect("counts fit i64")
        })
        .collect();
    // The relative risk's four intervals, then the odds ratio's Woolf (conservative) and score
    // (its default: centred, with Cornish-Fisher quantiles) intervals.
    let reference = (RatioStatistic::RelativeRisk, IntervalMethod::Log);
    let methods: Vec<_> = [
        reference,
        (RatioStatistic::RelativeRisk, IntervalMethod::Conservative),
        (RatioStatistic::RelativeRisk, IntervalMethod::Score),
        (RatioStatistic::RelativeRisk, IntervalMethod::Bootstrap),
        (RatioStatistic::OddsRatio, IntervalMethod::Conservative),
        (RatioStatistic::OddsRatio, IntervalMethod::Score),
    ]
    .into_iter()
    .filter(|&(statistic, method)| {
        (statistic, method) == reference
            || filter
                .as_ref()
                .is_none_or(|f| format!("{statistic} {method}").contains(f.as_str()))
    })
    .collect();
    let mut times = vec![Vec::new(); methods.len()];
    for run in 0..=runs {
        for (k, &(statistic, method)) in methods.iter().enumerate() {
            let spec = noise.interval_spec(0.95, method)?;
            let start = Instant::now();
            let mut acc = 0.0;
            for table in &released {
                if let Some(ci) = noise.interval(table, statistic, &spec) {
                    acc += ci.upper - ci.lower;
                }
            }
            std::hint::black_box(acc);
            if run > 0 {
                times[k].push(start.elapsed());
            }
        }
    }
    outln!("| statistic | interval | 100k groups (s) | per group (µs) | ratio to RR log |");
    outln!("|---|---|---|---|---|");
    let medians: Vec<f64> = times.into_iter().map(|t| median(t).as_secs_f64()).collect();
    for (k, (statistic, method)) in methods.iter().enumerate() {
        outln!(
            "| {statistic} | {method} | {:.4} | {:.3} | {:.1} |",
            medians[k],
            medians[k] / groups as f64 * 1e6,
            medians[k] / medians[0]
        );
    }
    Ok(())
}

async fn one_query(dataset: &str, source: &str, query: &str) -> Result<()> {
    let ctx = session().await?;
    register_visits(&ctx, dataset, source).await?;
    let sql = match query {
        "count" => PAIRS[0].2,
        "dp_count" => PAIRS[0].1,
        "four_counts" => FOUR_COUNTS,
        "dp_relative_risk" => PAIRS[1].1,
        "dp_rr_ci" => PAIRS[2].1,
        "dp_or_ci" | "dp_rd_ci" | "dp_sum" | "dp_avg" => PAIRS
            .iter()
            .map(|pair| pair.1)
            .find(|sql| sql.contains(&format!("{query}(")))
            .ok_or("no such pair")?,
        // DataFusion's own hash aggregate by the unit: the floor of any bounding.
        "first_group" => UNIT_PAIRS[4].2,
        // The same query over visits protected by its unit column (contribution bounding).
        "dp_count_unit" => {
            ctx.sql(UNIT_PAIRS[0].3).await?;
            UNIT_PAIRS[0].1
        }
        "dp_rr_ci_unit" => {
            ctx.sql(UNIT_PAIRS[3].3).await?;
            UNIT_PAIRS[3].1
        }
        other => return Err(format!("unknown query {other}").into()),
    };
    let start = Instant::now();
    let batches = ctx.sql(sql).await?.collect().await?;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    eprintln!("{query}: {rows} groups in {:.3?}", start.elapsed());
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("generate") => generate(args.get(1).cloned()).await,
        Some("pairs") => pairs(args.get(1).cloned()).await,
        Some("sampler") => sampler(),
        Some("intervals") => intervals(args.get(1).cloned()),
        Some("query") if args.len() == 4 => one_query(&args[1], &args[2], &args[3]).await,
        _ => Err("usage: bench generate [dataset] | pairs [filter] | sampler | intervals [filter] | query <dataset> <memory|parquet> <count|dp_count|four_counts|dp_relative_risk|dp_rr_ci|dp_or_ci|dp_rd_ci|first_group|dp_count_unit|dp_rr_ci_unit>".into()),
    }
}
