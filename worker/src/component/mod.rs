//! Components in any language (design §5 "exec"): the exec host.
//!
//! An exec node's computation is a separate program — Python with the SDK in `sdk/python`,
//! or anything that speaks the component protocol (`core/proto/videoflow/component/v1/
//! component.proto`, [`videoflow_core::component`]). The worker keeps every broker duty
//! (ids, acks, joins, drain, dead letters, metrics): it starts the program, hands it input
//! groups over a Unix domain socket and publishes what it returns.
//!
//! - [`frame`] — length-prefixed frames on the socket.
//! - [`host`] — [`ComponentHost`]: start, accept, Hello and version negotiation, per-call
//!   deadlines, crash detection, close.
//! - [`nodes`] — [`ExecProducer`], [`ExecProcessor`], [`ExecConsumer`]: the node traits over
//!   a host, so the runtime's loops run exec nodes unchanged.
//!
//! **Where the command comes from.** On Kubernetes the operator renders
//! `videoflow-worker exec -- <argv>` (the worker binary copied into the user's image); the
//! subcommand puts `argv` into [`COMMAND_VAR`]. The control planes also render
//! [`COMMAND_VAR`] from the compiled node (`core::env`), which is how the local runner's
//! workers, started without a subcommand, find it.
//!
//! **A component that dies is `VF_WORKER_FATAL`.** The runtime's ladder hands the group in
//! flight back (NAK) and the worker exits 4; the platform (Kubernetes, or the local runner's
//! restarts) starts a fresh worker with a fresh component, which gets the input again.
//!
//! **Several requests in flight.** A component that announces `Hello.max_in_flight` > 1 gets
//! up to that many requests outstanding (capped at [`HOST_MAX_IN_FLIGHT`]): the processor and
//! consumer loop submits each group as it is received and takes results back oldest first
//! (`Processor::submit` / `complete`), so the component computes one group while the next
//! travels to it and the previous output is published. Answers may come in any order; each
//! is matched by request id and outputs are published in input order. A crash fails every
//! outstanding request with `VF_WORKER_FATAL`, and the loop hands every one of their inputs
//! back. `max_in_flight` 0 or 1 keeps one request at a time.

pub mod frame;
pub mod host;
pub mod nodes;

use videoflow_core::component::proto::NodeIdentity;
use videoflow_core::errors::VfError;
use videoflow_core::model::NodeKind;

pub use crate::config::component::{CALL_TIMEOUT_VAR, COMMAND_VAR, START_TIMEOUT_VAR};
pub use host::{ComponentHost, HOST_MAX_IN_FLIGHT, HostOptions, SOCKET_VAR};
pub use nodes::{ExecConsumer, ExecNode, ExecProcessor, ExecProducer};

use crate::config::{ComponentConfig, WorkerConfig};
use crate::nodes::{BuiltNode, ConsumerOptions};

/// START-1 step 5 for an exec node: starts the component (Hello, version) and wraps it in the
/// node family `cfg.kind` names. `open` is sent later, when the loop opens the node.
pub fn build_exec_node(
    cfg: &WorkerConfig,
    component: &ComponentConfig,
) -> Result<BuiltNode, VfError> {
    let opts = HostOptions::from(component);
    let host =
        crate::runtime::offload::off_runtime(|| ComponentHost::start(&component.command, opts))?;
    let identity = NodeIdentity {
        flow_id: cfg.flow_id.clone(),
        run_id: cfg.run_id.clone(),
        node_name: cfg.node_name.clone(),
        kind: cfg.kind.as_str().to_owned(),
        replica_id: u32::try_from(cfg.replica_id()).unwrap_or(0),
        nb_tasks: u32::try_from(cfg.nb_tasks).unwrap_or(1),
        parents: cfg.parent_names.clone(),
        has_children: cfg.has_children,
    };
    let params = serde_json::Value::Object(cfg.node_params.clone()).to_string();
    let node = ExecNode::new(host, identity, params);
    Ok(match cfg.kind {
        NodeKind::Producer => BuiltNode::Producer(Box::new(ExecProducer(node))),
        NodeKind::Processor => BuiltNode::Processor(Box::new(ExecProcessor(node))),
        NodeKind::Consumer => BuiltNode::Consumer {
            node: Box::new(ExecConsumer(node)),
            options: ConsumerOptions {
                metadata: false,
                idempotent: cfg
                    .node_params
                    .get("idempotent")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(false),
            },
        },
    })
}

#[cfg(test)]
mod tests;
