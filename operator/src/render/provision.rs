//! The provisioning Job: `videoflow-worker provision` creates the run's streams and durables
//! before any worker starts (design §7), because BATCH interest-retention streams drop what is
//! published before their consumers exist.

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, PodSpec, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::configmaps::{SPECS_KEY, specs_configmap_name};
use super::context::Ctx;
use super::error::RenderError;
use super::labels::Component;
use super::pod::{TERMINATION_LOG, WORKER_BINARY, env_var, mount, tmp_volume};
use super::volumes::SPECS_VOLUME;
use super::workloads::pod_failure_policy;

/// Retries of the provisioning pod. More than a node's 3: the usual failure is a broker that
/// is not reachable yet, and the Job controller's doubling backoff (10 s … 320 s) then spans
/// about ten minutes.
pub const PROVISION_BACKOFF_LIMIT: i32 = 6;

/// Where the provisioning pod mounts the specs ConfigMap.
pub const SPECS_DIR: &str = "/etc/videoflow";

/// The flow-scoped variables of the core environment that provisioning needs: identity,
/// broker and stores. Taken from a node's rendered environment so URL precedence and
/// Secret references follow the one renderer.
const PROVISION_ENV: [&str; 8] = [
    "VF_FLOW_ID",
    "VF_RUN_ID",
    "VF_FLOW_TYPE",
    "VF_NATS_URL",
    "VF_STREAM_REPLICAS",
    "VF_STREAM_MAX_AGE_SECONDS",
    "VF_BLOB_REDIS_URL",
    "VF_RUNTIME_STORE_URL",
];

/// `vf-<flow>-<run>-provision`.
pub(crate) fn provision_job(ctx: &Ctx) -> Result<Job, RenderError> {
    // Every node's environment carries the same flow-scoped values; any node will do.
    let first = ctx
        .compiled
        .nodes
        .first()
        .ok_or_else(|| RenderError::InvalidField {
            path: "spec.nodes".into(),
            message: "the Flow has no nodes".into(),
        })?;
    let node_env = ctx.node_env(&first.name)?;
    let mut env: Vec<_> = PROVISION_ENV
        .iter()
        .filter_map(|k| node_env.get(*k).map(|v| env_var(k, v)))
        .collect();
    env.push(env_var(
        "VF_FLOW_SPECS_PATH",
        &videoflow_core::env::EnvValue::Literal(format!("{SPECS_DIR}/{SPECS_KEY}")),
    ));
    env.push(env_var(
        "VF_TERMINATION_LOG",
        &videoflow_core::env::EnvValue::Literal(TERMINATION_LOG.to_owned()),
    ));
    let (tmp, tmp_mount) = tmp_volume();
    let container = Container {
        name: "provision".to_owned(),
        image: Some(ctx.image.clone()),
        image_pull_policy: Some(ctx.pull_policy.clone()),
        command: Some(vec![WORKER_BINARY.to_owned(), "provision".to_owned()]),
        env: Some(env),
        security_context: Some(ctx.pod.container_security()),
        termination_message_path: Some(TERMINATION_LOG.to_owned()),
        // Provisioning failures are otherwise opaque; the log tail reaches the status.
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        volume_mounts: Some(vec![mount(SPECS_VOLUME, SPECS_DIR, true), tmp_mount]),
        ..Container::default()
    };
    let mut pod = PodSpec {
        containers: vec![container],
        // Never, not OnFailure: each retry is a new pod, so the failed ones (and their
        // termination messages, which become the Provisioned condition) survive.
        restart_policy: Some("Never".to_owned()),
        volumes: Some(vec![
            Volume {
                name: SPECS_VOLUME.to_owned(),
                config_map: Some(ConfigMapVolumeSource {
                    name: specs_configmap_name(ctx),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            },
            tmp,
        ]),
        ..PodSpec::default()
    };
    ctx.pod.apply_scheduling(&mut pod);
    Ok(Job {
        metadata: ctx
            .run
            .meta(ctx.run.name(&["provision"]), Component::Provision, None),
        spec: Some(JobSpec {
            backoff_limit: Some(PROVISION_BACKOFF_LIMIT),
            pod_failure_policy: Some(pod_failure_policy("provision")),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    annotations: ctx.pod.pod_annotations(),
                    ..ctx.run.template_meta(Component::Provision, None)
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    })
}
