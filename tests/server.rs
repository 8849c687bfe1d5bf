//! `dp-server` as analysts meet it: the real binary on a loopback port, talked to with
//! arrow-flight's Flight SQL client (and, in `python_adbc_client`, the ADBC Flight SQL driver
//! from PyPI that `.ci/install-tools` installs). Each test writes its own owner configuration and ledgers
//! in a fresh directory and starts its own server.

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::Float64Type;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandGetTables, CommandStatementQuery, ProstMessageExt, SqlInfo};
use arrow_flight::{FlightDescriptor, FlightInfo};
use common::server::{channel, fetch, login, query, Server};
use futures::TryStreamExt;
use prost::Message;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tonic::transport::Channel;

mod common;

const VISITS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/visits.csv");

/// A fresh directory for one test.
fn test_dir(name: &str) -> PathBuf {
    common::scratch(name)
}

/// An owner configuration over `data/visits.csv` (protected, unit `patient_id`) and a public
/// `regions` table, with analysts `(name, password, epsilon_budget)`, each with a ledger in
/// `dir`; `extra` is appended verbatim.
fn write_config(dir: &Path, analysts: &[(&str, &str, f64)], extra: &str) -> PathBuf {
    std::fs::write(
        dir.join("regions.csv"),
        "region,label\nnorth,North\nsouth,South\neast,East\nwest,West\n",
    )
    .unwrap();
    let mut text = format!(
        "[[table]]\nname = \"visits\"\nlocation = \"{VISITS}\"\nunit = \"patient_id\"\n\
         columns = [\"visit_id BIGINT\", \"patient_id BIGINT\", \"region VARCHAR\", \"month VARCHAR\", \"exposed BOOLEAN\", \"outcome BOOLEAN\"]\n\n\
         [[table]]\nname = \"regions\"\nlocation = \"regions.csv\"\nprotection = \"public\"\n\n\
         [options]\nmax_rows_per_unit = 4\n\n"
    );
    for (name, password, epsilon) in analysts {
        text.push_str(&format!(
            "[[analyst]]\nname = \"{name}\"\npassword = \"{password}\"\nepsilon_budget = {epsilon}\nledger = \"{name}.ledger\"\n\n"
        ));
    }
    text.push_str(extra);
    let path = dir.join("owner.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `GetFlightInfo` for `sql` with the raw Flight client, to see the gRPC status itself.
async fn flight_info_status(
    url: &str,
    token: &str,
    sql: &str,
) -> Result<FlightInfo, tonic::Status> {
    let mut raw = FlightServiceClient::new(channel(url).await);
    let command = CommandStatementQuery {
        query: sql.to_string(),
        transaction_id: None,
    };
    let mut request =
        tonic::Request::new(FlightDescriptor::new_cmd(command.as_any().encode_to_vec()));
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    raw.get_flight_info(request).await.map(|r| r.into_inner())
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.num_rows()).sum()
}

/// The charges in a ledger file: `(epsilon, delta)` per line after the header.
fn ledger_charges(path: &Path) -> Vec<(f64, f64)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .skip(1)
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            (fields[3].parse().unwrap(), fields[4].parse().unwrap())
        })
        .collect()
}

/// The `spent` epsilon `dp_budget()` reports to this client.
async fn spent(client: &mut FlightSqlServiceClient<Channel>) -> f64 {
    let batches = query(
        client,
        "SELECT epsilon FROM dp_budget() WHERE entry = 'spent'",
    )
    .await
    .unwrap();
    batches[0].column(0).as_primitive::<Float64Type>().value(0)
}

const DP_QUERY: &str = "SELECT dp_count(outcome, 0.1) AS n FROM visits";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_failure_and_tokens() {
    let dir = test_dir("login");
    let server = Server::start(&write_config(&dir, &[("alice", "pw-a", 1.0)], ""));
    let url = server.url();

    for (user, password) in [("alice", "wrong"), ("mallory", "pw-a"), ("alice", "")] {
        let err = login(&url, user, password).await.unwrap_err();
        assert!(
            err.contains("invalid user name or password"),
            "{user}: {err}"
        );
    }
    // No token, and a made-up token, are refused before anything is planned.
    let mut anonymous = FlightSqlServiceClient::new(channel(&url).await);
    let err = query(&mut anonymous, DP_QUERY).await.unwrap_err();
    assert!(err.contains("no bearer token"), "{err}");
    let status = flight_info_status(&url, &"0".repeat(64), DP_QUERY)
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated);
    assert!(ledger_charges(&dir.join("alice.ledger")).is_empty());

    let mut alice = login(&url, "alice", "pw-a").await.unwrap();
    assert_eq!(rows(&query(&mut alice, DP_QUERY).await.unwrap()), 1);
    assert_eq!(ledger_charges(&dir.join("alice.ledger")).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_lists_tables_and_schemas_only() {
    let dir = test_dir("metadata");
    let server = Server::start(&write_config(&dir, &[("alice", "pw", 1.0)], ""));
    let mut client = login(&server.url(), "alice", "pw").await.unwrap();

    let info = client
        .get_tables(CommandGetTables {
            catalog: None,
            db_schema_filter_pattern: Some("public".into()),
            table_name_filter_pattern: None,
            table_types: vec![],
            include_schema: true,
        })
        .await
        .unwrap();
    let batches = fetch(&mut client, info).await.unwrap();
    let batch = arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
    let names: Vec<&str> = batch
        .column_by_name("table_name")
        .unwrap()
        .as_string::<i32>()
        .iter()
        .flatten()
        .collect();
    assert_eq!(names, vec!["regions", "visits"]);
    let schema_column = batch
        .column_by_name("table_schema")
        .unwrap()
        .as_binary::<i32>();
    let visits = names.iter().position(|n| *n == "visits").unwrap();
    let schema = arrow::datatypes::Schema::try_from(arrow_flight::IpcMessage(
        schema_column.value(visits).to_vec().into(),
    ))
    .unwrap();
    assert!(schema.field_with_name("patient_id").is_ok(), "{schema:?}");
    // Table names, types and schemas: nothing computed from the rows.
    let columns: Vec<String> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        columns,
        [
            "catalog_name",
            "db_schema_name",
            "table_name",
            "table_type",
            "table_schema"
        ]
    );

    let info = client.get_catalogs().await.unwrap();
    let batches = fetch(&mut client, info).await.unwrap();
    assert_eq!(
        batches[0].column(0).as_string::<i32>().value(0),
        "datafusion"
    );
    let info = client
        .get_sql_info(vec![
            SqlInfo::FlightSqlServerName,
            SqlInfo::FlightSqlServerReadOnly,
        ])
        .await
        .unwrap();
    let batches = fetch(&mut client, info).await.unwrap();
    assert_eq!(rows(&batches), 2);
    assert!(ledger_charges(&dir.join("alice.ledger")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dp_queries_and_errors_as_dpsql_prints_them() {
    let dir = test_dir("errors");
    let config = write_config(&dir, &[("alice", "pw", 5.0)], "");
    let server = Server::start(&config);
    let url = server.url();
    let mut client = login(&url, "alice", "pw").await.unwrap();

    let batches = query(
        &mut client,
        "SELECT dp_rr_ci(outcome, exposed, 1.0) AS rr FROM visits",
    )
    .await
    .unwrap();
    assert_eq!(rows(&batches), 1);
    assert!(batches[0].column(0).as_struct_opt().is_some());
    // An accuracy option is the connection's own.
    query(&mut client, "SET dp.confidence = 0.9").await.unwrap();

    let token = client.token().unwrap().clone();
    for sql in [
        "SELECT dp_count(no_such_column, 1.0) FROM visits",
        "SET dp.epsilon_budget = 100",
        "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/etc/passwd'",
        "SELECT dp_count(outcome, 10.0) FROM visits",
    ] {
        let status = flight_info_status(&url, &token, sql).await.unwrap_err();
        let output = Command::new(env!("CARGO_BIN_EXE_dpsql"))
            .args([
                "--config",
                config.to_str().unwrap(),
                "--analyst",
                "alice",
                "-c",
                sql,
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let line = stderr.trim_end().strip_prefix("error: ").unwrap_or(&stderr);
        assert!(!output.status.success(), "dpsql accepted {sql}");
        assert_eq!(status.message(), line, "{sql}");
        let expected = if line.starts_with("dp budget exceeded") {
            tonic::Code::ResourceExhausted
        } else {
            tonic::Code::InvalidArgument
        };
        assert_eq!(status.code(), expected, "{sql}");
    }
    // The over-budget query was refused before being charged, by the server and by dpsql
    // (which spends the same analyst's ledger).
    let charges = ledger_charges(&dir.join("alice.ledger"));
    assert_eq!(charges, vec![(1.0, 0.0)], "one charge: the dp_rr_ci query");
}

/// The contract of protected tables (issue 10): raw rows never leave a protected table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_table_refuses_select_star() {
    let dir = test_dir("select-star");
    let server = Server::start(&write_config(&dir, &[("alice", "pw", 1.0)], ""));
    let mut client = login(&server.url(), "alice", "pw").await.unwrap();
    let err = query(&mut client, "SELECT * FROM visits")
        .await
        .map(|batches| format!("answered with {} rows", rows(&batches)))
        .unwrap_err();
    assert!(err.contains("visits"), "{err}");
    // A public table is readable as it is.
    let batches = query(&mut client, "SELECT * FROM regions").await.unwrap();
    assert_eq!(rows(&batches), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_charge_one_release_and_prepared_statements() {
    let dir = test_dir("tickets");
    let ledger = dir.join("alice.ledger");
    let server = Server::start(&write_config(&dir, &[("alice", "pw", 5.0)], ""));
    let mut client = login(&server.url(), "alice", "pw").await.unwrap();

    // A ticket is good for one DoGet.
    let info = client.execute(DP_QUERY.to_string(), None).await.unwrap();
    assert_eq!(ledger_charges(&ledger).len(), 1, "charged when planned");
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let batches: Vec<RecordBatch> = client
        .do_get(ticket.clone())
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(rows(&batches), 1);
    let err = match client.do_get(ticket).await {
        Ok(stream) => stream
            .try_collect::<Vec<_>>()
            .await
            .unwrap_err()
            .to_string(),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("already used result ticket"), "{err}");

    // A prepared statement is charged at every execution, with its parameters bound.
    let mut prepared = client
        .prepare(
            "SELECT dp_count(outcome, 0.25) AS n FROM visits WHERE region = $1".to_string(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        prepared.parameter_schema().unwrap().fields().len(),
        1,
        "one parameter"
    );
    for region in ["north", "south"] {
        let values = RecordBatch::try_from_iter([(
            "$1",
            std::sync::Arc::new(arrow::array::StringArray::from(vec![region]))
                as arrow::array::ArrayRef,
        )])
        .unwrap();
        prepared.set_parameters(values).unwrap();
        let info = prepared.execute().await.unwrap();
        assert_eq!(rows(&fetch(&mut client, info).await.unwrap()), 1);
    }
    prepared.close().await.unwrap();
    let charges = ledger_charges(&ledger);
    assert_eq!(charges, vec![(0.1, 0.0), (0.25, 0.0), (0.25, 0.0)]);
    assert!((spent(&mut client).await - 0.6).abs() < 1e-12);
}

/// A prepared statement's parameters come as an Arrow batch whose schema the analyst writes,
/// so they reach every type a cast does: each is bounded as a literal of its type is
/// (`max_value_bytes`, `max_type_depth`: a `NULL` of `FixedSizeBinary(10^6)` broadcast over
/// 4,000 rows would allocate 4 GB), refused before the charge, gated by one person or not, and
/// the server answers the next query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_parameters_of_any_type_are_bounded_as_literals() {
    use arrow::array::{new_null_array, ArrayRef, Decimal256Array, DictionaryArray, StringArray};
    use arrow::datatypes::{i256, DataType, Field, Int32Type};
    use std::sync::Arc;
    let dir = test_dir("parameters");
    let ledger = dir.join("alice.ledger");
    let server = Server::start(&write_config(&dir, &[("alice", "pw", 50.0)], ""));
    let mut client = login(&server.url(), "alice", "pw").await.unwrap();
    let nested = (0..100).fold(DataType::Int8, |t, _| {
        DataType::List(Arc::new(Field::new_list_field(t, true)))
    });
    let null = |t: DataType| new_null_array(&t, 1);
    let dictionary: DictionaryArray<Int32Type> = vec!["east"].into_iter().collect();
    let wide_list = DataType::FixedSizeList(
        Arc::new(Field::new_list_field(DataType::Int8, true)),
        100_000,
    );
    let cases: Vec<(&str, &str, ArrayRef, Option<&str>)> = vec![
        (
            "fixed-size binary",
            "$1 IS NULL",
            null(DataType::FixedSizeBinary(1_000_000)),
            Some("max_value_bytes"),
        ),
        (
            "fixed-size binary, gated by one patient",
            "(CASE WHEN patient_id = 17 THEN $1 END) IS NULL",
            null(DataType::FixedSizeBinary(1_000_000)),
            Some("max_value_bytes"),
        ),
        (
            "fixed-size list",
            "$1 IS NULL",
            null(wide_list),
            Some("max_value_bytes"),
        ),
        (
            "100 nested lists",
            "$1 IS NULL",
            null(nested),
            Some("the batch does not decode: Decode error"),
        ),
        // arrow-flight's client sends a dictionary hydrated (as its values): answered as a
        // string. ADBC sends it as it is, and the server takes its value
        // (tests/python/adbc_session.py).
        ("dictionary", "region = $1", Arc::new(dictionary), None),
        (
            "decimal at its limit",
            "$1 > 0",
            Arc::new(
                Decimal256Array::from(vec![i256::MAX])
                    .with_precision_and_scale(76, 0)
                    .unwrap(),
            ),
            None,
        ),
        (
            "string",
            "region = $1",
            Arc::new(StringArray::from(vec!["east"])),
            None,
        ),
    ];
    for (name, predicate, value, refused) in cases {
        let before = ledger_charges(&ledger).len();
        let sql = format!("SELECT dp_count(outcome, 0.5) AS n FROM visits WHERE {predicate}");
        let mut prepared = client.prepare(sql, None).await.unwrap();
        let values = RecordBatch::try_from_iter([("$1", value)]).unwrap();
        let answered = match prepared.set_parameters(values) {
            Ok(()) => match prepared.execute().await {
                Ok(info) => fetch(&mut client, info).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            },
            Err(e) => Err(e.to_string()),
        };
        let _ = prepared.close().await;
        match (refused, answered) {
            (None, Ok(batches)) => {
                assert_eq!(rows(&batches), 1, "{name}");
                assert_eq!(ledger_charges(&ledger).len(), before + 1, "{name}: charged");
            }
            (Some(why), Err(e)) => {
                assert!(e.contains(why), "{name}: {e}");
                assert_eq!(
                    ledger_charges(&ledger).len(),
                    before,
                    "{name}: not charged: {e}"
                );
            }
            (expected, got) => panic!(
                "{name}: expected {}, got {:?}",
                expected.map_or("an answer".to_string(), |w| format!("a refusal naming {w}")),
                got.map(|b| rows(&b))
            ),
        }
        // The server is up, and answers the next query.
        let batches = query(&mut client, "SELECT dp_count(outcome, 0.5) FROM visits")
            .await
            .unwrap();
        assert_eq!(rows(&batches), 1, "after {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_connections_of_one_analyst_never_overspend() {
    let dir = test_dir("concurrent");
    let ledger = dir.join("alice.ledger");
    // Budget 1.0, each query 0.1: exactly ten fit, whichever connection asks.
    let server = Server::start(&write_config(&dir, &[("alice", "pw", 1.0)], ""));
    let url = server.url();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = login(&url, "alice", "pw").await.unwrap();
            let mut outcomes = Vec::new();
            for _ in 0..10 {
                outcomes.push(query(&mut client, DP_QUERY).await.map(|b| rows(&b)));
            }
            outcomes
        }));
    }
    let mut answered = 0;
    let mut refused = 0;
    for task in tasks {
        for outcome in task.await.unwrap() {
            match outcome {
                Ok(1) => answered += 1,
                Err(e) if e.contains("dp budget exceeded") => refused += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert_eq!((answered, refused), (10, 10));
    let charges = ledger_charges(&ledger);
    assert_eq!(
        charges.len(),
        10,
        "exactly one ledger line per answered query"
    );
    let total: f64 = charges.iter().map(|c| c.0).sum();
    assert!((total - 1.0).abs() < 1e-9, "{total}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_analysts_have_separate_budgets() {
    let dir = test_dir("two-analysts");
    let server = Server::start(&write_config(
        &dir,
        &[("alice", "pw-a", 0.3), ("bob", "pw-b", 1.0)],
        "",
    ));
    let url = server.url();
    let mut alice = login(&url, "alice", "pw-a").await.unwrap();
    let mut bob = login(&url, "bob", "pw-b").await.unwrap();
    for _ in 0..3 {
        query(&mut alice, DP_QUERY).await.unwrap();
    }
    let err = query(&mut alice, DP_QUERY).await.unwrap_err();
    assert!(err.contains("dp budget exceeded"), "{err}");
    // Bob is untouched by Alice's spending, and sees only his own history.
    query(&mut bob, DP_QUERY).await.unwrap();
    assert!((spent(&mut bob).await - 0.1).abs() < 1e-12);
    let history = query(
        &mut bob,
        "SELECT count(*) FROM dp_budget() WHERE entry = 'charge'",
    )
    .await
    .unwrap();
    assert_eq!(
        history[0]
            .column(0)
            .as_primitive::<arrow::datatypes::Int64Type>()
            .value(0),
        1
    );
    assert_eq!(ledger_charges(&dir.join("alice.ledger")).len(), 3);
    assert_eq!(ledger_charges(&dir.join("bob.ledger")).len(), 1);
    // A token is one analyst's: Bob's token does not fetch Alice's tickets.
    let info = alice.execute("SELECT 1".to_string(), None).await.unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let err = match bob.do_get(ticket).await {
        Ok(stream) => stream
            .try_collect::<Vec<_>>()
            .await
            .unwrap_err()
            .to_string(),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("already used result ticket"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zcdp_analyst_is_charged_rho_through_the_server() {
    // Carol's budget is in zCDP (issue 45): a Laplace count at ε = 0.25 is charged
    // ρ = 0.25²/2 = 0.03125 by its privacy map, so four fill ρ = 0.125; the fifth is refused
    // before it is charged. (ε = 0.25 is exact in binary: at ε = 0.1 the f64 square is
    // 0.005000000000000001, which the accountant rounds up to 0.005000000001.)
    let dir = test_dir("zcdp-analyst");
    let server = Server::start(&write_config(
        &dir,
        &[],
        "[[analyst]]\nname = \"carol\"\npassword = \"pw-c\"\nbudget_measure = \"zcdp\"\n\
         rho_budget = 0.125\nledger = \"carol.ledger\"\n",
    ));
    let mut carol = login(&server.url(), "carol", "pw-c").await.unwrap();
    let dp_query = "SELECT dp_count(outcome, 0.25) AS n FROM visits";
    for _ in 0..4 {
        query(&mut carol, dp_query).await.unwrap();
    }
    let err = query(&mut carol, dp_query).await.unwrap_err();
    assert!(err.contains("dp budget exceeded"), "{err}");
    let batches = query(
        &mut carol,
        "SELECT measure, rho FROM dp_budget() WHERE entry = 'spent'",
    )
    .await
    .unwrap();
    assert_eq!(batches[0].column(0).as_string::<i32>().value(0), "zcdp");
    let rho = batches[0].column(1).as_primitive::<Float64Type>().value(0);
    assert_eq!(rho, 0.125);
    // The ledger names its measure and holds the four charges.
    let ledger = std::fs::read_to_string(dir.join("carol.ledger")).unwrap();
    assert!(ledger.lines().next().unwrap().contains("zcdp"), "{ledger}");
    assert_eq!(ledger.lines().count(), 5, "{ledger}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_query_and_restart_loses_and_doubles_nothing() {
    let dir = test_dir("kill9");
    let ledger = dir.join("alice.ledger");
    // Budget 20.0 at 0.1 per query: exactly 200 queries over the server's two lives (enough
    // left after the kill however fast the first life answers).
    let config = write_config(&dir, &[("alice", "pw", 20.0)], "");
    let mut server = Server::start(&config);
    let url = server.url();

    // A query planned (charged) whose result is never fetched: the server dies in between.
    let mut client = login(&url, "alice", "pw").await.unwrap();
    let pending = client.execute(DP_QUERY.to_string(), None).await.unwrap();
    // Two connections issuing queries while the server is killed. Each says when it has been
    // answered once, and the kill waits for both (not for a fixed time, which a loaded machine
    // can outlast before the connections are even logged in).
    let (answering, mut answered_once) = tokio::sync::mpsc::channel::<()>(2);
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let url = url.clone();
        let answering = answering.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = login(&url, "alice", "pw").await.unwrap();
            let mut answered = 0usize;
            loop {
                match query(&mut client, DP_QUERY).await {
                    Ok(_) => answered += 1,
                    Err(_) => return answered,
                }
                if answered == 1 {
                    let _ = answering.send(()).await;
                }
            }
        }));
    }
    drop(answering);
    for _ in 0..2 {
        answered_once
            .recv()
            .await
            .expect("both connections answered before the kill");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.kill();
    let answered: usize = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .sum();
    let before = ledger_charges(&ledger).len();
    // Charged = answered + the unfetched one, plus at most one per connection whose charge
    // was written but whose answer was cut by the kill.
    assert!(
        before > answered && before <= answered + 1 + 2,
        "{before} charges for {answered} answered"
    );
    assert!(
        before < 200,
        "the test needs budget left after the kill: {before}"
    );

    let server = Server::start(&config);
    let url = server.url();
    // The old ticket is gone with the old process.
    let mut again = login(&url, "alice", "pw").await.unwrap();
    assert!(fetch(&mut again, pending).await.is_err());
    // The restarted server reads the whole ledger: spending continues from it.
    assert!((spent(&mut again).await - 0.1 * before as f64).abs() < 1e-9);
    let mut more = 0;
    while query(&mut again, DP_QUERY).await.is_ok() {
        more += 1;
        assert!(more <= 200, "budget not enforced after restart");
    }
    assert_eq!(
        before + more,
        200,
        "the budget is spent exactly once over both lives"
    );
    let charges = ledger_charges(&ledger);
    assert_eq!(charges.len(), 200);
    assert!((charges.iter().map(|c| c.0).sum::<f64>() - 20.0).abs() < 1e-9);
}

/// Certificate and key for `localhost` and 127.0.0.1, self-signed, made with `openssl`.
fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(status.success());
    (cert, key)
}

/// Whether the ADBC Flight SQL driver and pyarrow import; without them the Python test says
/// so and stops, or fails under `CI=true` naming the install command
/// ([`common::missing_tool`]).
fn python_adbc() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import adbc_driver_flightsql.dbapi, pyarrow"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        common::missing_tool(
            "python3 with adbc-driver-flightsql and pyarrow",
            "python3 -m pip install adbc-driver-flightsql==1.13.0 adbc-driver-manager==1.13.0 \
             pyarrow==26.0.1",
        );
    }
    ok
}

/// Runs `tests/python/adbc_session.py` with `args`; returns its stdout, or panics with stderr.
fn python(args: &[&str]) -> String {
    let output = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/adbc_session.py"
        ))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "python failed: {stderr}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn python_adbc_client() {
    if !python_adbc() {
        return;
    }
    let dir = test_dir("adbc");
    let server = Server::start(&write_config(&dir, &[("alice", "pw", 3.0)], ""));
    let uri = format!("grpc://{}", server.address);
    let out = python(&[&uri, "alice", "pw", "session"]);
    // The script prints one `key=value` line per fact it checked.
    let facts: std::collections::HashMap<&str, &str> =
        out.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(facts.get("bad_password"), Some(&"refused"), "{out}");
    assert_eq!(facts.get("rr_columns"), Some(&"rr"), "{out}");
    assert!(
        facts["rr_fields"].starts_with("estimate,lower,upper,"),
        "{out}"
    );
    assert_eq!(facts.get("tables"), Some(&"regions,visits"), "{out}");
    let lower: f64 = facts["rr_lower"].parse().unwrap();
    let upper: f64 = facts["rr_upper"].parse().unwrap();
    assert!(
        lower.is_finite() && upper.is_finite() && lower <= upper,
        "{out}"
    );
    assert!(facts["select_star"].contains("visits"), "{out}");
    assert_eq!(
        facts.get("parameter_string"),
        Some(&"answered 1 row"),
        "{out}"
    );
    // A dictionary-encoded parameter is its value (arrow-flight's client decodes it before
    // sending, ADBC does not): answered as the string is.
    assert_eq!(
        facts.get("parameter_dictionary"),
        Some(&"answered 1 row"),
        "{out}"
    );
    assert!(
        facts["parameter_fixed_binary"].contains("max_value_bytes"),
        "{out}"
    );
    assert!(
        facts["parameter_dictionary_fixed_binary"].contains("max_value_bytes"),
        "{out}"
    );
    // The relative risk and the two strings' counts: the refusals are not charged.
    assert_eq!(ledger_charges(&dir.join("alice.ledger")).len(), 3, "{out}");
}

#[test]
fn tls_serves_the_configured_certificate() {
    let dir = test_dir("tls");
    let (cert, key) = self_signed(&dir);
    let extra = format!(
        "[server]\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let server = Server::start(&write_config(&dir, &[("alice", "pw", 1.0)], &extra));
    // A plaintext client gets nowhere.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let plain = runtime.block_on(async {
        let channel = Channel::from_shared(server.url()).unwrap().connect().await;
        match channel {
            Err(e) => Err(e.to_string()),
            Ok(channel) => {
                let mut client = FlightSqlServiceClient::new(channel);
                client
                    .handshake("alice", "pw")
                    .await
                    .map_err(|e| e.to_string())
            }
        }
    });
    assert!(
        plain.is_err(),
        "plaintext handshake succeeded on a TLS server"
    );
    if !python_adbc() {
        return;
    }
    // ADBC over TLS, trusting exactly the configured certificate.
    let uri = format!(
        "grpc+tls://localhost:{}",
        server.address.rsplit(':').next().unwrap()
    );
    let out = python(&[&uri, "alice", "pw", "tls", cert.to_str().unwrap()]);
    assert!(out.contains("tls_query=1"), "{out}");
    // And refusing it without that certificate.
    let (other, _) = self_signed(&test_dir("tls-other"));
    let out = python(&[&uri, "alice", "pw", "tls", other.to_str().unwrap()]);
    assert!(out.contains("tls_query=refused"), "{out}");
}

/// The session of docs/server.md: `examples/owner.toml` (its data paths made absolute, its
/// ledger in a fresh directory), Alice's Argon2id hash, and the query that page prints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_configuration_and_session() {
    let dir = test_dir("readme");
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/owner.toml"))
        .unwrap()
        .replace("../data/", concat!(env!("CARGO_MANIFEST_DIR"), "/data/"));
    let config = dir.join("owner.toml");
    std::fs::write(&config, text).unwrap();
    let server = Server::start(&config);
    assert!(login(&server.url(), "alice", "alice").await.is_err());
    let mut alice = login(&server.url(), "alice", "alice-demo-password")
        .await
        .unwrap();
    let batches = query(
        &mut alice,
        "SELECT dp_rr_ci(outcome, exposed, 1.0) AS rr FROM visits",
    )
    .await
    .unwrap();
    let rr = batches[0].column(0).as_struct();
    let lower = rr
        .column_by_name("lower")
        .unwrap()
        .as_primitive::<Float64Type>()
        .value(0);
    let upper = rr
        .column_by_name("upper")
        .unwrap()
        .as_primitive::<Float64Type>()
        .value(0);
    assert!(lower < upper, "{lower} {upper}");
    assert_eq!(ledger_charges(&dir.join("alice.ledger")), vec![(1.0, 0.0)]);
}
