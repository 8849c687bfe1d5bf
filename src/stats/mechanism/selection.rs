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

use super::{CountNoise, PrivacyLoss, Sampler};
use crate::stats::sampler::Rational;

/// The law of the counts' noise, as far as its upper tail is concerned.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Tail {
    /// Discrete Laplace of parameter `q = e^{−ε'/k}`.
    Laplace { q: f64 },
    /// Discrete Gaussian of variance parameter `σ²`.
    Gaussian { sigma2: f64 },
}

impl Tail {
    /// `P(X ≥ m)` for `m ≥ 1`.
    fn at_least(self, m: i64) -> f64 {
        match self {
            Self::Laplace { q } => q.powf(m as f64) / (1.0 + q),
            // Σ_{j ≥ m} e^{−j²/2σ²} over Σ_j e^{−j²/2σ²}, both summed until the terms are
            // below 2^-1074·(the first): the tail's sum is rounded at most by its last
            // terms' size, and the normaliser is summed from below (a lower bound), so the
            // ratio is a bound up to the `f64` rounding of the sums.
            Self::Gaussian { sigma2 } => {
                let weight = |j: f64| (-(j * j) / (2.0 * sigma2)).exp();
                let sum_from = |start: i64| {
                    let mut total = 0.0;
                    let mut j = start;
                    loop {
                        let w = weight(j as f64);
                        if w == 0.0 || (total > 0.0 && w < total * f64::EPSILON * 1e-3) {
                            return total;
                        }
                        total += w;
                        j += 1;
                    }
                };
                let normaliser = 1.0 + 2.0 * sum_from(1);
                sum_from(m) / normaliser
            }
        }
    }
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
    /// The smallest threshold whose map ([`Self::loss`]) is at most `δ`: from the Laplace
    /// closed form `T = k + ⌈b·ln(1/((1+q)δ'))⌉`, `δ' = δ/(2g)`, or the Gaussian's
    /// `k + ⌈σ·√(2 ln(1/δ'))⌉`, stepped down while the map stays within `δ` and up while it
    /// does not.
    pub fn calibrate(
        counts: &CountNoise,
        rows_per_unit: u32,
        groups_per_unit: u32,
        delta: f64,
    ) -> Result<Self, String> {
        if !(delta > 0.0 && delta < 1.0) {
            return Err(format!("dp.selection_delta must be in (0, 1), got {delta}"));
        }
        let mut selection = Self::with_threshold(counts, rows_per_unit, groups_per_unit, 0)?;
        let per_group = delta / (2.0 * groups_per_unit.max(1) as f64);
        let above = match selection.tail {
            Tail::Laplace { q } => -(1.0 / ((1.0 + q) * per_group)).ln() / q.ln(),
            Tail::Gaussian { sigma2 } => (2.0 * sigma2 * (1.0 / per_group).ln()).sqrt(),
        };
        selection.threshold = rows_per_unit as i64 + above.ceil().max(1.0) as i64;
        while selection.delta() > delta {
            selection.threshold += 1;
        }
        while selection.threshold > rows_per_unit as i64 + 1 {
            let lower = Self {
                threshold: selection.threshold - 1,
                ..selection
            };
            if lower.delta() > delta {
                break;
            }
            selection = lower;
        }
        Ok(selection)
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
            Sampler::DiscreteGaussian(law) => Tail::Gaussian {
                sigma2: law.sigma2().to_f64(),
            },
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
