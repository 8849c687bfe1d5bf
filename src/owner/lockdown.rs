//! The one place the owner's sessions call the protected-tables API ([`crate::protect`],
//! [`crate::lock`], [`crate::analyst_sql`]): [`lock_session`] declares each table's
//! protection, fixes the owner's options and the analyst's budget and ledger, and locks.

use crate::sql::accounting::measure::Budget;
use crate::Protection;
use datafusion::error::Result;
use datafusion::prelude::SessionContext;

/// The budget (in its measure) and ledger a locked session spends.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionBudget {
    pub budget: Budget,
    pub ledger: String,
}

/// Sets `dp.KEY` (the owner's own settings, before locking: no SQL is involved).
fn set(ctx: &SessionContext, key: &str, value: &str) -> Result<()> {
    let state = ctx.state_ref();
    let mut state = state.write();
    state
        .config_mut()
        .options_mut()
        .set(&format!("dp.{key}"), value)
}

/// Declares every table's protection, applies the owner's `dp.*` options and the budget, and
/// locks `ctx` for an untrusted analyst.
pub fn lock_session(
    ctx: &SessionContext,
    tables: &[(String, Protection)],
    options: &[(String, String)],
    budget: &SessionBudget,
) -> Result<()> {
    for (name, protection) in tables {
        crate::protect(ctx, name, protection.clone())?;
    }
    for (key, value) in options {
        set(ctx, key, value)?;
    }
    for (key, value) in budget.budget.options() {
        set(ctx, key, &value)?;
    }
    set(ctx, "ledger", &budget.ledger)?;
    crate::lock(ctx)
}
