//! The statistics core: mechanisms and their calibration, exact samplers, estimators and
//! intervals. It knows nothing of DataFusion and is tested on its own.

pub mod accuracy;
pub mod audit;
pub mod bias;
pub mod bootstrap;
pub mod contribution;
pub mod interval;
pub mod mechanism;
pub mod methods;
pub mod odds_ratio;
pub mod paper;
pub mod planning;
pub mod quantile;
pub mod relative_risk;
pub mod risk_difference;
pub mod rng;
pub mod sampler;
pub mod score;
pub mod simulation;
pub mod table;

pub use contribution::Contribution;
pub use interval::IntervalSpec;
pub use mechanism::{CountNoise, GaussianCalibration, Mechanism};
pub use methods::RatioMethod;
pub use table::{
    GroupSizes, IntervalMethod, RatioInterval, RatioStatistic, ReleasedTable, TableNoise, TwoByTwo,
};
