//! The `[[analyst]]` sections: each analyst's credential, budget and ledger.
//!
//! A budget is declared in one measure ([`Budget`], as the session options declare it):
//! `epsilon_budget` (pure ε) or `epsilon_budget` and `delta_budget` ((ε, δ), the default
//! measure), or `budget_measure = "zcdp"` with `rho_budget`, or with `epsilon_budget` and
//! `delta_budget` as a target (ε, δ) converted to ρ.

use crate::sql::accounting::measure::{Budget, BudgetMeasure};
use serde::Deserialize;
use std::path::PathBuf;

/// One `[[analyst]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalystConfig {
    pub name: String,
    /// How the analyst's password is checked; `None`: the analyst cannot log in to the
    /// server (a `dpsql --config` shell the owner hands over).
    pub credential: Option<Credential>,
    /// The analyst's budget, in its measure (always enforced: a locked session needs one).
    pub budget: Budget,
    /// The analyst's durable ledger (resolved against the configuration's directory).
    pub ledger: PathBuf,
}

/// An analyst's stored credential.
#[derive(Clone, PartialEq)]
pub enum Credential {
    /// An Argon2 hash in PHC format (`$argon2id$v=19$...`), as `dp-server --hash-password`
    /// prints it: the form to use.
    Hash(String),
    /// A password in clear text (tests and throw-away set-ups only).
    Password(String),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Hash(_) => write!(f, "Hash(..)"),
            Credential::Password(_) => write!(f, "Password(..)"),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAnalyst {
    name: String,
    password: Option<String>,
    password_hash: Option<String>,
    budget_measure: Option<String>,
    epsilon_budget: Option<f64>,
    delta_budget: Option<f64>,
    rho_budget: Option<f64>,
    ledger: Option<String>,
}

/// The `[[analyst]]` sections `raw`, validated; ledgers are resolved by `resolve`.
pub(super) fn parse(
    raw: Vec<RawAnalyst>,
    resolve: &dyn Fn(&str) -> String,
) -> Result<Vec<AnalystConfig>, String> {
    let mut analysts: Vec<AnalystConfig> = Vec::new();
    for a in raw {
        let who = format!("analyst '{}'", a.name);
        if a.name.is_empty() || a.name.contains(':') || a.name.chars().any(char::is_whitespace) {
            return Err(format!(
                "analyst name '{}' must be non-empty, without ':' or spaces",
                a.name
            ));
        }
        if analysts.iter().any(|other| other.name == a.name) {
            return Err(format!("{who} is declared twice"));
        }
        let credential = match (a.password, a.password_hash) {
            (Some(_), Some(_)) => {
                return Err(format!("{who}: give password_hash or password, not both"))
            }
            (None, Some(hash)) => Some(Credential::Hash(hash)),
            (Some(password), None) => Some(Credential::Password(password)),
            (None, None) => None,
        };
        let measure = match a.budget_measure.as_deref() {
            None => BudgetMeasure::EpsilonDelta,
            Some(name) => BudgetMeasure::parse(name).map_err(|e| format!("{who}: {e}"))?,
        };
        // Each amount in its range, then one budget in one measure (Budget::new, as for the
        // session options), then one that is enforced: a locked session requires a budget.
        if let Some(epsilon) = a.epsilon_budget {
            if !(epsilon.is_finite() && epsilon > 0.0) {
                return Err(format!(
                    "{who}: epsilon_budget must be a positive number, got {epsilon}"
                ));
            }
        }
        if let Some(delta) = a.delta_budget {
            if !(0.0..1.0).contains(&delta) {
                return Err(format!(
                    "{who}: delta_budget must be in [0, 1), got {delta}"
                ));
            }
        }
        if let Some(rho) = a.rho_budget {
            if !(rho.is_finite() && rho > 0.0) {
                return Err(format!(
                    "{who}: rho_budget must be a positive number, got {rho}"
                ));
            }
        }
        let budget = Budget::new(measure, a.epsilon_budget, a.delta_budget, a.rho_budget, "")
            .map_err(|e| format!("{who}: {e}"))?;
        match measure {
            BudgetMeasure::EpsilonDelta if budget.epsilon.is_none() => {
                return Err(format!(
                    "{who}: needs epsilon_budget (a locked session requires a budget)"
                ))
            }
            BudgetMeasure::Zcdp if !budget.is_enforced() => {
                return Err(format!(
                    "{who}: budget_measure = \"zcdp\" needs rho_budget, or epsilon_budget and delta_budget (a target converted to rho): a locked session requires a budget"
                ))
            }
            _ => {}
        }
        let ledger = a.ledger.ok_or_else(|| {
            format!(
                "{who}: needs ledger = \"PATH\" (the file that keeps the analyst's spending across sessions and restarts)"
            )
        })?;
        let ledger = PathBuf::from(resolve(&ledger));
        if let Some(other) = analysts.iter().find(|o| o.ledger == ledger) {
            return Err(format!(
                "{who}: ledger {} is also analyst '{}''s: each analyst needs their own (a ledger is one budget and one history)",
                ledger.display(),
                other.name
            ));
        }
        analysts.push(AnalystConfig {
            name: a.name,
            credential,
            budget,
            ledger,
        });
    }

    Ok(analysts)
}
