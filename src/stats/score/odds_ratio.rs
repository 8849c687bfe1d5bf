//! The odds ratio's noise-aware score statistic and interval (the odds ratio interval's default),
//! after Miettinen & Nurminen (1985): restricted maximum-likelihood risks under `OR = θ`, the
//! statistic centred by its second-order mean and its quantiles corrected for its skewness,
//! both weighted by how well their expansion holds (docs/intervals.md §2).

use super::{denominator_skew, invert_score_test, standardised, ScoreAt, ScoreCounts};
use crate::stats::table::{GroupSizes, ReleasedCounts};

/// The unexposed risk `p̄_y` maximising the binomial likelihood under odds ratio `θ` when the
/// two arms hold `m` cases in all (sizes `n_x`, `n_y`): the restricted maximum keeps the
/// margin, `n_x p̄_x + n_y p̄_y = m`, so `p̄_y` is the root in `[0, 1]` of
/// `n_y(θ − 1)q² + (n_x θ + n_y − m(θ − 1))q − m = 0` (Miettinen & Nurminen 1985, §3; the
/// quadratic as in Agresti 2002, §3.1.4), computed without cancellation for every `θ > 0`
/// (`2m/(B + √D)` when `B ≥ 0`, `(−B + √D)/2A` otherwise) and clamped to `[0, min(1, m/n_y)]`.
fn odds_ratio_restricted_unexposed_risk(theta: f64, m: f64, n_x: f64, n_y: f64) -> f64 {
    if m <= 0.0 {
        return 0.0;
    }
    let a = n_y * (theta - 1.0);
    let b = n_x * theta + n_y - m * (theta - 1.0);
    let root_disc = (b * b + 4.0 * a * m).max(0.0).sqrt();
    let root = if b >= 0.0 {
        2.0 * m / (b + root_disc)
    } else {
        (root_disc - b) / (2.0 * a)
    };
    root.clamp(0.0, (m / n_y).min(1.0))
}

/// The binomial maximum-likelihood risks restricted to odds ratio `θ`, as
/// `[(p̄_x, q̄_x), (p̄_y, q̄_y)]` with `q̄ = 1 − p̄`, for `x` cases of `n_x` and `y` of `n_y`
/// (`0 ≤ x ≤ n_x`, `0 ≤ y ≤ n_y`; Miettinen & Nurminen 1985). `p̄_y` is the root of
/// [`odds_ratio_restricted_unexposed_risk`] for the cases and `q̄_y` the same root for the
/// non-cases (their odds ratio is `1/θ`), so both keep full relative precision near 0 and 1,
/// where the interval's ends are decided; the exposed arm has odds `θ·p̄_y/q̄_y`.
pub fn odds_ratio_restricted_risks(
    theta: f64,
    x: f64,
    n_x: f64,
    y: f64,
    n_y: f64,
) -> [(f64, f64); 2] {
    let p_y = odds_ratio_restricted_unexposed_risk(theta, x + y, n_x, n_y);
    let q_y = odds_ratio_restricted_unexposed_risk(1.0 / theta, (n_x - x) + (n_y - y), n_x, n_y);
    let (odds_num, odds_den) = (theta * p_y, q_y);
    let total = odds_num + odds_den;
    [(odds_num / total, odds_den / total), (p_y, q_y)]
}

/// The noise-aware score statistic for `H₀: OR = θ` (docs/intervals.md §2), centred:
///
/// ```text
/// T(θ) = [(p̃_x − p̄_x)/(p̄_x q̄_x) − (p̃_y − p̄_y)/(p̄_y q̄_y) − μ(θ)]
///        / sqrt(v_x(p̄_x)/(p̄_x q̄_x)² + v_y(p̄_y)/(p̄_y q̄_y)²),
/// ```
///
/// `p̃ = X̃/ñ` the released proportions (cases as released, sizes floored at 1; where a size
/// was released below 1, `p̃ − p̄` is `(X̃ − p̄ñ)/1` with `ñ` as released, so that the count's
/// deviation keeps the noise it shares with the size: docs/intervals.md §2, "A size released
/// below 1"), `(p̄, q̄)` the restricted risks of [`odds_ratio_restricted_risks`] (from the
/// cases clamped to `[0, ñ]`), `v` the variance of a released proportion including the exact
/// noise variance `s²` (`ScoreCounts::proportion_variance`, the paper's Theorem
/// Gaussian_Valid_CI variance per arm; with private sizes the denominator is the contrast's
/// exact variance, `ScoreCounts::contrast_variance`) and `μ(θ)` the numerator's mean under
/// `H₀` to second order ([`OddsRatioScore`]), times the expansion's weight, which also scales
/// the skewness `γ` (`Expansion::weight`).
/// The numerator is the first-order change of `ln OR` between the restricted and the released
/// risks (`d logit p = dp/pq`), and the denominator its variance, the arms and their noises
/// being independent. Without noise and without `μ` it is Miettinen & Nurminen's (1985) score
/// statistic for the odds ratio (without their factor `N/(N − 1)`): the margin keeps
/// `n_x(p̂_x − p̄_x) = −n_y(p̂_y − p̄_y) = Δ`, and `T² = Δ²(1/n_x p̄_x q̄_x + 1/n_y p̄_y q̄_y)`.
/// Computed multiplied through by `p̄_x q̄_x p̄_y q̄_y`, so that it stays finite at the ends.
/// Its skew `c_D²/s` ([`ScoreAt`]), which sets the error split: `OR = p_x q_y/(q_x p_y)` has
/// denominator factors `q_x` and `p_y`, so `c_D² = v_x/q̄_x² + v_y/p̄_y²`, and
/// `s² = v_x/(p̄_x q̄_x)² + v_y/(p̄_y q̄_y)²`; and its own skewness `γ`, by which
/// [`invert_score_test`] moves both quantiles (Cornish-Fisher; docs/intervals.md §2).
pub fn odds_ratio_score_statistic(theta: f64, counts: &ReleasedCounts) -> ScoreAt {
    ScoreCounts::new(counts).odds_ratio_statistic(theta)
}

impl ScoreCounts {
    /// The odds ratio's `T(θ)` with its denominator skew and skewness
    /// ([`odds_ratio_score_statistic`]).
    pub fn odds_ratio_statistic(&self, theta: f64) -> ScoreAt {
        let score = self.odds_ratio_parts(theta);
        ScoreAt {
            statistic: score.statistic(),
            denominator_skew: score.denominator_skew,
            skewness: score.applied_skewness(),
        }
    }

    /// The odds ratio's statistic's parts at `θ`.
    pub fn odds_ratio_parts(&self, theta: f64) -> OddsRatioScore {
        let counts = &self.counts;
        let [(p_x, q_x), (p_y, q_y)] = odds_ratio_restricted_risks(
            theta,
            self.cases[0],
            counts.n_x,
            self.cases[1],
            counts.n_y,
        );
        let (ax, ay) = (
            ArmTerms::new(p_x, q_x, 0, self),
            ArmTerms::new(p_y, q_y, 1, self),
        );
        let [share_x, share_y] = self.size_shares;
        let numerator = (self.proportions[0] - p_x * share_x) * ay.g
            - (self.proportions[1] - p_y * share_y) * ax.g;
        // The expansion is of the numerator under the delta method's variance, whose
        // derivatives it takes. Its mean is in the numerator's units and its skewness is
        // scale-free, so both carry over to the exact variance the statistic is divided by.
        let expansion = Expansion::new(&ax, &ay, ax.v * ay.g * ay.g + ay.v * ax.g * ax.g);
        let variance = self.contrast_variance([ay.g, ax.g], [ax.v, ay.v], [p_x, p_y]);
        let finite = |v: f64| if v.is_finite() { v } else { 0.0 };
        OddsRatioScore {
            numerator,
            mean: finite(expansion.mean()),
            variance,
            skewness: finite(expansion.skewness(counts.sizes, counts.noise_fourth_cumulant)),
            expansion_weight: expansion.weight(),
            denominator_skew: denominator_skew(
                ax.v / (q_x * q_x) + ay.v / (p_y * p_y),
                ax.v / (ax.g * ax.g) + ay.v / (ay.g * ay.g),
            ),
        }
    }
}

/// The parts of the odds ratio's score statistic at a candidate `θ`, the numerator and its
/// moments multiplied through by `p̄_x q̄_x p̄_y q̄_y` ([`odds_ratio_score_statistic`]).
#[derive(Clone, Copy, Debug)]
pub struct OddsRatioScore {
    /// `(p̃_x − p̄_x) p̄_y q̄_y − (p̃_y − p̄_y) p̄_x q̄_x`: Miettinen & Nurminen's numerator.
    pub numerator: f64,
    /// Its mean under `H₀: OR = θ` to `O(n^{-1/2})` relative to its standard deviation
    /// (docs/intervals.md §2, "Centring"): the restricted estimates are curved in the
    /// released margin, so where two cells are small (`p_x` low, `p_y` high) the uncentred
    /// statistic has mean −0.1 at n = 200, which moves coverage from the upper end's tail.
    pub mean: f64,
    /// The numerator's variance: `v_x (p̄_y q̄_y)² + v_y (p̄_x q̄_x)²` by the delta method, plus
    /// the product-of-noises terms with private sizes (`ScoreCounts::contrast_variance`).
    pub variance: f64,
    /// The statistic's skewness `γ` (standardised third cumulant) under `H₀` to `O(n^{-1/2})`
    /// (docs/intervals.md §2, "Skewness"), 0 where it is not finite.
    pub skewness: f64,
    /// `c_D²/s`, for the error split.
    pub denominator_skew: f64,
    /// The share of `mean` and `skewness` the statistic applies, `1/(1 + r⁴)`, `r²` the
    /// variance of the restricted estimate's logit under `H₀` ([`Expansion::weight`]).
    pub expansion_weight: f64,
}

/// One arm's terms in the expansion of the statistic ([`Expansion`]), at its restricted risk,
/// with `t = logit p̄`.
struct ArmTerms {
    /// Released size `ñ`, and `1/ñ`, `1/ñ²`.
    n: f64,
    inv_n: f64,
    inv_n2: f64,
    /// Restricted risk `p̄` and `q̄ = 1 − p̄`.
    p: f64,
    q: f64,
    /// `g = p̄q̄ = dp̄/dt`.
    g: f64,
    /// `dg/dt = (q̄ − p̄)g`.
    dg: f64,
    /// `v`, the variance of the released proportion (`ScoreCounts::proportion_variance`).
    v: f64,
    /// `dv/dt` at fixed `ñ`.
    dv: f64,
    /// `∂v/∂ñ` at fixed `t`.
    dv_dn: f64,
    /// `V = ñ²v`, the variance of the released count's first-order deviation
    /// `U = ñ(p̃ − p̄)`.
    count_variance: f64,
    /// `Cov(ñ, U)`: `s²(q̄ − p̄)` with private sizes (`ñ = X̃ + B̃` shares `X̃`'s noise, and
    /// `U = q̄e_a − p̄e_b`), 0 with public ones.
    size_covariance: f64,
}

impl ArmTerms {
    /// Arm `arm` (0 exposed, 1 unexposed) at its restricted risk `p`, `q = 1 − p`.
    fn new(p: f64, q: f64, arm: usize, table: &ScoreCounts) -> Self {
        let counts = &table.counts;
        let n = [counts.n_x, counts.n_y][arm];
        let [inv_n, inv_n2, inv_n3] = table.reciprocals[arm];
        let s2 = counts.noise_variance;
        let (g, w) = (p * q, counts.sizes.noise_weight(p, q));
        // Also d w/dt = −2cg: d(p² + q²)/dt = −2(q − p)g with private sizes, 0 with public.
        let c = counts.sizes.size_noise_covariance(p, q);
        let dg = (q - p) * g;
        Self {
            n,
            inv_n,
            inv_n2,
            p,
            q,
            g,
            dg,
            v: table.proportion_variance(arm, p, q),
            dv: dg * inv_n - 2.0 * s2 * c * g * inv_n2,
            dv_dn: -g * inv_n2 - 2.0 * s2 * w * inv_n3,
            count_variance: n * g + s2 * w,
            size_covariance: s2 * c,
        }
    }
}

/// The second-order expansion of the statistic `T = Δ·H` in the released values around their
/// means under `H₀` (docs/intervals.md §2, "Centring" and "Skewness"): `Δ = ñ_x(p̃_x − p̄_x)`,
/// `A = g_y/ñ_x + g_x/ñ_y` (numerator `Δ·A`), `H = A/√variance`, a function of the margins
/// `(m, ñ_x, ñ_y)` through `t = logit p̄_y` and the sizes. Moving `t` along `OR = θ`
/// (`dp̄ = g dt` in both arms) the restricted estimate solves `ñ_x p̄_x + ñ_y p̄_y = m`, so to
/// first order `t − t₀ = τ = (U_x + U_y)/W`, `W = ñ_x g_x + ñ_y g_y`, and
/// `Δ₁ = (ñ_y g_y U_x − ñ_x g_x U_y)/W`; to second order
/// `Δ₂ = (ñ_x g_x/W)(½W'τ² + (δñ_x g_x + δñ_y g_y)τ) − ½ñ_x g_x'τ² − δñ_x g_x τ` (`' = d/dt`).
struct Expansion<'a> {
    x: &'a ArmTerms,
    y: &'a ArmTerms,
    /// `W' = ñ_x g_x' + ñ_y g_y'`.
    dw: f64,
    /// `A`, and `A·∂ln H` along `t`, `ñ_x`, `ñ_y`: `∂A − ½A·∂variance/variance`.
    a: f64,
    a_dln_h: [f64; 3],
    /// `1/W`, `W = ñ_x g_x + ñ_y g_y`, and `1/√variance`.
    inv_w: f64,
    inv_sd: f64,
    /// `E[τ²] = (V_x + V_y)/W²`, the variance of the restricted estimate's logit under `H₀`
    /// to first order: the expansion's parameter.
    logit_variance: f64,
}

impl<'a> Expansion<'a> {
    fn new(x: &'a ArmTerms, y: &'a ArmTerms, variance: f64) -> Self {
        let a = y.g * x.inv_n + x.g * y.inv_n;
        let half_a = 0.5 * a / variance;
        let dt = (y.dg * x.inv_n + x.dg * y.inv_n)
            - half_a
                * (x.dv * y.g * y.g
                    + 2.0 * x.v * y.g * y.dg
                    + y.dv * x.g * x.g
                    + 2.0 * y.v * x.g * x.dg);
        let inv_w = 1.0 / (x.n * x.g + y.n * y.g);
        Self {
            x,
            y,
            inv_w,
            logit_variance: (x.count_variance + y.count_variance) * inv_w * inv_w,
            dw: x.n * x.dg + y.n * y.dg,
            a,
            a_dln_h: [
                dt,
                -y.g * x.inv_n2 - half_a * x.dv_dn * y.g * y.g,
                -x.g * y.inv_n2 - half_a * y.dv_dn * x.g * x.g,
            ],
            inv_sd: 1.0 / variance.sqrt(),
        }
    }

    /// `E[numerator]` under `H₀` by the second-order delta method:
    ///
    /// ```text
    /// E[Δ₂] = ½ ñ_x (g_x W'/W − g_x') E[τ²] + g_x g_y (ñ_x k_y − ñ_y k_x)/W²,
    /// E[Δ·A] ≈ A·E[Δ₂] + A∂ln H/∂t·E[Δ₁τ] + A∂ln H/∂ñ_x·E[Δ₁δñ_x] + A∂ln H/∂ñ_y·E[Δ₁δñ_y],
    /// ```
    ///
    /// `E[τ²] = (V_x + V_y)/W²`, `E[Δ₁τ] = (ñ_y g_y V_x − ñ_x g_x V_y)/W²`,
    /// `E[Δ₁δñ_x] = ñ_y g_y k_x/W`, `E[Δ₁δñ_y] = −ñ_x g_x k_y/W` (`k` the arm's
    /// `size_covariance`).
    fn mean(&self) -> f64 {
        let (x, y, iw) = (self.x, self.y, self.inv_w);
        let (kx, ky) = (x.size_covariance, y.size_covariance);
        let tau2 = self.logit_variance;
        let delta2 = 0.5 * x.n * (x.g * self.dw * iw - x.dg) * tau2
            + x.g * y.g * (x.n * ky - y.n * kx) * iw * iw;
        let delta_tau = (y.n * y.g * x.count_variance - x.n * x.g * y.count_variance) * iw * iw;
        let [dt, dnx, dny] = self.a_dln_h;
        self.a * delta2 + dt * delta_tau + (dnx * y.n * y.g * kx - dny * x.n * x.g * ky) * iw
    }

    /// How much of the second-order terms (`mean`, `skewness`) to apply: `1/(1 + r⁴)`, with
    /// `r² = E[τ²]` the variance of the restricted estimate's logit (docs/intervals.md §2,
    /// "Where the expansion holds"). Both terms are the next order of a Taylor expansion in
    /// `τ`, which is accurate only while `τ` is small on the logit scale, i.e. `r` well below 1.
    /// Where the noise swamps a small table `r` is 10-110 and `μ` 2-44 standard deviations
    /// (2-10 rows per arm, ε = 0.1, public sizes), and the terms in full took the interval's
    /// coverage down to 0.56. The weight is 0.994 in the paper's n = 200 cell of largest `r`
    /// (0.28), 1/2 at `r = 1` and 0.06 at `r = 2`; 0 where `r` is not finite (no variance
    /// left at an end of the θ range, where `μ → 0` anyway).
    fn weight(&self) -> f64 {
        let r2 = self.logit_variance;
        if r2.is_finite() {
            1.0 / (1.0 + r2 * r2)
        } else {
            0.0
        }
    }

    /// `(∂T[u], ∂²T[u, u])`: the statistic's first and second derivatives along a deviation
    /// `u = (U_x, U_y, δñ_x, δñ_y)` of the released values.
    fn along(&self, [ux, uy, dnx, dny]: [f64; 4]) -> (f64, f64) {
        let (x, y, iw) = (self.x, self.y, self.inv_w);
        let tau = (ux + uy) * iw;
        let delta1 = (y.n * y.g * ux - x.n * x.g * uy) * iw;
        let delta2 = x.n * x.g * iw * (0.5 * self.dw * tau * tau + (dnx * x.g + dny * y.g) * tau)
            - 0.5 * x.n * x.dg * tau * tau
            - dnx * x.g * tau;
        let [dt, dhx, dhy] = self.a_dln_h;
        (
            self.a * delta1 * self.inv_sd,
            2.0 * (self.a * delta2 + (dt * tau + dhx * dnx + dhy * dny) * delta1) * self.inv_sd,
        )
    }

    /// The skewness of `T` under `H₀` to `O(n^{-1/2})`: with `T = L + Q`, `L` linear and `Q`
    /// quadratic in the released values `u`, `κ₃(T) = κ₃(L) + 3·Cov(L², Q)`, and
    /// `Cov(L², Q) = ∂²T[v, v] + ½Σ_i κ₄,i (∂T/∂e_i)² ∂²T/∂e_i²` (`v = Cov(u, L)`, the sum over
    /// the noised cells, whose fourth cumulant is of the same order as the variance squared;
    /// the binomial's is of lower order). `κ₃(L) = H³κ₃(Δ₁)` from the binomial third cumulants
    /// `ñ g (q̄ − p̄)` (the noise is symmetric). `sizes` says which cells are noised.
    // Inlined into `odds_ratio_parts`: left to the compiler it became a call, and the odds
    // ratio's interval took 10% longer (BENCHMARKS.md, "Session 11").
    #[inline]
    fn skewness(&self, sizes: GroupSizes, kappa4: f64) -> f64 {
        let (x, y, iw) = (self.x, self.y, self.inv_w);
        let h = self.a * self.inv_sd;
        let (bx, by) = (y.n * y.g * iw, x.n * x.g * iw);
        let linear = h.powi(3) * (bx.powi(3) * x.n * x.dg - by.powi(3) * y.n * y.dg);
        let v = [
            h * bx * x.count_variance,
            -h * by * y.count_variance,
            h * bx * x.size_covariance,
            -h * by * y.size_covariance,
        ];
        let mut kurtosis = 0.0;
        if kappa4 != 0.0 {
            for (arm, terms) in [(0, x), (1, y)] {
                for (u, dn) in sizes.noised_cells(terms.p, terms.q).into_iter().flatten() {
                    let mut e = [0.0; 4];
                    (e[arm], e[arm + 2]) = (u, dn);
                    let (slope, curvature) = self.along(e);
                    kurtosis += slope * slope * curvature;
                }
            }
        }
        linear + 3.0 * self.along(v).1 + 1.5 * kappa4 * kurtosis
    }
}

impl OddsRatioScore {
    /// The statistic's parts at `θ` for released counts (sizes floored at 1).
    pub fn at(theta: f64, counts: &ReleasedCounts) -> Self {
        ScoreCounts::new(counts).odds_ratio_parts(theta)
    }

    /// `T(θ)`: the numerator less its weighted mean, over its standard deviation.
    pub fn statistic(&self) -> f64 {
        standardised(
            self.numerator - self.expansion_weight * self.mean,
            self.variance,
        )
    }

    /// The skewness the quantiles are corrected for: `γ` times the expansion's weight.
    pub fn applied_skewness(&self) -> f64 {
        self.expansion_weight * self.skewness
    }
}

/// The noise-aware score interval `(lower, upper)` for the odds ratio from released counts
/// (sizes floored at 1) at the two-sided quantile `z`: [`invert_score_test`] of
/// [`odds_ratio_score_statistic`], with the relative risk's error rule
/// ([`super::TailSplit`]). Its ends: as `θ → 0` the restricted risks reach `p̄_x = 0`
/// (when `X̃ + Ỹ ≤ ñ_y`) and `T → X̃/s`, or `p̄_y = 1` and `T → D̃/s`; so `lower = 0` when the
/// release cannot exclude that zero cell. Likewise `upper = +∞` when it cannot exclude
/// `C = 0` (`T → −Ỹ/s`, when `X̃ + Ỹ ≤ ñ_x`) or `B = 0` (`T → −B̃/s`).
pub fn odds_ratio_score_interval(counts: ReleasedCounts, z: f64) -> (f64, f64) {
    let test = ScoreCounts::new(&counts);
    let ReleasedCounts { x, n_x, y, n_y, .. } = test.counts;
    invert_score_test(
        |theta| test.odds_ratio_statistic(theta),
        z,
        (x * (n_y - y)) / ((n_x - x) * y),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::table::{released, IntervalMethod, Z95};

    #[test]
    fn restricted_risks_keep_the_margin_and_the_odds_ratio() {
        for (theta, x, nx, y, ny) in [
            (3.0, 40.0, 200.0, 20.0, 200.0),
            (0.2, 12.0, 50.0, 30.0, 80.0),
            (50.0, 90.0, 100.0, 95.0, 100.0),
            (1.0, 5.0, 10.0, 7.0, 20.0),
            (1e-12, 30.0, 100.0, 90.0, 100.0),
            (1e12, 90.0, 100.0, 30.0, 100.0),
        ] {
            let [(px, qx), (py, qy)] = odds_ratio_restricted_risks(theta, x, nx, y, ny);
            assert!((px + qx - 1.0).abs() < 1e-12 && (py + qy - 1.0).abs() < 1e-12);
            assert!(
                (nx * px + ny * py - (x + y)).abs() < 1e-8,
                "{theta}: margin"
            );
            // The odds ratio, compared on px·qy against θ·py·qx (no division by ~0).
            assert!(
                (px * qy - theta * py * qx).abs() <= 1e-12 * (px * qy).max(theta * py * qx),
                "{theta}: odds ratio"
            );
        }
        // Independent value (docs/prototypes/or_score_check.py, by root-finding on the margin):
        // θ = 3, 40/200 vs 20/200: p̄_x = 0.2159229, p̄_y = 0.0840771.
        let [(px, _), (py, _)] = odds_ratio_restricted_risks(3.0, 40.0, 200.0, 20.0, 200.0);
        assert!(
            (px - 0.2159229153865298).abs() < 1e-12 && (py - 0.08407708461347022).abs() < 1e-12
        );
        // At the observed odds ratio the restricted risks are the observed ones.
        let [(px, _), (py, _)] = odds_ratio_restricted_risks(2.25, 40.0, 200.0, 20.0, 200.0);
        assert!((px - 0.2).abs() < 1e-12 && (py - 0.1).abs() < 1e-12);
    }

    #[test]
    fn score_mean_and_skewness_match_hand_computation_and_the_prototype() {
        // Public sizes at the expected release of (0.1, 0.9), n = 200, s² = 32, θ = 1/81: the
        // restricted risks are (0.1, 0.9), g = 0.09 in both arms, so W' = 0 and the H-terms
        // cancel; E[Δ₂] = −½·200·(0.8·0.09)·(2·50)/36² = −5/9 and H = (2·0.09/200)
        // /sqrt(2·(0.09/200 + 32/200²)·0.09²) = 0.2: μ/SD = −1/9.
        let at = |x, nx, y, ny, sizes, s2| {
            let s = OddsRatioScore::at(1.0 / 81.0, &ReleasedCounts::new(x, nx, y, ny, sizes, s2));
            s.mean / s.variance.sqrt()
        };
        let public = at(20.0, 200.0, 180.0, 200.0, GroupSizes::Public, 32.0);
        assert!((public + 1.0 / 9.0).abs() < 1e-12, "{public}");
        // Private sizes, same cells: docs/prototypes/or_score_mean.py delta (½ Σ ∂²T/∂u_i∂u_j
        // Cov(u_i, u_j) over the four released cells, Hessian by central differences: 6 digits),
        // in units of the delta method's SD, sqrt(2·0.09²·v), v = 0.09/200 + 32·0.82/200².
        // The statistic's own variance (contrast_variance) is that times 1 + κ + k²/v by hand:
        // κ = 2·32/200² for the other arm's size, and the covariance term 2g²k² with
        // k = ±32·0.8/200² (opposite signs in the two arms, so it adds).
        let v = 0.09 / 200.0 + 32.0 * 0.82 / 40_000.0f64;
        let delta_sd = (2.0 * 0.0081 * v).sqrt();
        let k = 32.0 * 0.8 / 40_000.0;
        let by_hand = (1.0 + 64.0 / 40_000.0 + k * k / v).sqrt();
        let private_at = |theta, x, y| {
            let counts = ReleasedCounts::new(x, 200.0, y, 200.0, GroupSizes::Private, 32.0);
            let s = OddsRatioScore::at(theta, &counts);
            (s.mean / delta_sd, s.variance.sqrt() / delta_sd)
        };
        let (private, sd_ratio) = private_at(1.0 / 81.0, 20.0, 180.0);
        assert!((private + 0.120892).abs() < 2e-6, "{private}");
        assert!((sd_ratio - by_hand).abs() < 1e-12, "{sd_ratio} {by_hand}");
        // The statistic's parts: T is the centred numerator over its SD.
        let counts = ReleasedCounts::new(25.0, 190.0, 170.0, 205.0, GroupSizes::Private, 32.0);
        let (s, t) = (
            OddsRatioScore::at(0.02, &counts),
            odds_ratio_score_statistic(0.02, &counts).statistic,
        );
        let centred = s.numerator - s.expansion_weight * s.mean;
        assert!((centred / s.variance.sqrt() - t).abs() < 1e-12);
        // The mirror table (arms swapped, θ → 1/θ) flips the sign of the mean.
        let (mirror, _) = private_at(81.0, 180.0, 20.0);
        assert!((mirror - 0.120892).abs() < 2e-6, "{mirror}");
        // Skewness. Without noise at (0.9, 0.1) (public, θ = 81) the quadratic terms cancel by
        // symmetry and γ = κ₃(L) = H³(n g/W)³·n g·[(q_x − p_x) − (q_y − p_y)] with H = 1/3,
        // n g/W = 1/2, n g = 18: (1/27)(1/8)·18·(−1.6) = −2/15.
        let gamma = |theta, x, y, sizes, s2, k4| {
            let counts =
                ReleasedCounts::new(x, 200.0, y, 200.0, sizes, s2).with_noise_fourth_cumulant(k4);
            OddsRatioScore::at(theta, &counts).skewness
        };
        let noiseless = gamma(81.0, 180.0, 20.0, GroupSizes::Public, 0.0, 0.0);
        assert!((noiseless + 2.0 / 15.0).abs() < 1e-12, "{noiseless}");
        // With noise: docs/prototypes/or_score_mean.py's or_skewness (κ₃(L) + 3∂²T[v, v] +
        // 3/2 Σ κ₄ (∂T/∂e)² ∂²T/∂e², written out separately), at (0.1, 0.9), s² = 32: public
        // with κ₄ = 3000, private with the discrete Laplace's κ₄ = 3104.
        let public = gamma(1.0 / 81.0, 20.0, 180.0, GroupSizes::Public, 32.0, 3000.0);
        assert!((public + 0.1712).abs() < 1e-12, "{public}");
        let private = gamma(1.0 / 81.0, 20.0, 180.0, GroupSizes::Private, 32.0, 3104.0);
        assert!((private + 0.194172145717979).abs() < 1e-12, "{private}");
    }

    #[test]
    fn a_size_released_below_one_keeps_the_counts_deviation() {
        // Private sizes: 3 exposed cases released with an exposed size of −4, floored at 1.
        // The exposed term is the released count's deviation D = X̃ − p̄ñ with ñ = −4 as
        // released, over the floored size: (3 + 4p̄_x)/1, not 3/1 − p̄_x, whose missing
        // p̄_x(1 − ñ) is the size's noise. The restricted risks see the floored table (cases
        // clamped to [0, 1]).
        let theta = 0.5;
        let t = released(3, -4, 20, 40, GroupSizes::Private, 30.0);
        let counts = t.counts().unwrap();
        assert_eq!((counts.n_x, counts.released_sizes), (1.0, [-4.0, 40.0]));
        let [(p_x, q_x), (p_y, q_y)] = odds_ratio_restricted_risks(theta, 1.0, 1.0, 20.0, 40.0);
        let (g_x, g_y) = (p_x * q_x, p_y * q_y);
        let score = OddsRatioScore::at(theta, &counts);
        let deviation = (3.0 + 4.0 * p_x) * g_y - (0.5 - p_y) * g_x;
        assert!((score.numerator - deviation).abs() < 1e-12, "{score:?}");
        // A size released as 1 needs no floor, and the term is 3/1 − p̄_x.
        let at_one = OddsRatioScore::at(
            theta,
            &ReleasedCounts::new(3.0, 1.0, 20.0, 40.0, GroupSizes::Private, 30.0),
        );
        assert!((at_one.numerator - ((3.0 - p_x) * g_y - (0.5 - p_y) * g_x)).abs() < 1e-12);
    }

    #[test]
    fn second_order_terms_fade_where_the_expansion_does_not_hold() {
        // By hand at the public corner of the test above: V = n g + s² = 18 + 32 = 50 per arm,
        // W = 2·200·0.09 = 36, so r² = 100/1296 and the weight is 1/(1 + r⁴) = 0.99408.
        let corner = OddsRatioScore::at(
            1.0 / 81.0,
            &ReleasedCounts::new(20.0, 200.0, 180.0, 200.0, GroupSizes::Public, 32.0),
        );
        let r2: f64 = 100.0 / 1296.0;
        assert!((corner.expansion_weight - 1.0 / (1.0 + r2 * r2)).abs() < 1e-12);
        // Two rows per arm under the noise of ε = 0.1 (s² ≈ 800 per cell), 1 of 2 against 0 of
        // 2, at OR = 9: the expansion's mean is 3.6 standard deviations (r = 64). Applied in
        // full, means like it rejected the truth in about half the releases at (0.5, 0.1)
        // (coverage 0.53; docs/intervals.md §2, "Where the expansion holds"). The weight takes
        // it below 0.01 SD, and the interval of a release that says nothing about the odds
        // ratio is [0, +∞] again: 0 of 1 against 1 of 1 at s² = 3200 got [0.51, 1.08]
        // (public sizes) and [0.62, 1.06] (private) with the terms in full.
        let swamped = OddsRatioScore::at(
            9.0,
            &ReleasedCounts::new(1.0, 2.0, 0.0, 2.0, GroupSizes::Public, 800.0),
        );
        let sd = swamped.variance.sqrt();
        assert!(swamped.mean.abs() / sd > 3.0, "{}", swamped.mean / sd);
        assert!((swamped.expansion_weight * swamped.mean / sd).abs() < 0.01);
        for (x, nx, y, ny, s2) in [(0.0, 1.0, 1.0, 1.0, 3200.0), (1.0, 5.0, 0.0, 5.0, 800.0)] {
            for sizes in [GroupSizes::Public, GroupSizes::Private] {
                let (l, u) =
                    odds_ratio_score_interval(ReleasedCounts::new(x, nx, y, ny, sizes, s2), Z95);
                assert!(
                    l == 0.0 && u == f64::INFINITY,
                    "{x}/{nx} {y}/{ny} {sizes}: [{l}, {u}]"
                );
            }
        }
    }

    #[test]
    fn odds_ratio_score_interval_matches_independent_computation() {
        // Values from docs/prototypes/or_score_check.py (restricted MLE by root-finding, the
        // statistic in Miettinen & Nurminen's Δ/sqrt(Var Δ) form, ends by brentq).
        // Without noise and with equal tails the interval is Miettinen & Nurminen's (1985)
        // classical one: 40/200 vs 20/200: [1.2693632, 3.9859758]; 7/34 vs 1/34:
        // [1.2612876, 55.848283]; T equals ±z there.
        for (x, nx, y, ny, lo, hi) in [
            (
                40.0,
                200.0,
                20.0,
                200.0,
                1.2693632152518959,
                3.9859758059621555,
            ),
            (7.0, 34.0, 1.0, 34.0, 1.2612876033172202, 55.848283225321914),
        ] {
            // Miettinen & Nurminen's statistic is the uncentred one.
            let t = |th| {
                let s = OddsRatioScore::at(
                    th,
                    &ReleasedCounts::new(x, nx, y, ny, GroupSizes::Public, 0.0),
                );
                s.numerator / s.variance.sqrt()
            };
            assert!(
                (t(lo) - Z95).abs() < 1e-7 && (t(hi) + Z95).abs() < 1e-7,
                "{x}/{nx}"
            );
        }
        // The crate's split (score::TailSplit), centring (OddsRatioScore::mean) and
        // Cornish-Fisher quantiles (OddsRatioScore::skewness), both weighted by
        // OddsRatioScore::expansion_weight, no noise, then s² = 8 for both
        // size modes: docs/prototypes/adaptive_split.py check (z_c solved exactly at every θ,
        // ends by brentq on the statistic of or_score_check.py's model less or_score_mean.py's
        // closed-form mean, itself checked there against a numerical second-order delta
        // method, and with or_score_mean.or_skewness, both times or_score_mean.expansion_weight;
        // `check --unweighted` gives the values before that weight, which this test held then).
        for (x, nx, y, ny, sizes, s2, lo, hi) in [
            (
                40.0,
                200.0,
                20.0,
                200.0,
                GroupSizes::Public,
                0.0,
                1.1758242209340224,
                3.737937971458556,
            ),
            (
                7.0,
                34.0,
                1.0,
                34.0,
                GroupSizes::Public,
                0.0,
                0.6962114993919389,
                48.29065111268688,
            ),
            (
                40.0,
                200.0,
                20.0,
                200.0,
                GroupSizes::Public,
                8.0,
                1.0590518444612171,
                4.098247547715859,
            ),
            (
                40.0,
                200.0,
                20.0,
                200.0,
                GroupSizes::Private,
                8.0,
                1.0851552652234513,
                4.0315217550724896,
            ),
        ] {
            let (l, u) =
                odds_ratio_score_interval(ReleasedCounts::new(x, nx, y, ny, sizes, s2), Z95);
            assert!(
                (l / lo - 1.0).abs() < 1e-9 && (u / hi - 1.0).abs() < 1e-9,
                "{x}/{nx} {sizes} {s2}: [{l}, {u}]"
            );
        }
        // Through the released table (dp_or_ci's path): same interval, Woolf's estimate.
        let t = released(40, 200, 20, 200, GroupSizes::Private, 8.0);
        let ci = t
            .odds_ratio_interval(0.95, IntervalMethod::Score)
            .unwrap()
            .unwrap();
        assert!((ci.estimate - 2.25).abs() < 1e-12);
        assert!((ci.lower / 1.0851552652234513 - 1.0).abs() < 1e-9);
    }

    #[test]
    fn odds_ratio_score_interval_is_open_where_the_release_cannot_exclude_a_zero_cell() {
        // s = 10: a cell released below z_L·s = 21.7 (lower end; the least uneven split, as
        // θ → 0) or Φ⁻¹(0.95)·s = 16.4 (upper end; all the error there, as θ → ∞) cannot be
        // told from 0.
        let s2 = 100.0;
        let ci = |x: f64, nx: f64, y: f64, ny: f64| {
            odds_ratio_score_interval(
                ReleasedCounts::new(x, nx, y, ny, GroupSizes::Public, s2),
                Z95,
            )
        };
        // a = 15 (≤ 21.7) with X̃ + Ỹ ≤ n_y: lower 0; a = 30: lower > 0.
        assert_eq!(ci(15.0, 200.0, 60.0, 200.0).0, 0.0);
        assert!(ci(30.0, 200.0, 60.0, 200.0).0 > 0.0);
        // d = n_y − Ỹ = 15 with X̃ + Ỹ > n_y: lower 0 as well.
        assert_eq!(ci(100.0, 200.0, 185.0, 200.0).0, 0.0);
        // c = Ỹ = 15 (≤ 16.4): upper +∞; Ỹ = 18: bounded (the fixed 30/70 split left it open).
        assert_eq!(ci(60.0, 200.0, 15.0, 200.0).1, f64::INFINITY);
        assert!(ci(60.0, 200.0, 18.0, 200.0).1.is_finite());
        // b = n_x − X̃ = 15 with X̃ + Ỹ > n_x: upper +∞.
        assert_eq!(ci(185.0, 200.0, 100.0, 200.0).1, f64::INFINITY);
        // Noise pushed a count below 0: still an interval, with the corresponding end open.
        let (l, u) = ci(-5.0, 200.0, 60.0, 200.0);
        assert!(l == 0.0 && u.is_finite() && u > 0.0);
        // The ends found are where T = z_L and T = −z_U, at the split of their own θ.
        let split = crate::stats::score::TailSplit::at(Z95);
        for sizes in [GroupSizes::Public, GroupSizes::Private] {
            let (l, u) = odds_ratio_score_interval(
                ReleasedCounts::new(40.0, 200.0, 20.0, 200.0, sizes, s2),
                Z95,
            );
            let t = |th| {
                odds_ratio_score_statistic(
                    th,
                    &ReleasedCounts::new(40.0, 200.0, 20.0, 200.0, sizes, s2),
                )
            };
            // With each end's Cornish-Fisher shift for the statistic's skewness there.
            let (zl, _) = split.quantiles_at(&t(l));
            let (_, zu) = split.quantiles_at(&t(u));
            assert!(
                (t(l).statistic - zl).abs() < 1e-9 && (t(u).statistic + zu).abs() < 1e-9,
                "{sizes}"
            );
        }
    }
}
