//! The order a local run starts its workers in: all at once for BATCH, children before
//! parents for REALTIME.
//!
//! **Why REALTIME waits.** A REALTIME node stream keeps only its newest message (STREAM-2:
//! `max_msgs` 1, discard OLD). A message published while no consumer of the stream has a pull
//! request waiting is delivered only if that consumer fetches it before the next message
//! replaces it. Started together, a producer publishes while its children are still
//! connecting and binding their durables (START-1 step 8), and its first messages are gone
//! before anyone asked for them — a loss that depends only on which process the machine
//! happened to schedule first. So the runner starts the nodes without children first, and
//! every other node once each of its children *pulls* from it: every data durable the child
//! reads the node's stream through has a pull request waiting on the broker from each of
//! the child's live replicas (`num_waiting`), the state in which the next message is
//! delivered as soon as it is stored. A child that ended for good does not hold its parents
//! back.
//!
//! BATCH streams keep every message until the provisioned durables took it (STREAM-3,
//! STREAM-7), so a BATCH run starts every worker at once.
//!
//! What this does not remove: a REALTIME stream still drops a message that a newer one
//! replaces before the consumer fetched it — two messages stored back to back (a source
//! catching up after a stall), or a consumer busy or descheduled for longer than the gap
//! between two messages. That is REALTIME's contract (STREAM-2, DELIV-4: newest wins), not a
//! start-up race. A worker pulls as soon as its durables are bound, shortly before its
//! node's `open()` returns (START-1 steps 8–12); a message delivered in between waits in its
//! local queue.

use videoflow_core::compile::{CompiledFlow, NodeSpec};
use videoflow_core::model::FlowType;
use videoflow_core::naming;

use crate::broker::Broker;

/// How a child's replicas stand, as the start order needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaState {
    /// Not started yet.
    NotStarted,
    /// Running, or waiting for a restart.
    Live,
    /// Ended for good (no restart coming).
    Ended,
}

/// The nodes of a run not started yet, in the order they may start.
#[derive(Debug, Clone, Default)]
pub struct StartOrder {
    waiting: Vec<String>,
}

impl StartOrder {
    /// BATCH: nothing waits. REALTIME: every node waits for its children (the nodes without
    /// children only for [`StartOrder::due`]'s first call).
    pub fn new(flow: &CompiledFlow) -> Self {
        let waiting = match flow.flow_type {
            FlowType::Batch => Vec::new(),
            // Compiled records list parents before children: reversed, children come first.
            FlowType::Realtime => flow.nodes.iter().rev().map(|n| n.name.clone()).collect(),
        };
        StartOrder { waiting }
    }

    /// Whether `node` is still waiting to start.
    pub fn is_waiting(&self, node: &str) -> bool {
        self.waiting.iter().any(|n| n == node)
    }

    /// Whether some node is still waiting.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Gives up on every node still waiting (the run is stopping): they never start.
    pub fn abandon(&mut self) -> Vec<String> {
        std::mem::take(&mut self.waiting)
    }

    /// The waiting nodes that may start now, removed from the order: every child of such a
    /// node has started, and `pulling(child, node)` says the child takes the node's messages
    /// (see [`pulling`]). Asks only about nodes whose children have all started.
    pub async fn due<F, Fut>(&mut self, flow: &CompiledFlow, mut pulling: F) -> Vec<String>
    where
        F: FnMut(String, String) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let mut due = Vec::new();
        for node in self.waiting.clone() {
            let kids = children(flow, &node);
            // A child due in this same call has not started yet either.
            if kids.iter().any(|c| self.is_waiting(c)) {
                continue;
            }
            let mut ready = true;
            for child in kids {
                if !pulling(child, node.clone()).await {
                    ready = false;
                    break;
                }
            }
            if ready {
                due.push(node);
            }
        }
        self.waiting.retain(|n| !due.contains(n));
        due
    }
}

/// The children of `node` (the nodes listing it as a parent), in flow order.
pub fn children(flow: &CompiledFlow, node: &str) -> Vec<String> {
    flow.nodes
        .iter()
        .filter(|n| n.parents.iter().any(|p| p == node))
        .map(|n| n.name.clone())
        .collect()
}

/// Whether `child` takes `parent`'s messages: for each of its data durables on `parent`'s
/// stream, as many pull requests wait as replicas read through it that are still live
/// (`replicas[r]` is replica `r`'s state). A child that never started is not pulling; a
/// durable that cannot be read counts as not pulling (the next poll asks again).
pub async fn pulling(
    broker: &Broker,
    flow: &CompiledFlow,
    child: &NodeSpec,
    parent: &str,
    replicas: &[ReplicaState],
) -> bool {
    if replicas.contains(&ReplicaState::NotStarted) {
        return false;
    }
    let stream = naming::stream_name(&flow.flow_id, &flow.run_id, parent);
    // (durable, how many live replicas read through it)
    let durables: Vec<(String, usize)> = if child.is_partitioned() {
        replicas
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == ReplicaState::Live)
            .filter_map(|(r, _)| u32::try_from(r).ok())
            .map(|r| (naming::partitioned_durable_name(&child.name, parent, r), 1))
            .collect()
    } else {
        let live = replicas
            .iter()
            .filter(|s| **s == ReplicaState::Live)
            .count();
        if live == 0 {
            Vec::new()
        } else {
            vec![(naming::durable_name(&child.name, parent), live)]
        }
    };
    for (durable, wanted) in durables {
        let consumer: Result<async_nats::jetstream::consumer::PullConsumer, _> = broker
            .jetstream()
            .get_consumer_from_stream(&durable, &stream)
            .await;
        match consumer {
            Ok(c) if c.cached_info().num_waiting >= wanted => {}
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use videoflow_core::compile::compile;
    use videoflow_core::load::load_flow;

    fn flow(kind: &str) -> CompiledFlow {
        let text = format!(
            r#"
apiVersion: videoflow.io/v1alpha1
kind: Flow
metadata: {{name: order}}
spec:
  type: {kind}
  nodes:
  - {{name: cam, kind: producer, component: {{builtin: videoflow.producers.basic.IntProducer}}}}
  - {{name: imu, kind: producer, component: {{builtin: videoflow.producers.basic.IntProducer}}}}
  - name: fuse
    kind: processor
    parents: [cam, imu]
    component: {{builtin: videoflow.processors.basic.IdentityProcessor}}
  - name: sink
    kind: consumer
    parents: [fuse]
    component: {{builtin: videoflow.consumers.basic.VoidConsumer}}
  - name: tap
    kind: consumer
    parents: [cam]
    component: {{builtin: videoflow.consumers.basic.VoidConsumer}}
"#
        );
        let (doc, _) = load_flow(&text).expect("valid flow");
        compile(&doc).expect("compiles")
    }

    fn due(order: &mut StartOrder, flow: &CompiledFlow, pulling: &[(&str, &str)]) -> Vec<String> {
        let pulling: Vec<(String, String)> = pulling
            .iter()
            .map(|(c, p)| ((*c).to_owned(), (*p).to_owned()))
            .collect();
        let mut names = futures::executor::block_on(order.due(flow, |c, p| {
            let yes = pulling.contains(&(c, p));
            async move { yes }
        }));
        names.sort();
        names
    }

    #[test]
    fn batch_starts_everything_at_once() {
        let f = flow("batch");
        let mut order = StartOrder::new(&f);
        assert!(order.is_empty());
        assert!(due(&mut order, &f, &[]).is_empty());
    }

    #[test]
    fn stream_2_realtime_starts_children_first_and_parents_once_they_pull() {
        let f = flow("realtime");
        let mut order = StartOrder::new(&f);
        // Nodes without children first, whatever the broker says.
        assert_eq!(due(&mut order, &f, &[]), ["sink", "tap"]);
        // `fuse` waits until `sink` pulls from it.
        assert!(due(&mut order, &f, &[]).is_empty());
        assert_eq!(due(&mut order, &f, &[("sink", "fuse")]), ["fuse"]);
        // `cam` needs both of its children pulling; `imu` only `fuse`.
        assert_eq!(
            due(&mut order, &f, &[("fuse", "imu"), ("fuse", "cam")]),
            ["imu"]
        );
        assert!(order.is_waiting("cam"));
        assert_eq!(
            due(&mut order, &f, &[("fuse", "cam"), ("tap", "cam")]),
            ["cam"]
        );
        assert!(order.is_empty());
    }

    #[test]
    fn abandoned_nodes_never_start() {
        let f = flow("realtime");
        let mut order = StartOrder::new(&f);
        assert_eq!(due(&mut order, &f, &[]), ["sink", "tap"]);
        let mut left = order.abandon();
        left.sort();
        assert_eq!(left, ["cam", "fuse", "imu"]);
        assert!(due(&mut order, &f, &[("sink", "fuse")]).is_empty());
    }
}
