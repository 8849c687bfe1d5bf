//! A table's schema is the data owner's, never inferred from protected rows (issue 27): in a
//! locked session built from an owner's configuration, `DESCRIBE` and
//! `information_schema.columns` are the same for neighbouring tables (with and without one
//! person) whose rows would change an inferred schema: a field only in one person's NDJSON
//! record, a CSV value of another type, a hive partition holding one person. A protected CSV or
//! NDJSON table without declared columns, a hive layout without declared partition columns and
//! Parquet files whose schemas differ are refused at start.

mod common;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::SessionContext;
use datafusion_dp::owner::{analyst_sql, Owner, OwnerConfig};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A fresh directory for one test, with `files` (relative path, contents) written into it.
fn dir_with(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = common::scratch(name);
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

/// The owner's configuration in `dir`: table `t` from `table` (its `[[table]]` keys but the
/// name) and one analyst.
fn config(dir: &Path, table: &str) -> OwnerConfig {
    let text = format!(
        "[[table]]\nname = \"t\"\n{table}\n\n\
         [[analyst]]\nname = \"a\"\nepsilon_budget = 10\nledger = \"a.ledger\"\n"
    );
    OwnerConfig::parse(&text, dir, "schemas.toml").unwrap()
}

/// A locked session of analyst `a` over the owner's table `t` in `dir`.
async fn session(dir: &Path, table: &str) -> SessionContext {
    let owner = Owner::open(config(dir, table)).await.unwrap();
    let analyst = owner.config().analyst("a").unwrap().clone();
    owner.analyst_session(&analyst).unwrap()
}

/// Runs `sql` as the analyst; the result printed, or the error's text.
async fn run(ctx: &SessionContext, sql: &str) -> Result<String, String> {
    let df = analyst_sql(ctx, sql).await.map_err(|e| e.to_string())?;
    let batches = df.collect().await.map_err(|e| e.to_string())?;
    Ok(pretty_format_batches(&batches).unwrap().to_string())
}

/// What the analyst sees of `t`'s schema: `DESCRIBE t` and `information_schema.columns`.
async fn shown_schema(dir: &Path, table: &str) -> String {
    let ctx = session(dir, table).await;
    let mut shown = String::new();
    for sql in [
        "DESCRIBE t",
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns \
         WHERE table_name = 't' ORDER BY ordinal_position",
    ] {
        shown.push_str(&run(&ctx, sql).await.unwrap());
        shown.push('\n');
    }
    shown
}

/// The error `Owner::open` gives for table `t` declared by `table` in `dir`.
async fn refused(dir: &Path, table: &str) -> String {
    let err = Owner::open(config(dir, table))
        .await
        .expect_err("opened a table whose schema would come from its rows");
    datafusion_dp::cli::one_line_error(&err)
}

const NDJSON: &str = "{\"patient_id\": 1, \"region\": \"north\", \"outcome\": true}\n\
                      {\"patient_id\": 2, \"region\": \"south\", \"outcome\": false}\n\
                      {\"patient_id\": 3, \"region\": \"north\", \"outcome\": true}\n";

#[tokio::test]
async fn a_field_in_one_persons_ndjson_record_is_not_a_column() {
    let person = "{\"patient_id\": 4, \"region\": \"south\", \"outcome\": false, \
                  \"diagnosis\": \"rare\", \"score\": 1.5}\n";
    let without = dir_with("ndjson-without", &[("t.json", NDJSON)]);
    let with = dir_with("ndjson-with", &[("t.json", &format!("{NDJSON}{person}"))]);
    let table = "location = \"t.json\"\nunit = \"patient_id\"\n\
                 columns = [\"patient_id BIGINT\", \"region VARCHAR\", \"outcome BOOLEAN\"]";
    let shown = shown_schema(&without, table).await;
    assert_eq!(shown, shown_schema(&with, table).await);
    assert!(
        shown.contains("patient_id") && shown.contains("Int64") && !shown.contains("diagnosis"),
        "{shown}"
    );
    // The declared columns are read; the undeclared field is ignored.
    let ctx = session(&with, table).await;
    let counted = run(&ctx, "SELECT dp_count(patient_id, 1.0) AS n FROM t").await;
    assert!(counted.is_ok(), "{counted:?}");
}

const CSV: &str = "patient_id,region,score\n1,north,3\n2,south,4\n3,north,5\n";

#[tokio::test]
async fn one_persons_csv_value_does_not_change_a_column_type() {
    let without = dir_with("csv-without", &[("t.csv", CSV)]);
    let float = dir_with("csv-float", &[("t.csv", &format!("{CSV}4,south,1.5\n"))]);
    let text = dir_with("csv-text", &[("t.csv", &format!("{CSV}4,south,abc\n"))]);
    let table = "location = \"t.csv\"\nunit = \"patient_id\"\n\
                 columns = [\"patient_id BIGINT\", \"region VARCHAR\", \"score BIGINT\"]";
    let shown = shown_schema(&without, table).await;
    assert!(
        shown.contains("score") && shown.contains("Int64"),
        "{shown}"
    );
    assert_eq!(shown, shown_schema(&float, table).await, "1.5");
    assert_eq!(shown, shown_schema(&text, table).await, "abc");

    // The residual: a value that does not parse as its declared type fails the query that
    // reads its column (DataFusion's CSV reader has no NULL-on-error setting); the error's text
    // is withheld, its occurrence is not (docs/privacy-analysis.md).
    let ctx = session(&text, table).await;
    let counted = run(&ctx, "SELECT dp_count(patient_id, 1.0) AS n FROM t").await;
    assert!(counted.is_ok(), "another column parses: {counted:?}");
    let summed = run(&ctx, "SELECT dp_count(score, 1.0) AS n FROM t").await;
    let error = summed.expect_err("abc is not a BIGINT");
    assert!(
        error.contains("withheld") && !error.contains("abc"),
        "{error}"
    );
}

#[tokio::test]
async fn a_hive_partition_of_one_person_does_not_change_the_schema() {
    let north = "{\"patient_id\": 1, \"outcome\": true}\n{\"patient_id\": 3, \"outcome\": true}\n";
    let south = "{\"patient_id\": 2, \"outcome\": false}\n";
    // Patient 9 is the only one in region atlantis, with a field of their own.
    let atlantis = "{\"patient_id\": 9, \"outcome\": true, \"diagnosis\": \"rare\"}\n";
    let layout = [
        ("t/region=north/part-0.json", north),
        ("t/region=south/part-0.json", south),
    ];
    let without = dir_with("hive-without", &layout);
    let mut with_person = layout.to_vec();
    with_person.push(("t/region=atlantis/part-0.json", atlantis));
    let with = dir_with("hive-with", &with_person);
    let table = "location = \"t\"\nformat = \"json\"\nunit = \"patient_id\"\n\
                 columns = [\"patient_id BIGINT\", \"outcome BOOLEAN\"]\n\
                 partition_columns = [\"region VARCHAR\"]";
    let shown = shown_schema(&without, table).await;
    assert_eq!(shown, shown_schema(&with, table).await);
    assert!(
        shown.contains("region") && shown.contains("Utf8") && !shown.contains("Dictionary"),
        "{shown}"
    );
    // The partition column is read from the directories, with its declared type.
    let ctx = session(&without, table).await;
    let counted = run(
        &ctx,
        "SELECT dp_count(patient_id, 1.0) AS n FROM t WHERE region = 'north'",
    )
    .await;
    assert!(counted.is_ok(), "{counted:?}");

    // A directory value that does not parse as its declared type is refused at start (a query
    // listing it would fail with the value in the error), without the value.
    let mut odd = layout.to_vec();
    odd.push(("t/region=atlantis/part-0.json", atlantis));
    let odd = dir_with("hive-odd", &odd);
    let line = refused(
        &odd,
        "location = \"t\"\nformat = \"json\"\nunit = \"patient_id\"\n\
         columns = [\"patient_id BIGINT\"]\npartition_columns = [\"region INT\"]",
    )
    .await;
    assert!(
        line.contains("partition column 'region' does not parse") && !line.contains("atlantis"),
        "{line}"
    );

    // A hive layout without declared partition columns is refused.
    let line = refused(
        &without,
        "location = \"t\"\nformat = \"json\"\nunit = \"patient_id\"\n\
         columns = [\"patient_id BIGINT\", \"outcome BOOLEAN\"]",
    )
    .await;
    assert!(
        line.contains("table t (") && line.contains("partition_columns = [\"region TYPE\"]"),
        "{line}"
    );
}

#[tokio::test]
async fn undeclared_csv_or_ndjson_is_refused_at_start() {
    let dir = dir_with("undeclared", &[("t.csv", CSV), ("t.json", NDJSON)]);
    for (file, kind) in [("t.csv", "CSV"), ("t.json", "NDJSON")] {
        let line = refused(
            &dir,
            &format!("location = \"{file}\"\nunit = \"patient_id\""),
        )
        .await;
        assert!(
            line.starts_with(&format!("table t ({}", dir.join(file).display()))
                && line.contains(&format!("a {kind} table's column types"))
                && line.contains("columns = [\"NAME TYPE\", ...]"),
            "{line}"
        );
    }
    // CSV columns are read by position: declared in another order than the header's, refused.
    let line = refused(
        &dir,
        "location = \"t.csv\"\nunit = \"patient_id\"\n\
         columns = [\"region VARCHAR\", \"patient_id BIGINT\", \"score BIGINT\"]",
    )
    .await;
    assert!(
        line.contains("does not name the declared columns in order"),
        "{line}"
    );
    // ... in every file below the location (an analyst may have subdirectories read).
    let nested = dir_with(
        "nested",
        &[
            ("t/a.csv", CSV),
            ("t/old/b.csv", "region,patient_id,score\nnorth,5,1\n"),
        ],
    );
    let line = refused(
        &nested,
        "location = \"t\"\nunit = \"patient_id\"\n\
         columns = [\"patient_id BIGINT\", \"region VARCHAR\", \"score BIGINT\"]",
    )
    .await;
    assert!(
        line.contains("does not name the declared columns in order"),
        "{line}"
    );
    // Protected by rows (the default) too; a public table's schema may still be inferred.
    assert!(refused(&dir, "location = \"t.csv\"")
        .await
        .contains("declare its columns"));
    let shown = shown_schema(&dir, "location = \"t.csv\"\nprotection = \"public\"").await;
    assert!(shown.contains("score"), "{shown}");

    // The locked shell says so in one line, before the analyst's first statement.
    let config = dir.join("owner.toml");
    std::fs::write(
        &config,
        "[[table]]\nname = \"t\"\nlocation = \"t.csv\"\nunit = \"patient_id\"\n\n\
         [[analyst]]\nname = \"a\"\nepsilon_budget = 1\nledger = \"a.ledger\"\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_dpsql"))
        .args(["--config", config.to_str().unwrap(), "-c", "DESCRIBE t"])
        .stdin(Stdio::null())
        .output()
        .expect("run dpsql");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(output.stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: table t (") && stderr.contains("declare its columns"),
        "{stderr}"
    );
}

/// Writes `select` (plain DataFusion, the owner's own tooling) to the Parquet file `path`.
async fn write_parquet(path: &Path, select: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let ctx = SessionContext::new();
    ctx.sql(&format!(
        "COPY ({select}) TO '{}' STORED AS PARQUET",
        path.display()
    ))
    .await
    .unwrap()
    .collect()
    .await
    .unwrap();
}

#[tokio::test]
async fn parquet_files_with_different_schemas_need_declared_columns() {
    let dir = dir_with("parquet", &[]);
    let rows = "SELECT * FROM (VALUES (1, true), (2, false)) AS v(patient_id, outcome)";
    write_parquet(&dir.join("same/part-0.parquet"), rows).await;
    write_parquet(&dir.join("same/part-1.parquet"), rows).await;
    write_parquet(&dir.join("differ/part-0.parquet"), rows).await;
    // One person's file with a column of their own.
    write_parquet(
        &dir.join("differ/part-1.parquet"),
        "SELECT 9 AS patient_id, true AS outcome, 'rare' AS diagnosis",
    )
    .await;

    // Files that agree: their own schema (the owner's metadata) is the table's.
    let same = shown_schema(&dir, "location = \"same\"\nunit = \"patient_id\"").await;
    assert!(
        same.contains("outcome") && same.contains("Boolean"),
        "{same}"
    );
    // Files that differ: refused without declared columns (a merge would show `diagnosis`) ...
    let line = refused(&dir, "location = \"differ\"\nunit = \"patient_id\"").await;
    assert!(
        line.contains("table t (")
            && line.contains("Parquet files do not all have the same columns")
            && !line.contains("diagnosis")
            && !line.contains("part-1"),
        "{line}"
    );
    // ... and read as the declared columns with them: the same schema as without the person.
    let declared = "unit = \"patient_id\"\ncolumns = [\"patient_id BIGINT\", \"outcome BOOLEAN\"]";
    let shown = shown_schema(&dir, &format!("location = \"differ\"\n{declared}")).await;
    assert_eq!(
        shown,
        shown_schema(&dir, &format!("location = \"same\"\n{declared}")).await
    );
    assert!(!shown.contains("diagnosis"), "{shown}");
}

/// `in_memory = true`: the rows are read once when the tables are opened, with the declared
/// schema; the analyst sees the same schema and the same rows as from the file, and a file
/// changed afterwards is not seen (the documented behaviour). A value that does not parse fails
/// the owner's start instead of an analyst's query.
#[tokio::test]
async fn an_in_memory_table_is_read_once_with_the_declared_schema() {
    let dir = dir_with("in-memory", &[("t.csv", CSV)]);
    let table = "location = \"t.csv\"\nunit = \"patient_id\"\n\
                 columns = [\"patient_id BIGINT\", \"region VARCHAR\", \"score BIGINT\"]";
    let in_memory = format!("{table}\nin_memory = true");
    assert_eq!(
        shown_schema(&dir, table).await,
        shown_schema(&dir, &in_memory).await
    );
    // The rows, exactly, through a public declaration of the same file.
    let public = "location = \"t.csv\"\nprotection = \"public\"\n\
                  columns = [\"patient_id BIGINT\", \"region VARCHAR\", \"score BIGINT\"]";
    let rows = "SELECT * FROM t ORDER BY patient_id";
    let from_file = session(&dir, public).await;
    let from_memory = session(&dir, &format!("{public}\nin_memory = true")).await;
    let read = run(&from_file, rows).await.unwrap();
    assert!(read.contains("| 3          | north  | 5     |"), "{read}");
    assert_eq!(read, run(&from_memory, rows).await.unwrap());

    std::fs::write(dir.join("t.csv"), format!("{CSV}4,south,7\n")).unwrap();
    assert!(run(&from_file, rows).await.unwrap().contains("| 4 "));
    assert_eq!(read, run(&from_memory, rows).await.unwrap(), "read once");

    std::fs::write(dir.join("t.csv"), format!("{CSV}4,south,abc\n")).unwrap();
    // The owner's start fails, naming the table and the value (the owner may see it).
    let error = refused(&dir, &in_memory).await;
    assert!(
        error.contains("table t (") && error.contains("'abc'"),
        "{error}"
    );
}

/// The parse count of `t` in `ctx`, a table `Owner::open` keeps parsed, once no parse of it
/// is under way (they run in the background; waits up to 30 s).
fn parses(ctx: &SessionContext) -> usize {
    let provider = futures::executor::block_on(ctx.table_provider("t")).unwrap();
    let table = provider
        .downcast_ref::<datafusion_dp::owner::parsed::ParsedFiles>()
        .expect("a CSV or NDJSON table is parsed once per version of its files");
    let started = std::time::Instant::now();
    while table.parsing() {
        assert!(
            started.elapsed().as_secs() < 30,
            "a parse of a few rows for 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    table.parses()
}

/// The first query planned over a small public text table parses it and reads the copy (its
/// exact row count lets a join broadcast it); over a protected one it reads the files, and the
/// copy is parsed in the background for the queries after it (its parse's time, which grows
/// with one person's rows, stays out of the query's planning).
#[tokio::test]
async fn a_public_text_table_is_parsed_by_the_first_plan_that_reads_it() {
    let columns = "columns = [\"patient_id BIGINT\", \"region VARCHAR\", \"score BIGINT\"]";
    for (protection, sql, parsed) in [
        ("protection = \"public\"", "SELECT count(*) FROM t", true),
        (
            "unit = \"patient_id\"",
            "SELECT dp_count(patient_id, 1.0) FROM t",
            false,
        ),
    ] {
        let dir = dir_with(&format!("first-plan-{parsed}"), &[("t.csv", CSV)]);
        let ctx = session(
            &dir,
            &format!("location = \"t.csv\"\n{protection}\n{columns}"),
        )
        .await;
        let plan = analyst_sql(&ctx, sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let text = datafusion::physical_plan::displayable(plan.as_ref())
            .indent(false)
            .to_string();
        assert_eq!(
            text.contains("file_type=csv"),
            !parsed,
            "{protection}: the first plan scans the files: {text}"
        );
        let provider = ctx.table_provider("t").await.unwrap();
        let table = provider
            .downcast_ref::<datafusion_dp::owner::parsed::ParsedFiles>()
            .unwrap();
        if parsed {
            assert_eq!(
                table.parses(),
                1,
                "parsed while the first query was planned"
            );
            assert!(!table.parsing());
        }
    }
}

/// A small CSV or NDJSON table is parsed once per version of its files (a protected one in the
/// background after the first query that reads that version, which scans the files; a public
/// one by that query's plan: see the test above): two queries parse
/// it once and read the same rows as a scan of the files (a locked cluster's `open_files`); a
/// file rewritten is read by the next query; a value that does not parse fails the query
/// with the same error as the scan of the files, and nothing of it is kept. A hive layout's
/// partition filter gives the same rows either way.
#[tokio::test]
async fn a_small_text_table_is_parsed_once_per_version_of_its_files() {
    let ndjson_rows = "{\"patient_id\": 1, \"region\": \"north\", \"score\": 3}\n\
                       {\"patient_id\": 2, \"region\": \"south\", \"score\": 4}\n\
                       {\"patient_id\": 3, \"region\": \"north\", \"score\": 5}\n";
    let columns = "columns = [\"patient_id BIGINT\", \"region VARCHAR\", \"score BIGINT\"]";
    for (file, text, more, bad) in [
        ("t.csv", CSV, "4,south,7\n", "4,south,abc\n"),
        (
            "t.ndjson",
            ndjson_rows,
            "{\"patient_id\": 4, \"region\": \"south\", \"score\": 7}\n",
            "{\"patient_id\": 4, \"region\": \"south\", \"score\": \"abc\"}\n",
        ),
    ] {
        let dir = dir_with(&format!("parsed-{file}"), &[(file, text)]);
        let table = format!("location = \"{file}\"\nprotection = \"public\"\n{columns}");
        let cfg = config(&dir, &table);
        let analyst = cfg.analyst("a").unwrap().clone();
        let files = Owner::open_files(cfg.clone()).await.unwrap();
        let files = files.analyst_session(&analyst).unwrap();
        let parsed = session(&dir, &table).await;
        let rows = "SELECT * FROM t ORDER BY patient_id";
        let read = run(&files, rows).await.unwrap();
        assert!(read.contains("| 3          | north  | 5     |"), "{read}");
        assert_eq!(
            parses(&parsed),
            0,
            "{file}: nothing parsed before the first scan"
        );
        assert_eq!(run(&parsed, rows).await.unwrap(), read, "{file}");
        assert_eq!(parses(&parsed), 1, "{file}: parsed after the first scan");
        // This one reads the copy.
        assert_eq!(
            run(&parsed, "SELECT sum(score) FROM t WHERE region = 'north'")
                .await
                .unwrap(),
            run(&files, "SELECT sum(score) FROM t WHERE region = 'north'")
                .await
                .unwrap()
        );
        assert_eq!(parses(&parsed), 1, "{file}: two queries, one parse");

        std::fs::write(dir.join(file), format!("{text}{more}")).unwrap();
        let more_rows = run(&parsed, rows).await.unwrap();
        assert!(
            more_rows.contains("| 4          | south  | 7     |"),
            "{more_rows}"
        );
        assert_eq!(more_rows, run(&files, rows).await.unwrap());
        assert_eq!(
            parses(&parsed),
            2,
            "{file}: the rewritten file parsed again"
        );

        std::fs::write(dir.join(file), format!("{text}{bad}")).unwrap();
        let error = run(&parsed, rows).await.unwrap_err();
        assert_eq!(error, run(&files, rows).await.unwrap_err(), "{file}");
        assert_eq!(parses(&parsed), 2, "{file}: a parse that fails is not kept");
        std::fs::write(dir.join(file), text).unwrap();
        assert_eq!(run(&parsed, rows).await.unwrap(), read, "{file}");
        assert_eq!(parses(&parsed), 3);
    }

    // A hive layout: the partition filter reaches the scan of the files and stays in the plan
    // over the parsed copy.
    let dir = dir_with(
        "parsed-hive",
        &[
            ("t/year=2024/a.csv", "patient_id,region\n1,north\n2,south\n"),
            ("t/year=2025/b.csv", "patient_id,region\n3,north\n"),
        ],
    );
    let table = "location = \"t\"\nformat = \"csv\"\nprotection = \"public\"\n\
                 columns = [\"patient_id BIGINT\", \"region VARCHAR\"]\n\
                 partition_columns = [\"year INT\"]";
    let cfg = config(&dir, table);
    let analyst = cfg.analyst("a").unwrap().clone();
    let files = Owner::open_files(cfg).await.unwrap();
    let files = files.analyst_session(&analyst).unwrap();
    let parsed = session(&dir, table).await;
    // The first scan reads the files and starts the parse; the queries below read the copy.
    run(&parsed, "SELECT count(*) FROM t").await.unwrap();
    assert_eq!(parses(&parsed), 1);
    for sql in [
        "SELECT patient_id, year FROM t WHERE year = 2025",
        "SELECT patient_id, year FROM t WHERE year < 2025 ORDER BY patient_id",
    ] {
        let read = run(&files, sql).await.unwrap();
        assert!(read.contains("| 2024") || read.contains("| 2025"), "{read}");
        assert_eq!(run(&parsed, sql).await.unwrap(), read, "{sql}");
    }
    assert_eq!(parses(&parsed), 1);
}
