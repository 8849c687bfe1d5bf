//! The `dp.*` session options and the per-call options string.
//!
//! Session options are set with `SET dp.<key> = <value>`; a DP aggregate's optional last
//! argument is a string of `key=value` pairs (comma or space separated) using the same keys,
//! which override the session for that call:
//! `'mechanism=gaussian, delta=1e-6, confidence=0.9'`. Which keys a statistic accepts is its
//! own declaration (`DpStatistic::option_keys`).

use crate::sql::accounting::measure::{Budget, BudgetMeasure};
use crate::sql::privacy::plan::protection::Protections;
use crate::stats::{GaussianCalibration, GroupSizes, IntervalMethod, Mechanism, RatioMethod};
use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::common::{config_err, Result};
use std::any::Any;

/// How the GROUP BY keys of a grouped DP query are declared public (`SET dp.public_groups`).
///
/// Without a declaration ([`PublicGroups::None`]) a grouped DP query is refused unless private
/// group selection is set ([`crate::sql::privacy::rewrite::selection`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PublicGroups {
    /// `'none'` (or `''`): the keys are not declared public.
    #[default]
    None,
    /// `'assert'`: the user asserts every key that occurs is public; keys are released as they
    /// occur in the data.
    Assert,
    /// Any other value: the name of a table (`table`, `schema.table` or
    /// `catalog.schema.table`, SQL identifier rules) whose rows are the public keys. Rows of
    /// undeclared keys are dropped and every declared key is released, with noise on zero
    /// when it has no rows ([`crate::sql::privacy::rewrite::public_groups`]).
    Table(String),
}

impl PublicGroups {
    /// Parses a `dp.public_groups` value: `'assert'`, `'none'`/`''`, or anything else as a
    /// table name.
    pub fn parse(value: &str) -> std::result::Result<Self, String> {
        let v = value.trim();
        if v.is_empty() || v.eq_ignore_ascii_case("none") {
            return Ok(Self::None);
        }
        if v.eq_ignore_ascii_case("assert") {
            return Ok(Self::Assert);
        }
        // Whether the table exists is checked when a grouped DP query uses it (it may be
        // created after the SET).
        Ok(Self::Table(v.to_string()))
    }
}

impl std::fmt::Display for PublicGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::Assert => f.write_str("assert"),
            Self::Table(name) => f.write_str(name),
        }
    }
}

/// Session-wide defaults for every DP aggregate (`SET dp.<key> = ...`).
#[derive(Debug, Clone, PartialEq)]
pub struct DpOptions {
    /// NON-PRIVATE reproducible noise when set (tests and reproduction only).
    pub seed: Option<u64>,
    pub mechanism: Mechanism,
    pub delta: Option<f64>,
    pub confidence: f64,
    /// The interval method; `None` (`default`): each statistic's own default
    /// ([`IntervalMethod::default_for`]: `score` for the relative risk and the odds ratio,
    /// `conservative` for the risk difference).
    pub ci_method: Option<IntervalMethod>,
    pub group_sizes: GroupSizes,
    pub gaussian_calibration: GaussianCalibration,
    /// How the relative risk's point release computes the ratio (the paper's methods).
    pub method: RatioMethod,
    /// NoisedLog only: apply the bias correction of Claim bias_log_RR.
    pub bias_correction: bool,
    /// PTR only: the proposed bound on the local sensitivity.
    pub ptr_bound: Option<f64>,
    /// The measure the session's budget is declared and counted in ([`BudgetMeasure`]:
    /// `epsilon_delta`, the default, or `zcdp`). Enforced by [`crate::sql::accounting::budget`].
    pub budget_measure: BudgetMeasure,
    /// Total epsilon the session may spend (`None`: no budget enforcement unless
    /// `delta_budget` is set); under `zcdp`, with `delta_budget`, the target converted to ρ.
    pub epsilon_budget: Option<f64>,
    /// Total delta the session may spend (`None`: 0 when `epsilon_budget` is set).
    pub delta_budget: Option<f64>,
    /// Total ρ (zCDP) the session may spend, under `budget_measure = 'zcdp'`.
    pub rho_budget: Option<f64>,
    /// Append-only file that keeps the charges across sessions and processes.
    pub ledger: Option<String>,
    /// Refuse the non-private seeded mode for the rest of the session.
    pub require_secure: bool,
    /// The data owner's declarations: which tables are protected, by which unit column, and
    /// which are public (`dp.protected_tables`, `dp.public_tables`).
    pub protections: Protections,
    /// Set by [`crate::sql::privacy::session::lock::lock`]: the owner's options ([`SetBy::Owner`]) can no longer be
    /// changed, by `SET` or by a call's options string. Not an option itself.
    pub locked: bool,
    /// Rows of one unit kept per group (a random sample), for tables protected by a unit.
    pub max_rows_per_unit: u32,
    /// Groups one unit may contribute to, for tables protected by a unit.
    pub max_groups_per_unit: u32,
    /// Rows one protected row may meet through joins and `UNNEST` in a locked query
    /// ([`crate::sql::privacy::rewrite::public_fanout`]): one person adds at most this many times
    /// their own rows (and the bytes of their values) to a query's work.
    pub max_public_fanout: u32,
    /// Whether the GROUP BY keys are declared public: not at all, by assertion, or as a table
    /// of keys ([`PublicGroups`]).
    pub public_groups: PublicGroups,
    /// Private group selection: privacy parameters of the thresholded noisy group count.
    pub selection_epsilon: Option<f64>,
    pub selection_delta: Option<f64>,
    /// The noise of private group selection's counts (Laplace, or the Gaussian calibrated as
    /// one vector over the groups).
    pub selection_mechanism: Mechanism,
}

impl Default for DpOptions {
    fn default() -> Self {
        Self {
            seed: None,
            mechanism: Mechanism::Laplace,
            delta: None,
            confidence: 0.95,
            ci_method: None,
            group_sizes: GroupSizes::Private,
            gaussian_calibration: GaussianCalibration::Analytic,
            method: RatioMethod::NoisyCounts,
            bias_correction: false,
            ptr_bound: None,
            budget_measure: BudgetMeasure::EpsilonDelta,
            epsilon_budget: None,
            delta_budget: None,
            rho_budget: None,
            ledger: None,
            require_secure: false,
            protections: Protections::default(),
            locked: false,
            max_rows_per_unit: 1,
            max_groups_per_unit: 1,
            max_public_fanout: 64,
            public_groups: PublicGroups::None,
            selection_epsilon: None,
            selection_delta: None,
            selection_mechanism: Mechanism::Laplace,
        }
    }
}

impl ConfigExtension for DpOptions {
    const PREFIX: &'static str = "dp";
}

/// Who may set an option once a session is locked ([`crate::sql::privacy::session::lock::lock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetBy {
    /// The data owner only: the option protects the data (budgets, ledger, secure noise) or
    /// declares something about it that releases exact values when false (public tables, keys
    /// and group sizes). A locked session refuses it, by `SET` and in a call's options.
    Owner,
    /// The analyst too: it only changes accuracy, or spends budget that is charged.
    Analyst,
}

/// One `dp.*` option, declared once: its key, what it means (shown by `SHOW ALL`), who may set
/// it, whether a call's options string may set it, and how it is read, parsed and copied.
/// Everything else (`SET`, `SHOW`, per-call options, the lock, the wire codec that ships a
/// bound call's options to Ballista executors) reads this table, so an option cannot be
/// forgotten in one of them.
pub struct DpOption {
    pub key: &'static str,
    pub doc: &'static str,
    pub set_by: SetBy,
    /// Whether a DP aggregate's options string may set it (each function lists which of
    /// these it understands: `DpStatistic::option_keys`).
    pub per_call: bool,
    /// The value as `SHOW` prints it and `set` parses it back (`None`: unset).
    pub get: fn(&DpOptions) -> Option<String>,
    /// Parses and applies a value: the one parser of `SET` and of a call's options.
    pub set: fn(&mut DpOptions, &str) -> std::result::Result<(), String>,
    /// Copies this option's value from another set of options (to reset it to a default).
    pub copy: fn(&mut DpOptions, &DpOptions),
}

impl std::fmt::Debug for DpOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpOption")
            .field("key", &self.key)
            .field("set_by", &self.set_by)
            .field("per_call", &self.per_call)
            .finish()
    }
}

/// Every `dp.*` option, in the order `SHOW ALL` lists them and the wire codec applies them
/// (`seed` before `require_secure`, which refuses a seed set after it).
pub const OPTIONS: &[DpOption] = &[
    DpOption {
        key: "seed",
        doc: "NON-PRIVATE: a non-negative integer makes the noise reproducible (tests only); 'none' restores secure noise",
        set_by: SetBy::Owner,
        per_call: false,
        get: |o| o.seed.map(|s| s.to_string()),
        set: |o, value| {
            let v = value.trim();
            o.seed = if v.eq_ignore_ascii_case("none") {
                None
            } else {
                let seed = v.parse::<u64>().map_err(|_| {
                    format!("seed must be a non-negative integer (or 'none'), got '{value}'")
                })?;
                if o.require_secure {
                    return Err(
                        "dp.require_secure is on: a seed (reproducible, NON-PRIVATE noise) is refused"
                            .to_string(),
                    );
                }
                Some(seed)
            };
            Ok(())
        },
        copy: |o, from| o.seed = from.seed,
    },
    DpOption {
        key: "mechanism",
        doc: "noise mechanism: 'laplace' (pure epsilon-DP, default) or 'gaussian' (needs delta)",
        set_by: SetBy::Analyst,
        per_call: true,
        get: |o| Some(o.mechanism.to_string()),
        set: |o, value| {
            o.mechanism = Mechanism::parse(value)?;
            Ok(())
        },
        copy: |o, from| o.mechanism = from.mechanism,
    },
    DpOption {
        key: "delta",
        doc: "delta in (0, 1) for the gaussian mechanism",
        set_by: SetBy::Analyst,
        per_call: true,
        get: |o| o.delta.map(|d| d.to_string()),
        set: |o, value| {
            o.delta = match value.trim().eq_ignore_ascii_case("none") {
                true => None,
                false => Some(parse_delta(value)?),
            };
            Ok(())
        },
        copy: |o, from| o.delta = from.delta,
    },
    DpOption {
        key: "confidence",
        doc: "confidence level of the interval statistics, in (0, 1); default 0.95",
        set_by: SetBy::Analyst,
        per_call: true,
        get: |o| Some(o.confidence.to_string()),
        set: |o, value| {
            o.confidence = parse_confidence(value)?;
            Ok(())
        },
        copy: |o, from| o.confidence = from.confidence,
    },
    DpOption {
        key: "ci_method",
        doc: "interval: 'default' (each statistic's own: 'score' for the relative risk and the odds ratio, 'conservative' for the risk difference), 'score' (ratios: noise-aware score test inversion), 'conservative' (the paper's, sampling + noise variance), 'plain' (sampling only), 'log' (ratios: log scale with the noise variance) or 'bootstrap' (parametric bootstrap for small counts, post-processing)",
        set_by: SetBy::Analyst,
        per_call: true,
        get: |o| Some(o.ci_method.map_or_else(|| "default".to_string(), |m| m.to_string())),
        set: |o, value| {
            o.ci_method = match value.trim().to_ascii_lowercase().as_str() {
                "default" => None,
                _ => Some(IntervalMethod::parse(value)?),
            };
            Ok(())
        },
        copy: |o, from| o.ci_method = from.ci_method,
    },
    DpOption {
        key: "group_sizes",
        doc: "'private' (default: noise all four cells) or 'public' (assert exposed/unexposed sizes are public)",
        set_by: SetBy::Owner,
        per_call: true,
        get: |o| Some(o.group_sizes.to_string()),
        set: |o, value| {
            o.group_sizes = GroupSizes::parse(value)?;
            Ok(())
        },
        copy: |o, from| o.group_sizes = from.group_sizes,
    },
    DpOption {
        key: "gaussian_calibration",
        doc: "'analytic' (default: Balle-Wang once for the whole release at its L2 sensitivity), 'per_cell' (the paper's: Balle-Wang per noised value) or 'classic' (Dwork-Roth per value, epsilon < 1)",
        set_by: SetBy::Analyst,
        per_call: true,
        get: |o| Some(o.gaussian_calibration.to_string()),
        set: |o, value| {
            o.gaussian_calibration = GaussianCalibration::parse(value)?;
            Ok(())
        },
        copy: |o, from| o.gaussian_calibration = from.gaussian_calibration,
    },
    DpOption {
        key: "method",
        doc: "how the relative risk's point release computes the ratio: noisy_counts (default), noised_log, naive, smooth_sensitivity, ptr",
        set_by: SetBy::Analyst,
        per_call: true,
        get: |o| Some(o.method.to_string()),
        set: |o, value| {
            o.method = RatioMethod::parse(value)?;
            Ok(())
        },
        copy: |o, from| o.method = from.method,
    },
    DpOption {
        key: "bias_correction",
        doc: "noised_log only: multiply by 1-(log 2/epsilon)^2 (needs epsilon > log 2)",
        set_by: SetBy::Analyst,
        per_call: true,
        get: |o| Some(o.bias_correction.to_string()),
        set: |o, value| {
            o.bias_correction = parse_bool("bias_correction", value)?;
            Ok(())
        },
        copy: |o, from| o.bias_correction = from.bias_correction,
    },
    DpOption {
        key: "ptr_bound",
        doc: "ptr only: the proposed local-sensitivity bound, > 0",
        set_by: SetBy::Analyst,
        per_call: true,
        get: |o| o.ptr_bound.map(|b| b.to_string()),
        set: |o, value| {
            let bound = parse_f64("ptr_bound", value)?;
            if !(bound.is_finite() && bound > 0.0) {
                return Err(format!("ptr_bound must be a finite number > 0, got {value}"));
            }
            o.ptr_bound = Some(bound);
            Ok(())
        },
        copy: |o, from| o.ptr_bound = from.ptr_bound,
    },
    DpOption {
        key: "budget_measure",
        doc: "the measure the budget is declared and counted in: 'epsilon_delta' (default: epsilon_budget and delta_budget, each query's (epsilon, delta) added; pure epsilon when delta_budget is unset) or 'zcdp' (rho_budget, or epsilon_budget with delta_budget as a target (epsilon, delta) converted to rho; each query's rho added, and a query without a zCDP map is refused)",
        set_by: SetBy::Owner,
        per_call: false,
        get: |o| Some(o.budget_measure.to_string()),
        set: |o, value| {
            o.budget_measure = BudgetMeasure::parse(value)?;
            Ok(())
        },
        copy: |o, from| o.budget_measure = from.budget_measure,
    },
    DpOption {
        key: "epsilon_budget",
        doc: "total epsilon this session may spend, >= 0 ('none': no enforcement); every DP query is charged at planning. With budget_measure 'zcdp': the target epsilon, with delta_budget",
        set_by: SetBy::Owner,
        per_call: false,
        get: |o| o.epsilon_budget.map(|b| b.to_string()),
        set: |o, value| {
            o.epsilon_budget = parse_budget("epsilon_budget", value)?;
            Ok(())
        },
        copy: |o, from| o.epsilon_budget = from.epsilon_budget,
    },
    DpOption {
        key: "delta_budget",
        doc: "total delta this session may spend, >= 0 (0 when only epsilon_budget is set). With budget_measure 'zcdp': the target delta, in (0, 1), with epsilon_budget",
        set_by: SetBy::Owner,
        per_call: false,
        get: |o| o.delta_budget.map(|b| b.to_string()),
        set: |o, value| {
            o.delta_budget = parse_budget("delta_budget", value)?;
            Ok(())
        },
        copy: |o, from| o.delta_budget = from.delta_budget,
    },
    DpOption {
        key: "rho_budget",
        doc: "budget_measure 'zcdp' only: total rho (zero-concentrated DP) this session may spend, >= 0 ('none': unset); the budget is then (epsilon, cdp_delta(rho, epsilon))-DP for every epsilon",
        set_by: SetBy::Owner,
        per_call: false,
        get: |o| o.rho_budget.map(|b| b.to_string()),
        set: |o, value| {
            o.rho_budget = parse_budget("rho_budget", value)?;
            Ok(())
        },
        copy: |o, from| o.rho_budget = from.rho_budget,
    },
    DpOption {
        key: "protected_tables",
        doc: "the data owner's protected tables: comma-separated 'table(unit_column)' (a person is every row with one unit value, e.g. 'visits(patient_id)') or 'table' (each row a person); tables not declared anywhere are protected row by row",
        set_by: SetBy::Owner,
        per_call: false,
        get: |o| Some(o.protections.protected_value()),
        set: |o, value| o.protections.set_protected(value),
        copy: |o, from| o.protections.clone_from(&from.protections),
    },
    DpOption {
        key: "public_tables",
        doc: "the data owner's public tables (released exactly), comma-separated; '*': every table not declared protected",
        set_by: SetBy::Owner,
        per_call: false,
        get: |o| Some(o.protections.public_value()),
        set: |o, value| o.protections.set_public(value),
        copy: |o, from| o.protections.clone_from(&from.protections),
    },
    DpOption {
        key: "max_rows_per_unit",
        doc: "tables protected by a unit: rows of one unit kept per group (random sample), default 1",
        set_by: SetBy::Analyst,
        per_call: false,
        get: |o| Some(o.max_rows_per_unit.to_string()),
        set: |o, value| {
            o.max_rows_per_unit = parse_bound("max_rows_per_unit", value)?;
            Ok(())
        },
        copy: |o, from| o.max_rows_per_unit = from.max_rows_per_unit,
    },
    DpOption {
        key: "max_groups_per_unit",
        doc: "tables protected by a unit: groups one unit may contribute to, default 1",
        set_by: SetBy::Analyst,
        per_call: false,
        get: |o| Some(o.max_groups_per_unit.to_string()),
        set: |o, value| {
            o.max_groups_per_unit = parse_bound("max_groups_per_unit", value)?;
            Ok(())
        },
        copy: |o, from| o.max_groups_per_unit = from.max_groups_per_unit,
    },
    DpOption {
        key: "max_public_fanout",
        doc: "locked sessions: rows one protected row may meet through joins with public relations, protected self-joins and UNNEST, in all (default 64, at most 65536); beyond it a join keeps the first rows of each key in the order of their values. A larger value lets wider joins through, and lets one person's values show more in a query's time",
        set_by: SetBy::Owner,
        per_call: false,
        get: |o| Some(o.max_public_fanout.to_string()),
        set: |o, value| {
            let cap = parse_bound("max_public_fanout", value)?;
            if cap > 65_536 {
                return Err(format!(
                    "max_public_fanout must be at most 65536, got '{value}'"
                ));
            }
            o.max_public_fanout = cap;
            Ok(())
        },
        copy: |o, from| o.max_public_fanout = from.max_public_fanout,
    },
    DpOption {
        key: "public_groups",
        doc: "a table name (e.g. 'regions' or 'public.regions'): the table's rows are the public GROUP BY keys, matched by column name; every declared key is released (noise on zero for keys without rows) and rows of undeclared keys are dropped. 'assert': you assert every GROUP BY key is public (known in advance), so keys are released as they are. 'none' (default)",
        set_by: SetBy::Owner,
        per_call: false,
        get: |o| Some(o.public_groups.to_string()),
        set: |o, value| {
            o.public_groups = PublicGroups::parse(value)?;
            Ok(())
        },
        copy: |o, from| o.public_groups.clone_from(&from.public_groups),
    },
    DpOption {
        key: "selection_epsilon",
        doc: "private group selection: epsilon of the thresholded noisy count that decides which groups are released",
        set_by: SetBy::Analyst,
        per_call: false,
        get: |o| o.selection_epsilon.map(|e| e.to_string()),
        set: |o, value| {
            o.selection_epsilon = if value.trim().eq_ignore_ascii_case("none") {
                None
            } else {
                let e = parse_f64("selection_epsilon", value)?;
                if !(e.is_finite() && e > 0.0) {
                    return Err(format!(
                        "selection_epsilon must be a finite number > 0, got {value}"
                    ));
                }
                Some(e)
            };
            Ok(())
        },
        copy: |o, from| o.selection_epsilon = from.selection_epsilon,
    },
    DpOption {
        key: "selection_delta",
        doc: "private group selection: delta in (0, 1), the chance a group of one unit is released",
        set_by: SetBy::Analyst,
        per_call: false,
        get: |o| o.selection_delta.map(|d| d.to_string()),
        set: |o, value| {
            o.selection_delta = match value.trim().eq_ignore_ascii_case("none") {
                true => None,
                false => Some(parse_delta(value).map_err(|e| format!("selection_{e}"))?),
            };
            Ok(())
        },
        copy: |o, from| o.selection_delta = from.selection_delta,
    },
    DpOption {
        key: "selection_mechanism",
        doc: "private group selection: noise of the thresholded counts, 'laplace' (default) or 'gaussian' (one vector over the groups; half of selection_delta for the noise, half for the threshold)",
        set_by: SetBy::Analyst,
        per_call: false,
        get: |o| Some(o.selection_mechanism.to_string()),
        set: |o, value| {
            o.selection_mechanism = Mechanism::parse(value)?;
            Ok(())
        },
        copy: |o, from| o.selection_mechanism = from.selection_mechanism,
    },
    DpOption {
        key: "locked",
        doc: "true: lock the session for an untrusted analyst (the data owner's options can no longer be set; needs a budget: dp.epsilon_budget, or a zCDP one; cannot be undone); see datafusion_dp::lock",
        set_by: SetBy::Analyst,
        per_call: false,
        get: |o| Some(o.locked.to_string()),
        set: |o, value| {
            let on = parse_bool("locked", value)?;
            if o.locked && !on {
                return Err("a locked session cannot be unlocked".to_string());
            }
            if on && !o.locked {
                o.lock()?;
            }
            Ok(())
        },
        copy: |o, from| o.locked = from.locked,
    },
    DpOption {
        key: "require_secure",
        doc: "true: refuse dp.seed (the non-private reproducible mode) for the rest of the session; cannot be turned off",
        set_by: SetBy::Owner,
        per_call: false,
        get: |o| Some(o.require_secure.to_string()),
        set: |o, value| {
            let on = parse_bool("require_secure", value)?;
            if o.require_secure && !on {
                return Err("require_secure cannot be turned off in a session".to_string());
            }
            if on && o.seed.is_some() {
                return Err(
                    "dp.seed is set (non-private mode); unset it first with SET dp.seed = 'none'"
                        .to_string(),
                );
            }
            o.require_secure = on;
            Ok(())
        },
        copy: |o, from| o.require_secure = from.require_secure,
    },
    DpOption {
        key: "ledger",
        doc: "append-only file keeping the charges across sessions and processes ('none': in memory only)",
        set_by: SetBy::Owner,
        per_call: false,
        get: |o| o.ledger.clone(),
        set: |o, value| {
            let path = value.trim();
            o.ledger = match path.is_empty() || path.eq_ignore_ascii_case("none") {
                true => None,
                false => Some(path.to_string()),
            };
            Ok(())
        },
        copy: |o, from| o.ledger.clone_from(&from.ledger),
    },
];

/// The option named `key` (any case).
pub fn option(key: &str) -> Option<&'static DpOption> {
    let key = key.trim();
    OPTIONS.iter().find(|o| o.key.eq_ignore_ascii_case(key))
}

/// The options only the data owner sets ([`SetBy::Owner`]).
pub fn owner_keys() -> impl Iterator<Item = &'static str> {
    OPTIONS
        .iter()
        .filter(|o| o.set_by == SetBy::Owner)
        .map(|o| o.key)
}

fn parse_f64(key: &str, value: &str) -> std::result::Result<f64, String> {
    value
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("{key} must be a number, got '{value}'"))
}

fn parse_bool(key: &str, value: &str) -> std::result::Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "1" => Ok(true),
        "false" | "off" | "0" => Ok(false),
        _ => Err(format!("{key} must be true or false, got '{value}'")),
    }
}

/// Checks a delta value: in (0, 1).
pub fn parse_delta(value: &str) -> std::result::Result<f64, String> {
    let delta = parse_f64("delta", value)?;
    if delta.is_finite() && delta > 0.0 && delta < 1.0 {
        Ok(delta)
    } else {
        Err(format!("delta must be in (0, 1), got {value}"))
    }
}

/// Checks a confidence level: in (0, 1).
pub fn parse_confidence(value: &str) -> std::result::Result<f64, String> {
    let confidence = parse_f64("confidence", value)?;
    // Within 1e-12 of 0 or 1 the quantile is infinite or the error split has no room (a
    // confidence of 1 - 2^-53 made the score interval's split NaN).
    if confidence.is_finite() && (1e-12..=1.0 - 1e-12).contains(&confidence) {
        Ok(confidence)
    } else {
        Err(format!(
            "confidence must be in (0, 1), got {value} (it must be at least 1e-12 from either end)"
        ))
    }
}

/// Checks a budget value: a finite number >= 0, or `none` to unset.
fn parse_budget(key: &str, value: &str) -> std::result::Result<Option<f64>, String> {
    if value.trim().eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let budget = parse_f64(key, value)?;
    if budget.is_finite() && budget >= 0.0 {
        Ok(Some(budget))
    } else {
        Err(format!(
            "{key} must be a finite number >= 0 (or 'none'), got {value}"
        ))
    }
}

/// Checks a per-unit bound: an integer >= 1.
fn parse_bound(key: &str, value: &str) -> std::result::Result<u32, String> {
    value
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|b| *b >= 1)
        .ok_or_else(|| format!("{key} must be an integer >= 1, got '{value}'"))
}

impl DpOptions {
    /// Locks the owner's options ([`SetBy::Owner`]) for the rest of the session, turning
    /// `require_secure` on. Refused without a budget (an epsilon budget, or a zCDP one) that
    /// its options declare in one measure ([`Budget::new`]), or with `dp.seed` set.
    pub fn lock(&mut self) -> std::result::Result<(), String> {
        let budget = Budget::new(
            self.budget_measure,
            self.epsilon_budget,
            self.delta_budget,
            self.rho_budget,
            "dp.",
        )?;
        let enforced = match budget.measure {
            BudgetMeasure::EpsilonDelta => budget.epsilon.is_some(),
            BudgetMeasure::Zcdp => budget.is_enforced(),
        };
        if !enforced {
            return Err(
                "a locked session needs a budget: set dp.epsilon_budget (and dp.delta_budget for (epsilon, delta) mechanisms), or dp.budget_measure = 'zcdp' with dp.rho_budget (or with dp.epsilon_budget and dp.delta_budget as a target), first"
                    .to_string(),
            );
        }
        if self.seed.is_some() {
            return Err(
                "dp.seed (NON-PRIVATE noise) is set: a locked session draws secure noise only"
                    .to_string(),
            );
        }
        if self.public_groups == PublicGroups::Assert {
            return Err(
                "dp.public_groups = 'assert' releases whatever GROUP BY keys the analyst's query computes; in a locked session declare the public keys as a table (dp.public_groups = '<table>', declared in dp.public_tables) or use private group selection"
                    .to_string(),
            );
        }
        self.require_secure = true;
        self.locked = true;
        Ok(())
    }

    /// These options with every owner option ([`SetBy::Owner`]) back at its default and the
    /// lock off: what a locked Ballista cluster keeps of a client's settings (the accuracy
    /// options) before its data owner's are applied.
    pub fn without_owner_settings(&self) -> DpOptions {
        let defaults = DpOptions::default();
        let mut kept = self.clone();
        for option in OPTIONS.iter().filter(|o| o.set_by == SetBy::Owner) {
            (option.copy)(&mut kept, &defaults);
        }
        kept.locked = false;
        kept
    }

    /// Applies one `key = value` ([`OPTIONS`]); the same parser serves `SET` and per-call
    /// options.
    pub fn apply(&mut self, key: &str, value: &str) -> std::result::Result<(), String> {
        let Some(option) = option(key) else {
            let known: Vec<&str> = OPTIONS.iter().map(|o| o.key).collect();
            return Err(format!(
                "unknown option '{}' (known: {})",
                key.trim().to_ascii_lowercase(),
                known.join(", ")
            ));
        };
        if self.locked && option.set_by == SetBy::Owner {
            return Err(format!(
                "{} is set by the data owner: this session is locked (accuracy options such as confidence, ci_method, mechanism, delta and max_rows_per_unit can still be set)",
                option.key
            ));
        }
        (option.set)(self, value)
    }

    /// Session options overridden by a per-call options string. `allowed` lists the keys the
    /// calling function understands; `seed` is session-only.
    pub fn with_call_options(
        &self,
        call: &str,
        allowed: &[&str],
    ) -> std::result::Result<Self, String> {
        self.with_call_options_and_own(call, allowed, &[])
            .map(|(options, _)| options)
    }

    /// [`Self::with_call_options`] for a function that also has options of its own (`own`,
    /// keys that are not session options): those are returned as `(key, value)` pairs, in
    /// the order given, instead of being applied.
    pub fn with_call_options_and_own(
        &self,
        call: &str,
        allowed: &[&str],
        own: &[&str],
    ) -> std::result::Result<(Self, Vec<(String, String)>), String> {
        let mut options = self.clone();
        let mut own_pairs = Vec::new();
        for pair in call
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
        {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(format!("options must be key=value pairs, got '{pair}'"));
            };
            let key = key.trim().to_ascii_lowercase();
            if own.contains(&key.as_str()) {
                own_pairs.push((key, value.to_string()));
                continue;
            }
            if !allowed.contains(&key.as_str()) {
                let accepted: Vec<&str> = allowed.iter().chain(own).copied().collect();
                return Err(format!(
                    "option '{key}' is not accepted here (accepted: {})",
                    accepted.join(", ")
                ));
            }
            options.apply(&key, value)?;
        }
        Ok((options, own_pairs))
    }
}

impl ExtensionOptions for DpOptions {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        self.apply(key, value)
            .or_else(|e| config_err!("dp.{key}: {e}"))
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        OPTIONS
            .iter()
            .map(|option| ConfigEntry {
                key: format!("dp.{}", option.key),
                value: (option.get)(self),
                description: option.doc,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_is_declared_once_and_reads_back_what_it_set() {
        let mut seen = std::collections::BTreeSet::new();
        for option in OPTIONS {
            assert!(seen.insert(option.key), "{} declared twice", option.key);
            assert!(!option.doc.is_empty(), "{} has no doc", option.key);
        }
        // Options away from their defaults (and valid together): each one's value as read
        // must parse back to the same value, as the wire codec relies on.
        let mut options = DpOptions::default();
        for (key, value) in [
            ("seed", "7"),
            ("mechanism", "gaussian"),
            ("delta", "0.001"),
            ("confidence", "0.9"),
            ("ci_method", "log"),
            ("group_sizes", "public"),
            ("gaussian_calibration", "classic"),
            ("method", "ptr"),
            ("bias_correction", "true"),
            ("ptr_bound", "2.5"),
            ("budget_measure", "zcdp"),
            ("epsilon_budget", "10"),
            ("delta_budget", "0.01"),
            ("rho_budget", "0.5"),
            ("protected_tables", "visits(patient_id)"),
            ("public_tables", "regions"),
            ("max_rows_per_unit", "3"),
            ("max_groups_per_unit", "2"),
            ("public_groups", "regions"),
            ("selection_epsilon", "0.5"),
            ("selection_delta", "0.0001"),
            ("ledger", "/tmp/ledger"),
        ] {
            options.apply(key, value).unwrap();
        }
        for option in OPTIONS {
            let mut copy = DpOptions::default();
            if let Some(value) = (option.get)(&options) {
                (option.set)(&mut copy, &value).unwrap();
            }
            assert_eq!(
                (option.get)(&copy),
                (option.get)(&options),
                "{} does not read back",
                option.key
            );
            let mut copied = DpOptions::default();
            (option.copy)(&mut copied, &options);
            assert_eq!(
                (option.get)(&copied),
                (option.get)(&options),
                "{}",
                option.key
            );
        }
    }

    #[test]
    fn every_key_a_function_accepts_is_a_per_call_option() {
        use crate::sql::functions::aggregate::STATISTICS;
        for function in STATISTICS {
            for key in function.option_keys() {
                assert!(
                    option(key).is_some_and(|o| o.per_call),
                    "{}: '{key}' is not a per-call option",
                    function.name()
                );
            }
        }
        for option in OPTIONS.iter().filter(|o| o.per_call) {
            assert!(
                STATISTICS
                    .iter()
                    .any(|f| f.option_keys().contains(&option.key)),
                "per-call option '{}' is accepted by no function",
                option.key
            );
        }
    }

    #[test]
    fn max_public_fanout_is_bounded() {
        let mut o = DpOptions::default();
        for bad in ["0", "65537", "-1", "1e9", "x", ""] {
            let error = o.apply("max_public_fanout", bad).unwrap_err();
            assert!(error.contains("max_public_fanout"), "{bad}: {error}");
        }
        o.apply("max_public_fanout", "65536").unwrap();
        assert_eq!(o.max_public_fanout, 65536);
    }

    #[test]
    fn without_owner_settings_resets_every_owner_key_and_keeps_the_rest() {
        let mut client = DpOptions::default();
        for (key, value) in [
            ("seed", "7"),
            ("budget_measure", "zcdp"),
            ("epsilon_budget", "100"),
            ("delta_budget", "0.5"),
            ("rho_budget", "2"),
            ("ledger", "/tmp/mine"),
            ("public_groups", "assert"),
            ("group_sizes", "public"),
            ("protected_tables", "t(id)"),
            ("public_tables", "*"),
            ("max_public_fanout", "512"),
            ("confidence", "0.9"),
            ("max_rows_per_unit", "3"),
        ] {
            client.apply(key, value).unwrap();
        }
        // `SET dp.require_secure = true` is refused beside a seed; set the field itself.
        client.require_secure = true;
        let kept = client.without_owner_settings();
        let defaults = DpOptions::default();
        let entry = |o: &DpOptions, key: &str| {
            o.entries()
                .into_iter()
                .find(|e| e.key == format!("dp.{key}"))
                .map(|e| e.value)
        };
        for key in owner_keys() {
            assert_ne!(
                entry(&client, key),
                entry(&defaults, key),
                "{key} was not set"
            );
            assert_eq!(entry(&kept, key), entry(&defaults, key), "{key} kept");
        }
        assert_eq!(kept.confidence, 0.9);
        assert_eq!(kept.max_rows_per_unit, 3);
        assert!(!kept.locked);
    }

    #[test]
    fn set_parses_and_rejects() {
        let mut o = DpOptions::default();
        o.set("seed", "42").unwrap();
        assert_eq!(o.seed, Some(42));
        assert!(o
            .set("seed", "-1")
            .unwrap_err()
            .to_string()
            .contains("non-negative integer"));
        assert!(o.set("seed", "1.5").is_err());
        o.set("seed", "none").unwrap();
        assert_eq!(o.seed, None);
        assert!(o.set("delta", "1").is_err());
        assert!(o.set("confidence", "0").is_err());
        assert!(o
            .set("mechanism", "exponential")
            .unwrap_err()
            .to_string()
            .contains("unknown mechanism"));
        o.set("epsilon_budget", "10").unwrap();
        assert_eq!(o.epsilon_budget, Some(10.0));
        o.set("delta_budget", "0").unwrap();
        assert_eq!(o.delta_budget, Some(0.0));
        for bad in ["-1", "inf", "NaN", "ten"] {
            let err = o.set("epsilon_budget", bad).unwrap_err().to_string();
            assert!(err.contains("dp.epsilon_budget"), "{err}");
            assert!(o.set("delta_budget", bad).is_err(), "{bad}");
        }
        assert_eq!(
            o.epsilon_budget,
            Some(10.0),
            "a refused SET keeps the budget"
        );
        o.set("epsilon_budget", "none").unwrap();
        assert_eq!(o.epsilon_budget, None);
        // The measure and rho are parsed here; whether they declare one budget is checked when
        // it is used (Budget::new), whatever the order they were set in.
        o.set("budget_measure", " ZCDP ").unwrap();
        assert_eq!(o.budget_measure, BudgetMeasure::Zcdp);
        let err = o.set("budget_measure", "renyi").unwrap_err().to_string();
        assert!(
            err.contains(
                "dp.budget_measure: budget_measure must be 'epsilon_delta' or 'zcdp', got 'renyi'"
            ),
            "{err}"
        );
        o.set("rho_budget", "0.5").unwrap();
        assert_eq!(o.rho_budget, Some(0.5));
        for bad in ["-1", "inf", "NaN", "half"] {
            let err = o.set("rho_budget", bad).unwrap_err().to_string();
            assert!(err.contains("dp.rho_budget"), "{err}");
        }
        o.set("rho_budget", "none").unwrap();
        assert_eq!(o.rho_budget, None);
        o.set("ledger", " /tmp/x.ledger ").unwrap();
        assert_eq!(o.ledger.as_deref(), Some("/tmp/x.ledger"));
        o.set("ledger", "none").unwrap();
        assert_eq!(o.ledger, None);
        assert!(o
            .set("nonsense", "1")
            .unwrap_err()
            .to_string()
            .contains("unknown option"));
    }

    #[test]
    fn public_groups_is_assert_none_or_a_table() {
        let mut o = DpOptions::default();
        assert_eq!(o.public_groups, PublicGroups::None);
        o.set("public_groups", " Assert ").unwrap();
        assert_eq!(o.public_groups, PublicGroups::Assert);
        o.set("public_groups", "public.Regions").unwrap();
        assert_eq!(
            o.public_groups,
            PublicGroups::Table("public.Regions".to_string())
        );
        assert_eq!(o.public_groups.to_string(), "public.Regions");
        for off in ["none", "NONE", "", "  "] {
            o.set("public_groups", "assert").unwrap();
            o.set("public_groups", off).unwrap();
            assert_eq!(o.public_groups, PublicGroups::None, "{off:?}");
        }
    }

    #[test]
    fn call_options_override_and_are_restricted() {
        let o = DpOptions::default();
        let c = o
            .with_call_options("mechanism=gaussian, delta=1e-6", &["mechanism", "delta"])
            .unwrap();
        assert_eq!(c.mechanism, Mechanism::Gaussian);
        assert_eq!(c.delta, Some(1e-6));
        assert!(o.with_call_options("seed=3", &["mechanism"]).is_err());
        assert!(o.with_call_options("gaussian", &["mechanism"]).is_err());
        // A function's own keys are handed back, not applied, and named among the accepted.
        let (c, own) = o
            .with_call_options_and_own(
                "Statistic=odds_ratio mechanism=gaussian",
                &["mechanism"],
                &["statistic"],
            )
            .unwrap();
        assert_eq!(c.mechanism, Mechanism::Gaussian);
        assert_eq!(own, [("statistic".to_string(), "odds_ratio".to_string())]);
        let err = o
            .with_call_options_and_own("delta=1e-6", &["mechanism"], &["statistic"])
            .unwrap_err();
        assert!(err.contains("accepted: mechanism, statistic"), "{err}");
    }
}
