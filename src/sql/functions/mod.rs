//! DP aggregate and scalar functions.

pub mod aggregate;
pub mod scalar;
