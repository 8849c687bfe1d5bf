//! The privacy layer, by kind:
//! - [`plan`]: the owner's declarations ([`protection`](plan::protection)), the plan analysis that proves each
//!   DP aggregate's contribution bound and that only DP leaves a protected table
//!   ([`analysis`](plan::analysis)), and the analyzer rule that binds, rewrites and charges each call
//!   ([`rule`](plan::rule));
//! - [`rewrite`]: the plan rewrites it applies: contribution bounding ([`bounding`](rewrite::bounding)), public
//!   group keys ([`public_groups`](rewrite::public_groups)) and private group selection ([`selection`](rewrite::selection)), total
//!   expressions ([`total`](rewrite::total)), the order releases come out in ([`release_order`](rewrite::release_order)) and the cap
//!   on what joins multiply protected rows by ([`public_fanout`](rewrite::public_fanout));
//! - [`exec`]: physical operators and rules: the protected scan ([`protected_scan`](exec::protected_scan)) and the
//!   guard that makes one charge buy one release ([`release`](exec::release));
//! - [`session`]: the locked session for untrusted analysts ([`lock`](session::lock)) and the limits on the
//!   statements it plans ([`limits`](session::limits)).

pub mod exec;
pub mod plan;
pub mod rewrite;
pub mod session;
