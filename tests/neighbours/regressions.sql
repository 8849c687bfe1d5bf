-- The fuzzer's regression corpus (issue 41), run by `fuzz_regressions_hold` in tests/neighbours.rs.
--
-- One program a line; statements separated by `; `; lines starting with `--` are comments.
-- `[pair, pair] ...` runs the program on those pairs of neighbouring tables (layout/neighbour:
-- `parquet/add` adds the extreme person 9000000000000000007, `parquet/remove` removes person 3,
-- `parquet/replace` replaces person 3 by the extreme person); without it, on parquet's add,
-- remove and replace. Two abbreviations keep long programs on one line: `{{N*text}}` is `text`
-- N times, `{{N:text}}` is `text` for i = 1..N with `{i}` and `{i-1}` replaced (a chain of CTEs).
-- Every program must run on both sides without aborting, show no deterministic difference, and
-- cost the same time and peak memory within the spread of its repeats.
--
-- Every program the fuzzer fails on is appended below, as it prints it ("append to ...").

-- Issue 41, type-sized allocations: a cast to a fixed-size type allocates rows x the declared
-- size whatever the data; gated on one person, the allocation happens only when they are present
-- (the issue's 10^8 elements: 0.8 GB, 0.37 s against 0.01 s; 10^7 here, to keep CI short), and
-- at 2^31 elements it aborts the process (exit 134), even for a constant.
[parquet/add, parquet/replace] SELECT dp_count(patient_id, 0.01) FROM visits WHERE CASE WHEN patient_id = 9000000000000000007 THEN arrow_cast(make_array(patient_id), 'FixedSizeList(10000000, Int64)') IS NULL ELSE true END
[parquet/remove] SELECT dp_count(patient_id, 0.01) FROM visits WHERE CASE WHEN patient_id = 3 THEN arrow_cast(make_array(patient_id), 'FixedSizeList(10000000, Int64)') IS NULL ELSE true END
[parquet/add] SELECT dp_count(patient_id, 0.01) FROM visits WHERE CASE WHEN patient_id = 9000000000000000007 THEN arrow_cast(make_array(patient_id), 'FixedSizeList(2147483647, Int64)') IS NULL ELSE true END
[parquet/add] SELECT arrow_cast(NULL, 'FixedSizeList(2147483647, Int64)') IS NULL

-- Issue 41, expression depth after the optimiser: CTEs of 200 terms each, within the nesting
-- limit one by one, inlined into one expression thousands of levels deep; on a 2 MiB tokio
-- worker stack a stack overflow (exit 134) when the person's rows reach it, an answer when they do
-- not (the issue's 40 CTEs, 8,000 levels; 20 here, 4,000 levels, which overflowed 2 MiB too, at
-- half the planning time: 1.3 s a plan in a debug build).
[parquet/add] WITH a0 AS (SELECT patient_id, 0 AS x FROM visits){{20:, a{i} AS (SELECT patient_id, x{{200* + 1}} AS x FROM a{i-1})}} SELECT dp_count(patient_id, 0.01) FROM a20 WHERE CASE WHEN patient_id = 9000000000000000007 THEN x > 0 ELSE true END

-- Issue 41, joins of two protected relations skip work: the hash join reads its build side
-- first and skips the probe side when it is empty, so the costly side runs only when the person
-- is present (0.02 s / 68 MB against 0.18 s / 253 MB).
[parquet/add, parquet/replace] SELECT dp_count(a.patient_id, 0.01) FROM (SELECT * FROM visits WHERE patient_id = 9000000000000000007) a JOIN (SELECT patient_id, sha256(repeat(region || coalesce(tags, 'x'), 10000)) AS h FROM visits) b ON a.patient_id = b.patient_id WHERE length(b.h) > 3
[parquet/remove] SELECT dp_count(a.patient_id, 0.01) FROM (SELECT * FROM visits WHERE patient_id = 3) a JOIN (SELECT patient_id, sha256(repeat(region || coalesce(tags, 'x'), 10000)) AS h FROM visits) b ON a.patient_id = b.patient_id WHERE length(b.h) > 3

-- Issue 41, superlinear work per row: an edit distance of two capped strings, evaluated through
-- CASE on one person's rows only (0.07 s against 0.02 s).
[parquet/add, parquet/replace] SELECT dp_count(patient_id, 0.01) FROM visits WHERE CASE WHEN patient_id = 9000000000000000007 THEN levenshtein(repeat(region, 1000), repeat(reverse(region), 1000)) > 3 ELSE true END
[parquet/remove] SELECT dp_count(patient_id, 0.01) FROM visits WHERE CASE WHEN patient_id = 3 THEN levenshtein(repeat(region, 1000), repeat(reverse(region), 1000)) > 3 ELSE true END

-- Found by the fuzzer:
