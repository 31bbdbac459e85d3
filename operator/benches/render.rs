//! Rendering time of a 10-node Flow : `render::render` from a
//! parsed `Flow` to every Kubernetes object of its run. Prints one JSON object on stdout.
//! Run through `scripts/bench`, or `cargo bench -p videoflow-operator --bench render`.

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};

use videoflow_operator::render::{self, RenderConfig};

/// A 10-node Flow: producer, a chain of processors (one with replicas, one partitioned),
/// a two-parent join, consumers.
fn ten_node_flow() -> String {
    let mut y = String::from(
        "apiVersion: videoflow.io/v1alpha1\nkind: Flow\nmetadata: {name: bench10, namespace: videoflow, uid: 6f1c2d3e-0000-4000-8000-000000000012}\nspec:\n  type: batch\n  nodes:\n  - name: n0\n    kind: producer\n    component: {builtin: videoflow.producers.basic.IntProducer}\n    params: {start_value: 0, end_value: 100}\n",
    );
    for i in 1..=6 {
        let extra = match i {
            2 => "    replicas: 3\n",
            _ => "",
        };
        let _ = write!(
            y,
            "  - name: n{i}\n    kind: processor\n    parents: [n{}]\n{extra}    component: {{builtin: videoflow.processors.basic.IdentityProcessor}}\n",
            i - 1
        );
    }
    y.push_str("  - name: n7\n    kind: processor\n    parents: [n6, n3]\n    component: {builtin: videoflow.processors.basic.JoinerProcessor}\n");
    y.push_str("  - name: n8\n    kind: consumer\n    parents: [n7]\n    component: {builtin: videoflow.consumers.basic.VoidConsumer}\n");
    y.push_str("  - name: n9\n    kind: consumer\n    parents: [n5]\n    component: {builtin: videoflow.consumers.basic.VoidConsumer}\n");
    y
}

fn main() {
    let quick = std::env::var("VF_BENCH_QUICK").is_ok_and(|v| v == "1");
    let text = ten_node_flow();
    let flow = render::load::flow_from_text(&text).expect("the 10-node flow parses");
    let config = RenderConfig {
        worker_image: "videoflow-worker:bench".into(),
        image_pull_policy: "IfNotPresent".into(),
        namespace: "videoflow".into(),
        nats_url: Some("nats://nats.videoflow.svc:4222".into()),
    };
    let first = render::render(&flow, &config).expect("renders");
    let objects = first.objects().len();
    // Warm up, then time batches until the budget is spent; report per-render statistics.
    let budget = if quick {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(3)
    };
    for _ in 0..20 {
        black_box(render::render(black_box(&flow), &config).expect("renders"));
    }
    let mut samples = Vec::new();
    let started = Instant::now();
    while started.elapsed() < budget || samples.len() < 10 {
        let t = Instant::now();
        const BATCH: u32 = 20;
        for _ in 0..BATCH {
            black_box(render::render(black_box(&flow), &config).expect("renders"));
        }
        samples.push(t.elapsed().as_secs_f64() / f64::from(BATCH));
    }
    samples.sort_by(f64::total_cmp);
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize] * 1e6;
    println!(
        "{{\"render_10_nodes\": {{\"objects\": {objects}, \"samples\": {}, \"median_us\": {:.1}, \"p5_us\": {:.1}, \"p95_us\": {:.1}}}}}",
        samples.len(),
        pick(0.5),
        pick(0.05),
        pick(0.95)
    );
}
