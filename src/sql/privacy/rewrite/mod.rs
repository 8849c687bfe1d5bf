//! The logical rewrites the privacy pass and the optimiser apply to a DP query's plan.

pub mod bounding;
pub mod eager;
pub mod public_fanout;
pub mod public_groups;
pub mod release_order;
pub mod selection;
pub mod total;
