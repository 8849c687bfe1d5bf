//! The row-order contract of a locked session: every answer's rows come out ordered by the
//! query's ORDER BY keys, ties broken by all output columns ascending, so the order is a
//! function of the rows' values alone (not of which rows of other people were read, in what
//! partition, or how fast).

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::{concat_batches, SortOptions};
use datafusion::arrow::row::{RowConverter, SortField};

/// Checks that `batches` are sorted by `keys` (output column, descending; DataFusion's
/// defaults: ascending NULLS LAST, descending NULLS FIRST), then by every column ascending
/// (NULLS LAST, or NULLS FIRST: either is accepted). Types the row format cannot compare are
/// skipped (Ok).
pub fn check(batches: &[RecordBatch], keys: &[(usize, bool)]) -> Result<(), String> {
    let Some(first) = batches.first() else {
        return Ok(());
    };
    let batch = concat_batches(&first.schema(), batches).map_err(|e| e.to_string())?;
    if batch.num_rows() < 2 {
        return Ok(());
    }
    let mut last_error = String::new();
    for nulls_first in [false, true] {
        let mut fields = Vec::new();
        let mut columns = Vec::new();
        for &(c, descending) in keys {
            if c >= batch.num_columns() {
                return Ok(());
            }
            fields.push(SortField::new_with_options(
                batch.column(c).data_type().clone(),
                SortOptions {
                    descending,
                    nulls_first: descending,
                },
            ));
            columns.push(batch.column(c).clone());
        }
        for c in 0..batch.num_columns() {
            fields.push(SortField::new_with_options(
                batch.column(c).data_type().clone(),
                SortOptions {
                    descending: false,
                    nulls_first,
                },
            ));
            columns.push(batch.column(c).clone());
        }
        let Ok(converter) = RowConverter::new(fields) else {
            return Ok(());
        };
        let Ok(rows) = converter.convert_columns(&columns) else {
            return Ok(());
        };
        match (1..rows.num_rows()).find(|&i| rows.row(i - 1) > rows.row(i)) {
            None => return Ok(()),
            Some(i) => last_error = format!("row {} comes after row {} out of order", i, i - 1),
        }
    }
    Err(last_error)
}

/// Whether the row-order contract is enforced (an answer out of order fails the test): on,
/// since locked sessions order their releases (`release_order.rs`); `DP_NEIGHBOURS_ORDER=0`
/// turns it off to look at other differences first.
pub fn row_order_contract_enforced() -> bool {
    std::env::var("DP_NEIGHBOURS_ORDER").map_or(true, |v| v != "0")
}
