//! Planning: what the owner declared, what the plan proves, and the rule that acts on it.

pub mod analysis;
pub mod protection;
pub mod rule;
pub mod size;
