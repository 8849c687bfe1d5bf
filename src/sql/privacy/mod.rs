//! The privacy layer: the owner's declarations ([`protection`]), the plan analysis that proves
//! each DP aggregate's contribution bound and that only DP leaves a protected table
//! ([`analysis`]), the planner rule that binds and charges each call ([`rule`]), the rewrites it
//! applies ([`bounding`], [`public_groups`], [`selection`]), the guard that makes one charge buy
//! one release ([`release`]), the order releases come out in ([`release_order`]), the cap on what joins multiply protected rows by ([`public_fanout`]) and the locked session for untrusted analysts ([`lock`]).

pub mod analysis;
pub mod bounding;
pub mod limits;
pub mod lock;
pub mod protected_scan;
pub mod protection;
pub mod public_fanout;
pub mod public_groups;
pub mod release;
pub mod release_order;
pub mod rule;
pub mod selection;
pub mod total;
