//! The paper's analytic accuracy formulas (Shoham & Ligett, "Differentially private ratio
//! statistics"): the failure probability `β` of each method, as plain functions of real
//! numbers. The bias formulas are in [`super::bias`].
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

pub(super) fn check_non_negative(name: &str, value: f64) -> Result<(), String> {
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

#[cfg(test)]
// Reference values are quoted with all the digits mpmath gave.
#[allow(clippy::excessive_precision)]
pub(crate) mod tests {
    use super::*;
    use crate::stats::bias::integrate_pieces;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;
    use rand_distr::{Distribution, Exp1};

    pub(crate) fn laplace(rng: &mut ChaCha20Rng, mu: f64, b: f64) -> f64 {
        let e1: f64 = Exp1.sample(rng);
        let e2: f64 = Exp1.sample(rng);
        mu + b * (e1 - e2)
    }

    pub(crate) fn laplace_cdf(x: f64, mu: f64, b: f64) -> f64 {
        if x < mu {
            0.5 * ((x - mu) / b).exp()
        } else {
            1.0 - 0.5 * (-(x - mu) / b).exp()
        }
    }

    pub(crate) fn laplace_pdf(x: f64, mu: f64, b: f64) -> f64 {
        (-(x - mu).abs() / b).exp() / (2.0 * b)
    }

    /// Integrates over `[lo, hi]` split at `breaks` (those inside) and geometrically spaced
    /// points out to the ends, so features at scale `b` near the breaks are resolved.
    pub(crate) fn quad(f: &dyn Fn(f64) -> f64, lo: f64, hi: f64, breaks: &[f64], b: f64) -> f64 {
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

    pub(crate) fn rel_close(a: f64, b: f64, tol: f64) -> bool {
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
}
