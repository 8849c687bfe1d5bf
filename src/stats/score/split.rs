//! The error split of the score intervals: how the `α` of a two-sided interval is shared
//! between its ends at each candidate `θ`, from the ratio's skew there (docs/intervals.md §5).

use statrs::distribution::{Continuous, ContinuousCDF, Normal};

use super::{cornish_fisher, ScoreAt};

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
    /// confidence levels (one per interval call) does not rebuild it group after group.
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
    /// by [`cornish_fisher`]. What [`invert_score_test`](super::invert_score_test) inverts.
    pub fn quantiles_at(&self, at: &ScoreAt) -> (f64, f64) {
        let (z_lower, z_upper) = self.quantiles(at.denominator_skew);
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
        // `at ≥ 0`, so the cast is its floor (without a call to libm's `floor`).
        let at = (gap - self.gap_min) * (1.0 / SPLIT_STEP);
        let i = (at as usize).min(self.centre.len() - 1);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::table::Z95;

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
}
