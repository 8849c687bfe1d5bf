//! Noise-aware score intervals: the test inversion every `ci_method=score` interval uses
//! ([`invert_score_test`], with its error split) and the relative risk's statistic (the default
//! of `dp_rr_ci`): test inversion in the manner of Koopman (1984) and Miettinen & Nurminen
//! (1985), with the variance of each noisy proportion including the exact variance of the
//! discrete noise added to its cells. Derivation, worked example and coverage:
//! docs/intervals.md §5. The odds ratio's statistic is in [`super::odds_ratio`] (§2).
//!
//! For a candidate ratio `θ` the released table tests `H₀: p_x = θ·p_y` with
//!
//! ```text
//! T(θ) = (p̃_x − θ·p̃_y) / sqrt(v_x(p̄_x) + θ²·v_y(p̄_y)),
//! v(p) = p(1 − p)/n + s²·w(p)/n²,   w = 1 (public sizes), p² + (1 − p)² (private sizes),
//! ```
//!
//! `p̃ = X̃/ñ` the released proportions, `(p̄_x, p̄_y)` the binomial maximum-likelihood
//! estimates restricted to `p_x = θ·p_y` (Miettinen & Nurminen's closed form, as given by
//! Farrington & Manning 1990) and `v` the delta-method variance of a noisy proportion
//! (docs/intervals.md §1, the paper's Theorem Gaussian_Valid_CI extended to private sizes).
//! The interval is `{θ ≥ 0 : −z_U ≤ T(θ) ≤ z_L}`, the error split between the ends at each `θ`
//! by the ratio's skew there ([`TailSplit`]). Unlike `p̃ ± z·Ṽ` or
//! its log-scale version, the variance is evaluated where each `θ` puts the risks, not at the
//! noisy estimate: a noisy `Ỹ` that is too large no longer shrinks the interval's upper arm.
//! The upper end is `+∞` when the released table cannot exclude `p_y` near 0 (`T` stays above
//! `−z_U` as `θ → ∞`):
//! an honest answer, since any interval with 95% coverage at every `(p_x, p_y)` must then be
//! unbounded or very long (docs/intervals.md §5). Pure post-processing of the release.

use super::ratio::ReleasedCounts;
use statrs::distribution::{Continuous, ContinuousCDF, Normal};

/// The least uneven split of the error `α`: at least this share goes to the upper end. A
/// ratio's interval is long above and short below (the estimate is right-skewed); moving error
/// from the short arm to the long one shortens the interval, while the two one-sided tests
/// still have sizes adding to `α`, so the level stays `1 − α`. The split used at each `θ` is
/// [`TailSplit::quantiles`], never more even than this one (docs/intervals.md §5).
pub const UPPER_TAIL_SHARE: f64 = 0.7;

/// `K` of the split rule `z_L − z_U = K·c_D²/s` ([`TailSplit`]): the width-minimising value
/// for the ends of a ratio whose skew comes from its denominator (docs/intervals.md §5).
const SKEW_FACTOR: f64 = 4.0;

/// Largest `z_L − z_U` of the split (then `α_L < 10⁻¹⁰`: all the error is on the upper end).
const SPLIT_MAX: f64 = 12.0;

/// Levels whose [`TailSplit`] table each thread keeps.
const SPLIT_LEVELS: usize = 4;

/// Step of the table of [`TailSplit`] in `z_L − z_U` (cubic Hermite interpolation: error
/// below 10⁻¹¹ in `z`).
const SPLIT_STEP: f64 = 0.005;

/// `ln θ` range searched: ends below `e^-28 ≈ 7e-13` are reported as 0, above `e^28 ≈ 1.4e12`
/// as `+∞` (no table of fewer than ~10¹² rows can tell such ratios from 0 or ∞).
const LOG_THETA_RANGE: f64 = 28.0;

/// Bisection steps on `ln θ` (56 / 2⁶⁰ < 10⁻¹⁶: the last bit of an `f64`).
const BISECTION_STEPS: usize = 60;

/// The restricted maximum-likelihood risks `(p̄_x, p̄_y)` under `p_x = θ·p_y` for `x` cases of
/// `n_x` and `y` of `n_y` (Miettinen & Nurminen 1985; closed form of Farrington & Manning
/// 1990): `p̄_y` is the smaller root of `Aq² + Bq + C = 0`, `A = (n_x + n_y)θ`,
/// `B = −(n_x θ + x + n_y + y θ)`, `C = x + y`, clamped to `[0, min(1, 1/θ)]`.
pub fn restricted_risks(theta: f64, x: f64, n_x: f64, y: f64, n_y: f64) -> (f64, f64) {
    let a = (n_x + n_y) * theta;
    let b = -(n_x * theta + x + n_y + y * theta);
    let c = x + y;
    let disc = (b * b - 4.0 * a * c).max(0.0);
    let p_y = ((-b - disc.sqrt()) / (2.0 * a)).clamp(0.0, 1.0f64.min(1.0 / theta));
    (theta * p_y, p_y)
}

impl ReleasedCounts {
    /// The delta-method variance of a released proportion at risk `p` (`q = 1 − p`) in an arm
    /// of size `n`, with this release's per-cell noise variance `s²`: `pq/n + s²·w/n²`, `w` the
    /// size mode's [`super::ratio::GroupSizes::noise_weight`] (docs/intervals.md §1).
    pub fn proportion_variance(&self, p: f64, q: f64, n: f64) -> f64 {
        p * q / n + self.noise_variance * self.sizes.noise_weight(p, q) / (n * n)
    }
}

/// A score statistic's numerator over the square root of its variance; `±∞` (or 0, for a zero
/// numerator) where the variance vanishes at the ends of the `θ` range.
pub(super) fn standardised(numerator: f64, variance: f64) -> f64 {
    if variance > 0.0 {
        numerator / variance.sqrt()
    } else if numerator == 0.0 {
        0.0
    } else {
        numerator.signum() * f64::INFINITY
    }
}

/// A score statistic at a candidate `θ`: its value `T(θ)` and the skew measure `c_D²/s` that
/// sets the error split there ([`TailSplit::quantiles`]), both at the restricted estimates.
#[derive(Clone, Copy, Debug)]
pub struct ScoreAt {
    /// `T(θ)`, standardised under `H₀: ratio = θ`.
    pub statistic: f64,
    /// `c_D²/s`: `c_D` the coefficient of variation of the ratio's denominator factors and `s`
    /// the delta-method standard error of the log ratio, at the restricted estimates; `+∞`
    /// where the denominator's restricted risk is 0.
    pub skew: f64,
    /// The statistic's own skewness `γ` under `H₀` (standardised third cumulant), which moves
    /// the quantiles by [`cornish_fisher`]; 0 where the statistic does not derive it.
    pub skewness: f64,
}

/// Largest `|γ|` the quantiles are corrected for: beyond it the `O(n^{-1/2})` expansion of
/// `γ` is no longer accurate (where the noise dwarfs the counts it predicts −0.75 for a
/// simulated −0.44, docs/intervals.md §2, "Skewness").
const SKEWNESS_MAX: f64 = 0.5;

/// The quantile beyond which the Cornish-Fisher term stops growing: the tail past 3 holds
/// 0.0013, and an uneven split's far quantile (up to 13) would otherwise move by `γ·28`.
const CORNISH_FISHER_Z_MAX: f64 = 3.0;

/// The Cornish-Fisher shift `γ(z² − 1)/6` of the normal quantile `z` for a standardised
/// statistic of skewness `γ` (Cornish & Fisher 1937; as Gart & Nam 1988 correct the score
/// intervals of binomial ratios for skewness): the upper quantile is `z + shift(z)`, the lower
/// `−z + shift(z)`. `γ` clamped to `±SKEWNESS_MAX` (NaN read as 0) and `z` to
/// `CORNISH_FISHER_Z_MAX`, so the corrected quantile stays increasing in `z`.
pub fn cornish_fisher(z: f64, skewness: f64) -> f64 {
    // The relative risk's statistic reports 0: no work on its path.
    if skewness == 0.0 || skewness.is_nan() {
        return 0.0;
    }
    let g = skewness.clamp(-SKEWNESS_MAX, SKEWNESS_MAX);
    let z = z.min(CORNISH_FISHER_Z_MAX);
    g * (z * z - 1.0) / 6.0
}

/// `c_D²/s` from the squared coefficient of variation of a ratio's denominator factors and the
/// variance `s²` of the log ratio: `+∞` where `c_D²` is not finite (a restricted risk of 0 in
/// the denominator), 0 where `s` vanishes or is infinite.
pub(super) fn skew(cv2_denominator: f64, log_ratio_variance: f64) -> f64 {
    if !cv2_denominator.is_finite() {
        return f64::INFINITY;
    }
    let s = log_ratio_variance.sqrt();
    if s > 0.0 {
        cv2_denominator / s
    } else {
        0.0
    }
}

/// The score statistic `T(θ)` of the module docs for released counts (sizes already floored
/// at 1), with its skew `c_D²/s`: `c² = v/p̄²` per arm, `c_D` the unexposed arm's,
/// `s² = c_x² + c_y²` (the log ratio's delta-method variance).
pub fn score_statistic(theta: f64, counts: &ReleasedCounts) -> ScoreAt {
    let ReleasedCounts { x, n_x, y, n_y, .. } = *counts;
    let (p_x, p_y) = restricted_risks(theta, x.clamp(0.0, n_x), n_x, y.clamp(0.0, n_y), n_y);
    let v_x = counts.proportion_variance(p_x, 1.0 - p_x, n_x);
    let v_y = counts.proportion_variance(p_y, 1.0 - p_y, n_y);
    let (cv2_x, cv2_y) = (v_x / (p_x * p_x), v_y / (p_y * p_y));
    ScoreAt {
        statistic: standardised(x / n_x - theta * y / n_y, v_x + theta * theta * v_y),
        skew: skew(cv2_y, cv2_x + cv2_y),
        skewness: 0.0,
    }
}

/// The one-sided quantiles `(z_L, z_U)` of the least uneven split ([`UPPER_TAIL_SHARE`]) at
/// the two-sided quantile `z`: `α = 2(1 − Φ(z))`, `z_L = Φ⁻¹(1 − (1 − UPPER_TAIL_SHARE)α)`,
/// `z_U = Φ⁻¹(1 − UPPER_TAIL_SHARE·α)`.
pub fn tail_quantiles(z: f64) -> (f64, f64) {
    let normal = Normal::new(0.0, 1.0).expect("standard normal");
    let alpha = 2.0 * normal.cdf(-z);
    (
        normal.inverse_cdf(1.0 - (1.0 - UPPER_TAIL_SHARE) * alpha),
        normal.inverse_cdf(1.0 - UPPER_TAIL_SHARE * alpha),
    )
}

/// The error split of the score intervals at one level: at a candidate `θ` whose statistic
/// reports skew `c_D²/s` ([`ScoreAt`]), the ends' quantiles are `z_L = z_c + d/2`,
/// `z_U = z_c − d/2` with `d = max(K·c_D²/s, d₀)`, `K = 4`, `d₀` the gap of the
/// [`tail_quantiles`] split, and `z_c` solving `Φ(−z_L) + Φ(−z_U) = α`, so the two one-sided
/// tests always spend `α` together. Why `K·c_D²/s`: the ends of a ratio `N/D` with relative
/// errors `c_N`, `c_D` move as `θ̂(1 + z·s + z²·c_D² + …)` (Fieller), and
/// `z_L − z_U = 4·c_D²/s` minimises the length for that shape under the level constraint
/// (Lagrange): only the denominator skews a ratio. The split is read at the restricted
/// estimates, which under `H₀` are asymptotically independent of the score statistic, so the
/// level stays `1 − α` to first order (a studentised critical value); coverage is measured in
/// docs/coverage.md (docs/intervals.md §5, docs/prototypes/adaptive_split.py).
#[derive(Debug)]
pub struct TailSplit {
    /// `α` of the table.
    alpha: f64,
    /// `d₀`, the least `z_L − z_U`.
    gap_min: f64,
    /// `(z_c, dz_c/dd)` at `d = d₀ + i·SPLIT_STEP`.
    centre: Vec<(f64, f64)>,
}

impl TailSplit {
    /// The table for two-sided quantile `z` (`α = 2(1 − Φ(z))`), by Newton's method on `z_c`
    /// at each tabulated gap.
    pub fn new(z: f64) -> Self {
        let normal = Normal::new(0.0, 1.0).expect("standard normal");
        let alpha = 2.0 * normal.cdf(-z);
        let (z_lower, z_upper) = tail_quantiles(z);
        let gap_min = z_lower - z_upper;
        let steps = ((SPLIT_MAX - gap_min).max(0.0) / SPLIT_STEP).ceil() as usize + 1;
        let mut centre = Vec::with_capacity(steps);
        let mut zc = 0.5 * (z_lower + z_upper);
        for i in 0..steps {
            let half = 0.5 * (gap_min + i as f64 * SPLIT_STEP);
            for _ in 0..50 {
                let excess = normal.cdf(-zc - half) + normal.cdf(-zc + half) - alpha;
                let slope = normal.pdf(zc + half) + normal.pdf(zc - half);
                let step = excess / slope;
                zc += step;
                if step.abs() < 1e-14 {
                    break;
                }
            }
            // Implicit derivative of Φ(−z_c − d/2) + Φ(−z_c + d/2) = α in d.
            let (f_lower, f_upper) = (normal.pdf(zc + half), normal.pdf(zc - half));
            centre.push((zc, (f_upper - f_lower) / (2.0 * (f_lower + f_upper))));
        }
        Self {
            alpha,
            gap_min,
            centre,
        }
    }

    /// The table for `z`, kept per thread for the last [`SPLIT_LEVELS`] levels asked: every
    /// group of a query and every table of a simulation reuses it, and a query with a few
    /// confidence levels (one per `dp_rr_ci` call) does not rebuild it group after group.
    pub fn at(z: f64) -> std::rc::Rc<Self> {
        thread_local! {
            static RECENT: std::cell::RefCell<Vec<(u64, std::rc::Rc<TailSplit>)>> =
                const { std::cell::RefCell::new(Vec::new()) };
        }
        RECENT.with(|recent| {
            let mut recent = recent.borrow_mut();
            if let Some((_, split)) = recent.iter().find(|(bits, _)| *bits == z.to_bits()) {
                return split.clone();
            }
            let split = std::rc::Rc::new(Self::new(z));
            if recent.len() == SPLIT_LEVELS {
                recent.remove(0);
            }
            recent.push((z.to_bits(), split.clone()));
            split
        })
    }

    /// `α` of the split.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// The acceptance bounds `(z_L, z_U)` at a candidate `θ`, `−z_U ≤ T(θ) ≤ z_L`: the split
    /// at the statistic's skew `c_D²/s`, each quantile moved for the statistic's own skewness
    /// by [`cornish_fisher`]. What [`invert_score_test`] inverts.
    pub fn quantiles_at(&self, at: &ScoreAt) -> (f64, f64) {
        let (z_lower, z_upper) = self.quantiles(at.skew);
        (
            z_lower + cornish_fisher(z_lower, at.skewness),
            z_upper - cornish_fisher(z_upper, at.skewness),
        )
    }

    /// `(z_L, z_U)` at skew `c_D²/s` (NaN read as 0: the least uneven split).
    pub fn quantiles(&self, skew: f64) -> (f64, f64) {
        let gap = if skew.is_nan() {
            self.gap_min
        } else {
            (SKEW_FACTOR * skew).clamp(self.gap_min, SPLIT_MAX.max(self.gap_min))
        };
        let at = (gap - self.gap_min) / SPLIT_STEP;
        let i = (at.floor() as usize).min(self.centre.len() - 1);
        let (z0, slope0) = self.centre[i];
        let zc = match self.centre.get(i + 1) {
            // Cubic Hermite between the nodes i and i + 1 (t ∈ [0, 1]).
            Some(&(z1, slope1)) => {
                let t = at - i as f64;
                let (t2, t3) = (t * t, t * t * t);
                (2.0 * t3 - 3.0 * t2 + 1.0) * z0
                    + (t3 - 2.0 * t2 + t) * SPLIT_STEP * slope0
                    + (-2.0 * t3 + 3.0 * t2) * z1
                    + (t3 - t2) * SPLIT_STEP * slope1
            }
            None => z0,
        };
        (zc + 0.5 * gap, zc - 0.5 * gap)
    }
}

/// Inverts a score test for a ratio `θ ≥ 0`: the interval `{θ : −z_U(θ) ≤ T(θ) ≤ z_L(θ)}`
/// for a statistic `T` that decreases in `θ` (standardised, under `H₀: ratio = θ`), with the
/// error split of [`TailSplit`] at the two-sided quantile `z`, read at each `θ` from the skew
/// the statistic reports ([`ScoreAt`]), and both quantiles moved for the statistic's own
/// skewness by [`cornish_fisher`]. Each end is one crossing on `ln θ` over
/// `[e^-28, e^28]`, searched from the point `estimate` ([`crossing`]). `lower` is 0 when `T`
/// stays below `z_L` down to `e^-28` and `upper` is `+∞` when `T` stays above `−z_U` up to
/// `e^28` (the release cannot exclude a zero count; the statistics' limits are in their docs);
/// `[0, 0]` or `[+∞, +∞]` when every `θ` in range is rejected from above or from below. Where
/// `T` is not monotone (Fieller's case: it dips below `−z_U` and comes back), the end values
/// decide first, so such an upper end is `+∞`. The one inversion every score interval of the
/// crate uses (relative risk: Koopman 1984, Miettinen & Nurminen 1985; odds ratio: Miettinen &
/// Nurminen 1985).
pub fn invert_score_test(t: impl Fn(f64) -> ScoreAt, z: f64, estimate: f64) -> (f64, f64) {
    let split = TailSplit::at(z);
    // T − z_L and T + z_U at ln θ.
    let ends = |log_theta: f64| {
        let at = t(log_theta.exp());
        let (z_lower, z_upper) = split.quantiles_at(&at);
        (at.statistic - z_lower, at.statistic + z_upper)
    };
    let (low, high) = (ends(-LOG_THETA_RANGE), ends(LOG_THETA_RANGE));
    // Every θ in range rejected from one side: the ratio is beyond every bound (for the
    // relative risk possible only when the noise pushed `Ỹ` to or below 0 while `X̃ > z_L·s`),
    // or below every bound. The interval is then the degenerate `[+∞, +∞]` or `[0, 0]`.
    if high.0 > 0.0 {
        return (f64::INFINITY, f64::INFINITY);
    }
    if low.1 < 0.0 {
        return (0.0, 0.0);
    }
    let start = if estimate > 0.0 && estimate.is_finite() {
        estimate.ln().clamp(-LOG_THETA_RANGE, LOG_THETA_RANGE)
    } else {
        0.0
    };
    // Both searches start at the estimate: one evaluation serves both ends.
    let mut at_start = None;
    let mut from_start = || *at_start.get_or_insert_with(|| ends(start));
    let lower = if low.0 > 0.0 {
        crossing(&|u| ends(u).0, start, from_start().0).exp()
    } else {
        0.0
    };
    let upper = if high.1 >= 0.0 {
        f64::INFINITY
    } else {
        crossing(&|u| ends(u).1, start, from_start().1).exp()
    };
    (lower, upper)
}

/// Tolerance of the root search on `ln θ`: `10⁻¹³` (a relative `10⁻¹³` on `θ`).
const LOG_THETA_TOLERANCE: f64 = 1e-13;

/// Iterations of [`anderson_bjorck`] before it hands its bracket to bisection.
const ROOT_ITERATIONS: usize = 200;

/// Where `g` (decreasing in `ln θ`, `g(−28) > 0 ≥ g(28)`) crosses 0, given `g(start)`: a
/// bracket grown from `start` (the estimate, near which both ends lie) by doubling steps,
/// then [`anderson_bjorck`] on it, which converges superlinearly on the smooth `T`; about 7
/// evaluations per end where bisection of the whole range needs 60 (BENCHMARKS.md).
fn crossing(g: &dyn Fn(f64) -> f64, start: f64, g_start: f64) -> f64 {
    let (mut lo, mut g_lo, mut hi, mut g_hi) = (start, g_start, start, g_start);
    let mut step = 0.25;
    if g_start > 0.0 {
        while hi < LOG_THETA_RANGE {
            (lo, g_lo) = (hi, g_hi);
            hi = (hi + step).min(LOG_THETA_RANGE);
            step *= 2.0;
            g_hi = g(hi);
            if g_hi <= 0.0 {
                break;
            }
        }
    } else {
        while lo > -LOG_THETA_RANGE {
            (hi, g_hi) = (lo, g_lo);
            lo = (lo - step).max(-LOG_THETA_RANGE);
            step *= 2.0;
            g_lo = g(lo);
            if g_lo > 0.0 {
                break;
            }
        }
    }
    // The callers check the range's ends first, so the bracket holds the sign change; should
    // a NaN break it, bisection still returns a point of the bracket.
    if g_lo > 0.0 && g_hi <= 0.0 {
        anderson_bjorck(g, (lo, g_lo), (hi, g_hi))
    } else {
        bisect_crossing(g, lo, hi)
    }
}

/// The root of `g` in a bracket `lo < hi` whose values `g(lo) > 0 ≥ g(hi)` are known, to
/// [`LOG_THETA_TOLERANCE`] on the bracket's width: regula falsi in which the end that stays
/// twice in a row has its value scaled by `1 − g(x)/g(replaced end)` (½ when that is not
/// positive): the Anderson-Björck (1973) variant of the Illinois method (Dowell & Jarratt
/// 1971), of order about 1.7 on smooth functions. Written here rather than taken from the
/// `roots` crate, whose regula falsi evaluates both ends of the bracket again (two of each
/// end's evaluations) and scales by ½ only.
fn anderson_bjorck(
    g: &dyn Fn(f64) -> f64,
    (mut lo, mut g_lo): (f64, f64),
    (mut hi, mut g_hi): (f64, f64),
) -> f64 {
    // Which end the last step replaced: 1 for `lo`, −1 for `hi`, 0 before the first.
    let mut last = 0;
    for _ in 0..ROOT_ITERATIONS {
        let mut x = (lo * g_hi - hi * g_lo) / (g_hi - g_lo);
        if !x.is_finite() {
            // An infinite end value (`T` where its variance vanishes): bisect this step.
            x = 0.5 * (lo + hi);
        }
        if hi - lo <= LOG_THETA_TOLERANCE {
            return x;
        }
        let g_x = g(x);
        if g_x == 0.0 {
            return x;
        }
        if g_x.is_nan() {
            return bisect_crossing(g, lo, hi);
        }
        if g_x > 0.0 {
            if last == 1 {
                g_hi *= stay_factor(g_x, g_lo);
            }
            (lo, g_lo, last) = (x, g_x, 1);
        } else {
            if last == -1 {
                g_lo *= stay_factor(g_x, g_hi);
            }
            (hi, g_hi, last) = (x, g_x, -1);
        }
    }
    bisect_crossing(g, lo, hi)
}

/// Anderson-Björck's factor for the end that stays when the new value `g_x` replaces the value
/// `g_replaced` on its side: `1 − g_x/g_replaced`, or ½ (Illinois) when that is not positive.
fn stay_factor(g_x: f64, g_replaced: f64) -> f64 {
    let m = 1.0 - g_x / g_replaced;
    if m > 0.0 {
        m
    } else {
        0.5
    }
}

/// The crossing of [`crossing`] by bisection of `[lo, hi]` (`g(lo) > 0 ≥ g(hi)`), to the last
/// bit of an `f64` ([`BISECTION_STEPS`]).
fn bisect_crossing(g: &dyn Fn(f64) -> f64, mut lo: f64, mut hi: f64) -> f64 {
    for _ in 0..BISECTION_STEPS {
        let mid = 0.5 * (lo + hi);
        if g(mid) > 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The score interval `(lower, upper)` for `p_x/p_y` from released counts (real-valued; sizes
/// floored at 1, cases used as released, negative or above the size included) at the two-sided
/// quantile `z` (split by [`TailSplit`]), by [`invert_score_test`] of [`score_statistic`]. As `θ → 0`,
/// `T → X̃/s` and the split is the least uneven, so `lower` is 0 when `X̃ ≤ z_L·s` (the release
/// cannot exclude `X = 0`); as `θ → ∞`, `T → −Ỹ/s` and all the error goes to the upper end, so
/// `upper` is `+∞` when `Ỹ ≤ Φ⁻¹(1 − α)·s` (it cannot exclude `Y = 0`).
pub fn relative_risk_score_interval(counts: ReleasedCounts, z: f64) -> (f64, f64) {
    let counts = counts.sizes_floored();
    invert_score_test(
        |theta| score_statistic(theta, &counts),
        z,
        (counts.x / counts.n_x) / (counts.y / counts.n_y),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::ratio::GroupSizes;

    const Z95: f64 = 1.959963984540054;

    /// The interval of the first version: each end by 60 bisections of the whole range.
    fn bisection_interval(t: impl Fn(f64) -> ScoreAt, z: f64) -> (f64, f64) {
        let split = TailSplit::at(z);
        let g = |u: f64| {
            let at = t(u.exp());
            let (zl, zu) = split.quantiles_at(&at);
            (at.statistic - zl, at.statistic + zu)
        };
        let r = LOG_THETA_RANGE;
        if g(r).0 > 0.0 {
            return (f64::INFINITY, f64::INFINITY);
        }
        if g(-r).1 < 0.0 {
            return (0.0, 0.0);
        }
        let lower = if g(-r).0 > 0.0 {
            bisect_crossing(&|u| g(u).0, -r, r).exp()
        } else {
            0.0
        };
        let upper = if g(r).1 >= 0.0 {
            f64::INFINITY
        } else {
            bisect_crossing(&|u| g(u).1, -r, r).exp()
        };
        (lower, upper)
    }

    #[test]
    fn cornish_fisher_shift_is_bounded_and_increasing() {
        // γ(z² − 1)/6: 0.1·(1.96² − 1)/6 by hand; none at z = 1; sign follows γ.
        assert!((cornish_fisher(1.96, 0.1) - 0.1 * (1.96f64.powi(2) - 1.0) / 6.0).abs() < 1e-15);
        assert_eq!(cornish_fisher(1.0, 0.3), 0.0);
        assert!(cornish_fisher(2.0, -0.2) < 0.0);
        // γ capped at 0.5, z at 3; NaN γ is no correction.
        assert_eq!(cornish_fisher(2.0, 7.0), cornish_fisher(2.0, 0.5));
        assert_eq!(cornish_fisher(13.0, 0.5), 0.5 * 8.0 / 6.0);
        assert_eq!(cornish_fisher(2.0, f64::NAN), 0.0);
        // z + shift(z) increases in z for every admissible γ (so the ends stay single crossings).
        for g in [-0.5, -0.2, 0.0, 0.2, 0.5] {
            let q = |z: f64| z + cornish_fisher(z, g);
            let mut z = 0.0;
            while z < 14.0 {
                assert!(q(z + 0.01) > q(z), "{g} {z}");
                z += 0.01;
            }
        }
    }

    #[test]
    fn tail_split_spends_alpha_and_follows_the_skew() {
        // Every split spends α = 0.05 in all: Φ(−z_L) + Φ(−z_U) = α; skew 0 (or NaN) is the
        // least uneven split (tail_quantiles: 2.170090 / 1.811911); z_L − z_U = 4·skew above
        // it; an infinite skew puts (nearly) all the error on the upper end: z_U → Φ⁻¹(0.95).
        let split = TailSplit::new(Z95);
        let normal = Normal::new(0.0, 1.0).unwrap();
        // (statrs' Φ is accurate to ~1e-11 relative here.)
        assert!((split.alpha() - 0.05).abs() < 1e-10, "{}", split.alpha());
        let (l0, u0) = tail_quantiles(Z95);
        for skew in [
            0.0,
            f64::NAN,
            0.05,
            0.0895,
            0.1,
            0.3333,
            1.0,
            2.9,
            50.0,
            f64::INFINITY,
        ] {
            let (zl, zu) = split.quantiles(skew);
            assert!(
                (normal.cdf(-zl) + normal.cdf(-zu) - split.alpha()).abs() < 1e-12,
                "{skew}: {zl} {zu}"
            );
            let gap = if skew.is_nan() {
                0.0
            } else {
                (4.0 * skew).min(12.0)
            };
            assert!(((zl - zu) - gap.max(l0 - u0)).abs() < 1e-12, "{skew}");
        }
        assert_eq!(split.quantiles(0.0), split.quantiles(f64::NAN));
        let (zl, zu) = split.quantiles(0.0);
        // (tail_quantiles inverts Φ, the table solves Φ(·) = α: equal to statrs' accuracy.)
        assert!((zl - l0).abs() < 1e-9 && (zu - u0).abs() < 1e-9);
        let (_, zu) = split.quantiles(f64::INFINITY);
        assert!((zu - 1.644854).abs() < 1e-6, "{zu}");
        // Per thread, a query's few levels keep their tables: alternating levels reuse them.
        let (a, b) = (TailSplit::at(Z95), TailSplit::at(2.575829303549));
        assert!(std::rc::Rc::ptr_eq(&TailSplit::at(Z95), &a));
        assert!(std::rc::Rc::ptr_eq(&TailSplit::at(2.575829303549), &b));
        // Other levels (50% to 99.99%): the same two properties across the whole table.
        for z in [
            0.674489750196,
            1.644853626951,
            2.575829303549,
            3.890591886413,
        ] {
            let split = TailSplit::new(z);
            let (l0, u0) = tail_quantiles(z);
            for i in 0..=2400 {
                let skew = i as f64 * 0.00125;
                let (zl, zu) = split.quantiles(skew);
                assert!(
                    (normal.cdf(-zl) + normal.cdf(-zu) - split.alpha()).abs() < 1e-11,
                    "{z} {skew}: {zl} {zu}"
                );
                let gap = (4.0 * skew).min(12.0).max(l0 - u0);
                assert!(((zl - zu) - gap).abs() < 1e-9, "{z} {skew}");
            }
        }
    }

    #[test]
    fn root_search_agrees_with_bisection() {
        // Tables from tiny to large counts, noise from none to dominant, both size modes, both
        // statistics (relative risk and odds ratio), estimates far from the ends: every end
        // agrees with whole-range bisection to a relative 1e-10 (both searches stop within
        // 1e-13 on ln θ), and the open ends agree exactly.
        let mut checked = 0;
        for &(x, nx, y, ny) in &[
            (40.0, 200.0, 20.0, 200.0),
            (3.0, 50.0, 45.0, 50.0),
            (199.0, 200.0, 1.0, 200.0),
            (1.0, 1000.0, 900.0, 1000.0),
            (12.0, 30.0, 2.0, 400.0),
            (-4.0, 100.0, 30.0, 100.0),
            (60.0, 100.0, -2.0, 100.0),
            (7.0, 34.0, 1.0, 34.0),
        ] {
            for s2 in [0.0, 2.0, 8.0, 136.0, 2000.0] {
                for sizes in [GroupSizes::Public, GroupSizes::Private] {
                    let rr = |th: f64| {
                        score_statistic(th, &ReleasedCounts::new(x, nx, y, ny, sizes, s2))
                    };
                    let or = |th: f64| {
                        crate::stats::odds_ratio::odds_ratio_score_statistic(
                            th,
                            &ReleasedCounts::new(x, nx, y, ny, sizes, s2),
                        )
                    };
                    let pairs = [
                        (
                            relative_risk_score_interval(
                                ReleasedCounts::new(x, nx, y, ny, sizes, s2),
                                Z95,
                            ),
                            bisection_interval(rr, Z95),
                        ),
                        (
                            crate::stats::odds_ratio::odds_ratio_score_interval(
                                ReleasedCounts::new(x, nx, y, ny, sizes, s2),
                                Z95,
                            ),
                            bisection_interval(or, Z95),
                        ),
                    ];
                    for ((l, u), (bl, bu)) in pairs {
                        for (a, b) in [(l, bl), (u, bu)] {
                            let same = if a.is_finite() && b.is_finite() && b > 0.0 {
                                ((a - b) / b).abs() < 1e-10
                            } else {
                                a == b
                            };
                            assert!(same, "{x} {nx} {y} {ny} {s2} {sizes}: {a} vs {b}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 8 * 5 * 2 * 4);
    }

    #[test]
    fn restricted_risks_solve_the_score_equation() {
        // The restricted MLE sets the derivative of the binomial log-likelihood along
        // p_x = θ p_y to zero: (x + y)/q − θ(n_x − x)/(1 − θq) − (n_y − y)/(1 − q) = 0.
        for (theta, x, nx, y, ny) in [
            (2.0, 40.0, 200.0, 20.0, 200.0),
            (0.5, 12.0, 50.0, 30.0, 80.0),
            (7.0, 90.0, 100.0, 5.0, 100.0),
        ] {
            let (px, py) = restricted_risks(theta, x, nx, y, ny);
            assert!((px - theta * py).abs() < 1e-15);
            let d = (x + y) / py - theta * (nx - x) / (1.0 - px) - (ny - y) / (1.0 - py);
            assert!(d.abs() < 1e-8, "{theta}: {d}");
        }
        // At θ = the observed ratio the restricted estimates are the observed risks.
        let (px, py) = restricted_risks(2.0, 40.0, 200.0, 20.0, 200.0);
        assert!((px - 0.2).abs() < 1e-12 && (py - 0.1).abs() < 1e-12);
    }

    #[test]
    fn score_interval_matches_hand_computation() {
        // docs/intervals.md §5, worked example: X̃ = 40 of 200, Ỹ = 20 of 200, s² = 8, 95%:
        // the least uneven split z_L = Φ⁻¹(0.985) = 2.170090, z_U = Φ⁻¹(0.965) = 1.811911.
        // Public sizes, the statistic at θ = 3.563643: restricted p̄_y = 0.064360, p̄_x = θ p̄_y = 0.229355;
        // v_x = 0.229355·0.770645/200 + 8/200² = 0.00108376, v_y = 0.06436·0.93564/200 + 0.0002
        // = 0.00050109, V = v_x + θ² v_y = 0.0074474, T = (0.2 − 0.3563643)/√V = −1.811911.
        let (zl, zu) = tail_quantiles(Z95);
        assert!((zl - 2.170090).abs() < 1e-6 && (zu - 1.811911).abs() < 1e-6);
        let (px, py) = restricted_risks(3.563643, 40.0, 200.0, 20.0, 200.0);
        assert!((py - 0.064360).abs() < 1e-6 && (px - 0.229355).abs() < 1e-6);
        let counts = ReleasedCounts::new(40.0, 200.0, 20.0, 200.0, GroupSizes::Public, 8.0);
        let vx = counts.proportion_variance(px, 1.0 - px, 200.0);
        let vy = counts.proportion_variance(py, 1.0 - py, 200.0);
        assert!((vx - 0.00108376).abs() < 1e-8 && (vy - 0.00050109).abs() < 1e-8);
        let t = score_statistic(3.563643, &counts);
        assert!((t.statistic + 1.811911).abs() < 1e-5, "{t:?}");
        // The ends with the split of TailSplit, against an independent computation
        // (docs/prototypes/adaptive_split.py check: z_c solved exactly at every θ, ends by
        // brentq): public [1.0359355, 3.3878499], private [1.0582949, 3.3412853] (private sizes
        // weight the noise by w = p² + (1 − p)² < 1, so the interval is shorter). The fixed
        // 30/70 split gave [1.077238, 3.563643] (public): the skew at the upper end moves
        // error there and shortens both arms' sum.
        for (sizes, lo, hi) in [
            (GroupSizes::Public, 1.0359355342819265, 3.3878499473115573),
            (GroupSizes::Private, 1.058294894885206, 3.3412853045733746),
        ] {
            let (l, u) = relative_risk_score_interval(
                ReleasedCounts::new(40.0, 200.0, 20.0, 200.0, sizes, 8.0),
                Z95,
            );
            assert!(
                (l / lo - 1.0).abs() < 1e-9 && (u / hi - 1.0).abs() < 1e-9,
                "{sizes}: {l} {u}"
            );
        }
        // Without noise: 40/200 vs 20/200 and 7/34 vs 1/34.
        for (x, n, y, lo, hi) in [
            (40.0, 200.0, 20.0, 1.1328767646473195, 3.0775770369097653),
            (7.0, 34.0, 1.0, 0.7260678912140907, 33.447661221033606),
        ] {
            let (l, u) = relative_risk_score_interval(
                ReleasedCounts::new(x, n, y, n, GroupSizes::Public, 0.0),
                Z95,
            );
            assert!(
                (l / lo - 1.0).abs() < 1e-9 && (u / hi - 1.0).abs() < 1e-9,
                "{x}/{n}: {l} {u}"
            );
        }
    }

    #[test]
    fn ends_are_where_the_statistic_equals_z() {
        let split = TailSplit::at(Z95);
        for sizes in [GroupSizes::Public, GroupSizes::Private] {
            let (lo, hi) = relative_risk_score_interval(
                ReleasedCounts::new(40.0, 200.0, 20.0, 200.0, sizes, 8.0),
                Z95,
            );
            let t = |th: f64| {
                score_statistic(
                    th,
                    &ReleasedCounts::new(40.0, 200.0, 20.0, 200.0, sizes, 8.0),
                )
            };
            let (zl, _) = split.quantiles(t(lo).skew);
            let (_, zu) = split.quantiles(t(hi).skew);
            assert!(
                (t(lo).statistic - zl).abs() < 1e-9 && (t(hi).statistic + zu).abs() < 1e-9,
                "{sizes}"
            );
            // Ỹ = 20 against noise s = 2.8: both ends' splits more uneven than 30/70.
            assert!(zu < 1.8119 && zl > 2.1701, "{zl} {zu}");
            assert!(lo < 2.0 && 2.0 < hi);
        }
        // No noise, x ≤ 0: the lower end is 0; a released Ỹ indistinguishable from 0: +∞.
        let (lo, _) = relative_risk_score_interval(
            ReleasedCounts::new(-3.0, 200.0, 20.0, 200.0, GroupSizes::Public, 0.0),
            Z95,
        );
        assert_eq!(lo, 0.0);
        let (_, hi) = relative_risk_score_interval(
            ReleasedCounts::new(40.0, 200.0, 10.0, 200.0, GroupSizes::Public, 200.0),
            Z95,
        );
        assert_eq!(hi, f64::INFINITY);
    }
}
