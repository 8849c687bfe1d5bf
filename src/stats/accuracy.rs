//! The paper's analytic accuracy and bias formulas (Shoham & Ligett, "Differentially
//! private ratio statistics"), as plain functions of real numbers.
//!
//! All formulas here are for the paper's **continuous** mechanisms (Laplace noise of scale
//! `2/ε` on each count, and so on); the crate itself adds discrete noise (see
//! [`super::mechanism`]), whose accuracy differs from these closed forms by the small
//! discretisation effects documented there. The planning function that uses the
//! variance of the noise the crate really adds is in [`super::planning`].
//!
//! Conventions: invalid parameters (a non-finite value, `ε <= 0`, `α <= 0`, a negative count,
//! ...) give `Err`; inputs for which a quantity is undefined (`α >= Z`, `Y = 0` in `Z = X/Y`,
//! ...) give `Ok(None)`. No function returns a number it has not computed accurately.
//!
//! Errors found in the paper while checking its formulas numerically (the tests in this file
//! reproduce each of them):
//! * Claim `Lap_ratio_cum_prob` computes `P(X₁ < a X₂)`, not `P(X₁/X₂ < a)`: the proof
//!   conditions on `X₂ = x₂` and uses `P(X₁ < a x₂)` also for `x₂ < 0`, where dividing by `x₂`
//!   flips the inequality. The correct CDF adds `½e^{-μ₂/b} − e^{-(μ₁+μ₂)/b}/(2(a+1))`, see
//!   [`laplace_ratio_cdf`]. Consequently the `β` of Claim `acc_Alg_count_no_max` overstates the
//!   true failure probability by `½e^{-ε(X+Y)/2}(1/(1+Z−α) − 1/(1+Z+α))`, see
//!   [`noisy_counts_accuracy_beta`].
//! * In Claim `bias_ratio_counts` the approximation's integral has a simple pole at
//!   `u = −εY/2` inside `(−∞, 0)`; it is finite only as a Cauchy principal value. The sign of the
//!   integrand is stated inconsistently: the claim has `−e^u` (correct: the approximation then
//!   tends to `Z`), while the proof's last steps have `+e^u` and conclude `≈ −4/(ε²Y²)`, which
//!   would make the expectation tend to `−Z`. The proof's first approximation line also writes
//!   `−(ε/4)e^{-εY/2}Ei(εY/2)` where the exact expression has `+`. See
//!   [`noisy_ratio_expectation_approx`].

use std::cell::Cell;

/// Euler–Mascheroni constant γ.
const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;

fn check_finite(name: &str, value: f64) -> Result<(), String> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(format!("{name} must be a finite number, got {value}"))
    }
}

pub(super) fn check_positive(name: &str, value: f64) -> Result<(), String> {
    check_finite(name, value)?;
    if value > 0.0 {
        Ok(())
    } else {
        Err(format!("{name} must be > 0, got {value}"))
    }
}

fn check_non_negative(name: &str, value: f64) -> Result<(), String> {
    check_finite(name, value)?;
    if value >= 0.0 {
        Ok(())
    } else {
        Err(format!("{name} must be >= 0, got {value}"))
    }
}

/// `(1 − e^{−x})/x` for `x >= 0`, with its limit 1 at 0; accurate for every `x`.
fn one_minus_exp_neg_over(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        -(-x).exp_m1() / x
    }
}

/// `P(X₁ < a X₂)` for independent `X₁ ~ Lap(m1, b)`, `X₂ ~ Lap(m2, b)`, `a > 0`, in the case
/// `k = (m1/a − m2)/b >= 0`. The paper's case-1 expression (Claim Lap_ratio_cum_prob)
/// `[a²e^{−k} − e^{−ak}] / (2(a²−1))` rearranged as
/// `e^{−k}/2 + (e^{−k} − e^{−ak}) / (2(a²−1))` and
/// `(e^{−k} − e^{−ak})/(a−1) = e^{−min(1,a)k} · k · (1 − e^{−|a−1|k})/(|a−1|k)`,
/// which has no cancellation and no singularity at `a = 1` (where it is `e^{−k}(2+k)/4`).
fn linear_lower_case1(a: f64, m1: f64, m2: f64, b: f64) -> f64 {
    let k = (m1 / a - m2) / b;
    debug_assert!(k >= 0.0);
    if !k.is_finite() {
        return 0.0;
    }
    let term = (-(a.min(1.0)) * k).exp() * k * one_minus_exp_neg_over((a - 1.0).abs() * k);
    0.5 * (-k).exp() + term / (2.0 * (a + 1.0))
}

/// `(P(X₁/X₂ < a), P(X₁/X₂ > a))`, both computed without `1 − p` cancellation in the tail
/// that is small. See [`laplace_ratio_cdf`].
fn laplace_ratio_tails(a: f64, m1: f64, m2: f64, b: f64) -> (f64, f64) {
    // P(X₁ < aX₂) and P(X₁ > aX₂): the paper's formula, each case evaluated on its own side.
    let (lin_lower, lin_upper) = if m1 / a >= m2 {
        let lower = linear_lower_case1(a, m1, m2, b);
        (lower, 1.0 - lower)
    } else {
        // P(X₁ > aX₂) = P(X₂ < X₁/a): case 1 with the roles swapped.
        let upper = linear_lower_case1(1.0 / a, m2, m1, b);
        (1.0 - upper, upper)
    };
    // Correction for X₂ < 0, where X₁/X₂ < a ⟺ X₁ > aX₂:
    // P(X₁/X₂ < a) = P(X₁ < aX₂) + P(X₂ < 0) − 2 P(X₁ < aX₂, X₂ < 0), with
    // P(X₂ < 0) = ½e^{−m2/b} and P(X₁ < aX₂, X₂ < 0) = e^{−(m1+m2)/b} / (4(a+1)).
    let correction = 0.5 * (-m2 / b).exp() * (1.0 - (-m1 / b).exp() / (a + 1.0));
    (
        (lin_lower + correction).clamp(0.0, 1.0),
        (lin_upper - correction).clamp(0.0, 1.0),
    )
}

/// `P(X₁/X₂ < a)` for independent `X₁ ~ Lap(μ₁, b)`, `X₂ ~ Lap(μ₂, b)` and `a > 0`
/// (paper, Claim `Lap_ratio_cum_prob`, proofs appendix), **corrected**.
///
/// The paper's two-case formula is `P(X₁ < a X₂)`; it equals `P(X₁/X₂ < a)` only when
/// `X₂ > 0`. For `X₂ < 0` the event is `X₁ > aX₂`, so the correct CDF is
/// `P(X₁ < aX₂) + ½e^{−μ₂/b} − e^{−(μ₁+μ₂)/b}/(2(a+1))` (the last two terms are
/// `P(X₂ < 0) − 2P(X₁ < aX₂, X₂ < 0)`). Checked against numerical integration and Monte Carlo
/// in the tests; e.g. `a = 0.5, μ₁ = μ₂ = 1, b = 4`: true 0.64575, paper 0.45853.
///
/// The removable singularity of the paper's `1/(a−1)` terms at `a = 1` is removed analytically
/// (see `linear_lower_case1`), so `a = 1` and `a` near 1 are exact to rounding.
///
/// Valid for `μ₁, μ₂ >= 0` (the derivation only needs the means non-negative; the paper states
/// `> 0`). `Err` for non-finite inputs, `a <= 0`, `b <= 0` or a negative mean.
pub fn laplace_ratio_cdf(a: f64, mu1: f64, mu2: f64, b: f64) -> Result<Option<f64>, String> {
    check_positive("a", a)?;
    check_non_negative("mu1", mu1)?;
    check_non_negative("mu2", mu2)?;
    check_positive("b", b)?;
    let (lower, _) = laplace_ratio_tails(a, mu1, mu2, b);
    Ok(lower.is_finite().then_some(lower))
}

/// A failure probability that must lie in `[0, 1]`: tiny rounding excursions are clamped,
/// anything else (which would be a bug) becomes `None` rather than a wrong number.
fn probability(p: f64) -> Option<f64> {
    const SLACK: f64 = 1e-12;
    (p.is_finite() && (-SLACK..=1.0 + SLACK).contains(&p)).then(|| p.clamp(0.0, 1.0))
}

/// The `β` of Claim `acc_Alg_count_no_max`: `P(|X̃/Ỹ − Z| >= α)` for LaplaceNoisedCounts,
/// `X̃ = X + Lap(2/ε)`, `Ỹ = Y + Lap(2/ε)`, `Z = X/Y`, `0 < α < Z`.
///
/// Computed as `P(X̃/Ỹ <= Z−α) + P(X̃/Ỹ >= Z+α)` with the corrected ratio CDF of
/// [`laplace_ratio_cdf`] (both tails evaluated directly, so tiny `β` keep their relative
/// precision, and `Z ± α` equal or near 1 are handled). This is the exact failure probability;
/// the paper's closed form is larger by `½e^{−ε(X+Y)/2}(1/(1+Z−α) − 1/(1+Z+α))` because its
/// Claim `Lap_ratio_cum_prob` ignores `Ỹ < 0` (negligible unless `ε(X+Y)` is small; e.g.
/// `X=2, Y=1, ε=0.5, α=0.5`: exact 0.93021, paper 0.95720, confirmed by Monte Carlo in the
/// tests). Apart from that term the paper's formula and this one agree to rounding.
///
/// `Ok(None)` when `α >= Z` (the claim's hypothesis fails) or `Y = 0`. `Err` for a negative or
/// non-finite count, `ε` not finite and `> 0`, `α` not finite and `> 0`.
pub fn noisy_counts_accuracy_beta(
    x: f64,
    y: f64,
    epsilon: f64,
    alpha: f64,
) -> Result<Option<f64>, String> {
    check_non_negative("x", x)?;
    check_non_negative("y", y)?;
    check_positive("epsilon", epsilon)?;
    check_positive("alpha", alpha)?;
    if y == 0.0 {
        return Ok(None);
    }
    let z = x / y;
    if alpha >= z {
        return Ok(None);
    }
    let b = 2.0 / epsilon;
    let (below, _) = laplace_ratio_tails(z - alpha, x, y, b);
    let (_, above) = laplace_ratio_tails(z + alpha, x, y, b);
    Ok(probability(below + above))
}

/// The `β` of Claim `acc_exp_naive` for NoisedLog (`Z̃ = Z·e^{Lap(log 2/ε)}`), `0 < α < Z`:
/// `β = ½(1 + α/Z)^{−ε/log 2} + ½(1 − α/Z)^{ε/log 2}`, the exact `P(|Z̃ − Z| >= α)`.
///
/// `Ok(None)` when `α >= z`. `Err` for a negative or non-finite `z`, invalid `ε` or `α`.
pub fn noised_log_accuracy_beta(z: f64, epsilon: f64, alpha: f64) -> Result<Option<f64>, String> {
    check_non_negative("z", z)?;
    check_positive("epsilon", epsilon)?;
    check_positive("alpha", alpha)?;
    if alpha >= z {
        return Ok(None);
    }
    let r = alpha / z;
    let e = epsilon / std::f64::consts::LN_2;
    Ok(probability(
        0.5 * (-e * r.ln_1p()).exp() + 0.5 * (e * (-r).ln_1p()).exp(),
    ))
}

/// The `β` of Claim `naive_lap_sample_acc` for NaiveRelativeRisk (`Z̃ = Z + Lap(Δ/ε)`):
/// `β = exp(−αε/Δ)`, the exact `P(|Z̃ − Z| > α)`, with the sensitivity `Δ = max(n_x/2, 1)`
/// the release uses ([`crate::stats::methods::naive_sensitivity`]): the claim's
/// `exp(−2αε/n_x)` for `n_x ≥ 2`.
///
/// `Err` for `n_x` not finite and `> 0`, invalid `ε` or `α`.
pub fn naive_accuracy_beta(n_x: f64, epsilon: f64, alpha: f64) -> Result<f64, String> {
    check_positive("n_x", n_x)?;
    check_positive("epsilon", epsilon)?;
    check_positive("alpha", alpha)?;
    Ok((-alpha * epsilon / (n_x / 2.0).max(1.0)).exp())
}

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
fn integrate_pieces<F: Fn(f64) -> f64>(f: &F, points: &[f64], rel_tol: f64) -> Option<f64> {
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
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;
    use rand_distr::{Distribution, Exp1};

    fn laplace(rng: &mut ChaCha20Rng, mu: f64, b: f64) -> f64 {
        let e1: f64 = Exp1.sample(rng);
        let e2: f64 = Exp1.sample(rng);
        mu + b * (e1 - e2)
    }

    fn laplace_cdf(x: f64, mu: f64, b: f64) -> f64 {
        if x < mu {
            0.5 * ((x - mu) / b).exp()
        } else {
            1.0 - 0.5 * (-(x - mu) / b).exp()
        }
    }

    fn laplace_pdf(x: f64, mu: f64, b: f64) -> f64 {
        (-(x - mu).abs() / b).exp() / (2.0 * b)
    }

    /// Integrates over `[lo, hi]` split at `breaks` (those inside) and geometrically spaced
    /// points out to the ends, so features at scale `b` near the breaks are resolved.
    fn quad(f: &dyn Fn(f64) -> f64, lo: f64, hi: f64, breaks: &[f64], b: f64) -> f64 {
        let mut pts = vec![lo, hi];
        for &x in breaks {
            for k in 0..40 {
                let d = b * 1e-3 * 2f64.powi(k);
                pts.push(x - d);
                pts.push(x + d);
            }
            pts.push(x);
        }
        pts.retain(|p| *p >= lo && *p <= hi);
        pts.sort_by(|a, b| a.partial_cmp(b).unwrap());
        pts.dedup();
        integrate_pieces(&f, &pts, 1e-12).expect("quadrature converges")
    }

    /// `P(X₁/X₂ < a)` by integrating `f₂(x₂)·P(X₁/x₂ < a)` over `x₂` (60 scales each side of the
    /// kinks; the remaining mass is below `e^{-60}`).
    fn ratio_cdf_by_quadrature(a: f64, m1: f64, m2: f64, b: f64) -> f64 {
        let f = |x2: f64| {
            let conditional = if x2 > 0.0 {
                laplace_cdf(a * x2, m1, b)
            } else {
                1.0 - laplace_cdf(a * x2, m1, b)
            };
            laplace_pdf(x2, m2, b) * conditional
        };
        let lo = m2.min(0.0).min(m1 / a) - 60.0 * b;
        let hi = m2.max(m1 / a) + 60.0 * b;
        quad(&f, lo, hi, &[0.0, m2, m1 / a], b)
    }

    /// The paper's literal Claim Lap_ratio_cum_prob (two cases).
    fn paper_ratio_cdf(a: f64, m1: f64, m2: f64, b: f64) -> f64 {
        if m1 / a >= m2 {
            -1.0 / (2.0 * (a + 1.0) * (a - 1.0)) * ((m2 * a - m1) / b).exp()
                + a * a / (2.0 * (a + 1.0) * (a - 1.0)) * ((m2 - m1 / a) / b).exp()
        } else {
            1.0 + ((m1 / a - m2) / b).exp() * a * a / (2.0 * (a + 1.0) * (1.0 - a))
                - ((m1 - a * m2) / b).exp() / (2.0 * (a + 1.0) * (1.0 - a))
        }
    }

    /// The paper's literal β of Claim acc_Alg_count_no_max.
    fn paper_beta(x: f64, y: f64, eps: f64, alpha: f64) -> f64 {
        let z = x / y;
        let (a1, a2) = (z - alpha, z + alpha);
        (0.5 + 0.5 / (a1 * a1 - 1.0)) * (-eps * alpha * y / (2.0 * a1)).exp()
            + (0.5 + 0.5 / (a2 * a2 - 1.0)) * (-eps * alpha * y / (2.0 * a2)).exp()
            - (z * z + alpha * alpha - 1.0)
                / ((z * z + alpha * alpha - 1.0).powi(2) - 4.0 * alpha * alpha * z * z)
                * (-eps * alpha * y / 2.0).exp()
    }

    fn rel_close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(a.abs())
    }

    #[test]
    fn ratio_cdf_matches_quadrature() {
        for &(a, m1, m2, b) in &[
            (0.5, 1.0, 1.0, 4.0),
            (2.0, 1.0, 1.0, 4.0),
            (0.7, 5.0, 3.0, 2.0),
            (1.3, 5.0, 3.0, 2.0),
            (3.0, 1.0, 2.0, 10.0),
            (0.9, 50.0, 60.0, 2.0),
            (1.1, 60.0, 50.0, 0.5),
            (0.25, 0.0, 3.0, 1.0), // μ₁ = 0
            (4.0, 2.0, 0.0, 1.0),  // μ₂ = 0
            (1e-3, 7.0, 2.0, 3.0),
            (2.0, 2.0, 1.0, 1.5), // μ₁/a = μ₂: the boundary of the paper's two cases
            (1.0 + 1e-7, 5.0, 3.0, 2.0), // next to the removable singularity at a = 1
            (1.0 - 1e-7, 3.0, 5.0, 2.0),
            (1.0, 4.0, 4.0, 1.0),
        ] {
            let got = laplace_ratio_cdf(a, m1, m2, b).unwrap().unwrap();
            let want = ratio_cdf_by_quadrature(a, m1, m2, b);
            // Quadrature is accurate to ~1e-12; the closed form to rounding.
            assert!(
                (got - want).abs() < 1e-9,
                "{a} {m1} {m2} {b}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn ratio_cdf_at_and_near_one() {
        for &(m1, m2, b) in &[
            (5.0, 3.0, 2.0),
            (3.0, 5.0, 2.0),
            (4.0, 4.0, 1.0),
            (100.0, 90.0, 4.0),
        ] {
            let at_one = laplace_ratio_cdf(1.0, m1, m2, b).unwrap().unwrap();
            // At a = 1: P(X₁ < X₂) for the difference of two Laplace variables,
            // P(D < −t) = e^{−t/b}(2 + t/b)/4 for t = μ₁ − μ₂ >= 0, plus the X₂ < 0 correction.
            let t = (m1 - m2).abs() / b;
            let diff_tail = (-t).exp() * (2.0 + t) / 4.0;
            let lin = if m1 >= m2 { diff_tail } else { 1.0 - diff_tail };
            let want = lin + 0.5 * (-m2 / b).exp() - (-(m1 + m2) / b).exp() / 4.0;
            assert!((at_one - want).abs() < 1e-14, "{at_one} vs {want}");
            assert!((at_one - ratio_cdf_by_quadrature(1.0, m1, m2, b)).abs() < 1e-9);
            // The density of the ratio is bounded near 1, so the CDF is Lipschitz there: steps of
            // 1e-9..1e-6 move it by at most a few times that, with no 1/(a−1) blow-up.
            for d in [1e-12, 1e-9, 1e-7, 1e-6] {
                for a in [1.0 - d, 1.0 + d] {
                    let v = laplace_ratio_cdf(a, m1, m2, b).unwrap().unwrap();
                    assert!(
                        (v - at_one).abs() < 100.0 * d.max(1e-15),
                        "{a}: {v} vs {at_one}"
                    );
                }
            }
            // The paper's literal form is 0/0 at a = 1 and loses digits next to it.
            assert!(paper_ratio_cdf(1.0, m1, m2, b).is_nan());
        }
    }

    #[test]
    fn ratio_cdf_matches_monte_carlo_and_paper_formula_does_not() {
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let n = 400_000;
        for &(a, m1, m2, b) in &[
            (0.5, 1.0, 1.0, 4.0),
            (1.0, 3.0, 2.0, 2.0),
            (2.5, 4.0, 1.0, 2.0),
        ] {
            let hits = (0..n)
                .filter(|_| laplace(&mut rng, m1, b) / laplace(&mut rng, m2, b) < a)
                .count();
            let p_hat = hits as f64 / n as f64;
            let got = laplace_ratio_cdf(a, m1, m2, b).unwrap().unwrap();
            // Binomial standard error sqrt(p(1−p)/n) ≈ 7.6e-4 at most; 5 SE.
            let se = (got * (1.0 - got) / n as f64).sqrt();
            assert!((p_hat - got).abs() < 5.0 * se, "{a}: MC {p_hat} vs {got}");
            if a != 1.0 {
                let paper = paper_ratio_cdf(a, m1, m2, b);
                assert!(
                    (p_hat - paper).abs() > 20.0 * se,
                    "{a}: paper {paper} ≈ MC {p_hat}"
                );
            }
        }
    }

    #[test]
    fn ratio_cdf_rejects_invalid_input() {
        assert!(laplace_ratio_cdf(0.0, 1.0, 1.0, 1.0).is_err());
        assert!(laplace_ratio_cdf(-1.0, 1.0, 1.0, 1.0).is_err());
        assert!(laplace_ratio_cdf(1.0, -1.0, 1.0, 1.0).is_err());
        assert!(laplace_ratio_cdf(1.0, 1.0, -1.0, 1.0).is_err());
        assert!(laplace_ratio_cdf(1.0, 1.0, 1.0, 0.0).is_err());
        assert!(laplace_ratio_cdf(f64::NAN, 1.0, 1.0, 1.0).is_err());
        assert!(laplace_ratio_cdf(1.0, f64::INFINITY, 1.0, 1.0).is_err());
    }

    #[test]
    fn beta_matches_monte_carlo_where_the_paper_formula_is_off() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let n = 400_000;
        for &(x, y, eps, alpha) in &[
            (2.0, 1.0, 0.5, 0.5),
            (10.0, 8.0, 0.3, 0.4),
            (30.0, 20.0, 1.0, 0.3),
        ] {
            let z = x / y;
            let b = 2.0 / eps;
            let fails = (0..n)
                .filter(|_| {
                    let r = laplace(&mut rng, x, b) / laplace(&mut rng, y, b);
                    (r - z).abs() >= alpha
                })
                .count();
            let p_hat = fails as f64 / n as f64;
            let beta = noisy_counts_accuracy_beta(x, y, eps, alpha)
                .unwrap()
                .unwrap();
            // 5 binomial standard errors.
            let se = (beta * (1.0 - beta) / n as f64).sqrt();
            assert!(
                (p_hat - beta).abs() < 5.0 * se,
                "{x} {y}: MC {p_hat} vs {beta}"
            );
            // The paper's closed form is larger by exactly the X̃/Ỹ sign term ...
            let gap = 0.5
                * (-eps * (x + y) / 2.0).exp()
                * (1.0 / (1.0 + z - alpha) - 1.0 / (1.0 + z + alpha));
            let paper = paper_beta(x, y, eps, alpha);
            assert!(
                (paper - gap - beta).abs() < 1e-12,
                "{paper} - {gap} vs {beta}"
            );
            // ... which Monte Carlo resolves at small counts (2, 1): gap 0.027 ≈ 38 SE.
            if x == 2.0 {
                assert!((p_hat - paper).abs() > 20.0 * se);
            }
        }
    }

    #[test]
    fn beta_matches_quadrature_including_z_plus_minus_alpha_at_one() {
        for &(x, y, eps, alpha) in &[
            (3.0, 2.0, 1.0, 0.5),         // Z − α = 1 exactly
            (3.0, 4.0, 1.0, 0.25),        // Z + α = 1 exactly
            (3.0, 2.0, 1.0, 0.5 + 1e-9),  // Z − α just below 1
            (3.0, 4.0, 1.0, 0.25 - 1e-9), // Z + α just below 1
            (3.0, 4.0, 1.0, 0.25 + 3e-7), // Z + α just above 1
            (5.0, 4.0, 0.7, 0.9),
            (40.0, 100.0, 0.2, 0.1),
        ] {
            let z = x / y;
            let b = 2.0 / eps;
            let want = ratio_cdf_by_quadrature(z - alpha, x, y, b) + 1.0
                - ratio_cdf_by_quadrature(z + alpha, x, y, b);
            let got = noisy_counts_accuracy_beta(x, y, eps, alpha)
                .unwrap()
                .unwrap();
            assert!(
                (got - want).abs() < 1e-9,
                "{x} {y} {alpha}: {got} vs {want}"
            );
        }
        // At Z ± α = 1 the paper's literal formula divides by zero; ours is finite.
        assert!(!paper_beta(3.0, 2.0, 1.0, 0.5).is_finite());
    }

    #[test]
    fn beta_keeps_precision_when_tiny() {
        // X = Y = 1000, ε = 1, α = 0.1: β ≈ e^{−45}; the sign term e^{−1000} is negligible, so
        // the paper's formula (exact here, a far from 1) is the reference.
        let got = noisy_counts_accuracy_beta(1000.0, 1000.0, 1.0, 0.1)
            .unwrap()
            .unwrap();
        let want = paper_beta(1000.0, 1000.0, 1.0, 0.1);
        assert!(want > 0.0 && want < 1e-18);
        assert!(rel_close(got, want, 1e-9), "{got} vs {want}");
    }

    #[test]
    fn beta_edge_cases() {
        assert_eq!(
            noisy_counts_accuracy_beta(3.0, 2.0, 1.0, 1.5).unwrap(),
            None
        ); // α = Z
        assert_eq!(
            noisy_counts_accuracy_beta(3.0, 2.0, 1.0, 2.0).unwrap(),
            None
        ); // α > Z
        assert_eq!(
            noisy_counts_accuracy_beta(0.0, 2.0, 1.0, 0.1).unwrap(),
            None
        ); // Z = 0
        assert_eq!(
            noisy_counts_accuracy_beta(3.0, 0.0, 1.0, 0.1).unwrap(),
            None
        ); // no Z
        assert!(noisy_counts_accuracy_beta(-1.0, 2.0, 1.0, 0.1).is_err());
        assert!(noisy_counts_accuracy_beta(3.0, -2.0, 1.0, 0.1).is_err());
        assert!(noisy_counts_accuracy_beta(3.0, 2.0, 0.0, 0.1).is_err());
        assert!(noisy_counts_accuracy_beta(3.0, 2.0, -1.0, 0.1).is_err());
        assert!(noisy_counts_accuracy_beta(3.0, 2.0, f64::NAN, 0.1).is_err());
        assert!(noisy_counts_accuracy_beta(3.0, 2.0, f64::INFINITY, 0.1).is_err());
        assert!(noisy_counts_accuracy_beta(3.0, 2.0, 1.0, 0.0).is_err());
        assert!(noisy_counts_accuracy_beta(3.0, 2.0, 1.0, -0.1).is_err());
        // β decreases in ε and in the counts (Corollary asym_case_counts).
        let b1 = noisy_counts_accuracy_beta(30.0, 20.0, 0.5, 0.2)
            .unwrap()
            .unwrap();
        let b2 = noisy_counts_accuracy_beta(30.0, 20.0, 1.0, 0.2)
            .unwrap()
            .unwrap();
        let b3 = noisy_counts_accuracy_beta(300.0, 200.0, 1.0, 0.2)
            .unwrap()
            .unwrap();
        assert!(b1 > b2 && b2 > b3 && b3 > 0.0);
    }

    #[test]
    fn noised_log_beta_matches_laplace_cdf_and_monte_carlo() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let n = 400_000;
        for &(z, eps, alpha) in &[(2.0, 1.0, 0.5), (0.5, 0.3, 0.1), (1.0, 3.0, 0.9)] {
            let beta = noised_log_accuracy_beta(z, eps, alpha).unwrap().unwrap();
            let b = std::f64::consts::LN_2 / eps;
            // Independent: P(L >= ln(1+α/z)) + P(L <= ln(1−α/z)) from the Laplace CDF.
            let direct = 1.0 - laplace_cdf((1.0 + alpha / z).ln(), 0.0, b)
                + laplace_cdf((1.0 - alpha / z).ln(), 0.0, b);
            assert!((beta - direct).abs() < 1e-14, "{beta} vs {direct}");
            let fails = (0..n)
                .filter(|_| (z * laplace(&mut rng, 0.0, b).exp() - z).abs() >= alpha)
                .count();
            let p_hat = fails as f64 / n as f64;
            // 5 binomial standard errors.
            let se = (beta * (1.0 - beta) / n as f64).sqrt();
            assert!((p_hat - beta).abs() < 5.0 * se, "MC {p_hat} vs {beta}");
        }
        assert_eq!(noised_log_accuracy_beta(2.0, 1.0, 2.0).unwrap(), None);
        assert_eq!(noised_log_accuracy_beta(2.0, 1.0, 3.0).unwrap(), None);
        assert_eq!(noised_log_accuracy_beta(0.0, 1.0, 0.1).unwrap(), None);
        assert!(noised_log_accuracy_beta(-1.0, 1.0, 0.1).is_err());
        assert!(noised_log_accuracy_beta(2.0, 0.0, 0.1).is_err());
        assert!(noised_log_accuracy_beta(2.0, f64::NAN, 0.1).is_err());
        assert!(noised_log_accuracy_beta(2.0, 1.0, 0.0).is_err());
    }

    #[test]
    fn naive_beta_matches_monte_carlo() {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let n = 400_000;
        for &(n_x, eps, alpha) in &[(150.0, 1.0, 50.0), (10.0, 0.5, 3.0)] {
            let beta = naive_accuracy_beta(n_x, eps, alpha).unwrap();
            let b = n_x / (2.0 * eps);
            let fails = (0..n)
                .filter(|_| laplace(&mut rng, 0.0, b).abs() > alpha)
                .count();
            let p_hat = fails as f64 / n as f64;
            // 5 binomial standard errors.
            let se = (beta * (1.0 - beta) / n as f64).sqrt();
            assert!((p_hat - beta).abs() < 5.0 * se, "MC {p_hat} vs {beta}");
        }
        assert!(
            (naive_accuracy_beta(150.0, 1.0, 0.1).unwrap() - (-0.2f64 / 150.0).exp()).abs() < 1e-15
        );
        assert!(naive_accuracy_beta(0.0, 1.0, 0.1).is_err());
        assert!(naive_accuracy_beta(150.0, -1.0, 0.1).is_err());
        assert!(naive_accuracy_beta(150.0, 1.0, -0.1).is_err());
        assert!(naive_accuracy_beta(f64::INFINITY, 1.0, 0.1).is_err());
    }

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
