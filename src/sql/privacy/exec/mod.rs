//! Physical operators and physical optimiser rules of the privacy layer.

pub mod protected_scan;
pub mod release;
