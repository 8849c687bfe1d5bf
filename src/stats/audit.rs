//! An empirical privacy auditor: a lower confidence bound on the ε that a mechanism's
//! outputs reveal, from samples of its output on two neighbouring datasets `D` and `D'`.
//!
//! An `(ε, δ)`-DP mechanism `M` satisfies `P(M(D) ∈ E) ≤ e^ε P(M(D') ∈ E) + δ` for every event
//! `E` and both orders of the pair (Dwork & Roth 2014, Definition 2.4). Given samples of
//! `M(D)` and `M(D')` (each a vector of features, `NaN` for a missing value), [`audit`]:
//!
//! 1. splits each sample in halves; on the **training** halves it searches a family of events
//!    (thresholds and intervals on each feature, quadrants of pairs of features, thresholds on a naive-Bayes
//!    log-likelihood-ratio score, missing values) and both orders of the pair for the one that
//!    promises the largest bound (Wilson score bounds, cheap);
//! 2. on the **test** halves, untouched by that choice, counts the one chosen event and takes
//!    one-sided Clopper-Pearson bounds at level `α/2` each: `p̲ ≤ P(M(D) ∈ E)` and
//!    `q̄ ≥ P(M(D') ∈ E)`;
//! 3. returns `ε̲ = ln((p̲ − δ)/q̄)` (0 when `p̲ ≤ δ`: no evidence).
//!
//! **False-alarm rate.** The event and the order are fixed before the test halves are read,
//! and each test sample is i.i.d., so with probability at least `1 − α` both Clopper-Pearson
//! bounds hold (union bound); then `(p̲ − δ)/q̄ ≤ (P(E|D) − δ)/P(E|D') ≤ e^ε`. Hence for a
//! mechanism that really is `(ε, δ)`-DP, `P(ε̲ > ε) ≤ α`, whatever the event search did. This
//! is the split-sample design of DP-Sniper (Bichsel et al. 2021) and of Google's
//! DP-Auditorium, with exact binomial bounds as in Google's DP Stochastic Tester.
//!
//! The bound is only as tight as the best event in the family: for integer counts with
//! Laplace noise one threshold event reaches the full `e^ε` (see `docs/auditing.md`).

use statrs::distribution::{ContinuousCDF, Normal};
use std::fmt;

/// Samples of one mechanism's output on one dataset: `len` releases of `dims` features each,
/// row-major; `NaN` marks a missing value (a NULL, a group not released).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Releases {
    pub dims: usize,
    pub values: Vec<f64>,
}

impl Releases {
    pub fn new(dims: usize) -> Self {
        Self {
            dims,
            values: Vec::new(),
        }
    }

    /// Appends one release (`features.len()` must be `dims`).
    pub fn push(&mut self, features: &[f64]) {
        assert_eq!(features.len(), self.dims, "release of the wrong width");
        self.values.extend_from_slice(features);
    }

    pub fn len(&self) -> usize {
        self.values.len().checked_div(self.dims).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> &[f64] {
        &self.values[i * self.dims..(i + 1) * self.dims]
    }

    /// Releases `range` (a half, for the split).
    fn slice(&self, from: usize, to: usize) -> Sample<'_> {
        Sample {
            dims: self.dims,
            values: &self.values[from * self.dims..to * self.dims],
        }
    }
}

#[derive(Clone, Copy)]
struct Sample<'a> {
    dims: usize,
    values: &'a [f64],
}

impl<'a> Sample<'a> {
    fn len(&self) -> usize {
        self.values.len() / self.dims
    }
    fn rows(&self) -> impl Iterator<Item = &'a [f64]> + 'a {
        self.values.chunks_exact(self.dims)
    }
    fn column(&self, j: usize) -> impl Iterator<Item = f64> + 'a {
        self.values.iter().skip(j).step_by(self.dims).copied()
    }
}

/// Which side of a threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// `value >= threshold`.
    AtLeast,
    /// `value < threshold`.
    Below,
}

impl Side {
    fn holds(self, value: f64, threshold: f64) -> bool {
        match self {
            Self::AtLeast => value >= threshold,
            Self::Below => value < threshold,
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AtLeast => ">=",
            Self::Below => "<",
        })
    }
}

/// A naive-Bayes log-likelihood-ratio score fitted on the training halves: each feature is
/// cut into bins, each bin gets `ln(P̂(bin | D)/P̂(bin | D'))` (add-one smoothing), and a
/// release scores the sum over its features. It is the likelihood ratio itself when the
/// features are independent (as the noise of separate groups is), so thresholds on it are
/// the Neyman-Pearson events for joint releases.
#[derive(Clone, Debug, PartialEq)]
pub struct Score {
    /// Per feature: the bin edges (a value's bin is the number of edges `<=` it; `NaN` is the
    /// last bin) and each bin's log ratio.
    features: Vec<(Vec<f64>, Vec<f64>)>,
}

impl Score {
    fn bin(edges: &[f64], value: f64) -> usize {
        if value.is_nan() {
            edges.len() + 1
        } else {
            edges.partition_point(|&e| e <= value)
        }
    }

    fn fit(d: Sample, d_prime: Sample, max_bins: usize) -> Self {
        let features = (0..d.dims)
            .map(|j| {
                let edges = thresholds(d.column(j).chain(d_prime.column(j)), max_bins);
                let bins = edges.len() + 2;
                let mut counts = [vec![0.0; bins], vec![0.0; bins]];
                for (side, sample) in [d, d_prime].into_iter().enumerate() {
                    for v in sample.column(j) {
                        counts[side][Self::bin(&edges, v)] += 1.0;
                    }
                }
                let (n, n_prime) = (d.len() as f64, d_prime.len() as f64);
                let ratios = (0..bins)
                    .map(|b| {
                        ((counts[0][b] + 1.0) / (n + bins as f64)).ln()
                            - ((counts[1][b] + 1.0) / (n_prime + bins as f64)).ln()
                    })
                    .collect();
                (edges, ratios)
            })
            .collect();
        Self { features }
    }

    /// The score of one release.
    pub fn of(&self, release: &[f64]) -> f64 {
        self.features
            .iter()
            .zip(release)
            .map(|((edges, ratios), &v)| ratios[Self::bin(edges, v)])
            .sum()
    }
}

/// An event on a release, chosen on the training halves.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// `feature[j] >= t` or `feature[j] < t` (`NaN` is in neither).
    Threshold {
        feature: usize,
        side: Side,
        threshold: f64,
    },
    /// `low <= feature[j] < high`: catches a noise scale that depends on the data.
    Interval { feature: usize, low: f64, high: f64 },
    /// Feature `j` is missing (`NaN`).
    Missing { feature: usize },
    /// Feature `j` is present.
    Present { feature: usize },
    /// Both thresholds hold.
    Quadrant {
        first: (usize, Side, f64),
        second: (usize, Side, f64),
    },
    /// The naive-Bayes score is on `side` of `threshold`.
    Score {
        score: Box<Score>,
        side: Side,
        threshold: f64,
    },
}

impl Event {
    /// Whether `release` lies in the event.
    pub fn contains(&self, release: &[f64]) -> bool {
        match self {
            Self::Threshold {
                feature,
                side,
                threshold,
            } => side.holds(release[*feature], *threshold),
            Self::Interval { feature, low, high } => {
                release[*feature] >= *low && release[*feature] < *high
            }
            Self::Missing { feature } => release[*feature].is_nan(),
            Self::Present { feature } => !release[*feature].is_nan(),
            Self::Quadrant { first, second } => {
                first.1.holds(release[first.0], first.2)
                    && second.1.holds(release[second.0], second.2)
            }
            Self::Score {
                score,
                side,
                threshold,
            } => side.holds(score.of(release), *threshold),
        }
    }

    /// A readable description, naming features by `names` (or `f{j}`).
    pub fn describe(&self, names: &[String]) -> String {
        let name = |j: usize| names.get(j).cloned().unwrap_or_else(|| format!("f{j}"));
        match self {
            Self::Threshold {
                feature,
                side,
                threshold,
            } => format!("{} {side} {threshold}", name(*feature)),
            Self::Interval { feature, low, high } => {
                format!("{low} <= {} < {high}", name(*feature))
            }
            Self::Missing { feature } => format!("{} is missing", name(*feature)),
            Self::Present { feature } => format!("{} is present", name(*feature)),
            Self::Quadrant { first, second } => format!(
                "{} {} {} and {} {} {}",
                name(first.0),
                first.1,
                first.2,
                name(second.0),
                second.1,
                second.2
            ),
            Self::Score {
                side, threshold, ..
            } => format!("naive-Bayes log-likelihood-ratio score {side} {threshold:.4}"),
        }
    }
}

/// The auditor's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AuditSettings {
    /// The claimed `δ` subtracted from the numerator's lower bound (0 for pure ε-DP).
    pub delta: f64,
    /// False-alarm rate: `P(ε̲ > ε) ≤ alpha` for an `(ε, δ)`-DP mechanism.
    pub alpha: f64,
    /// Candidate thresholds per feature (quantiles of the pooled training values, or every
    /// distinct value when there are fewer).
    pub thresholds: usize,
    /// Candidate thresholds per feature in quadrant events (pairs of features).
    pub pair_thresholds: usize,
    /// Most features for which every pair is searched.
    pub max_pair_features: usize,
}

impl Default for AuditSettings {
    fn default() -> Self {
        Self {
            delta: 0.0,
            alpha: 0.05,
            thresholds: 512,
            pair_thresholds: 32,
            max_pair_features: 8,
        }
    }
}

/// What the auditor found.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditReport {
    /// The lower confidence bound (level `1 − alpha`) on the mechanism's ε; 0 when the test
    /// half gives no evidence.
    pub epsilon_lower: f64,
    /// The event chosen on the training halves.
    pub event: Event,
    /// True when the event is likelier under `D'` (the ratio is `P(E|D')/P(E|D)`).
    pub reversed: bool,
    /// Test-half counts: releases in the event / releases, for the numerator's dataset and
    /// the denominator's.
    pub numerator: (u64, u64),
    pub denominator: (u64, u64),
    /// The Clopper-Pearson bounds `p̲` (numerator) and `q̄` (denominator).
    pub p_lower: f64,
    pub q_upper: f64,
    /// The point estimate `ln(p̂/q̂)` on the test halves (no confidence adjustment).
    pub epsilon_estimate: f64,
    pub settings: AuditSettings,
}

impl AuditReport {
    /// One line: the bound, the event, and the test counts.
    pub fn summary(&self, names: &[String]) -> String {
        let (first, second) = if self.reversed {
            ("D'", "D")
        } else {
            ("D", "D'")
        };
        format!(
            "epsilon_lower = {:.4} (point estimate {:.4}) at confidence {}: event [{}] in {} of {} releases of {first}, {} of {} of {second}",
            self.epsilon_lower,
            self.epsilon_estimate,
            1.0 - self.settings.alpha,
            self.event.describe(names),
            self.numerator.0,
            self.numerator.1,
            self.denominator.0,
            self.denominator.1
        )
    }
}

/// Audits the releases `d` (from `D`) and `d_prime` (from `D'`): see the module docs.
pub fn audit(
    d: &Releases,
    d_prime: &Releases,
    settings: AuditSettings,
) -> Result<AuditReport, String> {
    if d.dims == 0 || d.dims != d_prime.dims {
        return Err(format!(
            "audit: both samples need the same positive number of features, got {} and {}",
            d.dims, d_prime.dims
        ));
    }
    if d.len() < 4 || d_prime.len() < 4 {
        return Err("audit: at least 4 releases of each dataset are needed".to_string());
    }
    if !(settings.alpha > 0.0 && settings.alpha < 1.0) {
        return Err(format!(
            "audit: alpha must be in (0, 1), got {}",
            settings.alpha
        ));
    }
    if !(settings.delta >= 0.0 && settings.delta < 1.0) {
        return Err(format!(
            "audit: delta must be in [0, 1), got {}",
            settings.delta
        ));
    }
    let (hd, hp) = (d.len() / 2, d_prime.len() / 2);
    let (train_d, test_d) = (d.slice(0, hd), d.slice(hd, d.len()));
    let (train_p, test_p) = (d_prime.slice(0, hp), d_prime.slice(hp, d_prime.len()));
    let (event, reversed) = choose_event(train_d, train_p, &settings);
    let count = |s: Sample| s.rows().filter(|r| event.contains(r)).count() as u64;
    let (kd, kp) = (count(test_d), count(test_p));
    let (nd, np) = (test_d.len() as u64, test_p.len() as u64);
    let (numerator, denominator) = if reversed {
        ((kp, np), (kd, nd))
    } else {
        ((kd, nd), (kp, np))
    };
    let level = settings.alpha / 2.0;
    let p_lower = clopper_pearson_lower(numerator.0, numerator.1, level);
    let q_upper = clopper_pearson_upper(denominator.0, denominator.1, level);
    let epsilon_lower = if p_lower > settings.delta {
        ((p_lower - settings.delta) / q_upper).ln().max(0.0)
    } else {
        0.0
    };
    let rate = |(k, n): (u64, u64)| k as f64 / n as f64;
    let epsilon_estimate = ((rate(numerator) - settings.delta).max(0.0) / rate(denominator)).ln();
    Ok(AuditReport {
        epsilon_lower,
        event,
        reversed,
        numerator,
        denominator,
        p_lower,
        q_upper,
        epsilon_estimate,
        settings,
    })
}

/// Up to `max` candidate thresholds from `values` (finite ones): every distinct value when
/// there are at most `max`, else `max` evenly spaced order statistics (deduplicated).
fn thresholds(values: impl Iterator<Item = f64>, max: usize) -> Vec<f64> {
    let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let mut distinct = v.clone();
    distinct.dedup();
    if distinct.len() <= max {
        return distinct;
    }
    let mut out: Vec<f64> = (0..max)
        .map(|i| v[(i * v.len()) / max + v.len() / (2 * max)])
        .collect();
    out.dedup();
    out
}

/// The best (event, reversed) on the training halves by the Wilson-bound criterion.
fn choose_event(d: Sample, p: Sample, settings: &AuditSettings) -> (Event, bool) {
    // The search compares thousands of events, and the largest of many noisy estimates is
    // biased upwards (most for events with few releases); judging each by a bound at a level
    // Bonferroni-corrected for 10^4 events favours events whose bound will hold up on the
    // test half.
    let z = Normal::new(0.0, 1.0)
        .expect("standard normal")
        .inverse_cdf(1.0 - settings.alpha / 2e4);
    let (nd, np) = (d.len() as f64, p.len() as f64);
    let mut best: Option<(f64, Event, bool)> = None;
    let mut consider = |kd: f64, kp: f64, event: &dyn Fn() -> Event| {
        for (reversed, (ka, na, kb, nb)) in [(false, (kd, nd, kp, np)), (true, (kp, np, kd, nd))] {
            let lower = wilson(ka, na, z).0 - settings.delta;
            let upper = wilson(kb, nb, z).1;
            if lower <= 0.0 {
                continue;
            }
            let value = (lower / upper).ln();
            if best.as_ref().is_none_or(|b| value > b.0) {
                best = Some((value, event(), reversed));
            }
        }
    };
    // Single features: thresholds and missing values.
    let mut sorted = Vec::with_capacity(d.dims);
    for j in 0..d.dims {
        let sort = |s: Sample| {
            let mut v: Vec<f64> = s.column(j).filter(|x| !x.is_nan()).collect();
            v.sort_by(f64::total_cmp);
            v
        };
        let (vd, vp) = (sort(d), sort(p));
        let (missing_d, missing_p) = ((d.len() - vd.len()) as f64, (p.len() - vp.len()) as f64);
        consider(missing_d, missing_p, &|| Event::Missing { feature: j });
        consider(nd - missing_d, np - missing_p, &|| Event::Present {
            feature: j,
        });
        let candidates = thresholds(vd.iter().chain(&vp).copied(), settings.thresholds);
        for &t in &candidates {
            let below = |v: &[f64]| v.partition_point(|&x| x < t) as f64;
            let (bd, bp) = (below(&vd), below(&vp));
            consider(vd.len() as f64 - bd, vp.len() as f64 - bp, &|| {
                Event::Threshold {
                    feature: j,
                    side: Side::AtLeast,
                    threshold: t,
                }
            });
            consider(bd, bp, &|| Event::Threshold {
                feature: j,
                side: Side::Below,
                threshold: t,
            });
        }
        // Intervals between coarser thresholds.
        let coarse = thresholds(vd.iter().chain(&vp).copied(), settings.pair_thresholds);
        for (i, &low) in coarse.iter().enumerate() {
            for &high in &coarse[i + 1..] {
                let within = |v: &[f64]| {
                    (v.partition_point(|&x| x < high) - v.partition_point(|&x| x < low)) as f64
                };
                consider(within(&vd), within(&vp), &|| Event::Interval {
                    feature: j,
                    low,
                    high,
                });
            }
        }
        sorted.push((vd, vp));
    }
    // Pairs of features: quadrants on a coarser grid of thresholds, counted from 2-D bins.
    let pair_features = d.dims.min(settings.max_pair_features);
    let edges: Vec<Vec<f64>> = sorted
        .iter()
        .take(pair_features)
        .map(|(vd, vp)| thresholds(vd.iter().chain(vp).copied(), settings.pair_thresholds))
        .collect();
    for j in 0..pair_features {
        for k in j + 1..pair_features {
            let (ej, ek) = (&edges[j], &edges[k]);
            let (bj, bk) = (ej.len() + 1, ek.len() + 1);
            // grid[s][a][b]: releases of sample s whose features j, k fall in bins a, b
            // (bin = number of edges <= value); a NaN in either feature is in no quadrant.
            let grid = |s: Sample| {
                let mut g = vec![0.0f64; bj * bk];
                for row in s.rows() {
                    let (x, y) = (row[j], row[k]);
                    if x.is_nan() || y.is_nan() {
                        continue;
                    }
                    let a = ej.partition_point(|&e| e <= x);
                    let b = ek.partition_point(|&e| e <= y);
                    g[a * bk + b] += 1.0;
                }
                g
            };
            // Exclusive 2-D prefix sums: cum[x][y] = releases in bins (< x, < y).
            let prefix = |g: Vec<f64>| {
                let mut cum = vec![0.0f64; (bj + 1) * (bk + 1)];
                for x in 0..bj {
                    for y in 0..bk {
                        cum[(x + 1) * (bk + 1) + y + 1] =
                            g[x * bk + y] + cum[x * (bk + 1) + y + 1] + cum[(x + 1) * (bk + 1) + y]
                                - cum[x * (bk + 1) + y];
                    }
                }
                cum
            };
            let (gd, gp) = (prefix(grid(d)), prefix(grid(p)));
            // Quadrant {x (side) e_j[a], y (side) e_k[b]}: x >= e_j[a] is bins a+1.., x < e_j[a]
            // is bins ..=a.
            let range = |side: Side, a: usize, bins: usize| match side {
                Side::AtLeast => (a + 1, bins),
                Side::Below => (0, a + 1),
            };
            let quadrant = |cum: &[f64], a: usize, sa: Side, b: usize, sb: Side| {
                let ((x0, x1), (y0, y1)) = (range(sa, a, bj), range(sb, b, bk));
                let at = |x: usize, y: usize| cum[x * (bk + 1) + y];
                at(x1, y1) - at(x0, y1) - at(x1, y0) + at(x0, y0)
            };
            for (a, &ta) in ej.iter().enumerate() {
                for (b, &tb) in ek.iter().enumerate() {
                    for sa in [Side::AtLeast, Side::Below] {
                        for sb in [Side::AtLeast, Side::Below] {
                            consider(
                                quadrant(&gd, a, sa, b, sb),
                                quadrant(&gp, a, sa, b, sb),
                                &|| Event::Quadrant {
                                    first: (j, sa, ta),
                                    second: (k, sb, tb),
                                },
                            );
                        }
                    }
                }
            }
        }
    }
    // Joint releases: thresholds on the naive-Bayes score.
    if d.dims >= 2 {
        let score = Score::fit(d, p, 64);
        let scores = |s: Sample| {
            let mut v: Vec<f64> = s.rows().map(|r| score.of(r)).collect();
            v.sort_by(f64::total_cmp);
            v
        };
        let (sd, sp) = (scores(d), scores(p));
        for t in thresholds(sd.iter().chain(&sp).copied(), settings.thresholds) {
            let below = |v: &[f64]| v.partition_point(|&x| x < t) as f64;
            let (bd, bp) = (below(&sd), below(&sp));
            for (side, kd, kp) in [(Side::AtLeast, nd - bd, np - bp), (Side::Below, bd, bp)] {
                consider(kd, kp, &|| Event::Score {
                    score: Box::new(score.clone()),
                    side,
                    threshold: t,
                });
            }
        }
    }
    match best {
        Some((_, event, reversed)) => (event, reversed),
        // No event has a positive lower bound on the training halves: test any one.
        None => (Event::Present { feature: 0 }, false),
    }
}

/// The exponent `e` of the coarsest power-of-two grid `2^e` that `value` lies on (`value =
/// m·2^e`, `m` an odd integer); `+1024` for 0 and `NaN` for `NaN` or infinities. A feature for
/// audits of floating-point releases: a grid that depends on the data shows in it.
pub fn grid_exponent(value: f64) -> f64 {
    if !value.is_finite() {
        return f64::NAN;
    }
    if value == 0.0 {
        return 1024.0;
    }
    let bits = value.abs().to_bits();
    let biased = (bits >> 52) as i64;
    let fraction = bits & ((1u64 << 52) - 1);
    // Normal numbers carry the implicit leading 1; subnormals have exponent 1 − 1075.
    let (mantissa, exponent) = if biased == 0 {
        (fraction, 1 - 1075)
    } else {
        (fraction | (1u64 << 52), biased - 1075)
    };
    (exponent + mantissa.trailing_zeros() as i64) as f64
}

/// The Wilson score interval `(lower, upper)` for `k` successes in `n` at normal quantile `z`
/// (Wilson 1927): only the event search uses it; the reported bound is Clopper-Pearson.
fn wilson(k: f64, n: f64, z: f64) -> (f64, f64) {
    let z2 = z * z;
    let center = (k + z2 / 2.0) / (n + z2);
    let half = z * (k * (n - k) / n + z2 / 4.0).sqrt() / (n + z2);
    ((center - half).max(0.0), (center + half).min(1.0))
}

/// `P(X >= k)` for `X ~ Binomial(n, p)`, summed from the tail side (terms in log space via
/// the pmf ratio recursion), accurate to about 1e-14 relative for the `n` used here.
pub fn binomial_upper_tail(n: u64, k: u64, p: f64) -> f64 {
    if k == 0 || p >= 1.0 {
        return 1.0;
    }
    if k > n || p <= 0.0 {
        return 0.0;
    }
    let ln_pmf = |j: u64| {
        use statrs::function::gamma::ln_gamma;
        let (n, j) = (n as f64, j as f64);
        ln_gamma(n + 1.0) - ln_gamma(j + 1.0) - ln_gamma(n - j + 1.0)
            + j * p.ln()
            + (n - j) * (-p).ln_1p()
    };
    let mean = n as f64 * p;
    let odds = p / (1.0 - p);
    if k as f64 >= mean {
        // Upper tail: terms decrease from k upward.
        let mut term = ln_pmf(k).exp();
        let mut sum = 0.0;
        let mut j = k;
        loop {
            sum += term;
            if j == n || term <= sum * 1e-17 {
                break;
            }
            term *= (n - j) as f64 / (j + 1) as f64 * odds;
            j += 1;
        }
        sum.min(1.0)
    } else {
        // 1 − P(X <= k − 1): terms decrease from k − 1 downward.
        let mut j = k - 1;
        let mut term = ln_pmf(j).exp();
        let mut sum = 0.0;
        loop {
            sum += term;
            if j == 0 || term <= sum * 1e-17 {
                break;
            }
            term *= j as f64 / (n - j + 1) as f64 / odds;
            j -= 1;
        }
        (1.0 - sum).max(0.0)
    }
}

/// Bisection for the `p` where a monotone `f(p)` crosses `target`; returns the bracket.
fn bisect(f: impl Fn(f64) -> f64, target: f64, increasing: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        let above = f(mid) > target;
        if above == increasing {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    (lo, hi)
}

/// One-sided Clopper-Pearson lower bound (level `level`): the `p` at which
/// `P(Bin(n, p) >= k) = level`, rounded down; 0 for `k = 0` (Clopper & Pearson 1934).
pub fn clopper_pearson_lower(k: u64, n: u64, level: f64) -> f64 {
    if k == 0 {
        return 0.0;
    }
    bisect(|p| binomial_upper_tail(n, k, p), level, true).0
}

/// One-sided Clopper-Pearson upper bound (level `level`): the `p` at which
/// `P(Bin(n, p) <= k) = level`, rounded up; 1 for `k = n`.
pub fn clopper_pearson_upper(k: u64, n: u64, level: f64) -> f64 {
    if k >= n {
        return 1.0;
    }
    // P(X <= k) = 1 − P(X >= k + 1), decreasing in p.
    bisect(|p| 1.0 - binomial_upper_tail(n, k + 1, p), level, false).1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{CountNoise, GaussianCalibration, Mechanism};
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    fn exact_upper_tail(n: u64, k: u64, p: f64) -> f64 {
        // Direct sum with binomial coefficients (small n only).
        let mut total = 0.0;
        for j in k..=n {
            let mut c = 1.0;
            for i in 0..j {
                c *= (n - i) as f64 / (i + 1) as f64;
            }
            total += c * p.powi(j as i32) * (1.0 - p).powi((n - j) as i32);
        }
        total
    }

    #[test]
    fn binomial_tail_matches_direct_summation() {
        for (n, k, p) in [
            (20, 5, 0.3),
            (20, 15, 0.3),
            (50, 0, 0.1),
            (50, 50, 0.9),
            (30, 1, 0.01),
        ] {
            let ours = binomial_upper_tail(n, k, p);
            let direct = exact_upper_tail(n, k, p);
            assert!(
                (ours - direct).abs() < 1e-12,
                "{n} {k} {p}: {ours} vs {direct}"
            );
        }
    }

    #[test]
    fn clopper_pearson_matches_known_values() {
        // k = 0: the upper bound solves (1 − p)^n = level exactly.
        let upper = clopper_pearson_upper(0, 100, 0.025);
        assert!(
            (upper - (1.0 - 0.025f64.powf(0.01))).abs() < 1e-12,
            "{upper}"
        );
        // k = n: the lower bound solves p^n = level.
        let lower = clopper_pearson_lower(100, 100, 0.025);
        assert!((lower - 0.025f64.powf(0.01)).abs() < 1e-12, "{lower}");
        // A large n: the bounds sit about z·sd around k/n (z = 3.29 at 0.0005).
        let (k, n) = (250_000u64, 1_000_000u64);
        let (lo, hi) = (
            clopper_pearson_lower(k, n, 0.0005),
            clopper_pearson_upper(k, n, 0.0005),
        );
        let sd = (0.25f64 * 0.75 / n as f64).sqrt();
        assert!(((0.25 - lo) / sd - 3.29).abs() < 0.05, "{lo}");
        assert!(((hi - 0.25) / sd - 3.29).abs() < 0.05, "{hi}");
    }

    fn count_releases(noise: &CountNoise, count: i64, n: usize, seed: u64) -> Releases {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let mut out = Releases::new(1);
        for _ in 0..n {
            out.push(&[(count + noise.sample(&mut rng)) as f64]);
        }
        out
    }

    #[test]
    fn a_laplace_count_is_audited_tightly_and_never_above_its_epsilon() {
        // Discrete Laplace at ε = 1 on counts 1 and 0: the event {x >= 1} has ratio exactly
        // e^ε, with probabilities 0.73 and 0.27, so 100,000 test releases per side bound ε
        // within a few hundredths (3.3 SE of ln p̂ − ln q̂ ≈ 0.03 at alpha = 1e-3).
        let noise = CountNoise::calibrate(
            Mechanism::Laplace,
            1.0,
            None,
            1,
            GaussianCalibration::Analytic,
        )
        .unwrap();
        let settings = AuditSettings {
            alpha: 1e-3,
            ..Default::default()
        };
        let report = audit(
            &count_releases(&noise, 1, 200_000, 1),
            &count_releases(&noise, 0, 200_000, 2),
            settings,
        )
        .unwrap();
        assert!(report.epsilon_lower <= 1.0, "{report:?}");
        assert!(report.epsilon_lower > 0.9, "{report:?}");
    }

    #[test]
    fn identical_datasets_give_no_evidence() {
        let noise = CountNoise::calibrate(
            Mechanism::Laplace,
            1.0,
            None,
            1,
            GaussianCalibration::Analytic,
        )
        .unwrap();
        let report = audit(
            &count_releases(&noise, 3, 100_000, 3),
            &count_releases(&noise, 3, 100_000, 4),
            AuditSettings::default(),
        )
        .unwrap();
        // ε = 0 truly: the bound exceeds 0 with probability at most alpha = 0.05 (it is 0 or
        // tiny for these seeds).
        assert!(report.epsilon_lower < 0.02, "{report:?}");
    }

    #[test]
    fn joint_releases_are_audited_through_pairs_and_the_score() {
        // Two groups with noise at ε/2 each; a row moves from group 0 to group 1: the joint
        // output reveals ε = 1, each group alone ε/2.
        let noise = CountNoise::calibrate(
            Mechanism::Laplace,
            0.5,
            None,
            1,
            GaussianCalibration::Analytic,
        )
        .unwrap();
        let joint = |a: i64, b: i64, seed: u64| {
            let mut rng = ChaCha20Rng::seed_from_u64(seed);
            let mut out = Releases::new(2);
            for _ in 0..200_000 {
                out.push(&[
                    (a + noise.sample(&mut rng)) as f64,
                    (b + noise.sample(&mut rng)) as f64,
                ]);
            }
            out
        };
        let settings = AuditSettings {
            alpha: 1e-3,
            ..Default::default()
        };
        let report = audit(&joint(1, 0, 5), &joint(0, 1, 6), settings).unwrap();
        eprintln!("{}", report.summary(&[]));
        assert!(report.epsilon_lower <= 1.0, "{report:?}");
        assert!(report.epsilon_lower > 0.85, "{report:?}");
    }

    #[test]
    fn grid_exponents() {
        assert_eq!(grid_exponent(1.0), 0.0);
        assert_eq!(grid_exponent(3.0), 0.0);
        assert_eq!(grid_exponent(12.0), 2.0);
        assert_eq!(grid_exponent(-0.75), -2.0);
        assert_eq!(grid_exponent(5.0 * 2f64.powi(-29)), -29.0);
        assert_eq!(grid_exponent(0.0), 1024.0);
        assert!(grid_exponent(f64::NAN).is_nan());
    }

    #[test]
    fn missing_releases_and_bad_input() {
        // D releases a group with probability 1/2, D' never: ε = ∞ unless δ covers it.
        let mut d = Releases::new(1);
        let mut p = Releases::new(1);
        for i in 0..2000 {
            d.push(&[if i % 2 == 0 { 1.0 } else { f64::NAN }]);
            p.push(&[f64::NAN]);
        }
        // 500 of 1000 test releases against 0 of 1000: ln(0.469 / 0.0037) ≈ 4.85.
        let report = audit(&d, &p, AuditSettings::default()).unwrap();
        assert!(report.epsilon_lower > 4.5, "{report:?}");
        let report = audit(
            &d,
            &p,
            AuditSettings {
                delta: 0.6,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(report.epsilon_lower, 0.0, "{report:?}");
        assert!(audit(&d, &Releases::new(2), AuditSettings::default()).is_err());
    }
}
