//! Scalar SQL functions.
pub mod rr_ci_katz;
