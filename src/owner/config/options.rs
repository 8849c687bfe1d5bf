//! The `[options]` section: the `dp.*` options the owner fixes before a session is locked.

use std::collections::BTreeMap;

/// Options an analyst's budget sets (per analyst, never in `[options]`).
const PER_ANALYST: [&str; 5] = [
    "budget_measure",
    "epsilon_budget",
    "delta_budget",
    "rho_budget",
    "ledger",
];

/// Options the `[[table]]` sections set.
const PER_TABLE: [&str; 2] = ["protected_tables", "public_tables"];

/// The `[options]` section `raw` as `(key, value)` pairs `SET` takes (keys without `dp.`),
/// each checked as a session would set it, so a typo fails at start-up.
pub(super) fn parse(raw: BTreeMap<String, toml::Value>) -> Result<Vec<(String, String)>, String> {
    let mut options = Vec::new();
    for (key, value) in raw {
        let key = key.strip_prefix("dp.").unwrap_or(&key).to_string();
        if PER_ANALYST.contains(&key.as_str()) {
            return Err(format!(
                "[options] dp.{key}: budgets and ledgers are set per analyst ([[analyst]] budget_measure, epsilon_budget, delta_budget, rho_budget, ledger)"
            ));
        }
        if PER_TABLE.contains(&key.as_str()) {
            return Err(format!(
                "[options] dp.{key}: declare each table's protection in its [[table]] section (unit = \"COLUMN\", protection = \"rows\" or \"public\")"
            ));
        }
        if key == "locked" {
            return Err(
                "[options] dp.locked: sessions from this configuration are always locked"
                    .to_string(),
            );
        }
        let value = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(format!(
                    "[options] dp.{key}: expected a string, number or boolean, got {}",
                    other.type_str()
                ))
            }
        };
        // Validate now, so a typo fails at start-up rather than in an analyst's session.
        let mut probe = crate::DpOptions::default();
        datafusion::config::ExtensionOptions::set(&mut probe, &key, &value)
            .map_err(|e| format!("[options] {}", crate::sql::errors::one_line_error(&e)))?;
        options.push((key, value));
    }

    Ok(options)
}
