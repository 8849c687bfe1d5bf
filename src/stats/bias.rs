//! The paper's bias formulas for the noisy-counts ratio (Shoham & Ligett, Claim
//! `bias_ratio_counts`): the exact expectation `E[X̃/max(Ỹ, 1)]` of the ratio of Laplace-noised
//! counts, its bias, and the paper's approximation, as plain functions of real numbers.
//!
//! Like [`super::accuracy`], these are for the paper's continuous Laplace noise of scale `2/ε`
//! and follow its conventions (`Err` for invalid parameters, `Ok(None)` where undefined).
//!
//! An error found in the paper while checking it numerically (the tests reproduce it):
//! * In Claim `bias_ratio_counts` the approximation's integral has a simple pole at
//!   `u = −εY/2` inside `(−∞, 0)`; it is finite only as a Cauchy principal value. The sign of the
//!   integrand is stated inconsistently: the claim has `−e^u` (correct: the approximation then
//!   tends to `Z`), while the proof's last steps have `+e^u` and conclude `≈ −4/(ε²Y²)`, which
//!   would make the expectation tend to `−Z`. The proof's first approximation line also writes
//!   `−(ε/4)e^{-εY/2}Ei(εY/2)` where the exact expression has `+`. See
//!   [`noisy_ratio_expectation_approx`].

use super::accuracy::{check_non_negative, check_positive};
use std::cell::Cell;

/// Euler–Mascheroni constant γ.
const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;

/// `e^{−x} Ei(x)` for `x > 0`, without overflow: the convergent series
/// `Ei(x) = γ + ln x + Σ x^k/(k·k!)` (all terms positive) for `x <= 40`, the asymptotic series
/// `Σ k!/x^{k+1}` truncated at its smallest term (relative error below `1e-16`) above.
fn scaled_ei(x: f64) -> f64 {
    debug_assert!(x > 0.0);
    if x <= 40.0 {
        let mut term = 1.0; // x^k / k!
        let mut sum = 0.0;
        for k in 1..1000 {
            term *= x / k as f64;
            let add = term / k as f64;
            sum += add;
            if add <= sum * 1e-17 {
                break;
            }
        }
        (-x).exp() * (EULER_GAMMA + x.ln() + sum)
    } else {
        let mut term = 1.0 / x;
        let mut sum = term;
        for k in 1..1000 {
            let next = term * k as f64 / x;
            if next >= term || next <= sum * 1e-17 {
                break;
            }
            term = next;
            sum += term;
        }
        sum
    }
}

/// `e^{x} E₁(x)` for `x > 0`, without overflow: `statrs`' `E₁` (series) for `x <= 1`, and for
/// `x > 1` the same continued fraction `statrs` uses (modified Lentz) without the final factor
/// `e^{−x}`, which underflows for large `x`.
fn scaled_e1(x: f64) -> f64 {
    debug_assert!(x > 0.0);
    if x <= 1.0 {
        let e1 = statrs::function::exponential::integral(x, 1).unwrap_or(f64::NAN);
        return x.exp() * e1;
    }
    const TINY: f64 = 1e-300;
    let mut b = x + 1.0;
    let mut c = 1.0 / TINY;
    let mut d = 1.0 / b;
    let mut h = d;
    for i in 1..10_000 {
        let a = -((i * i) as f64);
        b += 2.0;
        d = 1.0 / (a * d + b);
        c = b + a / c;
        let del = c * d;
        h *= del;
        if (del - 1.0).abs() <= 4.0 * f64::EPSILON {
            return h;
        }
    }
    f64::NAN
}

/// `E[1/max(Y + Lap(2/ε), 1)]` for `Y >= 0` (Claim `bias_ratio_counts`), in the stable form
/// described at [`noisy_ratio_expectation`].
fn expected_inverse_floored(y: f64, epsilon: f64) -> f64 {
    let c = epsilon * y / 2.0;
    let c1 = epsilon / 2.0;
    if y >= 1.0 {
        // ½e^{ε(1−Y)/2} + (ε/4)[e^{−c}(Ei(c) − Ei(c₁)) + e^{c}E₁(c)],
        // e^{−c}Ei(c₁) = e^{c₁−c}·(e^{−c₁}Ei(c₁)).
        let d = (c1 - c).exp();
        let middle = if y == 1.0 {
            0.0
        } else {
            scaled_ei(c) - d * scaled_ei(c1)
        };
        0.5 * d + epsilon / 4.0 * (middle + scaled_e1(c))
    } else {
        // Y < 1 (outside the paper's Y ∈ ℕ⁺): P(Ỹ < 1) = 1 − ½e^{−ε(1−Y)/2} and only the tail
        // ∫₁^∞ (ε/4x)e^{−ε(x−Y)/2}dx = (ε/4)e^{c−c₁}·(e^{c₁}E₁(c₁)) remains.
        let d = (c - c1).exp();
        1.0 - 0.5 * d + epsilon / 4.0 * d * scaled_e1(c1)
    }
}

/// `E[X̃ / max(Ỹ, 1)]` for LaplaceNoisedCounts (`X̃ = X + Lap(2/ε)`, `Ỹ = Y + Lap(2/ε)`),
/// Claim `bias_ratio_counts`:
/// `X(½e^{ε(1−Y)/2} + (ε/4)e^{−εY/2}(Ei(εY/2) − Ei(ε/2)) − (ε/4)e^{εY/2}Ei(−εY/2))`
/// (verified: the paper's exact expression is correct for `Y >= 1`).
///
/// Evaluated with `e^{−u}Ei(u)` and `e^{u}E₁(u) = −e^{u}Ei(−u)` computed directly
/// (series / asymptotic series / continued fraction), so no `e^{εY/2}` is ever formed and the
/// result stays accurate for any `εY` (e.g. `ε = 10, Y = 1000`: `≈ (X/Y)(1 + 8/(εY)²)`).
/// For `0 <= Y < 1` (not covered by the paper) the same derivation gives
/// `X(1 − ½e^{−ε(1−Y)/2} + (ε/4)e^{εY/2}E₁(ε/2))`.
///
/// `Err` for a negative or non-finite count or invalid `ε`; `Ok(None)` only if the special
/// functions fail to converge (not expected for finite inputs).
pub fn noisy_ratio_expectation(x: f64, y: f64, epsilon: f64) -> Result<Option<f64>, String> {
    check_non_negative("x", x)?;
    check_non_negative("y", y)?;
    check_positive("epsilon", epsilon)?;
    let inverse = expected_inverse_floored(y, epsilon);
    let value = x * inverse;
    Ok((value.is_finite() && inverse > 0.0).then_some(value))
}

/// The bias `E[X̃/max(Ỹ, 1)] − X/Y` of Claim `bias_ratio_counts` (see
/// [`noisy_ratio_expectation`]). `Ok(None)` when `Y = 0` (no `X/Y`).
pub fn noisy_ratio_bias(x: f64, y: f64, epsilon: f64) -> Result<Option<f64>, String> {
    let expectation = noisy_ratio_expectation(x, y, epsilon)?;
    if y == 0.0 {
        return Ok(None);
    }
    Ok(expectation.map(|e| e - x / y))
}

/// Adaptive Simpson quadrature with Richardson correction; `None` when the evaluation budget
/// runs out or a value is not finite.
fn adaptive_simpson<F: Fn(f64) -> f64>(f: &F, a: f64, b: f64, rel_tol: f64) -> Option<f64> {
    #[allow(clippy::too_many_arguments)]
    fn recurse<F: Fn(f64) -> f64>(
        f: &F,
        (a, fa): (f64, f64),
        (m, fm): (f64, f64),
        (b, fb): (f64, f64),
        whole: f64,
        tol: f64,
        depth: u32,
        budget: &Cell<u32>,
    ) -> Option<f64> {
        let (lm, rm) = (0.5 * (a + m), 0.5 * (m + b));
        let (flm, frm) = (f(lm), f(rm));
        budget.set(budget.get().checked_sub(2)?);
        let left = (m - a) / 6.0 * (fa + 4.0 * flm + fm);
        let right = (b - m) / 6.0 * (fm + 4.0 * frm + fb);
        let delta = left + right - whole;
        if !delta.is_finite() {
            return None;
        }
        if depth == 0 || delta.abs() <= 15.0 * tol {
            return Some(left + right + delta / 15.0);
        }
        Some(
            recurse(
                f,
                (a, fa),
                (lm, flm),
                (m, fm),
                left,
                tol / 2.0,
                depth - 1,
                budget,
            )? + recurse(
                f,
                (m, fm),
                (rm, frm),
                (b, fb),
                right,
                tol / 2.0,
                depth - 1,
                budget,
            )?,
        )
    }
    if a == b {
        return Some(0.0);
    }
    let m = 0.5 * (a + b);
    let (fa, fm, fb) = (f(a), f(m), f(b));
    let whole = (b - a) / 6.0 * (fa + 4.0 * fm + fb);
    // The tolerance is relative to the first estimate; an absolute floor stops the recursion on
    // integrands that underflow to 0.
    let tol = (rel_tol * whole.abs()).max(1e-300);
    let budget = Cell::new(2_000_000);
    recurse(f, (a, fa), (m, fm), (b, fb), whole, tol, 50, &budget)
}

/// Integrates `f` over consecutive pieces `points[i]..points[i+1]`.
pub(super) fn integrate_pieces<F: Fn(f64) -> f64>(
    f: &F,
    points: &[f64],
    rel_tol: f64,
) -> Option<f64> {
    points
        .windows(2)
        .map(|w| adaptive_simpson(f, w[0], w[1], rel_tol))
        .sum()
}

/// `J(c) = c² · PV∫_{−∞}^0 −e^u/(u² − c²) du` for `c > 0`, by quadrature.
///
/// Split at `u = −2c`. On `(−∞, −2c]` the integrand is regular: with `u = −2c − s`,
/// `−c²e^{−2c}e^{−s}/((c+s)(3c+s))`. On `[−2c, 0]` (with `δ = u + c`) the principal value is
/// `∫ (H(u) − H(−c))/(u + c) du`, `H(u) = c²e^u/(c − u)`, because `PV∫_{−c}^{c} dδ/δ = 0`;
/// algebraically `(H(u) − H(−c))/δ = c(2c·e^{−c}(e^δ − 1)/δ + e^{−c}) / (2(2c − δ))`, smooth.
fn approx_integral(c: f64) -> Option<f64> {
    let regular = |delta: f64| -> f64 {
        // e^{−c}(e^δ − 1)/δ without overflow or cancellation.
        let e = if delta.abs() < 1.0 {
            let exprel = if delta == 0.0 {
                1.0
            } else {
                delta.exp_m1() / delta
            };
            (-c).exp() * exprel
        } else {
            ((delta - c).exp() - (-c).exp()) / delta
        };
        c * (2.0 * c * e + (-c).exp()) / (2.0 * (2.0 * c - delta))
    };
    // Pieces refine towards δ = c (u = 0), where e^u concentrates when c is large.
    let mut points = vec![-c];
    let mut t = 2.0 * c;
    let mut offsets = Vec::new();
    while t > 0.25 {
        t /= 2.0;
        offsets.push(t);
    }
    points.extend(offsets.iter().map(|t| c - t));
    points.push(c);
    points.dedup();
    let near = integrate_pieces(&regular, &points, 1e-13)?;

    let scale = (-2.0 * c).exp();
    let far = if scale == 0.0 {
        0.0
    } else {
        let tail = |s: f64| -> f64 { -c * c * scale * (-s).exp() / ((c + s) * (3.0 * c + s)) };
        // Geometric pieces resolve the scale c near s = 0; beyond s = 60 the rest is below
        // e^{−60} of the piece.
        let mut points = vec![0.0];
        let mut s = c.min(1.0);
        while s < 60.0 {
            points.push(s);
            s *= 4.0;
        }
        points.push(60.0);
        integrate_pieces(&tail, &points, 1e-13)?
    };
    let total = near + far;
    total.is_finite().then_some(total)
}

/// The paper's large-`εY` approximation of Claim `bias_ratio_counts`:
/// `E[X̃/max(Ỹ,1)] ≈ Z · (ε²Y²/4) · PV∫_{−∞}^0 −e^u / (u² − (εY/2)²) du`, the integral
/// evaluated numerically (adaptive Simpson on a singularity-subtracted integrand, relative
/// accuracy about `1e-12`).
///
/// **Sign.** The claim's statement has `−e^u`; its proof ends with `+e^u` and
/// `≈ −4/(ε²Y²)`. Only `−e^u` approximates the expectation (the integral is then `≈ 4/(ε²Y²)`
/// and the approximation `≈ Z`), so that is what is implemented.
///
/// **Principal value.** The integrand has a pole at `u = −εY/2`; the integral exists only as a
/// Cauchy principal value, which equals `(2/(εY))·(e^{−c}Ei(c) + e^{c}E₁(c))`, `c = εY/2`. So the
/// approximation is exactly the expectation without its `½e^{ε(1−Y)/2}` and
/// `−(ε/4)e^{−εY/2}Ei(ε/2)` terms, and its relative error is `O(e^{−ε(Y−1)/2})`.
///
/// `Ok(None)` when `Y = 0` (no `Z`) or the quadrature fails; `Err` for invalid inputs.
pub fn noisy_ratio_expectation_approx(x: f64, y: f64, epsilon: f64) -> Result<Option<f64>, String> {
    check_non_negative("x", x)?;
    check_non_negative("y", y)?;
    check_positive("epsilon", epsilon)?;
    if y == 0.0 {
        return Ok(None);
    }
    let c = epsilon * y / 2.0;
    if !c.is_finite() {
        return Ok(None);
    }
    Ok(approx_integral(c).map(|j| x / y * j))
}

#[cfg(test)]
// Reference values are quoted with all the digits mpmath gave.
#[allow(clippy::excessive_precision)]
mod tests {
    use super::*;
    use crate::stats::accuracy::tests::{laplace, laplace_cdf, laplace_pdf, quad, rel_close};
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    #[test]
    fn scaled_exponential_integrals_match_references() {
        // Reference values from mpmath (40 digits): (x, Ei(x), E₁(x)).
        for &(x, ei, e1) in &[
            (1e-6, -13.238293893062491243, 13.238295893062491244),
            (0.1, -1.622812813969276675, 1.8229239584193906661),
            (1.0, 1.8951178163559367555, 0.21938393439552027368),
            (10.0, 2492.2289762418777591, 4.1569689296853242774e-6),
            (39.9, 5479032048901901.112, 1.1486162825327060438e-19),
            (40.1, 6657825191607090.8168, 9.3582620007264844105e-20),
            (100.0, 2.7155527448538798219e+41, 3.6835977616820321802e-46),
        ] {
            let s = scaled_ei(x);
            assert!(rel_close(s, (-x).exp() * ei, 1e-13), "Ei({x}): {s}");
            let t = scaled_e1(x);
            assert!(rel_close(t, x.exp() * e1, 1e-13), "E1({x}): {t}");
        }
        // Near the zero of Ei the relative error is meaningless; the absolute one is small.
        assert!((scaled_ei(0.3725) - (-0.3725f64).exp() * -2.8874183188737313115e-5).abs() < 1e-15);
        // Large arguments, where e^x overflows: e^{−x}Ei(x) and e^xE₁(x) ~ (1 ± 1/x + 2/x²)/x.
        let x = 5000.0;
        assert!(rel_close(scaled_ei(x), 0.00020004001600960768769, 1e-14));
        assert!(rel_close(scaled_e1(x), 0.00019996001599040767233, 1e-14));
        // The continued fraction agrees with statrs (which multiplies by e^{−x}) for x > 1.
        for x in [1.0001, 1.5, 3.0, 20.0, 200.0] {
            let statrs = statrs::function::exponential::integral(x, 1).unwrap();
            assert!(rel_close(scaled_e1(x) * (-x).exp(), statrs, 1e-13), "{x}");
        }
    }

    /// `E[X̃/max(Ỹ,1)] = X·(P(Ỹ<1) + ∫₁^∞ f(t)/t dt)` by quadrature.
    fn expectation_by_quadrature(x: f64, y: f64, eps: f64) -> f64 {
        let b = 2.0 / eps;
        let below = laplace_cdf(1.0, y, b);
        let hi = y.max(1.0) + 80.0 * b;
        // Beyond hi the integrand is below e^{−80}/hi.
        let tail = quad(&|t: f64| laplace_pdf(t, y, b) / t, 1.0, hi, &[1.0, y], b);
        x * (below + tail)
    }

    #[test]
    fn expectation_matches_quadrature() {
        for &(x, y, eps) in &[
            (10.0, 5.0, 0.5),
            (3.0, 1.0, 0.2),
            (50.0, 100.0, 1.0),
            (7.0, 2.0, 3.0),
            (2.0, 30.0, 0.1),
            (4.0, 0.0, 1.0),  // Y = 0
            (4.0, 0.5, 1.0),  // 0 < Y < 1
            (4.0, 1.0, 1.0),  // Y = 1
            (5.0, 3.0, 1e-4), // εY tiny, huge noise
            (5.0, 1.5, 0.02), // εY tiny
            (500.0, 400.0, 4.0),
        ] {
            let got = noisy_ratio_expectation(x, y, eps).unwrap().unwrap();
            let want = expectation_by_quadrature(x, y, eps);
            assert!(rel_close(got, want, 1e-9), "{x} {y} {eps}: {got} vs {want}");
        }
        // The values of the paper's Ei expression (scipy.special.expi) at two points.
        assert!(rel_close(
            noisy_ratio_expectation(10.0, 5.0, 0.5).unwrap().unwrap(),
            3.5968431522109547,
            1e-12
        ));
        assert!(rel_close(
            noisy_ratio_expectation(50.0, 100.0, 1.0).unwrap().unwrap(),
            0.5004019435757356,
            1e-12
        ));
    }

    #[test]
    fn expectation_matches_monte_carlo() {
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let n = 400_000;
        for &(x, y, eps) in &[(5.0, 3.0, 0.5), (2.0, 1.0, 2.0)] {
            let b = 2.0 / eps;
            let draws: Vec<f64> = (0..n)
                .map(|_| laplace(&mut rng, x, b) / laplace(&mut rng, y, b).max(1.0))
                .collect();
            let mean = draws.iter().sum::<f64>() / n as f64;
            let sd =
                (draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
            let want = noisy_ratio_expectation(x, y, eps).unwrap().unwrap();
            // 5 standard errors of the mean, sd/sqrt(n) (the ratio has finite variance: the
            // floored denominator is >= 1).
            assert!(
                (mean - want).abs() < 5.0 * sd / (n as f64).sqrt(),
                "MC {mean} vs {want}"
            );
        }
    }

    #[test]
    fn expectation_is_stable_for_large_epsilon_y() {
        // ε = 10, Y = 1000 (c = εY/2 = 5000): e^{c} overflows, yet E = (X/Y)(1 + 2/c² + O(c⁻⁴))
        // (from the asymptotic series of e^{−c}Ei(c) + e^{c}E₁(c) = 2/c + 4/c³ + ...).
        let (x, y, eps) = (700.0, 1000.0, 10.0);
        let e = noisy_ratio_expectation(x, y, eps).unwrap().unwrap();
        let c = eps * y / 2.0;
        assert!(rel_close(e, x / y * (1.0 + 2.0 / (c * c)), 1e-13), "{e}");
        let bias = noisy_ratio_bias(x, y, eps).unwrap().unwrap();
        assert!(rel_close(bias, x / y * 2.0 / (c * c), 1e-4), "{bias}");
        // Even more extreme.
        let e = noisy_ratio_expectation(3.0, 1e9, 1e3).unwrap().unwrap();
        assert!(rel_close(e, 3e-9, 1e-14));
        // And the approximation agrees there.
        let a = noisy_ratio_expectation_approx(x, y, eps).unwrap().unwrap();
        assert!(rel_close(a, x / y * (1.0 + 2.0 / (c * c)), 1e-11), "{a}");
    }

    #[test]
    fn expectation_edge_cases() {
        assert_eq!(noisy_ratio_expectation(0.0, 5.0, 1.0).unwrap(), Some(0.0));
        assert!(noisy_ratio_expectation(-1.0, 5.0, 1.0).is_err());
        assert!(noisy_ratio_expectation(1.0, -5.0, 1.0).is_err());
        assert!(noisy_ratio_expectation(1.0, 5.0, 0.0).is_err());
        assert!(noisy_ratio_expectation(1.0, 5.0, f64::NAN).is_err());
        assert!(noisy_ratio_expectation_approx(1.0, 5.0, f64::INFINITY).is_err());
        assert_eq!(noisy_ratio_expectation_approx(1.0, 0.0, 1.0).unwrap(), None);
        assert_eq!(noisy_ratio_bias(1.0, 0.0, 1.0).unwrap(), None);
        assert!(noisy_ratio_bias(1.0, f64::NAN, 1.0).is_err());
        // Bias is expectation − X/Y.
        let e = noisy_ratio_expectation(10.0, 5.0, 0.5).unwrap().unwrap();
        let bias = noisy_ratio_bias(10.0, 5.0, 0.5).unwrap().unwrap();
        assert!((bias - (e - 2.0)).abs() < 1e-15);
    }

    #[test]
    fn approximation_integral_is_the_principal_value() {
        // J(c) = c²·PV∫ −e^u/(u²−c²) du; references from mpmath, both by PV quadrature and by
        // the identity J = c(e^{−c}Ei(c) + e^{c}E₁(c))/2 (they agree to 20 digits).
        for &(c, j) in &[
            (0.05, 0.0085507211442462671055),
            (0.5, 0.29960223275875018274),
            (1.5, 0.88865476518869688056),
            (5.0, 1.1029710794394734935),
            (50.0, 1.0008038871514714425),
            (5000.0, 1.0000000800000384),
        ] {
            let got = approx_integral(c).unwrap();
            assert!(rel_close(got, j, 1e-10), "J({c}) = {got} vs {j}");
        }
    }

    #[test]
    fn approximation_sign_and_accuracy() {
        // Dropping exactly ½e^{ε(1−Y)/2} − (ε/4)e^{−εY/2}Ei(ε/2) from the exact expectation.
        for &(x, y, eps) in &[
            (10.0, 5.0, 0.5),
            (7.0, 2.0, 3.0),
            (2.0, 30.0, 0.1),
            (50.0, 100.0, 1.0),
        ] {
            let exact = noisy_ratio_expectation(x, y, eps).unwrap().unwrap();
            let approx = noisy_ratio_expectation_approx(x, y, eps).unwrap().unwrap();
            let d = (eps * (1.0 - y) / 2.0).exp();
            let dropped = x * d * (0.5 - eps / 4.0 * scaled_ei(eps / 2.0));
            assert!(
                (exact - approx - dropped).abs() < 1e-10 * exact,
                "{x} {y} {eps}"
            );
            // With the claim's −e^u the approximation is positive and near Z for large εY; the
            // proof's +e^u would give its negative.
            assert!(approx > 0.0);
        }
        let (x, y) = (50.0, 100.0);
        let approx = noisy_ratio_expectation_approx(x, y, 1.0).unwrap().unwrap();
        assert!((approx / (x / y) - 1.0).abs() < 1e-3);
    }
}
