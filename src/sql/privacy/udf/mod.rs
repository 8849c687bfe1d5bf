//! The scalar functions a rewritten plan calls at run time, which no analyst's SQL names: the
//! total forms of what can fail ([`total`], put in place by
//! [`rewrite::total`](crate::sql::privacy::rewrite::total)) and the eager forms of `CASE`,
//! `AND` and `OR` ([`eager`], put in place by
//! [`rewrite::eager`](crate::sql::privacy::rewrite::eager)).

pub mod eager;
pub mod total;
