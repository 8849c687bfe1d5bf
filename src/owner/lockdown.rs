//! The one place the owner's sessions call the protected-tables API (issue 10):
//! [`lock_session`] declares each table's protection, fixes the owner's options and the
//! analyst's budget and ledger, and locks; [`analyst_statement`] runs one statement of an
//! untrusted analyst.
//!
//! INTERIM until the protected-tables work lands on main: `protect`, `lock` and `analyst_sql`
//! are approximated here (budgets, ledger and `require_secure` fixed; only queries, `EXPLAIN`
//! and `SET` of accuracy options accepted). Protection is not enforced by this interim code:
//! the server's tests assert the contract (`SELECT *` on a protected table is refused) and
//! fail until the real API replaces these bodies.

use super::config::TableProtection;
use datafusion::error::{DataFusionError, Result};
use datafusion::prelude::{DataFrame, SessionContext};

/// The budget and ledger a locked session spends.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionBudget {
    pub epsilon: f64,
    pub delta: Option<f64>,
    pub ledger: String,
}

fn set(ctx: &SessionContext, key: &str, value: &str) -> Result<()> {
    let state = ctx.state_ref();
    let mut state = state.write();
    state.config_mut().options_mut().set(key, value)
}

/// Declares every table's protection, applies the owner's `dp.*` options and the budget, and
/// locks `ctx` for an untrusted analyst.
pub fn lock_session(
    ctx: &SessionContext,
    tables: &[(String, TableProtection)],
    options: &[(String, String)],
    budget: &SessionBudget,
) -> Result<()> {
    for (_name, _protection) in tables {
        // After the merge: crate::protect(ctx, name, protection.into())?;
    }
    for (key, value) in options {
        set(ctx, &format!("dp.{key}"), value)?;
    }
    set(ctx, "dp.epsilon_budget", &budget.epsilon.to_string())?;
    if let Some(delta) = budget.delta {
        set(ctx, "dp.delta_budget", &delta.to_string())?;
    }
    set(ctx, "dp.ledger", &budget.ledger)?;
    // After the merge: crate::lock(ctx)
    set(ctx, "dp.require_secure", "true")
}

/// `dp.*` options an analyst may `SET` (accuracy only) in the interim session.
const ACCURACY_OPTIONS: [&str; 6] = [
    "confidence",
    "ci_method",
    "mechanism",
    "method",
    "bias_correction",
    "gaussian_calibration",
];

/// Runs one statement as an untrusted analyst.
pub async fn analyst_statement(ctx: &SessionContext, sql: &str) -> Result<DataFrame> {
    use datafusion::sql::parser::{DFParser, Statement};
    use datafusion::sql::sqlparser::ast::{self, Set};
    // After the merge: crate::analyst_sql(ctx, sql).await
    let statements = DFParser::parse_sql(sql)?;
    if statements.len() != 1 {
        return Err(DataFusionError::Plan(format!(
            "expected one statement, got {}",
            statements.len()
        )));
    }
    let allowed = match &statements[0] {
        Statement::Statement(s) => match s.as_ref() {
            ast::Statement::Query(_) | ast::Statement::Explain { .. } => true,
            ast::Statement::Set(Set::SingleAssignment { variable, .. }) => {
                let key = variable.to_string().to_ascii_lowercase();
                key.strip_prefix("dp.")
                    .is_some_and(|k| ACCURACY_OPTIONS.contains(&k))
            }
            _ => false,
        },
        Statement::Explain(_) => true,
        _ => false,
    };
    if !allowed {
        return Err(DataFusionError::Plan(format!(
            "not allowed in a locked session: {}",
            statements[0]
        )));
    }
    ctx.sql(sql).await
}
