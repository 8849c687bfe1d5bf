//! The Flight SQL service: handshake, statements, prepared statements and catalog metadata,
//! each call on the caller's own locked session.
//!
//! A query is planned — analysed and charged — when the client asks for its `FlightInfo`, and
//! the physical plan is kept under a one-use ticket: `DoGet` streams it once, so one charge
//! buys one release; a second `DoGet` of the same ticket is refused. Executing a prepared
//! statement again plans, and charges, again.

use super::auth::{self, LoginGate};
use super::executors::{execute_on, Executor, Executors};
use super::session::{AnalystSession, Pending, Prepared, QuerySlot, QuerySlots, Sessions};
use super::Execution;
use crate::owner::connections::ConnectionInfo;
use crate::owner::{Owner, ServerConfig};
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables, CommandPreparedStatementQuery,
    CommandStatementQuery, CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt,
    SqlInfo, SqlSupportedTransaction, TicketStatementQuery,
};
use arrow_flight::{
    ActionType, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse,
    IpcMessage, SchemaAsIpc, Ticket,
};
use datafusion::common::ParamValues;
use datafusion::error::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::prelude::SessionContext;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status, Streaming};

/// The Arrow Flight SQL service of `dp-server`.
pub struct DpFlightSqlService {
    owner: Arc<Owner>,
    execution: Execution,
    sessions: Arc<Sessions>,
    logins: LoginGate,
    queries: QuerySlots,
    executors: Arc<Executors>,
    server: ServerConfig,
}

/// A result stream not read to its end within the query deadline and this grace period is
/// stopped and its query slot freed.
const UNREAD_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// The same without a deadline.
const UNREAD_WITHOUT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// A task aborted when this is dropped (a result stream's timer, when the stream ends).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The Flight action that cancels a query (Flight's `CancelFlightInfo`).
const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";

/// The Flight action that ends the caller's session (Flight's `CloseSession`); the body
/// (`CloseSessionRequest`) is empty.
const CLOSE_SESSION: &str = "CloseSession";

/// Flight's `CloseSessionResult { status: CLOSED }` as protobuf (field 1, varint 1): the
/// arrow-flight crate does not generate the session messages.
const CLOSE_SESSION_CLOSED: [u8; 2] = [0x08, 0x01];

impl DpFlightSqlService {
    /// `CancelFlightInfo`: cancels the caller's queries named by the `FlightInfo`'s tickets.
    #[allow(clippy::result_large_err)]
    fn cancel_flight_info(
        &self,
        request: Request<arrow_flight::Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let session = self.session(&request)?;
        let cancel = arrow_flight::CancelFlightInfoRequest::decode(request.get_ref().body.clone())
            .map_err(|e| Status::invalid_argument(format!("CancelFlightInfoRequest: {e}")))?;
        let mut cancelled = false;
        for endpoint in cancel.info.map(|info| info.endpoint).unwrap_or_default() {
            let Some(ticket) = endpoint.ticket else {
                continue;
            };
            let statement = Any::decode(ticket.ticket)
                .ok()
                .and_then(|any| any.unpack::<TicketStatementQuery>().ok().flatten());
            if let Some(statement) = statement {
                cancelled |= session.cancel(&statement.statement_handle);
            }
        }
        let status = match cancelled {
            true => arrow_flight::CancelStatus::Cancelled,
            false => arrow_flight::CancelStatus::NotCancellable,
        };
        let result = arrow_flight::CancelFlightInfoResult::new(status);
        let output = futures::stream::iter([Ok(arrow_flight::Result {
            body: result.encode_to_vec().into(),
        })]);
        Ok(Response::new(Box::pin(output)))
    }

    /// The service for `owner`'s configuration, with its `[server]` limits (sessions, logins,
    /// queries at once, parameter sizes), executing each analyst's queries on the analyst's
    /// runtime of `executors`.
    pub fn new(
        owner: Arc<Owner>,
        execution: Execution,
        sessions: Arc<Sessions>,
        executors: Arc<Executors>,
    ) -> Self {
        let server = owner.config().server.clone();
        let logins = LoginGate::new(owner.config());
        Self {
            owner,
            execution,
            sessions,
            logins,
            queries: QuerySlots::new(&server),
            executors,
            server,
        }
    }

    /// The bearer token of a request's `authorization` header.
    #[allow(clippy::result_large_err)]
    fn token<T>(request: &Request<T>) -> Result<String, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                Status::unauthenticated(
                    "no bearer token: log in first (Flight handshake with user name and password)",
                )
            })?;
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .ok_or_else(|| {
                Status::unauthenticated("expected an 'authorization: Bearer TOKEN' header")
            })?;
        Ok(token.trim().to_string())
    }

    /// The caller's session, from its `authorization: Bearer TOKEN` header. A valid token
    /// makes the call's connection an analyst's (out of the strangers' share and login window,
    /// its idle time started again: `connections.rs`).
    #[allow(clippy::result_large_err)]
    fn session<T>(&self, request: &Request<T>) -> Result<Arc<AnalystSession>, Status> {
        let session = self.sessions.get(&Self::token(request)?)?;
        if let Some(connection) = Self::connection(request) {
            connection.authenticated();
        }
        Ok(session)
    }

    /// The call's connection, as the connection gate accepted it (`None` only when the
    /// service is served without the gate).
    fn connection<T>(request: &Request<T>) -> Option<&ConnectionInfo> {
        request.extensions().get::<ConnectionInfo>()
    }
}

/// A DataFusion error as a gRPC status carrying the one line `dpsql` prints.
pub fn status(error: &DataFusionError) -> Status {
    let message = crate::sql::errors::one_line_error(error);
    match error.find_root() {
        _ if message.starts_with("dp budget exceeded") => Status::resource_exhausted(message),
        DataFusionError::Plan(_)
        | DataFusionError::SQL(..)
        | DataFusionError::SchemaError(..)
        | DataFusionError::Configuration(_)
        | DataFusionError::NotImplemented(_) => Status::invalid_argument(message),
        DataFusionError::ResourcesExhausted(_) => Status::resource_exhausted(message),
        _ => Status::internal(message),
    }
}

fn schema_bytes(schema: &Schema) -> Result<prost::bytes::Bytes, Status> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &Default::default())
        .try_into()
        .map_err(|e: arrow::error::ArrowError| Status::internal(format!("schema encoding: {e}")))?;
    Ok(bytes)
}

fn flight_info(
    schema: &Schema,
    ticket: Any,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("schema encoding: {e}")))?
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket.encode_to_vec())))
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

type FlightDataStream =
    Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;

fn batch_response(schema: SchemaRef, batch: RecordBatch) -> Response<FlightDataStream> {
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::iter([Ok(batch)]))
        .map_err(Status::from);
    Response::new(Box::pin(stream))
}

fn sql_info() -> &'static SqlInfoData {
    static INFO: OnceLock<SqlInfoData> = OnceLock::new();
    INFO.get_or_init(|| {
        let mut builder = SqlInfoDataBuilder::new();
        builder.append(SqlInfo::FlightSqlServerName, "datafusion-dp");
        builder.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        builder.append(SqlInfo::FlightSqlServerArrowVersion, "1.3");
        builder.append(SqlInfo::FlightSqlServerReadOnly, true);
        builder.append(SqlInfo::FlightSqlServerSql, true);
        builder.append(SqlInfo::FlightSqlServerSubstrait, false);
        builder.append(
            SqlInfo::FlightSqlServerTransaction,
            SqlSupportedTransaction::None as i32,
        );
        builder.append(SqlInfo::FlightSqlServerCancel, true);
        builder.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
        builder.append(SqlInfo::SqlDdlCatalog, false);
        builder.append(SqlInfo::SqlDdlSchema, false);
        builder.append(SqlInfo::SqlDdlTable, false);
        builder
            .build()
            .expect("static SqlInfo values have supported types")
    })
}

/// What a statement is planned for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// A query (`GetFlightInfo`): its result is kept under a ticket for one `DoGet`.
    Query,
    /// A `DoPut` of `CommandStatementUpdate`: a statement without a result (`SET`, `RESET`,
    /// `PREPARE`, `DEALLOCATE`), run at once; a query is refused before it is analysed.
    Update,
}

/// Sets its flag when dropped: the request that is waiting for a statement's planning is gone
/// (the client gave up), so the planning stops at its next checkpoint
/// ([`crate::sql::privacy::session::limits::planning_checkpoint`]).
struct AbandonOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Runs `planning` on a planning thread of its own
/// ([`crate::sql::privacy::session::limits::on_planning_stack`]), holding `held` (its planning
/// permit, its query slot) until the planning itself has stopped, whatever happened to the
/// request: a client that gives up (drops its call) does not free them while its statement is
/// still planned, so an analyst never has more statements planned at once than permits. The
/// planning is watched ([`crate::sql::privacy::session::limits::watch_planning`]): it stops at
/// its next checkpoint once the request is gone or the session's `query_timeout_seconds` has
/// passed.
async fn on_watched_planning_thread<T: Send + 'static>(
    session: &AnalystSession,
    held: impl Send + 'static,
    planning: impl std::future::Future<Output = datafusion::error::Result<T>> + Send + 'static,
) -> datafusion::error::Result<T> {
    let abandoned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _abandon = AbandonOnDrop(Arc::clone(&abandoned));
    let limit = crate::sql::privacy::session::limits::query_deadline(&session.ctx);
    crate::sql::privacy::session::limits::on_planning_stack(async move {
        let _held = held;
        let _watch = crate::sql::privacy::session::limits::watch_planning(limit, abandoned);
        planning.await
    })
    .await
}

/// Plans `sql` (with `params` bound) as the session's analyst: analysed and charged now.
/// Planned, physical plan included, on a thread with a large stack
/// ([`crate::sql::privacy::session::limits::on_planning_stack`]), after the statement limits,
/// with the query's own memory pool (`executor`). The query holds `slot` from here to the end
/// of its result; it is planned when one of the analyst's planning permits is free.
///
/// The permit is held by the planning work itself ([`on_watched_planning_thread`]); the slot
/// by the plan it makes, and dropped with it if planning fails or its request is gone. The
/// planning stops at its next checkpoint (between planning stages and between optimiser rules)
/// once the request is gone or past the session's `query_timeout_seconds`.
async fn plan_statement(
    session: &Arc<AnalystSession>,
    sql: &str,
    params: Option<ParamValues>,
    slot: QuerySlot,
    executor: Arc<Executor>,
    purpose: Purpose,
) -> Result<Pending, Status> {
    let permit = executor.planning_permit().await?;
    let planner = Arc::clone(session);
    let sql = sql.to_string();
    let planned = on_watched_planning_thread(session, permit, async move {
        use crate::sql::privacy::session::limits::planning_checkpoint;
        let session = planner;
        // This future runs on the planning thread alone: a charge made while it runs is its
        // query's (crate::sql::accounting::budget::charges_on_this_thread).
        let charges_before = crate::sql::accounting::budget::charges_on_this_thread();
        let planned = async {
            let ctx: &SessionContext = &session.ctx;
            let mut frame = crate::owner::analyst_sql(ctx, &sql).await?;
            if purpose == Purpose::Update && !is_statement_result(frame.logical_plan()) {
                return Err(DataFusionError::Plan(
                    "a query sent as an update (DoPut CommandStatementUpdate): this server is \
                     read-only, and an update runs only statements without a result (SET, \
                     RESET, PREPARE, DEALLOCATE); send a query as CommandStatementQuery \
                     (GetFlightInfo, then DoGet); nothing was charged"
                        .to_string(),
                ));
            }
            if let Some(params) = params {
                frame = frame.with_param_values(params)?;
            }
            planning_checkpoint()?;
            // DP calls not yet bound: planning binds and charges them.
            let charged = crate::sql::accounting::budget::has_unbound_calls(frame.logical_plan())?;
            // The query's own configuration, with its cancellation, which its function calls
            // check (crate::sql::cooperative::QueryCancellation; set when its stream is
            // dropped: executors.rs), and its own memory pool within its analyst's (memory.rs).
            let (mut state, logical) = frame.into_parts();
            crate::sql::cooperative::QueryCancellation::install(state.config_mut().options_mut());
            state.mark_start_execution();
            let task = Arc::new(executor.query_task(TaskContext::from(&state)));
            // Stops between optimiser rules (limits::PlanningCheckpoint). No check after it:
            // a finished plan is kept, and an abandoned request's is dropped below.
            let plan = state.create_physical_plan(&logical).await?;
            Ok(Pending::new(plan, task, slot, charged))
        }
        .await;
        let charged = crate::sql::accounting::budget::charges_on_this_thread() > charges_before;
        // An abandoned request's plan (and its slot) is dropped here, on the planning thread.
        Ok(planned.map_err(|e| (e, charged)))
    })
    .await
    .map_err(|e| status(&e))?;
    // An error after the charge (in the optimiser or the physical planner) keeps the charge,
    // and says so.
    planned.map_err(|(e, charged)| after_charge(status(&e), charged))
}

/// Plans a query ([`plan_statement`]) and keeps it under a new one-use ticket. Returns the
/// ticket and the result schema.
async fn plan_query(
    session: &Arc<AnalystSession>,
    sql: &str,
    params: Option<ParamValues>,
    slot: QuerySlot,
    executor: Arc<Executor>,
) -> Result<(Vec<u8>, SchemaRef), Status> {
    let pending = plan_statement(session, sql, params, slot, executor, Purpose::Query).await?;
    let schema = pending.plan.schema();
    let handle = session
        .add_pending(pending)
        .ok_or_else(|| Status::internal("no randomness from the OS for a ticket"))?;
    Ok((handle, schema))
}

/// Whether `plan` is what a statement without a result plans to (`SET`, `RESET`, `PREPARE`,
/// `DEALLOCATE` answer an empty relation of no rows); a query never plans to that alone.
fn is_statement_result(plan: &datafusion::logical_expr::LogicalPlan) -> bool {
    matches!(
        plan,
        datafusion::logical_expr::LogicalPlan::EmptyRelation(empty) if !empty.produce_one_row
    )
}

/// The most bytes of filters one catalog command may carry (1 KiB): its catalog name, schema
/// and table name patterns and table types together, each string counted with one byte more
/// (so a list of empty strings counts too), and four bytes per `CommandGetSqlInfo` id. Names
/// and patterns are a few dozen bytes; arrow-flight's builders turn each `LIKE` pattern into a
/// regular expression and compare every table with every type listed, so megabyte patterns
/// made each catalog call cost seconds of CPU and hundreds of MB. Checked before any work.
const MAX_CATALOG_FILTER_BYTES: usize = 1024;

/// Refuses a catalog command whose filters (`strings`, and `ids` SqlInfo ids) are over
/// [`MAX_CATALOG_FILTER_BYTES`], with `InvalidArgument` naming the limit.
#[allow(clippy::result_large_err)]
fn check_catalog_filters<'a>(
    command: &str,
    strings: impl IntoIterator<Item = &'a String>,
    ids: usize,
) -> Result<(), Status> {
    let bytes = strings.into_iter().fold(ids.saturating_mul(4), |total, s| {
        total.saturating_add(s.len()).saturating_add(1)
    });
    match bytes > MAX_CATALOG_FILTER_BYTES {
        true => Err(Status::invalid_argument(format!(
            "{command}: its filters (catalog, patterns, table types, ids) are {bytes} bytes, \
             over the limit of {MAX_CATALOG_FILTER_BYTES} bytes (max_catalog_filter_bytes)"
        ))),
        false => Ok(()),
    }
}

#[allow(clippy::result_large_err)]
fn check_tables_command(query: &CommandGetTables) -> Result<(), Status> {
    check_catalog_filters(
        "CommandGetTables",
        query
            .catalog
            .iter()
            .chain(&query.db_schema_filter_pattern)
            .chain(&query.table_name_filter_pattern)
            .chain(&query.table_types),
        0,
    )
}

#[allow(clippy::result_large_err)]
fn check_schemas_command(query: &CommandGetDbSchemas) -> Result<(), Status> {
    check_catalog_filters(
        "CommandGetDbSchemas",
        query.catalog.iter().chain(&query.db_schema_filter_pattern),
        0,
    )
}

#[allow(clippy::result_large_err)]
fn check_sql_info_command(query: &CommandGetSqlInfo) -> Result<(), Status> {
    check_catalog_filters("CommandGetSqlInfo", [], query.info.len())
}

/// Whether `sql` is one query (`SELECT`, `WITH`, `VALUES`).
fn is_query(sql: &str) -> bool {
    use datafusion::sql::parser::{DFParser, Statement};
    use datafusion::sql::sqlparser::ast;
    matches!(
        DFParser::parse_sql(sql).as_ref().map(|s| s.iter().collect::<Vec<_>>()).as_deref(),
        Ok([Statement::Statement(s)]) if matches!(s.as_ref(), ast::Statement::Query(_))
    )
}

/// The parameters (`$1`, `$2`, ...) of a logical plan, in order, as an IPC schema (empty
/// without parameters; a parameter of unknown type is `Null`).
fn parameter_schema(
    plan: &datafusion::logical_expr::LogicalPlan,
) -> Result<prost::bytes::Bytes, Status> {
    let mut types: Vec<_> = plan
        .get_parameter_types()
        .map_err(|e| status(&e))?
        .into_iter()
        .collect();
    if types.is_empty() {
        return Ok(Default::default());
    }
    types.sort_by_key(|(name, _)| {
        name.trim_start_matches('$')
            .parse::<usize>()
            .unwrap_or(usize::MAX)
    });
    let fields: Vec<_> = types
        .into_iter()
        .map(|(name, t)| {
            arrow::datatypes::Field::new(name, t.unwrap_or(arrow::datatypes::DataType::Null), true)
        })
        .collect();
    schema_bytes(&Schema::new(fields))
}

/// The parameter values of a prepared statement: the first row of the bound batch, in order.
fn param_values(batch: &RecordBatch) -> Result<ParamValues, Status> {
    if batch.num_rows() != 1 {
        return Err(Status::invalid_argument(format!(
            "prepared statement parameters: expected one row of values, got {}",
            batch.num_rows()
        )));
    }
    let values = batch
        .columns()
        .iter()
        .map(|column| datafusion::common::ScalarValue::try_from_array(column, 0).map(value_of))
        .collect::<datafusion::error::Result<Vec<_>>>()
        .map_err(|e| status(&e))?;
    Ok(ParamValues::from(values))
}

/// A parameter is one value: a dictionary-encoded one (pandas' categoricals, strings as ADBC
/// may send them) is its value. Left encoded, comparing it with a string column would cast the
/// column to a dictionary, which a locked session refuses over protected rows; an arrow-flight
/// client sends the same value already decoded and is answered.
fn value_of(value: datafusion::common::ScalarValue) -> datafusion::common::ScalarValue {
    match value {
        datafusion::common::ScalarValue::Dictionary(_, inner) => value_of(*inner),
        other => other,
    }
}

/// A failure of a query after its charge (while it is planned after the analyzer charged it,
/// or while its result streams): when the query was charged, the message says the charge is
/// kept (the failure, a resources error or the deadline, could depend on the data).
fn after_charge(status: Status, charged: bool) -> Status {
    match charged {
        false => status,
        true => Status::new(
            status.code(),
            format!(
                "{} (the query's charge is kept: it was spent when the query was planned, and \
                 a failure while it runs can depend on the data)",
                status.message()
            ),
        ),
    }
}

/// The first non-empty batch of a `DoPut` of parameters, reading at most `max_parameter_bytes`
/// bytes and `max_parameter_batches` messages (the schema counts as one): beyond either the
/// stream is refused, not read further, and nothing but the first batch is kept.
async fn first_parameter_batch(
    data: PeekableFlightDataStream,
    server: &ServerConfig,
) -> Result<Option<RecordBatch>, Status> {
    let (max_bytes, max_messages) = (server.max_parameter_bytes, server.max_parameter_batches);
    let mut bytes = 0usize;
    let mut messages = 0usize;
    let counted = data.map(move |message| {
        let message = message?;
        bytes = bytes.saturating_add(
            message.data_header.len() + message.data_body.len() + message.app_metadata.len(),
        );
        messages += 1;
        if bytes > max_bytes {
            return Err(Status::resource_exhausted(format!(
                "prepared statement parameters: over the limit of {max_bytes} bytes \
                 (max_parameter_bytes): send one row of values"
            )));
        }
        if messages > max_messages {
            return Err(Status::resource_exhausted(format!(
                "prepared statement parameters: over the limit of {max_messages} messages \
                 (max_parameter_batches): send one batch of one row"
            )));
        }
        Ok(message)
    });
    let mut batches = arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(
        counted.map_err(FlightError::from),
    );
    let mut first = None;
    while let Some(batch) = batches.next().await {
        let batch = batch.map_err(|e| match e {
            // The limits above, as they are.
            FlightError::Tonic(status) => *status,
            // What the analyst sent does not decode (a type nested past the IPC reader's
            // depth, a malformed message): their input, not the server's fault.
            other => Status::invalid_argument(format!(
                "prepared statement parameters: the batch does not decode: {}",
                other.to_string().trim_end()
            )),
        })?;
        if first.is_none() && batch.num_rows() > 0 {
            first = Some(batch);
        }
    }
    Ok(first)
}

#[tonic::async_trait]
impl FlightSqlService for DpFlightSqlService {
    type FlightService = DpFlightSqlService;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let (name, password) = auth::parse_basic(&header).ok_or_else(|| {
            Status::unauthenticated("log in with a user name and password (Basic authorization)")
        })?;
        // The peer's address: the connection gate's (plain TCP and TLS), else tonic's.
        let peer = Self::connection(&request)
            .and_then(|connection| connection.peer)
            .or_else(|| request.remote_addr())
            .map(|address| address.ip());
        let analyst = self
            .logins
            .login(Arc::clone(&self.owner), &name, password, peer)
            .await?;
        let ctx = self
            .execution
            .analyst_session(&self.owner, &analyst)
            .await
            .map_err(|e| status(&e))?;
        let token = self
            .sessions
            .open(&analyst.name, ctx)
            .ok_or_else(|| Status::internal("no randomness from the OS for a token"))?;
        if let Some(connection) = Self::connection(&request) {
            connection.authenticated();
        }
        eprintln!("dp-server: {} logged in", auth::log_name(&name));
        let bearer = MetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| Status::internal("token header"))?;
        let output = futures::stream::iter([Ok(HandshakeResponse {
            protocol_version: 0,
            payload: token.clone().into(),
        })]);
        let mut response: Response<Pin<Box<dyn Stream<Item = _> + Send>>> =
            Response::new(Box::pin(output));
        response.metadata_mut().insert("authorization", bearer);
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let session = self.session(&request)?;
        let slot = self.queries.acquire(&session.analyst).await?;
        let executor = self.executors.of(&session.analyst)?;
        let (handle, schema) = plan_query(&session, &query.query, None, slot, executor).await?;
        let ticket = TicketStatementQuery {
            statement_handle: handle.into(),
        };
        flight_info(&schema, ticket.as_any(), request.into_inner())
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let session = self.session(&request)?;
        let Pending {
            plan,
            task,
            slot,
            charged,
            ..
        } = session.take_pending(&ticket.statement_handle).ok_or_else(|| {
            Status::not_found(
                "unknown or already used result ticket: a result is sent once; run the query again (it is charged again)",
            )
        })?;
        let (abort, registration, running) = session.start_running(&ticket.statement_handle);
        let schema = plan.schema();
        let failed = move |e: &DataFusionError| after_charge(status(e), charged);
        // Executed on the analyst's own runtime (executors.rs), so that other analysts' queries
        // and the Flight calls keep their share of the CPU.
        let executor = self.executors.of(&session.analyst)?;
        let batches = execute_on(executor, plan, task);
        // The owner's per-query deadline, from the start of the stream to its last batch,
        // watched here, on the Flight runtime: dropping the stream there stops the execution.
        let batches =
            crate::sql::privacy::session::limits::within_session_deadline(&session.ctx, batches);
        // Its first batch, error or end released on the analyst's schedule (`[limits]
        // release_quantum_ms`), so that when it comes does not tell the data.
        let batches =
            crate::sql::privacy::session::release_time::on_release_schedule(&session.ctx, batches);
        // The query's slot is held until the stream ends or the client drops it. A client that
        // stops reading never polls the stream, so neither would happen (nor the deadline, which
        // runs as the stream is polled): a timer frees the slot and stops the query a grace
        // period after the deadline.
        let slot = Arc::new(std::sync::Mutex::new(Some(slot)));
        let unread = crate::sql::privacy::session::limits::query_deadline(&session.ctx)
            .unwrap_or(UNREAD_WITHOUT_DEADLINE)
            + UNREAD_GRACE;
        let timed_out = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let timer = AbortOnDrop(tokio::spawn({
            let (slot, abort, timed_out) =
                (Arc::clone(&slot), abort.clone(), Arc::clone(&timed_out));
            async move {
                tokio::time::sleep(unread).await;
                timed_out.store(true, std::sync::atomic::Ordering::SeqCst);
                abort.abort();
                slot.lock().unwrap_or_else(|p| p.into_inner()).take();
            }
        }));
        let batches = batches.map(move |batch| {
            let _held = (&slot, &timer);
            batch.map_err(|e| FlightError::from(failed(&e)))
        });
        // CancelFlightInfo (or the timer) stops the stream, which then ends with an error
        // saying so.
        let cancelled = futures::stream::once(async move {
            drop(running);
            let message = match timed_out.load(std::sync::atomic::Ordering::SeqCst) {
                true => format!(
                    "the result was not read within {} s (query_timeout_seconds and {} s): \
                     the query was stopped",
                    unread.as_secs() - UNREAD_GRACE.as_secs(),
                    UNREAD_GRACE.as_secs()
                ),
                false => "the query was cancelled (CancelFlightInfo)".to_string(),
            };
            match abort.is_aborted() {
                true => Some(Err(FlightError::from(after_charge(
                    Status::cancelled(message),
                    charged,
                )))),
                false => None,
            }
        })
        .filter_map(std::future::ready);
        let batches = futures::stream::Abortable::new(batches, registration).chain(cancelled);
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(batches)
            .map_err(Status::from);
        Ok(Response::new(Box::pin(stream)))
    }

    /// A statement without a result (`SET`, `RESET`, `PREPARE`, `DEALLOCATE`): planned as a
    /// query is ([`plan_statement`]: a query slot, a planning permit, the planning thread, the
    /// query's memory pool) and run under the session's deadline, its rows counted as they
    /// stream, never held. A query is refused before it is analysed (this server is read-only:
    /// an update of a query would spend budget on a result nobody receives).
    async fn do_put_statement_update(
        &self,
        update: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let session = self.session(&request)?;
        let slot = self.queries.acquire(&session.analyst).await?;
        let executor = self.executors.of(&session.analyst)?;
        let Pending {
            plan,
            task,
            slot,
            charged,
            ..
        } = plan_statement(
            &session,
            &update.query,
            None,
            slot,
            Arc::clone(&executor),
            Purpose::Update,
        )
        .await?;
        let stream = execute_on(executor, plan, task);
        let stream =
            crate::sql::privacy::session::limits::within_session_deadline(&session.ctx, stream);
        let rows = stream
            .try_fold(0i64, |rows, batch| {
                std::future::ready(Ok(rows.saturating_add(batch.num_rows() as i64)))
            })
            .await
            .map_err(|e| after_charge(status(&e), charged))?;
        drop(slot);
        Ok(rows)
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let session = self.session(&request)?;
        // The result and parameter schemas from the logical plan of a query (nothing is
        // analysed, charged or run here); other statements have none. Within the statement
        // limits and on a large stack, as every analyst statement (crate::sql::privacy::session::limits).
        // Planned as a query is (plan_statement): a slot and a planning permit, held by the
        // planning work itself until it stops, which it does at a checkpoint once the request
        // is gone or past the session's deadline.
        crate::sql::privacy::session::limits::check_statement_size(&query.query)
            .map_err(|e| status(&e))?;
        let slot = self.queries.acquire(&session.analyst).await?;
        let permit = self
            .executors
            .of(&session.analyst)?
            .planning_permit()
            .await?;
        let ctx = session.ctx.clone();
        let sql = query.query.clone();
        let (dataset, parameters) =
            on_watched_planning_thread(&session, (slot, permit), async move {
                if !is_query(&sql) {
                    return Ok(Ok(Default::default()));
                }
                let plan = crate::sql::privacy::session::lock::limited_plan(&ctx, &sql).await?;
                crate::sql::privacy::session::limits::planning_checkpoint()?;
                Ok(schema_bytes(plan.schema().as_arrow())
                    .and_then(|dataset| Ok((dataset, parameter_schema(&plan)?))))
            })
            .await
            .map_err(|e| status(&e))??;
        let handle = session.add_prepared(Prepared {
            sql: query.query,
            params: None,
        })?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.into(),
            dataset_schema: dataset,
            parameter_schema: parameters,
        })
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let session = self.session(&request)?;
        let params = first_parameter_batch(request.into_inner(), &self.server).await?;
        session
            .bind_prepared(&query.prepared_statement_handle, params)
            .ok_or_else(|| Status::not_found("unknown prepared statement handle"))?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(query.prepared_statement_handle),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let session = self.session(&request)?;
        let prepared = session
            .prepared(&query.prepared_statement_handle)
            .ok_or_else(|| Status::not_found("unknown prepared statement handle"))?;
        let params = match &prepared.params {
            Some(batch) => Some(param_values(batch)?),
            None => None,
        };
        let slot = self.queries.acquire(&session.analyst).await?;
        let executor = self.executors.of(&session.analyst)?;
        let (handle, schema) = plan_query(&session, &prepared.sql, params, slot, executor).await?;
        let ticket = TicketStatementQuery {
            statement_handle: handle.into(),
        };
        flight_info(&schema, ticket.as_any(), request.into_inner())
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> Result<(), Status> {
        let session = self.session(&request)?;
        session.close_prepared(&query.prepared_statement_handle);
        Ok(())
    }

    /// `CloseSession` (also `close_session`): ends the caller's session; its token, tickets
    /// and prepared statements no longer work.
    async fn do_action_fallback(
        &self,
        request: Request<arrow_flight::Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let kind = request.get_ref().r#type.clone();
        if kind == CANCEL_FLIGHT_INFO {
            return self.cancel_flight_info(request);
        }
        if kind != CLOSE_SESSION && kind != "close_session" {
            return Err(Status::invalid_argument(format!(
                "unknown action {kind:?} (this server has CreatePreparedStatement, \
                 ClosePreparedStatement, CancelFlightInfo and CloseSession)"
            )));
        }
        let token = Self::token(&request)?;
        self.sessions.get(&token)?;
        self.sessions.close(&token);
        let output = futures::stream::iter([Ok(arrow_flight::Result {
            body: CLOSE_SESSION_CLOSED.to_vec().into(),
        })]);
        Ok(Response::new(Box::pin(output)))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(vec![
            Ok(ActionType {
                r#type: CANCEL_FLIGHT_INFO.to_string(),
                description: "Cancels a query of the caller's session: an unfetched result is \
                              dropped, a streaming one stopped (a charge is kept).\n\
                              Request Message: CancelFlightInfoRequest\n\
                              Response Message: CancelFlightInfoResult"
                    .to_string(),
            }),
            Ok(ActionType {
                r#type: CLOSE_SESSION.to_string(),
                description: "Closes the caller's session (its token, result tickets and prepared \
                          statements).\nRequest Message: CloseSessionRequest\n\
                          Response Message: CloseSessionResult"
                    .to_string(),
            }),
        ])
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.session(&request)?;
        let schema = query.into_builder().schema();
        flight_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let session = self.session(&request)?;
        let mut builder = query.into_builder();
        for catalog in session.ctx.catalog_names() {
            builder.append(catalog);
        }
        let schema = builder.schema();
        let batch = builder
            .build()
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(batch_response(schema, batch))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.session(&request)?;
        check_schemas_command(&query)?;
        let schema = query.clone().into_builder().schema();
        flight_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let session = self.session(&request)?;
        check_schemas_command(&query)?;
        // One of the analyst's query slots while the catalog is read and filtered: catalog
        // calls queue with the analyst's queries rather than flood the Flight runtime.
        let _slot = self.queries.acquire(&session.analyst).await?;
        let mut builder = query.into_builder();
        for catalog_name in session.ctx.catalog_names() {
            if let Some(catalog) = session.ctx.catalog(&catalog_name) {
                for schema_name in catalog.schema_names() {
                    builder.append(&catalog_name, schema_name);
                }
            }
        }
        let schema = builder.schema();
        let batch = builder
            .build()
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(batch_response(schema, batch))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.session(&request)?;
        check_tables_command(&query)?;
        let schema = query.clone().into_builder().schema();
        flight_info(&schema, query.as_any(), request.into_inner())
    }

    /// Table names, types and Arrow schemas: public metadata only (no row counts, no
    /// statistics).
    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let session = self.session(&request)?;
        check_tables_command(&query)?;
        // As for schemas: one of the analyst's query slots while the catalog is read.
        let _slot = self.queries.acquire(&session.analyst).await?;
        let mut builder = query.into_builder();
        for catalog_name in session.ctx.catalog_names() {
            let Some(catalog) = session.ctx.catalog(&catalog_name) else {
                continue;
            };
            for schema_name in catalog.schema_names() {
                let Some(schema) = catalog.schema(&schema_name) else {
                    continue;
                };
                for table_name in schema.table_names() {
                    let Ok(Some(table)) = schema.table(&table_name).await else {
                        continue;
                    };
                    let table_type = match table.table_type() {
                        datafusion::datasource::TableType::Base => "TABLE",
                        datafusion::datasource::TableType::View => "VIEW",
                        datafusion::datasource::TableType::Temporary => "LOCAL TEMPORARY",
                    };
                    builder
                        .append(
                            &catalog_name,
                            &schema_name,
                            &table_name,
                            table_type,
                            table.schema().as_ref(),
                        )
                        .map_err(|e| Status::internal(e.to_string()))?;
                }
            }
        }
        let schema = builder.schema();
        let batch = builder
            .build()
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(batch_response(schema, batch))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.session(&request)?;
        let schema = query.into_builder().schema();
        flight_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.session(&request)?;
        let mut builder = query.into_builder();
        for table_type in ["LOCAL TEMPORARY", "TABLE", "VIEW"] {
            builder.append(table_type);
        }
        let schema = builder.schema();
        let batch = builder
            .build()
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(batch_response(schema, batch))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.session(&request)?;
        check_sql_info_command(&query)?;
        let schema = query.clone().into_builder(sql_info()).schema();
        flight_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.session(&request)?;
        check_sql_info_command(&query)?;
        let builder = query.into_builder(sql_info());
        let schema = builder.schema();
        let batch = builder
            .build()
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(batch_response(schema, batch))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every catalog command's filters count against one limit, named in the refusal: the
    /// patterns and table types of `GetTables` (an empty string counts one byte), the pattern
    /// of `GetDbSchemas`, the ids of `GetSqlInfo`.
    #[test]
    fn catalog_filters_are_bounded() {
        let within = CommandGetTables {
            table_name_filter_pattern: Some("x".repeat(MAX_CATALOG_FILTER_BYTES - 1)),
            ..Default::default()
        };
        assert!(check_tables_command(&within).is_ok());
        let refused = [
            CommandGetTables {
                table_name_filter_pattern: Some("x".repeat(MAX_CATALOG_FILTER_BYTES)),
                ..Default::default()
            },
            CommandGetTables {
                table_types: vec![String::new(); MAX_CATALOG_FILTER_BYTES + 1],
                ..Default::default()
            },
            CommandGetTables {
                catalog: Some("c".repeat(600)),
                db_schema_filter_pattern: Some("s".repeat(600)),
                ..Default::default()
            },
        ];
        for command in refused {
            let err = check_tables_command(&command).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            assert!(err.message().contains("max_catalog_filter_bytes"), "{err}");
        }
        let schemas = CommandGetDbSchemas {
            catalog: None,
            db_schema_filter_pattern: Some("%".repeat(MAX_CATALOG_FILTER_BYTES)),
        };
        assert!(check_schemas_command(&schemas).is_err());
        let info = CommandGetSqlInfo {
            info: vec![0; MAX_CATALOG_FILTER_BYTES / 4 + 1],
        };
        assert!(check_sql_info_command(&info).is_err());
        assert!(check_sql_info_command(&CommandGetSqlInfo { info: vec![0; 100] }).is_ok());
    }

    /// The worst patterns within the limit cost little: arrow's `like` kernel turns a pattern
    /// with wildcards inside into a regular expression, compiled once per call and matched in
    /// time linear in the name; two patterns of alternating `_%` near the limit, over 1,000
    /// tables with 100-byte names, take milliseconds.
    #[test]
    fn the_worst_patterns_within_the_limit_are_cheap() {
        let pattern = "_%".repeat(MAX_CATALOG_FILTER_BYTES / 4 - 1);
        let command = CommandGetTables {
            db_schema_filter_pattern: Some(pattern.clone()),
            table_name_filter_pattern: Some(pattern),
            ..Default::default()
        };
        check_tables_command(&command).unwrap();
        let started = std::time::Instant::now();
        let mut builder = command.into_builder();
        let schema = Schema::empty();
        for i in 0..1000 {
            let name = format!("{i:0>100}");
            builder
                .append("datafusion", &name, &name, "TABLE", &schema)
                .unwrap();
        }
        let batch = builder.build().unwrap();
        let took = started.elapsed();
        eprintln!("two worst patterns over 1,000 tables: {took:?}");
        assert_eq!(batch.num_rows(), 0);
        assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    }
}
