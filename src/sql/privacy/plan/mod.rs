//! Planning: what the owner declared, what the plan proves, and how large it may grow.

pub mod analysis;
pub mod protection;
pub mod size;
