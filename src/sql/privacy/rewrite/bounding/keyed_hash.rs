//! The keyed 64-bit hash of a row of values that orders each unit's groups, and (seeded mode)
//! each group's rows, in contribution bounding
//! ([`crate::sql::privacy::exec::bound_contributions`]).
//!
//! The hash is SipHash-1-3 (a pseudo-random function of its key) keyed by the salt, of the
//! values' Arrow row encoding (`arrow::row`, injective: distinct value tuples, NULLs
//! included, have distinct encodings). So for a fresh random salt the hashes of distinct
//! (unit, keys) tuples behave as independent uniform draws, and every row of one (unit, group)
//! gets the same value. Nothing the bound relies on depends on it: bounding breaks ties by
//! the keys themselves.

use siphasher::sip::SipHasher13;
use std::hash::Hasher;

/// The second half of the 128-bit SipHash key (the first is the salt): a fixed domain tag.
const DOMAIN: u64 = u64::from_le_bytes(*b"dp-bound");

/// The keyed hash of one row in Arrow's row encoding.
pub fn hash_row(salt: u64, row: &[u8]) -> u64 {
    hash_row_in(DOMAIN, salt, row)
}

/// The keyed hash of one row under another `domain` tag: a function of the same salt
/// independent of [`hash_row`] (a spill's buckets of units).
pub fn hash_row_in(domain: u64, salt: u64, row: &[u8]) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(salt, domain);
    hasher.write(row);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use arrow::row::{RowConverter, SortField};
    use std::sync::Arc;

    #[test]
    fn equal_tuples_hash_equal_and_the_salt_changes_the_hash() {
        let units: ArrayRef = Arc::new(StringArray::from(vec![
            Some("p1"),
            Some("p1"),
            Some("p2"),
            None,
        ]));
        let keys: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), Some(1), Some(1), None]));
        let converter = RowConverter::new(vec![
            SortField::new(units.data_type().clone()),
            SortField::new(keys.data_type().clone()),
        ])
        .unwrap();
        let rows = converter.convert_columns(&[units, keys]).unwrap();
        let hash = |salt, i| hash_row(salt, rows.row(i).as_ref());
        assert_eq!(hash(7, 0), hash(7, 1));
        assert_ne!(hash(7, 0), hash(7, 2));
        assert_ne!(hash(7, 2), hash(7, 3));
        assert_ne!(hash(7, 0), hash(8, 0));
    }
}
