//! The discrete Laplace mechanism, `P(k) ∝ exp(−ε|k|/Δ)` added to an integer of sensitivity
//! `Δ`: exactly `(ε, 0)`-DP, as the continuous Laplace mechanism of scale `b = Δ/ε` (paper,
//! Theorem Lap_DP; Canonne, Kamath & Steinke 2020, arXiv:2004.00010, the discrete Laplace law);
//! and [`RealLaplace`], the same noise for a real value on a power-of-two grid (Mironov 2012,
//! doi:10.1145/2382196.2382264, as OpenDP does it).

use super::{
    check_epsilon, check_epsilon_range, short_number, CountNoise, GaussianCalibration, Mechanism,
    NoiseMechanism, PrivacyLoss, ReleaseShape, Sampler, MAX_EPSILON, MAX_NOISE_SCALE,
};
use crate::stats::sampler::{discrete_laplace, Rational};
use rand::RngCore;

/// The discrete Laplace mechanism for integers (module docs): pure `ε`-DP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaplaceMechanism;

impl NoiseMechanism for LaplaceMechanism {
    fn name(&self) -> &'static str {
        "laplace"
    }

    /// The law `P(k) ∝ exp(−|k|·s/t)` is exactly `ε₁`-DP for a value of sensitivity `Δ` with
    /// `ε₁ = Δ·s/t` (paper, Theorem Lap_DP; no `δ` whatever was asked), read from the
    /// sampler's exact rational. A release of `m` such values: `m·ε₁` (basic composition,
    /// tight for the L1 norm `m·Δ`) and `m·ε₁²/2`-zCDP (Bun & Steinke 2016, Proposition 1.4
    /// per value, Lemma 2.3 over the values).
    fn loss(&self, noise: &CountNoise) -> PrivacyLoss {
        let Sampler::DiscreteLaplace { s, t } = noise.sampler else {
            unreachable!("a Laplace CountNoise samples the discrete Laplace law")
        };
        // t = den(ε₁)·Δ exactly (calibrate_count), so s/(t/Δ) is ε₁'s exact dyadic value and
        // its f64 is exact (a numerator of at most 53 bits).
        let per_value = Rational {
            num: s,
            den: t / noise.sensitivity() as u128,
        }
        .to_f64();
        let m = noise.shape.coordinates as f64;
        PrivacyLoss {
            epsilon: m * per_value,
            delta: 0.0,
            rho: Some(m * per_value * per_value / 2.0),
        }
    }

    fn needs_delta(&self) -> bool {
        false
    }

    fn max_epsilon(&self) -> f64 {
        MAX_EPSILON
    }

    /// The scale `Δ/ε` is at most [`MAX_NOISE_SCALE`] (issue 27: a larger one let the noise
    /// wrap the integer it is added to).
    fn check_count_scale(&self, epsilon: f64, sensitivity: u32) -> Result<(), String> {
        let scale = sensitivity as f64 / epsilon;
        if scale.is_nan() || scale > MAX_NOISE_SCALE {
            return Err(format!(
                "epsilon={} per noised count (sensitivity {sensitivity}) gives noise scale {scale:.3e} above the largest supported 2^40 = {MAX_NOISE_SCALE:.3e}; the smallest epsilon per count is {:.3e}",
                short_number(epsilon),
                sensitivity as f64 / MAX_NOISE_SCALE
            ));
        }
        Ok(())
    }

    /// `P(k) ∝ exp(-ε|k|/Δ)` with `s/t = ε/Δ` exactly; variance `2q/(1−q)²` and fourth
    /// cumulant `2q(1 + 4q + q²)/(1 − q)⁴`, `q = e^(−ε/Δ)` (the difference of two geometric
    /// laws of ratio `q`; Canonne, Kamath & Steinke 2020, arXiv:2004.00010, §2.2).
    fn calibrate_count(
        &self,
        epsilon: f64,
        _delta: Option<f64>,
        sensitivity: u32,
        _calibration: GaussianCalibration,
    ) -> Result<CountNoise, String> {
        check_epsilon(epsilon)?;
        let eps = Rational::from_f64(epsilon).map_err(|e| format!("epsilon: {e}"))?;
        let t = eps
            .den
            .checked_mul(sensitivity as u128)
            .ok_or_else(|| format!("epsilon {epsilon} is too small"))?;
        let b = sensitivity as f64 / epsilon;
        let q = (-1.0 / b).exp();
        Ok(CountNoise {
            mechanism: Mechanism::Laplace,
            epsilon,
            delta: 0.0,
            shape: ReleaseShape::scalar(sensitivity),
            scale: b,
            variance: 2.0 * q / (1.0 - q).powi(2),
            // G₁ − G₂ with G geometric of ratio q: twice the geometric's κ₄.
            fourth_cumulant: 2.0 * q * (1.0 + 4.0 * q + q * q) / (1.0 - q).powi(4),
            sampler: Sampler::DiscreteLaplace { s: eps.num, t },
        })
    }

    /// At most `2^30` units, and a scale in units `Δ/ε` at most `2^39`, half of
    /// [`MAX_NOISE_SCALE`].
    fn grid_sensitivity(&self, epsilon: f64) -> f64 {
        2f64.powi(30).min(epsilon * 2f64.powi(39))
    }

    /// `40b`: the tail `P(|k| > 40b) < 2e^-40 ≈ 2^-56`.
    fn replay_radius(&self, scale: f64) -> f64 {
        (40.0 * scale).ceil()
    }

    fn replay_weight(&self, k: f64, scale: f64) -> f64 {
        (-k.abs() / scale).exp()
    }
}

/// One exact draw of `P(k) ∝ exp(-|k| s / t)` (`stats/sampler.rs`).
pub(super) fn sample<R: RngCore + ?Sized>(rng: &mut R, s: u128, t: u128) -> i64 {
    discrete_laplace(rng, s, t)
}

/// Laplace noise for a real-valued statistic of sensitivity `Δ`, made floating-point safe the
/// way OpenDP does: the value is rounded to a power-of-two grid `g = 2^k` and integer noise is
/// drawn exactly in grid units, so every output is an exact multiple of `g` whose probability
/// is exactly the discrete Laplace one.
///
/// Grid: `k = max(⌈log2(Δ/ε)⌉ − 30, −30)`, about a billionth of the noise scale but never finer
/// than `2^-30`, so values up to `2^32` fit the integer range; larger inputs are clamped to it
/// (clamping is 1-Lipschitz, so it does not raise the sensitivity, and no error ever depends on
/// the data). Rounding the input
/// to the grid moves two neighbouring values apart by at most one more grid step, so the noise
/// is calibrated for sensitivity `Δ + g`, and its scale in grid units `(Δ + g)/(ε g)` is rounded
/// *up* to a dyadic rational. The result is `(ε, 0)`-DP for the statistic (Laplace mechanism,
/// paper Theorem Lap_DP), up to that slight extra noise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RealLaplace {
    pub epsilon: f64,
    pub sensitivity: f64,
    /// The grid is `2^grid_exponent`.
    pub grid_exponent: i32,
    /// Noise scale in grid units, `P(j) ∝ exp(-|j| / units)`.
    units: Rational,
}

impl RealLaplace {
    /// Calibrates Laplace noise of scale `Δ/ε` on the grid chosen from `Δ`, for a public
    /// sensitivity `Δ` (the one place this is done).
    pub fn calibrate(epsilon: f64, sensitivity: f64) -> Result<Self, String> {
        Self::calibrate_on_public_grid(epsilon, sensitivity, sensitivity)
    }

    /// [`Self::calibrate`] with the grid chosen from `grid_bound` instead of `Δ`. When `Δ`
    /// depends on the data (smooth sensitivity), the grid must not: which grid an output lies
    /// on would tell neighbouring datasets apart, whatever the noise. `grid_bound` must be
    /// computed from public values only (an upper bound on `Δ` keeps the grid below a
    /// billionth of the largest noise scale).
    pub fn calibrate_on_public_grid(
        epsilon: f64,
        sensitivity: f64,
        grid_bound: f64,
    ) -> Result<Self, String> {
        check_epsilon(epsilon)?;
        if !(sensitivity.is_finite() && sensitivity > 0.0) {
            return Err(format!(
                "sensitivity must be a finite number > 0, got {sensitivity}"
            ));
        }
        if !(grid_bound.is_finite() && grid_bound > 0.0) {
            return Err(format!(
                "the grid bound must be a finite number > 0, got {grid_bound}"
            ));
        }
        // The same range as a count's noise (MAX_NOISE_SCALE), on the scale actually sampled:
        // the noise is drawn in grid steps and added to the value's grid steps (clamped to
        // ±2^62), so both its scale in grid steps and its scale `(Δ + g)/ε` (the grid term
        // dominates below ε ≈ 2^-30) must be at most 2^40. First Δ/ε and the grid bound's, so
        // that the grid itself is computed from finite numbers.
        let eps = short_number(epsilon);
        check_epsilon_range(epsilon, "")?;
        let too_wide = |scale: f64, what: String| {
            format!(
                "epsilon={eps} with {what} gives noise scale {scale:.3e} above the largest supported 2^40 = {MAX_NOISE_SCALE:.3e}"
            )
        };
        for (what, bound) in [("sensitivity", sensitivity), ("grid bound", grid_bound)] {
            let scale = bound / epsilon;
            if scale.is_nan() || scale > MAX_NOISE_SCALE {
                return Err(too_wide(scale, format!("{what} {}", short_number(bound))));
            }
        }
        let grid_exponent = ((grid_bound / epsilon).log2().ceil() as i32 - 30).max(-30);
        let grid = 2f64.powi(grid_exponent);
        let mut units = Rational::ceil_dyadic((sensitivity + grid) / (epsilon * grid), 40)?;
        // The quotient above is rounded to nearest, so it can fall an ulp short of the exact
        // `(Δ + g)/(ε g)`: then one more step of the dyadic rational, so that the privacy map
        // ([`Self::loss`]) is at most `ε` exactly.
        units.num = units.num.max(exact::least_units(
            units.den,
            grid_exponent,
            sensitivity,
            epsilon,
        )?);
        let steps = units.to_f64();
        if !(steps <= MAX_NOISE_SCALE && steps * grid <= MAX_NOISE_SCALE) {
            return Err(too_wide(
                steps * grid,
                format!("sensitivity {sensitivity} on the grid 2^{grid_exponent} ({steps:.3e} grid steps)"),
            ));
        }
        Ok(Self {
            epsilon,
            sensitivity,
            grid_exponent,
            units,
        })
    }

    /// Its privacy map: rounding to the grid and noise of scale `b` in grid steps make a value
    /// of sensitivity `Δ` exactly `ε₁ = (Δ + g)/b`-DP (paper, Theorem Lap_DP, for the rounded
    /// value, whose sensitivity is `Δ + g`), computed from the calibrated scale in exact
    /// integer arithmetic and rounded up to an `f64`; the calibration makes it at most the `ε`
    /// asked for. Pure DP, so also `ε₁²/2`-zCDP (Bun & Steinke 2016, arXiv:1605.02065,
    /// Proposition 1.4).
    pub fn loss(&self) -> PrivacyLoss {
        let epsilon = exact::map(self.units, self.grid_exponent, self.sensitivity);
        PrivacyLoss {
            epsilon,
            delta: 0.0,
            rho: Some(epsilon * epsilon / 2.0),
        }
    }

    /// The grid spacing `g`.
    pub fn grid(&self) -> f64 {
        2f64.powi(self.grid_exponent)
    }

    /// The effective continuous scale `b` (slightly above `Δ/ε`).
    pub fn scale(&self) -> f64 {
        self.units.to_f64() * self.grid()
    }

    /// `value` rounded to the grid (clamped to `±2^62` grid steps) plus exact noise; an error
    /// for NaN, and (checked, never saturated: a saturation would depend on the value) when
    /// the sum leaves `i64`, which the noise's scale of at most `2^40` grid steps makes a
    /// probability below `2^-5900` (as for counts, [`MAX_NOISE_SCALE`]).
    ///
    /// The noise is charged as the `ε` it was calibrated for, so before it is drawn its own
    /// map ([`Self::loss`]) must say no more: a calibration that fell short (a bug) is an
    /// error here, not a release that costs more than its charge. This checks every local
    /// ratio method's noise at each draw, where `naive` and `smooth_sensitivity` calibrate
    /// per group from that group's sensitivity.
    pub fn release<R: RngCore + ?Sized>(&self, value: f64, rng: &mut R) -> Result<f64, String> {
        if value.is_nan() {
            return Err("cannot add noise to NaN".to_string());
        }
        let map = self.loss().epsilon;
        if map > self.epsilon {
            return Err(format!(
                "real Laplace noise of scale {:e} for sensitivity {:e} costs epsilon={map:e}, above the epsilon={:e} it is charged for",
                self.scale(),
                self.sensitivity,
                self.epsilon
            ));
        }
        let limit = 2f64.powi(62);
        let units = (value / self.grid()).round().clamp(-limit, limit) as i64;
        // P(j) ∝ exp(-|j| s/t) with t/s = units.num/units.den.
        let noise = discrete_laplace(rng, self.units.den, self.units.num);
        let noisy = units
            .checked_add(noise)
            .ok_or_else(|| "a noisy value left the range of a 64-bit integer".to_string())?;
        Ok(noisy as f64 * self.grid())
    }
}

/// Exact arithmetic on the `f64`s of [`RealLaplace`]'s calibration (every finite `f64` is a
/// dyadic rational `m·2^e`), so that its privacy map is a bound, not a rounding.
mod exact {
    use crate::stats::sampler::Rational;
    use num_bigint::BigUint;

    /// `x` (finite, `> 0`) as `(m, e)` with `x = m·2^e` exactly.
    fn dyadic(x: f64) -> (BigUint, i64) {
        let bits = x.to_bits();
        let exponent = ((bits >> 52) & 0x7ff) as i64;
        let fraction = bits & ((1u64 << 52) - 1);
        if exponent == 0 {
            (BigUint::from(fraction), -1074)
        } else {
            (BigUint::from(fraction | (1u64 << 52)), exponent - 1075)
        }
    }

    /// `Σ mᵢ·2^eᵢ` as an integer times `2^lowest` (`lowest` at most every `eᵢ`).
    fn at(terms: &[(BigUint, i64)], lowest: i64) -> BigUint {
        terms.iter().map(|(m, e)| m << ((e - lowest) as u64)).sum()
    }

    /// The least numerator `n` of `n/den` grid steps of `2^k` that cover `(Δ + 2^k)/ε`:
    /// `⌈(Δ + 2^k)·den/(ε·2^k)⌉`, exactly.
    pub(super) fn least_units(
        den: u128,
        k: i32,
        sensitivity: f64,
        epsilon: f64,
    ) -> Result<u128, String> {
        let k = k as i64;
        let (me, ee) = dyadic(epsilon);
        let (md, ed) = dyadic(sensitivity);
        let lowest = (ee + k).min(ed).min(k);
        let divisor = at(&[(me, ee + k)], lowest);
        let needed = at(&[(md, ed), (BigUint::from(1u8), k)], lowest) * BigUint::from(den);
        let least = (&needed + &divisor - BigUint::from(1u8)) / divisor;
        u128::try_from(least)
            .map_err(|_| "the noise scale is too large to represent exactly".to_string())
    }

    /// `(Δ + 2^k)/(units·2^k)`, rounded up to an `f64`.
    pub(super) fn map(units: Rational, k: i32, sensitivity: f64) -> f64 {
        let (k, num, den) = (k as i64, BigUint::from(units.num), BigUint::from(units.den));
        let (md, ed) = dyadic(sensitivity);
        let lowest = ed.min(k);
        let top = at(&[(md, ed), (BigUint::from(1u8), k)], lowest) * den;
        // value = top·2^lowest / (num·2^k); start a few ulps below the f64 quotient (itself
        // within two roundings of the value) and step up to the first `f` with
        // `f·num·2^k ≥ top·2^lowest`, exactly.
        let mut f = ((sensitivity + 2f64.powi(k as i32)) / (units.to_f64() * 2f64.powi(k as i32)))
            .next_down()
            .next_down()
            .next_down();
        loop {
            let (mf, ef) = dyadic(f);
            let low = (ef + k).min(lowest);
            if at(&[(mf * &num, ef + k)], low) >= at(&[(top.clone(), lowest)], low) {
                return f;
            }
            f = f.next_up();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn the_real_laplace_map_is_at_most_epsilon_and_tight() {
        // Random and edge (ε, Δ): the exact map never exceeds ε (the calibration steps its
        // rational up where the f64 quotient fell short) and is within 2^-30 of it.
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(45);
        let mut cases: Vec<(f64, f64)> = vec![
            (1.0, std::f64::consts::LN_2),
            (0.1, 0.5),
            (2f64.powi(-30), 1.0),
            (MAX_EPSILON, 1.0),
            (0.5, 1e-300),
        ];
        for _ in 0..2000 {
            cases.push((rng.random_range(0.01..5.0), rng.random_range(1e-3..500.0)));
        }
        for (epsilon, sensitivity) in cases {
            let noise = RealLaplace::calibrate(epsilon, sensitivity).unwrap();
            let loss = noise.loss();
            assert!(loss.epsilon <= epsilon, "{epsilon} {sensitivity}: {loss:?}");
            assert!(
                loss.epsilon >= epsilon * (1.0 - 2f64.powi(-30)),
                "{epsilon} {sensitivity}"
            );
            assert_eq!(loss.delta, 0.0);
        }
    }

    #[test]
    fn a_planted_scale_shows_in_the_real_laplace_map() {
        // Half the scale (a calibration bug) charges twice the ε.
        let noise = RealLaplace::calibrate(1.0, 3.0).unwrap();
        let halved = RealLaplace {
            units: Rational {
                num: noise.units.num,
                den: 2 * noise.units.den,
            },
            ..noise
        };
        let ratio = halved.loss().epsilon / noise.loss().epsilon;
        assert!((ratio - 2.0).abs() < 1e-12, "{ratio}");
        // And it is never drawn: the release checks the map against the ε it is charged for.
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(45);
        assert!(noise.release(1.0, &mut rng).is_ok());
        let err = halved.release(1.0, &mut rng).unwrap_err();
        assert!(
            err.contains("above the epsilon=1e0 it is charged for"),
            "{err}"
        );
    }
}
