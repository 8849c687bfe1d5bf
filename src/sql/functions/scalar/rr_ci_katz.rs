//! `rr_ci_katz(exposed_cases, exposed_total, unexposed_cases, unexposed_total [, confidence])`:
//! the classical log interval for the relative risk (Katz et al. 1978; paper, Appendix C).
//!
//! **NOT PRIVATE**: it is computed exactly from its inputs. It exists to compare a DP interval
//! with the textbook one on the same (non-private or already-released) counts. Returns a
//! struct `{estimate, lower, upper}`, NULL where a count of cases is 0 or an input is NULL.

use crate::sql::options::parse_confidence;
use crate::stats::relative_risk::katz_interval_at_z;
use crate::stats::table::two_sided_z;
use arrow::array::{Array, ArrayRef, AsArray, Float64Builder, StructArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type, Int64Type};
use datafusion::common::{exec_err, plan_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use std::sync::Arc;

const NAME: &str = "rr_ci_katz";
const ARGS: [&str; 5] = [
    "exposed_cases",
    "exposed_total",
    "unexposed_cases",
    "unexposed_total",
    "confidence",
];

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct RrCiKatz {
    signature: Signature,
}

impl Default for RrCiKatz {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

/// The `rr_ci_katz` scalar function.
pub fn udf() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(RrCiKatz::default()))
}

fn fields() -> Fields {
    Fields::from(vec![
        Field::new("estimate", DataType::Float64, true),
        Field::new("lower", DataType::Float64, true),
        Field::new("upper", DataType::Float64, true),
    ])
}

impl ScalarUDFImpl for RrCiKatz {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if !(4..=5).contains(&arg_types.len()) {
            return plan_err!(
                "{NAME} takes 4 or 5 arguments ({}), got {}",
                ARGS.join(", "),
                arg_types.len()
            );
        }
        arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| match (i, t) {
                (0..=3, t) if t.is_integer() || t.is_null() => Ok(DataType::Int64),
                (4, t) if t.is_numeric() || t.is_null() => Ok(DataType::Float64),
                (0..=3, t) => plan_err!(
                    "{NAME}: argument '{}' must be an integer count, got {t}",
                    ARGS[i]
                ),
                (_, t) => plan_err!("{NAME}: argument 'confidence' must be a number, got {t}"),
            })
            .collect()
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(fields()))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        // A literal confidence is checked when the query is planned.
        if let Some(Some(value)) = args.scalar_arguments.get(4) {
            if let Ok(ScalarValue::Float64(Some(c))) = value.cast_to(&DataType::Float64) {
                if let Err(e) = parse_confidence(&c.to_string()) {
                    return plan_err!("{NAME}: argument 'confidence': {e}");
                }
            }
        }
        Ok(Arc::new(Field::new(NAME, DataType::Struct(fields()), true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let counts: Vec<_> = arrays[..4]
            .iter()
            .map(|a| a.as_primitive::<Int64Type>())
            .collect();
        let confidence = arrays.get(4).map(|a| a.as_primitive::<Float64Type>());
        let mut estimate = Float64Builder::with_capacity(rows);
        let mut lower = Float64Builder::with_capacity(rows);
        let mut upper = Float64Builder::with_capacity(rows);
        let mut valid = Vec::with_capacity(rows);
        let mut quantile: Option<(f64, f64)> = None;
        for row in 0..rows {
            let mut values = [0u64; 4];
            let mut null = false;
            for (i, array) in counts.iter().enumerate() {
                if array.is_null(row) {
                    null = true;
                    continue;
                }
                let v = array.value(row);
                if v < 0 {
                    return exec_err!("{NAME}: argument '{}' must be >= 0, got {v}", ARGS[i]);
                }
                values[i] = v as u64;
            }
            let level = match confidence {
                Some(c) if c.is_null(row) => {
                    null = true;
                    0.95
                }
                Some(c) => c.value(row),
                None => 0.95,
            };
            for (cases, total) in [(0, 1), (2, 3)] {
                if !null && values[cases] > values[total] {
                    return exec_err!(
                        "{NAME}: argument '{}' ({}) exceeds '{}' ({})",
                        ARGS[cases],
                        values[cases],
                        ARGS[total],
                        values[total]
                    );
                }
            }
            let interval = if null {
                None
            } else {
                // The quantile is computed once per distinct confidence level, not per row.
                let z = match quantile {
                    Some((l, z)) if l == level => z,
                    _ => {
                        let z = two_sided_z(level)
                            .or_else(|e| exec_err!("{NAME}: argument 'confidence': {e}"))?;
                        quantile = Some((level, z));
                        z
                    }
                };
                katz_interval_at_z(values[0], values[1], values[2], values[3], z)
                    .or_else(|e| exec_err!("{NAME}: {e}"))?
            };
            estimate.append_option(interval.map(|i| i.estimate));
            lower.append_option(interval.map(|i| i.lower));
            upper.append_option(interval.map(|i| i.upper));
            valid.push(interval.is_some());
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(estimate.finish()),
            Arc::new(lower.finish()),
            Arc::new(upper.finish()),
        ];
        let result = StructArray::try_new(fields(), columns, Some(NullBuffer::from(valid)))?;
        Ok(ColumnarValue::Array(Arc::new(result)))
    }
}
