//! Extension codecs that carry a bound DP call across processes.
//!
//! Ballista sends the client's optimised logical plan to its scheduler and each stage's
//! physical plan to its executors through `datafusion-proto`. A user-defined aggregate travels
//! by name unless a codec writes its definition: with the name alone, a node would look up the
//! registered, *unbound* statistic and lose the call's options and calibrated noise. These
//! codecs write a bound call's [`CallPlan`](crate::sql::functions::aggregate::CallPlan) wire form
//! ([`crate::sql::functions::aggregate::wire`]) and hand everything else to Ballista's own codecs (file
//! formats, shuffle readers and writers).
//!
//! The physical codec also strips, from each decoded stage, the sorts a task's partitions
//! leave without a partition ([`super::unread_sort`], a Ballista and DataFusion workaround).

use crate::distributed::unread_sort::without_unread_sorts;
use crate::sql::cooperative::YieldExec;
use crate::sql::functions::aggregate::{statistic_named, DpAggregate};
use crate::sql::privacy::exec::bound_contributions::{
    BoundContributionsExec, BoundSpec, CODEC_MARKER as BOUND_EXEC, NODE_CODEC_MARKER as BOUND_NODE,
};
use crate::sql::privacy::exec::drain::{DrainOnDropExec, DrainedExec};
use crate::sql::privacy::exec::protected_scan::ProtectedScanExec;
use crate::sql::privacy::exec::release::ReleaseOnceExec;
use crate::sql::privacy::rewrite::bounding::node::BoundContributions;
use crate::sql::privacy::rewrite::total::total_function;
use crate::sql::privacy::udf::eager;
use crate::sql::privacy::udf::total::{operator_from_name, TryBinary, TryCastRows, TryFunction};
use arrow::datatypes::SchemaRef;
use ballista_core::serde::{BallistaLogicalExtensionCodec, BallistaPhysicalExtensionCodec};
use datafusion::catalog::TableProvider;
use datafusion::common::{plan_err, Result, TableReference};
use datafusion::datasource::file_format::FileFormatFactory;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{
    AggregateUDF, Extension, LogicalPlan, ScalarUDF, ScalarUDFImpl, WindowUDF,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use std::sync::Arc;

/// A bound DP call's bytes, or `None` for any other aggregate (left to the inner codec).
/// A [`ReleaseOnceExec`] travels as this marker (its input is encoded as a child); each
/// decoded copy runs each of its partitions once.
const RELEASE_ONCE: &[u8] = b"datafusion-dp/release-once/1";
/// A [`ProtectedScanExec`] (a locked cluster's scan of a protected table) likewise.
const PROTECTED_SCAN: &[u8] = b"datafusion-dp/protected-scan/1";
/// A [`YieldExec`] (above every join: [`crate::sql::cooperative`]) likewise.
const YIELD: &[u8] = b"datafusion-dp/yield/1";
/// A [`DrainOnDropExec`] and a [`DrainedExec`] (around every join and limit over protected
/// rows: [`crate::sql::privacy::exec::drain`]) likewise; a decoded `DrainedExec` finds the
/// `DrainOnDropExec`s under it as it is made.
const DRAIN_ON_DROP: &[u8] = b"datafusion-dp/drain-on-drop/1";
const DRAINED: &[u8] = b"datafusion-dp/drained/1";

/// A [`TryBinary`] travels as this marker and its operator's name; a [`TryFunction`] as its
/// marker, the wrapped function's name, a newline and that function's own definition (empty
/// for a function found by name: DataFusion's and this crate's).
const TRY_BINARY: &[u8] = b"datafusion-dp/try-binary/1:";
const TRY_FUNCTION: &[u8] = b"datafusion-dp/try/1:";
/// A [`TryCastRows`] travels as its marker and its type's name.
const TRY_CAST: &[u8] = b"datafusion-dp/try-cast/1:";

/// What a locked cluster's scheduler answers a client's plan that names one of the privacy
/// layer's internal functions or nodes (the scheduler rewrites plans itself; a client never
/// sends them).
const INTERNAL_REFUSED: &str = "this Ballista cluster is locked by its data owner: a client's \
    plan cannot name the privacy planner's internal";

/// The scalar function registered as `name` in a session with DataFusion's default functions
/// and this crate's, where a decoded [`TryFunction`] finds the function it wraps.
fn registered_function(name: &str) -> Result<Arc<ScalarUDF>> {
    use datafusion::execution::FunctionRegistry;
    static FUNCTIONS: std::sync::OnceLock<datafusion::execution::SessionState> =
        std::sync::OnceLock::new();
    let state = FUNCTIONS.get_or_init(|| {
        let ctx = datafusion::prelude::SessionContext::new();
        // Registering functions on a fresh session does not fail; if it did, only this
        // crate's functions would be missing, and their lookup fails below.
        let _ = crate::register(&ctx);
        ctx.state()
    });
    match eager::internal_udf(name) {
        Some(udf) => Ok(udf),
        None => state.udf(name),
    }
}

fn encode_udaf(node: &AggregateUDF) -> Option<Vec<u8>> {
    node.inner().downcast_ref::<DpAggregate>()?.encode()
}

/// The bound DP call `name` written by [`encode_udaf`], or `None` for any other aggregate.
fn decode_udaf(name: &str, buf: &[u8]) -> Option<Result<Arc<AggregateUDF>>> {
    if buf.is_empty() || statistic_named(name).is_none() {
        return None;
    }
    Some(DpAggregate::decode(name, buf).map(|dp| Arc::new(AggregateUDF::new_from_impl(dp))))
}

/// The function methods both codec traits share (same names and signatures): bound DP calls
/// are ours, everything else goes to the inner codec.
macro_rules! function_methods {
    () => {
        fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
            if let Some(op) = buf.strip_prefix(TRY_BINARY) {
                let op = std::str::from_utf8(op).ok().and_then(operator_from_name);
                let Some(op) = op else {
                    return plan_err!("{name}: not an operator this build knows");
                };
                return Ok(Arc::new(ScalarUDF::new_from_impl(TryBinary::new(op))));
            }
            if let Some(to) = buf.strip_prefix(TRY_CAST) {
                let to = std::str::from_utf8(to)
                    .ok()
                    .and_then(|t| t.parse::<arrow::datatypes::DataType>().ok());
                let Some(to) = to else {
                    return plan_err!("{name}: not a type this build knows");
                };
                return Ok(Arc::new(ScalarUDF::new_from_impl(TryCastRows::new(to))));
            }
            if let Some(rest) = buf.strip_prefix(TRY_FUNCTION) {
                let Some(split) = rest.iter().position(|b| *b == b'\n') else {
                    return plan_err!("{name}: malformed definition");
                };
                let inner_name = String::from_utf8_lossy(&rest[..split]).into_owned();
                let inner_buf = &rest[split + 1..];
                let inner = if inner_buf.is_empty() {
                    registered_function(&inner_name)?
                } else {
                    self.try_decode_udf(&inner_name, inner_buf)?
                };
                return Ok(Arc::new(ScalarUDF::new_from_impl(total_function(inner))));
            }
            if let Some(udf) = eager::internal_udf(name) {
                return match self.accept_bound_calls {
                    true => Ok(udf),
                    false => plan_err!("{INTERNAL_REFUSED} function '{name}'"),
                };
            }
            self.inner.try_decode_udf(name, buf)
        }

        fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
            if let Some(binary) = node.inner().downcast_ref::<TryBinary>() {
                buf.extend_from_slice(TRY_BINARY);
                buf.extend_from_slice(binary.name().trim_start_matches("try_").as_bytes());
                return Ok(());
            }
            if let Some(cast) = node.inner().downcast_ref::<TryCastRows>() {
                buf.extend_from_slice(TRY_CAST);
                buf.extend_from_slice(cast.to().to_string().as_bytes());
                return Ok(());
            }
            if let Some(function) = node.inner().downcast_ref::<TryFunction>() {
                let mut inner = Vec::new();
                self.try_encode_udf(function.inner(), &mut inner)?;
                buf.extend_from_slice(TRY_FUNCTION);
                buf.extend_from_slice(function.inner().name().as_bytes());
                buf.push(b'\n');
                buf.extend_from_slice(&inner);
                return Ok(());
            }
            self.inner.try_encode_udf(node, buf)
        }

        fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
            match decode_udaf(name, buf) {
                Some(_) if !self.accept_bound_calls => plan_err!(
                    "{name}: this Ballista cluster is locked by its data owner; its scheduler \
                     binds and charges every DP call itself and refuses a call a client bound. \
                     Connect with datafusion_dp::distributed::remote_context (dpsql --scheduler), \
                     which sends the plan unbound"
                ),
                Some(decoded) => decoded,
                None => self.inner.try_decode_udaf(name, buf),
            }
        }

        fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
            match encode_udaf(node) {
                Some(bytes) => {
                    buf.extend_from_slice(&bytes);
                    Ok(())
                }
                None => self.inner.try_encode_udaf(node, buf),
            }
        }

        fn try_decode_udwf(&self, name: &str, buf: &[u8]) -> Result<Arc<WindowUDF>> {
            self.inner.try_decode_udwf(name, buf)
        }

        fn try_encode_udwf(&self, node: &WindowUDF, buf: &mut Vec<u8>) -> Result<()> {
            self.inner.try_encode_udwf(node, buf)
        }
    };
}

/// Ballista's logical codec, plus bound DP calls.
#[derive(Debug)]
pub struct DpLogicalCodec {
    inner: Arc<dyn LogicalExtensionCodec>,
    /// `false` on a locked cluster's scheduler, where logical plans come from untrusted
    /// clients: a decoded bound call is refused (the scheduler binds calls itself).
    accept_bound_calls: bool,
}

impl Default for DpLogicalCodec {
    fn default() -> Self {
        Self::new(Arc::new(BallistaLogicalExtensionCodec::default()))
    }
}

impl DpLogicalCodec {
    /// Wraps `inner`, which handles everything but bound DP calls.
    pub fn new(inner: Arc<dyn LogicalExtensionCodec>) -> Self {
        Self {
            inner,
            accept_bound_calls: true,
        }
    }

    /// The codec of a locked cluster's scheduler: Ballista's, refusing bound DP calls.
    pub fn refusing_bound_calls() -> Self {
        Self {
            accept_bound_calls: false,
            ..Self::default()
        }
    }
}

impl LogicalExtensionCodec for DpLogicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[LogicalPlan],
        ctx: &TaskContext,
    ) -> Result<Extension> {
        if let Some(spec) = buf.strip_prefix(BOUND_NODE) {
            if !self.accept_bound_calls {
                return plan_err!("{INTERNAL_REFUSED} node BoundContributions");
            }
            let [input] = inputs else {
                return plan_err!("BoundContributions takes one input, got {}", inputs.len());
            };
            let node = BoundSpec::decode(spec)?.node(input.clone())?;
            return Ok(Extension {
                node: Arc::new(node),
            });
        }
        self.inner.try_decode(buf, inputs, ctx)
    }

    fn try_encode(&self, node: &Extension, buf: &mut Vec<u8>) -> Result<()> {
        if let Some(bounding) = node.node.as_any().downcast_ref::<BoundContributions>() {
            buf.extend_from_slice(&BoundSpec::of(bounding)?.encode(BOUND_NODE));
            return Ok(());
        }
        self.inner.try_encode(node, buf)
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        schema: SchemaRef,
        ctx: &TaskContext,
    ) -> Result<Arc<dyn TableProvider>> {
        self.inner
            .try_decode_table_provider(buf, table_ref, schema, ctx)
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        self.inner.try_encode_table_provider(table_ref, node, buf)
    }

    fn try_decode_file_format(
        &self,
        buf: &[u8],
        ctx: &TaskContext,
    ) -> Result<Arc<dyn FileFormatFactory>> {
        self.inner.try_decode_file_format(buf, ctx)
    }

    fn try_encode_file_format(
        &self,
        buf: &mut Vec<u8>,
        node: Arc<dyn FileFormatFactory>,
    ) -> Result<()> {
        self.inner.try_encode_file_format(buf, node)
    }

    function_methods!();
}

/// Ballista's physical codec (shuffle readers and writers, ...), plus bound DP calls.
#[derive(Debug)]
pub struct DpPhysicalCodec {
    inner: Arc<dyn PhysicalExtensionCodec>,
    /// Always `true`: physical plans come from the scheduler (a locked cluster refuses a
    /// client's physical plan before decoding it, [`crate::distributed::locked`]).
    accept_bound_calls: bool,
}

impl Default for DpPhysicalCodec {
    fn default() -> Self {
        Self::new(Arc::new(BallistaPhysicalExtensionCodec::default()))
    }
}

impl DpPhysicalCodec {
    /// Wraps `inner`, which handles everything but bound DP calls.
    pub fn new(inner: Arc<dyn PhysicalExtensionCodec>) -> Self {
        Self {
            inner,
            accept_bound_calls: true,
        }
    }
}

impl PhysicalExtensionCodec for DpPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // Every stage's root (a shuffle writer) is decoded here, after its inputs and before
        // Ballista resets the plan: see `unread_sort`.
        let inputs = inputs
            .iter()
            .map(|input| without_unread_sorts(Arc::clone(input)))
            .collect::<Result<Vec<_>>>()?;
        let inputs = inputs.as_slice();
        if buf == PROTECTED_SCAN {
            let [input] = inputs else {
                return plan_err!("ProtectedScanExec takes one input, got {}", inputs.len());
            };
            return Ok(Arc::new(ProtectedScanExec::new(Arc::clone(input))));
        }
        if buf == YIELD {
            let [input] = inputs else {
                return plan_err!("YieldExec takes one input, got {}", inputs.len());
            };
            return Ok(Arc::new(YieldExec::new(Arc::clone(input))));
        }
        if buf == DRAIN_ON_DROP || buf == DRAINED {
            let [input] = inputs else {
                return plan_err!("a drain wrapper takes one input, got {}", inputs.len());
            };
            return Ok(match buf == DRAINED {
                true => Arc::new(DrainedExec::new(Arc::clone(input))),
                false => Arc::new(DrainOnDropExec::new(Arc::clone(input))),
            });
        }
        if let Some(spec) = buf.strip_prefix(BOUND_EXEC) {
            let [input] = inputs else {
                return plan_err!(
                    "BoundContributionsExec takes one input, got {}",
                    inputs.len()
                );
            };
            let spec = BoundSpec::decode(spec)?;
            return Ok(Arc::new(BoundContributionsExec::try_new(
                Arc::clone(input),
                spec,
            )?));
        }
        if buf == RELEASE_ONCE {
            let [input] = inputs else {
                return plan_err!("ReleaseOnceExec takes one input, got {}", inputs.len());
            };
            return Ok(Arc::new(ReleaseOnceExec::new(Arc::clone(input))));
        }
        self.inner.try_decode(buf, inputs, ctx, proto_converter)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if let Some(bounding) = node.downcast_ref::<BoundContributionsExec>() {
            buf.extend_from_slice(&bounding.spec().encode(BOUND_EXEC));
            return Ok(());
        }
        if node.downcast_ref::<ReleaseOnceExec>().is_some() {
            buf.extend_from_slice(RELEASE_ONCE);
            return Ok(());
        }
        if node.downcast_ref::<ProtectedScanExec>().is_some() {
            buf.extend_from_slice(PROTECTED_SCAN);
            return Ok(());
        }
        if node.downcast_ref::<YieldExec>().is_some() {
            buf.extend_from_slice(YIELD);
            return Ok(());
        }
        if node.downcast_ref::<DrainOnDropExec>().is_some() {
            buf.extend_from_slice(DRAIN_ON_DROP);
            return Ok(());
        }
        if node.downcast_ref::<DrainedExec>().is_some() {
            buf.extend_from_slice(DRAINED);
            return Ok(());
        }
        self.inner.try_encode(node, buf, proto_converter)
    }

    function_methods!();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The total forms of a function and an operator (`sql::privacy::udf::total`) reach executors
    /// as themselves: decoded by name alone, `try_regexp_like` would not exist there, and
    /// `regexp_like` would raise the errors the planner made total.
    #[test]
    fn total_functions_travel_as_themselves() {
        let codec = DpPhysicalCodec::default();
        let logical = DpLogicalCodec::default();
        let regexp_like = datafusion::functions::regex::regexp_like();
        let katz = crate::sql::functions::scalar::rr_ci_katz::udf();
        for udf in [
            ScalarUDF::new_from_impl(total_function(regexp_like)),
            ScalarUDF::new_from_impl(total_function(katz)),
            ScalarUDF::new_from_impl(TryBinary::new(datafusion::logical_expr::Operator::Divide)),
            ScalarUDF::new_from_impl(TryCastRows::new(arrow::datatypes::DataType::Timestamp(
                arrow::datatypes::TimeUnit::Millisecond,
                Some("+02:00".into()),
            ))),
            ScalarUDF::new_from_impl(TryBinary::new(
                datafusion::logical_expr::Operator::RegexIMatch,
            )),
        ] {
            let mut buf = Vec::new();
            codec.try_encode_udf(&udf, &mut buf).unwrap();
            assert!(!buf.is_empty(), "{}", udf.name());
            assert_eq!(
                codec.try_decode_udf(udf.name(), &buf).unwrap().as_ref(),
                &udf
            );
            let mut buf = Vec::new();
            logical.try_encode_udf(&udf, &mut buf).unwrap();
            assert_eq!(
                logical.try_decode_udf(udf.name(), &buf).unwrap().as_ref(),
                &udf
            );
        }
        let unknown = [TRY_FUNCTION, b"no_such_function\n".as_slice()].concat();
        assert!(codec
            .try_decode_udf("try_no_such_function", &unknown)
            .is_err());
    }

    /// The bounding node travels from a trusted client to its scheduler as itself; a locked
    /// cluster's scheduler refuses it (it bounds plans itself, with its owner's settings).
    #[test]
    fn the_bounding_node_travels_and_a_locked_scheduler_refuses_it() {
        use datafusion::common::Column;
        use datafusion::logical_expr::{col, LogicalPlanBuilder};
        let input = LogicalPlanBuilder::values(vec![vec![
            datafusion::logical_expr::lit(1i64),
            datafusion::logical_expr::lit("a"),
        ]])
        .unwrap()
        .project(vec![
            col("column1").alias("unit"),
            col("column2").alias("key"),
        ])
        .unwrap()
        .build()
        .unwrap();
        let node = BoundContributions {
            unit: Column::from_name("unit"),
            keys: vec![Column::from_name("key")],
            row_order: vec![],
            max_rows: 3,
            max_groups: 2,
            salt: 11,
            input: input.clone(),
        };
        let extension = Extension {
            node: Arc::new(node.clone()),
        };
        let mut buf = Vec::new();
        DpLogicalCodec::default()
            .try_encode(&extension, &mut buf)
            .unwrap();
        let ctx = datafusion::prelude::SessionContext::new().task_ctx();
        let decoded = DpLogicalCodec::default()
            .try_decode(&buf, std::slice::from_ref(&input), &ctx)
            .unwrap();
        assert_eq!(
            decoded.node.as_any().downcast_ref::<BoundContributions>(),
            Some(&node)
        );
        let refused = DpLogicalCodec::refusing_bound_calls()
            .try_decode(&buf, std::slice::from_ref(&input), &ctx)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("node BoundContributions"), "{refused}");
    }
}
