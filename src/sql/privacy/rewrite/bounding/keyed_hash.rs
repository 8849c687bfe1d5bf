//! `dp_keyed_hash(salt, value, ...)`: a keyed 64-bit hash of a row of values, the random
//! order in which contribution bounding picks each unit's groups and the bucket that spreads
//! units over partitions ([`super::bound_contributions`]).
//!
//! The hash is SipHash-1-3 (a pseudo-random function of its key) keyed by the salt, of the
//! values' Arrow row encoding (`arrow::row`, injective: distinct value tuples, NULLs
//! included, have distinct encodings). So for a fresh random salt the hashes of distinct
//! (unit, keys) tuples behave as independent uniform draws, and every row of one (unit, group)
//! gets the same value. Nothing the bound relies on depends on it: bounding breaks ties by
//! the keys themselves.

use arrow::array::{ArrayRef, UInt64Array};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use datafusion::common::{exec_err, plan_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use siphasher::sip::SipHasher13;
use std::hash::Hasher;
use std::sync::{Arc, LazyLock};

pub const NAME: &str = "dp_keyed_hash";

/// The second half of the 128-bit SipHash key (the first is the salt): a fixed domain tag.
const DOMAIN: u64 = u64::from_le_bytes(*b"dp-bound");

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct KeyedHash {
    signature: Signature,
}

impl Default for KeyedHash {
    fn default() -> Self {
        Self {
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

static UDF: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(KeyedHash::default())));

/// The `dp_keyed_hash` scalar function.
pub fn udf() -> Arc<ScalarUDF> {
    Arc::clone(&UDF)
}

/// `dp_keyed_hash(salt, values...)` as an expression.
pub fn keyed_hash(salt: u64, values: impl IntoIterator<Item = Expr>) -> Expr {
    let mut args = vec![Expr::Literal(ScalarValue::UInt64(Some(salt)), None)];
    args.extend(values);
    UDF.call(args)
}

/// The keyed hash of each row of `columns` (all of one length).
pub fn hash_rows(salt: u64, columns: &[ArrayRef]) -> Result<UInt64Array> {
    let fields = columns
        .iter()
        .map(|c| SortField::new(c.data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields)?;
    let rows = converter.convert_columns(columns)?;
    Ok(rows
        .iter()
        .map(|row| {
            let mut hasher = SipHasher13::new_with_keys(salt, DOMAIN);
            hasher.write(row.as_ref());
            hasher.finish()
        })
        .collect::<Vec<u64>>()
        .into())
}

impl ScalarUDFImpl for KeyedHash {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types.first() {
            Some(DataType::UInt64) if arg_types.len() >= 2 => Ok(DataType::UInt64),
            _ => plan_err!(
                "{NAME} takes a UInt64 salt and at least one value, got ({})",
                arg_types
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(ColumnarValue::Scalar(ScalarValue::UInt64(Some(salt)))) = args.args.first() else {
            return exec_err!("{NAME}: argument 'salt' must be a non-NULL UInt64 constant");
        };
        let columns = args.args[1..]
            .iter()
            .map(|v| v.to_array(args.number_rows))
            .collect::<Result<Vec<_>>>()?;
        Ok(ColumnarValue::Array(Arc::new(hash_rows(*salt, &columns)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};

    #[test]
    fn equal_tuples_hash_equal_and_the_salt_changes_the_hash() {
        let units: ArrayRef = Arc::new(StringArray::from(vec![
            Some("p1"),
            Some("p1"),
            Some("p2"),
            None,
        ]));
        let keys: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), Some(1), Some(1), None]));
        let a = hash_rows(7, &[Arc::clone(&units), Arc::clone(&keys)]).unwrap();
        assert_eq!(a.value(0), a.value(1));
        assert_ne!(a.value(0), a.value(2));
        assert_ne!(a.value(2), a.value(3));
        let b = hash_rows(8, &[units, keys]).unwrap();
        assert_ne!(a.value(0), b.value(0));
    }

    #[test]
    fn a_salt_and_a_value_are_required() {
        let f = KeyedHash::default();
        assert!(f.return_type(&[DataType::UInt64, DataType::Utf8]).is_ok());
        let err = f.return_type(&[DataType::UInt64]).unwrap_err().to_string();
        assert!(err.contains("dp_keyed_hash takes a UInt64 salt"), "{err}");
        assert!(f.return_type(&[DataType::Int64, DataType::Utf8]).is_err());
    }
}
