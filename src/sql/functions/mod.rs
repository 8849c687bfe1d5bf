//! DP aggregate and scalar functions, and the registry that installs them: [`aggregates`] and
//! [`scalars`] list every function a session resolves by name, [`register_all`] installs them
//! (as DataFusion's `functions-aggregate` does), and a test checks that no two share a name and
//! that `docs/sql-reference.md` documents each.

pub mod aggregate;
pub mod scalar;

use aggregate::{DpAggregate, STATISTICS};
use datafusion::common::Result;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
use std::sync::Arc;

/// Every DP aggregate ([`STATISTICS`]), unconfigured.
pub fn aggregates() -> Vec<Arc<AggregateUDF>> {
    STATISTICS.iter().map(|s| DpAggregate::udaf(*s)).collect()
}

/// Every scalar function: `rr_ci_katz` and the analytic functions (no data, no privacy cost).
pub fn scalars() -> Vec<Arc<ScalarUDF>> {
    let mut all = vec![scalar::rr_ci_katz::udf()];
    all.extend(scalar::analytic::udfs().into_iter().map(Arc::new));
    all
}

/// Registers [`aggregates`] and [`scalars`] on `ctx`. (The bounding rewrite's functions are
/// not among them: an analyst's SQL must not resolve them, `privacy::rewrite::bounding::internal_udf`.)
pub fn register_all(ctx: &SessionContext) -> Result<()> {
    for udaf in aggregates() {
        ctx.register_udaf(udaf.as_ref().clone());
    }
    for udf in scalars() {
        ctx.register_udf(udf.as_ref().clone());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn names() -> Vec<String> {
        let mut names: Vec<String> = aggregates().iter().map(|f| f.name().to_string()).collect();
        names.extend(scalars().iter().map(|f| f.name().to_string()));
        names
    }

    #[test]
    fn no_two_functions_share_a_name() {
        let mut seen = BTreeSet::new();
        for name in names().into_iter().chain(["dp_budget".to_string()]) {
            assert!(seen.insert(name.clone()), "{name} registered twice");
        }
        for internal in ["dp_keyed_hash", "dp_unit_sample", "dp_unit_sample_ordered"] {
            assert!(
                !seen.contains(internal),
                "{internal} must not be registered"
            );
        }
    }

    #[test]
    fn every_function_and_option_is_documented() {
        let reference = include_str!("../../../docs/sql-reference.md");
        for name in names() {
            assert!(
                reference.contains(&format!("`{name}(")),
                "docs/sql-reference.md does not document {name}"
            );
        }
        for option in crate::sql::options::OPTIONS {
            assert!(
                reference.contains(&format!("`dp.{}`", option.key)),
                "docs/sql-reference.md does not document dp.{}",
                option.key
            );
        }
    }
}
