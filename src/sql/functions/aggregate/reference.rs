//! The DP aggregates' section of `docs/sql-reference.md`, rendered from the documentation
//! each registered function returns to DataFusion (`AggregateUDFImpl::documentation`, from its
//! statistic's [`DpStatistic::doc`](super::statistic::DpStatistic::doc)), in the layout of
//! DataFusion's own function reference (`print_functions_docs`): the syntax, the description,
//! the arguments, an example, the related functions. A test fails when the file's section
//! differs from [`sql_reference`]; `DOC_UPDATE=1` rewrites it.

use super::{DpAggregate, STATISTICS};
use datafusion::logical_expr::AggregateUDFImpl;
use std::fmt::Write;

/// The line before the generated section in `docs/sql-reference.md`.
pub const BEGIN: &str =
    "<!-- The DP aggregates below are generated from each statistic's documentation \
(src/sql/functions/aggregate/): edit it there, then run \
DOC_UPDATE=1 cargo test --all-features --lib sql_reference -->";

/// The line after the generated section.
pub const END: &str = "<!-- End of the generated DP aggregates. -->";

/// The Markdown of every statistic of the registry, in registration order: for each, a
/// heading with its syntax and result type, its description, its arguments, its example and
/// its related functions, as its registered `AggregateUDF` documents them.
pub fn sql_reference() -> String {
    // A blank line after the BEGIN line and after each block, the last before the END line.
    let mut out = String::from("\n");
    for statistic in STATISTICS {
        let udaf = DpAggregate::new(*statistic);
        let Some(doc) = udaf.documentation() else {
            continue;
        };
        let _ = write!(
            out,
            "## `{}` → {}\n\n{}\n\n",
            doc.syntax_example,
            statistic.returns(),
            doc.description
        );
        if let Some(arguments) = &doc.arguments {
            out.push_str("#### Arguments\n\n");
            for (name, text) in arguments {
                let _ = writeln!(out, "- **{name}**: {text}");
            }
            out.push('\n');
        }
        if let Some(example) = &doc.sql_example {
            let _ = write!(out, "#### Example\n\n{example}\n\n");
        }
        if let Some(related) = &doc.related_udfs {
            let names: Vec<String> = related.iter().map(|r| format!("`{r}`")).collect();
            let _ = write!(out, "**Related functions**: {}.\n\n", names.join(", "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, Float64Array, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use datafusion::prelude::{SessionConfig, SessionContext};
    use std::path::Path;
    use std::sync::Arc;

    /// `docs/sql-reference.md`'s section between [`BEGIN`] and [`END`] is [`sql_reference`];
    /// with `DOC_UPDATE` set, the section is rewritten instead.
    #[test]
    fn the_sql_reference_shows_every_statistic_as_documented() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sql-reference.md");
        let text = std::fs::read_to_string(&path).unwrap();
        let (before, rest) = text
            .split_once(&format!("{BEGIN}\n"))
            .expect("docs/sql-reference.md has the line reference::BEGIN");
        let (shown, after) = rest
            .split_once(&format!("{END}\n"))
            .expect("docs/sql-reference.md has the line reference::END");
        let generated = sql_reference();
        if shown == generated {
            return;
        }
        if std::env::var_os("DOC_UPDATE").is_some() {
            let updated = format!("{before}{BEGIN}\n{generated}{END}\n{after}");
            std::fs::write(&path, updated).unwrap();
            return;
        }
        let line = shown
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(shown.lines().count().min(generated.lines().count()));
        panic!(
            "docs/sql-reference.md's DP aggregates differ from the statistics' documentation \
             (first at line {} of the section: {:?} instead of {:?}); regenerate with \
             DOC_UPDATE=1 cargo test --all-features --lib sql_reference",
            line + 1,
            shown.lines().nth(line).unwrap_or(""),
            generated.lines().nth(line).unwrap_or("")
        );
    }

    /// Every statistic documents what it declares: a one-sentence summary, each argument
    /// (with its kind), `epsilon` and `options` with its keys, an example that calls it, and
    /// related functions of the registry only.
    #[test]
    fn every_statistic_documents_its_arguments_and_options() {
        for statistic in STATISTICS {
            let name = statistic.name();
            let doc = statistic.doc();
            assert!(
                doc.summary.ends_with('.') && !doc.summary.contains('\n'),
                "{name}: the summary is one line ending with a full stop"
            );
            let documentation = super::super::documentation(*statistic);
            assert_eq!(documentation.syntax_example, statistic.syntax());
            let arguments = documentation.arguments.unwrap();
            let names: Vec<&str> = arguments.iter().map(|(n, _)| n.as_str()).collect();
            let mut want: Vec<&str> = statistic.args().iter().map(|a| a.name).collect();
            want.extend(["epsilon", "options"]);
            assert_eq!(names, want, "{name}");
            for (arg, (_, text)) in statistic.args().iter().zip(&arguments) {
                assert!(!arg.description.is_empty(), "{name}: {}", arg.name);
                assert!(text.starts_with(arg.kind.describe()), "{name}: {text}");
            }
            for key in statistic.option_keys() {
                assert!(arguments.last().unwrap().1.contains(&format!("`{key}`")));
            }
            assert!(
                doc.sql_example.contains(&format!("{name}(")),
                "{name}: its example calls it"
            );
            for related in doc.related {
                let related = related.name();
                assert!(
                    STATISTICS.iter().any(|s| s.name() == related) && related != name,
                    "{name}: related function {related} is not another statistic of the registry"
                );
            }
        }
        // A relation declared by one side is shown on both.
        for statistic in STATISTICS {
            for related in statistic.doc().related {
                let related = related.name();
                let other = STATISTICS.iter().find(|s| s.name() == related).unwrap();
                let shown = super::super::documentation(*other).related_udfs.unwrap();
                assert!(shown.iter().any(|r| r == statistic.name()), "{related}");
            }
        }
    }

    /// DataFusion's own `information_schema` reads the documentation: each DP aggregate's
    /// routine carries its description and syntax.
    #[tokio::test]
    async fn information_schema_shows_each_statistic_s_documentation() {
        let ctx =
            SessionContext::new_with_config(SessionConfig::new().with_information_schema(true));
        crate::sql::functions::register_all(&ctx).unwrap();
        let batches = ctx
            .sql(
                "SELECT routine_name, description, syntax_example FROM information_schema.routines \
                 WHERE function_type = 'AGGREGATE' AND starts_with(routine_name, 'dp_') \
                 ORDER BY routine_name",
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let column = |batch: &RecordBatch, i: usize| -> Vec<String> {
            let array = batch.column(i).as_any().downcast_ref::<StringArray>();
            let array = array.expect("a Utf8 column");
            array.iter().map(|v| v.unwrap_or("").to_string()).collect()
        };
        let mut rows = Vec::new();
        for batch in &batches {
            let (names, descriptions, syntax) =
                (column(batch, 0), column(batch, 1), column(batch, 2));
            for ((n, d), s) in names.into_iter().zip(descriptions).zip(syntax) {
                rows.push((n, d, s));
            }
        }
        assert_eq!(rows.len(), STATISTICS.len(), "{rows:?}");
        for statistic in STATISTICS {
            let (_, description, syntax) = rows
                .iter()
                .find(|(n, _, _)| n == statistic.name())
                .unwrap_or_else(|| panic!("{} is not in information_schema", statistic.name()));
            assert!(description.starts_with(statistic.doc().summary));
            assert_eq!(syntax, &statistic.syntax());
        }
    }

    /// Every example runs as written (seeded) on a table with the columns the examples use.
    #[tokio::test]
    async fn every_example_runs() {
        let ctx = SessionContext::new();
        crate::sql::register(&ctx).unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("ward", DataType::Utf8, false),
            Field::new("age", DataType::Float64, true),
            Field::new("stay_days", DataType::Int64, true),
            Field::new("outcome", DataType::Boolean, true),
            Field::new("exposed", DataType::Boolean, true),
        ]));
        let n = 40;
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values((0..n).map(|i| {
                    if i % 3 == 0 {
                        "A"
                    } else {
                        "B"
                    }
                }))),
                Arc::new(Float64Array::from_iter_values(
                    (0..n).map(|i| 20.0 + i as f64),
                )),
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % 9))),
                Arc::new(BooleanArray::from_iter((0..n).map(|i| Some(i % 4 == 0)))),
                Arc::new(BooleanArray::from_iter((0..n).map(|i| Some(i % 2 == 0)))),
            ],
        )
        .unwrap();
        ctx.register_batch("visits", batch).unwrap();
        ctx.sql("SET dp.seed = 7").await.unwrap();
        for statistic in STATISTICS {
            let example = statistic.doc().sql_example;
            let batches = ctx
                .sql(example)
                .await
                .unwrap_or_else(|e| panic!("{}: {example}: {e}", statistic.name()))
                .collect()
                .await
                .unwrap_or_else(|e| panic!("{}: {example}: {e}", statistic.name()));
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            assert!(rows > 0, "{}: {example}", statistic.name());
        }
    }
}
