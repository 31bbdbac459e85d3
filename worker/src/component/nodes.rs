//! The node traits over a [`ComponentHost`]: exec producers, processors and consumers.
//!
//! The runtime's loops call these exactly as they call built-in nodes, so acks, joins, drain,
//! dead letters and metrics apply unchanged; this module only translates between the node
//! API (`Input`, `NodeContext`) and the protocol's messages.
//!
//! Processors and consumers pipeline: `max_in_flight` is the host's (the component's Hello,
//! capped), `submit` sends a request and remembers its id, `complete` waits for the oldest
//! id — so outputs are taken back in input order even when the component answers out of
//! order. `process`/`consume` are `submit` + `complete` (one outstanding).

use std::collections::VecDeque;

use videoflow_core::component::proto::{
    self as wire, Collected, Consume, EnvelopeInfo as WireInfo, Input as WireInput, NodeIdentity,
    Open, Process, input, worker_message::Body,
};
use videoflow_core::component::{metadata_to_wire, value_from_wire};
use videoflow_core::envelope::{BLOBREF_TYPE, Payload, decode_payload_bytes, encode_payload};
use videoflow_core::errors::{Disposition, ErrorCode, VfError};
use videoflow_core::value::Value;

use super::host::ComponentHost;
use crate::nodes::{Consumer, EnvelopeInfo, Input, InputInfo, NodeContext, Processor, Producer};

/// What every exec node shares: the host, and what `open` tells the component.
#[derive(Debug)]
pub struct ExecNode {
    host: ComponentHost,
    identity: NodeIdentity,
    params_json: String,
    /// Ids of the groups submitted and not completed, oldest first.
    submitted: VecDeque<u64>,
}

impl ExecNode {
    /// A node over `host`; `identity`'s flow, run, node and replica are refreshed from the
    /// context at `open` (the replica id may come from a slot claimed after the build).
    pub fn new(host: ComponentHost, identity: NodeIdentity, params_json: String) -> Self {
        ExecNode {
            host,
            identity,
            params_json,
            submitted: VecDeque::new(),
        }
    }

    /// Sends one group's request (`Process` or `Consume`) and remembers its id.
    fn submit(&mut self, body: Body, what: &'static str) -> Result<(), VfError> {
        let id = self.host.send(body, what)?;
        self.submitted.push_back(id);
        Ok(())
    }

    /// The oldest submitted group's result.
    fn complete(&mut self, what: &str) -> Result<wire::Result, VfError> {
        let Some(id) = self.submitted.pop_front() else {
            return Err(VfError::new(
                ErrorCode::Unknown,
                format!("internal: {what} completed with nothing submitted"),
            ));
        };
        self.host.wait(id)
    }

    /// The host (tests read the component's pid from it).
    pub fn host(&self) -> &ComponentHost {
        &self.host
    }

    fn open(&mut self, ctx: &NodeContext) -> Result<(), VfError> {
        let mut node = self.identity.clone();
        node.flow_id.clone_from(&ctx.flow_id);
        node.run_id.clone_from(&ctx.run_id);
        node.node_name.clone_from(&ctx.node_name);
        node.replica_id = ctx.replica_id;
        let open = Open {
            protocol_version: self.host.version(),
            node: Some(node),
            params_json: self.params_json.clone(),
        };
        let r = self.host.call(Body::Open(open), "open")?;
        check(r.error).map(|_| ())
    }

    fn close(&mut self) -> Result<(), VfError> {
        match self.host.close()? {
            Some(r) => check(r.error),
            None => Ok(()),
        }
    }
}

/// A component error → the taxonomy (ERR-2): a taxonomy code keeps its class unless the
/// component names another disposition; an unknown code takes the named disposition's class,
/// else `VF_UNKNOWN`, which the node's `onError` classifies. The component's own code stays
/// in the context.
pub fn component_error(e: wire::Error) -> VfError {
    let code = ErrorCode::from_code(&e.code);
    let disposition = Disposition::parse(&e.disposition);
    let class = match (code, disposition) {
        (Some(c), Some(d)) if c.disposition().is_some() && c.disposition() != Some(d) => {
            ErrorCode::for_disposition(d)
        }
        (Some(c), _) => c,
        (None, Some(d)) => ErrorCode::for_disposition(d),
        (None, None) => ErrorCode::Unknown,
    };
    let message = if e.message.is_empty() {
        "the component failed without a message".to_owned()
    } else {
        e.message
    };
    let mut err = VfError::new(class, message);
    if !e.remedy.is_empty() {
        err = err.with_remedy(e.remedy);
    }
    if let Some(d) = disposition {
        err = err.with_disposition(d);
    }
    if !e.code.is_empty() && code != Some(class) {
        err = err.with_context("component_code", e.code);
    }
    err
}

fn check(error: Option<wire::Error>) -> Result<(), VfError> {
    match error {
        Some(e) => Err(component_error(e)),
        None => Ok(()),
    }
}

fn wire_payload(p: &Payload) -> Result<wire::Payload, VfError> {
    let (payload_type, data) = encode_payload(p).map_err(|e| {
        VfError::new(
            ErrorCode::Poison,
            format!("cannot hand the input to the component: {e}"),
        )
    })?;
    Ok(wire::Payload { payload_type, data })
}

fn wire_info(e: &EnvelopeInfo) -> WireInfo {
    WireInfo {
        event_ts: e.event_ts,
        metadata: metadata_to_wire(&e.metadata),
        trace_id: e.trace_id.clone(),
        seq: e.seq,
        replica_id: e.replica_id,
    }
}

/// The group as the protocol's inputs: one per parent, in parent order, with its envelope
/// info from the context.
pub fn wire_inputs(ctx: &NodeContext, inputs: &[Input]) -> Result<Vec<WireInput>, VfError> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let (parent, info) = ctx
                .input_info
                .get(i)
                .map_or((String::new(), None), |(p, info)| {
                    (p.clone(), info.as_ref())
                });
            let (kind, info) = match input {
                Input::Present(p) => (
                    input::Kind::Present(wire_payload(p)?),
                    info.and_then(InputInfo::single).map(wire_info),
                ),
                Input::Missing => (input::Kind::Missing(true), None),
                Input::Collected(items) => {
                    let infos = match info {
                        Some(InputInfo::Collected(v)) => v.iter().map(wire_info).collect(),
                        _ => Vec::new(),
                    };
                    let items = items.iter().map(wire_payload).collect::<Result<_, _>>()?;
                    (input::Kind::Collected(Collected { items, infos }), None)
                }
            };
            Ok(WireInput {
                parent,
                kind: Some(kind),
                info,
            })
        })
        .collect()
}

/// A result's output → the payload to publish, with its one-shot settings applied to `ctx`
/// (LOOP-8/9). No output publishes a null value (Python's `None`, as 1.0.4 publishes it).
pub fn take_output(
    ctx: &mut NodeContext,
    output: Option<wire::Output>,
) -> Result<Payload, VfError> {
    let Some(out) = output else {
        return Ok(Payload::Value(Value::Null));
    };
    if let Some(key) = out.partition_key {
        let key = value_from_wire(key).map_err(|e| {
            VfError::new(
                ErrorCode::Poison,
                format!("the component's partition key is not a valid value: {e}"),
            )
        })?;
        ctx.set_output_partition_key(key);
    }
    if let Some(ts) = out.event_ts {
        ctx.set_output_event_timestamp(ts);
    }
    let Some(p) = out.payload.filter(|p| !p.payload_type.is_empty()) else {
        return Ok(Payload::Value(Value::Null));
    };
    if p.payload_type == BLOBREF_TYPE {
        return Err(VfError::new(
            ErrorCode::NodeContract,
            "the component returned a videoflow.v1.BlobRef; offloading is the worker's job.",
        )
        .with_remedy(
            "Return the payload itself; the worker offloads large payloads to the payload store.",
        ));
    }
    decode_payload_bytes(&p.payload_type, p.data.into()).map_err(|e| {
        VfError::new(
            ErrorCode::Poison,
            format!(
                "the component returned a {} that does not decode: {e}",
                p.payload_type
            ),
        )
    })
}

/// An exec producer: `next` asks the component for its next item.
#[derive(Debug)]
pub struct ExecProducer(pub ExecNode);

impl Producer for ExecProducer {
    fn open(&mut self, ctx: &mut NodeContext) -> Result<(), VfError> {
        self.0.open(ctx)
    }

    fn next(&mut self, ctx: &mut NodeContext) -> Result<Option<Payload>, VfError> {
        let r = self.0.host.call(Body::Next(Default::default()), "next")?;
        check(r.error)?;
        if r.end_of_input {
            return Ok(None);
        }
        take_output(ctx, r.output).map(Some)
    }

    fn close(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        self.0.close()
    }
}

/// An exec processor: one `Process` request per group, one output per result.
#[derive(Debug)]
pub struct ExecProcessor(pub ExecNode);

impl Processor for ExecProcessor {
    fn open(&mut self, ctx: &mut NodeContext) -> Result<(), VfError> {
        self.0.open(ctx)
    }

    fn process(&mut self, ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        self.submit(ctx, inputs)?;
        self.complete(ctx)
    }

    fn max_in_flight(&self) -> usize {
        self.0.host.max_in_flight()
    }

    fn submit(&mut self, ctx: &mut NodeContext, inputs: &[Input]) -> Result<(), VfError> {
        let request = Process {
            inputs: wire_inputs(ctx, inputs)?,
            input_key: ctx.input_key.clone().unwrap_or_default(),
        };
        self.0.submit(Body::Process(request), "process")
    }

    fn complete(&mut self, ctx: &mut NodeContext) -> Result<Payload, VfError> {
        let r = self.0.complete("process")?;
        check(r.error)?;
        take_output(ctx, r.output)
    }

    fn close(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        self.0.close()
    }
}

/// An exec consumer: one `Consume` request per group; the result acks it.
#[derive(Debug)]
pub struct ExecConsumer(pub ExecNode);

impl Consumer for ExecConsumer {
    fn open(&mut self, ctx: &mut NodeContext) -> Result<(), VfError> {
        self.0.open(ctx)
    }

    fn consume(&mut self, ctx: &mut NodeContext, inputs: &[Input]) -> Result<(), VfError> {
        Consumer::submit(self, ctx, inputs)?;
        Consumer::complete(self, ctx)
    }

    fn max_in_flight(&self) -> usize {
        self.0.host.max_in_flight()
    }

    fn submit(&mut self, ctx: &mut NodeContext, inputs: &[Input]) -> Result<(), VfError> {
        let request = Consume {
            inputs: wire_inputs(ctx, inputs)?,
            input_key: ctx.input_key.clone().unwrap_or_default(),
        };
        self.0.submit(Body::Consume(request), "consume")
    }

    fn complete(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        let r = self.0.complete("consume")?;
        check(r.error)
    }

    fn close(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        self.0.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn err(code: &str, disposition: &str) -> wire::Error {
        wire::Error {
            code: code.into(),
            message: "boom".into(),
            remedy: String::new(),
            disposition: disposition.into(),
        }
    }

    #[test]
    fn component_errors_map_onto_the_taxonomy() {
        let e = component_error(err("VF_POISON_SCHEMA", ""));
        assert_eq!(e.code, ErrorCode::PoisonSchema);
        assert_eq!(e.disposition, Some(Disposition::Poison));
        let e = component_error(err("CUDA_OOM", "worker_fatal"));
        assert_eq!(e.code, ErrorCode::WorkerFatal);
        assert_eq!(e.context["component_code"], "CUDA_OOM");
        let e = component_error(err("ValueError", ""));
        assert_eq!(e.code, ErrorCode::Unknown, "onError decides");
        let e = component_error(err("VF_POISON", "transient"));
        assert_eq!(e.code, ErrorCode::Transient);
        assert_eq!(e.disposition, Some(Disposition::Transient));
        let e = component_error(err("VF_CONFIG", ""));
        assert_eq!(e.code, ErrorCode::Config);
        assert_eq!(e.message, "boom");
    }

    #[test]
    fn inputs_carry_payload_bytes_and_envelope_info() {
        let mut ctx = NodeContext::new("f", "r", "n", 0);
        let info = EnvelopeInfo {
            event_ts: Some(1.5),
            metadata: BTreeMap::from([("cam".to_owned(), Value::from("a"))]),
            trace_id: "t1".into(),
            seq: 9,
            replica_id: 2,
        };
        ctx.begin_group(
            Some("key".into()),
            vec![
                ("a".into(), Some(InputInfo::Single(info))),
                ("b".into(), None),
            ],
        );
        let inputs = [
            Input::Present(Payload::Value(Value::Int(4))),
            Input::Missing,
        ];
        let wire = wire_inputs(&ctx, &inputs).expect("converts");
        assert_eq!(wire[0].parent, "a");
        let Some(input::Kind::Present(p)) = &wire[0].kind else {
            panic!("present")
        };
        assert_eq!(p.payload_type, "videoflow.v1.Value");
        assert_eq!(
            videoflow_core::envelope::decode_payload(&p.payload_type, &p.data).expect("decodes"),
            Payload::Value(Value::Int(4))
        );
        let i = wire[0].info.as_ref().expect("info");
        assert_eq!((i.trace_id.as_str(), i.seq, i.replica_id), ("t1", 9, 2));
        assert_eq!(i.event_ts, Some(1.5));
        assert_eq!(wire[1].kind, Some(input::Kind::Missing(true)));
    }

    #[test]
    fn outputs_set_the_one_shot_settings_and_default_to_null() {
        let mut ctx = NodeContext::new("f", "r", "n", 0);
        assert_eq!(
            take_output(&mut ctx, None).expect("null"),
            Payload::Value(Value::Null)
        );
        let (payload_type, data) = encode_payload(&Payload::Value(Value::Int(7))).expect("encodes");
        let out = wire::Output {
            payload: Some(wire::Payload { payload_type, data }),
            partition_key: Some(
                videoflow_core::component::value_to_wire(&Value::Int(3)).expect("key"),
            ),
            event_ts: Some(2.0),
        };
        assert_eq!(
            take_output(&mut ctx, Some(out)).expect("output"),
            Payload::Value(Value::Int(7))
        );
        assert_eq!(ctx.take_output_partition_key(), Some(Value::Int(3)));
        assert_eq!(ctx.take_output_event_timestamp(), Some(2.0));
        let blob = wire::Output {
            payload: Some(wire::Payload {
                payload_type: BLOBREF_TYPE.into(),
                data: Vec::new(),
            }),
            ..Default::default()
        };
        assert_eq!(
            take_output(&mut ctx, Some(blob)).expect_err("refused").code,
            ErrorCode::NodeContract
        );
    }
}
