//! The locked session for untrusted analysts, and the limits on what it plans.

pub mod limits;
pub mod lock;
pub mod planner;
