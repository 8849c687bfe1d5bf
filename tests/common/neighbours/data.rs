//! The neighbouring datasets: a base population of people and its neighbours (one person
//! added, removed or replaced), written as the data owner stores tables (CSV, NDJSON, Parquet,
//! hive-partitioned Parquet) with an owner configuration (`dpsql --config`, `dp-server`) for
//! each, opened through `datafusion_dp::owner` exactly as analysts' sessions are built.

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::error::Result;
use datafusion_dp::owner::{Owner, OwnerConfig, SessionBudget};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// People in the base population; ids `1..=BASE_PEOPLE`.
pub const BASE_PEOPLE: i64 = 60;
/// The existing person the remove and replace neighbours change (several visits).
pub const TARGET: i64 = 3;
/// The extreme person's id (added, or replacing [`TARGET`]).
pub const EXTREME: i64 = 9_000_000_000_000_000_007;
/// 9999-12-31 as days since 1970-01-01.
const FAR_DATE: i32 = 2_932_896;
const REGIONS: [&str; 4] = ["north", "south", "east", "west"];
const TAGS: [&str; 5] = ["x", "y", "z", "a", "b"];

/// One row of `visits` (protected by `patient_id`).
#[derive(Clone, Debug)]
pub struct Visit {
    pub patient_id: i64,
    pub region: String,
    pub outcome: Option<bool>,
    pub exposed: Option<bool>,
    pub tags: Option<String>,
    pub visit_date: Option<i32>,
    pub score: Option<f64>,
    pub note: Option<String>,
}

/// One row of `t` (protected row by row: each row is a person).
#[derive(Clone, Debug)]
pub struct TRow {
    pub id: i64,
    pub x: Option<i64>,
    pub outcome: Option<bool>,
    pub exposed: Option<bool>,
    pub g: Option<String>,
}

/// One person's rows in every protected table.
#[derive(Clone, Debug)]
pub struct Person {
    pub visits: Vec<Visit>,
    pub t: TRow,
}

/// SplitMix64: the data's own small deterministic generator.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// An ordinary person `id`: 1 to 4 visits in 2020-2024.
fn ordinary(id: i64, rng: &mut Rng) -> Person {
    let visits = (0..1 + rng.below(4))
        .map(|_| Visit {
            patient_id: id,
            region: REGIONS[rng.below(4)].to_string(),
            outcome: Some(rng.chance(0.3)),
            exposed: Some(rng.chance(0.5)),
            tags: Some(TAGS[rng.below(5)].to_string()),
            visit_date: Some(18_262 + rng.below(1_800) as i32),
            score: Some(rng.below(100) as f64),
            note: None,
        })
        .collect();
    Person {
        visits,
        t: TRow {
            id,
            x: Some(rng.below(10) as i64),
            outcome: Some(rng.chance(0.4)),
            exposed: Some(rng.chance(0.5)),
            g: Some(["a", "b"][rng.below(2)].to_string()),
        },
    }
}

/// The extreme person: a large id, a region no one else has, a far date, NULLs, a long free
/// text note (a column NULL for everyone else), a score of 1e300 (the others' are integers).
pub fn extreme() -> Person {
    let long = "\u{e9}tude ".repeat(1_500);
    let visit = |region: &str, date: Option<i32>, score: Option<f64>, note: Option<String>| Visit {
        patient_id: EXTREME,
        region: region.to_string(),
        outcome: None,
        exposed: Some(true),
        tags: None,
        visit_date: date,
        score,
        note,
    };
    Person {
        visits: vec![
            visit("zz_far", Some(FAR_DATE), Some(1e300), Some(long.clone())),
            visit("north", None, None, None),
            visit("zz_far", Some(-719_162), Some(-0.5), Some("x".into())),
        ],
        t: TRow {
            id: EXTREME,
            x: Some(i64::MIN),
            outcome: None,
            exposed: Some(true),
            g: Some(long),
        },
    }
}

/// The base population (fixed seed).
pub fn base() -> Vec<Person> {
    let mut rng = Rng(27);
    (1..=BASE_PEOPLE).map(|id| ordinary(id, &mut rng)).collect()
}

/// How D' differs from D (the base).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Neighbour {
    /// The extreme person added.
    Add,
    /// Person [`TARGET`] removed.
    Remove,
    /// Person [`TARGET`] replaced by the extreme person.
    Replace,
}

pub const NEIGHBOURS: [Neighbour; 3] = [Neighbour::Add, Neighbour::Remove, Neighbour::Replace];

impl Neighbour {
    pub fn name(self) -> &'static str {
        match self {
            Neighbour::Add => "add",
            Neighbour::Remove => "remove",
            Neighbour::Replace => "replace",
        }
    }

    pub fn apply(self, base: &[Person]) -> Vec<Person> {
        let mut people: Vec<Person> = base.to_vec();
        match self {
            Neighbour::Add => people.push(extreme()),
            Neighbour::Remove => people.retain(|p| p.t.id != TARGET),
            Neighbour::Replace => {
                let at = people.iter().position(|p| p.t.id == TARGET).unwrap();
                people[at] = extreme();
            }
        }
        people
    }
}

/// How the owner stores the tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Csv,
    Ndjson,
    Parquet,
    /// Parquet with `visits` hive-partitioned by `region` (`visits/region=north/...`).
    HiveParquet,
    /// Parquet written by a tool that marks a column NOT NULL when none of its values is
    /// NULL (as arrow-rs `RecordBatch::try_from_iter` does): the file's schema then depends
    /// on the rows.
    ParquetDataNullability,
    /// Parquet read once when the tables are opened and served from memory
    /// (`in_memory = true`): a `MemTable`, whose statistics are exact.
    InMemory,
}

pub const LAYOUTS: [Layout; 6] = [
    Layout::Csv,
    Layout::Ndjson,
    Layout::Parquet,
    Layout::HiveParquet,
    Layout::ParquetDataNullability,
    Layout::InMemory,
];

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Csv => "csv",
            Layout::Ndjson => "ndjson",
            Layout::Parquet => "parquet",
            Layout::HiveParquet => "hive-parquet",
            Layout::ParquetDataNullability => "parquet-data-nullability",
            Layout::InMemory => "in-memory",
        }
    }

    /// The owner's `[options]`: two layouts declare the regions public GROUP BY keys, the
    /// others leave grouped queries to private group selection.
    fn options(self) -> &'static str {
        match self {
            Layout::Ndjson | Layout::HiveParquet => "public_groups = \"regions\"\n",
            Layout::Csv | Layout::Parquet | Layout::ParquetDataNullability | Layout::InMemory => {
                "selection_epsilon = 1.0\nselection_delta = 1e-3\n"
            }
        }
    }
}

/// A batch whose columns are all nullable: the owner's schema, not one inferred from the
/// rows (a writer that marks a column NOT NULL because no row has a NULL would put one
/// person's NULL in the file's schema, and DESCRIBE shows it).
fn nullable<const N: usize>(
    columns: [(&str, ArrayRef); N],
) -> datafusion::arrow::error::Result<RecordBatch> {
    RecordBatch::try_from_iter_with_nullable(columns.map(|(n, a)| (n, a, true)))
}

fn visits_batch(people: &[Person]) -> RecordBatch {
    let v: Vec<&Visit> = people.iter().flat_map(|p| &p.visits).collect();
    nullable([
        (
            "patient_id",
            Arc::new(Int64Array::from_iter_values(v.iter().map(|r| r.patient_id))) as ArrayRef,
        ),
        (
            "region",
            Arc::new(StringArray::from_iter_values(v.iter().map(|r| &r.region))) as ArrayRef,
        ),
        (
            "outcome",
            Arc::new(BooleanArray::from(
                v.iter().map(|r| r.outcome).collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
        (
            "exposed",
            Arc::new(BooleanArray::from(
                v.iter().map(|r| r.exposed).collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
        (
            "tags",
            Arc::new(StringArray::from_iter(v.iter().map(|r| r.tags.as_deref()))) as ArrayRef,
        ),
        (
            "visit_date",
            Arc::new(Date32Array::from_iter(v.iter().map(|r| r.visit_date))) as ArrayRef,
        ),
        (
            "score",
            Arc::new(Float64Array::from_iter(v.iter().map(|r| r.score))) as ArrayRef,
        ),
        (
            "note",
            Arc::new(StringArray::from_iter(v.iter().map(|r| r.note.as_deref()))) as ArrayRef,
        ),
    ])
    .unwrap()
}

fn t_batch(people: &[Person]) -> RecordBatch {
    let t: Vec<&TRow> = people.iter().map(|p| &p.t).collect();
    nullable([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(t.iter().map(|r| r.id))) as ArrayRef,
        ),
        (
            "x",
            Arc::new(Int64Array::from_iter(t.iter().map(|r| r.x))) as ArrayRef,
        ),
        (
            "outcome",
            Arc::new(BooleanArray::from(
                t.iter().map(|r| r.outcome).collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
        (
            "exposed",
            Arc::new(BooleanArray::from(
                t.iter().map(|r| r.exposed).collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
        (
            "g",
            Arc::new(StringArray::from_iter(t.iter().map(|r| r.g.as_deref()))) as ArrayRef,
        ),
    ])
    .unwrap()
}

fn lookup_batch() -> RecordBatch {
    RecordBatch::try_from_iter([
        (
            "k",
            Arc::new(StringArray::from_iter_values(["a", "a", "b", "x", "y"])) as ArrayRef,
        ),
        (
            "v",
            Arc::new(Int64Array::from_iter_values([1, 2, 3, 4, 5])) as ArrayRef,
        ),
    ])
    .unwrap()
}

fn regions_batch() -> RecordBatch {
    RecordBatch::try_from_iter([(
        "region",
        Arc::new(StringArray::from_iter_values(REGIONS)) as ArrayRef,
    )])
    .unwrap()
}

fn sink_batch() -> RecordBatch {
    RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from_iter_values([0])) as ArrayRef)])
        .unwrap()
}

/// A cell as CSV text (empty for NULL); numbers that are integers are written as integers.
fn cell(batch: &RecordBatch, column: usize, row: usize) -> Option<String> {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{DataType, Date32Type, Float64Type, Int64Type};
    let array = batch.column(column);
    if array.is_null(row) {
        return None;
    }
    Some(match array.data_type() {
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row).to_string(),
        DataType::Float64 => {
            let v = array.as_primitive::<Float64Type>().value(row);
            if v.fract() == 0.0 && v.abs() < 1e15 {
                format!("{}", v as i64)
            } else {
                format!("{v:e}")
            }
        }
        DataType::Boolean => array.as_boolean().value(row).to_string(),
        DataType::Utf8 => array.as_string::<i32>().value(row).to_string(),
        DataType::Date32 => {
            let days = array.as_primitive::<Date32Type>().value(row);
            datafusion::arrow::temporal_conversions::date32_to_datetime(days)
                .unwrap()
                .date()
                .to_string()
        }
        other => panic!("no text form for {other}"),
    })
}

fn write_csv(batch: &RecordBatch, path: &Path) {
    let schema = batch.schema();
    let mut out = schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(",");
    out.push('\n');
    for row in 0..batch.num_rows() {
        let cells: Vec<String> = (0..batch.num_columns())
            .map(|c| match cell(batch, c, row) {
                None => String::new(),
                Some(s) if s.contains([',', '"', '\n']) => {
                    format!("\"{}\"", s.replace('"', "\"\""))
                }
                Some(s) => s,
            })
            .collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

/// NDJSON with NULL fields left out of their record (as most JSON producers do).
fn write_ndjson(batch: &RecordBatch, path: &Path) {
    use datafusion::arrow::datatypes::DataType;
    let schema = batch.schema();
    let mut out = String::new();
    for row in 0..batch.num_rows() {
        let mut fields = Vec::new();
        for (c, field) in schema.fields().iter().enumerate() {
            let Some(text) = cell(batch, c, row) else {
                continue;
            };
            let value = match field.data_type() {
                DataType::Int64 | DataType::Float64 | DataType::Boolean => text,
                _ => format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\"")),
            };
            fields.push(format!("\"{}\":{value}", field.name()));
        }
        out.push('{');
        out.push_str(&fields.join(","));
        out.push_str("}\n");
    }
    std::fs::write(path, out).unwrap();
}

/// `batch` with each column nullable only if it holds a NULL.
fn nullability_from_data(batch: &RecordBatch) -> RecordBatch {
    use datafusion::arrow::array::Array;
    use datafusion::arrow::datatypes::{Field, Schema};
    let fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(f, c)| f.as_ref().clone().with_nullable(c.null_count() > 0))
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), batch.columns().to_vec()).unwrap()
}

fn write_parquet(batch: &RecordBatch, path: &Path) {
    let file = std::fs::File::create(path).unwrap();
    let mut writer =
        datafusion::parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
}

/// `visits` partitioned by region: one directory per region value present.
fn write_hive(batch: &RecordBatch, dir: &Path) {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::compute::filter_record_batch;
    let regions = batch.column(1).as_string::<i32>();
    let mut values: Vec<&str> = regions.iter().flatten().collect();
    values.sort();
    values.dedup();
    for value in values {
        let mask = BooleanArray::from(
            regions
                .iter()
                .map(|r| Some(r == Some(value)))
                .collect::<Vec<_>>(),
        );
        let part = filter_record_batch(batch, &mask).unwrap();
        let part = part.project(&[0, 2, 3, 4, 5, 6, 7]).unwrap();
        let sub = dir.join(format!("region={value}"));
        std::fs::create_dir_all(&sub).unwrap();
        write_parquet(&part, &sub.join("part-0.parquet"));
    }
}

/// The tables of `people` in `layout` under `dir`, and the owner's configuration naming them.
pub fn write_dataset(people: &[Person], layout: Layout, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let tables = [
        ("visits", visits_batch(people), "unit = \"patient_id\""),
        ("t", t_batch(people), "protection = \"rows\""),
        ("lookup", lookup_batch(), "protection = \"public\""),
        ("regions", regions_batch(), "protection = \"public\""),
        ("sink", sink_batch(), "protection = \"public\""),
    ];
    let mut config = String::new();
    for (name, batch, protection) in &tables {
        let location = match layout {
            Layout::Csv => {
                let path = dir.join(format!("{name}.csv"));
                write_csv(batch, &path);
                path
            }
            Layout::Ndjson => {
                let path = dir.join(format!("{name}.json"));
                write_ndjson(batch, &path);
                path
            }
            Layout::Parquet | Layout::InMemory => {
                let path = dir.join(format!("{name}.parquet"));
                write_parquet(batch, &path);
                path
            }
            Layout::ParquetDataNullability => {
                let path = dir.join(format!("{name}.parquet"));
                write_parquet(&nullability_from_data(batch), &path);
                path
            }
            Layout::HiveParquet => {
                let table_dir = dir.join(name);
                std::fs::create_dir_all(&table_dir).unwrap();
                if *name == "visits" {
                    write_hive(batch, &table_dir);
                } else {
                    write_parquet(batch, &table_dir.join("part-0.parquet"));
                }
                table_dir
            }
        };
        // The owner declares each table's schema (the same for D and D'); the layout with
        // the writer's data-derived nullability keeps its Parquet files' own schema.
        let declared = match layout {
            Layout::ParquetDataNullability => String::new(),
            Layout::HiveParquet if *name == "visits" => format!(
                "{}partition_columns = [\"region VARCHAR\"]\n",
                columns_line(batch, &["region"])
            ),
            Layout::InMemory => format!("{}in_memory = true\n", columns_line(batch, &[])),
            _ => columns_line(batch, &[]),
        };
        config.push_str(&format!(
            "[[table]]\nname = \"{name}\"\nlocation = \"{}\"\n{protection}\n{declared}\n",
            location.display()
        ));
    }
    config.push_str(&format!("[options]\n{}\n", layout.options()));
    config.push_str(
        "[[analyst]]\nname = \"analyst\"\nepsilon_budget = 100000\ndelta_budget = 0.01\nledger = \"analyst.ledger\"\n",
    );
    let path = dir.join("owner.toml");
    std::fs::write(&path, config).unwrap();
    path
}

/// The owner's `columns = [...]` line for `batch`'s fields (SQL types), less `without`.
fn columns_line(batch: &RecordBatch, without: &[&str]) -> String {
    use datafusion::arrow::datatypes::DataType;
    let columns: Vec<String> = batch
        .schema()
        .fields()
        .iter()
        .filter(|f| !without.contains(&f.name().as_str()))
        .map(|f| {
            let sql = match f.data_type() {
                DataType::Int64 => "BIGINT",
                DataType::Int32 => "INT",
                DataType::Float64 => "DOUBLE",
                DataType::Boolean => "BOOLEAN",
                DataType::Date32 => "DATE",
                DataType::Utf8 => "VARCHAR",
                other => panic!("no SQL type for {other}"),
            };
            format!("\"{} {sql}\"", f.name())
        })
        .collect();
    format!("columns = [{}]\n", columns.join(", "))
}

/// One dataset opened by the owner, from which fresh locked sessions are made.
pub struct Dataset {
    pub owner: Owner,
    /// The directory of its files: replaced by `<DATA>` in everything observed (D and D'
    /// live in different directories only because the harness keeps both).
    pub dir: String,
}

impl Dataset {
    pub async fn open(config: &Path) -> Result<Self> {
        let owner = Owner::open(OwnerConfig::load(config)?).await?;
        let dir = config.parent().unwrap().to_string_lossy().into_owned();
        Ok(Self { owner, dir })
    }

    /// A fresh locked session, as `dpsql --config` and `dp-server` hand it to the analyst,
    /// spending `ledger`: removed first, so every session starts from the same (empty)
    /// history at the same path.
    pub fn session(&self, ledger: &Path) -> Result<datafusion::prelude::SessionContext> {
        let _ = std::fs::remove_file(ledger);
        let analyst = &self.owner.config().analysts[0];
        self.owner.locked_session(&SessionBudget {
            budget: analyst.budget,
            ledger: ledger.to_string_lossy().into_owned(),
        })
    }
}
