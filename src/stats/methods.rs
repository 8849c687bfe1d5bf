//! The paper's other ways to release a private ratio `Z = X/Y` (Appendix B and C), for
//! comparison with noisy counts. They release the ratio only — no interval — and they use the
//! exact counts' structure, so group sizes must be public.
//!
//! Neighbouring relation: as in the paper's Appendix C, one individual changes one of `X`, `Y`
//! by 1 per step; `d(D, D') = |X − X'| + |Y − Y'|`. Noise on these real values comes from
//! [`RealLaplace`] (exact, on a power-of-two grid); PTR's distance is an integer and gets
//! discrete Laplace noise.

use super::mechanism::{CountNoise, GaussianCalibration, Mechanism, PrivacyLoss, RealLaplace};
use super::table::TwoByTwo;
use rand::RngCore;
use std::fmt;

/// How the relative risk's point release computes the ratio (the paper's methods).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum RatioMethod {
    /// Noisy 2x2 table, then the ratio (LaplaceNoisedCounts; the default).
    #[default]
    NoisyCounts,
    /// `exp(log Z + Lap(log 2 / ε))` (NoisedLog, Claim lap_dp).
    NoisedLog,
    /// `Z + Lap(n_x / (2ε))` (NaiveRelativeRisk, Claim naive_lap_dp).
    Naive,
    /// `Z + Lap(2 S / ε)`, `S` the β-smooth sensitivity, `β = ε / (2 ln(2/δ))` (Appendix C.1).
    SmoothSensitivity,
    /// Propose-Test-Release with a proposed local-sensitivity bound (Algorithm PTR).
    Ptr,
}

impl RatioMethod {
    /// Whether the method's guarantee has a `δ`: smooth sensitivity's (Nissim, Raskhodnikova &
    /// Smith 2007, Lemma 2.5) and PTR's (Dwork & Lei 2009) failure probability.
    pub fn needs_delta(self) -> bool {
        matches!(self, Self::SmoothSensitivity | Self::Ptr)
    }

    pub fn parse(name: &str) -> Result<Self, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "noisy_counts" => Ok(Self::NoisyCounts),
            "noised_log" => Ok(Self::NoisedLog),
            "naive" => Ok(Self::Naive),
            "smooth_sensitivity" => Ok(Self::SmoothSensitivity),
            "ptr" => Ok(Self::Ptr),
            other => Err(format!(
                "unknown method '{other}' (expected noisy_counts, noised_log, naive, smooth_sensitivity or ptr)"
            )),
        }
    }
}

impl fmt::Display for RatioMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NoisyCounts => "noisy_counts",
            Self::NoisedLog => "noised_log",
            Self::Naive => "naive",
            Self::SmoothSensitivity => "smooth_sensitivity",
            Self::Ptr => "ptr",
        })
    }
}

/// NoisedLog's bias correction factor `1 − (log 2/ε)²` (Claim bias_log_RR); defined only for
/// `ε > log 2`, where the Laplace moment generating function exists.
pub fn noised_log_bias_correction(epsilon: f64) -> Result<f64, String> {
    let ln2 = std::f64::consts::LN_2;
    if epsilon > ln2 {
        Ok(1.0 - (ln2 / epsilon).powi(2))
    } else {
        Err(format!(
            "the NoisedLog bias correction needs epsilon > log 2 = 0.693 (the Laplace MGF diverges), got {epsilon}"
        ))
    }
}

/// NoisedLog (Claim lap_dp): `(ε, 0)`-DP since `log X − log Y` has sensitivity `log 2` for
/// `X, Y ≥ 1`. Counts of 0 are raised to 1 first (moving 0↔1 changes nothing, so the
/// sensitivity is unchanged and no NULL depends on the data).
pub fn noised_log<R: RngCore + ?Sized>(
    x: u64,
    y: u64,
    epsilon: f64,
    bias_correction: bool,
    rng: &mut R,
) -> Result<f64, String> {
    let noise = RealLaplace::calibrate(epsilon, std::f64::consts::LN_2)?;
    let log_ratio = (x.max(1) as f64).ln() - (y.max(1) as f64).ln();
    let z = noise.release(log_ratio, rng)?.exp();
    Ok(if bias_correction {
        z * noised_log_bias_correction(epsilon)?
    } else {
        z
    })
}

/// The global sensitivity of `Z = X/max(Y, 1)` for `0 ≤ X ≤ n_x`, `0 ≤ Y`, one of `X`, `Y`
/// changing by 1: `max(n_x/2, 1)`. A change of `Y` moves `Z` by `X/(Y(Y+1)) ≤ n_x/2` (the
/// paper's case, `Y` from 1 to 2, Claim naive_lap_dp), a change of `X` by `1/max(Y, 1) ≤ 1`.
/// The paper assumes `X ≥ 1`, so `X` never changes when `n_x = 1`; here `X` may be 0, and at
/// `n_x = 1` the bound is 1, not `n_x/2` (docs/paper-notes.md).
pub fn naive_sensitivity(exposed_total: u64) -> f64 {
    (exposed_total.max(2) as f64) / 2.0
}

/// NaiveRelativeRisk (Claim naive_lap_dp): `Z + Lap(Δ/ε)` with the global sensitivity
/// `Δ = max(n_x/2, 1)` of [`naive_sensitivity`] (the paper's `n_x/2` wherever `n_x ≥ 2`; `Y`
/// is raised to 1 first). `(ε, 0)`-DP.
pub fn naive<R: RngCore + ?Sized>(
    x: u64,
    y: u64,
    exposed_total: u64,
    epsilon: f64,
    rng: &mut R,
) -> Result<f64, String> {
    let noise = RealLaplace::calibrate(epsilon, naive_sensitivity(exposed_total))?;
    noise.release(x as f64 / y.max(1) as f64, rng)
}

/// An upper bound on the local sensitivity of `Z = X/max(Y, 1)` at `(X', Y')`, over the
/// neighbours `X' ± 1` and `Y' ± 1`: `max(1/max(Y', 1), X'/(Ŷ(Ŷ − 1)))`, `Ŷ = max(Y', 2)`. The
/// first term is a change of `X'`, the second of `Y'` (`|X'/Y' − X'/(Y' − 1)|` for `Y' ≥ 2`,
/// `|X' − X'/2|` at `Y' = 1`; moving `Y'` between 0 and 1 leaves `Z` unchanged). It equals the
/// local sensitivity of the paper's Section C.1 inside the domain (`1 < X < n_x`,
/// `1 < Y < n_y`) and bounds it on its edges. It never decreases in `X'` and never increases
/// in `Y'`.
fn local_sensitivity_bound(x: f64, y: f64) -> f64 {
    let y_hat = y.max(2.0);
    (1.0 / y.max(1.0)).max(x / (y_hat * (y_hat - 1.0)))
}

/// The largest [`local_sensitivity_bound`] over the tables within distance `m` of `(X, Y)`
/// (`0 ≤ X' ≤ n_x`, `Y' ≥ 0`, `d = |X − X'| + |Y − Y'|`): the paper's Claim "Smooth
/// sensitivity of a ratio of counts", made exact. The bound grows with `X'` and falls with
/// `Y'`, so the maximum puts `j` steps into raising `X` and `m − j` into lowering `Y`. The
/// claim puts every step into `Y` first (down to `Y' = 1`), which misses two cases:
/// at `Y' = 1` a change of `X'` moves `Z` by 1 (the claim has `X'/2`, below 1 when `X' ≤ 1`,
/// e.g. `n_x = 1`), and `Y' = 2` has the same `X'/2` as `Y' = 1`, so from `Y = 2` a step into
/// `X` beats one into `Y` (docs/paper-notes.md). Over `j`, the second term is largest where
/// `Ŷ = 2` is first reached, right after it, or at an end (between them it rises only where
/// it is below the first term, `1/Y'`, whose maximum is at `j = 0`), so four candidates
/// suffice; the unit tests check this against enumeration.
pub fn max_local_sensitivity_at(x: u64, y: u64, exposed_total: u64, m: u64) -> f64 {
    let top = m.min(exposed_total.saturating_sub(x));
    let at = |j: u64| {
        local_sensitivity_bound(
            (x + j).min(exposed_total) as f64,
            y.saturating_sub(m - j) as f64,
        )
    };
    // j at which Y' = y − (m − j) reaches 2.
    let to_two = (m + 2).saturating_sub(y);
    [0, to_two.min(top), (to_two + 1).min(top), top]
        .into_iter()
        .map(at)
        .fold(0.0, f64::max)
}

/// The β-smooth sensitivity `max_m e^{−mβ} maxLS(m)` of `X/Y` (Definition smooth_sen), with
/// [`max_local_sensitivity_at`] as `maxLS`: a β-smooth upper bound on the local sensitivity
/// (Nissim et al. 2007, Lemma 2.3, which holds for any function bounding the local
/// sensitivity maximised over the tables within distance `m`).
pub fn smooth_sensitivity(
    x: u64,
    y: u64,
    exposed_total: u64,
    unexposed_total: u64,
    beta: f64,
) -> f64 {
    let n = exposed_total + unexposed_total;
    // maxLS(m) is at most the global sensitivity max(n_x/2, 1) and e^{−mβ} decays, so stop
    // once no later m can win.
    let ceiling = naive_sensitivity(exposed_total);
    let mut best = 0.0f64;
    let mut m = 0u64;
    while m <= n {
        let decay = (-(m as f64) * beta).exp();
        if decay * ceiling <= best {
            break;
        }
        best = best.max(decay * max_local_sensitivity_at(x, y, exposed_total, m));
        m += 1;
    }
    best
}

/// The smooth-sensitivity smoothing parameter `β = ε / (2 ln(2/δ))` (Lemma 2.5 of Nissim et
/// al., as the paper states it).
///
/// Lowered by the last bits where [`smooth_delta`] evaluated at it would exceed `δ`, so that
/// the privacy map of the release is at most the `δ` asked for (a smaller `β` smooths more:
/// still a valid choice).
pub fn smooth_beta(epsilon: f64, delta: f64) -> Result<f64, String> {
    if !(delta > 0.0 && delta < 1.0) {
        return Err(format!("delta must be in (0, 1), got {delta}"));
    }
    let mut beta = epsilon / (2.0 * (2.0 / delta).ln());
    while smooth_delta(epsilon, beta) > delta {
        beta = beta.next_down();
    }
    Ok(beta)
}

/// The smooth-sensitivity release's privacy map: Laplace noise of scale `2S/ε` with `S` a
/// `β`-smooth upper bound on the local sensitivity is `(ε, δ)`-DP with `δ = 2e^{−ε/(2β)}`
/// (Nissim, Raskhodnikova & Smith 2007, Lemma 2.5 with `α = ε/2`; the inverse of
/// [`smooth_beta`]).
pub fn smooth_delta(epsilon: f64, beta: f64) -> f64 {
    2.0 * (-epsilon / (2.0 * beta)).exp()
}

/// Smooth-sensitivity release `Z + Lap(2S/ε)`: `(ε, δ)`-DP (Lemma 2.5 of Nissim et al.).
///
/// Floating-point safety as in [`RealLaplace`], with the grid `g` chosen from the public
/// bound `2·max(n_x/2, 1) ≥ 2S` (the global sensitivity bounds every local one), never from
/// `S`: a grid that follows `S` puts the outputs of neighbouring datasets on different
/// lattices, which tells them apart whatever the noise. Rounding `Z` to the grid adds at
/// most `g` to its local sensitivity, so `S + g` is a β-smooth bound for the rounded value
/// and the noise scale is `2(S + g)/ε`.
pub fn smooth<R: RngCore + ?Sized>(
    x: u64,
    y: u64,
    exposed_total: u64,
    unexposed_total: u64,
    epsilon: f64,
    delta: f64,
    rng: &mut R,
) -> Result<f64, String> {
    let s = smooth_sensitivity(
        x,
        y,
        exposed_total,
        unexposed_total,
        smooth_beta(epsilon, delta)?,
    );
    let grid_bound = 2.0 * naive_sensitivity(exposed_total);
    let grid = RealLaplace::calibrate_on_public_grid(epsilon, 2.0 * s, grid_bound)?.grid();
    // RealLaplace calibrates for `sensitivity + g`: pass `2S + g` for the scale `2(S + g)/ε`.
    RealLaplace::calibrate_on_public_grid(epsilon, 2.0 * s + grid, grid_bound)?
        .release(x as f64 / y.max(1) as f64, rng)
}

/// PTR's distance `γ`: the fewest changes after which the local sensitivity can reach `bound`.
pub fn ptr_distance(x: u64, y: u64, exposed_total: u64, unexposed_total: u64, bound: f64) -> u64 {
    let n = exposed_total + unexposed_total;
    (0..=n)
        .find(|&m| max_local_sensitivity_at(x, y, exposed_total, m) >= bound)
        .unwrap_or(n + 1)
}

/// PTR's budget split `ε₁ = ε₂ = ε/2` and its test threshold `ln(1/δ)/ε₁`: the noisy
/// distance must exceed the threshold for the release to go ahead.
fn ptr_split_and_threshold(epsilon: f64, delta: f64) -> (f64, f64) {
    let half = epsilon / 2.0;
    (half, (1.0 / delta).ln() / half)
}

/// PTR's `δ` from its calibrated test (Dwork & Lei 2009; the paper's Algorithm PTR): the
/// chance that the test passes on a dataset whose local sensitivity already exceeds the bound
/// (distance 0), `P(L > t)` for the discrete Laplace `L` of parameter `q = e^{−ε₁}` that the
/// test adds, `q^{⌊t⌋+1}/(1+q)` (Canonne, Kamath & Steinke 2020, arXiv:2004.00010, §2.2);
/// at most the `e^{−ε₁t} = δ` the threshold was set from.
pub fn ptr_delta(distance_epsilon: f64, threshold: f64) -> f64 {
    let q = (-distance_epsilon).exp();
    q.powf(threshold.floor() + 1.0) / (1.0 + q)
}

/// The discrete Laplace noise PTR's test adds to the distance `γ` (sensitivity 1) at `ε₁`.
fn ptr_distance_noise(epsilon: f64) -> Result<CountNoise, String> {
    CountNoise::calibrate(
        Mechanism::Laplace,
        epsilon,
        None,
        1,
        GaussianCalibration::Analytic,
    )
}

/// Propose-Test-Release (Algorithm PTR) with `ε₁ = ε₂ = ε/2`: `(ε, δ)`-DP. `None` is FAIL:
/// the noisy distance to a dataset whose local sensitivity exceeds `bound` was too small.
#[allow(clippy::too_many_arguments)]
pub fn ptr<R: RngCore + ?Sized>(
    x: u64,
    y: u64,
    exposed_total: u64,
    unexposed_total: u64,
    epsilon: f64,
    delta: f64,
    bound: f64,
    rng: &mut R,
) -> Result<Option<f64>, String> {
    if !(bound.is_finite() && bound > 0.0) {
        return Err(format!(
            "ptr_bound must be a finite number > 0, got {bound}"
        ));
    }
    if !(delta > 0.0 && delta < 1.0) {
        return Err(format!("delta must be in (0, 1), got {delta}"));
    }
    let (half, threshold) = ptr_split_and_threshold(epsilon, delta);
    let distance_noise = ptr_distance_noise(half)?;
    let release = RealLaplace::calibrate(half, bound)?;
    let gamma = ptr_distance(x, y, exposed_total, unexposed_total, bound) as f64;
    let noisy = gamma + distance_noise.sample(rng) as f64;
    if noisy <= threshold {
        return Ok(None);
    }
    release.release(x as f64 / y.max(1) as f64, rng).map(Some)
}

/// The relative risk `(X/n_x)/(Y/n_y)` of an exact table released by one of the non-count
/// methods: the method releases `Z = X/Y`, then `Z · n_y/n_x` with the public sizes
/// (post-processing). `None` for an empty arm (public sizes: nothing is revealed) or PTR's
/// FAIL.
#[allow(clippy::too_many_arguments)]
pub fn release_relative_risk<R: RngCore + ?Sized>(
    method: RatioMethod,
    table: &TwoByTwo,
    epsilon: f64,
    delta: Option<f64>,
    bias_correction: bool,
    ptr_bound: Option<f64>,
    rng: &mut R,
) -> Result<Option<f64>, String> {
    let (x, y) = (table.a, table.c);
    let (n_x, n_y) = (table.a + table.b, table.c + table.d);
    if n_x == 0 || n_y == 0 {
        return Ok(None);
    }
    let need_delta = || delta.ok_or_else(|| format!("method '{method}' needs delta"));
    let z = match method {
        RatioMethod::NoisyCounts => {
            return Err("noisy_counts is released through TableNoise".to_string())
        }
        RatioMethod::NoisedLog => Some(noised_log(x, y, epsilon, bias_correction, rng)?),
        RatioMethod::Naive => Some(naive(x, y, n_x, epsilon, rng)?),
        RatioMethod::SmoothSensitivity => {
            Some(smooth(x, y, n_x, n_y, epsilon, need_delta()?, rng)?)
        }
        RatioMethod::Ptr => {
            let bound = ptr_bound.ok_or("method 'ptr' needs ptr_bound")?;
            ptr(x, y, n_x, n_y, epsilon, need_delta()?, bound, rng)?
        }
    };
    Ok(z.map(|z| z * n_y as f64 / n_x as f64))
}

/// One of the paper's local ratio methods calibrated for a call: its options, fixed before any
/// data is read, and its privacy map ([`Self::loss`]), computed from the noise each method
/// draws and the parameters it was calibrated with rather than copied from the request.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalRatioRelease {
    pub method: RatioMethod,
    /// The `ε` the method's noise is calibrated for (PTR: both of its steps together).
    pub epsilon: f64,
    /// Smooth sensitivity's and PTR's `δ` ([`RatioMethod::needs_delta`]); `None` otherwise.
    pub delta: Option<f64>,
    pub bias_correction: bool,
    pub ptr_bound: Option<f64>,
}

impl LocalRatioRelease {
    /// The method calibrated at `(ε, δ)`: an error when it needs a `δ` or PTR's bound and has
    /// none, or when its noise cannot be calibrated there.
    pub fn calibrate(
        method: RatioMethod,
        epsilon: f64,
        delta: Option<f64>,
        bias_correction: bool,
        ptr_bound: Option<f64>,
    ) -> Result<Self, String> {
        Self::check_requirements(method, delta, ptr_bound)?;
        let delta = delta.filter(|_| method.needs_delta());
        let release = Self {
            method,
            epsilon,
            delta,
            bias_correction,
            ptr_bound,
        };
        release.checked_loss()?;
        Ok(release)
    }

    /// The method's requirements: a `δ` where it needs one ([`RatioMethod::needs_delta`]) and
    /// PTR's proposed bound; the first checks of [`Self::calibrate`].
    pub fn check_requirements(
        method: RatioMethod,
        delta: Option<f64>,
        ptr_bound: Option<f64>,
    ) -> Result<(), String> {
        if method == RatioMethod::NoisyCounts {
            return Err("noisy_counts is released through TableNoise".to_string());
        }
        if method.needs_delta() && delta.is_none() {
            return Err(format!(
                "method '{method}' needs delta (set dp.delta or pass delta=...)"
            ));
        }
        if method == RatioMethod::Ptr && ptr_bound.is_none() {
            return Err(
                "method 'ptr' needs ptr_bound=<proposed bound on the local sensitivity>"
                    .to_string(),
            );
        }
        Ok(())
    }

    /// What the release costs, from its calibrated noise (module docs of each method):
    /// * NoisedLog: the map of the [`RealLaplace`] every group's log ratio gets (sensitivity
    ///   `ln 2`): pure `ε`-DP, so also `ε²/2`-zCDP.
    /// * Naive: each group's noise is a [`RealLaplace`] at that group's public sensitivity,
    ///   whose map is at most `ε` whatever the sensitivity (its calibration checks it exactly):
    ///   pure `ε`-DP and `ε²/2`-zCDP.
    /// * Smooth sensitivity: `ε` as Naive's, and `δ` from the smoothing parameter `β` the
    ///   calibration chose ([`smooth_delta`]); no zCDP map (`δ` is a failure probability).
    /// * PTR: the test's discrete Laplace map plus the release's [`RealLaplace`] map, and `δ`
    ///   from the test's threshold and noise ([`ptr_delta`]); no zCDP map.
    pub fn loss(&self) -> PrivacyLoss {
        self.checked_loss()
            .expect("a LocalRatioRelease is calibrated by LocalRatioRelease::calibrate")
    }

    fn checked_loss(&self) -> Result<PrivacyLoss, String> {
        let pure = |epsilon: f64| PrivacyLoss {
            epsilon,
            delta: 0.0,
            rho: Some(epsilon * epsilon / 2.0),
        };
        let need_delta = || {
            self.delta
                .ok_or_else(|| format!("method '{}' needs delta", self.method))
        };
        Ok(match self.method {
            RatioMethod::NoisyCounts => {
                return Err("noisy_counts is released through TableNoise".to_string())
            }
            RatioMethod::NoisedLog => {
                RealLaplace::calibrate(self.epsilon, std::f64::consts::LN_2)?.loss()
            }
            RatioMethod::Naive => pure(self.epsilon),
            RatioMethod::SmoothSensitivity => PrivacyLoss {
                epsilon: self.epsilon,
                delta: smooth_delta(self.epsilon, smooth_beta(self.epsilon, need_delta()?)?),
                rho: None,
            },
            RatioMethod::Ptr => {
                let bound = self.ptr_bound.ok_or("method 'ptr' needs ptr_bound")?;
                let (half, threshold) = ptr_split_and_threshold(self.epsilon, need_delta()?);
                let test = ptr_distance_noise(half)?.loss();
                let release = RealLaplace::calibrate(half, bound)?.loss();
                PrivacyLoss {
                    epsilon: test.epsilon + release.epsilon,
                    delta: ptr_delta(test.epsilon, threshold),
                    rho: None,
                }
            }
        })
    }

    /// The relative risk of `table` released by this method ([`release_relative_risk`]).
    pub fn release<R: RngCore + ?Sized>(
        &self,
        table: &TwoByTwo,
        rng: &mut R,
    ) -> Result<Option<f64>, String> {
        release_relative_risk(
            self.method,
            table,
            self.epsilon,
            self.delta,
            self.bias_correction,
            self.ptr_bound,
            rng,
        )
    }
}

/// Sample accuracy of the smooth-sensitivity release: `β = P(|Lap(2S/ε)| > α) = e^{−αε/(2S)}`.
pub fn smooth_accuracy_beta(
    x: u64,
    y: u64,
    n_x: u64,
    n_y: u64,
    epsilon: f64,
    delta: f64,
    alpha: f64,
) -> Result<f64, String> {
    let s = smooth_sensitivity(x, y, n_x, n_y, smooth_beta(epsilon, delta)?);
    Ok((-alpha * epsilon / (2.0 * s)).exp())
}

/// PTR's error probability for a proposed bound, counting FAIL as an error as the paper's
/// Figure 1 does: `P(FAIL) + (1 − P(FAIL)) e^{−α ε₂ / bound}`, continuous Laplace test noise.
#[allow(clippy::too_many_arguments)]
pub fn ptr_accuracy_beta(
    x: u64,
    y: u64,
    n_x: u64,
    n_y: u64,
    epsilon: f64,
    delta: f64,
    alpha: f64,
    bound: f64,
) -> f64 {
    let (half, threshold) = ptr_split_and_threshold(epsilon, delta);
    let gamma = ptr_distance(x, y, n_x, n_y, bound) as f64;
    let t = threshold - gamma;
    let fail = if t < 0.0 {
        0.5 * (half * t).exp()
    } else {
        1.0 - 0.5 * (-half * t).exp()
    };
    fail + (1.0 - fail) * (-alpha * half / bound).exp()
}

/// PTR with oracle access to the best proposal (as in the paper's Figure 1): the smallest
/// error over proposals equal to `maxLS(m)`, the bounds at which the distance changes.
pub fn ptr_oracle_accuracy_beta(
    x: u64,
    y: u64,
    n_x: u64,
    n_y: u64,
    epsilon: f64,
    delta: f64,
    alpha: f64,
) -> f64 {
    let n = n_x + n_y;
    (0..=n.min(10_000))
        .map(|m| max_local_sensitivity_at(x, y, n_x, m))
        .filter(|b| b.is_finite() && *b > 0.0)
        .map(|b| ptr_accuracy_beta(x, y, n_x, n_y, epsilon, delta, alpha, b))
        .fold(1.0, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    #[test]
    fn local_sensitivity_matches_direct_enumeration() {
        // maxLS(0) is the local sensitivity at (X, Y): max over X±1 and Y±1 of |Z − Z'|.
        for (x, y) in [(100u64, 100u64), (50, 100), (100, 50), (100, 30), (3, 10)] {
            let z = x as f64 / y as f64;
            let direct = [
                1.0 / y as f64,
                (z - x as f64 / (y + 1) as f64).abs(),
                (z - x as f64 / (y - 1) as f64).abs(),
            ]
            .into_iter()
            .fold(0.0, f64::max);
            let ours = max_local_sensitivity_at(x, y, 150, 0);
            assert!((ours - direct).abs() < 1e-12, "{x} {y}: {ours} vs {direct}");
        }
    }

    #[test]
    fn smooth_sensitivity_is_smooth_and_bounds_local_sensitivity() {
        let beta = smooth_beta(1.0, 1.0 / 150.0).unwrap();
        for (x, y) in [(100u64, 100u64), (50, 100), (100, 50), (100, 30)] {
            let s = smooth_sensitivity(x, y, 150, 150, beta);
            assert!(s >= max_local_sensitivity_at(x, y, 150, 0));
            // β-smooth: a neighbour's smooth sensitivity is within a factor e^β.
            for (x2, y2) in [(x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)] {
                let s2 = smooth_sensitivity(x2, y2, 150, 150, beta);
                assert!(s <= s2 * beta.exp() * (1.0 + 1e-12), "{x} {y}");
            }
        }
    }

    /// `Z = X/max(Y, 1)` and its local sensitivity by enumeration of the neighbours (one of
    /// `X ∈ [0, n_x]`, `Y ∈ [0, n_y]` moved by one).
    fn ratio(x: u64, y: u64) -> f64 {
        x as f64 / y.max(1) as f64
    }

    fn local_sensitivity(x: u64, y: u64, n_x: u64, n_y: u64) -> f64 {
        let mut neighbours = vec![];
        if x > 0 {
            neighbours.push((x - 1, y));
        }
        if x < n_x {
            neighbours.push((x + 1, y));
        }
        if y > 0 {
            neighbours.push((x, y - 1));
        }
        if y < n_y {
            neighbours.push((x, y + 1));
        }
        neighbours
            .into_iter()
            .map(|(a, b)| (ratio(x, y) - ratio(a, b)).abs())
            .fold(0.0, f64::max)
    }

    #[test]
    fn max_local_sensitivity_is_the_maximum_over_the_tables_within_distance_m() {
        for n_x in 1..=8u64 {
            for x in 0..=n_x {
                for y in 0..=10u64 {
                    for m in 0..=20u64 {
                        let mut direct = 0.0f64;
                        for a in 0..=n_x {
                            for b in 0..=y + m {
                                if a.abs_diff(x) + b.abs_diff(y) <= m {
                                    direct =
                                        direct.max(local_sensitivity_bound(a as f64, b as f64));
                                }
                            }
                        }
                        let ours = max_local_sensitivity_at(x, y, n_x, m);
                        assert!(
                            (ours - direct).abs() < 1e-12,
                            "{n_x} {x} {y} {m}: {ours} vs {direct}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn smooth_sensitivity_bounds_every_local_sensitivity_and_is_smooth_on_small_tables() {
        // Every table with n_x, n_y <= 6: S >= LS (so the noise covers the local change), a
        // neighbour's S within e^β (so revealing S reveals little) and the naive bound covers
        // every LS (global sensitivity). The old maxLS left out the X-change term 1 at Y' = 1:
        // S(1, 1) with n_x = 1 was 1/2 < LS = 1.
        for (epsilon, delta) in [(1.0, 1e-6), (0.1, 1e-3), (2.0, 0.01)] {
            let beta = smooth_beta(epsilon, delta).unwrap();
            for n_x in 1..=6u64 {
                for n_y in 1..=6u64 {
                    let s = |x, y| smooth_sensitivity(x, y, n_x, n_y, beta);
                    for x in 0..=n_x {
                        for y in 0..=n_y {
                            let ls = local_sensitivity(x, y, n_x, n_y);
                            assert!(
                                s(x, y) >= ls - 1e-12,
                                "{n_x} {n_y} {x} {y}: S {} < LS {ls}",
                                s(x, y)
                            );
                            assert!(ls <= naive_sensitivity(n_x) + 1e-12, "{n_x} {x} {y}");
                            for (a, b) in [(x + 1, y), (x, y + 1)] {
                                if a <= n_x && b <= n_y {
                                    let (s1, s2) = (s(x, y), s(a, b));
                                    assert!(s1 <= s2 * beta.exp() * (1.0 + 1e-12), "{x} {y}");
                                    assert!(s2 <= s1 * beta.exp() * (1.0 + 1e-12), "{x} {y}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn smooth_release_grid_is_public() {
        // X = 0 vs 1 of n_x = 3, Y = 4 of 4 at ε = 1, δ = 0.01: S = 0.936 vs 1.028, across a
        // power of two, so a grid that followed S would be 2^-29 for one and 2^-28 for the
        // other (tests/audit.rs has the audit that caught it). Both releases lie on the grid of
        // the public bound 2·max(n_x/2, 1) = 3: 2^(⌈log2 3⌉ − 30) = 2^-28, and half of the
        // draws are odd multiples of it.
        let beta = smooth_beta(1.0, 0.01).unwrap();
        let (s0, s1) = (
            smooth_sensitivity(0, 4, 3, 4, beta),
            smooth_sensitivity(1, 4, 3, 4, beta),
        );
        assert!(s0 < 1.0 && s1 > 1.0, "{s0} {s1}");
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        for x in [0, 1] {
            let mut odd = 0;
            for _ in 0..2000 {
                let z = smooth(x, 4, 3, 4, 1.0, 0.01, &mut rng).unwrap();
                let units = z / 2f64.powi(-28);
                assert_eq!(units.fract(), 0.0, "{z}");
                odd += (units % 2.0 != 0.0) as u32;
            }
            assert!(odd > 800, "{odd}");
        }
    }

    #[test]
    fn naive_sensitivity_covers_a_change_of_x_at_one_exposed_row() {
        // n_x = 1: X from 1 to 0 at Y = 1 moves Z by 1; the paper's n_x/2 is 1/2.
        assert_eq!(naive_sensitivity(1), 1.0);
        assert_eq!(naive_sensitivity(2), 1.0);
        assert_eq!(naive_sensitivity(10), 5.0);
        for n_x in 1..=6 {
            for x in 0..=n_x {
                for y in 0..=6 {
                    assert!(local_sensitivity(x, y, n_x, 6) <= naive_sensitivity(n_x));
                }
            }
        }
    }

    #[test]
    fn noised_log_has_the_claimed_mean_after_correction() {
        // E[Z̃] = Z / (1 − (log2/ε)²) (Claim bias_log_RR); corrected, the mean is Z. With
        // ε = 2, Z = 2, 100,000 draws: sd of Z̃ ≈ Z·sqrt(Var(e^L)) ≈ 0.8, SE ≈ 0.0025; 6 SE.
        let mut rng = ChaCha20Rng::seed_from_u64(17);
        let n = 100_000;
        let mean = (0..n)
            .map(|_| noised_log(60, 30, 2.0, true, &mut rng).unwrap())
            .sum::<f64>()
            / n as f64;
        assert!((mean - 2.0).abs() < 0.015, "{mean}");
        assert!(noised_log(60, 30, 0.5, true, &mut rng).is_err());
    }

    #[test]
    fn ptr_fails_when_the_proposal_is_below_the_local_sensitivity() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        // Proposal below LS(D): γ = 0, FAIL unless the noise exceeds ln(1/δ)/ε₁ (prob < δ/2).
        let released = (0..1000)
            .filter(|_| {
                ptr(100, 30, 150, 150, 1.0, 1e-3, 1e-6, &mut rng)
                    .unwrap()
                    .is_some()
            })
            .count();
        assert!(released <= 5, "{released}");
        // A generous proposal passes almost always and is close to Z.
        let out = ptr(100, 50, 150, 150, 4.0, 1e-3, 1.0, &mut rng)
            .unwrap()
            .unwrap();
        assert!((out - 2.0).abs() < 10.0);
    }

    #[test]
    fn real_laplace_output_is_on_the_grid_and_has_the_right_spread() {
        let noise = RealLaplace::calibrate(1.0, 0.5).unwrap();
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let g = noise.grid();
        let draws: Vec<f64> = (0..100_000)
            .map(|_| noise.release(0.3, &mut rng).unwrap())
            .collect();
        assert!(draws.iter().all(|v| (v / g).fract() == 0.0));
        // Mean absolute deviation of Laplace(b) is b = 0.5; SE = b/sqrt(n) ≈ 0.0016; 5 SE.
        let mad = draws.iter().map(|v| (v - 0.3).abs()).sum::<f64>() / draws.len() as f64;
        assert!((mad - 0.5).abs() < 0.008, "{mad}");
    }

    #[test]
    fn each_local_method_states_its_cost_from_its_calibration() {
        let calibrated = |method, delta, bound| {
            LocalRatioRelease::calibrate(method, 1.0, delta, false, bound).unwrap()
        };
        // NoisedLog: the real Laplace's exact map, within the rounding of its scale below ε.
        let log = calibrated(RatioMethod::NoisedLog, None, None).loss();
        assert!(log.epsilon <= 1.0 && log.epsilon > 1.0 - 1e-9, "{log:?}");
        assert_eq!((log.delta, log.rho), (0.0, Some(log.epsilon.powi(2) / 2.0)));
        // Naive: pure ε, so ε²/2-zCDP.
        let naive = calibrated(RatioMethod::Naive, Some(1e-6), None).loss();
        assert_eq!(
            (naive.epsilon, naive.delta, naive.rho),
            (1.0, 0.0, Some(0.5))
        );
        // Smooth sensitivity: δ from the β it smooths with, never above the δ asked for.
        for delta in [1e-3, 1e-6, 1.0 / 150.0, 0.3] {
            let smooth = calibrated(RatioMethod::SmoothSensitivity, Some(delta), None).loss();
            assert!(smooth.delta <= delta && smooth.delta > delta * (1.0 - 1e-12));
            assert_eq!((smooth.epsilon, smooth.rho), (1.0, None));
        }
        // PTR: the test's exact discrete tail at its threshold, below e^{-ε₁ t} = δ.
        let ptr = calibrated(RatioMethod::Ptr, Some(1e-6), Some(1.0)).loss();
        let (half, t) = ptr_split_and_threshold(1.0, 1e-6);
        let q = (-half).exp();
        let tail: f64 = ((t.floor() as i64 + 1)..(t.floor() as i64 + 2000))
            .map(|j| (1.0 - q) / (1.0 + q) * q.powi(j as i32))
            .sum();
        assert!(
            (ptr.delta - tail).abs() <= 1e-12 * tail && ptr.delta < 1e-6,
            "{ptr:?}"
        );
        assert!(ptr.epsilon <= 1.0 && ptr.epsilon > 1.0 - 1e-9 && ptr.rho.is_none());
        // Refused where the method is not calibrated.
        assert!(
            LocalRatioRelease::calibrate(RatioMethod::Ptr, 1.0, None, false, Some(1.0)).is_err()
        );
        assert!(
            LocalRatioRelease::calibrate(RatioMethod::Ptr, 1.0, Some(1e-6), false, None).is_err()
        );
    }

    #[test]
    fn a_planted_calibration_bug_shows_in_the_local_maps() {
        // A smoothing parameter twice too large (a calibration bug) charges δ²/2·... : the map
        // 2e^{−ε/(2β)} at 2β is sqrt(2δ) rather than δ.
        let beta = smooth_beta(1.0, 1e-6).unwrap();
        let planted = smooth_delta(1.0, 2.0 * beta);
        assert!(
            (planted - (2.0 * 1e-6f64).sqrt()).abs() < 1e-12,
            "{planted}"
        );
        // A PTR threshold halved charges about sqrt(δ).
        let (half, t) = ptr_split_and_threshold(1.0, 1e-6);
        assert!(ptr_delta(half, t / 2.0) > 100.0 * ptr_delta(half, t));
    }
}
