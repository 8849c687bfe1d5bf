//! The privacy rewrites: the planner rule that binds each DP call and the rewrites below it.

pub mod bounding;
pub mod public_groups;
pub mod rule;
pub mod selection;
