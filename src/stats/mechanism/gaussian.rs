//! The discrete Gaussian mechanism: `N_Z(0, σ²)` added to an integer of sensitivity `Δ`,
//! `σ` from the analytic Gaussian mechanism (Balle & Wang 2018, arXiv:1805.06530, Theorem 8;
//! paper, Theorem Gaus_mec_balle) or the classic bound (Dwork & Roth 2014, Theorem A.1), then
//! raised until the exact `δ` of the *discrete* law at the `σ²` sampled is within target
//! (Canonne, Kamath & Steinke 2020, arXiv:2004.00010, Theorem 7). `(ε, δ)`-DP.

use super::search::least_passing_index;
use super::{
    cdp_delta, check_delta, check_epsilon, rho_for, short_number, CountNoise, GaussianCalibration,
    Mechanism, NoiseMechanism, PrivacyLoss, ReleaseShape, Sampler,
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
            "epsilon={} per noised value is above {MAX_GAUSSIAN_EPSILON}, where the Gaussian \
             mechanism's calibration overflows; use a smaller epsilon or mechanism=laplace",
            short_number(epsilon)
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
                "no Gaussian noise level reaches epsilon={}, delta={}",
                short_number(epsilon),
                short_number(delta)
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
            "the classic Gaussian bound needs epsilon < 1 per count, got {}; use the analytic calibration",
            short_number(epsilon)
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

/// The exact `δ(ε)` of adding independent `N_Z(0, σ²)` noise to each value of a release of
/// `shape` (`m` values a unit moves by at most `Δ` each), for `m ≤ 2`; above, the zCDP
/// conversion of its `ρ = mΔ²/(2σ²)` ([`cdp_delta`], CKS 2020 Corollary 13), an upper bound.
///
/// Why the all-`Δ` shift is the worst case: for one coordinate the likelihood ratio of
/// `N_Z(0, σ²)` against `N_Z(a, σ²)` is monotone in the output, so the Neyman–Pearson tests
/// are the same threshold tests for every shift `a > 0`, and their power grows with `a`: the
/// trade-off function of shift `a` is at least that of shift `Δ ≥ a` (and a zero shift is
/// the identity). Trade-off functions of product laws are monotone in each factor (Dong,
/// Roth & Su 2019, arXiv:1905.02383, Lemma C.1/Theorem 4), so a unit that moves fewer
/// values, or by less, is no worse than one moving `m` values by `Δ`; signs do not matter by
/// symmetry. For that shift the privacy loss is `(mΔ² − 2Δ·T)/(2σ²)` with `T` the sum of the
/// `m` noise draws, so, as in CKS 2020 Theorem 7 (`m = 1`),
/// `δ = P[T > σ²ε/Δ − mΔ/2] − e^ε·P[T > σ²ε/Δ + mΔ/2]`, read here off the exact law of `T`
/// (a convolution of two discrete Gaussians for `m = 2`).
///
/// A [`ReleaseShape::spread`] shape is not that case (its moves are not dominated by one
/// shift of `m` values by `Δ`): for it, and for `m > 2`, the zCDP conversion, which holds for
/// every shift of L2 norm at most `Δ·√m`.
pub fn vector_delta(sigma2: f64, epsilon: f64, shape: ReleaseShape) -> f64 {
    let d = shape.sensitivity as f64;
    match (shape.coordinates, shape.spread) {
        (1, false) => discrete_gaussian_delta(sigma2, epsilon, shape.sensitivity),
        (2, false) => {
            let center = sigma2 * epsilon / d;
            // P(T > x) = P(T ≥ ⌊x⌋ + 1) for the integer-valued T. The truncated tails are
            // below the true ones by at most `outside`: added to the first term only, so the
            // result is never below the true δ.
            let above = |x: f64| x.floor() + 1.0;
            let ([lower, upper], outside) =
                pair_sum_tails(sigma2, [above(center - d), above(center + d)]);
            (lower + outside - epsilon.exp() * upper).clamp(0.0, 1.0)
        }
        _ => cdp_delta(shape.l2_squared() / (2.0 * sigma2), epsilon),
    }
}

/// `P[Z₁ + Z₂ ≥ u]` at each `u` of `us`, for two independent `N_Z(0, σ²)` draws both
/// truncated to `|k| ≤ L`, as `Σ_j P(Z₁ = j)·P(Z₂ ≥ u − j)` with each tail `P(Z₂ ≥ y)`
/// accumulated from the far end as `y` falls; and the mass the truncation drops, which bounds
/// how far below the true tails the results can be.
///
/// `L` is `⌈12σ⌉ + 2`, or more when a tail asked for lies further out: the dropped mass
/// `P(|Z| > L) ≤ e^(−L²/2σ²)` must stay far below `P[Z₁ + Z₂ ≥ u] ≈ e^(−u²/4σ²)`, so
/// `L² ≥ u²/2 + 144σ²` (a factor `e^-72` below), up to `40σ`, past which every weight is 0 in
/// `f64`. With `12σ` alone the dropped mass, `e^-72 ≈ 5e-32`, was above any `δ` below it: no
/// `σ` fitted, and the search grew `σ` a thousandfold before giving up (7 s and 1.1 GB of
/// planning for one statement at `δ = 1e-300`). The weights are streamed, not tabulated, so
/// nothing allocated grows with `σ`.
fn pair_sum_tails(sigma2: f64, us: [f64; 2]) -> ([f64; 2], f64) {
    let sigma = sigma2.sqrt();
    let far = us.iter().fold(0.0f64, |far, u| far.max(u.abs()));
    let reach = (far * far / 2.0 + 144.0 * sigma2).sqrt().min(40.0 * sigma);
    let radius = ((12.0 * sigma).ceil() as i64 + 2).max(reach.ceil() as i64 + 2);
    let total = discrete_gaussian_total(sigma2);
    let pmf = |k: i64| (-(k * k) as f64 / (2.0 * sigma2)).exp() / total;
    // For each u: `tails[i] = P(Z₂ ≥ next[i] + 1)` within the truncation, grown downwards.
    let (mut sums, mut tails, mut next) = ([0.0f64; 2], [0.0f64; 2], [radius; 2]);
    for j in -radius..=radius {
        let p = pmf(j);
        for i in 0..2 {
            // P(Z₂ ≥ y); below the truncation every draw counts: the whole truncated mass.
            let y = (us[i] as i64 - j).max(-radius);
            while next[i] >= y {
                tails[i] += pmf(next[i]);
                next[i] -= 1;
            }
            sums[i] += p * tails[i];
        }
    }
    // Mass outside ±radius, both tails of both draws, as a conservative allowance.
    let outside = 4.0 * discrete_gaussian_tail(sigma2, total, (radius + 1) as f64);
    (sums.map(|sum| sum.min(1.0)), outside)
}

/// The analytic Gaussian mechanism for a whole release of `shape` (`m ≥ 2`): start from the
/// continuous mechanism's `σ` at the L2 sensitivity `Δ·√m` (Balle & Wang 2018, Theorem 8;
/// for `m > 2` from the zCDP budget [`rho_for`]`(ε, δ)`, `σ² = mΔ²/2ρ`), round `σ²` up to the
/// sampler's dyadic grid, and find the smallest grid value above it (to within a relative
/// [`SIGMA2_RESOLUTION`]) whose discrete [`vector_delta`] is within `δ`. For `m > 2`, where
/// that `δ` is the zCDP conversion's bound rather than exact, the per-value calibration is computed too and whichever needs less noise
/// is kept (both are `(ε, δ)`-DP; the privacy map reports the smaller `δ` of the two
/// analyses). For `m = 2` the vector's `δ` is exact and so never above the composition bound
/// of the per-value calibration: the vector's `σ` is the smaller.
pub(super) fn calibrate_vector(
    epsilon: f64,
    delta: Option<f64>,
    shape: ReleaseShape,
) -> Result<CountNoise, String> {
    let m = shape.coordinates as f64;
    let per_value = || {
        GaussianMechanism.calibrate_count(
            epsilon / m,
            delta.map(|d| d / m),
            shape.sensitivity,
            GaussianCalibration::PerCell,
        )
    };
    let vector = vector_sigma2(epsilon, delta, shape);
    // A per-value composition bounds a spread shape's δ nowhere (more values can move).
    let compare = !shape.spread && (shape.coordinates > 2 || vector.is_err());
    match (compare.then(per_value), vector) {
        (Some(Ok(per_value)), Ok(sigma2))
            if per_value.variance <= discrete_gaussian_variance(sigma2.to_f64()) =>
        {
            Ok(per_value)
        }
        (_, Ok(sigma2)) => gaussian_noise(sigma2, epsilon, delta.unwrap_or(0.0), shape),
        // Past the vector calibration's range (an ε above 700 for the whole release), the
        // per-value one may still calibrate.
        (Some(Ok(per_value)), Err(_)) => Ok(per_value),
        // Neither calibrates: the message of the whole release, in the ε and δ asked for.
        (Some(Err(_)), Err(e)) | (None, Err(e)) => Err(e),
    }
}

/// The discrete Gaussian noise of the exact `σ²` sampled, with the law's exact variance and
/// fourth cumulant.
fn gaussian_noise(
    sigma2: Rational,
    epsilon: f64,
    delta: f64,
    shape: ReleaseShape,
) -> Result<CountNoise, String> {
    let s2 = sigma2.to_f64();
    Ok(CountNoise {
        mechanism: Mechanism::Gaussian,
        epsilon,
        delta,
        shape,
        scale: s2.sqrt(),
        variance: discrete_gaussian_variance(s2),
        fourth_cumulant: discrete_gaussian_fourth_cumulant(s2),
        sampler: Sampler::DiscreteGaussian(DiscreteGaussian::new(sigma2)?),
    })
}

/// A dyadic `σ²` (the sampler's grid) whose [`vector_delta`] is within `δ`, at most a relative
/// [`SIGMA2_RESOLUTION`] above the smallest such value.
fn vector_sigma2(
    epsilon: f64,
    delta: Option<f64>,
    shape: ReleaseShape,
) -> Result<Rational, String> {
    let delta = delta.ok_or_else(|| {
        "the gaussian mechanism needs delta (set dp.delta or pass delta=...)".to_string()
    })?;
    check_delta(delta)?;
    let m = shape.coordinates as f64;
    let d = shape.sensitivity as f64;
    let start_sigma2 = if shape.coordinates == 2 && !shape.spread {
        analytic_gaussian_sigma(epsilon, delta, d * m.sqrt())?.powi(2)
    } else {
        let rho = rho_for(epsilon, delta).ok_or_else(|| {
            format!(
                "no zCDP budget reaches epsilon={}, delta={}",
                short_number(epsilon),
                short_number(delta)
            )
        })?;
        shape.l2_squared() / (2.0 * rho)
    };
    if start_sigma2.sqrt() > MAX_GAUSSIAN_SIGMA {
        return Err(format!(
            "epsilon={}, delta={} needs Gaussian noise with sigma {:.3e} > {MAX_GAUSSIAN_SIGMA:e}; use a larger epsilon or the laplace mechanism",
            short_number(epsilon),
            short_number(delta),
            start_sigma2.sqrt()
        ));
    }
    least_fitting_sigma2(dyadic_sigma2(start_sigma2)?, |s2| {
        vector_delta(s2.to_f64(), epsilon, shape) <= delta
    })
}

/// The least grid value from `start` on for which `fits` holds (`fits` monotone), the grid
/// being `start·(1 + k·`[`SIGMA2_RESOLUTION`]`)` rounded up to the sampler's dyadic `σ²`:
/// [`least_passing_index`] over `k`. Each evaluation of the pair-sum law costs `O(σ)`; at
/// large `σ` the discrete law needs almost exactly the continuous `σ²`, so two or three
/// evaluations settle it, where bisecting down to the `f64` grid took 40-50 (1.1 s of planning
/// per statement at `σ ≈ 7e4`, an analyst's `ε = 1e-4`). At small `σ` the discrete law can
/// need far more than the continuous one (for one value, 19% more at `ε = 10.75`, `δ = 0.01`,
/// and 2.5 times at `δ = 0.99`): up to about 30 evaluations each way, each cheap there.
fn least_fitting_sigma2(
    start: Rational,
    mut fits: impl FnMut(Rational) -> bool,
) -> Result<Rational, String> {
    if fits(start) {
        return Ok(start);
    }
    let at = |k: u64| {
        within_largest_sigma(dyadic_sigma2(
            start.to_f64() * (1.0 + k as f64 * SIGMA2_RESOLUTION),
        )?)
    };
    // Up to `k = u64::MAX`, `σ²` grows `1.8e10`-fold: past the largest `σ` from any start
    // above `0.6`; a map that still never fits is refused either way.
    let k = least_passing_index(1, u64::MAX, |k| at(k).map(&mut fits))?
        .ok_or_else(|| "the discrete Gaussian's calibration found no sigma".to_string())?;
    at(k)
}

/// The per-value calibration's steps: `σ²` raised by a relative `10⁻⁶` at a time, each step
/// rounded up to the sampler's grid (`x₀ = start`, `xₙ₊₁ = ⌈xₙ·(1 + 10⁻⁶)⌉`). The first `xₙ`
/// for which `fits` holds (`fits` monotone along the steps) is found by
/// [`least_passing_index`] over `n`, each `xₙ` stepped from the largest `n` evaluated below
/// it (the last that failed): `O(log n)` evaluations of the map and `O(n)` roundings, the
/// same `xₙ` that trying each step in turn finds (so the paper's per-cell reproduction stays
/// byte-identical), where trying each took up to `n` evaluations and gave up after `10⁵`
/// steps: at small `σ` the discrete law needs far more than the continuous `σ²` (19% more at
/// `ε = 10.75`, `δ = 0.01`, 172,000 steps; 2.5x at `δ = 0.99`), and such a request was
/// refused with "could not calibrate". Past [`MAX_GAUSSIAN_SIGMA`] it is refused.
fn first_fitting_step(
    start: Rational,
    mut fits: impl FnMut(Rational) -> bool,
) -> Result<Rational, String> {
    if fits(start) {
        return Ok(start);
    }
    // Every step evaluated, `(n, xₙ)`: one per evaluation, `O(log n)` of them.
    let mut stepped = vec![(0u64, start)];
    let n = least_passing_index(1, u64::MAX, |n| {
        // Step 0 is below every `n` searched.
        let Some(&(from, mut x)) = stepped
            .iter()
            .filter(|(m, _)| *m < n)
            .max_by_key(|(m, _)| *m)
        else {
            return Err("the discrete Gaussian's calibration lost its steps".to_string());
        };
        for _ in from..n {
            x = within_largest_sigma(dyadic_sigma2(x.to_f64() * (1.0 + 1e-6))?)?;
        }
        stepped.push((n, x));
        Ok::<_, String>(fits(x))
    })?
    .ok_or_else(|| "the discrete Gaussian's calibration found no sigma".to_string())?;
    // The index found was evaluated.
    stepped
        .iter()
        .find(|(m, _)| *m == n)
        .map(|&(_, x)| x)
        .ok_or_else(|| "the discrete Gaussian's calibration lost its steps".to_string())
}

/// `σ²` itself while its `σ` is at most [`MAX_GAUSSIAN_SIGMA`], where the searches stop: each
/// evaluation of a map costs `O(σ)`, and a search that grew `σ` without bound (one whose map
/// never fitted) held a core for seconds and allocated by the gigabyte.
fn within_largest_sigma(sigma2: Rational) -> Result<Rational, String> {
    let sigma = sigma2.to_f64().sqrt();
    if sigma > MAX_GAUSSIAN_SIGMA {
        return Err(format!(
            "the discrete Gaussian needs sigma {sigma:.3e} > {MAX_GAUSSIAN_SIGMA:e}; use a larger epsilon or the laplace mechanism"
        ));
    }
    Ok(sigma2)
}

/// How close to the least fitting grid value [`vector_sigma2`] stops: a relative `10⁻⁹` of
/// `σ²`, noise no one can tell from the least (its variance is that much larger), reached in a
/// few evaluations of the map instead of bisecting to the `f64` grid.
const SIGMA2_RESOLUTION: f64 = 1e-9;

/// The discrete Gaussian mechanism for integers (module docs): `(ε, δ)`-DP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GaussianMechanism;

impl NoiseMechanism for GaussianMechanism {
    fn name(&self) -> &'static str {
        "gaussian"
    }

    /// From the exact `σ²` sampled: `ρ = m·Δ²/(2σ²)`-zCDP (the discrete Gaussian's
    /// concentrated-DP bound, Canonne, Kamath & Steinke 2020, arXiv:2004.00010, Proposition 5,
    /// summed over the `m` values it moves), and at the `ε` asked for, the smaller of two valid
    /// `δ`s: each value's exact `δ(ε/m)` (CKS 2020, Theorem 7) times `m` (basic composition, the
    /// paper's per-cell calibration) and the vector's ([`vector_delta`]).
    fn loss(&self, noise: &CountNoise) -> PrivacyLoss {
        let Sampler::DiscreteGaussian(law) = noise.sampler else {
            unreachable!("a Gaussian CountNoise samples the discrete Gaussian law")
        };
        let sigma2 = law.sigma2().to_f64();
        let shape = noise.shape;
        let m = shape.coordinates as f64;
        let epsilon = noise.epsilon;
        let vector = vector_delta(sigma2, epsilon, shape);
        // Basic composition over the values bounds only a shape that is not spread.
        let delta = if shape.spread || shape.coordinates == 1 {
            vector
        } else {
            vector.min(m * discrete_gaussian_delta(sigma2, epsilon / m, shape.sensitivity))
        };
        PrivacyLoss {
            epsilon,
            delta: delta.min(1.0),
            rho: Some(shape.l2_squared() / (2.0 * sigma2)),
        }
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
            GaussianCalibration::Analytic | GaussianCalibration::PerCell => {
                analytic_gaussian_sigma(epsilon, delta, d)?
            }
            GaussianCalibration::Classic => classic_gaussian_sigma(epsilon, delta, d)?,
        };
        if sigma > MAX_GAUSSIAN_SIGMA {
            return Err(format!(
                "epsilon={}, delta={} needs Gaussian noise with sigma {sigma:.3e} > {MAX_GAUSSIAN_SIGMA:e}; use a larger epsilon or the laplace mechanism",
                short_number(epsilon),
                short_number(delta)
            ));
        }
        // Sample σ² rounded up to a dyadic rational with enough bits to keep the
        // sampler's integer arithmetic within u128 (see sampler::DiscreteGaussian),
        // then make sure the exact discrete δ is within target (CKS Theorem 7).
        let sigma2 = first_fitting_step(dyadic_sigma2(sigma * sigma)?, |s2| {
            discrete_gaussian_delta(s2.to_f64(), epsilon, sensitivity) <= delta
        })?;
        gaussian_noise(sigma2, epsilon, delta, ReleaseShape::scalar(sensitivity))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The search stops within [`SIGMA2_RESOLUTION`] of the least fitting value, in about
    /// `2·log2(r / resolution)` evaluations when the least is a relative `r` above the start:
    /// three when the continuous `σ²` all but fits, as at large `σ`.
    #[test]
    fn the_vector_search_stops_near_the_least_in_few_evaluations() {
        let start = dyadic_sigma2(5e9).unwrap();
        for r in [1e-13, 1e-9, 1e-6, 1e-3] {
            let least = start.to_f64() * (1.0 + r);
            let mut evaluations = 0;
            let found = least_fitting_sigma2(start, |s2| {
                evaluations += 1;
                s2.to_f64() >= least
            })
            .unwrap()
            .to_f64();
            assert!(found >= least, "{r}: {found} < {least}");
            assert!(
                found <= least * (1.0 + 2.0 * SIGMA2_RESOLUTION),
                "{r}: {found} is not near {least}"
            );
            let bound = 2.0 * ((r / SIGMA2_RESOLUTION).log2().max(0.0).ceil() + 1.0) + 1.0;
            assert!(
                evaluations as f64 <= bound,
                "{r}: {evaluations} evaluations > {bound}"
            );
        }
    }

    /// At the largest `σ` an analyst's ε reaches (`1e-4` for a grouped count, `δ = 1e-12`:
    /// `σ ≈ 7e4`), the calibration fits, is within the resolution of the least that fits, and
    /// evaluates the `O(σ)` pair-sum law at most four times.
    #[test]
    fn a_large_vector_sigma_is_found_in_a_few_evaluations_and_near_minimal() {
        let (epsilon, delta, shape) = (1e-4, 1e-12, ReleaseShape::new(2, 1));
        let start = analytic_gaussian_sigma(epsilon, delta, 2f64.sqrt())
            .unwrap()
            .powi(2);
        let mut evaluations = 0;
        let fits = |s2: f64| vector_delta(s2, epsilon, shape) <= delta;
        let found = least_fitting_sigma2(dyadic_sigma2(start).unwrap(), |s2| {
            evaluations += 1;
            fits(s2.to_f64())
        })
        .unwrap()
        .to_f64();
        assert!(found.sqrt() > 6e4, "{}", found.sqrt());
        assert!(fits(found));
        assert!(!fits(found * (1.0 - 2.0 * SIGMA2_RESOLUTION)));
        assert!(evaluations <= 4, "{evaluations} evaluations");
        assert_eq!(
            vector_sigma2(epsilon, Some(delta), shape).unwrap().to_f64(),
            found
        );
    }

    /// At `δ = 1e-300` the pair-sum law's truncation reaches far enough that the vector
    /// calibration fits near the continuous `σ` (with `12σ` its allowance, `e^-72`, was above
    /// every such `δ`, and the search grew `σ` a thousandfold before falling back), and a map
    /// that never fits stops at the largest `σ`, not after gigabytes of tails.
    #[test]
    fn a_tiny_delta_calibrates_one_vector_and_a_search_stops_at_the_largest_sigma() {
        let shape = ReleaseShape::new(2, 1);
        for (epsilon, delta) in [(0.01, 1e-300), (1.0, 1e-300), (0.01, 1e-50), (1.0, 1e-12)] {
            let found = vector_sigma2(epsilon, Some(delta), shape).unwrap().to_f64();
            let continuous = analytic_gaussian_sigma(epsilon, delta, 2f64.sqrt())
                .unwrap()
                .powi(2);
            assert!(
                found <= continuous * 1.01,
                "{epsilon}, {delta}: {found} against {continuous}"
            );
            let fits = |s2: f64| vector_delta(s2, epsilon, shape) <= delta;
            assert!(fits(found));
            // The search starts at the continuous σ²: the least above it, or that start.
            let start = dyadic_sigma2(continuous).unwrap().to_f64();
            assert!(
                found == start || !fits(found * (1.0 - 2.0 * SIGMA2_RESOLUTION)),
                "{epsilon}, {delta}"
            );
        }
        let mut evaluations = 0;
        let never = least_fitting_sigma2(dyadic_sigma2(1.0).unwrap(), |_| {
            evaluations += 1;
            false
        });
        assert!(never.unwrap_err().contains("1e5"));
        // From a relative step of 1e-9, doubling reaches σ² = 1e10 in about 64 steps.
        assert!(evaluations <= 70, "{evaluations}");
        let never = first_fitting_step(dyadic_sigma2(1e9).unwrap(), |_| false);
        assert!(never.unwrap_err().contains("1e5"));
    }

    /// The per-value calibration's doubling and bisection find the step that trying each step
    /// in turn finds (the old loop, kept here as the reference), over ε from 0.05 to 20 and δ
    /// from 1e-12 to 0.5: the paper's per-cell outputs cannot move. Where that loop gave up
    /// (past `10⁵` steps: ε = 10.75 at δ = 0.01, and δ = 0.99), the step found fits and the
    /// one before it does not.
    #[test]
    fn per_value_steps_are_those_of_the_step_by_step_loop() {
        let step_by_step = |epsilon: f64, delta: f64| -> Option<Rational> {
            let sigma = analytic_gaussian_sigma(epsilon, delta, 1.0).ok()?;
            let mut sigma2 = dyadic_sigma2(sigma * sigma).ok()?;
            for _ in 0..100_000 {
                if discrete_gaussian_delta(sigma2.to_f64(), epsilon, 1) <= delta {
                    return Some(sigma2);
                }
                sigma2 = dyadic_sigma2(sigma2.to_f64() * (1.0 + 1e-6)).ok()?;
            }
            None
        };
        let calibrate = |epsilon: f64, delta: f64| {
            GaussianMechanism
                .calibrate_count(epsilon, Some(delta), 1, GaussianCalibration::PerCell)
                .map(|noise| match noise.sampler {
                    Sampler::DiscreteGaussian(g) => g.sigma2(),
                    _ => unreachable!(),
                })
        };
        let (mut compared, mut stepped) = (0, 0);
        for delta in [1e-12, 1e-6, 1e-4, 1e-2, 0.1, 0.5] {
            for k in 0..40 {
                let epsilon = 0.05 * 1.15f64.powi(k);
                let Some(reference) = step_by_step(epsilon, delta) else {
                    continue;
                };
                let sigma = analytic_gaussian_sigma(epsilon, delta, 1.0).unwrap();
                stepped += usize::from(reference != dyadic_sigma2(sigma * sigma).unwrap());
                assert_eq!(
                    calibrate(epsilon, delta),
                    Ok(reference),
                    "{epsilon}, {delta}"
                );
                compared += 1;
            }
        }
        // The grid must exercise the search, not only starts that already fit.
        assert!(
            compared > 200 && stepped > 50,
            "{compared} compared, {stepped} stepped"
        );
        for (epsilon, delta) in [(10.75, 0.01), (0.7, 0.99)] {
            assert_eq!(step_by_step(epsilon, delta), None);
            let sigma2 = calibrate(epsilon, delta).unwrap();
            let fits = |s2: f64| discrete_gaussian_delta(s2, epsilon, 1) <= delta;
            assert!(fits(sigma2.to_f64()), "{epsilon}, {delta}");
            assert!(!fits(sigma2.to_f64() / (1.0 + 1e-6)), "{epsilon}, {delta}");
        }
    }
}
