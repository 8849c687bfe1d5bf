//! The locked session for untrusted analysts, the limits on what it plans, and the work per row
//! each function it can call is allowed over protected rows.

pub mod costs;
pub mod limits;
pub mod lock;
pub mod planner;
pub mod release_time;
