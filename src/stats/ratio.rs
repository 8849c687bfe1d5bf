//! Private 2x2 tables, the relative-risk estimator and its confidence intervals.
//!
//! Notation (paper, Section 4): `X` = exposed cases, `n_x` = exposed rows, `Y` = unexposed cases,
//! `n_y` = unexposed rows; the relative risk is `p = p_x / p_y`, estimated by `(X/n_x)/(Y/n_y)`.
//!
//! **Neighbouring relation and cost of the table.** Two datasets are neighbours when one row
//! (one individual) is replaced by another (the paper's relation, Section 2.2). A replacement
//! moves one individual between at most two cells of the table, changing each by 1. Every cell
//! gets independent noise calibrated for `(ε/2, δ/2)` and sensitivity 1, so the two cells that
//! can differ compose to `(ε, δ)` and the cells that cannot differ cost nothing: releasing all
//! four cells costs exactly what the paper's two noisy counts cost (LaplaceNoisedCounts, and
//! its footnote on individuals moving between cells). For Laplace this is the L1-sensitivity-2
//! argument: scale `2/ε` per cell. Under add/remove neighbours only one cell changes and the
//! same release is `(ε/2, δ/2)`-DP.
//!
//! **Group sizes.** `n_x` and `n_y` are counts over private rows. In [`GroupSizes::Private`]
//! (the default) they are never used exactly: the four cells are noised and the sizes are the
//! sums of noisy cells. [`GroupSizes::Public`] reproduces the paper exactly (sizes known by
//! design, only `X` and `Y` noised); choosing it asserts that the number of exposed and
//! unexposed rows in every group is public knowledge, and they are released exactly.

use super::mechanism::{add_noise, CountNoise, GaussianCalibration, Mechanism};
use rand::RngCore;
use statrs::distribution::{ContinuousCDF, Normal};
use std::fmt;

/// Exact cell counts: `a` = outcome ∧ exposed, `b` = ¬outcome ∧ exposed,
/// `c` = outcome ∧ ¬exposed, `d` = ¬outcome ∧ ¬exposed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TwoByTwo {
    pub a: u64,
    pub b: u64,
    pub c: u64,
    pub d: u64,
}

impl TwoByTwo {
    /// The table from its cells in the order `[a, b, c, d]`.
    pub fn from_cells(cells: &[u64]) -> Self {
        Self {
            a: cells[0],
            b: cells[1],
            c: cells[2],
            d: cells[3],
        }
    }
}

/// Whether the exposed / unexposed group sizes are private (noised) or declared public.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GroupSizes {
    #[default]
    Private,
    Public,
}

impl GroupSizes {
    pub fn parse(name: &str) -> Result<Self, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "private" => Ok(Self::Private),
            "public" => Ok(Self::Public),
            other => Err(format!(
                "unknown group size mode '{other}' (expected 'private' or 'public')"
            )),
        }
    }

    /// The factor `w` in the noise's share `s²·w/n²` of the variance of a released proportion
    /// `X̃/ñ` at risk `p` (`q = 1 − p`, passed apart so that callers near `p = 1` keep its
    /// precision): 1 with public sizes (only the count is noised), `p² + q²` with private
    /// ones, whose size `ñ = X̃ + B̃` carries the count's noise too, partly cancelling it (the
    /// delta method, docs/intervals.md §1; the paper's Theorem Gaussian_Valid_CI has `w = 1`).
    pub fn noise_weight(self, p: f64, q: f64) -> f64 {
        match self {
            Self::Public => 1.0,
            Self::Private => p * p + q * q,
        }
    }

    /// `Cov(ñ − n, n(p̃ − p))/s²`, the covariance of a released size's noise with the noise
    /// in its released proportion's numerator: `q − p` with private sizes (`ñ = X̃ + B̃` and
    /// `n(p̃ − p) ≈ q·e_X − p·e_B`), 0 with public ones (docs/intervals.md §2, "Centring").
    pub fn size_noise_covariance(self, p: f64, q: f64) -> f64 {
        match self {
            Self::Public => 0.0,
            Self::Private => q - p,
        }
    }

    /// `Var(ñ)/s²`, the variance of a released size's noise per unit of cell noise variance:
    /// 2 with private sizes (`ñ = X̃ + B̃`, two noised cells), 0 with public ones.
    pub fn size_noise_variance(self) -> f64 {
        match self {
            Self::Public => 0.0,
            Self::Private => 2.0,
        }
    }

    /// For each noised cell of an arm, the first-order deviations `(n(p̃ − p), ñ − n)` one unit
    /// of its noise causes: the cases alone with public sizes; cases and non-cases with private
    /// ones (`q·e_X − p·e_B`, `e_X + e_B`). [`Self::noise_weight`] and
    /// [`Self::size_noise_covariance`] are `Σ u²` and `Σ u·δñ` over these.
    pub fn noised_cells(self, p: f64, q: f64) -> [Option<(f64, f64)>; 2] {
        match self {
            Self::Public => [Some((1.0, 0.0)), None],
            Self::Private => [Some((q, 1.0)), Some((-p, 1.0))],
        }
    }
}

impl fmt::Display for GroupSizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Private => "private",
            Self::Public => "public",
        })
    }
}

/// How the interval is built. The first two are the paper's (selectable under these names so
/// the reproduction is unchanged); `score`, `log` and `bootstrap` are this crate's extensions.
/// Each statistic has its own default ([`IntervalMethod::default_for`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum IntervalMethod {
    /// Sampling variance plus the noise variance (paper, Theorem Gaussian_Valid_CI; for
    /// Laplace the paper plugs in the Laplace variance, here the exact discrete one).
    #[default]
    Conservative,
    /// Sampling variance only, asymptotically valid (paper, Theorem Valid_CI).
    Plain,
    /// The ratio's interval on the log scale (Katz et al. 1978 for the relative risk, Woolf
    /// 1955 for the odds ratio) with the delta-method variance of the noise added, for the size
    /// mode in use (docs/intervals.md). Not defined for the risk difference.
    Log,
    /// Parametric bootstrap from the released table (Ferrando, Wang & Sheldon 2022): pure
    /// post-processing for small counts, see [`super::bootstrap`].
    Bootstrap,
    /// The noise-aware score interval for a ratio: test inversion after Koopman (1984) and
    /// Miettinen & Nurminen (1985), with the noise variance in the test ([`super::score`] for
    /// the relative risk, [`super::odds_ratio`] for the odds ratio). The relative risk's
    /// default; not defined for the risk difference.
    Score,
}

impl IntervalMethod {
    pub fn parse(name: &str) -> Result<Self, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "conservative" => Ok(Self::Conservative),
            "plain" => Ok(Self::Plain),
            "log" => Ok(Self::Log),
            "bootstrap" => Ok(Self::Bootstrap),
            "score" => Ok(Self::Score),
            other => Err(format!(
                "unknown interval method '{other}' (expected 'score', 'conservative', 'plain', 'log' or 'bootstrap')"
            )),
        }
    }

    /// The interval a statistic gets when none is asked for: the score interval for the ratios
    /// (it meets the coverage targets in every setting measured, on the grid and at rare
    /// outcomes off it, where Woolf's interval for the odds ratio covers only 0.83-0.94;
    /// docs/intervals.md §2, §5, §6), the conservative (adjusted Wald) interval for the risk
    /// difference.
    pub fn default_for(statistic: RatioStatistic) -> Self {
        match statistic {
            RatioStatistic::RelativeRisk | RatioStatistic::OddsRatio => Self::Score,
            RatioStatistic::RiskDifference => Self::Conservative,
        }
    }

    /// Whether the interval is a closed form of the released table alone.
    pub fn is_closed_form(self) -> bool {
        self != Self::Bootstrap
    }

    /// Checks that this method applies to `statistic` (the log scale and the score interval are
    /// for the ratios only).
    pub fn check_statistic(self, statistic: RatioStatistic) -> Result<(), String> {
        if matches!(self, Self::Score | Self::Log) && statistic == RatioStatistic::RiskDifference {
            return Err(format!(
                "ci_method '{self}' is a ratio's interval; the risk difference takes 'conservative' (default), 'plain' or 'bootstrap'"
            ));
        }
        Ok(())
    }
}

impl fmt::Display for IntervalMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Conservative => "conservative",
            Self::Plain => "plain",
            Self::Log => "log",
            Self::Bootstrap => "bootstrap",
            Self::Score => "score",
        })
    }
}

/// The noise plan for one private 2x2 table: per-cell noise for `(ε/2, δ/2)`, sensitivity 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TableNoise {
    pub cell: CountNoise,
    pub sizes: GroupSizes,
}

impl TableNoise {
    /// Calibrates the table release to total `(ε, δ)` under replace-one neighbours (see the
    /// module docs for the composition argument).
    pub fn calibrate(
        mechanism: Mechanism,
        epsilon: f64,
        delta: Option<f64>,
        calibration: GaussianCalibration,
        sizes: GroupSizes,
    ) -> Result<Self, String> {
        Self::calibrate_for_unit(mechanism, epsilon, delta, calibration, sizes, 1)
    }

    /// [`Self::calibrate`] when one privacy unit contributes up to `rows_per_unit` rows to the
    /// table: replacing the unit moves at most `rows_per_unit` rows, changing at most two cells
    /// by `rows_per_unit` in the worst case (L1 `2k`, L2 `√2·k`), so each cell is calibrated for
    /// `(ε/2, δ/2)` at sensitivity `k`, the same two-cell composition argument.
    pub fn calibrate_for_unit(
        mechanism: Mechanism,
        epsilon: f64,
        delta: Option<f64>,
        calibration: GaussianCalibration,
        sizes: GroupSizes,
        rows_per_unit: u32,
    ) -> Result<Self, String> {
        let cell = CountNoise::calibrate(
            mechanism,
            epsilon / 2.0,
            delta.map(|d| d / 2.0),
            rows_per_unit,
            calibration,
        )?;
        Ok(Self { cell, sizes })
    }

    /// Releases the table: the one and only noise draw for this group. An error (never a
    /// wrap) when a noisy cell or size leaves `i64` (see [`add_noise`]).
    pub fn release<R: RngCore + ?Sized>(
        &self,
        table: &TwoByTwo,
        rng: &mut R,
    ) -> Result<ReleasedTable, String> {
        self.release_with(table, rng, |rng| self.cell.sample(rng))
    }

    /// [`Self::release`] with the per-cell noise drawn by `sample` (which must follow the law
    /// of `self.cell`): the bootstrap replays releases through this with a faster sampler of
    /// the same law ([`super::bootstrap`]); released values always use the exact sampler.
    pub(crate) fn release_with<R: RngCore + ?Sized>(
        &self,
        table: &TwoByTwo,
        rng: &mut R,
        mut sample: impl FnMut(&mut R) -> i64,
    ) -> Result<ReleasedTable, String> {
        // Checked: an overflow is an error, never a wrap (the draws are made in the same order
        // as before, so seeded releases are unchanged).
        let mut noisy = |count: u64, rng: &mut R| add_noise(count, sample(rng));
        let sum = |a: i64, b: i64| {
            a.checked_add(b)
                .ok_or_else(|| "a noisy group size left the range of a 64-bit integer".to_string())
        };
        let public = |a: u64, b: u64| {
            a.checked_add(b)
                .and_then(|n| i64::try_from(n).ok())
                .ok_or_else(|| "a group size does not fit a 64-bit integer".to_string())
        };
        let exposed_cases = noisy(table.a, rng)?;
        let unexposed_cases = noisy(table.c, rng)?;
        let (exposed_total, unexposed_total) = match self.sizes {
            GroupSizes::Public => (public(table.a, table.b)?, public(table.c, table.d)?),
            GroupSizes::Private => {
                let exposed_non_cases = noisy(table.b, rng)?;
                let unexposed_non_cases = noisy(table.d, rng)?;
                (
                    sum(exposed_cases, exposed_non_cases)?,
                    sum(unexposed_cases, unexposed_non_cases)?,
                )
            }
        };
        Ok(ReleasedTable {
            exposed_cases,
            exposed_total,
            unexposed_cases,
            unexposed_total,
            sizes: self.sizes,
            noise_variance: self.cell.variance,
            noise_fourth_cumulant: self.cell.fourth_cumulant,
        })
    }
}

/// A validated interval request for the tables one [`TableNoise`] releases: confidence level,
/// its normal quantile, the method and, for the bootstrap, the noise law tabulated once per
/// call ([`super::bootstrap::ReplayNoise`]).
#[derive(Clone, Debug)]
pub struct IntervalSpec {
    pub confidence: f64,
    pub z: f64,
    pub method: IntervalMethod,
    replay: Option<std::sync::Arc<super::bootstrap::ReplayNoise>>,
}

impl TableNoise {
    /// The interval request for tables this noise releases (checks the confidence level).
    pub fn interval_spec(
        &self,
        confidence: f64,
        method: IntervalMethod,
    ) -> Result<IntervalSpec, String> {
        Ok(IntervalSpec {
            confidence,
            z: two_sided_z(confidence)?,
            method,
            replay: (method == IntervalMethod::Bootstrap)
                .then(|| std::sync::Arc::new(super::bootstrap::ReplayNoise::new(&self.cell))),
        })
    }

    /// The estimate of `statistic` with its interval, from a table this noise released: the
    /// one entry point for every interval method, used by the SQL functions and by the
    /// coverage simulations alike. The closed forms read the table alone
    /// ([`ReleasedTable::estimate_with_interval_at_z`]); the bootstrap also replays this
    /// noise ([`super::bootstrap::bootstrap_interval`]). Pure post-processing of the release.
    /// `spec` must come from [`Self::interval_spec`] of this noise.
    pub fn interval(
        &self,
        released: &ReleasedTable,
        statistic: RatioStatistic,
        spec: &IntervalSpec,
    ) -> Option<RatioInterval> {
        match (spec.method, &spec.replay) {
            (IntervalMethod::Bootstrap, Some(replay)) => super::bootstrap::bootstrap_interval(
                self,
                replay,
                released,
                statistic,
                spec.confidence,
                super::bootstrap::REPLICATES,
            ),
            (IntervalMethod::Bootstrap, None) => None,
            (method, _) => released.estimate_with_interval_at_z(statistic, spec.z, method),
        }
    }
}

/// A released table: noisy cases and (noisy or public) group sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReleasedTable {
    pub exposed_cases: i64,
    pub exposed_total: i64,
    pub unexposed_cases: i64,
    pub unexposed_total: i64,
    pub sizes: GroupSizes,
    /// Variance of the noise on each noised cell.
    pub noise_variance: f64,
    /// Fourth cumulant of that noise ([`super::CountNoise::fourth_cumulant`]).
    pub noise_fourth_cumulant: f64,
}

/// A released table's counts as real numbers with its size mode and per-cell noise variance:
/// what every interval formula reads. Real-valued so that the planning functions can pass the
/// expected counts `n·p`; [`ReleasedTable::counts`] gives a release's own.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReleasedCounts {
    /// `X̃`, exposed cases.
    pub x: f64,
    /// `ñ_x`, exposed rows.
    pub n_x: f64,
    /// `Ỹ`, unexposed cases.
    pub y: f64,
    /// `ñ_y`, unexposed rows.
    pub n_y: f64,
    pub sizes: GroupSizes,
    /// Variance `s²` of the noise on each noised cell.
    pub noise_variance: f64,
    /// Fourth cumulant `κ₄` of that noise (0 for Gaussian noise; [`Self::new`] sets 0).
    pub noise_fourth_cumulant: f64,
    /// The sizes as released, before any floor (`n_x`, `n_y` where none applied; see
    /// [`Self::with_released_sizes`]).
    pub released_sizes: [f64; 2],
}

impl ReleasedCounts {
    /// Counts with Gaussian-tailed noise of variance `noise_variance` (`κ₄ = 0`; see
    /// [`Self::with_noise_fourth_cumulant`]).
    pub fn new(x: f64, n_x: f64, y: f64, n_y: f64, sizes: GroupSizes, noise_variance: f64) -> Self {
        Self {
            x,
            n_x,
            y,
            n_y,
            sizes,
            noise_variance,
            noise_fourth_cumulant: 0.0,
            released_sizes: [n_x, n_y],
        }
    }

    /// The same counts, whose sizes `n_x`, `n_y` were floored from the released `raw` ones.
    pub fn with_released_sizes(self, raw: [f64; 2]) -> Self {
        Self {
            released_sizes: raw,
            ..self
        }
    }

    /// The same counts with noise of fourth cumulant `kappa4`.
    pub fn with_noise_fourth_cumulant(self, kappa4: f64) -> Self {
        Self {
            noise_fourth_cumulant: kappa4,
            ..self
        }
    }

    /// The group sizes floored at 1 (a noisy size can be 0 or below).
    pub fn sizes_floored(self) -> Self {
        Self {
            n_x: self.n_x.max(1.0),
            n_y: self.n_y.max(1.0),
            ..self
        }
    }

    /// The cells `[a, b, c, d]`: cases and non-cases (size minus cases) per arm.
    pub fn cells(&self) -> [f64; 4] {
        [self.x, self.n_x - self.x, self.y, self.n_y - self.y]
    }

    /// Cases and sizes floored at 1, as the paper's coverage study computes its interval.
    fn floored(self) -> Self {
        Self {
            x: self.x.max(1.0),
            y: self.y.max(1.0),
            ..self.sizes_floored()
        }
    }
}

/// An estimate with its interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioInterval {
    pub estimate: f64,
    pub lower: f64,
    pub upper: f64,
}

/// `Φ⁻¹(1 − (1 − confidence)/2)`, the two-sided normal quantile.
pub fn two_sided_z(confidence: f64) -> Result<f64, String> {
    if !(confidence.is_finite() && confidence > 0.0 && confidence < 1.0) {
        return Err(format!("confidence must be in (0, 1), got {confidence}"));
    }
    let normal = Normal::new(0.0, 1.0).expect("standard normal");
    Ok(normal.inverse_cdf(1.0 - (1.0 - confidence) / 2.0))
}

impl ReleasedTable {
    /// The relative risk `(X̃/n_x) / (max(Ỹ,1)/n_y)`: every noisy count in a denominator is
    /// floored at 1 (paper, Claim bias_ratio_counts), so the estimate always exists and its
    /// expectation is finite. With public sizes a group without exposed or unexposed rows has
    /// no relative risk (NULL); that reveals nothing beyond the declared-public sizes.
    pub fn relative_risk(&self) -> Option<f64> {
        let (nx, ny) = self.sizes_floored()?;
        Some((self.exposed_cases as f64 / nx) / (self.unexposed_cases.max(1) as f64 / ny))
    }

    pub(crate) fn sizes_floored(&self) -> Option<(f64, f64)> {
        if self.sizes == GroupSizes::Public
            && (self.exposed_total <= 0 || self.unexposed_total <= 0)
        {
            return None;
        }
        Some((
            self.exposed_total.max(1) as f64,
            self.unexposed_total.max(1) as f64,
        ))
    }

    /// The released counts with the sizes floored at 1 ([`Self::sizes_floored`]); `None`
    /// where that is `None`.
    pub fn counts(&self) -> Option<ReleasedCounts> {
        let (n_x, n_y) = self.sizes_floored()?;
        Some(
            ReleasedCounts::new(
                self.exposed_cases as f64,
                n_x,
                self.unexposed_cases as f64,
                n_y,
                self.sizes,
                self.noise_variance,
            )
            .with_noise_fourth_cumulant(self.noise_fourth_cumulant)
            .with_released_sizes([self.exposed_total as f64, self.unexposed_total as f64]),
        )
    }

    /// The normal-approximation interval for `p_x/p_y` (paper, Theorems Valid_CI and
    /// Gaussian_Valid_CI), computed as the paper's coverage study does: all counts floored at
    /// 1, `p̃ ± z·Ṽ` with
    /// `Ṽ² = p̃² [ (1/X̃ − 1/n_x) + (1/Ỹ − 1/n_y) + s²(w_x/X̃² + w_y/Ỹ²) ]`,
    /// `s²` the per-cell noise variance (conservative only). With public sizes `w = 1`, the
    /// paper's formula. With private sizes `p̃_x = X̃/(X̃ + B̃)` has noise in both parts; the delta
    /// method gives noise variance `s²((1−p_x)² + p_x²)/n_x²` for `p̃_x`, i.e.
    /// `w_x = p̃_x² + (1 − p̃_x)²` (≤ 1: noise in numerator and denominator partly cancels).
    /// The lower end is clamped at 0 (the parameter is non-negative) and negative sampling
    /// terms (noise pushing a count above its size) at 0.
    pub fn interval(
        &self,
        confidence: f64,
        method: IntervalMethod,
    ) -> Result<Option<RatioInterval>, String> {
        Ok(self.interval_at_z(two_sided_z(confidence)?, method))
    }

    /// [`Self::interval`] for a precomputed quantile `z = two_sided_z(confidence)`.
    /// `IntervalMethod::Log` gives `exp(ln p̃ ± z·Ṽ/p̃)` (see [`relative_risk_log_interval_at`]);
    /// `IntervalMethod::Bootstrap` needs the noise law and is computed by
    /// [`TableNoise::interval`], so here it gives `None`.
    pub fn interval_at_z(&self, z: f64, method: IntervalMethod) -> Option<RatioInterval> {
        let counts = self.counts()?;
        let estimate = self.relative_risk().expect("sizes are valid");
        let (lower, upper) = match method {
            IntervalMethod::Bootstrap => return None,
            IntervalMethod::Score => super::score::relative_risk_score_interval(counts, z),
            IntervalMethod::Log => {
                let (log_center, half_width) = relative_risk_log_interval_at(counts, z);
                (
                    (log_center - half_width).exp(),
                    (log_center + half_width).exp(),
                )
            }
            IntervalMethod::Conservative | IntervalMethod::Plain => {
                let (center, half_width) = relative_risk_interval_at(counts, method, z);
                ((center - half_width).max(0.0), center + half_width)
            }
        };
        Some(RatioInterval {
            estimate,
            lower,
            upper,
        })
    }
}

/// `Ṽ²/p̃²` of the paper's interval (Theorems Valid_CI and Gaussian_Valid_CI) at counts
/// already floored at 1: `(1/X − 1/n_x) + (1/Y − 1/n_y)` (negative terms at 0), plus for
/// `with_noise` the noise term `s²(w_x/X² + w_y/Y²)`, `w = 1` for public sizes and
/// `p̂² + (1 − p̂)²` for private ones (see [`ReleasedTable::interval`]). By the delta method it
/// is also the variance of `ln p̃` (docs/intervals.md), which the log interval uses.
pub fn relative_risk_relative_variance(counts: ReleasedCounts, with_noise: bool) -> f64 {
    let ReleasedCounts { x, n_x, y, n_y, .. } = counts;
    let mut v2 = (1.0 / x - 1.0 / n_x).max(0.0) + (1.0 / y - 1.0 / n_y).max(0.0);
    if with_noise {
        let weight = |cases: f64, total: f64| {
            let p = (cases / total).clamp(0.0, 1.0);
            counts.sizes.noise_weight(p, 1.0 - p)
        };
        v2 += counts.noise_variance * (weight(x, n_x) / (x * x) + weight(y, n_y) / (y * y));
    }
    v2
}

/// The centre and half-width of the relative-risk interval at (possibly real-valued) counts:
/// the formula of [`ReleasedTable::interval`] (counts floored at 1), shared with the planning
/// function [`crate::stats::planning::epsilon_for_half_width`].
pub fn relative_risk_interval_at(
    counts: ReleasedCounts,
    method: IntervalMethod,
    z: f64,
) -> (f64, f64) {
    let counts = counts.floored();
    let center = (counts.x / counts.n_x) / (counts.y / counts.n_y);
    let v2 = relative_risk_relative_variance(counts, method != IntervalMethod::Plain);
    (center, z * center * v2.sqrt())
}

/// The noise-aware log interval for the relative risk at (possibly real-valued) counts, as
/// `(ln centre, half-width on the log scale)`: Katz et al. (1978; paper, Appendix C, Equation
/// conf_int_RR) `ln T ± z·sqrt(V)` with `V` the delta-method variance of `ln p̃` including the
/// noise ([`relative_risk_relative_variance`], extending Theorem Gaussian_Valid_CI's variance
/// to the log scale; for private sizes the noise of a size partly cancels that of its count).
/// All counts floored at 1, as for the paper's interval. Derivation: docs/intervals.md.
pub fn relative_risk_log_interval_at(counts: ReleasedCounts, z: f64) -> (f64, f64) {
    let counts = counts.floored();
    let v = relative_risk_relative_variance(counts, true);
    (
        ((counts.x / counts.n_x) / (counts.y / counts.n_y)).ln(),
        z * v.sqrt(),
    )
}

/// The statistics of a 2x2 table: two ratios and the risk difference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RatioStatistic {
    /// `p_x / p_y`.
    RelativeRisk,
    /// `(p_x/(1 − p_x)) / (p_y/(1 − p_y)) = ad/bc`.
    OddsRatio,
    /// `p_x − p_y` (not a ratio: the demographic-parity gap beside the disparate-impact ratio).
    RiskDifference,
}

impl RatioStatistic {
    /// The statistic named as in SQL options (`statistic=odds_ratio`).
    pub fn parse(name: &str) -> Result<Self, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "relative_risk" => Ok(Self::RelativeRisk),
            "odds_ratio" => Ok(Self::OddsRatio),
            "risk_difference" => Ok(Self::RiskDifference),
            other => Err(format!(
                "unknown statistic '{other}' (expected 'relative_risk', 'odds_ratio' or 'risk_difference')"
            )),
        }
    }
}

impl fmt::Display for RatioStatistic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::RelativeRisk => "relative risk",
            Self::OddsRatio => "odds ratio",
            Self::RiskDifference => "risk difference",
        })
    }
}

impl ReleasedTable {
    /// The released cells `(a, b, c, d)`: cases and non-cases (size minus cases) per arm.
    pub fn cells(&self) -> [i64; 4] {
        [
            self.exposed_cases,
            self.exposed_total - self.exposed_cases,
            self.unexposed_cases,
            self.unexposed_total - self.unexposed_cases,
        ]
    }

    /// The estimate of `statistic`.
    pub fn estimate(&self, statistic: RatioStatistic) -> Option<f64> {
        match statistic {
            RatioStatistic::RelativeRisk => self.relative_risk(),
            RatioStatistic::OddsRatio => self.odds_ratio(),
            RatioStatistic::RiskDifference => self.risk_difference(),
        }
    }

    /// The estimate of `statistic` with its interval.
    pub fn estimate_with_interval(
        &self,
        statistic: RatioStatistic,
        confidence: f64,
        method: IntervalMethod,
    ) -> Result<Option<RatioInterval>, String> {
        Ok(self.estimate_with_interval_at_z(statistic, two_sided_z(confidence)?, method))
    }

    /// [`Self::estimate_with_interval`] for a precomputed quantile `z`: the closed-form
    /// intervals (`None` for `IntervalMethod::Bootstrap`, which needs the noise law: use
    /// [`TableNoise::interval`], the entry point the SQL functions and simulations share).
    pub fn estimate_with_interval_at_z(
        &self,
        statistic: RatioStatistic,
        z: f64,
        method: IntervalMethod,
    ) -> Option<RatioInterval> {
        match statistic {
            RatioStatistic::RelativeRisk => self.interval_at_z(z, method),
            RatioStatistic::OddsRatio => self.odds_ratio_interval_at_z(z, method),
            RatioStatistic::RiskDifference => self.risk_difference_interval_at_z(z, method),
        }
    }
}

impl ReleasedTable {
    /// The paper's construction applied to `statistic`: the estimate ± z·standard error on the
    /// statistic's own scale, with the noise variance added (Theorem Gaussian_Valid_CI). For
    /// the relative risk it is the paper's conservative interval; for the odds ratio
    /// `OR ± z·OR·sqrt(V)` (Woolf's variance plus the noise's, lower end at 0 at least); for the
    /// risk difference the Wald interval plus the noise. The reference every interval's width is
    /// compared with in docs/coverage.md (part 2); not an SQL `ci_method`.
    pub fn paper_construction_at_z(
        &self,
        statistic: RatioStatistic,
        z: f64,
    ) -> Option<RatioInterval> {
        match statistic {
            RatioStatistic::RelativeRisk => self.interval_at_z(z, IntervalMethod::Conservative),
            RatioStatistic::OddsRatio => self.odds_ratio_paper_construction_at_z(z),
            RatioStatistic::RiskDifference => self.risk_difference_paper_construction_at_z(z),
        }
    }
}

/// The classical, **non-private** log interval for the relative risk (Katz et al. 1978; paper,
/// Appendix C, Equation conf_int_RR): `exp(ln T ± z·sqrt(1/X − 1/n_x + 1/Y − 1/n_y))`.
/// `None` when a count of cases is 0 (the log is undefined).
pub fn katz_interval(
    exposed_cases: u64,
    exposed_total: u64,
    unexposed_cases: u64,
    unexposed_total: u64,
    confidence: f64,
) -> Result<Option<RatioInterval>, String> {
    katz_interval_at_z(
        exposed_cases,
        exposed_total,
        unexposed_cases,
        unexposed_total,
        two_sided_z(confidence)?,
    )
}

/// [`katz_interval`] for a precomputed quantile `z = two_sided_z(confidence)`.
pub fn katz_interval_at_z(
    exposed_cases: u64,
    exposed_total: u64,
    unexposed_cases: u64,
    unexposed_total: u64,
    z: f64,
) -> Result<Option<RatioInterval>, String> {
    if exposed_cases > exposed_total || unexposed_cases > unexposed_total {
        return Err("cases cannot exceed the total".into());
    }
    if exposed_cases == 0 || unexposed_cases == 0 {
        return Ok(None);
    }
    let (x, nx, y, ny) = (
        exposed_cases as f64,
        exposed_total as f64,
        unexposed_cases as f64,
        unexposed_total as f64,
    );
    let t = (x / nx) / (y / ny);
    let se = (1.0 / x - 1.0 / nx + 1.0 / y - 1.0 / ny).max(0.0).sqrt();
    Ok(Some(RatioInterval {
        estimate: t,
        lower: (t.ln() - z * se).exp(),
        upper: (t.ln() + z * se).exp(),
    }))
}

/// A released table from its four values, for the unit tests of the interval modules.
#[cfg(test)]
pub(crate) fn released(
    x: i64,
    nx: i64,
    y: i64,
    ny: i64,
    sizes: GroupSizes,
    var: f64,
) -> ReleasedTable {
    ReleasedTable {
        exposed_cases: x,
        exposed_total: nx,
        unexposed_cases: y,
        unexposed_total: ny,
        sizes,
        noise_variance: var,
        noise_fourth_cumulant: 0.0,
    }
}

/// `Φ⁻¹(0.975)`, the two-sided 95% quantile, for the unit tests of the interval modules.
#[cfg(test)]
pub(crate) const Z95: f64 = 1.959963984540054;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_closed_form_interval_is_well_formed_on_any_release() {
        // Noise can release any integers: counts below 0 or above their size, sizes at or
        // below 0 (private). Every closed-form interval of every statistic must then give no
        // interval (public sizes ≤ 0 only) or ends that are not NaN, in order, and for the
        // ratios not below 0; no panic. Tables of 1 to 10⁶ rows, no noise up to the noise of
        // ε = 0.05 (Laplace) and ε = 0.5 (Gaussian, with its κ₄ = 0). (A sweep of 19 million
        // such intervals, with more sizes, counts and quantiles, found none ill-formed.)
        let laplace = crate::stats::CountNoise::calibrate(
            crate::stats::Mechanism::Laplace,
            0.025,
            None,
            1,
            Default::default(),
        )
        .unwrap();
        let mut checked = 0;
        for (s2, k4) in [
            (0.0, 0.0),
            (laplace.variance, laplace.fourth_cumulant),
            (300.0, 0.0),
        ] {
            for sizes in [GroupSizes::Public, GroupSizes::Private] {
                for (nx, ny) in [(1, 1), (1, 200), (5, 5), (200, 200), (1_000_000, 3)] {
                    let counts = |n: i64| [-3, 0, 1, n / 2, n - 1, n, n + 3];
                    let totals = |n: i64| match sizes {
                        GroupSizes::Public => vec![n],
                        GroupSizes::Private => vec![n, 0, -4],
                    };
                    for tx in totals(nx) {
                        for ty in totals(ny) {
                            for x in counts(nx) {
                                for y in counts(ny) {
                                    let table = ReleasedTable {
                                        noise_fourth_cumulant: k4,
                                        ..released(x, tx, y, ty, sizes, s2)
                                    };
                                    for statistic in [
                                        RatioStatistic::RelativeRisk,
                                        RatioStatistic::OddsRatio,
                                        RatioStatistic::RiskDifference,
                                    ] {
                                        for method in [
                                            IntervalMethod::Conservative,
                                            IntervalMethod::Plain,
                                            IntervalMethod::Log,
                                            IntervalMethod::Score,
                                        ] {
                                            if method.check_statistic(statistic).is_err() {
                                                continue;
                                            }
                                            let Some(ci) = table.estimate_with_interval_at_z(
                                                statistic, Z95, method,
                                            ) else {
                                                assert!(
                                                    sizes == GroupSizes::Public && tx.min(ty) <= 0
                                                );
                                                continue;
                                            };
                                            checked += 1;
                                            let ratio = statistic != RatioStatistic::RiskDifference;
                                            assert!(
                                                !ci.estimate.is_nan()
                                                    && !ci.lower.is_nan()
                                                    && !ci.upper.is_nan()
                                                    && ci.lower <= ci.upper
                                                    && (!ratio || ci.lower >= 0.0),
                                                "{statistic} {method}: {ci:?} from {table:?}"
                                            );
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 50_000, "{checked}");
    }

    #[test]
    fn size_modes_noise_weights_come_from_their_noised_cells() {
        for sizes in [GroupSizes::Public, GroupSizes::Private] {
            for p in [0.0, 0.1, 0.37, 0.9] {
                let q = 1.0 - p;
                let cells = sizes.noised_cells(p, q).into_iter().flatten();
                let (w, c) = cells.fold((0.0, 0.0), |(w, c), (u, dn)| (w + u * u, c + u * dn));
                assert!((w - sizes.noise_weight(p, q)).abs() < 1e-15, "{sizes} {p}");
                assert!(
                    (c - sizes.size_noise_covariance(p, q)).abs() < 1e-15,
                    "{sizes} {p}"
                );
            }
        }
    }

    #[test]
    fn estimate_floors_only_denominators() {
        let t = released(-3, 100, -5, 100, GroupSizes::Private, 8.0);
        assert_eq!(t.relative_risk(), Some(-3.0));
        let t = released(30, 100, 20, 200, GroupSizes::Public, 8.0);
        assert!((t.relative_risk().unwrap() - 3.0).abs() < 1e-12);
        assert_eq!(
            released(3, 0, 2, 5, GroupSizes::Public, 8.0).relative_risk(),
            None
        );
        // Private sizes never give NULL: a NULL would depend on exact data.
        assert!(released(3, -2, 2, 5, GroupSizes::Private, 8.0)
            .relative_risk()
            .is_some());
    }

    #[test]
    fn interval_matches_hand_computation() {
        // Public, conservative: p = (40/200)/(20/200) = 2,
        // V² = 4 (1/40 - 1/200 + 1/20 - 1/200 + 8 (1/1600 + 1/400)).
        let t = released(40, 200, 20, 200, GroupSizes::Public, 8.0);
        let ci = t
            .interval(0.95, IntervalMethod::Conservative)
            .unwrap()
            .unwrap();
        let v = 2.0
            * (1.0f64 / 40.0 - 0.005 + 0.05 - 0.005 + 8.0 * (1.0 / 1600.0 + 1.0 / 400.0)).sqrt();
        let z = 1.959963984540054;
        assert!((ci.upper - (2.0 + z * v)).abs() < 1e-9);
        assert!((ci.lower - (2.0 - z * v)).abs() < 1e-9);
        let plain = t.interval(0.95, IntervalMethod::Plain).unwrap().unwrap();
        assert!(plain.upper < ci.upper && plain.lower > ci.lower);
        // Private sizes shrink the noise term by w = p² + (1-p)².
        let p = released(40, 200, 20, 200, GroupSizes::Private, 8.0)
            .interval(0.95, IntervalMethod::Conservative)
            .unwrap()
            .unwrap();
        assert!(p.upper < ci.upper && p.upper > plain.upper);
    }

    #[test]
    fn log_interval_matches_hand_computation() {
        // X̃=40 of 200, Ỹ=20 of 200, s² = 8 (docs/intervals.md, worked example).
        // Public: V = 1/40 − 1/200 + 1/20 − 1/200 + 8(1/1600 + 1/400) = 0.09 = 0.0650 + 0.0250.
        // Private: w_x = 0.2² + 0.8² = 0.68, w_y = 0.1² + 0.9² = 0.82,
        // V = 0.065 + 8(0.68/1600 + 0.82/400) = 0.065 + 0.0198 = 0.0848.
        let z = 1.959963984540054;
        for (sizes, v) in [
            (GroupSizes::Public, 0.09),
            (
                GroupSizes::Private,
                0.065 + 8.0 * (0.68 / 1600.0 + 0.82 / 400.0),
            ),
        ] {
            let t = released(40, 200, 20, 200, sizes, 8.0);
            let ci = t.interval(0.95, IntervalMethod::Log).unwrap().unwrap();
            let h = z * f64::sqrt(v);
            assert!((ci.estimate - 2.0).abs() < 1e-12);
            assert!((ci.lower - 2.0 * (-h).exp()).abs() < 1e-12, "{sizes}");
            assert!((ci.upper - 2.0 * h.exp()).abs() < 1e-12, "{sizes}");
            // Same variance as the paper's conservative interval, on the log scale: the log
            // interval is the conservative one's half-width mapped through exp, so it is wider
            // and shifted up (e^h − 1 > h > 1 − e^{−h}).
            let cons = t
                .interval(0.95, IntervalMethod::Conservative)
                .unwrap()
                .unwrap();
            assert!((cons.upper - 2.0 * (1.0 + h)).abs() < 1e-12);
            assert!(ci.upper > cons.upper && ci.lower > cons.lower);
        }
        // No noise: the log interval is Katz's.
        let t = released(30, 100, 15, 100, GroupSizes::Public, 0.0);
        let katz = katz_interval(30, 100, 15, 100, 0.95).unwrap().unwrap();
        let ci = t.interval(0.95, IntervalMethod::Log).unwrap().unwrap();
        assert!((ci.lower - katz.lower).abs() < 1e-12 && (ci.upper - katz.upper).abs() < 1e-12);
        // The bootstrap needs the noise law: not from the table alone.
        assert_eq!(t.interval(0.95, IntervalMethod::Bootstrap).unwrap(), None);
    }

    #[test]
    fn confidence_is_checked() {
        let t = released(40, 200, 20, 200, GroupSizes::Public, 8.0);
        assert!(t.interval(1.0, IntervalMethod::Plain).is_err());
        assert!(t.interval(f64::NAN, IntervalMethod::Plain).is_err());
    }

    #[test]
    fn katz_matches_textbook_example() {
        // X=30/100, Y=15/100: RR=2, se = sqrt(1/30-1/100+1/15-1/100) = 0.2828...
        let ci = katz_interval(30, 100, 15, 100, 0.95).unwrap().unwrap();
        let se = (1.0f64 / 30.0 - 0.01 + 1.0 / 15.0 - 0.01).sqrt();
        assert!((ci.estimate - 2.0).abs() < 1e-12);
        assert!((ci.lower - (2f64.ln() - 1.959963984540054 * se).exp()).abs() < 1e-9);
        assert_eq!(katz_interval(0, 10, 3, 10, 0.95).unwrap(), None);
        assert!(katz_interval(11, 10, 3, 10, 0.95).is_err());
    }
}
