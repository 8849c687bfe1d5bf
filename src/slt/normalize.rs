//! How DataFusion's own sqllogictest runner turns results into text, reproduced so that a `.slt`
//! file written for it passes through [`super::DpSltDb`] unchanged. Copied from the
//! `datafusion-sqllogictest` crate, version 55.2.0 (Apache-2.0, like this crate), file by file:
//!
//! - `src/engines/conversion.rs`: [`f64_to_str`] and the other number formats (rounded to 12
//!   decimal places and normalised through `BigDecimal`: `1.0` prints `1`, `1.2300` prints
//!   `1.23`, infinities `Infinity`/`-Infinity`, NaN `NaN`), `varchar_to_str` (`(empty)`, `\0`);
//! - `src/engines/datafusion_engine/normalize.rs`: [`convert_batches`] (a multi-line last cell,
//!   an `EXPLAIN` plan, becomes one row per line numbered `01)` with leading spaces as `-`),
//!   [`cell_to_string`], [`convert_schema_to_types`] and the `WORKSPACE_ROOT` path substitution;
//! - `src/engines/output.rs`: [`DpColumnType`] (upstream's `DFColumnType`, the type letters);
//! - `src/util.rs`: [`value_normalizer`] and [`df_value_validator`].
//!
//! Reproduced rather than depended on: the crate turns on DataFusion's `avro` feature and
//! depends on `datafusion-spark`, `indicatif` and `clap`, which would rebuild DataFusion and add
//! some 70,000 lines of Rust to every build with the `slt` feature (on by default); what is
//! used here is these few functions, on `bigdecimal`, which DataFusion's SQL planner already
//! links. Spark-dialect files (`spark/`, upstream's `is_spark_path`) are not supported: their
//! functions are not registered.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    DataType, Decimal128Type, Decimal256Type, Decimal32Type, Decimal64Type, DecimalType, Fields,
    Schema,
};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use arrow::util::display::ArrayFormatter;
use bigdecimal::BigDecimal;
use datafusion::config::ConfigField;
use sqllogictest::{ColumnType, Normalizer};
use std::str::FromStr;

/// How every NULL prints.
pub const NULL_STR: &str = "NULL";

/// The column type letters of DataFusion's runner (upstream `DFColumnType`,
/// `src/engines/output.rs`): `B`oolean, `D`ate/time, `I`nteger, times`P`tamp, `R`eal (floats
/// and decimals), `T`ext, and `?` for everything else. With
/// [`sqllogictest::strict_column_validator`] (as [`super::runner`] sets) a query's letters must
/// be exactly these.
#[derive(Debug, PartialEq, Eq, Clone)]
pub enum DpColumnType {
    Boolean,
    DateTime,
    Integer,
    Float,
    Text,
    Timestamp,
    Another,
}

impl ColumnType for DpColumnType {
    fn from_char(value: char) -> Option<Self> {
        match value {
            'B' => Some(Self::Boolean),
            'D' => Some(Self::DateTime),
            'I' => Some(Self::Integer),
            'P' => Some(Self::Timestamp),
            'R' => Some(Self::Float),
            'T' => Some(Self::Text),
            _ => Some(Self::Another),
        }
    }

    fn to_char(&self) -> char {
        match self {
            Self::Boolean => 'B',
            Self::DateTime => 'D',
            Self::Integer => 'I',
            Self::Timestamp => 'P',
            Self::Float => 'R',
            Self::Text => 'T',
            Self::Another => '?',
        }
    }
}

/// The column types of a result (upstream `convert_schema_to_types`).
pub fn convert_schema_to_types(columns: &Fields) -> Vec<DpColumnType> {
    columns
        .iter()
        .map(|f| match f.data_type() {
            DataType::Boolean => DpColumnType::Boolean,
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => DpColumnType::Integer,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => DpColumnType::Float,
            DataType::Decimal32(_, _)
            | DataType::Decimal64(_, _)
            | DataType::Decimal128(_, _)
            | DataType::Decimal256(_, _) => DpColumnType::Float,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DpColumnType::Text,
            DataType::Date32 | DataType::Date64 | DataType::Time32(_) | DataType::Time64(_) => {
                DpColumnType::DateTime
            }
            DataType::Timestamp(_, _) => DpColumnType::Timestamp,
            DataType::Dictionary(key_type, value_type) if key_type.is_integer() => {
                match value_type.as_ref() {
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DpColumnType::Text,
                    _ => DpColumnType::Another,
                }
            }
            _ => DpColumnType::Another,
        })
        .collect()
}

/// The rows of a result as text (upstream `convert_batches`): each cell by [`cell_to_string`],
/// a row whose last cell has several lines expanded, and `workspace_root` (if any) replaced by
/// `WORKSPACE_ROOT`.
pub fn convert_batches(
    schema: &Schema,
    batches: Vec<RecordBatch>,
    workspace_root: Option<&str>,
) -> Result<Vec<Vec<String>>, ConvertError> {
    let mut rows = vec![];
    for batch in batches {
        if !schema.contains(&batch.schema()) {
            return Err(ConvertError::SchemaMismatch(format!(
                "Schema mismatch. Previously had\n{:#?}\n\nGot:\n{:#?}",
                &schema,
                batch.schema()
            )));
        }
        for row in 0..batch.num_rows() {
            let cells = batch
                .columns()
                .iter()
                .map(|col| cell_to_string(col, row))
                .collect::<Result<Vec<String>, ArrowError>>()?;
            for mut expanded in expand_row(cells) {
                if let Some(root) = workspace_root {
                    normalize_paths(&mut expanded, root);
                }
                rows.push(expanded);
            }
        }
    }
    Ok(rows)
}

/// Why a result could not be written as text.
#[derive(Debug)]
pub enum ConvertError {
    Arrow(ArrowError),
    /// A batch whose schema is not the plan's (an internal error upstream).
    SchemaMismatch(String),
}

impl From<ArrowError> for ConvertError {
    fn from(e: ArrowError) -> Self {
        Self::Arrow(e)
    }
}

/// Upstream `expand_row`: a last cell with several lines (an `EXPLAIN` plan) becomes the row
/// without it, then one row per line, `NN)` first and each leading space as `-` (sqllogictest
/// would otherwise not see indentation).
fn expand_row(mut row: Vec<String>) -> Vec<Vec<String>> {
    let Some(cell) = row.pop() else {
        return vec![row];
    };
    let lines: Vec<&str> = cell.split('\n').collect();
    if lines.len() < 2 {
        row.push(cell);
        return vec![row];
    }
    let mut rows = vec![row];
    for (idx, line) in lines.into_iter().enumerate() {
        let content = line.trim_start();
        let prefix = "-".repeat(line.len() - content.len());
        rows.push(vec![format!("{:02}){prefix}{content}", idx + 1)]);
    }
    rows
}

/// Upstream `normalize_paths`: the workspace root as an object store path (no leading `/`) is
/// written `WORKSPACE_ROOT`, so plans that show file paths do not depend on the checkout.
fn normalize_paths(row: &mut [String], workspace_root: &str) {
    let root = workspace_root.trim_start_matches('/');
    if root.is_empty() {
        return;
    }
    for s in row.iter_mut() {
        if s.contains(root) {
            *s = s.replace(root, "WORKSPACE_ROOT");
        }
    }
}

/// One cell as DataFusion's runner writes it (upstream `cell_to_string`): NULL as `NULL`,
/// numbers by [`f64_to_str`] and friends, text by `varchar_to_str`, dictionaries by their
/// values, everything else by Arrow's formatter with DataFusion's default format options.
pub fn cell_to_string(col: &ArrayRef, row: usize) -> Result<String, ArrowError> {
    if col.is_null(row) {
        return Ok(NULL_STR.to_string());
    }
    Ok(match col.data_type() {
        DataType::Null => NULL_STR.to_string(),
        DataType::Boolean => bool_to_str(col.as_boolean().value(row)),
        DataType::Float16 => {
            let v = col
                .as_primitive::<arrow::datatypes::Float16Type>()
                .value(row);
            float_to_str(v.is_nan(), v.is_infinite(), v.is_sign_positive(), || {
                v.to_string()
            })
        }
        DataType::Float32 => {
            let v = col
                .as_primitive::<arrow::datatypes::Float32Type>()
                .value(row);
            float_to_str(v.is_nan(), v.is_infinite(), v > 0.0, || v.to_string())
        }
        DataType::Float64 => f64_to_str(
            col.as_primitive::<arrow::datatypes::Float64Type>()
                .value(row),
        ),
        DataType::Decimal32(_, scale) => arrow_decimal_to_str::<Decimal32Type>(
            col.as_primitive::<Decimal32Type>().value(row),
            *scale,
        ),
        DataType::Decimal64(_, scale) => arrow_decimal_to_str::<Decimal64Type>(
            col.as_primitive::<Decimal64Type>().value(row),
            *scale,
        ),
        DataType::Decimal128(_, scale) => arrow_decimal_to_str::<Decimal128Type>(
            col.as_primitive::<Decimal128Type>().value(row),
            *scale,
        ),
        DataType::Decimal256(_, scale) => arrow_decimal_to_str::<Decimal256Type>(
            col.as_primitive::<Decimal256Type>().value(row),
            *scale,
        ),
        DataType::LargeUtf8 => varchar_to_str(col.as_string::<i64>().value(row)),
        DataType::Utf8 => varchar_to_str(col.as_string::<i32>().value(row)),
        DataType::Utf8View => varchar_to_str(col.as_string_view().value(row)),
        DataType::Dictionary(_, _) => {
            let dict = col.as_any_dictionary();
            let key = dict.normalized_keys()[row];
            cell_to_string(dict.values(), key)?
        }
        _ => {
            let mut options = datafusion::config::FormatOptions::default();
            options
                .set("null", NULL_STR)
                .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
            let options: arrow::util::display::FormatOptions = (&options)
                .try_into()
                .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
            let formatter = ArrayFormatter::try_new(col.as_ref(), &options)?;
            formatter.value(row).to_string()
        }
    })
}

fn bool_to_str(value: bool) -> String {
    if value { "true" } else { "false" }.to_string()
}

/// Upstream `varchar_to_str`: the empty string as `(empty)`, trailing newlines dropped, NUL
/// as `\0`.
fn varchar_to_str(value: &str) -> String {
    if value.is_empty() {
        "(empty)".to_string()
    } else {
        value.trim_end_matches('\n').replace('\u{0000}', "\\0")
    }
}

/// Upstream `f16_to_str` / `f32_to_str` / `f64_to_str`, shared: NaN without its sign (it
/// differs between platforms), the infinities by name, any other value through its shortest
/// decimal text and [`big_decimal_to_str`].
fn float_to_str(
    nan: bool,
    infinite: bool,
    positive: bool,
    text: impl FnOnce() -> String,
) -> String {
    if nan {
        "NaN".to_string()
    } else if infinite && positive {
        "Infinity".to_string()
    } else if infinite {
        "-Infinity".to_string()
    } else {
        big_decimal_to_str(BigDecimal::from_str(&text()).expect("a finite float"), None)
    }
}

/// A `Float64` as DataFusion's runner writes it: `1.0` as `1`, `0.1 + 0.2` as `0.3` (12
/// decimal places), `inf` as `Infinity`.
pub fn f64_to_str(value: f64) -> String {
    float_to_str(value.is_nan(), value.is_infinite(), value > 0.0, || {
        value.to_string()
    })
}

/// Upstream `arrow_decimal_to_str`: rounded to the type's scale, trailing zeros dropped.
fn arrow_decimal_to_str<T: DecimalType>(value: T::Native, scale: i8) -> String {
    let value = T::format_decimal(value, u8::MAX, scale);
    big_decimal_to_str(
        BigDecimal::from_str(&value).expect("Arrow's decimal text"),
        Some(i64::from(scale)),
    )
}

/// Upstream `big_decimal_to_str`: rounded to `round_digits` decimal places (12 by default),
/// normalised, in plain notation.
fn big_decimal_to_str(value: BigDecimal, round_digits: Option<i64>) -> String {
    value
        .round(round_digits.unwrap_or(12))
        .normalized()
        .to_plain_string()
}

/// The normaliser of DataFusion's runner (upstream `value_normalizer`): trailing whitespace
/// only; other whitespace counts.
#[allow(clippy::ptr_arg)]
pub fn value_normalizer(s: &String) -> String {
    s.trim_end().to_string()
}

/// The validator of DataFusion's runner (upstream `df_value_validator`): the cells of each row
/// joined by one space, trailing whitespace dropped, compared line by line with the expected
/// lines; an expected `<slt:ignore>` matches any text in its place.
pub fn df_value_validator(
    normalizer: Normalizer,
    actual: &[Vec<String>],
    expected: &[String],
) -> bool {
    const IGNORE_MARKER: &str = "<slt:ignore>";
    let normalized_expected: Vec<String> = expected.iter().map(normalizer).collect();
    let normalized_actual: Vec<String> = actual
        .iter()
        .map(|cells| cells.join(" ").trim_end().to_string())
        .collect();
    if expected.iter().any(|line| line.contains(IGNORE_MARKER)) {
        let expected_snapshot = normalized_expected.join("\n");
        let actual_snapshot = normalized_actual.join("\n");
        let mut pos = 0;
        for (i, fragment) in expected_snapshot.split(IGNORE_MARKER).enumerate() {
            if fragment.is_empty() {
                continue;
            }
            match actual_snapshot[pos..].find(fragment) {
                // The first fragment must start the output.
                Some(idx) if i == 0 && idx != 0 => return false,
                Some(idx) => pos += idx + fragment.len(),
                None => return false,
            }
        }
        return true;
    }
    normalized_actual == normalized_expected
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BinaryArray, Float64Array, StringArray};
    use std::sync::Arc;

    /// Upstream's own cases (`src/engines/conversion.rs`, `test_big_decimal_to_str`).
    #[test]
    fn numbers_are_written_as_upstream_writes_them() {
        use bigdecimal::num_bigint::BigInt;
        let d = |i: i128, scale: i64| BigDecimal::from_bigint(BigInt::from(i), scale);
        assert_eq!(big_decimal_to_str(d(110, 3), None), "0.11");
        assert_eq!(big_decimal_to_str(d(11, -1), None), "110");
        assert_eq!(big_decimal_to_str(d(-11, 1), None), "-1.1");
        assert_eq!(big_decimal_to_str(d(0, 0), None), "0");
        assert_eq!(
            big_decimal_to_str(d(10_i128.pow(13) + 11, 13), None),
            "1.000000000001"
        );
        assert_eq!(arrow_decimal_to_str::<Decimal128Type>(12300, 4), "1.23");
        assert_eq!(f64_to_str(1.0), "1");
        assert_eq!(f64_to_str(0.1 + 0.2), "0.3");
        assert_eq!(f64_to_str(f64::INFINITY), "Infinity");
        assert_eq!(f64_to_str(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(f64_to_str(-f64::NAN), "NaN");
        assert_eq!(f64_to_str(1e-20), "0");
        assert_eq!(f64_to_str(-2.5e20), "-250000000000000000000");
    }

    #[test]
    fn text_binary_and_plans_are_written_as_upstream_writes_them() {
        let text: ArrayRef = Arc::new(StringArray::from(vec![Some(""), Some("a\0b\n"), None]));
        assert_eq!(cell_to_string(&text, 0).unwrap(), "(empty)");
        assert_eq!(cell_to_string(&text, 1).unwrap(), "a\\0b");
        assert_eq!(cell_to_string(&text, 2).unwrap(), "NULL");
        let binary: ArrayRef = Arc::new(BinaryArray::from(vec![&b""[..], &b"\x00\xff"[..]]));
        assert_eq!(cell_to_string(&binary, 0).unwrap(), "");
        assert_eq!(cell_to_string(&binary, 1).unwrap(), "00ff");
        let float: ArrayRef = Arc::new(Float64Array::from(vec![1.5]));
        assert_eq!(cell_to_string(&float, 0).unwrap(), "1.5");
        assert_eq!(
            expand_row(vec!["physical_plan".into(), "A\n  B\n    C".into()]),
            vec![
                vec!["physical_plan".to_string()],
                vec!["01)A".to_string()],
                vec!["02)--B".to_string()],
                vec!["03)----C".to_string()],
            ]
        );
    }

    #[test]
    fn the_validator_compares_whitespace_and_honours_ignore_markers() {
        let actual = vec![vec!["a".to_string(), "b".to_string()]];
        assert!(df_value_validator(
            value_normalizer,
            &actual,
            &["a b  ".into()]
        ));
        assert!(!df_value_validator(
            value_normalizer,
            &actual,
            &["a  b".into()]
        ));
        assert!(df_value_validator(
            value_normalizer,
            &actual,
            &["a <slt:ignore>".into()]
        ));
        let actual = vec![vec!["foo bar baz".to_string()]];
        assert!(!df_value_validator(
            value_normalizer,
            &actual,
            &["bar <slt:ignore>".into()]
        ));
    }
}
