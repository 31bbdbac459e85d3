//! The environment a control plane renders (core::env, one function for the operator and the
//! local runner) is exactly what the worker parses (ENV-*): every node of every sample Flow.

use std::collections::BTreeMap;

use videoflow_core::compile::compile;
use videoflow_core::env::{EnvContext, EnvValue, render_node_env};
use videoflow_core::load::parse_flow;
use videoflow_core::model::NodeKind;
use videoflow_worker::config::WorkerConfig;

fn samples() -> Vec<std::path::PathBuf> {
    let dir = videoflow_testkit::manifest_dir(env!("CARGO_MANIFEST_DIR")).join("../config/samples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no sample Flows in {}", dir.display());
    files
}

#[test]
fn rendered_env_parses_back_for_every_sample_node() {
    let ctx = EnvContext {
        default_nats_url: Some("nats://127.0.0.1:4222".into()),
        health_port: 0,
    };
    for path in samples() {
        let text = std::fs::read_to_string(&path).expect("read sample");
        let doc = parse_flow(&text).unwrap_or_else(|d| panic!("{}: {d:#?}", path.display()));
        let flow = compile(&doc).unwrap_or_else(|d| panic!("{}: {d:#?}", path.display()));
        for spec in &flow.nodes {
            let env = render_node_env(&doc, &flow, &spec.name, &ctx).expect("renders");
            let vars: BTreeMap<String, String> = env
                .into_iter()
                .map(|(k, v)| match v {
                    EnvValue::Literal(s) => (k, s),
                    EnvValue::Secret { .. } => panic!("{k}: samples use no secrets"),
                })
                .collect();
            let cfg = WorkerConfig::from_env(&vars).unwrap_or_else(|e| {
                panic!("{} node {}: {}", path.display(), spec.name, e.render())
            });
            assert_eq!(cfg.node_name, spec.name);
            assert_eq!(cfg.kind.as_str(), spec.kind);
            assert_eq!(cfg.parent_names, spec.parents);
            assert_eq!(cfg.has_children, spec.has_children);
            assert_eq!(cfg.flow_id, flow.flow_id);
            assert_eq!(cfg.run_id, flow.run_id);
            assert_eq!(cfg.flow_type, flow.flow_type.as_str());
            assert_eq!(cfg.nb_tasks, spec.nb_tasks);
            assert_eq!(cfg.partition_by, spec.partition_by);
            assert_eq!(cfg.node_params, spec.params);
            assert_eq!(cfg.node_class, spec.node_class);
            assert_eq!(
                cfg.blob_readers.unwrap_or(0),
                spec.blob_readers.unwrap_or(0)
            );
            if let Some(j) = &spec.join_policy {
                assert!(cfg.join_policy_explicit);
                assert_eq!(&cfg.join_policy.to_reference_json(), j);
            }
            if cfg.kind == NodeKind::Producer {
                assert!(cfg.parent_names.is_empty());
            }
        }
    }
}
