//! The attack corpus: what a determined analyst with a locked session tries, to get exact
//! answers about protected tables or to take the process down, each with the outcome the
//! attack suite (tests/attacks.rs) expects. The neighbour harness (tests/neighbours.rs) runs
//! every statement on tables with and without one person and compares what it shows. One list,
//! read by both: a new attack lands in both suites.
//!
//! The tables are the owner's of both suites: `t` (one row per person, protected row by row),
//! `visits` (several rows per patient, protected by `patient_id`), public `lookup`, `regions`
//! and `sink`. The views `v_t` and `v_amplified` exist in the attack suite's session only (an
//! owner's configuration has no views), so the neighbour harness sees those rows refused alike
//! on both sides. Person 3, whom several probes name, is the one the harness's remove and
//! replace neighbours change.

// Each test crate reads the part it needs.
#![allow(dead_code)]

pub enum Expect {
    /// Refused; the error contains this text.
    Refused(&'static str),
    /// Answered (with DP noise, or with public data only).
    Answered,
}
use Expect::*;

/// The queries of the issue, then the shapes a determined analyst tries next.
pub const ATTACKS: &[(&str, Expect)] = &[
    // The issue's queries.
    ("SELECT dp_count(t.x, 1.0) / 10000.0 FROM t CROSS JOIN generate_series(1, 10000)", Refused("can repeat a protected row")),
    ("SELECT dp_relative_risk(outcome, exposed, 1.0) FROM (SELECT t.* FROM t CROSS JOIN generate_series(1, 100000))", Refused("can repeat a protected row")),
    ("SELECT count(*), dp_count(x, 1.0) FROM t", Refused("count(*) over protected table 't' is computed exactly")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE (SELECT sum(id) FROM t) = 15", Refused("sum(t.id) over protected table 't' is computed exactly")),
    ("SET dp.epsilon_budget = 100", Refused("epsilon_budget is set by the data owner")),
    ("SET dp.privacy_unit = 'id'", Refused("unknown option 'privacy_unit'")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region FROM visits UNION ALL SELECT patient_id + 100 AS patient_id, region FROM visits)", Refused("not carried through a projection unchanged")),
    // Reading protected rows directly.
    ("SELECT * FROM t", Refused("would output rows of protected table 't'")),
    ("SELECT max(x) FROM t", Refused("max(t.x) over protected table 't' is computed exactly")),
    ("SELECT g FROM t GROUP BY g", Refused("without a DP aggregate releases its exact keys")),
    ("SELECT DISTINCT g FROM t", Refused("would output rows of protected table 't' (Distinct")),
    ("SELECT * FROM v_t", Refused("would output rows of protected table 't'")),
    ("SELECT lookup.v FROM lookup JOIN t ON lookup.k = t.g", Refused("would output rows of protected table 't'")),
    ("SELECT (SELECT max(x) FROM t)", Refused("max(t.x) over protected table 't' is computed exactly")),
    ("SELECT k FROM lookup WHERE k IN (SELECT g FROM t)", Refused("a subquery in an expression")),
    ("SELECT k FROM lookup WHERE EXISTS (SELECT 1 FROM t WHERE t.g = lookup.k)", Refused("a subquery in an expression")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE x IN (SELECT x FROM t WHERE outcome)", Refused("a subquery in an expression")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE x > (SELECT avg(u.x) FROM t AS u WHERE u.g = t.g)", Refused("avg(u.x) over protected table 't' is computed exactly")),
    ("SELECT dp_count(x, 1.0) FROM t HAVING count(*) > 1", Refused("count(*) over protected table 't' is computed exactly")),
    // Window functions.
    ("SELECT count(*) OVER () FROM t", Refused("window function over protected table 't'")),
    ("SELECT dp_count(c, 1.0) FROM (SELECT count(*) OVER () AS c FROM t)", Refused("window function over protected table 't'")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT region, row_number() OVER (PARTITION BY region) AS r FROM visits) WHERE r = 1", Refused("window function over protected table 'visits'")),
    ("SELECT dp_count(x, 1.0) OVER () FROM t", Refused("cannot be used as a window function")),
    // The contribution-bounding rewrite's functions are not resolvable from SQL: one took its
    // bounds from whichever row came first (ORDER BY chose it), so one person's row bounded
    // everyone's (issue 27); the rewrite inserts them itself.
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, dp_unit_sample(patient_id, arrow_cast(1, 'UInt64'), arrow_cast(1, 'UInt64'), arrow_cast(1, 'UInt64'), arrow_cast(1, 'UInt64')) OVER (ORDER BY region, patient_id) AS k FROM visits) WHERE k", Refused("Invalid function 'dp_unit_sample'")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, dp_unit_sample(patient_id, arrow_cast(1, 'UInt64'), arrow_cast(1, 'UInt64'), arrow_cast(patient_id, 'UInt64'), arrow_cast(1, 'UInt64')) OVER (ORDER BY patient_id) AS k FROM visits) WHERE k", Refused("Invalid function 'dp_unit_sample'")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, dp_unit_sample_ordered(patient_id, arrow_cast(1, 'UInt64'), arrow_cast(1, 'UInt64'), arrow_cast(1, 'UInt64'), arrow_cast(1, 'UInt64')) OVER (ORDER BY region) AS k FROM visits) WHERE k", Refused("Invalid function 'dp_unit_sample_ordered'")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE dp_keyed_hash(arrow_cast(1, 'UInt64'), x) > 0", Refused("Invalid function 'dp_keyed_hash'")),
    // Exact aggregates per person: grouped by the unit column, each output row is one unit's;
    // grouped by it alone, one row per unit (no bounding). Across persons, refused.
    ("SELECT patient_id, count(*) FROM visits GROUP BY patient_id", Refused("would output rows of protected table 'visits'")),
    ("SELECT dp_count(n, 1.0) FROM (SELECT region, count(*) AS n FROM visits GROUP BY region)", Refused("count(*) over protected table 'visits' is computed exactly")),
    ("SELECT dp_count(n, 1.0) FROM (SELECT patient_id + 0 AS p, count(*) AS n FROM visits GROUP BY patient_id + 0)", Refused("count(*) over protected table 'visits' is computed exactly")),
    ("SELECT dp_count(n, 1.0) FROM (SELECT patient_id, count(*) AS n FROM visits GROUP BY ROLLUP (patient_id))", Refused("count(*) over protected table 'visits' is computed exactly")),
    ("SELECT dp_count(n, 1.0) FROM (SELECT id, count(*) AS n FROM t GROUP BY id)", Refused("count(*) over protected table 't' is computed exactly")),
    ("SELECT dp_count(f, 1.0) FROM (SELECT patient_id, first_value(region) AS f FROM visits GROUP BY patient_id)", Refused("follows the order in which one person's rows arrive")),
    ("SELECT dp_count(f, 1.0) FROM (SELECT patient_id, array_agg(tags ORDER BY tags) AS f FROM visits GROUP BY patient_id)", Refused("follows the order in which one person's rows arrive")),
    ("SELECT dp_count(patient_id, 1.0) FROM visits WHERE patient_id IN (SELECT patient_id FROM visits GROUP BY patient_id HAVING count(*) > 1)", Refused("a subquery in an expression")),
    ("SELECT dp_count(patient_id, 1.0) FROM (SELECT patient_id, count(*) AS n FROM visits GROUP BY patient_id) WHERE n > 1", Answered),
    ("SELECT dp_relative_risk(o, e, 1.0) FROM (SELECT patient_id, bool_or(outcome) AS o, bool_or(exposed) AS e FROM visits GROUP BY patient_id)", Answered),
    ("SELECT dp_count(n, 1.0) FROM (SELECT patient_id, count(*) AS n FROM visits CROSS JOIN generate_series(1, 100) GROUP BY patient_id)", Answered),
    ("SELECT dp_count(patient_id, 1.0) FROM (SELECT DISTINCT patient_id FROM visits CROSS JOIN generate_series(1, 100))", Answered),
    ("SELECT dp_count(patient_id, 1.0) FROM (SELECT patient_id, region, count(*) AS n FROM visits GROUP BY patient_id, region) WHERE n > 1", Answered),
    ("SELECT dp_count(a.patient_id, 1.0) FROM (SELECT patient_id, count(*) AS n FROM visits GROUP BY patient_id) AS a JOIN visits AS b ON a.patient_id = b.patient_id WHERE a.n > 1", Answered),
    // Joins.
    ("SELECT dp_count(a.x, 1.0) FROM t AS a JOIN t AS b ON a.x = b.x", Refused("join of protected relations")),
    ("SELECT dp_count(a.region, 1.0) FROM visits AS a JOIN visits AS b ON a.region = b.region", Refused("allowed only on equality of their unit columns")),
    ("SELECT dp_count(a.region, 1.0) FROM visits AS a JOIN visits AS b ON a.patient_id = b.patient_id", Answered),
    ("SELECT dp_count(a.region, 1.0) FROM visits AS a FULL JOIN visits AS b ON a.patient_id = b.patient_id", Refused("rows of one side without a match have no unit")),
    ("SELECT dp_count(t.x, 1.0) FROM t JOIN lookup ON t.g = lookup.k", Refused("can repeat a protected row")),
    ("SELECT dp_count(visits.region, 1.0) FROM visits JOIN lookup ON visits.tags = lookup.k", Answered),
    ("SELECT dp_count(t.x, 1.0) FROM t CROSS JOIN (VALUES (1), (2)) AS v(a)", Refused("can repeat a protected row")),
    ("SELECT dp_count(lookup.v, 1.0) FROM lookup LEFT JOIN t ON lookup.k = t.g", Refused("public rows are kept or dropped according to protected rows")),
    ("SELECT dp_count(t.x, 1.0) FROM t, LATERAL (SELECT t.x AS y) AS l", Refused("")),
    ("SELECT dp_count(visits.region, 1.0) FROM visits CROSS JOIN generate_series(1, 1000)", Answered),
    // Set operations.
    ("SELECT dp_count(x, 1.0) FROM (SELECT x FROM t UNION ALL SELECT x FROM t)", Refused("a UNION of several protected relations can repeat a protected row")),
    ("SELECT dp_count(x, 1.0) FROM (SELECT x FROM t UNION SELECT x FROM t)", Refused("can repeat a protected row")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region FROM visits UNION ALL SELECT patient_id, region FROM visits)", Answered),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region FROM visits UNION ALL SELECT region, patient_id FROM visits)", Refused("")),
    // Public rows carrying a person's id would share that person's bound (session 14).
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region FROM visits UNION ALL SELECT CAST(1 AS INT) AS patient_id, 'west' AS region)", Refused("a UNION with public rows that give the unit column values")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region FROM visits UNION ALL SELECT CAST(NULL AS INT) AS patient_id, 'west' AS region)", Answered),
    ("SELECT dp_count(x, 1.0) FROM (SELECT x FROM t UNION ALL SELECT 7 AS x)", Answered),
    ("SELECT x FROM t INTERSECT SELECT v FROM lookup", Refused("would output rows of protected table 't'")),
    ("SELECT dp_count(g, 1.0) FROM (SELECT g FROM t INTERSECT SELECT k FROM lookup)", Answered),
    ("SELECT dp_count(x, 1.0) FROM (SELECT x FROM t EXCEPT SELECT x FROM t WHERE x > 2)", Refused("join of protected relations")),
    // Nested DP, CTEs, recursion.
    ("SELECT n * 2 FROM (SELECT dp_count(x, 1.0) AS n FROM t)", Answered),
    ("WITH c AS (SELECT dp_count(x, 1.0) AS n FROM t) SELECT a.n - b.n FROM c AS a CROSS JOIN c AS b", Answered),
    ("SELECT dp_count(n, 1.0) FROM (SELECT dp_count(x, 1.0) AS n FROM t) CROSS JOIN generate_series(1, 10)", Answered),
    ("WITH RECURSIVE r(i, n) AS (SELECT 1, 0 UNION ALL SELECT i + 1, (SELECT dp_count(x, 0.1) FROM t) FROM r WHERE i < 20000) SELECT avg(n) FROM r", Refused("in the recursive term of recursive query")),
    ("WITH RECURSIVE r(x) AS (SELECT x FROM t UNION ALL SELECT x + 1 FROM r WHERE x < 10) SELECT dp_count(x, 1.0) FROM r", Refused("")),
    // unnest, LIMIT, computed unit columns.
    ("SELECT dp_count(u, 1.0) FROM (SELECT unnest(make_array(x, x, x)) AS u FROM t)", Refused("UNNEST")),
    ("SELECT dp_count(u, 1.0) FROM (SELECT patient_id, unnest(make_array(region, region)) AS u FROM visits)", Answered),
    ("SELECT dp_count(x, 1.0) FROM (SELECT x FROM t ORDER BY x LIMIT 3)", Refused("LIMIT")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id % 2 AS patient_id, region FROM visits)", Refused("not carried through a projection unchanged")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id AS person, region FROM visits)", Answered),
    // Views the owner defined.
    ("SELECT dp_count(x, 1.0) FROM v_t", Answered),
    ("SELECT dp_count(x, 1.0) FROM v_amplified", Refused("can repeat a protected row")),
    // Grouping sets: each set is charged.
    ("SELECT g, dp_count(x, 1.0) FROM t GROUP BY GROUPING SETS ((g), ())", Refused("GROUP BY keys come from private data")),
    // A volatile key is evaluated twice (by the bounding and by the aggregate).
    ("SELECT dp_count(region, 1.0) FROM visits GROUP BY random() < 0.5", Refused("is volatile")),
    // Statements an analyst must not run.
    ("EXPLAIN ANALYZE SELECT dp_count(x, 1.0) FROM t", Refused("EXPLAIN ANALYZE reads protected table")),
    // EXPLAIN VERBOSE prints the plan's statistics: for Parquet, the exact row count and each
    // column's exact minimum and maximum (the largest income, from the file's metadata).
    ("EXPLAIN VERBOSE SELECT dp_count(x, 1.0) FROM t", Refused("EXPLAIN VERBOSE: this session is locked")),
    ("PREPARE q AS EXPLAIN VERBOSE SELECT dp_count(x, 1.0) FROM t", Refused("EXPLAIN VERBOSE: this session is locked")),
    ("COPY (SELECT * FROM t) TO '/tmp/datafusion-dp-attack.csv'", Refused("")),
    ("CREATE TABLE leak AS SELECT * FROM t", Refused("")),
    ("CREATE VIEW leak AS SELECT * FROM t", Refused("")),
    ("INSERT INTO sink SELECT x FROM t", Refused("")),
    ("CREATE EXTERNAL TABLE again STORED AS CSV LOCATION 'data/visits.csv'", Refused("")),
    ("PREPARE q(INT) AS SELECT x FROM t WHERE x > $1", Answered),
    // A LIMIT that is not a constant fails in the physical planner: refused before the charge.
    ("SELECT dp_count(x, 1.0) FROM t LIMIT CAST(random() + 1 AS BIGINT)", Refused("Unsupported LIMIT expression")),
    // So does a correlated subquery DataFusion cannot turn into a join (EXISTS over a LIMIT).
    ("SELECT dp_count(x, 1.0) FROM t WHERE EXISTS (SELECT 1 FROM lookup WHERE lookup.k = t.g LIMIT 1)", Refused("cannot turn into a join")),
    // The owner's declarations are locked.
    ("SET dp.public_tables = '*'", Refused("public_tables is set by the data owner")),
    ("SET dp.protected_tables = ''", Refused("protected_tables is set by the data owner")),
    ("SET dp.public_groups = 'assert'", Refused("public_groups is set by the data owner")),
    ("SET dp.group_sizes = 'public'", Refused("group_sizes is set by the data owner")),
    ("SELECT dp_rr_ci(outcome, exposed, 1.0, 'group_sizes=public') FROM t", Refused("group_sizes is set by the data owner")),
    ("SET dp.ledger = '/tmp/fresh.ledger'", Refused("ledger is set by the data owner")),
    ("SET dp.seed = 1", Refused("seed is set by the data owner")),
    ("SET dp.require_secure = false", Refused("require_secure is set by the data owner")),
    ("SET datafusion.explain.show_statistics = true", Refused("this session is locked")),
    // Settings: only an allowlist, with bounded values. A perfect-hash join sized by the
    // largest key turned one person's large key into an allocation that aborted the process.
    ("SET datafusion.execution.perfect_hash_join_min_key_density = 0", Refused("this session is locked")),
    ("SET datafusion.execution.enable_ansi_mode = true", Refused("this session is locked")),
    ("SET datafusion.execution.parquet.pushdown_filters = true", Refused("this session is locked")),
    ("SET datafusion.execution.batch_size = 100000000", Refused("must be an integer from 8 to 65536")),
    ("SET datafusion.execution.target_partitions = 0", Refused("must be an integer from 1 to 64")),
    ("SET datafusion.execution.time_zone = '+01:00'", Refused("this session is locked")),
    ("RESET datafusion.execution.collect_statistics", Refused("this session is locked")),
    // EXPLAIN shows the logical plan only: the physical plan names files and byte ranges.
    ("EXPLAIN FORMAT TREE SELECT dp_count(x, 1.0) FROM t", Refused("EXPLAIN FORMAT TREE: this session is locked")),
    // The order of releases is fixed by their values; what would follow the arrival order
    // (a race one person's rows can decide) is refused.
    ("SELECT row_number() OVER () AS r, c FROM (SELECT dp_count(x, 1.0) AS c FROM t UNION ALL SELECT dp_count(id, 1.0) AS c FROM t)", Refused("over DP releases")),
    ("SELECT array_agg(c) FROM (SELECT dp_count(x, 1.0) AS c FROM t UNION ALL SELECT dp_count(id, 1.0) AS c FROM t)", Refused("over DP releases")),
    ("SELECT first_value(c) FROM (SELECT dp_count(x, 1.0) AS c FROM t UNION ALL SELECT dp_count(id, 1.0) AS c FROM t)", Refused("over DP releases")),
    ("SELECT c FROM (SELECT dp_count(x, 1.0) AS c FROM t UNION ALL SELECT dp_count(id, 1.0) AS c FROM t) LIMIT 1", Answered),
    ("SELECT sum(c) FROM (SELECT dp_count(x, 1.0) AS c FROM t UNION ALL SELECT dp_count(id, 1.0) AS c FROM t)", Answered),
    ("SET datafusion.catalog.default_schema = 'other'", Refused("this session is locked")),
    // Subqueries hidden in other clauses, and table function arguments.
    ("SELECT region FROM regions LIMIT (SELECT count(*) FROM t)", Refused("")),
    ("SELECT region FROM regions ORDER BY (SELECT max(x) FROM t)", Refused("max(t.x) over protected table 't' is computed exactly")),
    ("VALUES ((SELECT max(x) FROM t))", Refused("max(t.x) over protected table 't' is computed exactly")),
    ("SELECT count(*) FROM generate_series(1, (SELECT max(x) FROM t))", Refused("")),
    ("SELECT dp_count(x, 1.0) FILTER (WHERE x < (SELECT max(x) FROM t)) FROM t", Refused("max(t.x) over protected table 't' is computed exactly")),
    ("SELECT dp_count(x, (SELECT max(x) FROM t)) FROM t", Refused("")),
    // Errors are outputs: an expression that fails on a row would print the row's values
    // ("Cannot cast string 'a' ...") or tell whether a row exists. In a DP query every
    // expression that can fail gives NULL on that row instead, so these are answered with
    // noise; SIMILAR TO, which has no total form, is refused before anything runs.
    ("SELECT dp_count(x, 1.0) FROM t WHERE CAST(g || '|' || CAST(outcome AS VARCHAR) AS INT) > 0", Answered),
    ("SELECT dp_count(x, 1.0) FROM t WHERE CASE WHEN id = 3 THEN CAST(CAST(outcome AS VARCHAR) AS INT) ELSE 0 END = 0", Answered),
    ("SELECT dp_count(x, 1.0) FROM t WHERE g = 5", Answered),
    ("SELECT dp_count(x, 1.0) FROM t WHERE x / (x - 3) >= 0 AND x % (id - 1) >= 0", Answered),
    // (A pattern that fails to compile; one built from a row is refused: "Work per row".)
    ("SELECT dp_count(x, 1.0) FROM t WHERE regexp_like(g, '(')", Answered),
    ("SELECT dp_count(x, 1.0) FROM t WHERE g ~ '('", Answered),
    ("SELECT dp_count(x, 1.0) FROM t WHERE regexp_like('a', '(' || g)", Refused("regexp_like over protected rows: argument 2")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE g ~ ('(' || g)", Refused("~ with a pattern computed from a row")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE abs(arrow_cast(x, 'Int64') * 0 - 9223372036854775807 - 1) > 0", Answered),
    ("SELECT dp_count(x, 1.0) FROM t WHERE to_timestamp(g) > now()", Answered),
    ("SELECT dp_count(CAST(g AS INT), 1.0) FROM t", Answered),
    ("SELECT dp_rr_ci(CAST(g AS BOOLEAN), exposed, 1.0) FROM t", Answered),
    ("SELECT dp_count(x, 1.0) FILTER (WHERE CAST(g AS DATE) IS NULL) FROM t", Answered),
    ("SELECT dp_count(region, 1.0) FROM visits JOIN lookup ON CAST(visits.tags AS INT) = lookup.v", Answered),
    ("SELECT dp_count(x, 1.0) FROM t WHERE x IN (SELECT CAST(k AS INT) FROM lookup)", Answered),
    // A long constant pattern multiplies the work on each row it reaches (session 57's fuzz).
    ("SELECT dp_count(x, 1.0) FROM t WHERE id <> 3 OR g LIKE repeat('_%', 10000)", Refused("LIKE over protected rows: the pattern is a constant of 20000 bytes")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE g SIMILAR TO '(a'", Refused("SIMILAR TO over protected rows")),
    // What the total forms cannot reach, refused before anything runs (session 14's red
    // team): a cast whose keys the rows of a batch share fails for the whole batch; a window
    // aggregate's accumulator overflows on a decimal; an allocation sized by a row aborts the
    // process (an AND/OR decides which rows reach even a constant size).
    ("SELECT dp_count(x, 1.0) FROM t WHERE arrow_cast(CASE WHEN id = 3 THEN 'x' ELSE CAST(x AS VARCHAR) END, 'Dictionary(Int8, Utf8)') IS NOT NULL", Refused("CAST to Dictionary(Int8, Utf8) over protected rows")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, avg(arrow_cast(patient_id, 'Decimal128(38, 0)')) OVER (PARTITION BY patient_id) AS a FROM visits) WHERE a IS NOT NULL", Refused("over a DECIMAL in a window")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, avg(patient_id) OVER (PARTITION BY patient_id) AS a FROM visits) WHERE a IS NOT NULL", Answered),
    ("SELECT dp_count(x, 1.0) FROM t WHERE lpad(g, CASE WHEN id = 3 THEN 1000000000000 ELSE 1 END) IS NOT NULL", Refused("lpad over protected rows: argument 2")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE id <> 3 OR repeat(g, 1000000000000) IS NULL", Refused("the size it generates must be a constant")),
    ("SELECT dp_count(u, 1.0) FROM (SELECT patient_id, unnest(range(patient_id)) AS u FROM visits)", Refused("range over protected rows: argument 1")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE CASE WHEN id = 3 THEN repeat(repeat(repeat(g, 10000), 10000), 10000) END IS NULL", Refused("generates from what another such function generated")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE lpad(g, 20) <> '' AND cardinality(range(1, 100)) > 0", Answered),
    // Round 2: a date out of range fails to format even in a safe cast; sizes multiplied
    // through subqueries or by replace() aborted the process (a row's output is capped).
    ("SELECT dp_count(x, 1.0) FROM t WHERE length(CAST(arrow_cast(CASE WHEN id = 3 THEN 2147483647 ELSE 0 END, 'Date32') AS VARCHAR)) > 3", Answered),
    ("SELECT dp_count(x, 1.0) FROM (SELECT x, repeat(w, 10000) AS z FROM (SELECT x, repeat(y, 10000) AS w FROM (SELECT x, repeat(CASE WHEN id = 3 THEN 'ab' ELSE '' END, 10000) AS y FROM t))) WHERE length(z) > 7", Answered),
    // Round 3: a collecting window aggregate grows with one person's rows; the Gaussian
    // calibration overflowed past e^709.78 (exact counts for a charge of (eps, delta)); a
    // confidence of 1 - 2^-53 made the score interval's split NaN.
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, string_agg(tags, ',') OVER (PARTITION BY patient_id) AS a FROM visits) WHERE length(a) > 0", Refused("string_agg as a window in a DP query")),
    ("SELECT dp_count(x, 1500.0, 'mechanism=gaussian, delta=1e-6') FROM t", Refused("where the Gaussian mechanism's calibration overflows")),
    ("SELECT dp_rr_ci(outcome, exposed, 1.0, 'confidence=0.9999999999999999') FROM t", Refused("confidence must be in")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE length(replace(replace(replace(CASE WHEN id = 3 THEN 'a' ELSE 'b' END, 'a', repeat('a', 10000)), 'a', repeat('a', 10000)), 'a', repeat('a', 10000))) > 7", Answered),
    // A DP aggregate in a correlated subquery is decorrelated into a GROUP BY on the outer
    // column after binding: values with no protected rows came back as NULL (session 14).
    ("SELECT v.id, (SELECT dp_count(t.x, 0.001) FROM t WHERE t.id = v.id) FROM (VALUES (3), (99)) AS v(id)", Refused("in a correlated subquery")),
    ("SELECT v.id FROM (VALUES (3), (99)) AS v(id) WHERE EXISTS (SELECT dp_count(t.x, 1.0) FROM t WHERE t.id = v.id)", Refused("in a correlated subquery")),
    ("SELECT r.region, l.c FROM regions r, LATERAL (SELECT dp_count(v.patient_id, 1.0) AS c FROM visits v WHERE v.region = r.region) l", Refused("")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE EXISTS (SELECT 1 FROM lookup WHERE lookup.k = t.g)", Answered),
    ("PREPARE q AS SELECT v.id, (SELECT dp_count(t.x, 0.001) FROM t WHERE t.id = v.id) FROM (VALUES (3), (99)) AS v(id)", Refused("in a correlated subquery")),
    // Issue 41: what a statement makes the process allocate and recurse over is bounded on
    // the plan that runs (`plan::size`), whatever rows are there. A cast to a fixed-size type
    // allocated rows x its declared size (a 16 GiB NULL literal killed the process at
    // planning); a chain of CTEs inlined into one expression 8,000 levels deep overflowed a
    // worker's stack for one person's rows.
    ("SELECT arrow_cast(NULL, 'FixedSizeList(2147483647, Int64)') IS NULL", Refused("max_value_bytes")),
    // Issue 42: the constants that aborted dp-server (and a locked cluster's scheduler) at
    // planning, in statements without DP calls: every statement's sizes are checked.
    ("SELECT length(repeat(arrow_cast('a', 'LargeUtf8'), 1000000000000))", Refused("the size it generates must be a constant")),
    ("SELECT arrow_typeof(arrow_cast(NULL, 'FixedSizeList(2147483647, Int64)'))", Refused("max_value_bytes")),
    ("SELECT length(lpad(arrow_cast('a', 'LargeUtf8'), 1000000000000, 'b'))", Refused("the size it generates must be a constant")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE CASE WHEN id = 3 THEN arrow_cast(make_array(x), 'FixedSizeList(100000000, Int32)') IS NULL ELSE true END", Refused("max_value_bytes")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE arrow_cast(make_array(named_struct('a', x, 'b', g)), 'List(FixedSizeBinary(1000000))') IS NULL", Refused("max_value_bytes")),
    ("WITH c0 AS (SELECT id, x FROM t), c1 AS (SELECT id, x + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 AS x FROM c0), c2 AS (SELECT id, x + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 AS x FROM c1), c3 AS (SELECT id, x + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 AS x FROM c2) SELECT dp_count(x, 1.0) FROM c3 WHERE CASE WHEN id = 3 THEN x > 0 ELSE true END", Refused("max_expression_depth")),
    // Within the limits, a conditional over protected rows evaluates every branch on every
    // row (`rewrite::eager`), and a join of two protected relations reads both sides
    // (`exec::drain`; `a_join_of_protected_relations_reads_both_sides`).
    ("SELECT dp_count(x, 1.0) FROM t WHERE CASE WHEN id = 3 THEN length(repeat(g, 1000)) > 2 WHEN id = 4 THEN false ELSE x > 0 END", Answered),
    ("SELECT dp_count(a.region, 1.0) FROM (SELECT * FROM visits WHERE patient_id = 99) a JOIN (SELECT patient_id, sha256(repeat(tags, 1000)) AS h FROM visits) b ON a.patient_id = b.patient_id WHERE length(b.h) > 3", Answered),
    // Work per row (issue 41): a function whose work grows faster than its input (an edit
    // distance, a pattern compiled per row, a count read from a row), evaluated only on one
    // person's rows, made the query take 9-15x longer exactly when that person was in the
    // table. Over protected rows each call is checked against its declared cost
    // (src/sql/privacy/session/costs.rs) before the charge; over public rows it is not.
    ("SELECT dp_count(region, 1.0) FROM visits WHERE levenshtein(region, tags) < 3", Refused("levenshtein over protected rows: its work grows with the product")),
    ("SELECT dp_count(region, 1.0) FROM visits WHERE CASE WHEN patient_id = 3 THEN levenshtein(region, repeat(tags, 1000)) END > 0", Refused("levenshtein over protected rows")),
    ("SELECT dp_count(region, 1.0) FROM visits WHERE regexp_like(region, region)", Refused("regexp_like over protected rows: argument 2 (visits.region) is computed from a row")),
    ("SELECT dp_count(region, 1.0) FROM visits WHERE regexp_like(region, '^n', tags)", Refused("regexp_like over protected rows: argument 3")),
    ("SELECT dp_count(region, 1.0) FROM visits WHERE regexp_like(region, '^' || 'n')", Answered),
    ("SELECT dp_count(region, 1.0) FROM visits WHERE region ~ tags", Refused("~ with a pattern computed from a row")),
    ("SELECT dp_count(region, 1.0) FROM visits WHERE region LIKE tags || '%'", Refused("LIKE with a pattern computed from a row")),
    ("SELECT dp_count(region, 1.0) FROM visits WHERE region SIMILAR TO tags", Refused("SIMILAR TO with a pattern computed from a row")),
    ("SELECT dp_count(region, 1.0) FROM visits WHERE length(repeat(region, patient_id)) > 3", Refused("repeat over protected rows: argument 2")),
    ("SELECT dp_count(region, 1.0) FROM visits WHERE strpos(region, tags) > 0", Refused("strpos over protected rows: argument 2")),
    ("SELECT dp_count(region, 1.0) FROM visits WHERE strpos(region, 'or') > 0", Answered),
    ("SELECT dp_count(region, 1.0) FROM visits WHERE btrim(region, tags) = ''", Refused("btrim over protected rows: argument 2")),
    ("SELECT dp_count(region, 1.0) FROM visits WHERE array_to_string(make_array(region, region), tags) <> ''", Refused("array_to_string over protected rows: argument 2")),
    ("SELECT dp_count(x, 1.0) FROM t WHERE EXISTS (SELECT 1 FROM lookup WHERE levenshtein(lookup.k, t.g) < 2)", Refused("levenshtein over protected rows")),
    // A sliding frame of an aggregate that cannot retract fails in DataFusion only when a
    // partition has rows; a growing frame slides once the optimiser reverses it to share the
    // sort of a window in the opposite order (the third row failed so, after the charge).
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, bool_and(outcome) OVER (PARTITION BY patient_id ORDER BY region ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS b FROM visits) WHERE b", Refused("bool_and as a window with a frame that can slide")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, bool_and(outcome) OVER (PARTITION BY patient_id ORDER BY region) AS b FROM visits) WHERE b", Refused("bool_and as a window with a frame that can slide")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, sum(patient_id) OVER (PARTITION BY patient_id ORDER BY region DESC) AS c, bool_and(outcome) OVER (PARTITION BY patient_id ORDER BY region) AS b FROM visits) WHERE b AND c > 0", Refused("bool_and as a window with a frame that can slide")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, bool_and(outcome) OVER (PARTITION BY patient_id) AS b FROM visits) WHERE b", Answered),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, sum(patient_id) OVER (PARTITION BY patient_id ORDER BY region DESC) AS c, max(region) OVER (PARTITION BY patient_id ORDER BY region) AS m FROM visits) WHERE c > 0 AND m <> ''", Answered),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, sum(patient_id) OVER (PARTITION BY patient_id ORDER BY region ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM visits) WHERE s > 0", Answered),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, median(patient_id) OVER (PARTITION BY patient_id ORDER BY region) AS m FROM visits) WHERE m > 0", Refused("median as a window with a frame that moves with each row")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, median(patient_id) OVER (PARTITION BY patient_id) AS m FROM visits) WHERE m > 0", Answered),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, last_value(tags) IGNORE NULLS OVER (PARTITION BY patient_id ORDER BY region) AS l FROM visits) WHERE l IS NOT NULL", Refused("last_value IGNORE NULLS as a window")),
    ("SELECT dp_count(region, 1.0) FROM (SELECT patient_id, region, lag(region, patient_id) OVER (PARTITION BY patient_id ORDER BY region) AS l FROM visits) WHERE l IS NOT NULL", Refused("lag over protected rows: argument 2")),
    ("SELECT levenshtein(region, 'nord') FROM regions", Answered),
    ("SELECT dp_count(region, 1.0) FROM visits WHERE region IN (SELECT region FROM regions WHERE levenshtein(region, 'nord') < 3 AND region ~ region)", Answered),
    // What stays allowed.
    ("SET dp.confidence = 0.9", Answered),
    ("SET dp.max_rows_per_unit = 2", Answered),
    ("SET datafusion.execution.batch_size = 512", Answered),
    ("SET datafusion.execution.target_partitions = 3", Answered),
    ("RESET datafusion.execution.batch_size", Answered),
    ("SELECT dp_count(x, 1.0) FROM t", Answered),
    ("SELECT dp_rr_ci(outcome, exposed, 1.0, 'ci_method=plain, confidence=0.9') FROM t", Answered),
    ("SELECT * FROM dp_budget()", Answered),
    ("SELECT * FROM regions", Answered),
    ("EXPLAIN SELECT dp_count(x, 1.0) FROM t", Answered),
];
