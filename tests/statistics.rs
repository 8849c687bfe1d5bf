//! Statistical tests of the core: noise variance, and interval coverage against the paper's
//! coverage table. Fixed seeds; every tolerance is a multiple of the Monte Carlo standard
//! error, derived where it is used.

use arrow::array::AsArray;
use arrow::datatypes::{Float64Type, Int64Type};
use datafusion::prelude::SessionContext;
use datafusion_dp::stats::paper::COVERAGE_TABLES;
use datafusion_dp::stats::rng::{group_stream, seeded_rng};
use datafusion_dp::stats::sampler::{DiscreteGaussian, Rational};
use datafusion_dp::stats::simulation::{coverage, coverage_study, Construction, Design};
use datafusion_dp::stats::{
    CountNoise, GaussianCalibration, GroupSizes, IntervalMethod, Mechanism, RatioStatistic,
    TableNoise, TwoByTwo,
};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use statrs::distribution::{ChiSquared, ContinuousCDF};

/// Sample mean and variance of `n` draws, and the sample fourth central moment.
fn moments(noise: &CountNoise, n: usize, seed: u64) -> (f64, f64, f64) {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let draws: Vec<f64> = (0..n).map(|_| noise.sample(&mut rng) as f64).collect();
    let mean = draws.iter().sum::<f64>() / n as f64;
    let var = draws.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n as f64 - 1.0);
    let m4 = draws.iter().map(|x| (x - mean).powi(4)).sum::<f64>() / n as f64;
    (mean, var, m4)
}

/// The count noise `CountNoise::calibrate` gives (analytic Gaussian calibration).
fn calibrated(
    mechanism: Mechanism,
    epsilon: f64,
    delta: Option<f64>,
    sensitivity: u32,
) -> CountNoise {
    CountNoise::calibrate(
        mechanism,
        epsilon,
        delta,
        sensitivity,
        GaussianCalibration::Analytic,
    )
    .unwrap()
}

#[test]
fn released_counts_have_the_intended_noise_variance() {
    // For each mechanism and scale, 200,000 draws. The sample variance s² has standard error
    // sqrt((μ4 − σ⁴)/n) (estimated from the sample), the mean sqrt(σ²/n); both must be within
    // 5 standard errors of the exact variance of the discrete noise and of 0. A wrong scale
    // (e.g. 1/ε instead of 2/ε) moves the variance by a factor of 4, hundreds of SEs.
    let n = 200_000;
    let cases = [
        (Mechanism::Laplace, 1.0, None, 1),
        (Mechanism::Laplace, 1.0, None, 2), // the table's per-cell noise: scale 2/ε
        (Mechanism::Laplace, 0.1, None, 1),
        (Mechanism::Gaussian, 1.0, Some(1e-5), 1),
        (Mechanism::Gaussian, 0.25, Some(5e-5), 1),
    ];
    for (i, (mechanism, epsilon, delta, sensitivity)) in cases.into_iter().enumerate() {
        let noise = calibrated(mechanism, epsilon, delta, sensitivity);
        let (mean, var, m4) = moments(&noise, n, 1000 + i as u64);
        let var_se = ((m4 - var * var) / n as f64).sqrt();
        let mean_se = (var / n as f64).sqrt();
        assert!(
            (var - noise.variance).abs() < 5.0 * var_se,
            "{mechanism} eps={epsilon}: variance {var} vs {} (se {var_se})",
            noise.variance
        );
        assert!(mean.abs() < 5.0 * mean_se, "{mechanism}: mean {mean}");
        // The exact discrete variance is the continuous one up to a small correction:
        // 2b² − 1/6 for Laplace, σ² for the Gaussian.
        let continuous = match mechanism {
            Mechanism::Laplace => 2.0 * noise.scale * noise.scale,
            Mechanism::Gaussian => noise.scale * noise.scale,
        };
        assert!((continuous - noise.variance) < 0.17 && continuous >= noise.variance - 1e-9);
    }
}

/// Checks integer draws against an exact pmf: `weights[i]` is proportional to the probability
/// of `lo + i`, normalised here numerically; the range must hold all but a negligible mass
/// (below e^-700 in every use), and draws outside it are counted in the end cells.
///
/// Adjacent values are pooled into bins with an expected count of at least 20 (each bin count
/// is Binomial(n, p), close to normal at that size). Two checks, with thresholds from that
/// law and fixed seeds, never tuned:
/// * each bin within 5 standard errors `sqrt(n p (1 − p))` of `n p`: an exact sampler fails a
///   given bin with probability about 5.7e-7, so all (at most a few hundred here) pass
///   unless the law is off;
/// * Pearson's `X² = Σ (O − E)² / E` below the 1 − 10⁻⁶ quantile of χ² with `bins − 1`
///   degrees of freedom, its law for an exact sampler; this also catches deviations spread
///   over many bins, too small to show in any one.
fn assert_matches_pmf(draws: &[i64], lo: i64, weights: &[f64], what: &str) {
    let n = draws.len() as f64;
    let total: f64 = weights.iter().sum();
    let mut counts = vec![0u64; weights.len()];
    for &x in draws {
        let i = (x.saturating_sub(lo)).clamp(0, weights.len() as i64 - 1);
        counts[i as usize] += 1;
    }
    // (first value, expected, observed) per bin.
    let mut bins: Vec<(i64, f64, f64)> = Vec::new();
    let mut open: Option<(i64, f64, f64)> = None;
    for (i, (&w, &c)) in weights.iter().zip(&counts).enumerate() {
        let bin = open.get_or_insert((lo + i as i64, 0.0, 0.0));
        bin.1 += n * w / total;
        bin.2 += c as f64;
        if bin.1 >= 20.0 {
            bins.push(open.take().unwrap());
        }
    }
    if let Some((_, e, o)) = open {
        let last = bins.last_mut().expect("at least one full bin");
        last.1 += e;
        last.2 += o;
    }
    let mut chi2 = 0.0;
    for &(x, e, o) in &bins {
        let se = (e * (1.0 - e / n)).sqrt();
        assert!(
            (o - e).abs() <= 5.0 * se,
            "{what}: bin from {x}: {o} draws, expected {e:.1} (se {se:.1})"
        );
        chi2 += (o - e).powi(2) / e;
    }
    let df = bins.len() as f64 - 1.0;
    let limit = ChiSquared::new(df).unwrap().inverse_cdf(1.0 - 1e-6);
    assert!(
        chi2 <= limit,
        "{what}: chi-square {chi2:.1} over {df} degrees of freedom, limit {limit:.1}"
    );
}

/// The values `-r..=r` with `r = ⌈40·scale⌉ + 2` (beyond which every pmf used here is below
/// e^-800 of its peak) and the weights `f(x)` on them.
fn weights_on_range(scale: f64, f: impl Fn(f64) -> f64) -> (i64, Vec<f64>) {
    let r = (40.0 * scale).ceil() as i64 + 2;
    (-r, (-r..=r).map(|x| f(x as f64)).collect())
}

#[test]
fn discrete_gaussian_matches_the_exact_pmf() {
    // 400,000 draws at each σ²: small (σ² = 0.3, where almost all mass is on -1, 0, 1), near
    // 1 (σ² = 1.063, where the proposal scale is t = 1, not CKS's ⌊σ⌋ + 1 = 2), medium
    // (4.37) and large (5000, σ ≈ 70.7); σ² as the exact dyadic rationals the sampler gets,
    // pmf ∝ exp(-x²/2σ²).
    for (i, sigma2) in [0.3, 1.063, 4.37, 5000.0].into_iter().enumerate() {
        let sigma2 = Rational::ceil_dyadic(sigma2, 40).unwrap();
        let gaussian = DiscreteGaussian::new(sigma2).unwrap();
        let mut rng = ChaCha20Rng::seed_from_u64(500 + i as u64);
        let draws: Vec<i64> = (0..400_000).map(|_| gaussian.sample(&mut rng)).collect();
        let s2 = sigma2.to_f64();
        let (lo, weights) = weights_on_range(s2.sqrt(), |x| (-x * x / (2.0 * s2)).exp());
        assert_matches_pmf(&draws, lo, &weights, &format!("gaussian sigma^2={s2}"));
    }
}

#[test]
fn released_noise_matches_the_exact_pmf() {
    // The noise the aggregates add (CountNoise, as calibrated), 400,000 draws per case:
    // Laplace ∝ exp(-ε|x|/Δ) (ε = 0.5 is the rational 1/2; ε = 0.1 has a 2^55 denominator,
    // the samplers' wide paths), and the Gaussian at its calibrated σ² (scale², exact up to
    // f64 rounding far below the Monte Carlo error).
    let cases = [
        (Mechanism::Laplace, 0.5, None, 1),
        (Mechanism::Laplace, 0.1, None, 2),
        (Mechanism::Gaussian, 1.0, Some(1e-5), 1),
        (Mechanism::Gaussian, 0.3, Some(1e-6), 2),
    ];
    for (i, (mechanism, epsilon, delta, sensitivity)) in cases.into_iter().enumerate() {
        let noise = calibrated(mechanism, epsilon, delta, sensitivity);
        let mut rng = ChaCha20Rng::seed_from_u64(600 + i as u64);
        let draws: Vec<i64> = (0..400_000).map(|_| noise.sample(&mut rng)).collect();
        let (scale, d) = (noise.scale, sensitivity as f64);
        let (lo, weights) = match mechanism {
            Mechanism::Laplace => weights_on_range(scale, |x| (-epsilon * x.abs() / d).exp()),
            Mechanism::Gaussian => {
                weights_on_range(scale, |x| (-x * x / (2.0 * scale * scale)).exp())
            }
        };
        assert_matches_pmf(&draws, lo, &weights, &format!("{mechanism} eps={epsilon}"));
    }
}

const SIMULATIONS: usize = 10_000;
/// The grid cells checked (indices into 0.1..0.9): corners, edges and the centre.
const CELLS: [(usize, usize); 9] = [
    (0, 0),
    (0, 4),
    (0, 8),
    (4, 0),
    (4, 4),
    (4, 8),
    (8, 0),
    (8, 4),
    (8, 8),
];

fn design(i: usize, j: usize) -> Design {
    design_at((i + 1) as f64 / 10.0, (j + 1) as f64 / 10.0)
}

/// Two arms of 200 at the given risks.
fn design_at(exposed_risk: f64, unexposed_risk: f64) -> Design {
    Design {
        exposed_size: 200,
        unexposed_size: 200,
        exposed_risk,
        unexposed_risk,
    }
}

fn table_noise(mechanism: Mechanism, sizes: GroupSizes) -> TableNoise {
    noise_at(mechanism, 1.0, sizes)
}

/// The release's noise at `epsilon` (δ = 1e-4 for Gaussian noise, analytic calibration).
fn noise_at(mechanism: Mechanism, epsilon: f64, sizes: GroupSizes) -> TableNoise {
    let delta = (mechanism == Mechanism::Gaussian).then_some(1e-4);
    TableNoise::calibrate(
        mechanism,
        epsilon,
        delta,
        GaussianCalibration::Analytic,
        sizes,
    )
    .unwrap()
}

/// Tolerance for comparing two coverage estimates from `n1` and `n2` independent trials:
/// 4.5 standard errors of the difference, sqrt(p(1−p)(1/n1 + 1/n2)). Over the 36 cells
/// checked the chance that any honest cell fails is about 36 × 7e-6 (and the seeds are
/// fixed, so the test is deterministic).
fn tolerance(p: f64, n1: usize, n2: usize) -> f64 {
    4.5 * (p * (1.0 - p) * (1.0 / n1 as f64 + 1.0 / n2 as f64)).sqrt()
}

#[test]
fn coverage_with_public_sizes_reproduces_the_paper_table() {
    let mut failures = Vec::new();
    for (k, (_, mechanism, method, table)) in COVERAGE_TABLES.into_iter().enumerate() {
        // The paper's calibration: per cell (ε/2, δ/2) (the default since issue 45 calibrates
        // the Gaussian table as one vector, with less noise than the paper's table shows).
        let delta = (mechanism == Mechanism::Gaussian).then_some(1e-4);
        let noise = TableNoise::calibrate(
            mechanism,
            1.0,
            delta,
            GaussianCalibration::PerCell,
            GroupSizes::Public,
        )
        .unwrap();
        for (c, &(i, j)) in CELLS.iter().enumerate() {
            let mut rng = ChaCha20Rng::seed_from_u64((k * 100 + c) as u64);
            let (ours, _) = coverage(
                &design(i, j),
                RatioStatistic::RelativeRisk,
                &noise,
                0.95,
                method,
                SIMULATIONS,
                &mut rng,
            )
            .unwrap();
            let paper = table[i][j];
            if (ours - paper).abs() > tolerance(paper, SIMULATIONS, SIMULATIONS) {
                failures.push(format!(
                    "{mechanism} {method} p_x={} p_y={}: ours {ours:.3}, paper {paper:.3}",
                    (i + 1) as f64 / 10.0,
                    (j + 1) as f64 / 10.0
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn coverage_with_private_sizes_is_at_least_that_of_public_sizes() {
    // The paper does not cover noisy group sizes. Noising all four cells adds noise to n_x and
    // n_y, but the conservative variance for private sizes (ReleasedTable::interval) accounts
    // for it; the test asserts that on the same designs its coverage is no worse than the
    // public-size interval's (which the paper validates), up to the tolerance above.
    let mut failures = Vec::new();
    for (k, mechanism) in [Mechanism::Laplace, Mechanism::Gaussian]
        .into_iter()
        .enumerate()
    {
        let public = table_noise(mechanism, GroupSizes::Public);
        let private = table_noise(mechanism, GroupSizes::Private);
        for (c, &(i, j)) in CELLS.iter().enumerate() {
            let seed = (1000 + k * 100 + c) as u64;
            let method = IntervalMethod::Conservative;
            let (pub_cov, _) = coverage(
                &design(i, j),
                RatioStatistic::RelativeRisk,
                &public,
                0.95,
                method,
                SIMULATIONS,
                &mut ChaCha20Rng::seed_from_u64(seed),
            )
            .unwrap();
            let (priv_cov, _) = coverage(
                &design(i, j),
                RatioStatistic::RelativeRisk,
                &private,
                0.95,
                method,
                SIMULATIONS,
                &mut ChaCha20Rng::seed_from_u64(seed + 50),
            )
            .unwrap();
            if priv_cov < pub_cov - tolerance(pub_cov, SIMULATIONS, SIMULATIONS) {
                failures.push(format!(
                    "{mechanism} p_x={} p_y={}: private {priv_cov:.3}, public {pub_cov:.3}",
                    (i + 1) as f64 / 10.0,
                    (j + 1) as f64 / 10.0
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn conservative_intervals_are_wider_than_plain_ones() {
    let noise = table_noise(Mechanism::Laplace, GroupSizes::Private);
    let d = design(4, 4);
    let (_, plain) = coverage(
        &d,
        RatioStatistic::RelativeRisk,
        &noise,
        0.95,
        IntervalMethod::Plain,
        2000,
        &mut ChaCha20Rng::seed_from_u64(5),
    )
    .unwrap();
    let (_, cons) = coverage(
        &d,
        RatioStatistic::RelativeRisk,
        &noise,
        0.95,
        IntervalMethod::Conservative,
        2000,
        &mut ChaCha20Rng::seed_from_u64(5),
    )
    .unwrap();
    assert!(cons > plain, "{cons} <= {plain}");
}

#[test]
fn odds_ratio_coverage_is_that_of_the_non_private_woolf_interval() {
    // The paper has no odds-ratio table. Reference: the textbook (non-private) Woolf interval
    // on the exact counts of the same designs. The private conservative interval must cover
    // at least as often (tolerance as above); the plain one, which ignores the noise, must
    // cover less often than the conservative one somewhere on the grid, showing that the
    // widening is what restores coverage.
    let mut failures = Vec::new();
    let mut plain_lower_somewhere = false;
    for (k, mechanism) in [Mechanism::Laplace, Mechanism::Gaussian]
        .into_iter()
        .enumerate()
    {
        for sizes in [GroupSizes::Private, GroupSizes::Public] {
            let noise = table_noise(mechanism, sizes);
            let exact = TableNoise {
                cell: noise.cell,
                sizes,
            };
            for (c, &(i, j)) in CELLS.iter().enumerate() {
                let d = design(i, j);
                let seed = (5000 + k * 100 + c) as u64;
                let run = |method: IntervalMethod, seed: u64| {
                    coverage(
                        &d,
                        RatioStatistic::OddsRatio,
                        &noise,
                        0.95,
                        method,
                        SIMULATIONS,
                        &mut ChaCha20Rng::seed_from_u64(seed),
                    )
                    .unwrap()
                    .0
                };
                let cons = run(IntervalMethod::Conservative, seed);
                let plain = run(IntervalMethod::Plain, seed + 7);
                // Woolf on exact counts: release with zero noise variance and no noise draw.
                let mut rng = ChaCha20Rng::seed_from_u64(seed + 13);
                let truth = d.truth(RatioStatistic::OddsRatio);
                let woolf = (0..SIMULATIONS)
                    .filter(|_| {
                        let t = d.draw(&mut rng);
                        let released = datafusion_dp::stats::ReleasedTable {
                            exposed_cases: t.a as i64,
                            exposed_total: (t.a + t.b) as i64,
                            unexposed_cases: t.c as i64,
                            unexposed_total: (t.c + t.d) as i64,
                            sizes: exact.sizes,
                            noise_variance: 0.0,
                            noise_fourth_cumulant: 0.0,
                        };
                        let ci = released
                            .odds_ratio_interval(0.95, IntervalMethod::Plain)
                            .unwrap()
                            .unwrap();
                        ci.lower <= truth && truth <= ci.upper
                    })
                    .count() as f64
                    / SIMULATIONS as f64;
                if cons < woolf - tolerance(woolf, SIMULATIONS, SIMULATIONS) {
                    failures.push(format!(
                        "{mechanism} {sizes} p_x={} p_y={}: conservative {cons:.3}, Woolf {woolf:.3}",
                        (i + 1) as f64 / 10.0,
                        (j + 1) as f64 / 10.0
                    ));
                }
                if plain < cons - tolerance(cons, SIMULATIONS, SIMULATIONS) {
                    plain_lower_somewhere = true;
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(plain_lower_somewhere);
}

/// The exact table the SQL-equivalence test builds: a = 18, b = 182, c = 9, d = 191.
const SQL_TABLE: TwoByTwo = TwoByTwo {
    a: 18,
    b: 182,
    c: 9,
    d: 191,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_functions_and_the_simulation_path_give_identical_output() {
    // The coverage simulations (docs/coverage.md, the tests below) release tables with
    // `TableNoise::release` and build intervals with `TableNoise::interval`. Here the SQL
    // functions, in seeded mode, must give bit-for-bit the same release and interval as that
    // path fed with the seeded stream the SQL call uses (key 0: no GROUP BY; the stream is
    // named by the output column), for every function, method, mechanism and size mode.
    let ctx = SessionContext::new();
    datafusion_dp::register(&ctx).unwrap();
    ctx.sql(
        "CREATE TABLE t AS SELECT value < 18 OR (value >= 200 AND value < 209) AS o,
                value < 200 AS e FROM generate_series(0, 399) s(value)",
    )
    .await
    .unwrap();
    ctx.sql("SET dp.seed = 77").await.unwrap();
    let mut checked = 0;
    for (function, statistic) in [
        ("dp_rr_ci", RatioStatistic::RelativeRisk),
        ("dp_or_ci", RatioStatistic::OddsRatio),
        ("dp_rd_ci", RatioStatistic::RiskDifference),
    ] {
        for method in [
            IntervalMethod::Conservative,
            IntervalMethod::Plain,
            IntervalMethod::Log,
            IntervalMethod::Bootstrap,
            IntervalMethod::Score,
        ] {
            if method.check_statistic(statistic).is_err() {
                continue;
            }
            for (mechanism, delta) in [
                (Mechanism::Laplace, None),
                (Mechanism::Gaussian, Some(1e-4)),
            ] {
                for sizes in [GroupSizes::Private, GroupSizes::Public] {
                    let delta_option = delta.map_or(String::new(), |d| format!(", delta={d}"));
                    let sql = format!(
                        "SELECT {function}(o, e, 0.5, 'ci_method={method}, mechanism={mechanism}, group_sizes={sizes}{delta_option}') FROM t"
                    );
                    let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
                    let batch = &batches[0];
                    let stream = batch.schema().field(0).name().clone();
                    let ci = batch.column(0).as_struct();
                    let float = |name: &str| {
                        ci.column_by_name(name)
                            .unwrap()
                            .as_primitive::<Float64Type>()
                            .value(0)
                    };
                    let int = |name: &str| {
                        ci.column_by_name(name)
                            .unwrap()
                            .as_primitive::<Int64Type>()
                            .value(0)
                    };

                    let noise = TableNoise::calibrate(
                        mechanism,
                        0.5,
                        delta,
                        GaussianCalibration::Analytic,
                        sizes,
                    )
                    .unwrap();
                    let mut rng = group_stream(&seeded_rng(77, &stream), 0);
                    let released = noise.release(&SQL_TABLE, &mut rng).unwrap();
                    let spec = noise.interval_spec(0.95, method).unwrap();
                    let want = noise.interval(&released, statistic, &spec).unwrap();
                    assert_eq!(
                        [
                            int("exposed_cases"),
                            int("exposed_total"),
                            int("unexposed_cases"),
                            int("unexposed_total")
                        ],
                        [
                            released.exposed_cases,
                            released.exposed_total,
                            released.unexposed_cases,
                            released.unexposed_total
                        ],
                        "{sql}"
                    );
                    assert_eq!(
                        [float("estimate"), float("lower"), float("upper")].map(f64::to_bits),
                        [want.estimate, want.lower, want.upper].map(f64::to_bits),
                        "{sql}"
                    );
                    checked += 1;
                }
            }
        }
    }
    // 5 methods for each ratio, 3 for the risk difference (no log, no score); 4 mechanism
    // and size settings each.
    assert_eq!(checked, (5 + 5 + 3) * 4);
}

/// The lowest coverage estimate from `n` tables that is still consistent with a true coverage
/// of at least `target`: `target − 4·sqrt(target(1 − target)/n)`. If a cell's true coverage
/// is `≥ target`, its estimate falls below this with probability ≤ 3.2e-5 (normal
/// approximation to the binomial count of covering intervals, fine at n ≥ 2,000 and
/// p ≈ 0.93-0.95), so over the ≤ 200 cell-interval pairs checked below the chance of a false
/// failure is below 1% (and the seeds are fixed, so the outcome is deterministic).
fn coverage_floor(target: f64, n: usize) -> f64 {
    target - 4.0 * (target * (1.0 - target) / n as f64).sqrt()
}

/// Coverage of `intervals` at n_x = n_y = `n` on `cells` (indices into 0.1..0.9), through
/// the SQL functions' release and interval path; failures listed against `floor`.
#[allow(clippy::too_many_arguments)]
fn check_targets(
    n: u64,
    epsilon: f64,
    cells: &[(usize, usize)],
    intervals: &[(RatioStatistic, IntervalMethod)],
    simulations: usize,
    floor: f64,
    seed: u64,
    failures: &mut Vec<String>,
) -> f64 {
    let mut lowest = 1.0f64;
    for (k, mechanism) in [Mechanism::Laplace, Mechanism::Gaussian]
        .into_iter()
        .enumerate()
    {
        for (l, sizes) in [GroupSizes::Private, GroupSizes::Public]
            .into_iter()
            .enumerate()
        {
            let delta = (mechanism == Mechanism::Gaussian).then_some(1e-4);
            let noise = TableNoise::calibrate(
                mechanism,
                epsilon,
                delta,
                GaussianCalibration::Analytic,
                sizes,
            )
            .unwrap();
            for (c, &(i, j)) in cells.iter().enumerate() {
                let design = Design {
                    exposed_size: n,
                    unexposed_size: n,
                    exposed_risk: (i + 1) as f64 / 10.0,
                    unexposed_risk: (j + 1) as f64 / 10.0,
                };
                let mut rng = ChaCha20Rng::seed_from_u64(seed + (k * 1000 + l * 100 + c) as u64);
                let results =
                    coverage_study(&design, &noise, 0.95, intervals, simulations, &mut rng)
                        .unwrap();
                for r in results {
                    lowest = lowest.min(r.coverage);
                    if r.coverage < floor {
                        failures.push(format!(
                            "n={n} eps={epsilon} {mechanism} {sizes} {:?} {} p_x={} p_y={}: {:.4} < {floor:.4}",
                            r.statistic,
                            r.method,
                            design.exposed_risk,
                            design.unexposed_risk,
                            r.coverage
                        ));
                    }
                }
            }
        }
    }
    lowest
}

/// Cells checked per setting: the corners, the centre and the middles of the p = 0.1 edges,
/// where the counts are smallest (the grid minimum of docs/coverage.md, part 2, lies there or
/// within Monte Carlo error of it).
const TARGET_CELLS: [(usize, usize); 7] = [(0, 0), (0, 8), (8, 0), (8, 8), (4, 4), (0, 4), (4, 0)];

#[test]
fn odds_ratio_and_risk_difference_intervals_meet_the_coverage_targets() {
    // Issue-12 targets (n = 200: 0.945, n = 100: 0.94; ε = 0.5 and 1; both mechanisms and
    // size modes), 10,000 tables per cell, tolerance from coverage_floor.
    let mut failures = Vec::new();
    for (n, target) in [(200u64, 0.945), (100, 0.94)] {
        for (e, epsilon) in [0.5, 1.0].into_iter().enumerate() {
            check_targets(
                n,
                epsilon,
                &TARGET_CELLS,
                &[
                    (RatioStatistic::OddsRatio, IntervalMethod::Conservative),
                    (RatioStatistic::RiskDifference, IntervalMethod::Conservative),
                ],
                SIMULATIONS,
                coverage_floor(target, SIMULATIONS),
                20_000 + n * 10 + e as u64 * 100_000,
                &mut failures,
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Asserts `statistic`'s score interval meets the coverage targets in the cells of
/// TARGET_CELLS: n = 200: 0.945, n = 100: 0.94 (ε = 0.5 and 1) and n = 50, ε = 0.5: 0.93, both
/// mechanisms and size modes. 10,000 tables per cell: the SE of one cell's coverage is
/// sqrt(0.95·0.05/10⁴) ≈ 0.0022, and coverage_floor allows 4 SE (≈ 0.009), so a cell whose
/// true coverage meets the target fails with probability ≤ 3.2e-5.
fn assert_score_interval_meets_the_targets(statistic: RatioStatistic, seed_base: u64) {
    let mut failures = Vec::new();
    let mut lowest = Vec::new();
    for (n, target, epsilons) in [
        (200u64, 0.945, &[0.5, 1.0][..]),
        (100, 0.94, &[0.5, 1.0][..]),
        (50, 0.93, &[0.5][..]),
    ] {
        for (e, &epsilon) in epsilons.iter().enumerate() {
            lowest.push(check_targets(
                n,
                epsilon,
                &TARGET_CELLS,
                &[(statistic, IntervalMethod::Score)],
                SIMULATIONS,
                coverage_floor(target, SIMULATIONS),
                seed_base + n * 10 + e as u64 * 100_000,
                &mut failures,
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nlowest: {lowest:?}",
        failures.join("\n")
    );
}

#[test]
fn score_interval_meets_the_coverage_targets() {
    // dp_rr_ci's default (docs/intervals.md §5), in the cells of TARGET_CELLS — among them
    // (0.9, 0.1) and (0.1, 0.9), where the log interval misses with Gaussian noise.
    assert_score_interval_meets_the_targets(RatioStatistic::RelativeRisk, 80_000);
}

#[test]
fn odds_ratio_score_interval_meets_the_coverage_targets() {
    // dp_or_ci's default (docs/intervals.md §2), in the cells of TARGET_CELLS, which hold
    // (0.1, 0.9), where the grid minimum of docs/coverage.md lies in most settings.
    assert_score_interval_meets_the_targets(RatioStatistic::OddsRatio, 90_000);
}

#[test]
fn odds_ratio_score_is_centred_where_two_cells_are_small() {
    // At (p_x, p_y) = (0.1, 0.9), n = 200, a ≈ d ≈ 20: Miettinen & Nurminen's numerator has
    // mean −0.10 to −0.12 SD at the true odds ratio under Laplace noise at ε = 0.5 (the
    // restricted estimates are curved in the noisy margin; docs/intervals.md §2, "Centring"),
    // which cost the upper end 0.01 of coverage. dp_or_ci's statistic subtracts the
    // second-order mean, so the centred statistic must average 0 within 4 Monte Carlo SE
    // (its sample SD / √40,000 ≈ 0.005, so ±0.02) and the uncentred one must stay below −0.06
    // (≈ 10 SE above its mean): the test fails if the centring is dropped or mis-signed.
    use datafusion_dp::stats::score::odds_ratio::OddsRatioScore;
    const TABLES: usize = 40_000;
    let design = design_at(0.1, 0.9);
    let theta = design.truth(RatioStatistic::OddsRatio);
    for (l, sizes) in [GroupSizes::Private, GroupSizes::Public]
        .into_iter()
        .enumerate()
    {
        let noise = noise_at(Mechanism::Laplace, 0.5, sizes);
        let mut rng = ChaCha20Rng::seed_from_u64(97_000 + l as u64);
        let (mut centred, mut uncentred) = (Vec::new(), Vec::new());
        for _ in 0..TABLES {
            let released = noise.release(&design.draw(&mut rng), &mut rng).unwrap();
            let score = OddsRatioScore::at(theta, &released.counts().unwrap());
            let sd = score.variance.sqrt();
            centred.push(score.statistic());
            uncentred.push(score.numerator / sd);
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let (m, u) = (mean(&centred), mean(&uncentred));
        let sd = (centred.iter().map(|t| (t - m).powi(2)).sum::<f64>() / TABLES as f64).sqrt();
        let se = sd / (TABLES as f64).sqrt();
        eprintln!("{sizes}: centred mean {m:+.4} (SD {sd:.3}, SE {se:.4}), uncentred {u:+.4}");
        assert!(m.abs() <= 4.0 * se, "{sizes}: centred mean {m:+.4}");
        assert!(u < -0.06, "{sizes}: uncentred mean {u:+.4}");
    }
}

#[test]
fn odds_ratio_score_skewness_matches_the_simulated_one() {
    // The skewness γ the odds ratio's quantiles are corrected by (docs/intervals.md §2,
    // "Skewness"), against the sample skewness of the centred statistic over 40,000 releases
    // through TableNoise at the true odds ratio. The sample skewness of 40,000 near-normal
    // draws has SE sqrt(6/40,000) = 0.012, so 4 SE = 0.049. Settings where γ is far from 0
    // and the O(n^-1/2) expansion is accurate (within 0.005 of a 10⁶-table simulation,
    // docs/prototypes/or_score_mean.py skew): the mirror corner (0.9, 0.1) with Laplace noise
    // at ε = 8 (nearly noiseless: γ ≈ −0.13, which the centring alone left uncorrected,
    // covering 0.943), both size modes, and (0.1, 0.9) at ε = 2 (γ ≈ +0.11). Each γ must be at
    // least 0.1 in size, so a γ of 0 fails the comparison. (Where the noise dominates the
    // expansion is rougher: −0.177 against −0.146 at ε = 0.5, (0.1, 0.9); docs/intervals.md.)
    use datafusion_dp::stats::score::odds_ratio::OddsRatioScore;
    use datafusion_dp::stats::table::ReleasedCounts;
    const TABLES: usize = 40_000;
    for (c, (epsilon, exposed_risk, unexposed_risk, sizes)) in [
        (8.0, 0.9, 0.1, GroupSizes::Public),
        (8.0, 0.9, 0.1, GroupSizes::Private),
        (2.0, 0.1, 0.9, GroupSizes::Public),
    ]
    .into_iter()
    .enumerate()
    {
        let noise = noise_at(Mechanism::Laplace, epsilon, sizes);
        let design = design_at(exposed_risk, unexposed_risk);
        let theta = design.truth(RatioStatistic::OddsRatio);
        let expected = ReleasedCounts::new(
            200.0 * exposed_risk,
            200.0,
            200.0 * unexposed_risk,
            200.0,
            sizes,
            noise.cell.variance,
        )
        .with_noise_fourth_cumulant(noise.cell.fourth_cumulant);
        let gamma = OddsRatioScore::at(theta, &expected).applied_skewness();
        let mut rng = ChaCha20Rng::seed_from_u64(98_000 + c as u64);
        let t: Vec<f64> = (0..TABLES)
            .map(|_| {
                let released = noise.release(&design.draw(&mut rng), &mut rng).unwrap();
                OddsRatioScore::at(theta, &released.counts().unwrap()).statistic()
            })
            .collect();
        let n = TABLES as f64;
        let m = t.iter().sum::<f64>() / n;
        let m2 = t.iter().map(|v| (v - m).powi(2)).sum::<f64>() / n;
        let m3 = t.iter().map(|v| (v - m).powi(3)).sum::<f64>() / n;
        let sample = m3 / m2.powf(1.5);
        let at = format!("ε = {epsilon}, ({exposed_risk}, {unexposed_risk}), {sizes}");
        eprintln!("{at}: γ {gamma:+.4}, simulated {sample:+.4}");
        assert!(gamma.abs() >= 0.1, "{at}: γ {gamma:+.4}");
        assert!(
            (sample - gamma).abs() <= 4.0 * (6.0 / n).sqrt(),
            "{at}: γ {gamma:+.4}, simulated {sample:+.4}"
        );
    }
}

#[test]
fn odds_ratio_score_keeps_its_coverage_in_small_noisy_tables() {
    use GroupSizes::{Private, Public};
    use Mechanism::{Gaussian, Laplace};
    // Groups of 3 to 10 rows per arm under heavy noise, off the paper's grid: the centring and
    // skewness terms are a second-order expansion, and applied in full where the noise swamps
    // the table (r ≫ 1, docs/intervals.md §2, "Where the expansion holds") they pushed the
    // interval off the truth: coverage 0.56-0.81 in these four cells (the worst of a 9x9 sweep
    // per setting, 2,000 tables each). Weighted by the expansion's domain they cover
    // 0.94-0.99 there. 4,000 tables per cell: each must reach coverage_floor(0.93), 4 SE
    // (0.016) below the smallest target the issue sets (n = 50), so the test fails by 0.1 or
    // more if the full terms come back.
    let failures = small_group_shortfalls(
        RatioStatistic::OddsRatio,
        &[
            (Laplace, 0.5, Private, (10, 10), 0.9, 0.1),
            (Gaussian, 0.5, Public, (3, 3), 0.9, 0.3),
            (Laplace, 0.1, Public, (10, 10), 0.1, 0.9),
            (Laplace, 1.0, Private, (3, 3), 0.9, 0.1),
        ],
        0.93,
        4_000,
        99_000,
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn relative_risk_score_keeps_its_coverage_where_noise_makes_counts_negative() {
    use GroupSizes::Public;
    use Mechanism::Laplace;
    // Three and ten rows per arm under Laplace noise at ε = 0.1 (noise SD 28 per cell): each
    // released count is negative about half the time, and where one is the statistic can
    // rise in θ and the accepted set is a half-line [θ*, ∞) (score::invert_score_test). The
    // first version
    // returned [0, 0] there and covered 0.912 and 0.919 in these cells
    // (docs/coverage-small-groups.md before session 12's fix), against about 0.95 accepted at
    // the truth. 20,000 tables per cell: each must reach coverage_floor(0.93), 4 SE (0.007)
    // below the smallest target the issue sets; the first version gives 0.916 in the first.
    let failures = small_group_shortfalls(
        RatioStatistic::RelativeRisk,
        &[
            (Laplace, 0.1, Public, (3, 3), 0.7, 0.1),
            (Laplace, 0.1, Public, (10, 10), 0.5, 0.1),
        ],
        0.93,
        20_000,
        99_100,
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn relative_risk_score_keeps_its_coverage_where_the_released_sizes_are_mostly_noise() {
    use GroupSizes::Private;
    use Mechanism::Gaussian;
    // 5 exposed against 40 unexposed rows, private sizes, Gaussian noise (SD 11.7 per cell at
    // ε = 0.5, so the released exposed size 5 + e_a + e_b is at or below 0 in 38% of releases).
    // Divided by the delta method's variance, which drops the size noises' product terms
    // (ScoreCounts::contrast_variance), the interval covered 0.911 and 0.908 in these cells
    // (these seeds; 0.908 at (0.9, 0.8) in docs/coverage-small-groups.md before session 13);
    // with them, 0.957 and 0.955. 20,000 tables per cell: each must reach
    // coverage_floor(0.93), 4 SE (0.007) below the smallest target the issue sets.
    let failures = small_group_shortfalls(
        RatioStatistic::RelativeRisk,
        &[
            (Gaussian, 0.5, Private, (5, 40), 0.9, 0.8),
            (Gaussian, 0.5, Private, (5, 40), 0.9, 0.9),
        ],
        0.93,
        20_000,
        99_200,
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn odds_ratio_score_keeps_its_coverage_where_a_released_size_falls_below_one() {
    use GroupSizes::Private;
    use Mechanism::Laplace;
    // 5 exposed against 40 unexposed rows, private sizes, Laplace noise: the released exposed
    // size is below 1 in 11-26% of releases and is floored at 1. Computing the exposed term as
    // X̃/1 − p̄ there dropped the size's noise from the count's deviation X̃ − p̄ñ, which it
    // shares with the count, and the statistic rejected the truth from below in a quarter of
    // those releases (docs/intervals.md §2, "A size released below 1"). 20,000 tables per
    // cell: 0.925 and 0.934 before, 0.942 and 0.952 with the deviation kept. Each must reach
    // coverage_floor(0.945), 4 SE (0.006) below 0.945: a floor at 0.93 would not tell them
    // apart.
    let failures = small_group_shortfalls(
        RatioStatistic::OddsRatio,
        &[
            (Laplace, 0.5, Private, (5, 40), 0.1, 0.5),
            (Laplace, 0.5, Private, (5, 40), 0.9, 0.5),
        ],
        0.945,
        20_000,
        99_300,
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A small-group cell: mechanism, ε, size mode, rows per arm (exposed, unexposed), p_x, p_y.
type SmallGroupCell = (Mechanism, f64, GroupSizes, (u64, u64), f64, f64);

/// The cells among `cells` ([`SmallGroupCell`]) where the score interval of `statistic` covers
/// less than `coverage_floor(target, tables)`, from `tables` releases each (seeds from `seed`).
fn small_group_shortfalls(
    statistic: RatioStatistic,
    cells: &[SmallGroupCell],
    target: f64,
    tables: usize,
    seed: u64,
) -> Vec<String> {
    let floor = coverage_floor(target, tables);
    let mut failures = Vec::new();
    for (c, &(mechanism, epsilon, sizes, (n_x, n_y), exposed_risk, unexposed_risk)) in
        cells.iter().enumerate()
    {
        let design = Design {
            exposed_size: n_x,
            unexposed_size: n_y,
            exposed_risk,
            unexposed_risk,
        };
        let (covered, _) = coverage(
            &design,
            statistic,
            &noise_at(mechanism, epsilon, sizes),
            0.95,
            IntervalMethod::Score,
            tables,
            &mut ChaCha20Rng::seed_from_u64(seed + c as u64),
        )
        .unwrap();
        let at = format!(
            "{statistic} {mechanism} ε = {epsilon} {sizes}, n = {n_x} and {n_y}, ({exposed_risk}, {unexposed_risk})"
        );
        eprintln!("{at}: {covered:.4}");
        if covered < floor {
            failures.push(format!("{at}: {covered:.4} < {floor:.4}"));
        }
    }
    failures
}

#[test]
fn odds_ratio_default_keeps_its_coverage_at_rare_outcomes_where_woolf_does_not() {
    // Why dp_or_ci defaults to the score interval (docs/intervals.md §6): off the paper's grid,
    // at a risk of 1.1% (2.2 expected cases of 200) under Gaussian noise at ε = 0.5, Woolf's
    // interval with the noise variance covers about 0.84 (docs/prototypes/off_grid_coverage.py)
    // while the score interval keeps 0.95. 10,000 tables per point: the score interval must
    // reach coverage_floor(0.945) (4 SE ≈ 0.009 below), and Woolf's must stay below 0.90, about
    // 20 SE above what it reaches, so the test fails if either claim stops holding.
    assert_eq!(
        IntervalMethod::default_for(RatioStatistic::OddsRatio),
        IntervalMethod::Score
    );
    let floor = coverage_floor(0.945, SIMULATIONS);
    for (c, (exposed_risk, unexposed_risk)) in [(0.5, 0.011), (0.011, 0.5)].into_iter().enumerate()
    {
        for (l, sizes) in [GroupSizes::Private, GroupSizes::Public]
            .into_iter()
            .enumerate()
        {
            let noise = noise_at(Mechanism::Gaussian, 0.5, sizes);
            let design = design_at(exposed_risk, unexposed_risk);
            let mut rng = ChaCha20Rng::seed_from_u64(95_000 + (c * 10 + l) as u64);
            let results = coverage_study(
                &design,
                &noise,
                0.95,
                &[
                    (RatioStatistic::OddsRatio, IntervalMethod::Score),
                    (RatioStatistic::OddsRatio, IntervalMethod::Conservative),
                ],
                SIMULATIONS,
                &mut rng,
            )
            .unwrap();
            let (score, woolf) = (results[0].coverage, results[1].coverage);
            let at = format!("{sizes} p_x={exposed_risk} p_y={unexposed_risk}");
            eprintln!("{at}: score {score:.4}, Woolf {woolf:.4}");
            assert!(score >= floor, "score {score:.4} < {floor:.4} at {at}");
            assert!(woolf < 0.90, "Woolf covers {woolf:.4} at {at}");
        }
    }
}

#[test]
fn log_interval_meets_the_targets_with_laplace_noise_and_beats_the_paper_elsewhere() {
    // With Laplace noise the log interval meets the coverage targets in the checked cells.
    // With Gaussian noise at n = 100 (and at ε = 0.5 at n = 200) it does not everywhere
    // (docs/coverage.md: noise-dominated cells such as p_x = 0.8, p_y = 0.1); there it must
    // still cover more often than the paper's conservative interval on the same releases
    // where that one misses the target: the lowest log coverage above the lowest
    // conservative one by more than two tolerances.
    let mut failures = Vec::new();
    for (n, target) in [(200u64, 0.945), (100, 0.94)] {
        for epsilon in [0.5, 1.0] {
            let floor = coverage_floor(target, SIMULATIONS);
            let mut laplace = Vec::new();
            let mut log_min = 1.0f64;
            let mut cons_min = 1.0f64;
            for (k, mechanism) in [Mechanism::Laplace, Mechanism::Gaussian]
                .into_iter()
                .enumerate()
            {
                for sizes in [GroupSizes::Private, GroupSizes::Public] {
                    let delta = (mechanism == Mechanism::Gaussian).then_some(1e-4);
                    let noise = TableNoise::calibrate(
                        mechanism,
                        epsilon,
                        delta,
                        GaussianCalibration::Analytic,
                        sizes,
                    )
                    .unwrap();
                    for (c, &(i, j)) in TARGET_CELLS.iter().enumerate() {
                        let d = Design {
                            exposed_size: n,
                            unexposed_size: n,
                            exposed_risk: (i + 1) as f64 / 10.0,
                            unexposed_risk: (j + 1) as f64 / 10.0,
                        };
                        let seed =
                            40_000 + n * 100 + (epsilon * 10.0) as u64 * 1000 + (k * 10 + c) as u64;
                        let r = coverage_study(
                            &d,
                            &noise,
                            0.95,
                            &[
                                (RatioStatistic::RelativeRisk, IntervalMethod::Log),
                                (RatioStatistic::RelativeRisk, IntervalMethod::Conservative),
                            ],
                            SIMULATIONS,
                            &mut ChaCha20Rng::seed_from_u64(seed),
                        )
                        .unwrap();
                        if mechanism == Mechanism::Laplace && r[0].coverage < floor {
                            laplace.push(format!(
                                "n={n} eps={epsilon} {sizes} p_x={} p_y={}: {:.4} < {floor:.4}",
                                d.exposed_risk, d.unexposed_risk, r[0].coverage
                            ));
                        }
                        if mechanism == Mechanism::Gaussian {
                            log_min = log_min.min(r[0].coverage);
                            cons_min = cons_min.min(r[1].coverage);
                        }
                    }
                }
            }
            failures.extend(laplace);
            let tol = target - floor;
            if cons_min < floor && log_min <= cons_min + 2.0 * tol {
                failures.push(format!(
                    "n={n} eps={epsilon} gaussian: log min {log_min:.4} not above conservative min {cons_min:.4}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bootstrap_meets_the_small_sample_target() {
    // n = 50, ε = 0.5: the bootstrap (B = 199 replays per table) must reach 0.93 in the
    // cells with the fewest cases. 2,000 tables per cell keep the debug-build time modest;
    // the tolerance grows accordingly (coverage_floor: 4 SE ≈ 0.023).
    let mut failures = Vec::new();
    let simulations = 2000;
    check_targets(
        50,
        0.5,
        &[(0, 0), (8, 0)],
        &[
            (RatioStatistic::RelativeRisk, IntervalMethod::Bootstrap),
            (RatioStatistic::OddsRatio, IntervalMethod::Bootstrap),
            (RatioStatistic::RiskDifference, IntervalMethod::Bootstrap),
        ],
        simulations,
        coverage_floor(0.93, simulations),
        60_000,
        &mut failures,
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn score_intervals_meet_the_width_target_with_laplace_noise_at_epsilon_1() {
    // Issue 12's width target where docs/coverage.md shows it met: n = 200, Laplace ε = 1,
    // the score intervals' median width at most 1.05 × the paper's construction in the same
    // cell (conservative interval for the RR, `OR ± z·OR·√V` for the OR), on the p_y = 0.1
    // column and the p_x = 0.9 row, where a ratio is most skewed and where the first version's
    // fixed 30/70 split missed (docs/intervals.md §6). Both size modes. With that split
    // restored (SKEW_FACTOR = 0 in src/stats/score/split.rs) this test fails in over 30 of its 52
    // pairs (RR 1.053-1.057, OR 1.058-1.093 against limits of 1.051-1.063).
    //
    // Tolerance. Each cell is simulated in B = 10 batches of 1,000 tables, both intervals on
    // the same releases; the estimate is the mean of the batch ratios r_b = median(ours) /
    // median(paper), whose Monte Carlo SE is sd(r_b)/√B (batches independent; the median's
    // bias at 1,000 draws is O(1/1000), negligible against the SE). A cell fails when the
    // mean exceeds 1.05 + t·SE with t = 4.3 (Student t with 9 df, one-sided 0.1%): a pair at
    // exactly 1.05 fails with probability 0.1%, and the 52 cell-statistic pairs checked are at
    // 0.99-1.04 in docs/coverage.md, several SE below the limit.
    const BATCHES: usize = 10;
    const TABLES: usize = 1000;
    const T_9DF: f64 = 4.3;
    let cells: Vec<(usize, usize)> = (0..9)
        .map(|i| (i, 0))
        .chain((1..9).step_by(2).map(|j| (8, j)))
        .collect();
    let intervals = [
        (
            RatioStatistic::RelativeRisk,
            Construction::Method(IntervalMethod::Score),
        ),
        (RatioStatistic::RelativeRisk, Construction::Paper),
        (
            RatioStatistic::OddsRatio,
            Construction::Method(IntervalMethod::Score),
        ),
        (RatioStatistic::OddsRatio, Construction::Paper),
    ];
    let mut failures = Vec::new();
    let mut largest = 0.0f64;
    for (l, sizes) in [GroupSizes::Private, GroupSizes::Public]
        .into_iter()
        .enumerate()
    {
        let noise = table_noise(Mechanism::Laplace, sizes);
        for (c, &(i, j)) in cells.iter().enumerate() {
            let design = design(i, j);
            let mut rng = ChaCha20Rng::seed_from_u64(110_000 + (l * 100 + c) as u64);
            let mut ratios = [[0.0; BATCHES]; 2];
            for b in 0..BATCHES {
                let r =
                    coverage_study(&design, &noise, 0.95, &intervals, TABLES, &mut rng).unwrap();
                for (s, ratio) in ratios.iter_mut().enumerate() {
                    ratio[b] = r[2 * s].median_width / r[2 * s + 1].median_width;
                }
            }
            for (s, ratio) in ratios.iter().enumerate() {
                let mean = ratio.iter().sum::<f64>() / BATCHES as f64;
                let var =
                    ratio.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (BATCHES - 1) as f64;
                let limit = 1.05 + T_9DF * (var / BATCHES as f64).sqrt();
                largest = largest.max(mean);
                if mean.is_nan() || mean > limit {
                    failures.push(format!(
                        "{sizes} {:?} p_x={} p_y={}: median width ratio {mean:.4} > {limit:.4}",
                        intervals[2 * s].0,
                        design.exposed_risk,
                        design.unexposed_risk
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nlargest: {largest:.4}",
        failures.join("\n")
    );
}

/// Sample mean, variance and fourth central moment of released-minus-true values.
fn sample_moments(errors: &[f64]) -> (f64, f64, f64) {
    let n = errors.len() as f64;
    let mean = errors.iter().sum::<f64>() / n;
    let var = errors.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let m4 = errors.iter().map(|x| (x - mean).powi(4)).sum::<f64>() / n;
    (mean, var, m4)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_gaussian_counts_are_calibrated_as_one_vector() {
    // Issue 45's target through SQL: a grouped Gaussian dp_count at ε = 1, δ = 1e-4 over
    // 20,000 groups of 3 rows. Under replace-one a row moves between two groups: one vector of
    // L2 sensitivity √2, for which the continuous analytic Gaussian (Balle & Wang 2018) needs
    // σ² = 20.297 (computed independently in docs/privacy-analysis.md); the paper's per-cell
    // calibration, (ε/2, δ/2) per group at sensitivity 1, needs 39.06 (39.25 measured before).
    // Tolerances: the sample variance of n = 20,000 draws has standard error
    // sqrt((μ4 − σ⁴)/n) ≈ σ²·√(2/n) = 1% of σ² (estimated from the sample); the mean's is
    // sqrt(σ²/n) ≈ 0.032. Each check allows 5 standard errors; the bounds (variance
    // ≤ 21.5, |mean| ≤ 0.2) are checked as stated.
    let ctx = SessionContext::new();
    datafusion_dp::register(&ctx).unwrap();
    ctx.sql("CREATE TABLE t AS SELECT value % 20000 AS g, value AS x FROM generate_series(0, 59999) s(value)")
        .await
        .unwrap();
    ctx.sql("SET dp.seed = 4545").await.unwrap();
    ctx.sql("SET dp.public_groups = 'assert'").await.unwrap();
    for (calibration, theory) in [("analytic", 20.297), ("per_cell", 39.06)] {
        let sql = format!(
            "SELECT dp_count(x, 1.0, 'mechanism=gaussian, delta=1e-4, gaussian_calibration={calibration}') AS c FROM t GROUP BY g"
        );
        let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        let errors: Vec<f64> = batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_primitive::<Int64Type>()
                    .values()
                    .iter()
                    .map(|&c| c as f64 - 3.0)
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(errors.len(), 20_000);
        let (mean, var, m4) = sample_moments(&errors);
        let var_se = ((m4 - var * var) / errors.len() as f64).sqrt();
        let mean_se = (var / errors.len() as f64).sqrt();
        println!("{calibration}: noise variance {var:.3} (se {var_se:.3}), mean {mean:.4}");
        // The discrete law's variance is within 1% above the continuous one (dyadic rounding
        // of σ² up, the discrete δ); below it by at most e^-2π²σ² (nothing at σ² ≈ 20).
        assert!(
            var > theory - 5.0 * var_se && var < theory * 1.01 + 5.0 * var_se,
            "{calibration}: variance {var} vs {theory} (se {var_se})"
        );
        assert!(
            mean.abs() < 5.0 * mean_se && mean.abs() < 0.2,
            "{calibration}: mean {mean}"
        );
        if calibration == "analytic" {
            assert!(var <= 21.5, "variance {var} above the issue's 21.5");
        }
    }
}
