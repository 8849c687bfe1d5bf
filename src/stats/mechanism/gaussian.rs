//! The discrete Gaussian mechanism: `N_Z(0, σ²)` added to an integer of sensitivity `Δ`,
//! `σ` from the analytic Gaussian mechanism (Balle & Wang 2018, arXiv:1805.06530, Theorem 8;
//! paper, Theorem Gaus_mec_balle) or the classic bound (Dwork & Roth 2014, Theorem A.1), then
//! raised until the exact `δ` of the *discrete* law at the `σ²` sampled is within target
//! (Canonne, Kamath & Steinke 2020, arXiv:2004.00010, Theorem 7). `(ε, δ)`-DP.

use super::{
    check_delta, check_epsilon, CountNoise, GaussianCalibration, Mechanism, NoiseMechanism, Sampler,
};
use crate::stats::sampler::{DiscreteGaussian, Rational};
use statrs::distribution::{ContinuousCDF, Normal};

fn std_normal() -> Normal {
    Normal::new(0.0, 1.0).expect("standard normal")
}

/// The left side of the Balle-Wang condition: the smallest `δ` for which the continuous
/// Gaussian mechanism with noise `σ` is `(ε, δ)`-DP for sensitivity `Δ` (paper, Theorem
/// Gaus_mec_balle): `Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ)`.
pub fn gaussian_delta(sigma: f64, epsilon: f64, sensitivity: f64) -> f64 {
    let n = std_normal();
    let a = sensitivity / (2.0 * sigma);
    let b = epsilon * sigma / sensitivity;
    n.cdf(a - b) - epsilon.exp() * n.cdf(-a - b)
}

/// The largest ε per noised value the Gaussian calibration accepts (`e^ε` stays finite).
pub const MAX_GAUSSIAN_EPSILON: f64 = 700.0;

/// The analytic Gaussian mechanism: the smallest `σ` with `gaussian_delta(σ, ε, Δ) <= δ`
/// (Balle & Wang 2018, Theorem 8; paper, Theorem Gaus_mec_balle), found by bisection on the
/// monotone condition to the last bit of an `f64`.
pub fn analytic_gaussian_sigma(epsilon: f64, delta: f64, sensitivity: f64) -> Result<f64, String> {
    check_epsilon(epsilon)?;
    check_delta(delta)?;
    // Past e^709.78 the δ condition's e^ε overflows to infinity and inf·0 is NaN: every
    // comparison fails and the bisection would return its floor, noise of σ = 1e-6·Δ
    // (session 14's red team: exact counts for a charge of (ε, 1e-6)).
    if epsilon > MAX_GAUSSIAN_EPSILON {
        return Err(format!(
            "epsilon={epsilon} per noised value is above {MAX_GAUSSIAN_EPSILON}, where the Gaussian \
             mechanism's calibration overflows; use a smaller epsilon or mechanism=laplace"
        ));
    }
    if !(sensitivity.is_finite() && sensitivity > 0.0) {
        return Err(format!("sensitivity must be > 0, got {sensitivity}"));
    }
    let (mut lo, mut hi) = (sensitivity * 1e-6, sensitivity);
    while gaussian_delta(hi, epsilon, sensitivity) > delta {
        lo = hi;
        hi *= 2.0;
        if hi > 1e15 {
            return Err(format!(
                "no Gaussian noise level reaches epsilon={epsilon}, delta={delta}"
            ));
        }
    }
    while gaussian_delta(lo, epsilon, sensitivity) <= delta {
        hi = lo;
        lo /= 2.0;
    }
    // Invariant: delta(lo) > target >= delta(hi). Bisect until the bracket cannot shrink.
    loop {
        let mid = lo + (hi - lo) / 2.0;
        if mid <= lo || mid >= hi {
            return Ok(hi);
        }
        if gaussian_delta(mid, epsilon, sensitivity) > delta {
            lo = mid;
        } else {
            hi = mid;
        }
    }
}

/// The classic Gaussian mechanism bound `σ = Δ sqrt(2 ln(1.25/δ)) / ε` (paper, Theorem
/// Gaus_mec_dwork), which is only proven for `ε < 1`.
pub fn classic_gaussian_sigma(epsilon: f64, delta: f64, sensitivity: f64) -> Result<f64, String> {
    check_epsilon(epsilon)?;
    check_delta(delta)?;
    if epsilon >= 1.0 {
        return Err(format!(
            "the classic Gaussian bound needs epsilon < 1 per count, got {epsilon}; use the analytic calibration"
        ));
    }
    Ok(sensitivity * (2.0 * (1.25 / delta).ln()).sqrt() / epsilon)
}

/// Largest Gaussian `σ` whose discrete calibration is checked exactly (two tail sums of `12σ`
/// terms each); beyond it (only at per-cell ε below ~1e-4) calibration is refused.
pub const MAX_GAUSSIAN_SIGMA: f64 = 1e5;

/// Weights `exp(-k²/2σ²)` for `k = 0..=limit`, `limit = 40σ` (later terms are below e^-800).
pub(super) fn discrete_gaussian_weights(sigma2: f64) -> impl Iterator<Item = (f64, f64)> {
    let limit = (40.0 * sigma2.sqrt()).ceil() as u64 + 2;
    (0..=limit).map(move |k| {
        let k = k as f64;
        (k, (-k * k / (2.0 * sigma2)).exp())
    })
}

/// From `σ² = 1` on, the normalising constant and the variance are read from the dual
/// (Poisson-summation) series, whose terms `exp(-2π²σ²m²)` fall below e^-19 at `m = 1` and
/// e^-177 at `m = 3`: exact to double precision in a few terms instead of `40σ`.
const POISSON_FROM_SIGMA2: f64 = 1.0;

/// `Σ_{m ∈ Z} m^(2p) exp(-2π²σ²m²)` for `p = 0, 1` (the dual sums `S0`, `S1`).
fn dual_sums(sigma2: f64) -> (f64, f64) {
    let a = 2.0 * std::f64::consts::PI.powi(2) * sigma2;
    let (mut s0, mut s1) = (1.0, 0.0);
    for m in 1..=8 {
        let m2 = (m * m) as f64;
        let w = (-a * m2).exp();
        s0 += 2.0 * w;
        s1 += 2.0 * m2 * w;
    }
    (s0, s1)
}

/// The normalising constant `Σ_k exp(-k²/2σ²)` over all integers: by the Poisson summation
/// formula (as Canonne, Kamath & Steinke 2020 use it for the discrete Gaussian) it is
/// `√(2πσ²)·S0`; directly summed below `σ² = 1`.
pub(super) fn discrete_gaussian_total(sigma2: f64) -> f64 {
    if sigma2 >= POISSON_FROM_SIGMA2 {
        return (2.0 * std::f64::consts::PI * sigma2).sqrt() * dual_sums(sigma2).0;
    }
    summed_total(sigma2)
}

/// The normalising constant summed term by term over `40σ` terms.
pub(super) fn summed_total(sigma2: f64) -> f64 {
    discrete_gaussian_weights(sigma2)
        .map(|(k, w)| if k == 0.0 { w } else { 2.0 * w })
        .sum()
}

/// The variance `Σ k² P(k)` summed term by term over `40σ` terms.
pub(super) fn summed_variance(sigma2: f64) -> f64 {
    2.0 * discrete_gaussian_weights(sigma2)
        .map(|(k, w)| k * k * w)
        .sum::<f64>()
        / summed_total(sigma2)
}

/// `P(Y >= k)` for the discrete Gaussian, by direct summation (no allocation) from `k` on,
/// over `12σ + 2` terms: each later term is below e^-72 times the first.
pub(super) fn discrete_gaussian_tail(sigma2: f64, total: f64, k: f64) -> f64 {
    if k <= 0.0 {
        // Symmetry: P(Y >= k) = 1 - P(Y >= 1 - k) for k <= 0.
        return 1.0 - discrete_gaussian_tail(sigma2, total, 1.0 - k);
    }
    let sigma = sigma2.sqrt();
    let terms = (12.0 * sigma).ceil() as u64 + 2;
    let last = (k + terms as f64).min((40.0 * sigma).ceil() + 2.0);
    let mut sum = 0.0;
    let mut j = k;
    while j <= last {
        sum += (-j * j / (2.0 * sigma2)).exp();
        j += 1.0;
    }
    sum / total
}

/// The exact variance `Σ k² P(k)` of the discrete Gaussian: from `σ² = 1` on,
/// `σ² − 4π²σ⁴·S1/S0`, the derivative `2σ⁴·d ln Z/dσ²` of the Poisson-summation form of the
/// normalising constant `Z` (at most `σ²`, as Canonne, Kamath & Steinke 2020 show); directly
/// summed below.
pub(super) fn discrete_gaussian_variance(sigma2: f64) -> f64 {
    if sigma2 >= POISSON_FROM_SIGMA2 {
        let (s0, s1) = dual_sums(sigma2);
        return sigma2 - 4.0 * std::f64::consts::PI.powi(2) * sigma2 * sigma2 * s1 / s0;
    }
    summed_variance(sigma2)
}

/// The fourth cumulant `Σ k⁴ P(k) − 3·variance²` of the discrete Gaussian: summed term by term
/// below `σ² = 1`; from there on 0, the continuous Gaussian's, to within a relative
/// `O(σ⁴ exp(−2π²σ²))` of `σ⁴` (the dual series of the variance above; 8·10⁻⁶ at `σ² = 1`),
/// far below what the skewness correction that reads it can resolve.
pub(super) fn discrete_gaussian_fourth_cumulant(sigma2: f64) -> f64 {
    if sigma2 >= POISSON_FROM_SIGMA2 {
        return 0.0;
    }
    let fourth = 2.0
        * discrete_gaussian_weights(sigma2)
            .map(|(k, w)| k * k * k * k * w)
            .sum::<f64>()
        / summed_total(sigma2);
    fourth - 3.0 * summed_variance(sigma2).powi(2)
}

/// The exact `δ(ε)` of the discrete Gaussian mechanism with integer sensitivity `Δ`
/// (Canonne, Kamath & Steinke 2020, Theorem 7): `P[Y > εσ²/Δ − Δ/2] − e^ε P[Y > εσ²/Δ + Δ/2]`.
pub fn discrete_gaussian_delta(sigma2: f64, epsilon: f64, sensitivity: u32) -> f64 {
    let total = discrete_gaussian_total(sigma2);
    // P(Y > x) = P(Y >= floor(x) + 1) for the integer-valued Y.
    let greater = |x: f64| discrete_gaussian_tail(sigma2, total, x.floor() + 1.0);
    let d = sensitivity as f64;
    let center = epsilon * sigma2 / d;
    (greater(center - d / 2.0) - epsilon.exp() * greater(center + d / 2.0)).max(0.0)
}

/// `σ²` rounded up to `num / 2^k` with `num < 2^55`, the range the exact sampler supports.
pub(super) fn dyadic_sigma2(sigma2: f64) -> Result<Rational, String> {
    if sigma2 >= 2f64.powi(55) {
        return Err(format!("Gaussian noise sigma^2 = {sigma2} is too large"));
    }
    let bits = (55 - (sigma2.log2().ceil() as i32).max(0)).clamp(0, 40) as u32;
    Rational::ceil_dyadic(sigma2, bits)
}

/// The discrete Gaussian mechanism for integers (module docs): `(ε, δ)`-DP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GaussianMechanism;

impl NoiseMechanism for GaussianMechanism {
    fn name(&self) -> &'static str {
        "gaussian"
    }

    /// It spends the `δ` it was calibrated for (Canonne, Kamath & Steinke 2020,
    /// arXiv:2004.00010, Theorem 7).
    fn cost(&self, epsilon: f64, delta: Option<f64>) -> (f64, f64) {
        (epsilon, delta.unwrap_or(0.0))
    }

    fn needs_delta(&self) -> bool {
        true
    }

    fn max_epsilon(&self) -> f64 {
        MAX_GAUSSIAN_EPSILON
    }

    /// Nothing beyond the common range: `σ` is bounded by `δ` as `ε → 0` and checked against
    /// [`MAX_GAUSSIAN_SIGMA`] by the calibration.
    fn check_count_scale(&self, _epsilon: f64, _sensitivity: u32) -> Result<(), String> {
        Ok(())
    }

    /// `σ` from the analytic (Balle & Wang 2018, Theorem 8) or classic (Dwork & Roth 2014,
    /// Theorem A.1) calibration, `σ²` rounded up to a dyadic rational the exact sampler takes,
    /// then raised until the discrete law's exact `δ` (CKS 2020, Theorem 7) is within target.
    fn calibrate_count(
        &self,
        epsilon: f64,
        delta: Option<f64>,
        sensitivity: u32,
        calibration: GaussianCalibration,
    ) -> Result<CountNoise, String> {
        let delta = delta.ok_or_else(|| {
            "the gaussian mechanism needs delta (set dp.delta or pass delta=...)".to_string()
        })?;
        let d = sensitivity as f64;
        let sigma = match calibration {
            GaussianCalibration::Analytic => analytic_gaussian_sigma(epsilon, delta, d)?,
            GaussianCalibration::Classic => classic_gaussian_sigma(epsilon, delta, d)?,
        };
        if sigma > MAX_GAUSSIAN_SIGMA {
            return Err(format!(
                "epsilon={epsilon}, delta={delta} needs Gaussian noise with sigma {sigma:.3e} > {MAX_GAUSSIAN_SIGMA:e}; use a larger epsilon or the laplace mechanism"
            ));
        }
        // Sample σ² rounded up to a dyadic rational with enough bits to keep the
        // sampler's integer arithmetic within u128 (see sampler::DiscreteGaussian),
        // then make sure the exact discrete δ is within target (CKS Theorem 7).
        let mut sigma2 = dyadic_sigma2(sigma * sigma)?;
        let mut guard = 0;
        while discrete_gaussian_delta(sigma2.to_f64(), epsilon, sensitivity) > delta {
            sigma2 = dyadic_sigma2(sigma2.to_f64() * (1.0 + 1e-6))?;
            guard += 1;
            if guard > 100_000 {
                return Err("could not calibrate the discrete Gaussian".into());
            }
        }

        Ok(CountNoise {
            mechanism: Mechanism::Gaussian,
            epsilon,
            delta,
            sensitivity,
            scale: sigma2.to_f64().sqrt(),
            variance: discrete_gaussian_variance(sigma2.to_f64()),
            fourth_cumulant: discrete_gaussian_fourth_cumulant(sigma2.to_f64()),
            sampler: Sampler::DiscreteGaussian(DiscreteGaussian::new(sigma2)?),
        })
    }

    /// At most `2^12` units, and `ε·2^10`: the exact discrete Gaussian is checked up to
    /// `σ = 1e5` units ([`MAX_GAUSSIAN_SIGMA`]).
    fn grid_sensitivity(&self, epsilon: f64) -> f64 {
        2f64.powi(12).min(epsilon * 2f64.powi(10))
    }

    /// `10σ + 1`: the tail `P(|k| > 10σ) < 2e^-50`.
    fn replay_radius(&self, scale: f64) -> f64 {
        (10.0 * scale).ceil() + 1.0
    }

    fn replay_weight(&self, k: f64, scale: f64) -> f64 {
        (-k * k / (2.0 * scale * scale)).exp()
    }
}
