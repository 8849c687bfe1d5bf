//! The private 2x2 table: its cells, the noise plan that releases it, and the released table
//! that every estimator and interval reads ([`super::relative_risk`], [`super::odds_ratio`],
//! [`super::risk_difference`], [`super::score`], [`super::bootstrap`]).
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

use super::mechanism::{add_noise, CountNoise, GaussianCalibration, Mechanism, ReleaseShape};
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

/// The noise plan for one private 2x2 table: each noised cell gets an independent draw of
/// `cell`, calibrated for the table's [`ReleaseShape`] (per cell `(ε/2, δ/2)` at sensitivity 1
/// for Laplace and the paper's Gaussian; one vector at L2 sensitivity `√2` for the analytic
/// Gaussian).
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
        Self::calibrate_for_shape(
            mechanism,
            epsilon,
            delta,
            calibration,
            sizes,
            ReleaseShape::new(2, 1),
        )
    }

    /// [`Self::calibrate`] for a release of `shape`: when one privacy unit contributes up to
    /// `k` rows to each of up to `g` tables (groups), replacing the unit moves at most `k` rows
    /// out of and into them: each cell by at most `k`, L1 at most `2gk`, L2 at most `k·√(2g)`.
    /// With `k = 1` that is at most `m = 2g` cells, `ReleaseShape::new(2g, 1)`; with `k > 1`
    /// the rows can leave two cells and join two others, `ReleaseShape::new(2g, k).spread()`.
    /// Calibrated by [`CountNoise::calibrate_release`] for the whole `(ε, δ)`.
    pub fn calibrate_for_shape(
        mechanism: Mechanism,
        epsilon: f64,
        delta: Option<f64>,
        calibration: GaussianCalibration,
        sizes: GroupSizes,
        shape: ReleaseShape,
    ) -> Result<Self, String> {
        let cell = CountNoise::calibrate_release(mechanism, epsilon, delta, shape, calibration)?;
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
    pub fn release_with<R: RngCore + ?Sized>(
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
    pub(crate) fn floored(self) -> Self {
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
    /// Whether the statistic is a ratio (no effect at 1, a log scale), not a difference (no
    /// effect at 0).
    pub fn is_ratio(self) -> bool {
        self != Self::RiskDifference
    }

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
