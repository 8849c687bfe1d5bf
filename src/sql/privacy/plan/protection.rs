//! The data owner's declarations: which tables hold private data and what a person is in each.
//!
//! ```sql
//! SET dp.protected_tables = 'visits(patient_id), survey';  -- a unit column; row by row
//! SET dp.protected_tables = 'patients(patient_id unique)';  -- one row per unit
//! SET dp.public_tables = 'regions, calendar';               -- lookup tables, key lists
//! ```
//!
//! or, from Rust, [`crate::sql::privacy::session::lock::protect`]`(&ctx, "visits", Protection::Unit("patient_id".into()))`.
//!
//! **The default is protected, row by row**: a table the owner did not declare is treated as
//! `Protection::Rows`. Forgetting a declaration then makes queries fail (a refused `SELECT *`,
//! a refused join that could repeat a row), never leak: a table is released exactly only after
//! someone said it is public. `dp.public_tables = '*'` declares every undeclared table public,
//! for a trusted user working on data they may see (it is an owner's option: a locked session
//! cannot set it). Table functions (`generate_series`, `dp_budget()`), `VALUES` and
//! `information_schema` are public: they hold no rows of the owner's tables.
//!
//! All unit columns of one session identify the same kind of person (a join of two protected
//! tables on their unit columns matches a person's rows in both).

use datafusion::common::config::ConfigOptions;
use datafusion::common::TableReference;

/// How a table's rows relate to people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protection {
    /// Not private: released exactly (lookup tables, calendars, lists of public keys).
    Public,
    /// Private, one person per row: replace-one neighbours are tables differing in one row.
    Rows,
    /// Private, a person is every row with one value of this column (e.g. `patient_id`):
    /// neighbours differ in all the rows of one unit, whose contributions are bounded.
    Unit(String),
    /// Private, a person is the one row with a value of this column: the owner declares that
    /// the table holds at most one row per unit (`patients(patient_id unique)`). A query that
    /// cannot repeat its rows then needs no contribution bounding (one row in one group per
    /// person); joined on the unit with other protected tables, it is a unit column as
    /// [`Protection::Unit`] is. A declaration the data breaks breaks the guarantee, as a table
    /// protected row by row with several rows per person does.
    UniqueUnit(String),
}

impl Protection {
    /// The unit column, if the table has one.
    pub fn unit_column(&self) -> Option<&str> {
        match self {
            Self::Unit(column) | Self::UniqueUnit(column) => Some(column),
            Self::Public | Self::Rows => None,
        }
    }
}

impl std::fmt::Display for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Public => f.write_str("public"),
            Self::Rows => f.write_str("protected row by row"),
            Self::Unit(column) => write!(f, "protected by unit column '{column}'"),
            Self::UniqueUnit(column) => {
                write!(f, "protected by unit column '{column}', one row per unit")
            }
        }
    }
}

/// The declarations of one session: `dp.protected_tables` and `dp.public_tables`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Protections {
    /// Declared tables, as written (resolved against the session's default catalog and
    /// schema when a query is planned), with their protection. A later declaration of the
    /// same table replaces an earlier one.
    tables: Vec<(String, Protection)>,
    /// `dp.public_tables = '*'`: undeclared tables are public instead of protected.
    all_public: bool,
}

impl Protections {
    /// Declares `table` (a name as SQL writes it: `visits`, `s.visits`, `c.s.visits`).
    pub fn declare(&mut self, table: &str, protection: Protection) -> Result<(), String> {
        let table = table.trim();
        if table.is_empty() {
            return Err("a table name is empty".to_string());
        }
        if let Some(column) = protection.unit_column() {
            if column.trim().is_empty() {
                return Err(format!("table '{table}': the unit column is empty"));
            }
        }
        let key = TableReference::parse_str(table);
        self.tables
            .retain(|(name, _)| TableReference::parse_str(name) != key);
        self.tables.push((table.to_string(), protection));
        Ok(())
    }

    /// Parses `dp.protected_tables`: comma-separated `table` (row by row) or
    /// `table(unit_column)`; replaces every earlier protected declaration.
    pub fn set_protected(&mut self, value: &str) -> Result<(), String> {
        let mut next = self.clone();
        next.tables.retain(|(_, p)| *p == Protection::Public);
        for item in split_list(value)? {
            let item = item.trim();
            let (table, protection) = match item.split_once('(') {
                Some((table, rest)) => {
                    let column = rest.strip_suffix(')').ok_or_else(|| {
                        format!("'{item}': write table(unit_column), e.g. visits(patient_id)")
                    })?;
                    let column = column.trim();
                    let protection = match column.rsplit_once(char::is_whitespace) {
                        Some((column, flag)) if flag.eq_ignore_ascii_case("unique") => {
                            Protection::UniqueUnit(column.trim().to_string())
                        }
                        Some(_) => {
                            return Err(format!(
                                "'{item}': write table(unit_column) or table(unit_column \
                                 unique), e.g. visits(patient_id) or patients(patient_id unique)"
                            ))
                        }
                        None => Protection::Unit(column.to_string()),
                    };
                    (table.trim(), protection)
                }
                None => (item, Protection::Rows),
            };
            next.declare(table, protection)?;
        }
        *self = next;
        Ok(())
    }

    /// Parses `dp.public_tables`: comma-separated table names, or `*` for every table not
    /// declared protected; replaces every earlier public declaration.
    pub fn set_public(&mut self, value: &str) -> Result<(), String> {
        let mut next = self.clone();
        next.tables.retain(|(_, p)| *p != Protection::Public);
        next.all_public = false;
        for item in split_list(value)? {
            if item.trim() == "*" {
                next.all_public = true;
            } else {
                next.declare(item.trim(), Protection::Public)?;
            }
        }
        *self = next;
        Ok(())
    }

    /// The protection of the table a scan names, given the session's default catalog and
    /// schema.
    pub fn of(&self, table: &TableReference, config: &ConfigOptions) -> Protection {
        let resolve = |t: &TableReference| {
            t.clone().resolve(
                &config.catalog.default_catalog,
                &config.catalog.default_schema,
            )
        };
        let wanted = resolve(table);
        if wanted.schema.as_ref() == "information_schema" {
            return Protection::Public;
        }
        let normalize = !config.sql_parser.enable_ident_normalization;
        self.tables
            .iter()
            .rev()
            .find(|(name, _)| {
                resolve(&TableReference::parse_str_normalized(name, normalize)) == wanted
            })
            .map(|(_, p)| p.clone())
            .unwrap_or(if self.all_public {
                Protection::Public
            } else {
                Protection::Rows
            })
    }

    /// `dp.protected_tables` as it is set.
    pub fn protected_value(&self) -> String {
        self.tables
            .iter()
            .filter_map(|(name, p)| match p {
                Protection::Public => None,
                Protection::Rows => Some(name.clone()),
                Protection::Unit(column) => Some(format!("{name}({column})")),
                Protection::UniqueUnit(column) => Some(format!("{name}({column} unique)")),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `dp.public_tables` as it is set.
    pub fn public_value(&self) -> String {
        let mut names: Vec<String> = self
            .tables
            .iter()
            .filter(|(_, p)| *p == Protection::Public)
            .map(|(name, _)| name.clone())
            .collect();
        if self.all_public {
            names.push("*".to_string());
        }
        names.join(", ")
    }
}

/// Splits a comma-separated list, keeping commas inside parentheses; `''`/`'none'` is empty.
fn split_list(value: &str) -> Result<Vec<String>, String> {
    let v = value.trim();
    if v.is_empty() || v.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let mut items = Vec::new();
    let (mut depth, mut current) = (0i32, String::new());
    for c in v.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            items.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
        if depth < 0 {
            return Err(format!("unbalanced parentheses in '{value}'"));
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced parentheses in '{value}'"));
    }
    items.push(current);
    if items.iter().any(|i| i.trim().is_empty()) {
        return Err(format!("an empty table name in '{value}'"));
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_parse_resolve_and_default_to_protected_rows() {
        let config = ConfigOptions::default();
        let mut p = Protections::default();
        p.set_protected("visits(patient_id), survey").unwrap();
        p.set_public("regions").unwrap();
        let of = |p: &Protections, t: &str| p.of(&TableReference::parse_str(t), &config);
        assert_eq!(of(&p, "visits"), Protection::Unit("patient_id".into()));
        assert_eq!(
            of(&p, "datafusion.public.visits"),
            Protection::Unit("patient_id".into())
        );
        assert_eq!(of(&p, "survey"), Protection::Rows);
        assert_eq!(of(&p, "regions"), Protection::Public);
        assert_eq!(of(&p, "other"), Protection::Rows, "undeclared: protected");
        assert_eq!(of(&p, "information_schema.tables"), Protection::Public);
        assert_eq!(p.protected_value(), "visits(patient_id), survey");
        p.set_public("*").unwrap();
        assert_eq!(of(&p, "other"), Protection::Public);
        assert_eq!(
            of(&p, "survey"),
            Protection::Rows,
            "declared protection wins"
        );
        assert_eq!(of(&p, "regions"), Protection::Public);
        p.set_public("").unwrap();
        assert_eq!(
            of(&p, "regions"),
            Protection::Rows,
            "set_public replaces the list"
        );
        p.set_protected("none").unwrap();
        assert_eq!(of(&p, "visits"), Protection::Rows, "undeclared again");
        for bad in ["visits(patient_id", "a,,b", "t()"] {
            assert!(Protections::default().set_protected(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_unit_declared_unique_parses_and_prints_back() {
        let mut p = Protections::default();
        p.set_protected("patients(patient_id unique), visits(patient_id)")
            .unwrap();
        let config = ConfigOptions::new();
        let of = |p: &Protections, t: &str| p.of(&TableReference::parse_str(t), &config);
        assert_eq!(
            of(&p, "patients"),
            Protection::UniqueUnit("patient_id".into())
        );
        assert_eq!(of(&p, "visits"), Protection::Unit("patient_id".into()));
        assert_eq!(
            p.protected_value(),
            "patients(patient_id unique), visits(patient_id)"
        );
        let err = p
            .set_protected("patients(patient_id distinct)")
            .unwrap_err();
        assert!(err.contains("table(unit_column unique)"), "{err}");
    }
}
