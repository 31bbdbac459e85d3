//! Live progress of a local run: one plain line per interval with, per node, how many
//! messages it has published (producers) or settled (others) and the rate since the last line.
//!
//! Read from the broker, not from the workers, so it costs the workers nothing and keeps
//! counting across restarts: a producer's count is its stream's last sequence; another node's
//! is its data durable's ack floor on its first parent (for a partitioned node the smallest
//! over its replicas' durables: every replica settles every message, owned or skipped).

use std::collections::BTreeMap;
use std::time::Instant;

use videoflow_core::compile::CompiledFlow;
use videoflow_core::naming;

use crate::broker::Broker;

/// Counts between two progress lines.
#[derive(Debug, Default)]
pub struct Progress {
    last: BTreeMap<String, (u64, Instant)>,
}

impl Progress {
    /// The progress line for `flow` now, e.g.
    /// `numbers 100 published | double 57 done (11.2/s) | sink 38 done (7.5/s)`.
    /// A node whose counts cannot be read shows `?` (never 0).
    pub async fn line(&mut self, broker: &Broker, flow: &CompiledFlow) -> String {
        let mut parts = Vec::new();
        for node in &flow.nodes {
            let count = if node.parents.is_empty() {
                published(broker, flow, &node.name).await
            } else {
                settled(broker, flow, node).await
            };
            let word = if node.parents.is_empty() {
                "published"
            } else {
                "done"
            };
            let Some(count) = count else {
                parts.push(format!("{} ? {word}", node.name));
                continue;
            };
            let now = Instant::now();
            let rate = self.last.get(&node.name).and_then(|(before, at)| {
                let dt = now.duration_since(*at).as_secs_f64();
                (dt > 0.0).then(|| count.saturating_sub(*before) as f64 / dt)
            });
            self.last.insert(node.name.clone(), (count, now));
            match rate {
                Some(r) => parts.push(format!("{} {count} {word} ({r:.1}/s)", node.name)),
                None => parts.push(format!("{} {count} {word}", node.name)),
            }
        }
        parts.join(" | ")
    }
}

async fn published(broker: &Broker, flow: &CompiledFlow, node: &str) -> Option<u64> {
    let name = naming::stream_name(&flow.flow_id, &flow.run_id, node);
    let mut stream = broker.jetstream().get_stream(&name).await.ok()?;
    Some(stream.info().await.ok()?.state.last_sequence)
}

async fn settled(
    broker: &Broker,
    flow: &CompiledFlow,
    node: &videoflow_core::compile::NodeSpec,
) -> Option<u64> {
    let parent = node.parents.first()?;
    let stream = naming::stream_name(&flow.flow_id, &flow.run_id, parent);
    let durables: Vec<String> = if node.is_partitioned() {
        (0..node.nb_tasks)
            .filter_map(|r| u32::try_from(r).ok())
            .map(|r| naming::partitioned_durable_name(&node.name, parent, r))
            .collect()
    } else {
        vec![naming::durable_name(&node.name, parent)]
    };
    let mut floor: Option<u64> = None;
    for durable in durables {
        let mut consumer: async_nats::jetstream::consumer::PullConsumer = broker
            .jetstream()
            .get_consumer_from_stream(&durable, &stream)
            .await
            .ok()?;
        let acked = consumer.info().await.ok()?.ack_floor.consumer_sequence;
        floor = Some(floor.map_or(acked, |f| f.min(acked)));
    }
    floor
}
