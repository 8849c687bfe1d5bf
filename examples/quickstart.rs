//! Relative risks with 95% confidence intervals per region, from the bundled dataset.
//!
//! cargo run --example quickstart
//!
//! Every query draws fresh secure noise, so the numbers change from run to run; the exact
//! (non-private) relative risks are printed beside them for comparison only — a real release
//! would never show them.

use datafusion::prelude::*;
use datafusion_dp::outln;
use datafusion_dp::Protection;

/// Prints `batches` as a table, as `DataFrame::show` does, but quietly stopping when the reader
/// goes away (`cargo run --example quickstart | head`).
fn show(batches: Vec<arrow::array::RecordBatch>) -> datafusion::error::Result<()> {
    let table = arrow::util::pretty::pretty_format_batches(&batches)?;
    outln!("{table}");
    Ok(())
}

#[tokio::main]
async fn main() -> datafusion::error::Result<()> {
    let ctx = SessionContext::new();
    datafusion_dp::register(&ctx)?;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/visits.csv");
    ctx.register_csv("visits", path, CsvReadOptions::new())
        .await?;
    // The data owner's declarations: a person is every visit with one patient_id (only DP
    // aggregates leave the table), and the four regions are public knowledge, released as
    // they are. (Without the latter, a DP query with GROUP BY is refused, or use private
    // group selection.)
    datafusion_dp::protect(&ctx, "visits", Protection::Unit("patient_id".into()))?;
    ctx.sql("SET dp.public_groups = 'assert'").await?;

    outln!("Differentially private relative risk of the outcome, exposed vs unexposed,");
    outln!("per region: epsilon 1.0 for the count plus 1.0 for the 2x2 table (2.0 per region),");
    outln!("Laplace noise, 95% noise-aware score intervals (the default; docs/intervals.md).\n");
    ctx.sql(
        "SELECT region, patients,
                round(ci['estimate'], 2) AS relative_risk,
                round(ci['lower'], 2)    AS lower_95,
                round(ci['upper'], 2)    AS upper_95
         FROM (SELECT region,
                      dp_count(patient_id, 1.0)        AS patients,
                      dp_rr_ci(outcome, exposed, 1.0)  AS ci
               FROM visits GROUP BY region)
         ORDER BY region",
    )
    .await?
    .collect()
    .await
    .and_then(show)?;

    outln!("\nFor comparison only (NOT private): the exact relative risk and Katz interval:\n");
    // The owner's own, non-private session: visits is not protected there. (In the DP session
    // above this query is refused: count(*) over a protected table is computed exactly.)
    let exact = SessionContext::new();
    exact.register_udf(
        datafusion_dp::sql::functions::scalar::rr_ci_katz::udf()
            .as_ref()
            .clone(),
    );
    exact
        .register_csv("visits", path, CsvReadOptions::new())
        .await?;
    exact.sql(
        "SELECT region, round(k['estimate'], 2) AS relative_risk,
                round(k['lower'], 2) AS lower_95, round(k['upper'], 2) AS upper_95
         FROM (SELECT region, rr_ci_katz(
                 count(*) FILTER (WHERE outcome AND exposed), count(*) FILTER (WHERE exposed),
                 count(*) FILTER (WHERE outcome AND NOT exposed), count(*) FILTER (WHERE NOT exposed)) AS k
               FROM visits GROUP BY region)
         ORDER BY region",
    )
    .await?
    .collect()
    .await
    .and_then(show)?;
    Ok(())
}
