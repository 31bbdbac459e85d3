//! Broker names (NAME-*) and Kubernetes object names: one module for every physical name.
//!
//! All names are pure functions of (flow, run, node), so every worker, the provisioner and
//! the operator find each other without discovery. Both encodings are lossy (`a.b` and `a_b`
//! both become `a_b`; `Node` and `node` share a Deployment), which is why
//! [`crate::validate`] rejects flows whose distinct node names collide after encoding.
//! Message ids and owner labels always use the **raw** names.

/// Owner label: raw flow id (STREAM-14).
pub const LABEL_FLOW_ID: &str = "videoflow.io/flow-id";
/// Owner label: raw run id (absent on the DLQ stream).
pub const LABEL_RUN_ID: &str = "videoflow.io/run-id";
/// Owner label: raw node name (the consuming node for durables).
pub const LABEL_NODE: &str = "videoflow.io/node";
/// Owner label: resource kind (`stream`, `durable`, …).
pub const LABEL_KIND: &str = "videoflow.io/kind";
/// Owner label: provisioning operation id (optional).
pub const LABEL_GENERATION: &str = "videoflow.io/generation";

/// Kubernetes names are limited to 63 characters (DNS-1123 label).
pub const K8S_NAME_MAX: usize = 63;

/// `sanitize(s)` (§0): every maximal run of characters outside `[A-Za-z0-9_-]` becomes one `_`.
pub fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_run = false;
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('_');
            in_run = true;
        }
    }
    out
}

/// NAME-2: data subject `vf.{flow}.{run}.{node}`.
pub fn data_subject(flow: &str, run: &str, node: &str) -> String {
    format!("vf.{}.{}.{}", sanitize(flow), sanitize(run), sanitize(node))
}

/// NAME-3: node stream `vf-{flow}-{run}-{node}`.
pub fn stream_name(flow: &str, run: &str, node: &str) -> String {
    format!("vf-{}-{}-{}", sanitize(flow), sanitize(run), sanitize(node))
}

/// NAME-4: terminator subject (EOS and ABORT) `vf.{flow}.{run}.{node}._eos`.
pub fn eos_subject(flow: &str, run: &str, node: &str) -> String {
    format!("{}._eos", data_subject(flow, run, node))
}

/// NAME-5: shared data durable `{child}--from--{parent}` (on the parent's stream).
pub fn durable_name(child: &str, parent: &str) -> String {
    format!("{}--from--{}", sanitize(child), sanitize(parent))
}

/// NAME-6: partitioned data durable `{child}--from--{parent}--p{replica}`.
pub fn partitioned_durable_name(child: &str, parent: &str, replica: u32) -> String {
    format!("{}--p{replica}", durable_name(child, parent))
}

/// NAME-7: EOS durable of one running replica `{child}--eos--{parent}--{instance}`.
pub fn eos_durable_name(child: &str, parent: &str, instance: &str) -> String {
    format!(
        "{}--eos--{}--{}",
        sanitize(child),
        sanitize(parent),
        sanitize(instance)
    )
}

/// EOS interest anchor `{node}--eos--anchor` on the node's own stream.
pub fn eos_anchor_name(node: &str) -> String {
    format!("{}--eos--anchor", sanitize(node))
}

/// NAME-8: control subject `vf.{flow}.{run}._control.stop` (plain NATS).
pub fn control_subject(flow: &str, run: &str) -> String {
    format!("vf.{}.{}._control.stop", sanitize(flow), sanitize(run))
}

/// NAME-9: flow-scoped DLQ stream `vf-{flow}-dlq` (survives run teardown).
pub fn dlq_stream_name(flow: &str) -> String {
    format!("vf-{}-dlq", sanitize(flow))
}

/// NAME-9: DLQ subject of one node of one run `vf.{flow}._dlq.{run}.{node}`.
pub fn dlq_subject(flow: &str, run: &str, node: &str) -> String {
    format!(
        "vf.{}._dlq.{}.{}",
        sanitize(flow),
        sanitize(run),
        sanitize(node)
    )
}

/// NAME-9: the DLQ stream's subject binding `vf.{flow}._dlq.>`.
pub fn dlq_binding(flow: &str) -> String {
    format!("vf.{}._dlq.>", sanitize(flow))
}

/// Joins parts into a DNS-1123 label: lower-cased, runs of characters outside `[a-z0-9-]`
/// become `-`, leading/trailing `-` trimmed, truncated to 63 characters (the reference's
/// `k8s_name`, so both control planes name objects alike).
pub fn k8s_name(parts: &[&str]) -> String {
    let raw = parts.join("-").to_lowercase();
    let mut out = String::with_capacity(raw.len());
    let mut in_run = false;
    for c in raw.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    let trimmed = out.trim_matches('-');
    let cut: String = trimmed.chars().take(K8S_NAME_MAX).collect();
    cut.trim_matches('-').to_owned()
}

/// Name of one run's object: `vf-{flow}-{run}[-{part}…]`; run-scoped so two runs of one
/// flow never apply over each other's objects.
pub fn run_object_name(flow: &str, run: &str, parts: &[&str]) -> String {
    let mut all = vec!["vf", flow, run];
    all.extend_from_slice(parts);
    k8s_name(&all)
}

/// Name of a flow-wide object shared by every run: `vf-{flow}[-{part}…]`.
pub fn flow_object_name(flow: &str, parts: &[&str]) -> String {
    let mut all = vec!["vf", flow];
    all.extend_from_slice(parts);
    k8s_name(&all)
}

/// The two lossy encodings a node name goes through, for collision checks (NAME-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `sanitize()`: broker subjects, streams and durables.
    Broker,
    /// [`k8s_name`]: workloads, ConfigMaps, Services.
    Kubernetes,
}

impl Encoding {
    /// The word used in NAME-1's message.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Broker => "broker",
            Encoding::Kubernetes => "kubernetes",
        }
    }

    /// The physical name of `node` under this encoding. Kubernetes names are compared with the
    /// placeholder ids `f`/`r`, as the reference does, so the check does not depend on the run.
    pub fn encode(self, node: &str) -> String {
        match self {
            Encoding::Broker => sanitize(node),
            Encoding::Kubernetes => run_object_name("f", "r", &[node]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_1_sanitize_collapses_runs() {
        assert_eq!(sanitize("a.b"), "a_b");
        assert_eq!(sanitize("a_b"), "a_b");
        assert_eq!(sanitize("caméra-Ω"), "cam_ra-_");
        assert_eq!(sanitize("a..::b"), "a_b");
        assert_eq!(sanitize(""), "");
    }

    #[test]
    fn name_2_to_9_formats() {
        assert_eq!(
            data_subject("flow-A", "run.1", "cam"),
            "vf.flow-A.run_1.cam"
        );
        assert_eq!(stream_name("flow-A", "run-1", "cam"), "vf-flow-A-run-1-cam");
        assert_eq!(eos_subject("f", "r", "n"), "vf.f.r.n._eos");
        assert_eq!(durable_name("det", "cam"), "det--from--cam");
        assert_eq!(
            partitioned_durable_name("det", "cam", 3),
            "det--from--cam--p3"
        );
        assert_eq!(
            eos_durable_name("det", "cam", "r0-1a2b3c4d"),
            "det--eos--cam--r0-1a2b3c4d"
        );
        assert_eq!(eos_anchor_name("cam"), "cam--eos--anchor");
        assert_eq!(control_subject("f", "r"), "vf.f.r._control.stop");
        assert_eq!(dlq_stream_name("f.x"), "vf-f_x-dlq");
        assert_eq!(dlq_subject("f", "r", "n"), "vf.f._dlq.r.n");
        assert_eq!(dlq_binding("f"), "vf.f._dlq.>");
    }

    #[test]
    fn k8s_names_are_dns_labels() {
        assert_eq!(
            run_object_name("Flow_A", "run.1", &["Det"]),
            "vf-flow-a-run-1-det"
        );
        assert_eq!(k8s_name(&["--a", "b--"]), "a-b");
        let long = "x".repeat(100);
        let name = run_object_name("f", "r", &[&long]);
        assert_eq!(name.len(), K8S_NAME_MAX);
        // Truncation never leaves a trailing dash.
        let dashy = format!("{}-{}", "y".repeat(57), "z");
        assert!(!run_object_name("f", "r", &[&dashy]).ends_with('-'));
    }
}
