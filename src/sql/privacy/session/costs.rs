//! The work each function does per row, declared for every function a locked session can call,
//! and the rule that refuses, over protected rows, the calls whose work would tell about one
//! person.
//!
//! The analyst sees how long a query takes. Output bytes per row and rows per person are
//! capped (`crate::sql::privacy::udf::total`, `public_fanout`), but CPU per row was not: an
//! edit distance of two capped strings (`levenshtein`, O(n·m)), or a regular expression compiled
//! from a row's values (`regexp_like(note, note)`), evaluated only on one person's rows (`CASE
//! WHEN patient_id = K THEN ... END`, or a `WHERE`), made the query take 9-15x longer exactly
//! when that person was in the table (issue 41). So every scalar, aggregate, window, table and
//! higher-order function a locked session resolves has a [`Cost`] in [`FUNCTION_COSTS`] (its
//! name as registered, aliases included, and its kind), read from DataFusion 55.2's
//! implementation rather than its name:
//!
//! - [`Cost::Constant`]: bounded work per row (`abs`, `now`, `random`; for an aggregate, O(1)
//!   per row added and per result);
//! - [`Cost::Linear`]: work linear in the bytes of its inputs (`upper`, `sha256`, `contains`);
//!   n log n counts as linear (`array_sort`: the log factor is at most 17 for the largest list
//!   a row may hold, 64 KiB, and it depends on the size only, never on which values);
//! - [`Cost::ConstantArgs`]: linear when the arguments at these positions are constants
//!   (literals after simplification), refused over protected rows otherwise, with the reason:
//!   the pattern and flags of the regular-expression functions (compiled per row otherwise),
//!   the needle of `strpos` (a naive scan from every position otherwise), the sizes of `repeat`
//!   and `lpad`, the delimiter `array_to_string` writes once per element;
//! - [`Cost::Collecting`]: an aggregate that keeps every row it is given and computes its result
//!   from all of them (`median`, `array_agg`): linear as an aggregate, but a window evaluates it
//!   once per row, so over protected rows it is a window only over the whole partition;
//! - [`Cost::Refused`]: superlinear whatever the arguments (`levenshtein`).
//!
//! [`refuse_costly_calls`] applies them: the planner rule calls it in a locked session and on a
//! locked cluster's scheduler, before anything is charged, on the plan as the analyst wrote it
//! (views inlined). Each expression of a plan node whose input reads a protected relation (and
//! each expression of a correlated subquery that reads such a node's columns) is checked; a
//! function not in the table is refused there too, so a function a later DataFusion adds is
//! refused over protected rows until it is classified here (the unit test fails first: it
//! compares the table with what a locked session registers). Operators are expressions, not
//! functions: `LIKE`, `ILIKE`, `SIMILAR TO` and the `~` family compile their pattern per row, so a
//! pattern that is not a constant is refused over protected rows too. Windows have costs of
//! their own (`check_window`): a sliding frame of an aggregate that cannot retract a row, a
//! collecting aggregate over a frame that moves with each row, `IGNORE NULLS` (a scan of the
//! frame per row). Functions over public relations only, and over the DP releases (an
//! aggregate's output), are not restricted.

use crate::sql::functions::aggregate::DpAggregate;
use crate::sql::privacy::udf::total::{operator_from_name, TryBinary, TryCastRows, TryFunction};
use arrow::datatypes::{Field, Schema};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_err, DFSchema, Result};
use datafusion::logical_expr::expr::{AggregateFunction, NullTreatment, WindowFunction};
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{
    AggregateUDF, Expr, ExprSchemable, LogicalPlan, Operator, TableScan, WindowFrameBound,
    WindowFrameUnits, WindowFunctionDefinition,
};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// What a function is, as a session registers it (one name can be several: `first_value` is an
/// aggregate and a window function, `range` a scalar and a table function).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Scalar,
    Aggregate,
    Window,
    Table,
    /// A function of a list and a lambda (`array_transform(list, x -> x + 1)`).
    HigherOrder,
}

/// How a function's work per row grows with its input (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    /// Bounded work per row, whatever the input (for an aggregate: per row added, and per
    /// result computed).
    Constant,
    /// Work linear in the bytes of its inputs (n log n included: module docs).
    Linear,
    /// Linear when the arguments at these positions (from 0) are constants; refused over
    /// protected rows otherwise, for this reason.
    ConstantArgs(&'static [usize], &'static str),
    /// An aggregate that keeps every row and computes its result from all of them: as a window
    /// over protected rows only over the whole partition. The arguments at these positions must
    /// be constants (DataFusion reads them as literals when it creates the accumulator).
    Collecting(&'static [usize]),
    /// Superlinear whatever the arguments: refused over protected rows, for this reason.
    Refused(&'static str),
}

use Cost::*;
use Kind::*;

/// Linear when its pattern and flags are constants (the regular-expression functions).
const PATTERN_AND_FLAGS: &[usize] = &[1, 2];
/// `repeat`, `lpad`, `rpad`, `array_repeat`, `array_resize`: the output size (second
/// argument) must be a constant; the output itself is capped per row (`total.rs`).
const SIZE: &[usize] = &[1];
/// `strpos`, `btrim` and friends, `array_has_all`/`_any`: the second argument is scanned for,
/// or against, once per byte or element of the first (a naive scan from each position, the
/// trimmed characters looked up in a list); a constant second argument makes that linear.
const SECOND: &[usize] = &[1];
/// `array_replace*(array, from, to)`: `to` is copied for every match, so the output is the
/// product of the number of matches and `to`'s size unless `to` is a constant.
const REPLACEMENT: &[usize] = &[2];
/// `array_to_string(array, delimiter, null_string)`: the delimiter (and the null string) is
/// written once per element: the product of the list's length and the delimiter's size unless
/// both are constants.
const DELIMITERS: &[usize] = &[1, 2];
/// `range`, `generate_series`: every argument sizes the output.
const ALL_THREE: &[usize] = &[0, 1, 2];

/// Why an argument must be a constant (the second field of [`Cost::ConstantArgs`]), and why a
/// function is refused (of [`Cost::Refused`]): what its work depends on, and what that tells.
const COMPILED: &str = "it is compiled into a regular expression once per row, whose work grows \
                        with the product of the pattern's and the value's lengths: the time a \
                        query takes would tell about one person's values";
const SIZED: &str = "it sets the size of each row's output, and the work of making it: the time \
                     a query takes would tell about one person's values";
const SEARCHED: &str = "the first argument is searched for it (or its elements) from every \
                        position or element, so its size multiplies the work: the time a query \
                        takes would tell about one person's values";
const COPIED: &str = "it is copied once per element or match of the first argument, so its size \
                      multiplies the work: the time a query takes would tell about one person's \
                      values";
const STEPS: &str = "the number of steps of the function's numerical integration depends on the \
                     arguments' values: the time a query takes would tell about one person's \
                     values";
const LITERAL: &str = "DataFusion reads it as a literal only when it computes a window partition \
                       (or a group), so a value from a row fails only where there are rows: \
                       whether a query fails would tell whether one person's rows exist";
const EDIT_DISTANCE: &str = "its work grows with the product of its inputs' lengths (an edit \
                             distance fills an n x m table): the time a query takes would tell \
                             about one person's values";

/// Every function a locked session can call, by name as registered (aliases are separate
/// entries, with their function's cost) and kind, sorted by name then kind. A unit test fails
/// when a locked session registers a function this table does not list, or the table lists
/// one it does not register. Entries that are not obvious from the name say why.
#[rustfmt::skip]
pub const FUNCTION_COSTS: &[(&str, Kind, Cost)] = &[
    ("abs", Scalar, Constant),
    ("acos", Scalar, Constant),
    ("acosh", Scalar, Constant),
    ("any_match", HigherOrder, Linear),
    ("any_value", Aggregate, Constant),
    // A HyperLogLog of 2^14 fixed registers: constant per row and per result.
    ("approx_distinct", Aggregate, Constant),
    // A t-digest of 100 centroids.
    ("approx_median", Aggregate, Constant),
    // The digest keeps up to `centroids` (an argument, any size) centroids: collecting.
    ("approx_percentile_cont", Aggregate, Collecting(&[1, 2])),
    ("approx_percentile_cont_with_weight", Aggregate, Collecting(&[2, 3])),
    ("array_add", Scalar, Linear),
    ("array_agg", Aggregate, Collecting(&[])),
    ("array_any_match", HigherOrder, Linear),
    ("array_any_value", Scalar, Linear),
    ("array_append", Scalar, Linear),
    ("array_avg", Scalar, Linear),
    ("array_cat", Scalar, Linear),
    ("array_compact", Scalar, Linear),
    ("array_concat", Scalar, Linear),
    ("array_contains", Scalar, Linear),
    ("array_dims", Scalar, Linear),
    ("array_distance", Scalar, Linear),
    // Set operations hash each element once (hashbrown, a random seed per process).
    ("array_distinct", Scalar, Linear),
    ("array_element", Scalar, Linear),
    ("array_empty", Scalar, Linear),
    ("array_except", Scalar, Linear),
    ("array_extract", Scalar, Linear),
    ("array_filter", HigherOrder, Linear),
    ("array_first", HigherOrder, Linear),
    ("array_has", Scalar, Linear),
    // Two lists: every needle element against every haystack element (nested loops).
    ("array_has_all", Scalar, ConstantArgs(SECOND, SEARCHED)),
    ("array_has_any", Scalar, ConstantArgs(SECOND, SEARCHED)),
    ("array_indexof", Scalar, Linear),
    ("array_intersect", Scalar, Linear),
    ("array_join", Scalar, ConstantArgs(DELIMITERS, COPIED)),
    ("array_length", Scalar, Linear),
    ("array_max", Scalar, Linear),
    ("array_min", Scalar, Linear),
    ("array_ndims", Scalar, Linear),
    ("array_normalize", Scalar, Linear),
    ("array_pop_back", Scalar, Linear),
    ("array_pop_front", Scalar, Linear),
    ("array_position", Scalar, Linear),
    ("array_positions", Scalar, Linear),
    ("array_prepend", Scalar, Linear),
    ("array_product", Scalar, Linear),
    ("array_push_back", Scalar, Linear),
    ("array_push_front", Scalar, Linear),
    ("array_remove", Scalar, Linear),
    ("array_remove_all", Scalar, Linear),
    ("array_remove_n", Scalar, Linear),
    ("array_repeat", Scalar, ConstantArgs(SIZE, SIZED)),
    ("array_replace", Scalar, ConstantArgs(REPLACEMENT, COPIED)),
    ("array_replace_all", Scalar, ConstantArgs(REPLACEMENT, COPIED)),
    ("array_replace_n", Scalar, ConstantArgs(REPLACEMENT, COPIED)),
    ("array_resize", Scalar, ConstantArgs(SIZE, SIZED)),
    ("array_reverse", Scalar, Linear),
    ("array_scale", Scalar, Linear),
    // Bounds are clamped to the list's length, whatever the stride.
    ("array_slice", Scalar, Linear),
    // n log n comparisons (module docs).
    ("array_sort", Scalar, Linear),
    ("array_subtract", Scalar, Linear),
    ("array_sum", Scalar, Linear),
    ("array_to_string", Scalar, ConstantArgs(DELIMITERS, COPIED)),
    ("array_transform", HigherOrder, Linear),
    ("array_union", Scalar, Linear),
    ("arrays_overlap", Scalar, ConstantArgs(SECOND, SEARCHED)),
    ("arrays_zip", Scalar, Linear),
    ("arrow_cast", Scalar, Linear),
    ("arrow_field", Scalar, Constant),
    ("arrow_metadata", Scalar, Constant),
    ("arrow_try_cast", Scalar, Linear),
    ("arrow_typeof", Scalar, Constant),
    ("ascii", Scalar, Constant),
    ("asin", Scalar, Constant),
    ("asinh", Scalar, Constant),
    ("atan", Scalar, Constant),
    ("atan2", Scalar, Constant),
    ("atanh", Scalar, Constant),
    ("avg", Aggregate, Constant),
    ("bit_and", Aggregate, Constant),
    ("bit_length", Scalar, Constant),
    ("bit_or", Aggregate, Constant),
    ("bit_xor", Aggregate, Constant),
    ("bool_and", Aggregate, Constant),
    ("bool_or", Aggregate, Constant),
    // `str.trim_matches(&[char])`: each trimmed character is looked up in the list of
    // characters, O(|str| x |characters|) unless the characters are a constant.
    ("btrim", Scalar, ConstantArgs(SECOND, SEARCHED)),
    ("cardinality", Scalar, Linear),
    ("cast_to_type", Scalar, Linear),
    ("cbrt", Scalar, Constant),
    ("ceil", Scalar, Constant),
    ("char_length", Scalar, Linear),
    ("character_length", Scalar, Linear),
    ("chr", Scalar, Constant),
    ("coalesce", Scalar, Linear),
    ("concat", Scalar, Linear),
    // The separator once per argument: the SQL fixes how many.
    ("concat_ws", Scalar, Linear),
    // memchr's memmem (two-way): linear for any needle.
    ("contains", Scalar, Linear),
    ("corr", Aggregate, Constant),
    ("cos", Scalar, Constant),
    ("cosh", Scalar, Constant),
    ("cosine_distance", Scalar, Linear),
    ("cot", Scalar, Constant),
    ("count", Aggregate, Constant),
    ("covar", Aggregate, Constant),
    ("covar_pop", Aggregate, Constant),
    ("covar_samp", Aggregate, Constant),
    ("cume_dist", Window, Constant),
    ("current_date", Scalar, Constant),
    ("current_time", Scalar, Constant),
    ("current_timestamp", Scalar, Constant),
    ("date_bin", Scalar, Constant),
    // `to_char`: the format is parsed per row, and each specifier writes a bounded number of
    // characters: linear in the format's length.
    ("date_format", Scalar, Linear),
    ("date_part", Scalar, Constant),
    ("date_trunc", Scalar, Constant),
    ("datepart", Scalar, Constant),
    ("datetrunc", Scalar, Constant),
    ("decode", Scalar, Linear),
    ("degrees", Scalar, Constant),
    ("dense_rank", Window, Constant),
    ("digest", Scalar, Linear),
    ("dot_product", Scalar, Linear),
    // The DP aggregates: a bounded state per group (a quantile: a count per leaf of a tree of
    // fixed depth), noise drawn once per group. Refused as windows by the planner rule.
    ("dp_budget", Table, Constant),
    // `map_extract`: one comparison per key of the map.
    ("element_at", Scalar, Linear),
    ("empty", Scalar, Linear),
    ("encode", Scalar, Linear),
    ("ends_with", Scalar, Linear),
    // The crate's analytic functions: closed forms, or series and searches with a fixed
    // number of steps.
    ("epsilon_for_half_width", Scalar, Constant),
    ("exp", Scalar, Constant),
    ("factorial", Scalar, Constant),
    ("file_row_index", Scalar, Constant),
    // Splits the list on ',' and compares each part once: linear in the list.
    ("find_in_set", Scalar, Linear),
    ("first_value", Aggregate, Constant),
    ("first_value", Window, Constant),
    ("flatten", Scalar, Linear),
    ("floor", Scalar, Constant),
    ("from_unixtime", Scalar, Constant),
    ("gaussian_sigma", Scalar, Constant),
    ("gcd", Scalar, Constant),
    ("generate_series", Scalar, ConstantArgs(ALL_THREE, SIZED)),
    // A table function's arguments are constants (planned before any row is read).
    ("generate_series", Table, Linear),
    ("get_field", Scalar, Linear),
    ("greatest", Scalar, Linear),
    ("grouping", Aggregate, Constant),
    ("ifnull", Scalar, Linear),
    ("initcap", Scalar, Linear),
    ("inner_product", Scalar, Linear),
    ("input_file_name", Scalar, Constant),
    ("instr", Scalar, ConstantArgs(SECOND, SEARCHED)),
    ("isnan", Scalar, Constant),
    ("iszero", Scalar, Constant),
    // An offset and a default read as literals when the window runs (a row's value there
    // fails only when a partition has rows).
    ("lag", Window, ConstantArgs(&[1, 2], LITERAL)),
    ("laplace_ratio_cdf", Scalar, Constant),
    ("last_value", Aggregate, Constant),
    ("last_value", Window, Constant),
    ("lcm", Scalar, Constant),
    ("lead", Window, ConstantArgs(&[1, 2], LITERAL)),
    ("least", Scalar, Linear),
    ("left", Scalar, Linear),
    ("length", Scalar, Linear),
    ("levenshtein", Scalar, Refused(EDIT_DISTANCE)),
    ("list_add", Scalar, Linear),
    ("list_any_match", HigherOrder, Linear),
    ("list_any_value", Scalar, Linear),
    ("list_append", Scalar, Linear),
    ("list_avg", Scalar, Linear),
    ("list_cat", Scalar, Linear),
    ("list_compact", Scalar, Linear),
    ("list_concat", Scalar, Linear),
    ("list_contains", Scalar, Linear),
    ("list_dims", Scalar, Linear),
    ("list_distance", Scalar, Linear),
    ("list_distinct", Scalar, Linear),
    ("list_element", Scalar, Linear),
    ("list_empty", Scalar, Linear),
    ("list_except", Scalar, Linear),
    ("list_extract", Scalar, Linear),
    ("list_filter", HigherOrder, Linear),
    ("list_first", HigherOrder, Linear),
    ("list_has", Scalar, Linear),
    ("list_has_all", Scalar, ConstantArgs(SECOND, SEARCHED)),
    ("list_has_any", Scalar, ConstantArgs(SECOND, SEARCHED)),
    ("list_indexof", Scalar, Linear),
    ("list_intersect", Scalar, Linear),
    ("list_join", Scalar, ConstantArgs(DELIMITERS, COPIED)),
    ("list_length", Scalar, Linear),
    ("list_max", Scalar, Linear),
    ("list_ndims", Scalar, Linear),
    ("list_normalize", Scalar, Linear),
    ("list_pop_back", Scalar, Linear),
    ("list_pop_front", Scalar, Linear),
    ("list_position", Scalar, Linear),
    ("list_positions", Scalar, Linear),
    ("list_prepend", Scalar, Linear),
    ("list_product", Scalar, Linear),
    ("list_push_back", Scalar, Linear),
    ("list_push_front", Scalar, Linear),
    ("list_remove", Scalar, Linear),
    ("list_remove_all", Scalar, Linear),
    ("list_remove_n", Scalar, Linear),
    ("list_repeat", Scalar, ConstantArgs(SIZE, SIZED)),
    ("list_replace", Scalar, ConstantArgs(REPLACEMENT, COPIED)),
    ("list_replace_all", Scalar, ConstantArgs(REPLACEMENT, COPIED)),
    ("list_replace_n", Scalar, ConstantArgs(REPLACEMENT, COPIED)),
    ("list_resize", Scalar, ConstantArgs(SIZE, SIZED)),
    ("list_reverse", Scalar, Linear),
    ("list_scale", Scalar, Linear),
    ("list_slice", Scalar, Linear),
    ("list_sort", Scalar, Linear),
    ("list_subtract", Scalar, Linear),
    ("list_sum", Scalar, Linear),
    ("list_to_string", Scalar, ConstantArgs(DELIMITERS, COPIED)),
    ("list_transform", HigherOrder, Linear),
    ("list_union", Scalar, Linear),
    ("list_zip", Scalar, Linear),
    ("ln", Scalar, Constant),
    ("log", Scalar, Constant),
    ("log10", Scalar, Constant),
    ("log2", Scalar, Constant),
    ("lower", Scalar, Linear),
    ("lpad", Scalar, ConstantArgs(SIZE, SIZED)),
    ("ltrim", Scalar, ConstantArgs(SECOND, SEARCHED)),
    ("make_array", Scalar, Linear),
    ("make_date", Scalar, Constant),
    ("make_list", Scalar, Linear),
    ("make_time", Scalar, Constant),
    // Keys checked unique with a hash set.
    ("map", Scalar, Linear),
    ("map_entries", Scalar, Linear),
    ("map_extract", Scalar, Linear),
    ("map_keys", Scalar, Linear),
    ("map_values", Scalar, Linear),
    ("max", Aggregate, Constant),
    ("md5", Scalar, Linear),
    ("mean", Aggregate, Constant),
    // Keeps every value; its result selects among all of them.
    ("median", Aggregate, Collecting(&[])),
    ("min", Aggregate, Constant),
    ("naive_accuracy_beta", Scalar, Constant),
    ("named_struct", Scalar, Linear),
    ("nanvl", Scalar, Constant),
    ("noised_log_accuracy_beta", Scalar, Constant),
    ("noisy_counts_accuracy_beta", Scalar, Constant),
    ("noisy_ratio_bias", Scalar, Constant),
    ("noisy_ratio_expectation", Scalar, Constant),
    // Adaptive quadrature whose number of evaluations (up to 2,000,000 per piece, with more
    // pieces for larger values) depends on the values of its arguments.
    ("noisy_ratio_expectation_approx", Scalar, ConstantArgs(ALL_THREE, STEPS)),
    ("now", Scalar, Constant),
    ("nth_value", Aggregate, Collecting(&[1])),
    // `n` is read as a literal when the window runs.
    ("nth_value", Window, ConstantArgs(SECOND, LITERAL)),
    ("ntile", Window, ConstantArgs(&[0], LITERAL)),
    ("nullif", Scalar, Linear),
    ("nvl", Scalar, Linear),
    ("nvl2", Scalar, Linear),
    ("octet_length", Scalar, Constant),
    ("overlay", Scalar, Linear),
    ("percent_rank", Window, Constant),
    ("percentile_cont", Aggregate, Collecting(SECOND)),
    ("pi", Scalar, Constant),
    ("position", Scalar, ConstantArgs(SECOND, SEARCHED)),
    ("pow", Scalar, Constant),
    ("power", Scalar, Constant),
    ("quantile_cont", Aggregate, Collecting(SECOND)),
    ("radians", Scalar, Constant),
    ("rand", Scalar, Constant),
    ("random", Scalar, Constant),
    ("range", Scalar, ConstantArgs(ALL_THREE, SIZED)),
    ("range", Table, Linear),
    ("rank", Window, Constant),
    // The regular-expression functions compile their pattern (and flags) per row unless they
    // are constants; the number of matches, the start and the replacement only scale work the
    // output already pays for (the output is capped per row: `total.rs`).
    ("regexp_count", Scalar, ConstantArgs(&[1, 3], COMPILED)),
    ("regexp_instr", Scalar, ConstantArgs(&[1, 4], COMPILED)),
    ("regexp_like", Scalar, ConstantArgs(PATTERN_AND_FLAGS, COMPILED)),
    ("regexp_match", Scalar, ConstantArgs(PATTERN_AND_FLAGS, COMPILED)),
    ("regexp_replace", Scalar, ConstantArgs(&[1, 3], COMPILED)),
    ("regr_avgx", Aggregate, Constant),
    ("regr_avgy", Aggregate, Constant),
    ("regr_count", Aggregate, Constant),
    ("regr_intercept", Aggregate, Constant),
    ("regr_r2", Aggregate, Constant),
    ("regr_slope", Aggregate, Constant),
    ("regr_sxx", Aggregate, Constant),
    ("regr_sxy", Aggregate, Constant),
    ("regr_syy", Aggregate, Constant),
    ("repeat", Scalar, ConstantArgs(SIZE, SIZED)),
    // Not run on a row whose output could pass the cap per row (`total.rs`, `output_bound`).
    ("replace", Scalar, Linear),
    ("reverse", Scalar, Linear),
    ("right", Scalar, Linear),
    ("round", Scalar, Constant),
    ("row", Scalar, Linear),
    ("row_number", Window, Constant),
    ("rpad", Scalar, ConstantArgs(SIZE, SIZED)),
    ("rr_ci_katz", Scalar, Constant),
    ("rtrim", Scalar, ConstantArgs(SECOND, SEARCHED)),
    ("sha224", Scalar, Linear),
    ("sha256", Scalar, Linear),
    ("sha384", Scalar, Linear),
    ("sha512", Scalar, Linear),
    ("signum", Scalar, Constant),
    ("sin", Scalar, Constant),
    ("sinh", Scalar, Constant),
    ("split_part", Scalar, Linear),
    ("sqrt", Scalar, Constant),
    ("starts_with", Scalar, Linear),
    ("stddev", Aggregate, Constant),
    ("stddev_pop", Aggregate, Constant),
    ("stddev_samp", Aggregate, Constant),
    ("string_agg", Aggregate, Collecting(SECOND)),
    ("string_to_array", Scalar, Linear),
    ("string_to_list", Scalar, Linear),
    // A scalar needle runs memchr's two-way search; a needle per row runs a naive scan from
    // every position (O(|haystack| x |needle|)).
    ("strpos", Scalar, ConstantArgs(SECOND, SEARCHED)),
    ("struct", Scalar, Linear),
    ("substr", Scalar, Linear),
    // std's two-way `match_indices`, memchr's memmem.
    ("substr_index", Scalar, Linear),
    ("substring", Scalar, Linear),
    ("substring_index", Scalar, Linear),
    ("sum", Aggregate, Constant),
    ("tan", Scalar, Constant),
    ("tanh", Scalar, Constant),
    ("to_char", Scalar, Linear),
    ("to_date", Scalar, Linear),
    ("to_hex", Scalar, Constant),
    ("to_local_time", Scalar, Constant),
    ("to_time", Scalar, Linear),
    // Each format is tried once: linear in the formats the SQL lists.
    ("to_timestamp", Scalar, Linear),
    ("to_timestamp_micros", Scalar, Linear),
    ("to_timestamp_millis", Scalar, Linear),
    ("to_timestamp_nanos", Scalar, Linear),
    ("to_timestamp_seconds", Scalar, Linear),
    ("to_unixtime", Scalar, Linear),
    ("today", Scalar, Constant),
    // A table of the `from` characters per row, then one lookup per character.
    ("translate", Scalar, Linear),
    ("trim", Scalar, ConstantArgs(SECOND, SEARCHED)),
    ("trunc", Scalar, Constant),
    ("try_cast_to_type", Scalar, Linear),
    ("union_extract", Scalar, Linear),
    ("union_tag", Scalar, Constant),
    ("upper", Scalar, Linear),
    ("uuid", Scalar, Constant),
    ("var", Aggregate, Constant),
    ("var_pop", Aggregate, Constant),
    ("var_population", Aggregate, Constant),
    ("var_samp", Aggregate, Constant),
    ("var_sample", Aggregate, Constant),
    ("version", Scalar, Constant),
    ("with_metadata", Scalar, Constant),
];

/// Aggregates whose value depends on the order in which their rows arrive, not only on the
/// rows: which row is first or last, the order of a collected list (`array_agg` and
/// `string_agg`, `DISTINCT` ones in hash-set order), the centroids a t-digest merges
/// (`approx_percentile_cont` and the aggregates built on it). An `ORDER BY` inside the call
/// does not help: its ties are broken by arrival. Arrival order follows batch and partition
/// boundaries, which other persons' rows move, so over one person's rows (an aggregation
/// grouped by the unit) or over releases (`release_order.rs`) these are refused. Sums of
/// floating-point values add in arrival order too, but only their last bits differ
/// (docs/privacy-analysis.md, "What is not covered").
pub const ORDER_SENSITIVE: &[&str] = &[
    "approx_median",
    "approx_percentile_cont",
    "approx_percentile_cont_with_weight",
    "array_agg",
    "first_value",
    "last_value",
    "nth_value",
    "string_agg",
];

/// Whether `expr` calls an [`ORDER_SENSITIVE`] aggregate, as an aggregate or as a window.
pub fn is_order_sensitive(expr: &Expr) -> bool {
    expr.exists(|e| {
        Ok(match e {
            Expr::AggregateFunction(f) => ORDER_SENSITIVE.contains(&f.func.name()),
            Expr::WindowFunction(w) => matches!(&w.fun,
                WindowFunctionDefinition::AggregateUDF(u) if ORDER_SENSITIVE.contains(&u.name())),
            _ => false,
        })
    })
    .unwrap_or(true)
}

/// The declared cost of `name` as a function of `kind`, if it has one. The DP aggregates are
/// read from their registry (`STATISTICS`), not listed in [`FUNCTION_COSTS`]: each keeps exact
/// state of a bounded size per group (cell counts, a clamped sum, a histogram's bins) and adds a
/// row in constant time.
pub fn cost(name: &str, kind: Kind) -> Option<Cost> {
    if kind == Aggregate && crate::sql::functions::aggregate::statistic_named(name).is_some() {
        return Some(Constant);
    }
    FUNCTION_COSTS
        .binary_search_by(|(n, k, _)| (*n, *k).cmp(&(name, kind)))
        .ok()
        .map(|i| FUNCTION_COSTS[i].2)
}

/// Refuses, with the function, the argument and the reason, every call in `plan` (and its
/// subqueries and views) evaluated over protected rows whose work per row is not bounded by
/// its input's size (module docs). `is_protected` says whether a scan reads a protected table
/// (`PlanAnalysis::is_protected_scan`). One walk over the plan, each node and expression once.
pub fn refuse_costly_calls(
    plan: &LogicalPlan,
    is_protected: &dyn Fn(&TableScan) -> bool,
) -> Result<()> {
    Walk { is_protected }.plan(plan, false).map(|_| ())
}

struct Walk<'a> {
    is_protected: &'a dyn Fn(&TableScan) -> bool,
}

impl Walk<'_> {
    /// Checks `plan`'s expressions; whether its output depends on protected rows. `outer`:
    /// whether an enclosing query's rows (which a correlated subquery reads) are protected.
    #[recursive::recursive]
    fn plan(&self, plan: &LogicalPlan, outer: bool) -> Result<bool> {
        let over_protected = match plan {
            // As the plan analysis: statements are not queries (a prepared statement is checked
            // when executed, with its parameters).
            LogicalPlan::Statement(_) => return Ok(false),
            LogicalPlan::TableScan(scan) => match scan.source.get_logical_plan() {
                Some(view) => self.plan(&view, outer)?,
                None => (self.is_protected)(scan),
            },
            _ => {
                let mut any = false;
                for input in plan.inputs() {
                    any |= self.plan(input, outer)?;
                }
                any
            }
        };
        let schema = match plan.inputs().as_slice() {
            [input] => Some(input.schema().as_ref()),
            _ => None,
        };
        plan.apply_expressions(|expr| {
            let protected = over_protected || (outer && reads_outer_columns(expr));
            if protected {
                check_expr(expr, schema)?;
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        plan.apply_subqueries(|subquery| {
            self.plan(subquery, outer || over_protected)?;
            Ok(TreeNodeRecursion::Continue)
        })?;
        Ok(match plan {
            // A DP aggregate's output is released: public (the analysis refuses other
            // aggregates over protected rows).
            LogicalPlan::Aggregate(aggregate) => {
                over_protected
                    && (aggregate.aggr_expr.is_empty() || !aggregate.aggr_expr.iter().all(is_dp))
            }
            LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) => false,
            _ => over_protected,
        })
    }
}

/// Whether `expr` is a DP aggregate call (possibly aliased).
fn is_dp(expr: &Expr) -> bool {
    match expr {
        Expr::Alias(alias) => is_dp(&alias.expr),
        Expr::AggregateFunction(f) => f.func.inner().downcast_ref::<DpAggregate>().is_some(),
        _ => false,
    }
}

/// Whether `expr` reads a column of an enclosing query (a correlated subquery's).
fn reads_outer_columns(expr: &Expr) -> bool {
    expr.exists(|e| Ok(matches!(e, Expr::OuterReferenceColumn(..))))
        .unwrap_or(true)
}

/// Whether `expr` is a constant: no column of a row, not volatile, and it folds to a literal.
/// A parameter (`$1`) counts as one: the plan is analysed again once it is bound, before it
/// can run (DataFusion refuses to run an unbound parameter).
fn is_constant(expr: &Expr) -> bool {
    if matches!(expr, Expr::Literal(..)) {
        return true;
    }
    let mut reads_row = false;
    let mut parameter = false;
    let _ = expr.apply(|e| {
        match e {
            Expr::Column(_) | Expr::OuterReferenceColumn(..) | Expr::LambdaVariable(_) => {
                reads_row = true
            }
            Expr::Placeholder(_) => parameter = true,
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    if reads_row || expr.is_volatile() {
        return false;
    }
    parameter || folded(expr).is_some()
}

/// The literal `expr` folds to, if it does (its own value when it is one).
fn folded(expr: &Expr) -> Option<datafusion::common::ScalarValue> {
    match expr {
        Expr::Literal(value, _) => Some(value.clone()),
        _ => match ExprSimplifier::new(SimplifyContext::default()).simplify(expr.clone()) {
            Ok(Expr::Literal(value, _)) => Some(value),
            _ => None,
        },
    }
}

/// The refusal of `what` over protected rows: `why` (what its work depends on, and what that
/// would tell), and what to do instead (`fix`).
fn refuse<T>(what: &str, why: &str, fix: &str) -> Result<T> {
    plan_err!("{what} over protected rows: {why}. To fix: {fix}")
}

/// What a query's time would tell, for the reasons below.
const TELLS: &str = "the time a query takes would tell about one person's values";

/// The longest constant, in bytes of its value, that may stand where its size multiplies the
/// work done on each protected row: a regular expression's pattern or a `LIKE` pattern (matched
/// at every position of the value: work up to the product of the two lengths), a needle, a
/// delimiter or a replacement. Being a constant keeps that work the same for every row of a
/// given size; this keeps the factor small. Without it, `regexp_like(v, <5,000 x's>)` over the
/// one row where `v` was not NULL took 13x the query's time without that person (session 57's
/// fuzz run, `tests/neighbours/open.sql`). A pattern an analyst writes by hand is far shorter.
pub const MAX_MULTIPLYING_CONSTANT_BYTES: usize = 256;

/// Whether a constant's size multiplies the work, for the reasons of [`Cost::ConstantArgs`].
fn size_multiplies(why: &str) -> bool {
    [COMPILED, SEARCHED, COPIED].contains(&why)
}

/// The bytes of constant `expr`'s value (a string's or binary's length, otherwise its text's);
/// `None` for a parameter not yet bound (checked again once it is a literal).
fn constant_bytes(expr: &Expr) -> Option<usize> {
    use datafusion::common::ScalarValue::*;
    Some(match &folded(expr)? {
        Utf8(s) | LargeUtf8(s) | Utf8View(s) => s.as_ref().map_or(0, |s| s.len()),
        Binary(b) | LargeBinary(b) | BinaryView(b) => b.as_ref().map_or(0, |b| b.len()),
        other => other.to_string().len(),
    })
}

/// Refuses a constant of `what` longer than [`MAX_MULTIPLYING_CONSTANT_BYTES`].
fn check_constant_size(what: &str, arg: &Expr, position: &str) -> Result<()> {
    match constant_bytes(arg) {
        Some(bytes) if bytes > MAX_MULTIPLYING_CONSTANT_BYTES => refuse(
            what,
            &format!(
                "{position}is a constant of {bytes} bytes, and its length multiplies the work \
                 on each row: {TELLS}"
            ),
            &format!("use a constant of at most {MAX_MULTIPLYING_CONSTANT_BYTES} bytes"),
        ),
        _ => Ok(()),
    }
}

/// Refuses an argument of `name` at one of `positions` that is not a constant, for `why`, or
/// that is a constant too long for its size to multiply the work
/// ([`MAX_MULTIPLYING_CONSTANT_BYTES`]).
fn check_constant_args(name: &str, args: &[Expr], positions: &[usize], why: &str) -> Result<()> {
    for &i in positions {
        let Some(arg) = args.get(i) else { continue };
        if !is_constant(arg) {
            return refuse(
                name,
                &format!("argument {} ({arg}) is computed from a row; {why}", i + 1),
                "make it a constant",
            );
        }
        if size_multiplies(why) {
            check_constant_size(name, arg, &format!("argument {} ", i + 1))?;
        }
    }
    Ok(())
}

/// Checks a call of `name` (a `kind`) with `args` against its declared cost.
fn check_call(name: &str, kind: Kind, args: &[Expr]) -> Result<Cost> {
    let Some(cost) = cost(name, kind) else {
        return refuse(
            name,
            &format!(
                "its work per row has not been declared (FUNCTION_COSTS, \
                 src/sql/privacy/session/costs.rs), and if it grows faster than its input, {TELLS}"
            ),
            "compute it over public data only (a function is refused over protected rows until \
             its cost is declared)",
        );
    };
    match cost {
        Constant | Linear => {}
        ConstantArgs(positions, why) => check_constant_args(name, args, positions, why)?,
        Collecting(positions) => check_constant_args(name, args, positions, LITERAL)?,
        Refused(why) => return refuse(name, why, "compute it over public data only"),
    }
    Ok(cost)
}

/// How an operator's right side is used: a pattern compiled per row, or not.
fn check_operator(op: Operator, right: &Expr) -> Result<()> {
    use Operator::*;
    let pattern = match op {
        Eq | NotEq | Lt | LtEq | Gt | GtEq | Plus | Minus | Multiply | Divide | Modulo
        | IntegerDivide | And | Or | IsDistinctFrom | IsNotDistinctFrom | BitwiseAnd
        | BitwiseOr | BitwiseXor | BitwiseShiftRight | BitwiseShiftLeft | StringConcat => {
            return Ok(())
        }
        RegexMatch | RegexIMatch | RegexNotMatch | RegexNotIMatch | LikeMatch | ILikeMatch
        | NotLikeMatch | NotILikeMatch => true,
        // Operators DataFusion's own planner turns into functions (`@>` on lists is
        // `array_has_all`) or runs only for extensions: no declared cost.
        AtArrow | ArrowAt | Arrow | LongArrow | HashArrow | HashLongArrow | AtAt | HashMinus
        | AtQuestion | Question | QuestionAnd | QuestionPipe | Colon => false,
    };
    if !pattern {
        return refuse(
            &format!("the operator {op}"),
            &format!(
                "its work per row has not been declared, and if it grows faster than its input, \
                 {TELLS}"
            ),
            "compute it over public data only",
        );
    }
    check_pattern(&format!("{op}"), right)
}

/// Refuses a pattern (`LIKE`, `SIMILAR TO`, `~`) that is not a constant.
fn check_pattern(op: &str, pattern: &Expr) -> Result<()> {
    if is_constant(pattern) {
        return check_constant_size(op, pattern, "the pattern ");
    }
    refuse(
        &format!("{op} with a pattern computed from a row ({pattern})"),
        &format!(
            "the pattern is compiled per row into a regular expression, whose work grows with \
             the product of the pattern's and the value's lengths: {TELLS}"
        ),
        "use a constant pattern",
    )
}

/// Checks every call and pattern in `expr`, evaluated over protected rows of `schema` (the
/// node's input, for the types a window's retraction depends on).
fn check_expr(expr: &Expr, schema: Option<&DFSchema>) -> Result<()> {
    expr.apply(|e| {
        match e {
            Expr::ScalarFunction(call) => {
                let func = call.func.inner();
                if let Some(wrapped) = func.downcast_ref::<TryFunction>() {
                    check_call(wrapped.inner().name(), Scalar, &call.args)?;
                } else if func.downcast_ref::<TryBinary>().is_some() {
                    let name = call.func.name();
                    match operator_from_name(name.trim_start_matches("try_")) {
                        Some(op) => {
                            if let Some(right) = call.args.get(1) {
                                check_operator(op, right)?;
                            }
                        }
                        None => check_call(name, Scalar, &call.args).map(|_| ())?,
                    }
                } else if func.downcast_ref::<TryCastRows>().is_none() {
                    check_call(call.func.name(), Scalar, &call.args)?;
                }
            }
            Expr::AggregateFunction(AggregateFunction { func, params }) => {
                check_call(func.name(), Aggregate, &params.args)?;
            }
            Expr::WindowFunction(window) => check_window(window, schema)?,
            Expr::HigherOrderFunction(call) => {
                let name = call.func.name();
                check_call(name, HigherOrder, &call.args)?;
                // The lambda runs once per element; a column it reads is copied to every
                // element of the row's list.
                for arg in &call.args {
                    if let Expr::Lambda(lambda) = arg {
                        let mut column = None;
                        lambda.body.apply(|b| {
                            if let Expr::Column(c) | Expr::OuterReferenceColumn(_, c) = b {
                                column = Some(c.to_string());
                                return Ok(TreeNodeRecursion::Stop);
                            }
                            Ok(TreeNodeRecursion::Continue)
                        })?;
                        if let Some(column) = column {
                            return refuse(
                                &format!("{name} with a lambda that reads the column {column}"),
                                &format!(
                                    "the lambda runs once per element of the list, with the \
                                     column's value copied to each, so its work is the product \
                                     of the list's length and the value's size: {TELLS}"
                                ),
                                "read only the lambda's parameters and constants",
                            );
                        }
                    }
                }
            }
            Expr::Like(like) => {
                let op = if like.case_insensitive {
                    "ILIKE"
                } else {
                    "LIKE"
                };
                check_pattern(op, &like.pattern)?
            }
            Expr::SimilarTo(like) => check_pattern("SIMILAR TO", &like.pattern)?,
            Expr::BinaryExpr(binary) => check_operator(binary.op, &binary.right)?,
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map(|_| ())
}

/// A window over protected rows (partitioned by the unit: one person's rows, plan analysis).
/// Besides the function's own cost, DataFusion 55.2 computes a window aggregate row by row
/// over each row's frame (`datafusion-physical-expr/src/window/`): a frame that starts at
/// UNBOUNDED PRECEDING grows, and the accumulator is given each new row once
/// (`PlainAggregateWindowExpr`); a sliding frame also takes the rows leaving it out, with
/// `retract_batch` (`SlidingAggregateWindowExpr`), and an aggregate whose accumulator cannot
/// retract fails there ("can not be used as a sliding accumulator"), when the first partition
/// with rows is evaluated: an error exactly when one person's rows exist. A growing frame is
/// not safe from that either: to share one sort between two windows of opposite `ORDER BY`s
/// the physical optimiser reverses one of them (`get_reverse_expr`), and the reverse of
/// `UNBOUNDED PRECEDING AND CURRENT ROW` is the sliding `CURRENT ROW AND UNBOUNDED FOLLOWING`
/// (seen on `sum(..) OVER (.. ORDER BY r DESC), bool_and(..) OVER (.. ORDER BY r)`). So an
/// aggregate that cannot retract is a window over protected rows only over a frame that no
/// reversal makes sliding: without `ORDER BY`, or from UNBOUNDED PRECEDING to UNBOUNDED
/// FOLLOWING. Either way the
/// result is computed once per row, so an aggregate whose result reads all its rows
/// ([`Cost::Collecting`], and `DISTINCT` aggregates other than `count`, which sum or average
/// their set of values) costs rows x frame unless the frame is the whole partition (evaluated
/// once). `IGNORE NULLS` makes `first_value`, `last_value`, `nth_value`, `lag` and `lead`
/// search the frame (or keep offsets) for non-null values on every row: rows x frame too.
fn check_window(window: &WindowFunction, schema: Option<&DFSchema>) -> Result<()> {
    let params = &window.params;
    let frame = &params.window_frame;
    // One result for the whole partition: DataFusion's `is_window_constant_in_partition`, which
    // only its growing form (a frame from UNBOUNDED PRECEDING) reads; a sliding frame is
    // evaluated row by row whatever its bounds.
    let whole_partition = frame.is_ever_expanding()
        && match &frame.end_bound {
            WindowFrameBound::CurrentRow => {
                frame.units == WindowFrameUnits::Range && params.order_by.is_empty()
            }
            other => other.is_unbounded(),
        };
    match &window.fun {
        WindowFunctionDefinition::AggregateUDF(udaf) => {
            let name = udaf.name();
            let cost = check_call(name, Aggregate, &params.args)?;
            let collects = matches!(cost, Collecting(_)) || (params.distinct && name != "count");
            if collects && !whole_partition {
                let distinct = if params.distinct { "(DISTINCT)" } else { "" };
                return refuse(
                    &format!("{name}{distinct} as a window with a frame that moves with each row"),
                    &format!(
                        "it keeps every row (or distinct value) of its frame and reads all of \
                         them for each row's result, so its work grows with the square of one \
                         person's rows: {TELLS}"
                    ),
                    "use a frame of the whole partition (no ORDER BY, or ROWS BETWEEN \
                     UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)",
                );
            }
            // Sliding as written, or once the optimiser reverses it (see above).
            let may_slide = !frame.is_ever_expanding()
                || (!params.order_by.is_empty() && !frame.end_bound.is_unbounded());
            if may_slide && !retracts(udaf, window, schema) {
                return refuse(
                    &format!("{name} as a window with a frame that can slide ({frame})"),
                    "DataFusion computes a sliding frame (one that starts after UNBOUNDED \
                     PRECEDING, or a growing one it reverses to share another window's sort) by \
                     taking the rows that leave it out of the aggregate's state, which this \
                     aggregate cannot do: such a window fails only when a partition has rows, \
                     which would tell whether one person's rows exist (and recomputing the frame \
                     for every row instead would take the square of their rows)",
                    "use a frame of the whole partition (no ORDER BY, or ROWS BETWEEN \
                     UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING), or an aggregate that can \
                     retract rows (sum, count, avg, min, max, ...)",
                );
            }
        }
        WindowFunctionDefinition::WindowUDF(udwf) => {
            let name = udwf.name();
            check_call(name, Window, &params.args)?;
            if params.null_treatment == Some(NullTreatment::IgnoreNulls) {
                return refuse(
                    &format!("{name} IGNORE NULLS as a window"),
                    &format!(
                        "it searches its frame for non-null values on every row, so its work \
                         grows with the square of one person's rows: {TELLS}"
                    ),
                    "filter the NULLs out first",
                );
            }
        }
    }
    Ok(())
}

/// Whether `udaf`'s accumulator for this window's arguments can retract rows: DataFusion's own
/// test (`AggregateFunctionExpr::create_sliding_accumulator`), on the arguments' types (a
/// constant argument as its literal). Anything that cannot be built counts as no.
fn retracts(udaf: &Arc<AggregateUDF>, window: &WindowFunction, schema: Option<&DFSchema>) -> bool {
    let Some(schema) = schema else {
        return false;
    };
    let params = &window.params;
    let mut fields = Vec::with_capacity(params.args.len());
    let mut exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::with_capacity(params.args.len());
    for (i, arg) in params.args.iter().enumerate() {
        let Ok((_, field)) = arg.to_field(schema) else {
            return false;
        };
        let name = format!("arg{i}");
        fields.push(Field::new(
            &name,
            field.data_type().clone(),
            field.is_nullable(),
        ));
        let literal = match arg {
            Expr::Literal(value, _) => Some(value.clone()),
            other if is_constant(other) => {
                match ExprSimplifier::new(SimplifyContext::default()).simplify(other.clone()) {
                    Ok(Expr::Literal(value, _)) => Some(value),
                    _ => None,
                }
            }
            _ => None,
        };
        exprs.push(match literal {
            Some(value) => Arc::new(Literal::new(value)),
            None => Arc::new(Column::new(&name, i)),
        });
    }
    let mut builder = AggregateExprBuilder::new(Arc::clone(udaf), exprs)
        .schema(Arc::new(Schema::new(fields)))
        .alias("retracts")
        .with_ignore_nulls(params.null_treatment == Some(NullTreatment::IgnoreNulls));
    if params.distinct {
        builder = builder.distinct();
    }
    builder
        .build()
        .and_then(|aggregate| aggregate.create_sliding_accumulator())
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;
    use std::collections::BTreeSet;

    /// A locked session, as an analyst gets one.
    async fn locked() -> SessionContext {
        let ctx = SessionContext::new();
        crate::register(&ctx).unwrap();
        ctx.sql("SET dp.epsilon_budget = 1").await.unwrap();
        crate::lock(&ctx).unwrap();
        ctx
    }

    #[test]
    fn the_table_is_sorted_without_duplicates() {
        for pair in FUNCTION_COSTS.windows(2) {
            let (a, b) = ((pair[0].0, pair[0].1), (pair[1].0, pair[1].1));
            assert!(a < b, "{a:?} is not before {b:?}");
        }
    }

    /// Every function a locked session resolves, with its kind and the name it is registered
    /// under (aliases included) and its own name.
    async fn registered() -> BTreeSet<(String, Kind, String)> {
        let state = locked().await.state();
        let mut all = BTreeSet::new();
        for (key, f) in state.scalar_functions() {
            all.insert((key.clone(), Scalar, f.name().to_string()));
        }
        for (key, f) in state.aggregate_functions() {
            all.insert((key.clone(), Aggregate, f.name().to_string()));
        }
        for (key, f) in state.window_functions() {
            all.insert((key.clone(), Window, f.name().to_string()));
        }
        for key in state.table_functions().keys() {
            all.insert((key.clone(), Table, key.clone()));
        }
        for (key, f) in state.higher_order_functions() {
            all.insert((key.clone(), HigherOrder, f.name().to_string()));
        }
        all
    }

    /// Issue 41's test: a function DataFusion (or this crate) registers that the table does not
    /// classify fails here, and so does a row of the table naming a function that is not
    /// registered. An alias costs what its function does.
    #[tokio::test]
    async fn every_function_a_locked_session_resolves_has_a_cost() {
        let registered = registered().await;
        let unclassified: Vec<String> = registered
            .iter()
            .filter(|(key, kind, _)| cost(key, *kind).is_none())
            .map(|(key, kind, _)| format!("{kind:?} {key}"))
            .collect();
        assert!(
            unclassified.is_empty(),
            "functions without a cost in FUNCTION_COSTS: {unclassified:?}"
        );
        let stale: Vec<String> = FUNCTION_COSTS
            .iter()
            .filter(|(name, kind, _)| !registered.iter().any(|(k, kd, _)| k == name && kd == kind))
            .map(|(name, kind, _)| format!("{kind:?} {name}"))
            .collect();
        assert!(
            stale.is_empty(),
            "FUNCTION_COSTS names unregistered functions: {stale:?}"
        );
        for (key, kind, own) in &registered {
            assert_eq!(
                cost(key, *kind),
                cost(own, *kind),
                "{key} is an alias of {own}: it must cost the same"
            );
        }
        // Not vacuous: hundreds of functions, each kind present.
        assert!(registered.len() > 300, "{}", registered.len());
        for kind in [Scalar, Aggregate, Window, Table, HigherOrder] {
            assert!(registered.iter().any(|(_, k, _)| *k == kind), "{kind:?}");
        }
    }

    /// A constant whose length multiplies the work on each row (a pattern, a needle) is at
    /// most `MAX_MULTIPLYING_CONSTANT_BYTES`; one that only sizes the output (`repeat`'s
    /// count) is bounded by the output cap instead.
    #[test]
    fn a_constant_that_multiplies_the_work_is_short() {
        use datafusion::logical_expr::{col, lit};
        let at_most = "x".repeat(MAX_MULTIPLYING_CONSTANT_BYTES);
        let over = "x".repeat(MAX_MULTIPLYING_CONSTANT_BYTES + 1);
        check_call("regexp_like", Scalar, &[col("note"), lit(at_most.clone())]).unwrap();
        let err = check_call("regexp_like", Scalar, &[col("note"), lit(over.clone())])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("regexp_like over protected rows: argument 2 is a constant of 257 bytes")
                && err.contains("use a constant of at most 256 bytes"),
            "{err}"
        );
        // A constant computed from constants counts by its value.
        let repeated =
            Expr::ScalarFunction(datafusion::logical_expr::expr::ScalarFunction::new_udf(
                datafusion::functions::string::repeat(),
                vec![lit("x"), lit(5000i64)],
            ));
        assert!(check_call("strpos", Scalar, &[col("note"), repeated]).is_err());
        check_operator(Operator::LikeMatch, &lit(at_most)).unwrap();
        let err = check_operator(Operator::LikeMatch, &lit(over.clone()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("over protected rows: the pattern is a constant of 257 bytes"),
            "{err}"
        );
        // Not where the constant is a count (the output cap bounds it) or read once.
        check_call("repeat", Scalar, &[col("note"), lit(100_000i64)]).unwrap();
    }

    /// A lambda over protected rows may read its parameters and constants, not the row's
    /// columns (copied to every element). The default SQL dialect does not parse lambdas, but a
    /// locked cluster's scheduler receives plans, not SQL.
    #[tokio::test]
    async fn a_lambda_may_not_read_the_row() {
        use datafusion::logical_expr::expr::{HigherOrderFunction, Lambda, LambdaVariable};
        use datafusion::logical_expr::{col, lit};
        let state = locked().await.state();
        let transform = Arc::clone(&state.higher_order_functions()["array_transform"]);
        let call = |body: Expr| {
            Expr::HigherOrderFunction(HigherOrderFunction::new(
                Arc::clone(&transform),
                vec![
                    col("list"),
                    Expr::Lambda(Lambda {
                        params: vec!["x".to_string()],
                        body: Box::new(body),
                    }),
                ],
            ))
        };
        let x = || Expr::LambdaVariable(LambdaVariable::new("x".to_string(), None));
        check_expr(&call(x() + lit(1)), None).unwrap();
        let err = check_expr(&call(x() + col("note")), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "array_transform with a lambda that reads the column note over protected rows"
            ),
            "{err}"
        );
        // The body's own calls are checked as any other.
        let err = check_expr(
            &call(Expr::ScalarFunction(
                datafusion::logical_expr::expr::ScalarFunction::new_udf(
                    Arc::clone(&state.scalar_functions()["levenshtein"]),
                    vec![x(), lit("a")],
                ),
            )),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("levenshtein over protected rows"), "{err}");
    }

    /// The retraction probe gives DataFusion's answer: `sum` retracts, `bool_and` does not.
    #[test]
    fn the_retraction_probe_agrees_with_datafusion() {
        use datafusion::logical_expr::{col, ExprFunctionExt};
        let schema = DFSchema::try_from(Schema::new(vec![
            Field::new("x", arrow::datatypes::DataType::Int64, true),
            Field::new("b", arrow::datatypes::DataType::Boolean, true),
        ]))
        .unwrap();
        let window = |udaf: Arc<AggregateUDF>, arg: &str| {
            let expr = Expr::from(WindowFunction::new(udaf, vec![col(arg)]))
                .window_frame(datafusion::logical_expr::WindowFrame::new_bounds(
                    WindowFrameUnits::Rows,
                    WindowFrameBound::Preceding(datafusion::common::ScalarValue::UInt64(Some(1))),
                    WindowFrameBound::CurrentRow,
                ))
                .build()
                .unwrap();
            match expr {
                Expr::WindowFunction(w) => *w,
                _ => unreachable!(),
            }
        };
        let sum = datafusion::functions_aggregate::sum::sum_udaf();
        let bool_and = datafusion::functions_aggregate::bool_and_or::bool_and_udaf();
        assert!(retracts(
            &sum,
            &window(Arc::clone(&sum), "x"),
            Some(&schema)
        ));
        assert!(!retracts(
            &bool_and,
            &window(Arc::clone(&bool_and), "b"),
            Some(&schema)
        ));
    }
}
