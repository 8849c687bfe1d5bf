//! The eager forms at run time: `CASE`, `AND` and `OR` as scalar functions whose arguments
//! DataFusion evaluates in full on every batch, so the work does not depend on which rows
//! select a branch.
//!
//! The rewrite [`crate::sql::privacy::rewrite::eager`] puts them in place of every `CASE`,
//! `AND` and `OR` of a locked session's optimised plan (its module docs say why). Each picks
//! each row's value with the kernel DataFusion's own form uses: Arrow's `zip` for
//! [`EagerCase`], Kleene logic's `and_kleene` / `or_kleene` for [`EagerBoolean`]. They are not
//! registered (an analyst's SQL cannot call them) and reach Ballista executors by name
//! ([`internal_udf`]).

use arrow::array::{Array, ArrayRef, BooleanArray};
use arrow::compute::kernels::boolean::{and_kleene, or_kleene};
use arrow::compute::kernels::zip::zip;
use arrow::compute::prep_null_mask_filter;
use arrow::datatypes::DataType;
use datafusion::common::{exec_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, Operator, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use std::sync::Arc;

/// The name of [`EagerCase`] (its values may be NULL).
pub const CASE: &str = "dp_eager_case";
/// The name of [`EagerCase`] for a `CASE` DataFusion proves never NULL (`COALESCE(x, 0)`).
pub const CASE_NOT_NULL: &str = "dp_eager_case_not_null";
/// The name of [`EagerBoolean`] for `AND`.
pub const AND: &str = "dp_eager_and";
/// The name of [`EagerBoolean`] for `OR`.
pub const OR: &str = "dp_eager_or";

/// `CASE WHEN when_1 THEN then_1 ... ELSE else END` with every argument evaluated on every
/// row: `dp_eager_case(when_1, then_1, ..., when_n, then_n, else)` (module docs). A `CASE`
/// with a base expression arrives as `base = value_i` conditions; one without `ELSE` has a
/// NULL there. Its values are nullable as the `CASE` was (DataFusion proves `CASE WHEN x IS
/// NOT NULL THEN x ELSE 0 END` never NULL), so the plan's schema is the same after the rewrite.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct EagerCase {
    nullable: bool,
    signature: Signature,
}

impl EagerCase {
    pub fn new(nullable: bool) -> Self {
        Self {
            nullable,
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

/// The type of the values of a `dp_eager_case` call: its first branch (or `ELSE`) that is not
/// an untyped NULL (the analyzer coerces every branch to one type).
fn case_type<'a>(arg_types: impl Iterator<Item = &'a DataType>) -> DataType {
    let mut branches = arg_types.enumerate().filter_map(|(i, t)| match i % 2 {
        1 => Some(t),
        _ => None,
    });
    branches
        .find(|t| !t.is_null())
        .cloned()
        .unwrap_or(DataType::Null)
}

impl ScalarUDFImpl for EagerCase {
    fn name(&self) -> &str {
        match self.nullable {
            true => CASE,
            false => CASE_NOT_NULL,
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        // (when, then) pairs then the else: the else sits at an odd index too once a NULL
        // is put before it.
        let mut padded: Vec<&DataType> = arg_types.iter().collect();
        let last = padded.pop();
        padded.push(&DataType::Boolean);
        padded.extend(last);
        Ok(case_type(padded.into_iter()))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<arrow::datatypes::FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Ok(Arc::new(arrow::datatypes::Field::new(
            self.name(),
            self.return_type(&types)?,
            self.nullable,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let to = args.return_field.data_type().clone();
        let (arrays, scalar) = arrays(&args)?;
        let Some((otherwise, pairs)) = arrays.split_last() else {
            return exec_err!("{CASE} takes an ELSE argument");
        };
        if pairs.len() % 2 != 0 {
            return exec_err!("{CASE} takes WHEN, THEN pairs and an ELSE");
        }
        let mut result = cast_to(otherwise, &to)?;
        for pair in pairs.chunks(2).rev() {
            let when = selected(&pair[0])?;
            let then = cast_to(&pair[1], &to)?;
            result = zip(&when, &then, &result)?;
        }
        output(result, scalar)
    }
}

/// `AND` or `OR` with both sides evaluated on every row (module docs), in Kleene logic.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct EagerBoolean {
    op: Operator,
    signature: Signature,
}

impl EagerBoolean {
    /// `op` is [`Operator::And`] or [`Operator::Or`].
    pub fn new(op: Operator) -> Self {
        Self {
            op,
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for EagerBoolean {
    fn name(&self) -> &str {
        match self.op {
            Operator::And => AND,
            _ => OR,
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    /// Nullable as DataFusion's `AND` / `OR` is: when either side is.
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<arrow::datatypes::FieldRef> {
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        Ok(Arc::new(arrow::datatypes::Field::new(
            self.name(),
            DataType::Boolean,
            nullable,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (arrays, scalar) = arrays(&args)?;
        let [left, right] = arrays.as_slice() else {
            return exec_err!("{} takes two arguments", self.name());
        };
        let (left, right) = (booleans(left)?, booleans(right)?);
        let result = match self.op {
            Operator::And => and_kleene(&left, &right)?,
            _ => or_kleene(&left, &right)?,
        };
        output(Arc::new(result), scalar)
    }
}

/// Every argument as an array of the batch's rows (of one row when all are scalars: the
/// result is then a scalar, as DataFusion's own `CASE` gives for constants).
fn arrays(args: &ScalarFunctionArgs) -> Result<(Vec<ArrayRef>, bool)> {
    let scalar = args
        .args
        .iter()
        .all(|a| matches!(a, ColumnarValue::Scalar(_)));
    let rows = if scalar { 1 } else { args.number_rows };
    let arrays = args
        .args
        .iter()
        .map(|a| a.to_array(rows))
        .collect::<Result<Vec<_>>>()?;
    Ok((arrays, scalar))
}

fn output(result: ArrayRef, scalar: bool) -> Result<ColumnarValue> {
    Ok(match scalar {
        true => ColumnarValue::Scalar(ScalarValue::try_from_array(&result, 0)?),
        false => ColumnarValue::Array(result),
    })
}

fn booleans(array: &ArrayRef) -> Result<BooleanArray> {
    let array = cast_to(array, &DataType::Boolean)?;
    match array.as_any().downcast_ref::<BooleanArray>() {
        Some(booleans) => Ok(booleans.clone()),
        None => exec_err!("expected booleans, got {}", array.data_type()),
    }
}

/// The rows a condition selects: true, not false or NULL.
fn selected(condition: &ArrayRef) -> Result<BooleanArray> {
    let condition = booleans(condition)?;
    Ok(match condition.null_count() {
        0 => condition,
        _ => prep_null_mask_filter(&condition),
    })
}

fn cast_to(array: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    match array.data_type() == to {
        true => Ok(Arc::clone(array)),
        false => Ok(arrow::compute::cast(array, to)?),
    }
}

/// The rewrite's function named `name`, for the Ballista codecs (it is not registered: an
/// analyst's SQL cannot call it).
pub fn internal_udf(name: &str) -> Option<Arc<ScalarUDF>> {
    match name {
        CASE => Some(Arc::new(ScalarUDF::new_from_impl(EagerCase::new(true)))),
        CASE_NOT_NULL => Some(Arc::new(ScalarUDF::new_from_impl(EagerCase::new(false)))),
        AND => Some(Arc::new(ScalarUDF::new_from_impl(EagerBoolean::new(
            Operator::And,
        )))),
        OR => Some(Arc::new(ScalarUDF::new_from_impl(EagerBoolean::new(
            Operator::Or,
        )))),
        _ => None,
    }
}
