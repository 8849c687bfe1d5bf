//! Small-sample intervals: the parametric bootstrap of a released 2x2 table (Ferrando, Wang &
//! Sheldon 2022, "Parametric bootstrap for differentially private confidence intervals").
//!
//! The normal approximations behind the closed-form intervals fail when a count is in the tens
//! and the noise is of the same size. The bootstrap does not approximate: it fits the sampling
//! model to the released table, replays *the same* release (binomial draws, then
//! [`TableNoise::release`] with the same noise law and the same floors) `B` times, and takes
//! the percentile interval of the replayed estimates. It reads only released values and the
//! public noise law, so it is **pure post-processing: no extra privacy cost**.
//!
//! **Speed.** The replays draw the noise from its law tabulated once per call
//! ([`ReplayNoise`], inverse CDF on a 53-bit uniform) instead of the exact rejection samplers
//! the released values need; the law is the same (to the resolution of an `f64`).
//!
//! **Randomness.** The replays need no secrecy (everything they read is public), so they use a
//! fast non-cryptographic generator (ChaCha8, portable and stable across platforms and
//! versions) seeded from the released table itself. The interval is therefore a deterministic
//! function of the release: seeded (non-private) runs stay reproducible, secure runs give the
//! same interval for the same released counts, and anyone holding the released table can
//! recompute it.

use super::mechanism::CountNoise;
use super::table::{RatioInterval, RatioStatistic, ReleasedTable, TableNoise, TwoByTwo};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Binomial, Distribution};

/// Bootstrap replicates per interval. With `B = 199` the 95% percentile interval is the 5th
/// and 195th of the ordered replays (`(B + 1)·α/2` is an integer), the usual choice.
pub const REPLICATES: usize = 199;

/// The fitted arm `(size, risk)`: the released size (floored at 1; with private sizes the sum
/// of its noisy cells) and `p̂ = X̃/ñ` clamped to `[1/(2ñ), 1 − 1/(2ñ)]` (half a case from
/// either end, so a noisy count at or beyond a boundary still gives a non-degenerate model).
pub fn fit_arm(cases: i64, total: i64) -> (u64, f64) {
    let n = total.max(1) as u64;
    let half = 0.5 / n as f64;
    (n, (cases as f64 / n as f64).clamp(half, 1.0 - half))
}

/// Largest table [`ReplayNoise`] builds (entries); wider laws (per-cell ε below ~1e-3) fall
/// back to the exact sampler.
const MAX_TABLE: usize = 1 << 20;

/// The per-cell noise law as a cumulative table for fast replays: `P(k) ∝ exp(−|k|/b)`
/// (discrete Laplace, `b = Δ/ε`) or `exp(−k²/2σ²)` (discrete Gaussian) on `|k| ≤ K`, with `K`
/// where the tail is below `2^-53` (`40b`, `10σ`), the resolution of the uniform it inverts.
#[derive(Clone, Debug)]
pub struct ReplayNoise {
    lo: i64,
    cdf: Vec<f64>,
    exact: CountNoise,
}

impl ReplayNoise {
    /// Tabulates the law of `noise` (the exact sampler is kept for laws too wide to table).
    pub fn new(noise: &CountNoise) -> Self {
        let scale = noise.scale;
        let law = noise.law();
        let k = law.replay_radius(scale);
        let k = k.max(1.0);
        if 2.0 * k + 1.0 > MAX_TABLE as f64 {
            return Self {
                lo: 0,
                cdf: Vec::new(),
                exact: *noise,
            };
        }
        let k = k as i64;
        let mut cdf: Vec<f64> = (-k..=k)
            .map(|x| law.replay_weight(x as f64, scale))
            .collect();
        let mut total = 0.0;
        for w in cdf.iter_mut() {
            total += *w;
            *w = total;
        }
        for c in cdf.iter_mut() {
            *c /= total;
        }
        Self {
            lo: -k,
            cdf,
            exact: *noise,
        }
    }

    /// One draw of the noise.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> i64 {
        if self.cdf.is_empty() {
            return self.exact.sample(rng);
        }
        let u: f64 = rng.random();
        let i = self
            .cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1);
        self.lo + i as i64
    }
}

/// SplitMix64's finaliser (Steele, Lea & Flood 2014), to mix the released values into a seed.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The replay generator's seed: a hash of everything the interval depends on (the released
/// table, the statistic, the confidence level and the noise variance).
fn replay_seed(released: &ReleasedTable, statistic: RatioStatistic, confidence: f64) -> u64 {
    let words = [
        released.exposed_cases as u64,
        released.exposed_total as u64,
        released.unexposed_cases as u64,
        released.unexposed_total as u64,
        released.sizes as u64,
        statistic as u64,
        confidence.to_bits(),
        released.noise_variance.to_bits(),
    ];
    words.iter().fold(0x6470_2d62_6f6f_7473, |h, &w| mix(h ^ w))
}

/// The parametric-bootstrap percentile interval for `statistic` from a table `noise` released
/// (Ferrando, Wang & Sheldon 2022, Algorithm 1 with the percentile interval): fit
/// `(n̂_x, p̂_x, n̂_y, p̂_y)` from the released table ([`fit_arm`]), draw `replicates` tables
/// `X* ~ Bin(n̂_x, p̂_x)`, `Y* ~ Bin(n̂_y, p̂_y)`, release each as `noise` does (same cells,
/// same floors; the noise from `replay`, the tabulated law of `noise.cell`) and compute the
/// same estimator; the interval is the `(α/2, 1 − α/2)` order statistics of those estimates
/// (the `k`-th and `(B+1−k)`-th, `k = ⌊(B+1)α/2⌋ ≥ 1`), around the released table's own
/// estimate. Ratios are clamped at 0 from below, the risk difference to `[−1, 1]`. `None`
/// when the released table has no estimate (public sizes with an empty arm).
pub fn bootstrap_interval(
    noise: &TableNoise,
    replay: &ReplayNoise,
    released: &ReleasedTable,
    statistic: RatioStatistic,
    confidence: f64,
    replicates: usize,
) -> Option<RatioInterval> {
    let estimate = released.estimate(statistic)?;
    let (nx, px) = fit_arm(released.exposed_cases, released.exposed_total);
    let (ny, py) = fit_arm(released.unexposed_cases, released.unexposed_total);
    let exposed = Binomial::new(nx, px).ok()?;
    let unexposed = Binomial::new(ny, py).ok()?;
    let mut rng = ChaCha8Rng::seed_from_u64(replay_seed(released, statistic, confidence));
    let mut replays = Vec::with_capacity(replicates);
    for _ in 0..replicates {
        let x = exposed.sample(&mut rng);
        let y = unexposed.sample(&mut rng);
        let table = TwoByTwo {
            a: x,
            b: nx - x,
            c: y,
            d: ny - y,
        };
        let replayed = noise.release_with(&table, &mut rng, |rng| replay.sample(rng));
        if let Some(e) = replayed.ok().and_then(|r| r.estimate(statistic)) {
            replays.push(e);
        }
    }
    if replays.is_empty() {
        return None;
    }
    replays.sort_unstable_by(f64::total_cmp);
    let b = replays.len();
    let k = ((((b + 1) as f64) * (1.0 - confidence) / 2.0).floor() as usize).clamp(1, b);
    let (lower, upper) = (replays[k - 1], replays[b - k]);
    let (lower, upper) = match statistic {
        RatioStatistic::RiskDifference => (lower.max(-1.0), upper.min(1.0)),
        _ => (lower.max(0.0), upper.max(0.0)),
    };
    Some(RatioInterval {
        estimate,
        lower,
        upper,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{GaussianCalibration, GroupSizes, Mechanism};

    #[test]
    fn replay_noise_has_the_law_of_the_released_noise() {
        // The tabulated law against the exact variance of the noise (CountNoise::variance,
        // itself tested against the exact samplers in tests/statistics.rs): 200,000 draws,
        // the sample variance within 5 standard errors sqrt((μ4 − σ⁴)/n), the mean within
        // 5·σ/sqrt(n).
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for (mechanism, delta) in [
            (Mechanism::Laplace, None),
            (Mechanism::Gaussian, Some(1e-4)),
        ] {
            let noise = TableNoise::calibrate(
                mechanism,
                0.5,
                delta,
                GaussianCalibration::Analytic,
                GroupSizes::Private,
            )
            .unwrap()
            .cell;
            let replay = ReplayNoise::new(&noise);
            let n = 200_000;
            let draws: Vec<f64> = (0..n).map(|_| replay.sample(&mut rng) as f64).collect();
            let mean = draws.iter().sum::<f64>() / n as f64;
            let var = draws.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            let m4 = draws.iter().map(|x| (x - mean).powi(4)).sum::<f64>() / n as f64;
            let se = ((m4 - var * var) / n as f64).sqrt();
            assert!(
                (var - noise.variance).abs() < 5.0 * se,
                "{mechanism}: {var} vs {}",
                noise.variance
            );
            assert!(
                mean.abs() < 5.0 * (var / n as f64).sqrt(),
                "{mechanism}: {mean}"
            );
        }
    }

    fn noise(sizes: GroupSizes) -> TableNoise {
        TableNoise::calibrate(
            Mechanism::Laplace,
            0.5,
            None,
            GaussianCalibration::Analytic,
            sizes,
        )
        .unwrap()
    }

    #[test]
    fn interval_is_a_deterministic_function_of_the_release() {
        let n = noise(GroupSizes::Private);
        let released = n
            .release(
                &TwoByTwo {
                    a: 10,
                    b: 40,
                    c: 5,
                    d: 45,
                },
                &mut ChaCha8Rng::seed_from_u64(1),
            )
            .unwrap();
        let r = ReplayNoise::new(&n.cell);
        for statistic in [
            RatioStatistic::RelativeRisk,
            RatioStatistic::OddsRatio,
            RatioStatistic::RiskDifference,
        ] {
            let a = bootstrap_interval(&n, &r, &released, statistic, 0.95, REPLICATES).unwrap();
            let b = bootstrap_interval(&n, &r, &released, statistic, 0.95, REPLICATES).unwrap();
            assert_eq!(a, b);
            assert_eq!(Some(a.estimate), released.estimate(statistic));
            assert!(a.lower <= a.upper, "{statistic:?} {a:?}");
            // A lower confidence level gives a nested, narrower interval.
            let c = bootstrap_interval(&n, &r, &released, statistic, 0.8, REPLICATES).unwrap();
            assert!(c.upper - c.lower <= a.upper - a.lower, "{statistic:?}");
        }
    }

    #[test]
    fn order_statistics_are_the_percentile_ones() {
        // With B = 199 and 95%: k = 5, so the 5th and 195th ordered replays. Recompute them
        // by hand from the same replays.
        let n = noise(GroupSizes::Public);
        let released = ReleasedTable {
            exposed_cases: 20,
            exposed_total: 50,
            unexposed_cases: 10,
            unexposed_total: 50,
            sizes: GroupSizes::Public,
            noise_variance: n.cell.variance,
            noise_fourth_cumulant: n.cell.fourth_cumulant,
        };
        let statistic = RatioStatistic::RiskDifference;
        let r = ReplayNoise::new(&n.cell);
        let ci = bootstrap_interval(&n, &r, &released, statistic, 0.95, 199).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(replay_seed(&released, statistic, 0.95));
        let (bx, by) = (
            Binomial::new(50, 0.4).unwrap(),
            Binomial::new(50, 0.2).unwrap(),
        );
        let mut replays: Vec<f64> = (0..199)
            .map(|_| {
                let (x, y) = (bx.sample(&mut rng), by.sample(&mut rng));
                let t = TwoByTwo {
                    a: x,
                    b: 50 - x,
                    c: y,
                    d: 50 - y,
                };
                n.release_with(&t, &mut rng, |rng| r.sample(rng))
                    .unwrap()
                    .risk_difference()
                    .unwrap()
            })
            .collect();
        replays.sort_by(f64::total_cmp);
        assert_eq!((ci.lower, ci.upper), (replays[4], replays[194]));
        assert_eq!(ci.estimate, 0.2);
    }

    #[test]
    fn empty_public_arm_has_no_interval() {
        let n = noise(GroupSizes::Public);
        let released = ReleasedTable {
            exposed_cases: 0,
            exposed_total: 0,
            unexposed_cases: 3,
            unexposed_total: 9,
            sizes: GroupSizes::Public,
            noise_variance: n.cell.variance,
            noise_fourth_cumulant: n.cell.fourth_cumulant,
        };
        let r = ReplayNoise::new(&n.cell);
        assert_eq!(
            bootstrap_interval(&n, &r, &released, RatioStatistic::RelativeRisk, 0.95, 199),
            None
        );
    }
}
