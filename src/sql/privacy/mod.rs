//! The privacy layer, by kind:
//! - [`plan`]: the owner's declarations ([`protection`]), the plan analysis that proves each
//!   DP aggregate's contribution bound and that only DP leaves a protected table
//!   ([`analysis`]), and the analyzer rule that binds, rewrites and charges each call
//!   ([`rule`]);
//! - [`rewrite`]: the plan rewrites it applies: contribution bounding ([`bounding`]), public
//!   group keys ([`public_groups`]) and private group selection ([`selection`]), total
//!   expressions ([`total`]), the order releases come out in ([`release_order`]) and the cap
//!   on what joins multiply protected rows by ([`public_fanout`]);
//! - [`exec`]: physical operators and rules: the protected scan ([`protected_scan`]) and the
//!   guard that makes one charge buy one release ([`release`]);
//! - [`session`]: the locked session for untrusted analysts ([`lock`]) and the limits on the
//!   statements it plans ([`limits`]).
//!
//! Each module is also reachable directly under `sql::privacy` (`sql::privacy::analysis`).

pub mod exec;
pub mod plan;
pub mod rewrite;
pub mod session;

pub use exec::{protected_scan, release};
pub use plan::{analysis, protection, rule};
pub use rewrite::{bounding, public_fanout, public_groups, release_order, selection, total};
pub use session::{limits, lock};
