//! The measures a privacy budget is declared and counted in, and a budget as declared
//! ([`Budget`]): what the session options, an analyst's configuration and the ledger name,
//! apart from how the accountant charges it ([`super::budget`]).

use crate::stats::mechanism::rho_for;

/// The measure a budget is declared and counted in (`dp.budget_measure`, an analyst's
/// `budget_measure`): the one place the accountant's measures are named (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BudgetMeasure {
    /// `(ε, δ)`-DP, composed by adding ε and δ; pure ε-DP when the δ budget is 0.
    #[default]
    EpsilonDelta,
    /// ρ-zero-concentrated DP (Bun & Steinke 2016), composed by adding ρ.
    Zcdp,
}

impl BudgetMeasure {
    /// Every measure, in the order messages list them.
    pub const ALL: [Self; 2] = [Self::EpsilonDelta, Self::Zcdp];

    /// Its name as `budget_measure` and a ledger's header write it.
    pub fn name(self) -> &'static str {
        match self {
            Self::EpsilonDelta => "epsilon_delta",
            Self::Zcdp => "zcdp",
        }
    }

    /// The measure named `value` (any case, `'epsilon_delta'` or `'zcdp'`).
    pub fn parse(value: &str) -> std::result::Result<Self, String> {
        let wanted = value.trim().to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|m| m.name() == wanted)
            .ok_or_else(|| {
                format!("budget_measure must be 'epsilon_delta' or 'zcdp', got '{value}'")
            })
    }
}

impl std::fmt::Display for BudgetMeasure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A budget as declared: its measure and the amounts given (the session options, or an
/// analyst's section of the owner's configuration). [`Budget::new`] checks that they declare
/// one budget in that measure (module docs):
/// - [`BudgetMeasure::EpsilonDelta`]: `epsilon` and `delta`, either or both (`None`: 0 when
///   the other is set; neither: no limit); `rho` is not allowed.
/// - [`BudgetMeasure::Zcdp`]: `rho`, or a target `epsilon` with `delta` in (0, 1) converted to
///   ρ ([`Budget::rho_limit`]), not both; none of them: no limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub measure: BudgetMeasure,
    pub epsilon: Option<f64>,
    pub delta: Option<f64>,
    pub rho: Option<f64>,
}

impl Budget {
    /// The budget `measure` with the amounts given, checked (see the type's docs). Amounts
    /// are finite and `>= 0`, as their parsers ensure. Errors name the keys as `keys` prefixes
    /// them (`"dp."` for session options, `""` for an analyst's section).
    pub fn new(
        measure: BudgetMeasure,
        epsilon: Option<f64>,
        delta: Option<f64>,
        rho: Option<f64>,
        keys: &str,
    ) -> std::result::Result<Self, String> {
        let budget = Self {
            measure,
            epsilon,
            delta,
            rho,
        };
        let measure_key = format!("{keys}budget_measure");
        match measure {
            BudgetMeasure::EpsilonDelta => {
                if rho.is_some() {
                    return Err(format!(
                        "{keys}rho_budget is a zCDP budget, but {measure_key} is 'epsilon_delta': set {measure_key} = 'zcdp' to count in rho (a budget is declared in one measure)"
                    ));
                }
            }
            BudgetMeasure::Zcdp => match (rho, epsilon, delta) {
                (None, None, None) => {}
                (Some(_), None, None) => {}
                (Some(_), _, _) => {
                    return Err(format!(
                        "a zCDP budget is {keys}rho_budget, or {keys}epsilon_budget with {keys}delta_budget as a target (epsilon, delta) converted to rho: not both"
                    ))
                }
                (None, epsilon, delta) => {
                    let target = epsilon.zip(delta).and_then(|(e, d)| rho_for(e, d));
                    if target.is_none() {
                        return Err(format!(
                            "a zCDP budget ({measure_key} = 'zcdp') is {keys}rho_budget, or a target (epsilon, delta) converted to rho: {keys}epsilon_budget > 0 with {keys}delta_budget in (0, 1); got epsilon_budget={}, delta_budget={}",
                            epsilon.map_or("none".to_string(), |e| e.to_string()),
                            delta.map_or("none".to_string(), |d| d.to_string()),
                        ));
                    }
                }
            },
        }
        Ok(budget)
    }

    /// The `dp.*` options (keys without `dp.`) that declare this budget, as `SET` takes them.
    pub fn options(&self) -> Vec<(&'static str, String)> {
        let mut options = vec![("budget_measure", self.measure.name().to_string())];
        for (key, value) in [
            ("epsilon_budget", self.epsilon),
            ("delta_budget", self.delta),
            ("rho_budget", self.rho),
        ] {
            if let Some(value) = value {
                options.push((key, value.to_string()));
            }
        }
        options
    }

    /// Whether a limit is enforced (some amount is declared).
    pub fn is_enforced(&self) -> bool {
        self.epsilon.is_some() || self.delta.is_some() || self.rho.is_some()
    }

    /// What the budget is, for `dp_budget()`: `epsilon` (pure ε: no δ budget), `epsilon_delta`
    /// or `zcdp`.
    pub fn label(&self) -> &'static str {
        match self.measure {
            BudgetMeasure::EpsilonDelta
                if self.epsilon.is_some() && self.delta.unwrap_or(0.0) == 0.0 =>
            {
                "epsilon"
            }
            measure => measure.name(),
        }
    }

    /// The enforced `(epsilon, delta)` limits of an (ε, δ) budget: `None` when neither is set
    /// or the budget is in zCDP; an unset one is 0 when the other is set.
    pub fn limits(&self) -> Option<(f64, f64)> {
        if self.measure != BudgetMeasure::EpsilonDelta || !self.is_enforced() {
            return None;
        }
        Some((self.epsilon.unwrap_or(0.0), self.delta.unwrap_or(0.0)))
    }

    /// The target `(ε, δ)` of a zCDP budget declared by one.
    pub fn target(&self) -> Option<(f64, f64)> {
        match self.measure {
            BudgetMeasure::Zcdp => self.epsilon.zip(self.delta),
            BudgetMeasure::EpsilonDelta => None,
        }
    }

    /// The ρ of a zCDP budget: `rho_budget`, or its target converted once by [`rho_for`] (the
    /// largest ρ whose `cdp_delta(ρ, ε)` is at most δ); `None` without a zCDP limit.
    pub fn rho_limit(&self) -> Option<f64> {
        match self.measure {
            BudgetMeasure::Zcdp => self
                .rho
                .or_else(|| self.target().and_then(|(e, d)| rho_for(e, d))),
            BudgetMeasure::EpsilonDelta => None,
        }
    }
}
