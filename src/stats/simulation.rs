//! Monte Carlo studies of the estimators, through the same code the SQL functions use.
//!
//! The sampling model is the paper's (Section 4): `X ~ Bin(n_x, p_x)`, `Y ~ Bin(n_y, p_y)`
//! independent, the exposed and unexposed group sizes fixed by design. The table released is
//! `(X, n_x − X, Y, n_y − Y)` with the noise of a [`TableNoise`].

use super::table::{IntervalMethod, RatioStatistic, TableNoise, TwoByTwo};
use rand::Rng;
use rand_distr::{Binomial, Distribution};
use std::fmt;

/// An interval a coverage study measures: one of the crate's methods (through
/// [`TableNoise::interval`], as the SQL functions compute it) or the paper's construction
/// applied to the statistic ([`super::table::ReleasedTable::paper_construction_at_z`]), the
/// reference widths are compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Construction {
    Method(IntervalMethod),
    Paper,
}

impl From<IntervalMethod> for Construction {
    fn from(method: IntervalMethod) -> Self {
        Self::Method(method)
    }
}

impl PartialEq<IntervalMethod> for Construction {
    fn eq(&self, other: &IntervalMethod) -> bool {
        *self == Self::Method(*other)
    }
}

impl fmt::Display for Construction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Method(method) => method.fmt(f),
            Self::Paper => f.write_str("paper's construction"),
        }
    }
}

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
            RatioStatistic::RiskDifference => self.exposed_risk - self.unexposed_risk,
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
/// value of `statistic`, and their mean width. Intervals come from [`TableNoise::interval`],
/// the entry point the SQL functions use.
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
    let spec = noise.interval_spec(confidence, method)?;
    let mut covered = 0usize;
    let mut width = 0.0;
    for _ in 0..simulations {
        let table = design.draw(rng);
        let released = noise.release(&table, rng)?;
        if let Some(ci) = noise.interval(&released, statistic, &spec) {
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

/// Coverage and width of one interval method in a study.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MethodCoverage {
    pub statistic: RatioStatistic,
    pub method: Construction,
    /// Fraction of intervals containing the true value (a missing interval counts as a miss).
    pub coverage: f64,
    /// Median of `upper − lower` over the intervals that exist (`+∞` when more than half are
    /// unbounded).
    pub median_width: f64,
    /// Fraction of the intervals that exist whose upper end is `+∞` (the score interval's,
    /// when the release cannot exclude a zero denominator).
    pub unbounded: f64,
}

/// Coverage of several `(statistic, method)` intervals on the **same** simulated releases
/// (common random numbers, so the methods' differences are not Monte Carlo noise): each of
/// `simulations` tables is drawn from `design`, released once by `noise` and every interval is
/// computed from that release through [`TableNoise::interval`], as the SQL functions do (or,
/// for [`Construction::Paper`], by the paper's construction).
pub fn coverage_study<R: Rng + ?Sized, M: Copy + Into<Construction>>(
    design: &Design,
    noise: &TableNoise,
    confidence: f64,
    intervals: &[(RatioStatistic, M)],
    simulations: usize,
    rng: &mut R,
) -> Result<Vec<MethodCoverage>, String> {
    let intervals: Vec<(RatioStatistic, Construction)> =
        intervals.iter().map(|&(s, m)| (s, m.into())).collect();
    let specs = intervals
        .iter()
        .map(|&(_, construction)| {
            let method = match construction {
                Construction::Method(method) => method,
                Construction::Paper => IntervalMethod::Conservative,
            };
            noise.interval_spec(confidence, method)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let truths: Vec<f64> = intervals.iter().map(|&(s, _)| design.truth(s)).collect();
    let mut covered = vec![0usize; intervals.len()];
    let mut widths: Vec<Vec<f64>> = vec![Vec::with_capacity(simulations); intervals.len()];
    for _ in 0..simulations {
        let table = design.draw(rng);
        let released = noise.release(&table, rng)?;
        for (k, &(statistic, construction)) in intervals.iter().enumerate() {
            let ci = match construction {
                Construction::Method(_) => noise.interval(&released, statistic, &specs[k]),
                Construction::Paper => released.paper_construction_at_z(statistic, specs[k].z),
            };
            if let Some(ci) = ci {
                if ci.lower <= truths[k] && truths[k] <= ci.upper {
                    covered[k] += 1;
                }
                // An interval reaching +∞ (also the degenerate [+∞, +∞]) is unbounded.
                widths[k].push(if ci.upper.is_infinite() {
                    f64::INFINITY
                } else {
                    ci.upper - ci.lower
                });
            }
        }
    }
    Ok(intervals
        .iter()
        .zip(covered)
        .zip(widths)
        .map(|((&(statistic, method), covered), mut widths)| {
            widths.sort_unstable_by(f64::total_cmp);
            let unbounded = widths.iter().filter(|w| w.is_infinite()).count();
            MethodCoverage {
                statistic,
                method,
                coverage: covered as f64 / simulations as f64,
                median_width: widths.get(widths.len() / 2).copied().unwrap_or(f64::NAN),
                unbounded: unbounded as f64 / widths.len().max(1) as f64,
            }
        })
        .collect())
}
