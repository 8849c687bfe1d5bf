-- Open findings (issue 41): programs the fuzzer failed on by time or peak memory alone, in a
-- class issue 41's fixes do not close, in the corpus's format (regressions.sql). They run with
-- the corpus in `fuzz_regressions_hold`: an abort or a deterministic difference on one fails it;
-- their time and memory are printed, not judged. A program here whose class is closed moves to
-- regressions.sql. The classes (docs/privacy-analysis.md, "What is not covered"):
--
-- own rows: work on the rows a join or filter keeps only when the person is present, each
--   row's expressions as costly as the analyst writes them (within the cost classes and the
--   64 KiB cap on a value); what one person's rows cost, not amplified beyond their rows.
-- own values: work linear in the bytes of the person's own values (the extreme person's
--   9 KB note and text against one character for everyone else), times the calls the
--   statement makes on them.
-- layout: the person's rows in a file, partition or batch of their own, or a schema read from
--   the data (parquet-data-nullability), so a per-file or per-batch cost comes with them.
--
-- Found by the 30-minute run after the fixes (seed 7, debug build, 2 cores):

-- program 571 (34 s), cpu time: layout
[parquet-data-nullability/add] WITH chain AS (SELECT patient_id, region, outcome, exposed, coalesce(array_element(string_to_array(repeat('x', 10000), 'o'), patient_id), 1) AS x FROM visits) SELECT dp_count(patient_id, 1) FROM chain WHERE ((patient_id = 1) AND (x > 1))

-- program 1459 (92 s), peak memory: own rows
[csv/add] SELECT dp_odds_ratio(array_has_any(make_array(), generate_series(1, 100)), (a.visit_date <> a.visit_date), 0.1) FROM (SELECT * FROM visits WHERE (patient_id = 9000000000000000007)) AS a JOIN (SELECT patient_id, 1 AS h, coalesce(regexp_like(input_file_name(), 'n.*')) AS h2 FROM visits) AS b ON (a.patient_id = b.patient_id)

-- program 3694 (287 s), cpu time, wall time: own values
[ndjson/add] WITH c1 AS (SELECT id, g, outcome, exposed, g AS x FROM t), c2 AS (SELECT id, g, outcome, exposed, initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(x)))))))))) AS x FROM c1), c3 AS (SELECT id, g, outcome, exposed, initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(x)))))))))) AS x FROM c2), c4 AS (SELECT id, g, outcome, exposed, initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(x)))))))))) AS x FROM c3), c5 AS (SELECT id, g, outcome, exposed, initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(x)))))))))) AS x FROM c4), c6 AS (SELECT id, g, outcome, exposed, initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(x)))))))))) AS x FROM c5), c7 AS (SELECT id, g, outcome, exposed, initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(x)))))))))) AS x FROM c6), c8 AS (SELECT id, g, outcome, exposed, initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(x)))))))))) AS x FROM c7), c9 AS (SELECT id, g, outcome, exposed, initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(x)))))))))) AS x FROM c8), c10 AS (SELECT id, g, outcome, exposed, initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(x)))))))))) AS x FROM c9), c11 AS (SELECT id, g, outcome, exposed, initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(x)))))))))) AS x FROM c10), chain AS (SELECT id, g, outcome, exposed, initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(initcap(x)))))))))) AS x FROM c11) SELECT dp_count(id, 1e-12) FROM chain WHERE (length(x) > 3)

-- program 6016 (458 s), peak memory: own rows
[ndjson/add] SELECT dp_count(md5('x'), 1.0) FROM (SELECT patient_id, round(CASE WHEN (patient_id = 9000000000000000007) THEN file_row_index() ELSE 1 END, length(substr_index(visit_date, patient_id, 9223372036854775807))) AS h, starts_with(repeat(note, 10000), rpad('zz_far', 10000)) AS h2 FROM visits) AS b JOIN (SELECT * FROM visits WHERE (patient_id > 60)) AS a ON (a.patient_id = b.patient_id) WHERE ((b.h > 0) OR coalesce(b.h2, false))

-- program 10695 (727 s), peak memory: layout
[csv/replace] SELECT dp_count(reverse(coalesce(u.region, 'zz_far')), 0.1) FROM (SELECT patient_id, region, outcome, exposed FROM visits UNION ALL SELECT patient_id, region, outcome, exposed FROM visits) AS u WHERE u.outcome

-- program 10965 (746 s), peak memory: layout
[csv/replace] SELECT dp_sum((a.score + tanh(-1)), 0, 100000, 1.0) FROM visits AS a JOIN visits AS b ON (a.patient_id = b.patient_id) WHERE coalesce(CASE WHEN (a.patient_id > 60) THEN (current_time() IS NULL) ELSE NULL END, true)

-- program 11803 (835 s), cpu time, wall time: own rows
[parquet-data-nullability/add] SELECT dp_count(CAST(CAST(a.note AS BIGINT) AS DOUBLE), 0.1) FROM (SELECT patient_id, CAST(map(array_repeat(patient_id, 10000), string_to_array(repeat(region, 10000), 'o')) AS VARCHAR) AS h, starts_with(rpad(note, 10000), repeat('zz_far', 10000)) AS h2 FROM visits) AS b JOIN (SELECT * FROM visits WHERE (patient_id > 60)) AS a ON (a.patient_id = b.patient_id) WHERE ((length(b.h) > 3) OR coalesce(b.h2, false))

-- program 12886 (886 s), cpu time: own rows
[in-memory/add] SELECT dp_count(CAST(nvl2(a.patient_id, a.patient_id, a.tags) AS DATE), 1.0) FROM (SELECT patient_id, noisy_ratio_expectation(array_element(generate_series(1, 10000), abs(patient_id)), file_row_index(), CAST(patient_id AS DOUBLE)) AS h, contains(repeat(tags, 10000), rpad(tags, 10000)) AS h2 FROM visits) AS b LEFT JOIN (SELECT * FROM visits WHERE patient_id IN (3, 9000000000000000007)) AS a ON (a.patient_id = b.patient_id) WHERE ((b.h > 0) OR coalesce(b.h2, false))

-- program 15375 (1098 s), peak memory: layout
[csv/replace] SET datafusion.execution.batch_size = 65536; PREPARE q(BIGINT) AS SELECT dp_sum(acosh(NULL), -5, 5, 0.01) FROM visits WHERE ((patient_id = $1) AND (ascii(NULL) > 0)); EXECUTE q(9000000000000000007)

-- program 15499 (1106 s), peak memory: layout
[csv/add] SET datafusion.execution.batch_size = 65536; WITH c1 AS (SELECT patient_id, region, outcome, exposed, patient_id AS x FROM visits), c2 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c1), c3 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c2), c4 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c3), c5 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c4), c6 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c5), c7 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c6), c8 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c7), c9 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c8), c10 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c9), c11 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c10), c12 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c11), c13 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c12), c14 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c13), c15 AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c14), chain AS (SELECT patient_id, region, outcome, exposed, x - 1 AS x FROM c15) SELECT dp_count(patient_id, 0.01) FROM chain WHERE (x > 0)

-- program 15517 (1107 s), peak memory: own rows
[csv/add] SELECT dp_count((version() LIKE 'x'), 0.1) FROM (SELECT patient_id, ends_with(uuid(), repeat('zz_far', 10000)) AS h, iszero(CAST(patient_id AS DECIMAL(38, 10))) AS h2 FROM visits) AS b RIGHT JOIN (SELECT * FROM visits WHERE (patient_id = 3)) AS a ON (a.patient_id = b.patient_id) WHERE (b.h OR coalesce(b.h2, false))

-- program 16381 (1156 s), peak memory: own rows
[csv/add] SELECT dp_odds_ratio((starts_with('zz_far', a.note) IS NULL), (a.patient_id < 0), 0.01) FROM (SELECT * FROM visits WHERE (patient_id = 3)) AS a JOIN (SELECT patient_id, nvl2(abs(least(NULL, patient_id)), CASE WHEN (patient_id = 9000000000000000007) THEN array_length(array_repeat(patient_id, 10000), factorial(NULL)) ELSE -1 END, abs((patient_id * 2))) AS h, (array_normalize(NULL) IS NULL) AS h2 FROM visits) AS b ON (a.patient_id = b.patient_id) WHERE ((b.h > 0) OR coalesce(b.h2, false))

-- program 16803 (1182 s), cpu time, wall time, peak memory: own rows
[parquet/replace] SELECT dp_count(abs(regexp_instr(a.patient_id, generate_series(1, 10000))), 0.1) FROM (SELECT patient_id, atanh(patient_id) AS h, (least(CAST(least(visit_date) AS INT)) IS NULL) AS h2 FROM visits) AS b LEFT JOIN (SELECT * FROM visits WHERE (patient_id = 9000000000000000007)) AS a ON (a.patient_id = b.patient_id) WHERE ((b.h > 0) OR coalesce(b.h2, false))

-- program 19891 (1403 s), peak memory: own rows
[csv/add] SELECT dp_risk_difference(cast_to_type(9223372036854775807, a.outcome), greatest(NULL), 0.1) FROM (SELECT * FROM visits WHERE (patient_id = 9000000000000000007)) AS a RIGHT JOIN (SELECT patient_id, regexp_instr(CASE WHEN (patient_id = 9000000000000000007) THEN ascii(NULL) ELSE 9223372036854775807 END, array_repeat(-1, 10000)) AS h, contains(rpad('north', 10000), repeat('a', 10000)) AS h2 FROM visits) AS b ON (a.patient_id = b.patient_id) WHERE ((b.h > 0) OR coalesce(b.h2, false))

-- program 22188 (1552 s), peak memory: own rows
[hive-parquet/replace] SELECT dp_sum(0.5, -5, 5, 1.0) FROM (SELECT * FROM visits WHERE (patient_id = 3)) AS a JOIN (SELECT patient_id, (sha256(CAST(lpad(note, 10000, 'ab') AS BYTEA)) IS NULL) AS h, empty(string_to_array(repeat(region, 10000), 'o')) AS h2 FROM visits) AS b ON (a.patient_id = b.patient_id) WHERE (b.h OR coalesce(b.h2, false))

-- program 23310 (1649 s), cpu time, wall time, peak memory: own values
[in-memory/replace] WITH c1 AS (SELECT patient_id, region, outcome, exposed, note AS x FROM visits), c2 AS (SELECT patient_id, region, outcome, exposed, (x || x) AS x FROM c1), c3 AS (SELECT patient_id, region, outcome, exposed, (x || x) AS x FROM c2), c4 AS (SELECT patient_id, region, outcome, exposed, (x || x) AS x FROM c3), c5 AS (SELECT patient_id, region, outcome, exposed, (x || x) AS x FROM c4), c6 AS (SELECT patient_id, region, outcome, exposed, (x || x) AS x FROM c5), c7 AS (SELECT patient_id, region, outcome, exposed, (x || x) AS x FROM c6), c8 AS (SELECT patient_id, region, outcome, exposed, (x || x) AS x FROM c7), c9 AS (SELECT patient_id, region, outcome, exposed, (x || x) AS x FROM c8), c10 AS (SELECT patient_id, region, outcome, exposed, (x || x) AS x FROM c9), c11 AS (SELECT patient_id, region, outcome, exposed, (x || x) AS x FROM c10), chain AS (SELECT patient_id, region, outcome, exposed, (x || x) AS x FROM c11) SELECT dp_count(patient_id, 1.0), dp_sum(ln('NaN'::DOUBLE), 3, 3, 0.01, 'mechanism=gaussian, delta=1e-6') FROM chain WHERE ((NOT patient_id IN (3, 9000000000000000007)) OR (length(x) > 3))

-- program 23565 (1677 s), peak memory: layout
[csv/replace] SELECT dp_quantile(1e300, 0.99, 0, 100000, 0.01), dp_sum(3.0, 0, 10, 100) FROM (SELECT patient_id, region, outcome, exposed FROM visits UNION ALL SELECT patient_id, region, outcome, exposed FROM visits WHERE (note LIKE 'a')) AS u WHERE ((u.patient_id = 9000000000000000007) AND try_cast_to_type(ascii(CASE WHEN (u.patient_id = 9000000000000000007) THEN nvl(u.patient_id, DATE '0001-01-01') ELSE 'zz_far' END), regexp_like(CAST(DATE '9999-12-31' AS VARCHAR), 'n.*'))) ORDER BY 2

-- program 23701 (1686 s), cpu time: layout
[parquet-data-nullability/add] SELECT dp_relative_risk(outcome, (to_date(CAST(1.5 AS DECIMAL(10, 2))) IS NULL), 0.01, 'mechanism=gaussian, delta=0.5') FROM visits WHERE ((NOT (patient_id = 9000000000000000007)) OR (array_product(array_repeat(patient_id, 10000)) > 0))
