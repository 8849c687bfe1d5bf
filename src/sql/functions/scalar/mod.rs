//! Scalar SQL functions.
pub mod analytic;
pub mod rr_ci_katz;
