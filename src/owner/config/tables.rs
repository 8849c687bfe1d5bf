//! The `[[table]]` sections: each table's name, location, format, protection and declared
//! columns.

use crate::Protection;
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::DFSchema;
use datafusion::logical_expr::{Cast, Expr};
use datafusion::prelude::{SessionConfig, SessionContext};
use serde::Deserialize;

/// One `[[table]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TableConfig {
    /// The table's SQL name: a lower-case identifier.
    pub name: String,
    /// A local path (resolved against the configuration's directory) or an object-store URL.
    pub location: String,
    /// `parquet`, `csv` or `json`; by the file extension when absent.
    pub format: Option<String>,
    pub protection: Protection,
    /// The declared columns (`columns = ["name TYPE", ...]`): a CSV file's by position (in its
    /// header's order), NDJSON fields and Parquet columns by name (a missing one is NULL);
    /// `None`: undeclared (a Parquet table's file metadata, or a public table's inference).
    pub columns: Option<Vec<Field>>,
    /// A hive layout's partition columns (`partition_columns = ["name TYPE", ...]`), outermost
    /// directory first; they follow `columns` in the table's schema.
    pub partition_columns: Vec<Field>,
    /// `in_memory = true`: the rows are read once when the tables are opened and every query
    /// scans that copy (files changed later are not seen); `dp-server` and `dpsql` only.
    pub in_memory: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTable {
    name: String,
    location: String,
    format: Option<String>,
    protection: Option<String>,
    unit: Option<String>,
    columns: Option<Vec<String>>,
    partition_columns: Option<Vec<String>>,
    in_memory: Option<bool>,
}

/// The Arrow type of SQL type name `sql` (`BIGINT`, `VARCHAR`, `DECIMAL(10, 2)`, ...), as
/// DataFusion's SQL planner reads it in a `CAST`; strings are `Utf8`, as CSV inference gives.
pub fn sql_type(sql: &str) -> std::result::Result<DataType, String> {
    let sql = sql.trim();
    let unknown = || format!("unknown SQL type '{sql}'");
    if sql.is_empty()
        || !sql
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " _(),".contains(c))
    {
        return Err(unknown());
    }
    // One planner for every declaration (a session registers all of DataFusion's functions).
    static PLANNER: std::sync::OnceLock<SessionContext> = std::sync::OnceLock::new();
    let ctx = PLANNER.get_or_init(|| {
        SessionContext::new_with_config(
            SessionConfig::new()
                .set_bool("datafusion.sql_parser.map_string_types_to_utf8view", false),
        )
    });
    match ctx.parse_sql_expr(&format!("CAST(NULL AS {sql})"), &DFSchema::empty()) {
        Ok(Expr::Cast(Cast { expr, field })) if matches!(*expr, Expr::Literal(..)) => {
            Ok(field.data_type().clone())
        }
        _ => Err(unknown()),
    }
}

/// The columns declared in `decls` (`"name TYPE"` each), for messages as `what` of `table`.
fn parse_columns(
    table: &str,
    what: &str,
    decls: &[String],
) -> std::result::Result<Vec<Field>, String> {
    let mut fields: Vec<Field> = Vec::with_capacity(decls.len());
    for decl in decls {
        let (name, sql) = decl.trim().split_once(char::is_whitespace).ok_or_else(|| {
            format!("table '{table}': {what} entry '{decl}' must be \"NAME TYPE\" (e.g. \"patient_id BIGINT\")")
        })?;
        let data_type =
            sql_type(sql).map_err(|e| format!("table '{table}': {what} entry '{decl}': {e}"))?;
        if fields.iter().any(|f| f.name() == name) {
            return Err(format!(
                "table '{table}': column '{name}' is declared twice"
            ));
        }
        fields.push(Field::new(name, data_type, true));
    }
    Ok(fields)
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The `[[table]]` sections `raw`, validated; locations are resolved by `resolve`.
pub(super) fn parse(
    raw: Vec<RawTable>,
    resolve: &dyn Fn(&str) -> String,
) -> Result<Vec<TableConfig>, String> {
    let mut tables: Vec<TableConfig> = Vec::new();
    for t in raw {
        if !is_identifier(&t.name) {
            return Err(format!(
                "table name '{}' must be a lower-case SQL identifier (letters, digits, _)",
                t.name
            ));
        }
        if tables.iter().any(|other| other.name == t.name) {
            return Err(format!("table '{}' is declared twice", t.name));
        }
        let protection = match (t.protection.as_deref().map(str::to_ascii_lowercase), t.unit) {
            (None, None) => Protection::Rows,
            (None, Some(unit)) => Protection::Unit(unit),
            (Some(p), None) if p == "rows" => Protection::Rows,
            (Some(p), None) if p == "public" => Protection::Public,
            (Some(p), Some(unit)) if p == "unit" => Protection::Unit(unit),
            (Some(p), Some(unit)) if p == "unique_unit" => Protection::UniqueUnit(unit),
            (Some(p), None) if p == "unit" || p == "unique_unit" => {
                return Err(format!(
                    "table '{}': protection = \"{p}\" needs unit = \"COLUMN\" (the column that identifies a person)",
                    t.name
                ))
            }
            (Some(p), Some(_)) if p == "rows" || p == "public" => {
                return Err(format!(
                    "table '{}': unit = ... goes with protection = \"unit\", not \"{p}\"",
                    t.name
                ))
            }
            (Some(p), _) => {
                return Err(format!(
                    "table '{}': unknown protection '{p}' (expected \"rows\", \"unit\", \"unique_unit\" or \"public\")",
                    t.name
                ))
            }
        };
        if let Some(unit) = protection.unit_column() {
            if unit.trim().is_empty() {
                return Err(format!("table '{}': unit is empty", t.name));
            }
        }
        if let Some(format) = &t.format {
            if !crate::owner::tables::FORMATS.contains(&format.to_ascii_lowercase().as_str()) {
                return Err(format!(
                    "table '{}': unknown format '{format}' (expected parquet, csv or json)",
                    t.name
                ));
            }
        }
        let columns = match &t.columns {
            Some(decls) if decls.is_empty() => {
                return Err(format!(
                    "table '{}': columns is empty (declare each column as \"NAME TYPE\")",
                    t.name
                ))
            }
            Some(decls) => Some(parse_columns(&t.name, "columns", decls)?),
            None => None,
        };
        let partition_columns = parse_columns(
            &t.name,
            "partition_columns",
            t.partition_columns.as_deref().unwrap_or_default(),
        )?;
        let declared: Vec<&str> = columns
            .iter()
            .flatten()
            .chain(&partition_columns)
            .map(|f| f.name().as_str())
            .collect();
        if let Some(twice) = partition_columns
            .iter()
            .find(|p| columns.iter().flatten().any(|c| c.name() == p.name()))
        {
            return Err(format!(
                "table '{}': column '{}' is in both columns and partition_columns",
                t.name,
                twice.name()
            ));
        }
        if let (Some(unit), Some(_)) = (protection.unit_column(), &columns) {
            if !declared.contains(&unit) {
                return Err(format!(
                    "table '{}': unit '{unit}' is not one of its declared columns",
                    t.name
                ));
            }
        }
        tables.push(TableConfig {
            name: t.name,
            location: resolve(&t.location),
            format: t.format,
            protection,
            columns,
            partition_columns,
            in_memory: t.in_memory.unwrap_or(false),
        });
    }

    Ok(tables)
}
