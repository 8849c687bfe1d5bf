//! Privacy maps: what a release costs, computed from the noise that was calibrated, in each
//! measure the accountant can keep (OpenDP's privacy maps: Gaboardi, Hay & Vadhan 2020, "A
//! Programming Framework for OpenDP").
//!
//! A release is a vector of noised integers; [`ReleaseShape`] is what the plan analysis proves
//! about it: replacing one privacy unit changes at most `coordinates` of them, each by at most
//! `sensitivity`. Its L1 norm is `coordinates·sensitivity`, its L2 norm
//! `sensitivity·√coordinates`. Each mechanism maps (shape, noise) to a [`PrivacyLoss`]
//! ([`super::NoiseMechanism::loss`]); calibration is the inverse of that map, and the charge is
//! the map's value, so a calibration bug shows in the charge.
//!
//! The measures:
//! * `(ε, δ)`-DP (Dwork, Kenthapadi, McSherry, Mironov & Naor 2006), reported at the `ε` the
//!   call asked for with the smallest `δ` the noise achieves there (0 for pure DP);
//! * `ρ`-zero-concentrated DP (Bun & Steinke 2016, arXiv:1605.02065, Definition 1.1), which
//!   composes by adding `ρ` and converts to `(ε, δ)` by [`cdp_delta`].

/// How one privacy unit can move a release's noised integers (the plan's contribution bound):
/// at most `coordinates` of them change, each by at most `sensitivity`; or, when `spread`, the
/// same L1 total `coordinates·sensitivity` over any number of them, each by at most
/// `sensitivity` (a unit's `k > 1` rows in one 2x2 table can leave two cells and join two
/// others). Both bound the L2 norm by `sensitivity·√coordinates` (`Σv² ≤ L∞·L1`), but only the
/// first is the worst-shift case of the discrete Gaussian's exact vector `δ`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReleaseShape {
    pub coordinates: u32,
    pub sensitivity: u32,
    pub spread: bool,
}

impl ReleaseShape {
    /// One noised value of sensitivity `sensitivity`.
    pub const fn scalar(sensitivity: u32) -> Self {
        Self::new(1, sensitivity)
    }

    pub const fn new(coordinates: u32, sensitivity: u32) -> Self {
        Self {
            coordinates,
            sensitivity,
            spread: false,
        }
    }

    /// The same L1 total spread over any number of values (the type's docs).
    pub const fn spread(self) -> Self {
        Self {
            spread: true,
            ..self
        }
    }

    /// The L2 sensitivity squared, `coordinates·sensitivity²`.
    pub fn l2_squared(&self) -> f64 {
        self.coordinates as f64 * (self.sensitivity as f64).powi(2)
    }
}

/// The privacy loss of one release in each measure (module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PrivacyLoss {
    /// `(ε, δ)`-DP: the `ε` asked for...
    pub epsilon: f64,
    /// ...and the smallest `δ` the calibrated noise achieves at it (0: pure `ε`-DP).
    pub delta: f64,
    /// `ρ`-zCDP, or `None` when the release has no zCDP map (a method whose `δ` is a failure
    /// probability: smooth sensitivity, PTR, private group selection).
    pub rho: Option<f64>,
}

impl PrivacyLoss {
    /// Sequential composition of two releases: `(ε, δ)` and `ρ` add (Dwork & Roth 2014,
    /// Theorem 3.16; Bun & Steinke 2016, Lemma 2.3); no zCDP map if either has none.
    pub fn then(self, other: Self) -> Self {
        Self {
            epsilon: self.epsilon + other.epsilon,
            delta: self.delta + other.delta,
            rho: self.rho.zip(other.rho).map(|(a, b)| a + b),
        }
    }

    /// A pure `ε`-DP release: `ε²/2`-zCDP (Bun & Steinke 2016, Proposition 1.4).
    pub fn pure(epsilon: f64) -> Self {
        Self {
            epsilon,
            delta: 0.0,
            rho: Some(epsilon * epsilon / 2.0),
        }
    }
}

/// The `δ` at which a `ρ`-zCDP mechanism is `(ε, δ)`-DP: Canonne, Kamath & Steinke 2020
/// (arXiv:2004.00010), Corollary 13,
/// `δ = inf_{α>1} exp((α−1)(αρ−ε)) / (α−1) · (1 − 1/α)^α`, the tightest conversion known for
/// an arbitrary `ρ`-zCDP mechanism (OpenDP's `cdp_delta`). The infimum's `α` is found by
/// bisection on the derivative of the exponent, `(2α−1)ρ − ε + ln(1 − 1/α)`, which is
/// increasing; any `α` gives a valid (upper) bound, so rounding in the search only loosens it.
pub fn cdp_delta(rho: f64, epsilon: f64) -> f64 {
    if rho <= 0.0 || epsilon.is_infinite() {
        return 0.0;
    }
    if !rho.is_finite() || rho.is_nan() || epsilon.is_nan() {
        return 1.0;
    }
    let (mut lo, mut hi) = (1.0 + 1e-9, (epsilon + 1.0) / (2.0 * rho) + 2.0);
    loop {
        let mid = lo + (hi - lo) / 2.0;
        if mid <= lo || mid >= hi {
            break;
        }
        let derivative = (2.0 * mid - 1.0) * rho - epsilon + (-1.0 / mid).ln_1p();
        if derivative < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let alpha = hi;
    let exponent = (alpha - 1.0) * (alpha * rho - epsilon) + alpha * (-1.0 / alpha).ln_1p();
    (exponent.exp() / (alpha - 1.0)).min(1.0)
}

/// The largest `ρ` whose [`cdp_delta`] at `ε` is at most `δ`: the zCDP budget equivalent to an
/// `(ε, δ)` target, and the inverse the Gaussian mechanism's vector calibration uses. `None`
/// when `(ε, δ)` is outside `(0, ∞) × (0, 1)`.
pub fn rho_for(epsilon: f64, delta: f64) -> Option<f64> {
    if !(epsilon.is_finite() && epsilon > 0.0 && delta > 0.0 && delta < 1.0) {
        return None;
    }
    // cdp_delta is increasing in ρ; at ρ = ε it is above any δ < 1 of interest only when the
    // bracket says so, so widen until it does.
    let (mut lo, mut hi) = (0.0, epsilon);
    while cdp_delta(hi, epsilon) <= delta {
        lo = hi;
        hi *= 2.0;
        if hi > 1e12 {
            return Some(lo);
        }
    }
    for _ in 0..200 {
        let mid = lo + (hi - lo) / 2.0;
        if mid <= lo || mid >= hi {
            break;
        }
        if cdp_delta(mid, epsilon) <= delta {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo > 0.0).then_some(lo)
}

/// The smallest `ε` at which a `ρ`-zCDP mechanism is `(ε, δ)`-DP (the inverse of
/// [`cdp_delta`] in `ε`, found by bisection; rounded up).
pub fn cdp_epsilon(rho: f64, delta: f64) -> f64 {
    if rho <= 0.0 {
        return 0.0;
    }
    let (mut lo, mut hi) = (0.0, rho + 2.0 * (rho * (1.0 / delta).ln()).sqrt() + 1.0);
    while cdp_delta(rho, hi) > delta {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = lo + (hi - lo) / 2.0;
        if mid <= lo || mid >= hi {
            break;
        }
        if cdp_delta(rho, mid) > delta {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The conversion evaluated on a fine grid of α, independently of the bisection.
    fn grid_delta(rho: f64, epsilon: f64) -> f64 {
        let mut best = f64::INFINITY;
        let mut alpha = 1.0 + 1e-6;
        while alpha < 1e6 {
            let log = (alpha - 1.0) * (alpha * rho - epsilon) + alpha * (-1.0 / alpha).ln_1p()
                - (alpha - 1.0).ln();
            best = best.min(log);
            alpha *= 1.0001;
        }
        best.exp().min(1.0)
    }

    #[test]
    fn cdp_delta_is_the_infimum_over_alpha() {
        for (rho, epsilon) in [
            (0.05, 1.0),
            (0.01, 0.5),
            (2.0, 10.0),
            (1e-4, 0.1),
            (0.5, 3.0),
        ] {
            let (fast, slow) = (cdp_delta(rho, epsilon), grid_delta(rho, epsilon));
            // The bisection finds the infimum; the grid is within a factor 1.0001 of it in α.
            assert!(
                fast <= slow * (1.0 + 1e-6),
                "{rho} {epsilon}: {fast} vs {slow}"
            );
            assert!(
                fast >= slow * (1.0 - 1e-3),
                "{rho} {epsilon}: {fast} vs {slow}"
            );
        }
        assert_eq!(cdp_delta(0.0, 1.0), 0.0);
        assert_eq!(cdp_delta(f64::INFINITY, 1.0), 1.0);
    }

    #[test]
    fn conversions_invert_each_other() {
        // (1, 1e-4): ρ ≈ 0.0406 by the same formula evaluated on a grid (independent of the
        // bisection above); (10, 1e-4), the 100-query budget, ρ ≈ 2.117.
        for (epsilon, delta, expect) in [(1.0, 1e-4, 0.040_63), (10.0, 1e-4, 2.117_1)] {
            let rho = rho_for(epsilon, delta).unwrap();
            assert!((rho / expect - 1.0).abs() < 1e-3, "{epsilon}: {rho}");
            assert!(cdp_delta(rho, epsilon) <= delta);
            assert!(cdp_delta(rho * (1.0 + 1e-9), epsilon) > delta * (1.0 - 1e-6));
            let back = cdp_epsilon(rho, delta);
            assert!((back / epsilon - 1.0).abs() < 1e-9, "{back}");
        }
        assert_eq!(rho_for(0.0, 1e-5), None);
        assert_eq!(rho_for(1.0, 0.0), None);
    }

    #[test]
    fn losses_compose_by_adding() {
        let a = PrivacyLoss::pure(0.5);
        assert_eq!(a.rho, Some(0.125));
        let b = PrivacyLoss {
            epsilon: 1.0,
            delta: 1e-6,
            rho: None,
        };
        let both = a.then(b);
        assert_eq!((both.epsilon, both.delta, both.rho), (1.5, 1e-6, None));
        assert_eq!(a.then(a).rho, Some(0.25));
    }
}
