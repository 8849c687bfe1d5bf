//! Noise mechanisms and their calibration, one type per mechanism (OpenDP's measurement and
//! privacy map side by side): [`laplace::LaplaceMechanism`] and
//! [`gaussian::GaussianMechanism`], each implementing [`NoiseMechanism`] in its own file with
//! its calibration from `(ε, δ, Δ)`, its exact sampler (`stats/sampler.rs`), the variance and
//! fourth cumulant of the noise it adds, its privacy cost, and the properties callers would
//! otherwise read off its name (whether it needs `δ`, its largest ε, the sensitivity a grid
//! should aim for, its law for fast replays). [`Mechanism`] is the user's choice, parsed once
//! from `mechanism = '...'`; [`Mechanism::law`] maps it to its type, the one `match` on it.
//! Callers read the law, never test the name.
//!
//! Each mechanism is calibrated for a count in exactly one function, its
//! [`NoiseMechanism::calibrate_count`], reached through [`CountNoise::calibrate`], which every
//! caller (SQL aggregates, simulations, the reproduction of the paper) uses.
//!
//! Privacy guarantees (for a count of sensitivity `Δ` under the neighbouring relation stated by
//! the caller):
//! * [`Mechanism::Laplace`]: discrete Laplace, `P(k) ∝ exp(-ε|k|/Δ)`. Exactly `(ε, 0)`-DP: the
//!   probability ratio of any output under neighbouring inputs is at most `exp(ε)`, as for the
//!   continuous Laplace mechanism of scale `b = Δ/ε` (paper, Theorem Lap_DP).
//! * [`Mechanism::Gaussian`]: discrete Gaussian `N_Z(0, σ²)` with `σ` from the analytic
//!   Gaussian mechanism (Balle & Wang 2018; paper, Theorem Gaus_mec_balle) or, for comparison,
//!   the classic bound (paper, Theorem Gaus_mec_dwork). `(ε, δ)`-DP: after calibrating `σ` for
//!   the continuous mechanism we compute the exact `δ` of the *discrete* Gaussian at the `σ²`
//!   actually sampled (Canonne, Kamath & Steinke 2020, Theorem 7) and raise `σ` until it is
//!   within the target, so the guarantee holds for the noise that is really added.
//!
//! Relation to the paper's continuous formulas: the discrete Laplace with parameter `b` has
//! variance `2q/(1-q)²`, `q = exp(-1/b)`, slightly below the continuous `2b²` (by about 1/6);
//! the discrete Gaussian's variance is below `σ²` by a relative `O(exp(-2π²σ²))`. Intervals use
//! the exact variance of the noise added ([`CountNoise::variance`]).
//!
//! Adding a mechanism: a file here with a unit type implementing [`NoiseMechanism`], a
//! [`Mechanism`] variant with its line in [`Mechanism::ALL`] and [`Mechanism::law`], and its
//! sampler's variant in `Sampler`.

pub mod gaussian;
pub mod laplace;
pub mod privacy_map;
pub mod search;
pub mod selection;

pub use gaussian::{
    analytic_gaussian_sigma, classic_gaussian_sigma, discrete_gaussian_delta, gaussian_delta,
    GaussianMechanism, MAX_GAUSSIAN_EPSILON, MAX_GAUSSIAN_SIGMA,
};
pub use laplace::{LaplaceMechanism, RealLaplace};
pub use privacy_map::{cdp_delta, cdp_epsilon, rho_for, PrivacyLoss, ReleaseShape};
pub use selection::GroupSelection;

use crate::stats::sampler::DiscreteGaussian;
use rand::RngCore;
use std::fmt;

/// The noise distribution a user chooses (`mechanism = '...'`); [`Self::law`] is its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// Discrete Laplace noise: pure `ε`-DP ([`LaplaceMechanism`]).
    Laplace,
    /// Discrete Gaussian noise: `(ε, δ)`-DP ([`GaussianMechanism`]).
    Gaussian,
}

/// A noise mechanism for integers of sensitivity `Δ`: its calibration, sampler, noise moments
/// and privacy map together (a measurement and its privacy map, as in OpenDP: Gaboardi, Hay &
/// Vadhan 2020, "A Programming Framework for OpenDP"). Everything a caller needs to know about
/// a mechanism is here, so no caller tests a mechanism's name.
pub trait NoiseMechanism: Sync + fmt::Debug {
    /// The option value naming it (`mechanism = '<name>'`).
    fn name(&self) -> &'static str;

    /// Its privacy map: the loss of releasing `noise.shape` with this calibrated noise,
    /// computed from the sampler's exact parameters (never from what was asked), in every
    /// measure it has a map for ([`privacy_map`]).
    fn loss(&self, noise: &CountNoise) -> PrivacyLoss;

    /// Whether its calibration needs a `δ` (and so a `δ` per noised value must be checked).
    fn needs_delta(&self) -> bool;

    /// The largest `ε` per noised value its calibration accepts.
    fn max_epsilon(&self) -> f64;

    /// Checks `ε` for one count of sensitivity `Δ` beyond the common range of
    /// [`check_count_epsilon`] (for example, that the noise scale stays sampled exactly).
    fn check_count_scale(&self, epsilon: f64, sensitivity: u32) -> Result<(), String>;

    /// Calibrates noise for a count of sensitivity `Δ` so that adding it is `(ε, δ)`-DP, with
    /// the exact variance and fourth cumulant of the integer law sampled. `ε` and `Δ` are
    /// already checked by [`CountNoise::calibrate`].
    fn calibrate_count(
        &self,
        epsilon: f64,
        delta: Option<f64>,
        sensitivity: u32,
        calibration: GaussianCalibration,
    ) -> Result<CountNoise, String>;

    /// The integer sensitivity a fixed-point grid (a clamped sum's) should aim for at `ε`: as fine as
    /// possible while the noise, in grid units, stays in the range its exact sampler supports.
    fn grid_sensitivity(&self, epsilon: f64) -> f64;

    /// For replays from a table of its law (`bootstrap.rs`): the radius `K`, in integers, past
    /// which the tail is below `2^-53` at the calibrated `scale`.
    fn replay_radius(&self, scale: f64) -> f64;

    /// The unnormalised probability of the integer `k` at the calibrated `scale`.
    fn replay_weight(&self, k: f64, scale: f64) -> f64;
}

impl Mechanism {
    /// Every mechanism, in the order messages list them.
    pub const ALL: [Mechanism; 2] = [Mechanism::Laplace, Mechanism::Gaussian];

    /// The mechanism's type: its calibration, sampler, variance and cost.
    pub fn law(self) -> &'static dyn NoiseMechanism {
        match self {
            Self::Laplace => &LaplaceMechanism,
            Self::Gaussian => &GaussianMechanism,
        }
    }

    pub fn parse(name: &str) -> Result<Self, String> {
        let wanted = name.trim().to_ascii_lowercase();
        if let Some(m) = Self::ALL.into_iter().find(|m| m.law().name() == wanted) {
            return Ok(m);
        }
        let names: Vec<String> = Self::ALL
            .iter()
            .map(|m| format!("'{}'", m.law().name()))
            .collect();
        Err(format!(
            "unknown mechanism '{wanted}' (expected {})",
            names.join(" or ")
        ))
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.law().name())
    }
}

/// How the Gaussian mechanism's `σ` is computed from `(ε, δ)` and the release's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GaussianCalibration {
    /// The tight analytic Gaussian mechanism (Balle & Wang 2018, Theorem 8) applied once to
    /// the whole release at its L2 sensitivity `k·√m` ([`ReleaseShape`]; the vector's exact
    /// discrete `δ`, [`gaussian::vector_delta`]). For a single value, the same as
    /// [`Self::PerCell`].
    #[default]
    Analytic,
    /// The paper's calibration: each of the `m` values a unit can move gets the analytic
    /// Gaussian for `(ε/m, δ/m)` at sensitivity `k` (basic composition).
    PerCell,
    /// `σ² = 2 ln(1.25/δ) Δ² / ε²` per value, valid only for `ε < 1` (Dwork & Roth 2014,
    /// Theorem A.1), split as [`Self::PerCell`].
    Classic,
}

impl GaussianCalibration {
    pub fn parse(name: &str) -> Result<Self, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "analytic" => Ok(Self::Analytic),
            "per_cell" => Ok(Self::PerCell),
            "classic" => Ok(Self::Classic),
            other => Err(format!(
                "unknown Gaussian calibration '{other}' (expected 'analytic', 'per_cell' or 'classic')"
            )),
        }
    }
}

impl fmt::Display for GaussianCalibration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Analytic => "analytic",
            Self::PerCell => "per_cell",
            Self::Classic => "classic",
        })
    }
}

/// The largest noise scale sampled: the discrete Laplace parameter `b = Δ/ε` of any noised
/// count (and [`RealLaplace`]'s `Δ/ε`), `2^40 ≈ 1.1e12`.
///
/// Why this bound (issue 27): at `ε = 2^-70` (an exact rational the sampler accepted; `1e-300`
/// only failed because its rational was too long) the scale was `2^70`, the discrete Laplace
/// draw was clamped to `±i64::MAX`, and `count + noise` was `count − i64::MAX` (or wrapped),
/// which carries the exact count. A draw of scale `b` exceeds `k` in absolute value with
/// probability `2q^(k+1)/(1+q) < 2·exp(−k/b)`, `q = e^(−1/b)` (Canonne, Kamath & Steinke 2020,
/// the discrete Laplace law). At `b ≤ 2^40` and `k = 2^52`: below `2·exp(−2^12) < 2^-5900`. So
/// a count below `2^62` (no table has that many rows) plus up to four such draws (a 2x2 table's
/// noisy group sizes add two) stays inside `±(2^62 + 4·2^52)`, within `i64`, except with
/// probability below `2^-5897`, far below the `2^-64` at which a failure would be a meaningful
/// `δ`; the additions are checked regardless ([`add_noise`]): an overflow is an error, never a
/// wrap. The bound also keeps the f64 formulas of the noise's variance and fourth cumulant
/// (`q = e^(−1/b)`) accurate to `2^-13`, and the exact sampler's integers
/// (`t = den(ε)·Δ < 2^125`) within `u128`. Any larger `b` is refused: its counts would be pure
/// noise anyway (a standard deviation above `1.5e12`).
pub const MAX_NOISE_SCALE: f64 = 1_099_511_627_776.0;

/// The largest epsilon per noised value, `2^40`: beyond it a Laplace count is exact except
/// with probability below `e^-(2^40)`, and the privacy accountant's amounts
/// ([`crate::sql::accounting::amount`]) stay far within `u128` (`2^40` is `1.1e24` of its
/// units). The Gaussian mechanism stops earlier, at [`MAX_GAUSSIAN_EPSILON`].
pub const MAX_EPSILON: f64 = 1_099_511_627_776.0;

/// A number for messages: Rust's shortest form in the ordinary range, scientific notation
/// outside it (`1e-300`, not three hundred zeros).
pub fn short_number(x: f64) -> String {
    if x != 0.0 && x.is_finite() && !(1e-6..1e16).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        x.to_string()
    }
}

/// Checks that the epsilon one noised count of sensitivity `Δ` is calibrated for lies in
/// `[f64::MIN_POSITIVE, MAX_EPSILON]` and passes the mechanism's own check
/// ([`NoiseMechanism::check_count_scale`]; for the discrete Laplace law, that its scale
/// `Δ/ε` is at most [`MAX_NOISE_SCALE`]). The message starts with what is wrong with that
/// epsilon, for the caller to say where it came from.
pub fn check_count_epsilon(
    mechanism: Mechanism,
    epsilon: f64,
    sensitivity: u32,
) -> Result<(), String> {
    check_epsilon_range(epsilon, " per noised count")?;
    mechanism.law().check_count_scale(epsilon, sensitivity)
}

/// Checks that `epsilon` (the epsilon one noised value is calibrated for, `what` saying so in
/// the message) lies in `[f64::MIN_POSITIVE, MAX_EPSILON]`; NaN is in no range.
fn check_epsilon_range(epsilon: f64, what: &str) -> Result<(), String> {
    if (f64::MIN_POSITIVE..=MAX_EPSILON).contains(&epsilon) {
        return Ok(());
    }
    Err(format!(
        "epsilon={}{what} is outside the supported range [{:e}, 2^40 = {MAX_EPSILON:e}]",
        short_number(epsilon),
        f64::MIN_POSITIVE
    ))
}

/// `count + noise` for a released count, in checked integer arithmetic: an error, never a
/// wrap or a saturation, when the count does not fit `i64` or the sum leaves it (at the
/// scales [`MAX_NOISE_SCALE`] allows, with probability below `2^-5900`).
pub fn add_noise(count: u64, noise: i64) -> Result<i64, String> {
    i64::try_from(count)
        .ok()
        .and_then(|count| count.checked_add(noise))
        .ok_or_else(|| "a noisy count left the range of a 64-bit integer".to_string())
}

fn check_epsilon(epsilon: f64) -> Result<(), String> {
    if epsilon.is_finite() && epsilon > 0.0 {
        Ok(())
    } else {
        Err(format!(
            "epsilon must be a finite number > 0, got {}",
            short_number(epsilon)
        ))
    }
}

fn check_delta(delta: f64) -> Result<(), String> {
    if delta.is_finite() && delta > 0.0 && delta < 1.0 {
        Ok(())
    } else {
        Err(format!(
            "delta must be in (0, 1), got {}",
            short_number(delta)
        ))
    }
}

/// The integer noise law actually sampled, one variant per mechanism.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Sampler {
    /// `P(k) ∝ exp(-|k| s / t)`.
    DiscreteLaplace { s: u128, t: u128 },
    /// `N_Z(0, σ²)` with the exact rational `σ²` sampled (its constants computed once, here).
    DiscreteGaussian(DiscreteGaussian),
}

/// A calibrated integer-noise mechanism: one independent draw for each value of a release of
/// shape [`Self::shape`] (each value of sensitivity `Δ`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CountNoise {
    pub mechanism: Mechanism,
    /// Privacy parameters this noise was calibrated for, for the whole release of [`Self::shape`].
    pub epsilon: f64,
    pub delta: f64,
    /// What one unit can move: `m` values by at most `Δ` ([`Self::sensitivity`]) each.
    pub shape: ReleaseShape,
    /// The continuous parameter: Laplace scale `b = Δ/ε`, or the Gaussian `σ` actually sampled.
    pub scale: f64,
    /// The exact variance of the integer noise added.
    pub variance: f64,
    /// Its fourth cumulant `κ₄`, which sets the noise's share of a score statistic's skewness
    /// (docs/intervals.md §2, "Skewness"): `2q(1 + 4q + q²)/(1 − q)⁴` for the discrete Laplace
    /// law (`≈ 3·variance²`, the continuous Laplace's), 0 for the discrete Gaussian.
    pub fourth_cumulant: f64,
    sampler: Sampler,
}

impl CountNoise {
    /// Calibrates `mechanism` so that adding its noise to a count of sensitivity `Δ` is
    /// `(ε, δ)`-DP (`δ` is ignored and reported as 0 for Laplace): the common checks, then
    /// the mechanism's own [`NoiseMechanism::calibrate_count`].
    pub fn calibrate(
        mechanism: Mechanism,
        epsilon: f64,
        delta: Option<f64>,
        sensitivity: u32,
        calibration: GaussianCalibration,
    ) -> Result<Self, String> {
        check_epsilon(epsilon)?;
        if sensitivity == 0 {
            return Err("sensitivity must be at least 1".into());
        }
        check_count_epsilon(mechanism, epsilon, sensitivity)?;
        mechanism
            .law()
            .calibrate_count(epsilon, delta, sensitivity, calibration)
    }

    /// `Δ`, the most one unit moves each value of the release by.
    pub fn sensitivity(&self) -> u32 {
        self.shape.sensitivity
    }

    /// The mechanism's type ([`Mechanism::law`]).
    pub fn law(&self) -> &'static dyn NoiseMechanism {
        self.mechanism.law()
    }

    /// Calibrates `mechanism` for a whole release of `shape` at `(ε, δ)`: Laplace, and the
    /// Gaussian's [`GaussianCalibration::PerCell`] and [`GaussianCalibration::Classic`], split
    /// `(ε, δ)` evenly over the `m` values a unit can move (basic composition, the L1 split,
    /// already tight for Laplace); the analytic Gaussian calibrates once for the vector
    /// ([`gaussian::calibrate_vector`]). With `m = 1` every calibration is
    /// [`Self::calibrate`]'s.
    pub fn calibrate_release(
        mechanism: Mechanism,
        epsilon: f64,
        delta: Option<f64>,
        shape: ReleaseShape,
        calibration: GaussianCalibration,
    ) -> Result<Self, String> {
        let m = shape.coordinates;
        if m == 0 {
            return Err("a release moves at least one value".into());
        }
        check_epsilon(epsilon)?;
        let per_value = |e: f64| e / m as f64;
        let mut noise = if m > 1
            && mechanism == Mechanism::Gaussian
            && calibration == GaussianCalibration::Analytic
        {
            check_count_epsilon(mechanism, per_value(epsilon), shape.sensitivity)?;
            gaussian::calibrate_vector(epsilon, delta, shape)?
        } else {
            Self::calibrate(
                mechanism,
                per_value(epsilon),
                delta.map(per_value),
                shape.sensitivity,
                calibration,
            )?
        };
        noise.epsilon = epsilon;
        noise.delta = if mechanism.law().needs_delta() {
            delta.unwrap_or(0.0)
        } else {
            0.0
        };
        noise.shape = shape;
        Ok(noise)
    }

    /// The privacy loss of this noise's release ([`NoiseMechanism::loss`]): what the
    /// accountant charges.
    pub fn loss(&self) -> PrivacyLoss {
        self.law().loss(self)
    }

    /// One noise draw.
    pub fn sample<R: RngCore + ?Sized>(&self, rng: &mut R) -> i64 {
        match self.sampler {
            Sampler::DiscreteLaplace { s, t } => laplace::sample(rng, s, t),
            Sampler::DiscreteGaussian(gaussian) => gaussian.sample(rng),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::gaussian::*;
    use super::*;
    use crate::stats::sampler::discrete_laplace;
    use rand::SeedableRng;

    fn calibrated(m: Mechanism, eps: f64, delta: f64, shape: ReleaseShape) -> CountNoise {
        CountNoise::calibrate_release(m, eps, Some(delta), shape, Default::default()).unwrap()
    }

    #[test]
    fn each_mechanism_states_its_cost_from_its_noise() {
        // Laplace: ε read off the sampler's rational, at any shape; no δ; ρ = m·(ε/m)²/2.
        for (eps, shape) in [
            (0.5, ReleaseShape::scalar(1)),
            (0.1, ReleaseShape::new(2, 3)),
            (1.0, ReleaseShape::new(8, 1)),
        ] {
            let loss = calibrated(Mechanism::Laplace, eps, 1e-6, shape).loss();
            let m = shape.coordinates as f64;
            assert_eq!((loss.epsilon, loss.delta), (eps, 0.0), "{shape:?}");
            assert_eq!(loss.rho, Some(m * (eps / m).powi(2) / 2.0));
        }
        // Gaussian: δ recomputed from σ² at the ε asked for, never above the target and
        // within the dyadic rounding of it; ρ = mΔ²/2σ².
        for shape in [
            ReleaseShape::scalar(1),
            ReleaseShape::new(2, 1),
            ReleaseShape::new(6, 2),
        ] {
            let noise = calibrated(Mechanism::Gaussian, 1.0, 1e-6, shape);
            let loss = noise.loss();
            assert_eq!(loss.epsilon, 1.0);
            assert!(
                loss.delta <= 1e-6 && loss.delta > 0.9e-6,
                "{shape:?}: {}",
                loss.delta
            );
            let rho = shape.l2_squared() / (2.0 * noise.scale * noise.scale);
            assert!((loss.rho.unwrap() / rho - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn a_planted_calibration_bug_shows_in_the_charge() {
        // The same release with σ/√2 (σ² halved): the map reads the noise, so the charge
        // moves: δ far above the target, ρ doubled.
        let shape = ReleaseShape::new(2, 1);
        let good = calibrated(Mechanism::Gaussian, 1.0, 1e-6, shape);
        let Sampler::DiscreteGaussian(law) = good.sampler else {
            unreachable!()
        };
        let mut half = law.sigma2();
        half.den *= 2;
        let bad = CountNoise {
            sampler: Sampler::DiscreteGaussian(
                crate::stats::sampler::DiscreteGaussian::new(half).unwrap(),
            ),
            ..good
        };
        let (g, b) = (good.loss(), bad.loss());
        assert!(b.delta > 100.0 * g.delta, "{} vs {}", b.delta, g.delta);
        assert!((b.rho.unwrap() / g.rho.unwrap() - 2.0).abs() < 1e-12);
        // Laplace with half the scale: twice the ε.
        let good = calibrated(Mechanism::Laplace, 1.0, 1e-6, shape);
        let Sampler::DiscreteLaplace { s, t } = good.sampler else {
            unreachable!()
        };
        let bad = CountNoise {
            sampler: Sampler::DiscreteLaplace { s: 2 * s, t },
            ..good
        };
        assert_eq!(bad.loss().epsilon, 2.0 * good.loss().epsilon);
    }

    #[test]
    fn vector_calibration_needs_about_half_the_variance_of_per_cell() {
        // The figures: grouped Gaussian count at ε = 1, δ = 1e-4, L2 sensitivity √2.
        // Per cell (ε/2, δ/2) at sensitivity 1: σ² ≈ 39.06 continuous (39.25 measured through
        // SQL); one vector: 20.30 for the continuous analytic Gaussian (Balle & Wang 2018 at
        // Δ = √2, computed independently in docs/privacy-analysis.md); the discrete law's
        // exact δ and the dyadic grid keep it within 1% of that.
        let shape = ReleaseShape::new(2, 1);
        let vector = calibrated(Mechanism::Gaussian, 1.0, 1e-4, shape);
        let per_cell = CountNoise::calibrate_release(
            Mechanism::Gaussian,
            1.0,
            Some(1e-4),
            shape,
            GaussianCalibration::PerCell,
        )
        .unwrap();
        assert!(
            vector.variance < 20.3 * 1.01 && vector.variance > 20.3 * 0.97,
            "{}",
            vector.variance
        );
        assert!(
            (per_cell.variance / 39.06 - 1.0).abs() < 0.01,
            "{}",
            per_cell.variance
        );
        // Per cell is the old calibration exactly.
        let old = CountNoise::calibrate(
            Mechanism::Gaussian,
            0.5,
            Some(5e-5),
            1,
            GaussianCalibration::Analytic,
        )
        .unwrap();
        assert_eq!(per_cell.sampler, old.sampler);
        // A single value: every calibration is the scalar one.
        let one = calibrated(Mechanism::Gaussian, 0.7, 1e-5, ReleaseShape::scalar(3));
        let scalar = CountNoise::calibrate(
            Mechanism::Gaussian,
            0.7,
            Some(1e-5),
            3,
            GaussianCalibration::Analytic,
        )
        .unwrap();
        assert_eq!(one.sampler, scalar.sampler);
        // Many values: the zCDP route, still far below per cell (ε/8 per value).
        let shape = ReleaseShape::new(8, 1);
        let vector = calibrated(Mechanism::Gaussian, 1.0, 1e-4, shape);
        let per_cell = CountNoise::calibrate_release(
            Mechanism::Gaussian,
            1.0,
            Some(1e-4),
            shape,
            GaussianCalibration::PerCell,
        )
        .unwrap();
        assert!(
            vector.variance < 0.5 * per_cell.variance,
            "{} vs {}",
            vector.variance,
            per_cell.variance
        );
        assert!(vector.loss().delta <= 1e-4);
    }

    #[test]
    fn a_spread_shape_is_charged_by_its_l2_norm_alone() {
        // A unit's 2 rows in one table can move four cells by 1 each: no single shift of two
        // values by 2, so the exact two-value δ does not bound it. Its δ is the zCDP
        // conversion's, for the calibration and for the charge.
        let shape = ReleaseShape::new(2, 2);
        let exact = calibrated(Mechanism::Gaussian, 1.0, 1e-6, shape);
        let spread = calibrated(Mechanism::Gaussian, 1.0, 1e-6, shape.spread());
        let loss = spread.loss();
        let rho = shape.l2_squared() / (2.0 * spread.scale * spread.scale);
        // σ² read back through `scale²`: equal to the sampled σ² to a few ulps.
        let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-9;
        assert!(close(loss.delta, cdp_delta(rho, 1.0)), "{}", loss.delta);
        assert!(loss.delta <= 1e-6, "{}", loss.delta);
        assert!(
            spread.variance > exact.variance,
            "{} vs {}",
            spread.variance,
            exact.variance
        );
        // The paper's per-cell calibration of the same table is charged the conversion's δ of
        // its own σ², not the composition over two cells it assumed.
        let per_cell = CountNoise::calibrate_release(
            Mechanism::Gaussian,
            1.0,
            Some(1e-6),
            shape.spread(),
            GaussianCalibration::PerCell,
        )
        .unwrap();
        let rho = shape.l2_squared() / (2.0 * per_cell.scale * per_cell.scale);
        assert!(close(per_cell.loss().delta, cdp_delta(rho, 1.0)));
        assert!(close(per_cell.loss().rho.unwrap(), rho));
        // Laplace's ε is the L1 norm over its scale, spread or not.
        let laplace = calibrated(Mechanism::Laplace, 1.0, 1e-6, shape.spread());
        assert_eq!(laplace.loss().epsilon, 1.0);
    }

    #[test]
    fn the_vector_delta_of_two_values_matches_a_direct_sum() {
        // δ = Σ_y max(0, P(y) − e^ε P'(y)) over the joint law of two draws, summed directly
        // over the grid (the definition, independent of the tail sums), at shift (1, 1).
        let sigma2: f64 = 3.0;
        let r = 40i64;
        let w = |k: i64| (-(k * k) as f64 / (2.0 * sigma2)).exp();
        let z: f64 = (-r..=r).map(w).sum();
        for eps in [0.3f64, 1.0, 2.0] {
            let mut direct = 0.0;
            for a in -r..=r {
                for b in -r..=r {
                    let p = w(a) * w(b) / (z * z);
                    let q = w(a - 1) * w(b - 1) / (z * z);
                    direct += (p - eps.exp() * q).max(0.0);
                }
            }
            let fast = gaussian::vector_delta(sigma2, eps, ReleaseShape::new(2, 1));
            // Both are sums of thousands of doubles: equal to 1e-12 relative.
            assert!(
                (fast - direct).abs() < 1e-12 * direct,
                "{eps}: {fast} vs {direct}"
            );
        }
    }

    #[test]
    fn each_mechanism_is_parsed_from_its_own_name_and_states_its_properties() {
        for m in Mechanism::ALL {
            assert_eq!(Mechanism::parse(m.law().name()), Ok(m));
            assert_eq!(m.to_string(), m.law().name());
            let noise = CountNoise::calibrate(m, 1.0, Some(1e-6), 1, Default::default()).unwrap();
            assert_eq!(noise.mechanism, m);
            // A mechanism that needs no delta spends none.
            assert_eq!(m.law().needs_delta(), noise.loss().delta > 0.0);
            assert!(m.law().max_epsilon() <= MAX_EPSILON);
        }
        assert_eq!(Mechanism::parse(" Gaussian "), Ok(Mechanism::Gaussian));
        assert_eq!(
            Mechanism::parse("x").unwrap_err(),
            "unknown mechanism 'x' (expected 'laplace' or 'gaussian')"
        );
    }

    fn below(x: f64) -> f64 {
        f64::from_bits(x.to_bits() - 1)
    }

    fn above(x: f64) -> f64 {
        f64::from_bits(x.to_bits() + 1)
    }

    /// Values no calibration accepts as an epsilon: zero, negative, subnormal, NaN, infinite,
    /// above the range.
    fn bad_epsilons() -> [f64; 10] {
        [
            0.0,
            -0.0,
            -1.0,
            f64::from_bits(1),
            below(f64::MIN_POSITIVE),
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            above(MAX_EPSILON),
            f64::MAX,
        ]
    }

    #[test]
    fn the_laplace_scale_limit_is_exact_at_its_edge() {
        // The limit itself (scale exactly 2^40) is accepted, the next double below refused,
        // at several sensitivities; the refusal says why and where the limit is.
        for d in [1u32, 2, 3, 1000, u32::MAX] {
            let limit = d as f64 / MAX_NOISE_SCALE;
            for ok in [limit, above(limit), 2.0 * limit] {
                check_count_epsilon(Mechanism::Laplace, ok, d).unwrap();
                let noise =
                    CountNoise::calibrate(Mechanism::Laplace, ok, None, d, Default::default())
                        .unwrap();
                assert!(noise.scale <= MAX_NOISE_SCALE, "{d}: {}", noise.scale);
            }
            let err = check_count_epsilon(Mechanism::Laplace, below(limit), d).unwrap_err();
            assert!(
                err.contains("above the largest supported 2^40")
                    && err.contains(&format!("(sensitivity {d})")),
                "{err}"
            );
            assert!(CountNoise::calibrate(
                Mechanism::Laplace,
                below(limit),
                None,
                d,
                Default::default()
            )
            .is_err());
        }
        // The red team's values: 1e-300 (refused before as a rational too small to sample, now
        // for its scale) and 2^-70, which the old sampler took and drew ±i64::MAX.
        for epsilon in [1e-300, 2f64.powi(-70), 2f64.powi(-50), 1e-13] {
            let err =
                CountNoise::calibrate(Mechanism::Laplace, epsilon, None, 1, Default::default())
                    .unwrap_err();
            assert!(err.contains("gives noise scale"), "{epsilon}: {err}");
        }
    }

    #[test]
    fn epsilons_outside_the_range_are_refused_by_every_calibration() {
        for epsilon in bad_epsilons() {
            for mechanism in [Mechanism::Laplace, Mechanism::Gaussian] {
                assert!(
                    check_count_epsilon(mechanism, epsilon, 1).is_err(),
                    "{mechanism} {epsilon}"
                );
                assert!(
                    CountNoise::calibrate(mechanism, epsilon, Some(1e-5), 1, Default::default())
                        .is_err(),
                    "{mechanism} {epsilon}"
                );
            }
            assert!(RealLaplace::calibrate(epsilon, 1.0).is_err(), "{epsilon}");
        }
        // The ends of the range.
        let top =
            CountNoise::calibrate(Mechanism::Laplace, MAX_EPSILON, None, 1, Default::default())
                .unwrap();
        assert_eq!(top.variance, 0.0);
        RealLaplace::calibrate(MAX_EPSILON, 1.0).unwrap();
        // The Gaussian mechanism's σ stays bounded as ε → 0 (by δ alone): the smallest normal
        // epsilon is answered with σ ≈ 0.4/δ, within MAX_GAUSSIAN_SIGMA.
        let gaussian = CountNoise::calibrate(
            Mechanism::Gaussian,
            f64::MIN_POSITIVE,
            Some(1e-5),
            1,
            Default::default(),
        )
        .unwrap();
        assert!(
            gaussian.scale > 39_000.0 && gaussian.scale < MAX_GAUSSIAN_SIGMA,
            "{}",
            gaussian.scale
        );
    }

    #[test]
    fn real_laplace_refuses_scales_past_the_limit() {
        // Δ/ε alone, and the scale actually sampled, (Δ + g)/ε on the grid g: at ε = 2^-40
        // the grid is 2^10 and the scale 1025·2^40.
        let limit = 1.0 / MAX_NOISE_SCALE;
        for epsilon in [below(limit), limit, 2f64.powi(-35)] {
            let err = RealLaplace::calibrate(epsilon, 1.0).unwrap_err();
            assert!(err.contains("above the largest supported 2^40"), "{err}");
        }
        // At ε = 2^-k the grid is 2^(k-30) and the scale (1 + 2^(k-30))·2^k: 33·2^35 > 2^40 is
        // refused, 17·2^34 ≈ 2^38.1 accepted.
        let noise = RealLaplace::calibrate(2f64.powi(-34), 1.0).unwrap();
        assert!(noise.scale() <= MAX_NOISE_SCALE && noise.scale() > 2f64.powi(38));
        // The public grid bound counts too (smooth sensitivity's grid follows it).
        assert!(RealLaplace::calibrate_on_public_grid(1e-3, 1.0, 1e10).is_err());
        assert!(RealLaplace::calibrate_on_public_grid(1e-3, 1.0, 1e9).is_ok());
        // A release at the limit stays a finite multiple of the grid near the value.
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        for _ in 0..100 {
            let v = noise.release(0.5, &mut rng).unwrap();
            assert!(v.is_finite() && v.abs() < 60.0 * MAX_NOISE_SCALE, "{v}");
        }
    }

    #[test]
    fn noise_meets_counts_in_checked_arithmetic() {
        assert_eq!(add_noise(5, -3), Ok(2));
        assert_eq!(add_noise(0, i64::MAX), Ok(i64::MAX));
        assert_eq!(add_noise(i64::MAX as u64, 0), Ok(i64::MAX));
        for (count, noise) in [
            (1, i64::MAX),
            (i64::MAX as u64, 1),
            (i64::MAX as u64 + 1, 0),
            (u64::MAX, i64::MIN),
        ] {
            let err = add_noise(count, noise).unwrap_err();
            assert!(err.contains("64-bit"), "{err}");
        }
        // What the old arithmetic did with a clamped draw: at scale 2^70 (ε = 2^-70, which
        // the old calibration accepted) the sampler returns ±i64::MAX almost always, and
        // `count + noise` carried the count exactly (`count − i64::MAX`, or a wrap to
        // `count + i64::MIN + ...`). Checked, both signs are errors or far from any count,
        // and the calibration refuses that scale in the first place.
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        let draws: Vec<i64> = (0..64)
            .map(|_| discrete_laplace(&mut rng, 1, 1 << 70))
            .collect();
        assert!(
            draws.iter().all(|d| d.unsigned_abs() == i64::MAX as u64),
            "{draws:?}"
        );
        for &draw in &draws {
            let old = (17u64 as i64).wrapping_add(draw);
            assert_eq!(old.wrapping_sub(draw), 17, "the old sum carried the count");
            if draw > 0 {
                assert!(add_noise(17, draw).is_err());
            }
        }
    }

    #[test]
    fn draws_at_the_largest_scale_stay_far_inside_i64() {
        // At scale 2^40, |X| > 2^52 has probability below 2·e^-4096; 2,000 draws have mean
        // |X| ≈ 2^40 and none is anywhere near 2^52.
        let noise = CountNoise::calibrate(
            Mechanism::Laplace,
            1.0 / MAX_NOISE_SCALE,
            None,
            1,
            Default::default(),
        )
        .unwrap();
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(5);
        let draws: Vec<i64> = (0..2000).map(|_| noise.sample(&mut rng)).collect();
        assert!(draws.iter().all(|d| d.unsigned_abs() < 1 << 52));
        let mean = draws.iter().map(|d| d.unsigned_abs() as f64).sum::<f64>() / 2000.0;
        // E|X| ≈ b; sd of the mean ≈ b/√2000 ≈ 0.022·b: 5 sd.
        assert!((mean / MAX_NOISE_SCALE - 1.0).abs() < 0.12, "{mean:e}");
        // A whole table at that scale: the sums of noisy cells are checked too.
        let table = crate::stats::TableNoise::calibrate(
            Mechanism::Laplace,
            2.0 / MAX_NOISE_SCALE,
            None,
            Default::default(),
            crate::stats::GroupSizes::Private,
        )
        .unwrap();
        let released = table
            .release(
                &crate::stats::TwoByTwo {
                    a: 1,
                    b: 2,
                    c: 3,
                    d: 4,
                },
                &mut rng,
            )
            .unwrap();
        assert!(released.exposed_total.unsigned_abs() < 1 << 53);
        // Counts that do not fit i64 are an error, never a wrap.
        let huge = crate::stats::TwoByTwo {
            a: u64::MAX,
            b: 0,
            c: 0,
            d: 0,
        };
        assert!(table.release(&huge, &mut rng).is_err());
    }

    #[test]
    fn gaussian_calibration_refuses_an_epsilon_whose_condition_overflows() {
        // At 700 the calibration still works (σ well above its floor of 1e-6·Δ); past e^709.78
        // it returned that floor.
        let sigma = analytic_gaussian_sigma(MAX_GAUSSIAN_EPSILON, 1e-6, 1.0).unwrap();
        assert!(sigma > 1e-3, "{sigma}");
        assert!(analytic_gaussian_sigma(710.0, 1e-6, 1.0).is_err());
    }

    #[test]
    fn analytic_sigma_meets_balle_wang_with_equality() {
        for (eps, delta) in [
            (0.25, 5e-5),
            (0.5, 1e-4),
            (1.0, 1e-6),
            (3.0, 1e-3),
            (0.05, 1e-9),
        ] {
            let sigma = analytic_gaussian_sigma(eps, delta, 1.0).unwrap();
            let achieved = gaussian_delta(sigma, eps, 1.0);
            assert!(achieved <= delta, "{eps} {delta}: {achieved}");
            assert!(
                (achieved - delta).abs() <= 1e-9,
                "{eps} {delta}: {achieved}"
            );
            // Tighter than the classic bound wherever that one applies.
            if eps < 1.0 {
                assert!(sigma < classic_gaussian_sigma(eps, delta, 1.0).unwrap());
            }
        }
    }

    #[test]
    fn sensitivity_scales_sigma_linearly() {
        let s1 = analytic_gaussian_sigma(0.7, 1e-5, 1.0).unwrap();
        let s2 = analytic_gaussian_sigma(0.7, 1e-5, 2.0).unwrap();
        assert!((s2 / s1 - 2.0).abs() < 1e-9);
    }

    #[test]
    fn calibration_errors_are_clear() {
        let err = CountNoise::calibrate(Mechanism::Gaussian, 1.0, None, 1, Default::default())
            .unwrap_err();
        assert!(err.contains("delta"), "{err}");
        assert!(
            CountNoise::calibrate(Mechanism::Laplace, 0.0, None, 1, Default::default()).is_err()
        );
        assert!(classic_gaussian_sigma(1.5, 1e-5, 1.0).is_err());
        // Extreme parameters print short: `1e-300`, not three hundred digits.
        let err = CountNoise::calibrate_release(
            Mechanism::Gaussian,
            5e-7,
            Some(1e-300),
            ReleaseShape::new(2, 1),
            Default::default(),
        )
        .unwrap_err();
        assert!(err.contains("epsilon=5e-7, delta=1e-300 needs"), "{err}");
    }

    #[test]
    fn dual_series_and_short_tails_match_the_direct_sums() {
        // The Poisson-summation forms of the normalising constant and the variance, and the
        // tails summed over 12σ + 2 terms, against the direct sums over 40σ terms (the
        // former code), relative 1e-12, across the switch at σ² = 1 and up to σ = 300.
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1e-300);
        for sigma in [0.3, 0.8, 1.0, 1.01, 1.7, 3.0, 12.5, 40.0, 300.0] {
            let s2: f64 = sigma * sigma;
            let total = summed_total(s2);
            assert!(close(discrete_gaussian_total(s2), total), "{sigma}");
            let variance = summed_variance(s2);
            assert!(close(discrete_gaussian_variance(s2), variance), "{sigma}");
            assert!(
                discrete_gaussian_variance(s2) <= s2 * (1.0 + 1e-15),
                "{sigma}"
            );
            for k in [
                1.0,
                (0.5 * sigma).ceil(),
                (3.0 * sigma).ceil(),
                (8.0 * sigma).ceil(),
            ] {
                let tail = discrete_gaussian_weights(s2)
                    .filter(|(j, _)| *j >= k)
                    .map(|(_, w)| w)
                    .sum::<f64>()
                    / total;
                assert!(
                    close(discrete_gaussian_tail(s2, total, k), tail),
                    "{sigma} {k}"
                );
            }
        }
    }

    #[test]
    fn discrete_gaussian_delta_is_within_target() {
        for (eps, delta) in [(0.5, 5e-5), (1.0, 1e-6), (0.1, 1e-5)] {
            let noise =
                CountNoise::calibrate(Mechanism::Gaussian, eps, Some(delta), 1, Default::default())
                    .unwrap();
            let achieved = discrete_gaussian_delta(noise.scale.powi(2), eps, 1);
            assert!(achieved <= delta, "{achieved} > {delta}");
            let continuous = analytic_gaussian_sigma(eps, delta, 1.0).unwrap();
            // The discrete mechanism needs no more than a sliver of extra noise.
            assert!(noise.scale >= continuous && noise.scale < continuous * 1.01);
        }
    }

    #[test]
    fn laplace_variance_formula_is_the_discrete_one() {
        let noise =
            CountNoise::calibrate(Mechanism::Laplace, 1.0, None, 2, Default::default()).unwrap();
        assert_eq!(noise.scale, 2.0);
        let q = (-0.5f64).exp();
        assert!((noise.variance - 2.0 * q / (1.0 - q).powi(2)).abs() < 1e-12);
        // Within 1/6 of the continuous 2b² = 8.
        assert!((8.0 - noise.variance - 1.0 / 6.0).abs() < 0.01);
        // κ₄ against the pmf P(k) ∝ q^|k| summed directly (3·8² = 192 for the continuous law).
        let (mut total, mut second, mut fourth) = (0.0, 0.0, 0.0);
        for k in -400i32..=400 {
            let (w, k) = (q.powi(k.abs()), k as f64);
            (total, second, fourth) = (total + w, second + k * k * w, fourth + k.powi(4) * w);
        }
        let kappa4 = fourth / total - 3.0 * (second / total).powi(2);
        assert!((noise.fourth_cumulant / kappa4 - 1.0).abs() < 1e-10);
        assert!((noise.fourth_cumulant / 192.0 - 1.0).abs() < 0.1);
    }

    #[test]
    fn discrete_gaussian_fourth_cumulant_vanishes_from_unit_variance() {
        // Below σ² = 1 the lattice shows: at σ² = 0.25 the law is 0 with probability 0.79 and
        // ±1 otherwise, heavy-tailed for its variance (κ₄ > 0); from σ² = 1 on κ₄ is 0.
        let small = discrete_gaussian_fourth_cumulant(0.25);
        // P(k) ∝ exp(−2k²): k = ±1, ±2, ±3 (±4 adds 2·4⁴·e^-32/1.27 ≈ 5e-12).
        let w = |k: i32| (-2.0 * f64::from(k * k)).exp();
        let total = 1.0 + 2.0 * (w(1) + w(2) + w(3));
        let var = 2.0 * (w(1) + 4.0 * w(2) + 9.0 * w(3)) / total;
        let fourth = 2.0 * (w(1) + 16.0 * w(2) + 81.0 * w(3)) / total;
        assert!(
            (small - (fourth - 3.0 * var * var)).abs() < 1e-10,
            "{small}"
        );
        assert!(small > 0.0);
        assert_eq!(discrete_gaussian_fourth_cumulant(1.0), 0.0);
        let summed = {
            let s2 = 1.0;
            let fourth = 2.0
                * discrete_gaussian_weights(s2)
                    .map(|(k, w)| k.powi(4) * w)
                    .sum::<f64>()
                / summed_total(s2);
            fourth - 3.0 * summed_variance(s2).powi(2)
        };
        // 8.3e-6 (of 3σ⁴ = 3) at σ² = 1, the largest where κ₄ is read as 0.
        assert!(summed.abs() < 1e-5, "{summed}");
    }
}
