//! The odds ratio of a released 2x2 table and its intervals: Woolf's (1955) log interval,
//! widened for the noise by the delta method, and the paper's construction on the odds
//! ratio's own scale; the noise-aware score interval (`ci_method=score`, the default) is in
//! [`super::score::odds_ratio`]. docs/intervals.md §2.

use super::score::odds_ratio::odds_ratio_score_interval;
use super::table::{two_sided_z, GroupSizes, IntervalMethod, RatioInterval, ReleasedTable};

impl ReleasedTable {
    /// The odds ratio `ad/bc` with the noisy denominators `b`, `c` floored at 1 (as for the
    /// relative risk). NULL only for public sizes with an empty arm.
    pub fn odds_ratio(&self) -> Option<f64> {
        self.sizes_floored()?;
        let [a, b, c, d] = self.cells();
        Some((a as f64 * d as f64) / (b.max(1) as f64 * c.max(1) as f64))
    }

    /// Woolf's log interval for the odds ratio, widened for the noise as the paper widens the
    /// relative-risk interval (Theorem Gaussian_Valid_CI): with all cells floored at 1,
    /// `exp(log OR ± z·sqrt(V))`, `V = 1/a + 1/b + 1/c + 1/d` plus, for `conservative`, the
    /// delta-method noise variance of `log(ad/bc)`: `s²(1/a² + 1/b² + 1/c² + 1/d²)` with private
    /// sizes (four independent noises), `s²((1/a + 1/b)² + (1/c + 1/d)²)` with public sizes
    /// (`b = n_x − ã` carries `a`'s noise with the opposite sign).
    pub fn odds_ratio_interval(
        &self,
        confidence: f64,
        method: IntervalMethod,
    ) -> Result<Option<RatioInterval>, String> {
        Ok(self.odds_ratio_interval_at_z(two_sided_z(confidence)?, method))
    }

    /// [`Self::odds_ratio_interval`] for a precomputed quantile `z`. Woolf's interval is
    /// already on the log scale, so `IntervalMethod::Log` is the conservative one (Woolf plus
    /// the noise); `IntervalMethod::Score` is [`odds_ratio_score_interval`];
    /// `IntervalMethod::Bootstrap` gives `None` here (see [`TableNoise::interval`]).
    ///
    /// [`TableNoise::interval`]: super::table::TableNoise::interval
    pub fn odds_ratio_interval_at_z(
        &self,
        z: f64,
        method: IntervalMethod,
    ) -> Option<RatioInterval> {
        let estimate = self.odds_ratio()?;
        if method == IntervalMethod::Score {
            let (lower, upper) = odds_ratio_score_interval(self.counts()?, z);
            return Some(RatioInterval {
                estimate,
                lower,
                upper,
            });
        }
        if method == IntervalMethod::Bootstrap {
            return None;
        }
        let (log_center, v) = self.woolf_log_variance(method != IntervalMethod::Plain);
        let half_width = z * v.sqrt();
        Some(RatioInterval {
            estimate,
            lower: (log_center - half_width).exp(),
            upper: (log_center + half_width).exp(),
        })
    }

    /// The paper's construction (Theorem Gaussian_Valid_CI: estimate ± z·standard error, on the
    /// statistic's own scale) applied to the odds ratio: `OR ± z·OR·sqrt(V)`, lower end clamped
    /// at 0, with Woolf's variance plus the noise's (the `V` of the conservative interval, all
    /// cells floored at 1). Not offered in SQL: the reference the coverage study compares the
    /// odds ratio's widths with (docs/coverage.md, part 2).
    pub fn odds_ratio_paper_construction_at_z(&self, z: f64) -> Option<RatioInterval> {
        let estimate = self.odds_ratio()?;
        let (log_center, v) = self.woolf_log_variance(true);
        let center = log_center.exp();
        let half_width = z * center * v.sqrt();
        Some(RatioInterval {
            estimate,
            lower: (center - half_width).max(0.0),
            upper: center + half_width,
        })
    }

    /// [`woolf_log_variance`] of the released cells.
    fn woolf_log_variance(&self, with_noise: bool) -> (f64, f64) {
        let noise_variance = if with_noise { self.noise_variance } else { 0.0 };
        woolf_log_variance(self.cells().map(|v| v as f64), self.sizes, noise_variance)
    }
}

/// `(ln(ad/bc), V)` for cells `[a, b, c, d]` (real-valued, so that planning can pass expected
/// cells), all floored at 1: Woolf's (1955) variance `1/a + 1/b + 1/c + 1/d` plus the
/// delta-method variance of the noise on `ln(ad/bc)` (0 for `noise_variance = 0`):
/// `s²(1/a² + 1/b² + 1/c² + 1/d²)` with private sizes (four independent noises),
/// `s²((1/a + 1/b)² + (1/c + 1/d)²)` with public sizes (`b = n_x − ã` carries `a`'s noise
/// with the opposite sign). The paper's Theorem Gaussian_Valid_CI variance, on the log scale.
pub fn woolf_log_variance(cells: [f64; 4], sizes: GroupSizes, noise_variance: f64) -> (f64, f64) {
    let [a, b, c, d] = cells.map(|v| v.max(1.0));
    let mut v = 1.0 / a + 1.0 / b + 1.0 / c + 1.0 / d;
    if noise_variance > 0.0 {
        v += noise_variance
            * match sizes {
                GroupSizes::Private => {
                    1.0 / (a * a) + 1.0 / (b * b) + 1.0 / (c * c) + 1.0 / (d * d)
                }
                GroupSizes::Public => (1.0 / a + 1.0 / b).powi(2) + (1.0 / c + 1.0 / d).powi(2),
            };
    }
    ((a * d / (b * c)).ln(), v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::table::{released, Z95};

    #[test]
    fn odds_ratio_matches_hand_computation() {
        // a=40, b=160, c=20, d=180: OR = 40·180/(160·20) = 2.25,
        // Woolf V = 1/40 + 1/160 + 1/20 + 1/180; private conservative adds 8·Σ1/cell².
        let t = released(40, 200, 20, 200, GroupSizes::Private, 8.0);
        assert!((t.odds_ratio().unwrap() - 2.25).abs() < 1e-12);
        let z = Z95;
        let v: f64 = 1.0 / 40.0 + 1.0 / 160.0 + 1.0 / 20.0 + 1.0 / 180.0;
        let plain = t
            .odds_ratio_interval(0.95, IntervalMethod::Plain)
            .unwrap()
            .unwrap();
        assert!((plain.lower - (2.25f64.ln() - z * v.sqrt()).exp()).abs() < 1e-9);
        let noise = 8.0 * (1.0 / 1600.0 + 1.0 / 25600.0 + 1.0 / 400.0 + 1.0 / 32400.0);
        let cons = t
            .odds_ratio_interval(0.95, IntervalMethod::Conservative)
            .unwrap()
            .unwrap();
        assert!((cons.upper - (2.25f64.ln() + z * (v + noise).sqrt()).exp()).abs() < 1e-9);
    }

    #[test]
    fn odds_ratio_paper_construction_is_symmetric() {
        // OR ± z·OR·sqrt(V), V the conservative (Woolf + noise) variance, lower end at 0.
        let t = released(40, 200, 20, 200, GroupSizes::Private, 8.0);
        let v: f64 = 1.0 / 40.0
            + 1.0 / 160.0
            + 1.0 / 20.0
            + 1.0 / 180.0
            + 8.0 * (1.0 / 1600.0 + 1.0 / 25600.0 + 1.0 / 400.0 + 1.0 / 32400.0);
        let ci = t.odds_ratio_paper_construction_at_z(Z95).unwrap();
        assert!((ci.upper - 2.25 * (1.0 + Z95 * v.sqrt())).abs() < 1e-12);
        assert!((ci.lower - 2.25 * (1.0 - Z95 * v.sqrt())).abs() < 1e-12);
        let wide = released(3, 200, 2, 200, GroupSizes::Public, 50.0);
        assert_eq!(
            wide.odds_ratio_paper_construction_at_z(Z95).unwrap().lower,
            0.0
        );
    }

    #[test]
    fn odds_ratio_log_is_the_conservative_woolf_interval() {
        let t = released(40, 200, 20, 200, GroupSizes::Public, 8.0);
        assert_eq!(
            t.odds_ratio_interval(0.95, IntervalMethod::Log).unwrap(),
            t.odds_ratio_interval(0.95, IntervalMethod::Conservative)
                .unwrap()
        );
    }
}
