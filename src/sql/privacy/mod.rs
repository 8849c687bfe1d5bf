//! The privacy layer, by kind:
//! - [`pass`]: the privacy pass, the analyzer rule that runs the rest on every plan: it binds,
//!   rewrites and charges each DP call;
//! - [`plan`]: the owner's declarations ([`protection`](plan::protection)), the plan analysis that proves each
//!   DP aggregate's contribution bound and that only DP leaves a protected table
//!   ([`analysis`](plan::analysis)), and the bounds on the plan's size ([`size`](plan::size));
//! - [`rewrite`]: the plan rewrites it applies: contribution bounding ([`bounding`](rewrite::bounding)), public
//!   group keys ([`public_groups`](rewrite::public_groups)) and private group selection ([`selection`](rewrite::selection)), total
//!   expressions ([`total`](rewrite::total)), the order releases come out in ([`release_order`](rewrite::release_order)), the cap
//!   on what joins multiply protected rows by ([`public_fanout`](rewrite::public_fanout)) and, in a locked session's
//!   optimised plan, conditionals that evaluate every branch ([`eager`](rewrite::eager));
//! - [`udf`]: the scalar functions those rewrites call at run time: the total forms
//!   ([`total`](udf::total)) and the eager forms ([`eager`](udf::eager));
//! - [`exec`]: physical operators and rules: the protected scan ([`protected_scan`](exec::protected_scan)) and the
//!   guard that makes one charge buy one release ([`release`](exec::release));
//! - [`session`]: the locked session for untrusted analysts ([`lock`](session::lock)) and the limits on the
//!   statements it plans ([`limits`](session::limits)).

pub mod exec;
pub mod pass;
pub mod plan;
pub mod rewrite;
pub mod session;
pub mod udf;
