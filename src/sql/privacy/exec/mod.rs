//! Physical operators and physical optimiser rules of the privacy layer.

pub mod bound_contributions;
pub mod constant_args;
pub mod drain;
pub mod pass_through;
pub mod protected_scan;
pub mod release;
