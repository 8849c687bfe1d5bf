//! The wire form of a bound DP call, for plans that cross processes (Ballista's scheduler and
//! executors, or any `datafusion-proto` round trip).
//!
//! A bound call carries its [`CallPlan`]: the noise calibrated once for the query and the
//! options it was bound with. Rather than serialising the calibration itself, the wire form
//! keeps the inputs of [`CallPlan::resolve`] (the merged `dp.*` options, ε, the stream name,
//! argument counts and the contribution bound the planner derived) and the receiving node calls `resolve` again. The calibration is a pure
//! function of those inputs, so both sides hold the same plan (the tests below round-trip every
//! function and kind of option and compare the plans), and there stays one calibration
//! function for every caller. Decoding never charges a budget: the call was charged when it
//! was bound.

use super::statistic::DpStatistic;
use super::{statistic_named, CallPlan, DpAggregate};
use crate::sql::options::DpOptions;
use crate::stats::Contribution;
use datafusion::common::config::ExtensionOptions;
use datafusion::common::{plan_datafusion_err, plan_err, Result, ScalarValue};

/// First field of every encoded call; bump the version when the layout changes.
const MAGIC: &str = "datafusion-dp/call/4";

impl DpAggregate {
    /// The bound call as bytes, or `None` for an unbound function (which travels by name).
    pub fn encode(&self) -> Option<Vec<u8>> {
        self.plan().map(|plan| encode(self.function(), plan))
    }

    /// The function `name`, bound to the call encoded in `bytes` (see [`DpAggregate::encode`]).
    pub fn decode(name: &str, bytes: &[u8]) -> Result<Self> {
        let function = statistic_named(name)
            .ok_or_else(|| plan_datafusion_err!("'{name}' is not a DP aggregate"))?;
        let plan = decode(function, bytes)?;
        Ok(DpAggregate::new(function).configured(plan))
    }
}

/// A constant argument on the wire: `i:<integer>` or `f:<bits of the f64 in hex>`.
fn encode_constant(value: &ScalarValue) -> String {
    match value {
        ScalarValue::Int64(Some(v)) => format!("i:{v}"),
        ScalarValue::Float64(Some(v)) => format!("f:{:016x}", v.to_bits()),
        // CallPlan::resolve normalises every constant to one of the two.
        other => format!("?:{other}"),
    }
}

fn decode_constant(field: &str) -> Option<ScalarValue> {
    match field.split_once(':')? {
        ("i", v) => v.parse::<i64>().ok().map(|v| ScalarValue::Int64(Some(v))),
        ("f", v) => u64::from_str_radix(v, 16)
            .ok()
            .map(|b| ScalarValue::Float64(Some(f64::from_bits(b)))),
        _ => None,
    }
}

fn encode(function: &dyn DpStatistic, plan: &CallPlan) -> Vec<u8> {
    let mut fields: Vec<String> = vec![
        MAGIC.to_string(),
        function.name().to_string(),
        format!("{:016x}", plan.epsilon.to_bits()),
        plan.stream.clone(),
        plan.user_args.to_string(),
        plan.key_args.to_string(),
        plan.grouped.to_string(),
        plan.selection
            .map_or(String::new(), |s| s.threshold.to_string()),
        plan.contribution.rows.to_string(),
        plan.contribution.groups.to_string(),
        plan.constants.len().to_string(),
    ];
    fields.extend(plan.constants.iter().map(encode_constant));
    for entry in plan.options.entries() {
        if let Some(value) = entry.value {
            let key = entry.key.strip_prefix("dp.").unwrap_or(&entry.key);
            fields.push(key.to_string());
            fields.push(value);
        }
    }
    let mut bytes = Vec::new();
    for field in fields {
        bytes.extend_from_slice(&(field.len() as u32).to_le_bytes());
        bytes.extend_from_slice(field.as_bytes());
    }
    bytes
}

fn decode(function: &'static dyn DpStatistic, bytes: &[u8]) -> Result<CallPlan> {
    let name = function.name();
    let corrupt = |what: &str| plan_datafusion_err!("{name}: cannot decode the bound call: {what}");
    let mut fields: Vec<&str> = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_at_checked(4)
            .ok_or_else(|| corrupt("truncated"))?;
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let (field, tail) = tail
            .split_at_checked(len)
            .ok_or_else(|| corrupt("truncated"))?;
        fields.push(std::str::from_utf8(field).map_err(|_| corrupt("not UTF-8"))?);
        rest = tail;
    }
    if fields.len() < 11 || fields[0] != MAGIC {
        return Err(corrupt(&format!(
            "not a {MAGIC} record (was it written by another version of datafusion-dp?)"
        )));
    }
    if fields[1] != name {
        return plan_err!("{name}: the bound call is for {}", fields[1]);
    }
    let bits = |s: &str| u64::from_str_radix(s, 16).map(f64::from_bits);
    let epsilon = bits(fields[2]).map_err(|_| corrupt("epsilon"))?;
    let count = |s: &str| s.parse::<usize>().map_err(|_| corrupt("argument count"));
    let (user_args, key_args) = (count(fields[4])?, count(fields[5])?);
    let grouped = fields[6].parse::<bool>().map_err(|_| corrupt("grouped"))?;
    let selection_threshold = match fields[7] {
        "" => None,
        t => Some(
            t.parse::<i64>()
                .map_err(|_| corrupt("selection threshold"))?,
        ),
    };
    let bound = |s: &str| s.parse::<u32>().map_err(|_| corrupt("contribution bound"));
    let contribution = Contribution {
        rows: bound(fields[8])?,
        groups: bound(fields[9])?,
    };
    let constant_count = count(fields[10])?;
    let constants = fields
        .get(11..11 + constant_count)
        .ok_or_else(|| corrupt("constants"))?
        .iter()
        .map(|f| decode_constant(f).ok_or_else(|| corrupt("constant")))
        .collect::<Result<Vec<_>>>()?;
    let pairs = &fields[11 + constant_count..];
    if !pairs.len().is_multiple_of(2) {
        return Err(corrupt("options"));
    }
    let mut options = DpOptions::default();
    // The lock last: once locked, the owner's options cannot be applied.
    let (lock, others): (Vec<&[&str]>, Vec<&[&str]>) =
        pairs.chunks(2).partition(|pair| pair[0] == "locked");
    for pair in others.into_iter().chain(lock) {
        options
            .apply(pair[0], pair[1])
            .map_err(|e| corrupt(&format!("option {}: {e}", pair[0])))?;
    }
    let mut plan = CallPlan::resolve(
        function,
        &options,
        &constants.into_iter().map(Some).collect::<Vec<_>>(),
        Some(&ScalarValue::Float64(Some(epsilon))),
        None,
        fields[3].to_string(),
        user_args,
        key_args,
        grouped,
        contribution,
    )?;
    if let Some(threshold) = selection_threshold {
        plan.select_groups_at(threshold)?;
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::functions::aggregate::statistic::ArgKind;
    use crate::sql::functions::aggregate::table::TableRelease;
    use crate::sql::functions::aggregate::STATISTICS;
    use crate::stats::RatioStatistic;

    fn bound(name: &str, options: &DpOptions, grouped: bool) -> DpAggregate {
        let function = statistic_named(name).unwrap();
        let contribution = match (options.seed.is_some(), grouped) {
            (true, true) => Contribution { rows: 3, groups: 2 },
            (true, false) => Contribution { rows: 3, groups: 1 },
            _ => Contribution::ONE_ROW,
        };
        let plan = CallPlan::resolve(
            function,
            options,
            &[],
            Some(&ScalarValue::Float64(Some(0.7))),
            None,
            format!("{name}(o, e, 0.7)"),
            3,
            if options.seed.is_some() { 2 } else { 0 },
            grouped,
            contribution,
        )
        .unwrap();
        DpAggregate::new(function).configured(plan)
    }

    /// The statistics of the registry without constant arguments: the count and the 2x2
    /// table's (the clamped statistics' round trips are in their own files).
    fn without_constants() -> impl Iterator<Item = &'static str> {
        STATISTICS
            .iter()
            .filter(|s| s.args().iter().all(|a| a.kind != ArgKind::Constant))
            .map(|s| s.name())
    }

    #[test]
    fn every_bound_call_round_trips_to_the_same_plan() {
        let mut gaussian = DpOptions::default();
        for (k, v) in [
            ("mechanism", "gaussian"),
            ("delta", "1e-7"),
            ("confidence", "0.9"),
            ("seed", "42"),
            ("protected_tables", "visits(patient_id), survey"),
            ("public_tables", "regions"),
            ("max_rows_per_unit", "3"),
            ("max_groups_per_unit", "2"),
            ("ledger", "/tmp/a b,c=d.ledger"),
            ("epsilon_budget", "0.1"),
            ("public_groups", "lake.public.regions"),
        ] {
            gaussian.apply(k, v).unwrap();
        }
        let mut public = DpOptions::default();
        public.apply("group_sizes", "public").unwrap();
        public.apply("method", "noised_log").unwrap();
        let mut bootstrap = DpOptions::default();
        bootstrap.apply("ci_method", "bootstrap").unwrap();
        bootstrap.apply("group_sizes", "public").unwrap();
        assert_eq!(without_constants().count(), 7);
        for name in without_constants() {
            for options in [&DpOptions::default(), &gaussian, &bootstrap] {
                for grouped in [false, true] {
                    let call = bound(name, options, grouped);
                    let back = DpAggregate::decode(name, &call.encode().unwrap()).unwrap();
                    assert_eq!(back, call, "{name} {options:?} {grouped}");
                }
            }
        }
        // The log interval (refused by the risk difference's interval) and the bootstrap keep
        // their interval method.
        let mut log = DpOptions::default();
        log.apply("ci_method", "log").unwrap();
        for name in without_constants() {
            if statistic_named(name).unwrap().interval() == Some(RatioStatistic::RiskDifference) {
                continue;
            }
            let call = bound(name, &log, true);
            let back = DpAggregate::decode(name, &call.encode().unwrap()).unwrap();
            assert_eq!(back, call, "{name}");
        }
        let rd = named(|s| s.interval() == Some(RatioStatistic::RiskDifference));
        let call = bound(rd, &bootstrap, true);
        let back = DpAggregate::decode(rd, &call.encode().unwrap()).unwrap();
        assert!(matches!(
            back.plan()
                .unwrap()
                .release
                .noise::<TableRelease>(rd)
                .unwrap(),
            TableRelease::Counts {
                method: crate::stats::IntervalMethod::Bootstrap,
                ..
            }
        ));
        // A ratio method of the relative risk.
        let rr = named(|s| s.interval().is_none() && s.option_keys().contains(&"method"));
        let call = bound(rr, &public, true);
        let back = DpAggregate::decode(rr, &call.encode().unwrap()).unwrap();
        assert_eq!(back, call);
        // Private group selection's count keeps its threshold, and so its charge, with either
        // noise.
        for options in [&DpOptions::default(), &gaussian] {
            let call = bound("dp_count", options, true);
            let mut plan = call.plan().unwrap().as_ref().clone();
            let threshold = plan.select_groups(1e-6).unwrap();
            let call = DpAggregate::new(call.function()).configured(plan);
            let back = DpAggregate::decode("dp_count", &call.encode().unwrap()).unwrap();
            assert_eq!(back, call);
            let plan = back.plan().unwrap();
            assert_eq!(plan.selection.unwrap().threshold, threshold);
            let delta = plan.loss().delta - plan.release.loss().delta;
            assert!(delta <= 1e-6 && delta > 0.0, "{delta}");
        }
    }

    /// The one statistic of the registry `is` holds for.
    fn named(is: impl Fn(&dyn DpStatistic) -> bool) -> &'static str {
        let found: Vec<&str> = STATISTICS
            .iter()
            .filter(|s| is(**s))
            .map(|s| s.name())
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        found[0]
    }

    #[test]
    fn unbound_and_corrupt_calls_are_refused_with_the_function_name() {
        let count = STATISTICS[0].name();
        assert!(DpAggregate::new(STATISTICS[0]).encode().is_none());
        let ci = named(|s| s.interval() == Some(RatioStatistic::RelativeRisk));
        let bytes = bound(ci, &DpOptions::default(), true).encode().unwrap();
        for bad in [&bytes[..bytes.len() - 1], &bytes[4..], b"\x03\0\0\0abc"] {
            let err = DpAggregate::decode(ci, bad).unwrap_err().to_string();
            assert!(err.contains(&format!("{ci}: cannot decode")), "{err}");
        }
        let err = DpAggregate::decode(count, &bytes).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{count}: the bound call is for {ci}")),
            "{err}"
        );
        assert!(DpAggregate::decode("count", &bytes).is_err());
    }
}
