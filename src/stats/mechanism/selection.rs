//! Private group selection by thresholding noisy counts (the partition selection of Google's
//! DP library and SmartNoise; Korolova, Kenthapadi, Mishra & Ntoulas 2009; Desfontaines,
//! Voss, Gipson & Mandayam 2022, arXiv:2006.03684): each group's count of rows gets discrete
//! Laplace or discrete Gaussian noise, and a group is released only when its noisy count
//! reaches a threshold `T`.
//!
//! A unit adds at most `k` rows to at most `g` groups; under replace-one it can leave `g`
//! groups and join `g` others, so the counts are a release of `2g` values of sensitivity `k`
//! (their noise's own map gives its loss: Laplace per value, the Gaussian as one vector). A
//! group that exists only because of one unit (true count at most `k`) is released with
//! probability at most `P(X ≥ T − k)` for the noise `X`: `q^{T−k}/(1+q)` for the discrete
//! Laplace of parameter `q` (Canonne, Kamath & Steinke 2020, arXiv:2004.00010, §2.2), and for
//! the discrete Gaussian its tail summed from the law itself. Over the `2g` groups a unit can
//! make appear, `δ = 2g·P(X ≥ T − k)`. Every other group's decision is post-processing of its
//! noisy count. `δ` is a failure probability, not a bound on a Rényi divergence: the selection
//! has no zCDP map.

use super::search::least_passing_index;
use super::{short_number, CountNoise, PrivacyLoss, Sampler};
use crate::stats::sampler::Rational;

/// The law of the counts' noise, as far as its upper tail is concerned.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Tail {
    /// Discrete Laplace of parameter `q = e^{−ε'/k}`.
    Laplace { q: f64 },
    /// Discrete Gaussian of variance parameter `σ²`, with its normaliser
    /// `Σ_j e^{−j²/2σ²}` summed once ([`Tail::gaussian`]).
    Gaussian { sigma2: f64, normaliser: f64 },
}

impl Tail {
    /// The discrete Gaussian's tail law: its normaliser `1 + 2·Σ_{j ≥ 1} e^{−j²/2σ²}`, summed
    /// from below (a lower bound, so every tail divided by it is rounded up).
    fn gaussian(sigma2: f64) -> Self {
        Self::Gaussian {
            sigma2,
            normaliser: 1.0 + 2.0 * gaussian_sum_from(sigma2, 1),
        }
    }

    /// `P(X ≥ m)` for `m ≥ 1`.
    fn at_least(self, m: i64) -> f64 {
        match self {
            Self::Laplace { q } => q.powf(m as f64) / (1.0 + q),
            Self::Gaussian { sigma2, normaliser } => gaussian_sum_from(sigma2, m) / normaliser,
        }
    }
}

/// `Σ_{j ≥ start} e^{−j²/2σ²}`, summed until the terms are below `2^-1074` or
/// `10^-3·f64::EPSILON` of the sum so far: the sum is rounded at most by its last terms' size.
/// `O(σ)` terms at the largest `σ` a calibration admits ([`super::gaussian::MAX_GAUSSIAN_SIGMA`]).
fn gaussian_sum_from(sigma2: f64, start: i64) -> f64 {
    let mut total = 0.0;
    let mut j = start;
    loop {
        let w = (-((j as f64) * (j as f64)) / (2.0 * sigma2)).exp();
        if w == 0.0 || (total > 0.0 && w < total * f64::EPSILON * 1e-3) {
            return total;
        }
        total += w;
        j += 1;
    }
}

/// The least threshold above `floor` for which `passes` holds, `passes` being monotone (false
/// up to some threshold, true from it on) and false at `floor`: [`least_passing_index`] over
/// the distance above `floor`, from `start`'s. `O(log T)` evaluations of the map whatever the
/// noise's scale: stepping by one from a closed-form guess took `O(σ)` evaluations of an
/// `O(σ)` tail sum, about `14σ²` terms, which at the largest Gaussian `σ` an analyst's
/// `dp.selection_epsilon` reaches (`1e5`) was `1.4e11` terms of planning in one statement.
/// `None` when no threshold below `2^62` passes.
fn least_passing(floor: i64, start: i64, mut passes: impl FnMut(i64) -> bool) -> Option<i64> {
    let limit = ((1i64 << 62) - 1).checked_sub(floor.max(0))? as u64;
    let first = start.saturating_sub(floor).max(1) as u64;
    least_passing_index(first, limit, |above| {
        Ok::<_, std::convert::Infallible>(passes(floor + above as i64))
    })
    .unwrap_or_else(|never| match never {})
    .map(|above| floor + above as i64)
}

/// Private group selection calibrated on the noise of its counts (module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupSelection {
    /// A group is released when its noisy count is at least this.
    pub threshold: i64,
    /// `k`: rows a unit adds to a group.
    pub rows_per_unit: u32,
    /// `g`: groups a unit adds rows to.
    pub groups_per_unit: u32,
    /// The counts' noise law, read off their sampler.
    tail: Tail,
}

impl GroupSelection {
    /// The smallest threshold whose map ([`Self::loss`]) is at most `δ`: searched
    /// ([`least_passing`]) from the Laplace closed form `T = k + ⌈b·ln(1/((1+q)δ'))⌉`,
    /// `δ' = δ/(2g)`, or the Gaussian's `k + ⌈σ·√(2 ln(1/δ'))⌉`.
    pub fn calibrate(
        counts: &CountNoise,
        rows_per_unit: u32,
        groups_per_unit: u32,
        delta: f64,
    ) -> Result<Self, String> {
        if !(delta > 0.0 && delta < 1.0) {
            return Err(format!(
                "dp.selection_delta must be in (0, 1), got {}",
                short_number(delta)
            ));
        }
        let selection = Self::with_threshold(counts, rows_per_unit, groups_per_unit, 0)?;
        let per_group = delta / (2.0 * groups_per_unit.max(1) as f64);
        let above = match selection.tail {
            Tail::Laplace { q } => -(1.0 / ((1.0 + q) * per_group)).ln() / q.ln(),
            Tail::Gaussian { sigma2, .. } => (2.0 * sigma2 * (1.0 / per_group).ln()).sqrt(),
        };
        let k = rows_per_unit as i64;
        // `above` is at most 2^40·ln(2^1075·2g) for the scales calibration admits: the cast
        // cannot saturate, and the search's doubling stays below 2^62.
        let threshold = least_passing(k, k + above.ceil().max(1.0) as i64, |threshold| {
            Self {
                threshold,
                ..selection
            }
            .delta()
                <= delta
        })
        .ok_or_else(|| {
            format!(
                "private group selection: no threshold below 2^62 reaches dp.selection_delta={}",
                short_number(delta)
            )
        })?;
        Ok(Self {
            threshold,
            ..selection
        })
    }

    /// The selection with a given threshold (a plan decoded from the wire).
    pub fn with_threshold(
        counts: &CountNoise,
        rows_per_unit: u32,
        groups_per_unit: u32,
        threshold: i64,
    ) -> Result<Self, String> {
        let tail = match counts.sampler {
            Sampler::DiscreteLaplace { s, t } => Tail::Laplace {
                q: (-Rational { num: s, den: t }.to_f64()).exp(),
            },
            Sampler::DiscreteGaussian(law) => Tail::gaussian(law.sigma2().to_f64()),
        };
        Ok(Self {
            threshold,
            rows_per_unit,
            groups_per_unit,
            tail,
        })
    }

    /// `δ = 2g·P(X ≥ T − k)` (module docs); 1 when the threshold is at most `k`.
    fn delta(&self) -> f64 {
        let above = self.threshold - self.rows_per_unit as i64;
        if above <= 0 {
            return 1.0;
        }
        let groups = 2.0 * self.groups_per_unit.max(1) as f64;
        (groups * self.tail.at_least(above)).min(1.0)
    }

    /// Its privacy map: the counts' loss (`counts`, from their noise: the Gaussian's `δ` at
    /// the `ε` asked included) with the threshold's `δ` added, and no zCDP map.
    pub fn loss(&self, counts: PrivacyLoss) -> PrivacyLoss {
        PrivacyLoss {
            epsilon: counts.epsilon,
            delta: counts.delta + self.delta(),
            rho: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::mechanism::{GaussianCalibration, Mechanism, ReleaseShape};

    fn counts(epsilon: f64, k: u32, g: u32) -> CountNoise {
        CountNoise::calibrate_release(
            Mechanism::Laplace,
            epsilon,
            None,
            ReleaseShape::new(2 * g, k),
            GaussianCalibration::Analytic,
        )
        .unwrap()
    }

    #[test]
    fn the_threshold_is_the_smallest_whose_map_is_within_delta() {
        for (eps, k, g, d) in [
            (1.0, 1u32, 1u32, 1e-5),
            (4.0, 1, 1, 1e-6),
            (0.5, 3, 2, 1e-4),
        ] {
            let noise = counts(eps, k, g);
            let selection = GroupSelection::calibrate(&noise, k, g, d).unwrap();
            let loss = selection.loss(noise.loss());
            assert!(loss.delta <= d, "{eps} {k} {g}: {}", loss.delta);
            assert_eq!(loss.epsilon, eps);
            assert_eq!(loss.rho, None);
            // One step lower releases a one-unit group too often: the threshold is minimal.
            let lower = GroupSelection {
                threshold: selection.threshold - 1,
                ..selection
            };
            assert!(lower.delta() > d, "threshold not minimal");
            // The map, by direct summation of the discrete Laplace tail P(L >= T - k).
            let q = (-(eps / (2 * g) as f64) / k as f64).exp();
            let norm = (1.0 - q) / (1.0 + q);
            let tail: f64 = (selection.threshold - k as i64..selection.threshold + 4000)
                .map(|j| norm * q.powi(j as i32))
                .sum();
            let summed = 2.0 * g as f64 * tail;
            assert!(
                (loss.delta - summed).abs() <= 1e-9 * summed,
                "{} {summed}",
                loss.delta
            );
        }
    }

    #[test]
    fn a_gaussian_threshold_is_the_smallest_within_delta() {
        // The counts as one vector of 2g values at sensitivity k; the threshold's tail against
        // a direct summation over the discrete Gaussian law, and its continuous bound.
        for (k, g, d) in [(1u32, 1u32, 1e-6), (2, 3, 1e-5)] {
            let noise = CountNoise::calibrate_release(
                Mechanism::Gaussian,
                1.0,
                Some(d),
                ReleaseShape::new(2 * g, k),
                GaussianCalibration::Analytic,
            )
            .unwrap();
            let selection = GroupSelection::calibrate(&noise, k, g, d).unwrap();
            let loss = selection.loss(noise.loss());
            assert!(selection.delta() <= d && loss.delta <= 2.0 * d, "{loss:?}");
            assert_eq!(loss.rho, None);
            let lower = GroupSelection {
                threshold: selection.threshold - 1,
                ..selection
            };
            assert!(lower.delta() > d, "threshold not minimal");
            let sigma2 = noise.scale * noise.scale;
            let w = |j: i64| (-((j * j) as f64) / (2.0 * sigma2)).exp();
            let z: f64 = (-20_000..=20_000).map(w).sum();
            let above = selection.threshold - k as i64;
            let tail: f64 = (above..=20_000).map(w).sum::<f64>() / z;
            let summed = 2.0 * g as f64 * tail;
            assert!((selection.delta() - summed).abs() <= 1e-9 * summed);
            assert!(tail <= (-((above * above) as f64) / (2.0 * sigma2)).exp());
        }
    }

    #[test]
    fn the_search_finds_the_least_threshold_in_logarithmic_evaluations() {
        for floor in [0i64, 1, 7] {
            for least in [1, 2, 3, 1_000, 123_456_789, 1 << 50].map(|d: i64| floor + d) {
                for start in [floor - 3, floor + 1, floor + 5, least, least + 1, 1 << 40] {
                    let mut calls = 0u32;
                    let found = least_passing(floor, start, |t| {
                        calls += 1;
                        t >= least
                    });
                    assert_eq!(found, Some(least), "floor {floor}, start {start}");
                    // Doubling and bisection each take at most ⌈log2(span)⌉ + 1 evaluations.
                    let span = (least.max(start) - floor) as f64;
                    let most = 2.0 * (span.log2().ceil() + 1.0);
                    assert!(
                        f64::from(calls) <= most,
                        "{calls} evaluations for {least} from {start}"
                    );
                }
            }
        }
        assert_eq!(least_passing(0, 1, |_| false), None);
    }

    #[test]
    fn a_gaussian_threshold_at_a_large_sigma_is_found_and_minimal() {
        // σ ≈ 2e4 (ε = 5e-4 for the vector of two counts): stepping by one from the closed
        // form took about 14σ² = 5.6e9 terms of tail sums here; the search takes tens of
        // evaluations of O(σ) terms.
        let d = 1e-9;
        let noise = CountNoise::calibrate_release(
            Mechanism::Gaussian,
            5e-4,
            Some(d),
            ReleaseShape::new(2, 1),
            GaussianCalibration::Analytic,
        )
        .unwrap();
        assert!(noise.scale > 1e4, "{}", noise.scale);
        let selection = GroupSelection::calibrate(&noise, 1, 1, d).unwrap();
        assert!(selection.delta() <= d);
        let lower = GroupSelection {
            threshold: selection.threshold - 1,
            ..selection
        };
        assert!(lower.delta() > d, "threshold not minimal");
        // Within one noise scale below the continuous tail bound's threshold (the discrete
        // quantile of δ/2 = 5e-10 is about 6.1σ, the bound √(2 ln(2/δ))σ = 6.5σ).
        let bound = 1
            + (2.0 * noise.scale * noise.scale * (2.0 / d).ln())
                .sqrt()
                .ceil() as i64;
        assert!(
            selection.threshold <= bound && selection.threshold > bound - noise.scale as i64,
            "{} against {bound}",
            selection.threshold
        );
    }

    #[test]
    fn a_planted_threshold_shows_in_the_charge() {
        // A threshold one noise scale too low (a calibration bug) charges e times the δ.
        let noise = counts(1.0, 1, 1);
        let selection = GroupSelection::calibrate(&noise, 1, 1, 1e-6).unwrap();
        let low = GroupSelection {
            threshold: selection.threshold - 2,
            ..selection
        };
        let ratio = low.loss(noise.loss()).delta / selection.loss(noise.loss()).delta;
        assert!((ratio - 1.0f64.exp()).abs() < 1e-9, "{ratio}");
    }
}
