//! Monte Carlo studies of the estimators, through the same code the SQL functions use.
//!
//! The sampling model is the paper's (Section 4): `X ~ Bin(n_x, p_x)`, `Y ~ Bin(n_y, p_y)`
//! independent, the exposed and unexposed group sizes fixed by design. The table released is
//! `(X, n_x − X, Y, n_y − Y)` with the noise of a [`TableNoise`].

use super::ratio::{IntervalMethod, RatioStatistic, TableNoise, TwoByTwo};
use rand::Rng;
use rand_distr::{Binomial, Distribution};

/// One simulated study design.
#[derive(Clone, Copy, Debug)]
pub struct Design {
    pub exposed_size: u64,
    pub unexposed_size: u64,
    pub exposed_risk: f64,
    pub unexposed_risk: f64,
}

impl Design {
    /// The true value of `statistic`.
    pub fn truth(&self, statistic: RatioStatistic) -> f64 {
        let odds = |p: f64| p / (1.0 - p);
        match statistic {
            RatioStatistic::RelativeRisk => self.exposed_risk / self.unexposed_risk,
            RatioStatistic::OddsRatio => odds(self.exposed_risk) / odds(self.unexposed_risk),
        }
    }

    /// One exact table drawn from the design.
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> TwoByTwo {
        let x = Binomial::new(self.exposed_size, self.exposed_risk)
            .expect("risk in [0, 1]")
            .sample(rng);
        let y = Binomial::new(self.unexposed_size, self.unexposed_risk)
            .expect("risk in [0, 1]")
            .sample(rng);
        TwoByTwo {
            a: x,
            b: self.exposed_size - x,
            c: y,
            d: self.unexposed_size - y,
        }
    }
}

/// The fraction of `simulations` intervals (one noisy release each) that contain the true
/// value of `statistic`, and their mean width.
pub fn coverage<R: Rng + ?Sized>(
    design: &Design,
    statistic: RatioStatistic,
    noise: &TableNoise,
    confidence: f64,
    method: IntervalMethod,
    simulations: usize,
    rng: &mut R,
) -> Result<(f64, f64), String> {
    let truth = design.truth(statistic);
    let mut covered = 0usize;
    let mut width = 0.0;
    for _ in 0..simulations {
        let table = design.draw(rng);
        let released = noise.release(&table, rng);
        if let Some(ci) = released.estimate_with_interval(statistic, confidence, method)? {
            if ci.lower <= truth && truth <= ci.upper {
                covered += 1;
            }
            width += ci.upper - ci.lower;
        }
    }
    Ok((
        covered as f64 / simulations as f64,
        width / simulations as f64,
    ))
}
