//! Worker pod templates: container, probes, security, GPU and the three node runtimes
//! (design §5: builtin, exec behind the worker wrapper, python reference worker).
//!
//! Why the environment is inline rather than in a per-node ConfigMap: a change of any `VF_*`
//! value then changes the pod template and rolls the workload, and Secret-backed URLs can stay
//! `secretKeyRef`s, which a ConfigMap cannot hold.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, PodSpec, Probe, ResourceRequirements, SecretKeySelector, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use videoflow_core::compile::NodeSpec;
use videoflow_core::env::{EnvValue, KUBERNETES_HEALTH_PORT};
use videoflow_core::model::{ComponentDecl, NodeDecl};

use super::context::Ctx;
use super::error::RenderError;
use super::settings::{non_empty, parse_value};
use super::volumes::{TMP_DIR, TMP_VOLUME, WRAPPER_DIR, WRAPPER_VOLUME};

/// Where the worker image keeps the worker binary (with the video nodes, linked to the
/// image's FFmpeg libraries).
pub const WORKER_BINARY: &str = "/usr/local/bin/videoflow-worker";
/// Where the worker image keeps the static (musl) worker without the video nodes: the one the
/// exec components' init container copies, since it runs in any user image.
pub const STATIC_WORKER_BINARY: &str = "/usr/local/lib/videoflow/videoflow-worker-static";
/// The termination record path (§15.4): the kubelet surfaces it in the container status.
pub const TERMINATION_LOG: &str = "/dev/termination-log";
/// Name of the worker container, for status readers and `kubectl logs -c`.
pub const WORKER_CONTAINER: &str = "worker";
/// Name of the health port the probes and the headless Service use.
pub const HEALTH_PORT_NAME: &str = "health";
/// The downward-API annotation an Indexed Job puts its completion index in.
pub const COMPLETION_INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";

pub use super::security::RUN_AS_ID;

/// One rendered variable: a literal, or a `secretKeyRef` so credentials never appear in the
/// manifest.
pub(crate) fn env_var(name: &str, value: &EnvValue) -> EnvVar {
    match value {
        EnvValue::Literal(v) => EnvVar {
            name: name.to_owned(),
            value: Some(v.clone()),
            value_from: None,
        },
        EnvValue::Secret { name: secret, key } => EnvVar {
            name: name.to_owned(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.clone(),
                    key: key.clone(),
                    optional: None,
                }),
                ..EnvVarSource::default()
            }),
        },
    }
}

/// A variable from the downward API.
pub(crate) fn field_env(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.to_owned(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
    }
}

/// The writable [`TMP_DIR`] every container gets (read-only root filesystem).
pub(crate) fn tmp_volume() -> (Volume, VolumeMount) {
    (empty_dir(TMP_VOLUME), mount(TMP_VOLUME, TMP_DIR, false))
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

/// A volume mount; read-only mounts say so, writable ones leave the field out.
pub(crate) fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// Seconds between startup probes.
const STARTUP_PERIOD: i32 = 5;
/// Seconds between liveness probes.
const LIVENESS_PERIOD: i32 = 15;

/// The failure threshold that makes `budget` seconds of failed probes every `period` seconds.
fn periods(budget: i32, period: i32) -> i32 {
    (budget + period - 1) / period
}

fn http_probe(path: &str, period: i32, failure_threshold: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String(HEALTH_PORT_NAME.to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failure_threshold),
        ..Probe::default()
    }
}

/// How a node's component turns into containers.
enum Runtime<'a> {
    /// Compiled into the worker: the worker image, `VF_NODE_CLASS` selects the node.
    Builtin,
    /// The user's image, the worker copied in by an init container and wrapping `argv`.
    Exec { image: &'a str, argv: Vec<String> },
    /// The Python reference worker in the user's image.
    Python { image: &'a str },
}

fn runtime<'a>(index: usize, decl: &'a NodeDecl) -> Result<Runtime<'a>, RenderError> {
    let missing = |component: &'static str| RenderError::MissingComponentImage {
        node: decl.name.clone(),
        component,
        path: format!("spec.nodes[{index}].component.{component}.image"),
    };
    let ComponentDecl { exec, python, .. } = &decl.component;
    if let Some(exec) = exec {
        let image = exec.image.as_deref().filter(|i| !i.is_empty());
        let argv = exec.command.iter().chain(&exec.args).cloned().collect();
        return Ok(Runtime::Exec {
            image: image.ok_or_else(|| missing("exec"))?,
            argv,
        });
    }
    if let Some(python) = python {
        let image = python.image.as_deref().filter(|i| !i.is_empty());
        return Ok(Runtime::Python {
            image: image.ok_or_else(|| missing("python"))?,
        });
    }
    Ok(Runtime::Builtin)
}

/// Variables the renderer sets besides the core `VF_*` set; user `env` may not shadow any.
const POD_NAME: &str = "POD_NAME";
const VF_REPLICA_ID: &str = "VF_REPLICA_ID";
const VF_TERMINATION_LOG: &str = "VF_TERMINATION_LOG";
/// What a worker does after a clean end (`exit` or `hold`); see [`hold_after_finish`].
pub const VF_ON_FINISH: &str = "VF_ON_FINISH";

/// The environment of a worker container: the core `VF_*` set, the downward-API identity,
/// the termination log, then the node's own `env` (which may not redefine any of them).
fn worker_env(
    ctx: &Ctx,
    index: usize,
    spec: &NodeSpec,
    decl: &NodeDecl,
    indexed: bool,
) -> Result<Vec<EnvVar>, RenderError> {
    let rendered = ctx.node_env(&spec.name)?;
    let mut env: Vec<EnvVar> = rendered.iter().map(|(k, v)| env_var(k, v)).collect();
    // ENV-5 step 2: a StatefulSet pod's ordinal is its replica id.
    env.push(field_env(POD_NAME, "metadata.name"));
    if indexed {
        // ENV-5 step 1: an Indexed Job pod's name has a random suffix, so the completion
        // index is handed over explicitly.
        env.push(field_env(
            VF_REPLICA_ID,
            &format!("metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"),
        ));
    }
    env.push(env_var(
        VF_TERMINATION_LOG,
        &EnvValue::Literal(TERMINATION_LOG.to_owned()),
    ));
    for (i, value) in decl.env.iter().enumerate() {
        let path = format!("spec.nodes[{index}].env[{i}]");
        let var: EnvVar = parse_value(value, path.clone())?;
        let name = var.name.as_str();
        if rendered.contains_key(name)
            || [POD_NAME, VF_REPLICA_ID, VF_TERMINATION_LOG, VF_ON_FINISH].contains(&name)
        {
            return Err(RenderError::InvalidField {
                path: format!("{path}.name"),
                message: format!("{name} is set by videoflow and cannot be overridden"),
            });
        }
        env.push(var);
    }
    Ok(env)
}

/// The node's container resources, with its GPUs as a limit on the extended resource.
fn resources(
    ctx: &Ctx,
    index: usize,
    spec: &NodeSpec,
    decl: &NodeDecl,
) -> Result<Option<ResourceRequirements>, RenderError> {
    let mut resources: ResourceRequirements = match &decl.resources {
        Some(v) => parse_value(v, format!("spec.nodes[{index}].resources"))?,
        None => ResourceRequirements::default(),
    };
    if spec.device_type == "gpu" {
        // Extended resources are limits-only: the request defaults to the limit.
        resources.limits.get_or_insert_with(BTreeMap::new).insert(
            ctx.gpu_resource_name(spec),
            Quantity(spec.gpu_count.to_string()),
        );
    }
    Ok((resources != ResourceRequirements::default()).then_some(resources))
}

/// Makes the worker of a long-running workload (Deployment, StatefulSet: `restartPolicy:
/// Always`) hold after a clean end instead of exiting: the kubelet restarts every exit, so a
/// REALTIME worker whose finite sources ended and whose drain completed would otherwise be
/// restarted into a replica with nothing to read, then into `CrashLoopBackOff`. Jobs keep the
/// protocol's exit 0, which is how they complete.
pub(crate) fn hold_after_finish(pod: &mut PodSpec) {
    if let Some(worker) = pod
        .containers
        .iter_mut()
        .find(|c| c.name == WORKER_CONTAINER)
    {
        worker
            .env
            .get_or_insert_with(Vec::new)
            .push(env_var(VF_ON_FINISH, &EnvValue::Literal("hold".to_owned())));
    }
}

/// The pod spec of one node's workload; the caller sets the restart policy.
///
/// `indexed`: the workload is an Indexed Job, whose completion index becomes `VF_REPLICA_ID`.
pub(crate) fn worker_pod_spec(
    ctx: &Ctx,
    spec: &NodeSpec,
    indexed: bool,
) -> Result<PodSpec, RenderError> {
    let (index, decl) = ctx.decl(spec)?;
    let runtime = runtime(index, decl)?;
    let (tmp, tmp_mount) = tmp_volume();
    let mut volumes = vec![tmp];
    let mut mounts = vec![tmp_mount];
    let mut init_containers = Vec::new();
    // A built-in node's relative paths (a sink's file, a self-check's verdict) land in the
    // writable scratch volume, as the local runner puts them in its run directory: the
    // worker image's root is read-only. A user's image keeps its own working directory, which
    // its program may need (a Python module beside it).
    let working_dir = matches!(runtime, Runtime::Builtin).then(|| TMP_DIR.to_owned());
    let (image, command, args) = match runtime {
        Runtime::Builtin => (ctx.image.clone(), vec![WORKER_BINARY.to_owned()], None),
        Runtime::Exec { image, argv } => {
            let wrapper = format!("{WRAPPER_DIR}/videoflow-worker");
            volumes.push(empty_dir(WRAPPER_VOLUME));
            mounts.push(mount(WRAPPER_VOLUME, WRAPPER_DIR, true));
            init_containers.push(Container {
                name: "install-worker".to_owned(),
                image: Some(ctx.image.clone()),
                image_pull_policy: Some(ctx.pull_policy.clone()),
                command: Some(vec![
                    "cp".into(),
                    STATIC_WORKER_BINARY.into(),
                    wrapper.clone(),
                ]),
                security_context: Some(ctx.pod.container_security()),
                termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
                volume_mounts: Some(vec![mount(WRAPPER_VOLUME, WRAPPER_DIR, false)]),
                ..Container::default()
            });
            // `videoflow-worker exec -- <argv>` hosts the user's program over the component
            // protocol (docs/COMPONENTS.md).
            let mut args = vec!["exec".to_owned(), "--".to_owned()];
            args.extend(argv);
            (image.to_owned(), vec![wrapper], Some(args))
        }
        Runtime::Python { image } => (
            image.to_owned(),
            vec!["python".into(), "-m".into(), "videoflow.worker".into()],
            None,
        ),
    };
    volumes.extend(ctx.pod.volumes.iter().cloned());
    mounts.extend(ctx.pod.volume_mounts.iter().cloned());
    let container = Container {
        name: WORKER_CONTAINER.to_owned(),
        image: Some(image),
        image_pull_policy: Some(ctx.pull_policy.clone()),
        command: Some(command),
        args,
        env: Some(worker_env(ctx, index, spec, decl, indexed)?),
        ports: Some(vec![ContainerPort {
            container_port: i32::from(KUBERNETES_HEALTH_PORT),
            name: Some(HEALTH_PORT_NAME.to_owned()),
            ..ContainerPort::default()
        }]),
        // Start-up ends when `open()` returned (`/readyz`, HEALTH-1), however long a model
        // load takes within the budget; liveness only runs after it, so a slow open is never
        // a restart.
        startup_probe: Some(http_probe(
            "/readyz",
            STARTUP_PERIOD,
            periods(ctx.pod.startup_seconds, STARTUP_PERIOD),
        )),
        // Liveness never depends on the broker (no restart storms); readiness may.
        liveness_probe: Some(http_probe(
            "/healthz",
            LIVENESS_PERIOD,
            periods(ctx.pod.liveness_seconds, LIVENESS_PERIOD),
        )),
        readiness_probe: Some(http_probe("/readyz", 5, 3)),
        resources: resources(ctx, index, spec, decl)?,
        security_context: Some(ctx.pod.container_security()),
        termination_message_path: Some(TERMINATION_LOG.to_owned()),
        // The worker writes a JSON reason there; abrupt deaths fall back to the log tail.
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        volume_mounts: Some(mounts),
        working_dir,
        ..Container::default()
    };
    let mut pod = PodSpec {
        containers: vec![container],
        init_containers: non_empty(init_containers),
        volumes: Some(volumes),
        runtime_class_name: if spec.device_type == "gpu" {
            ctx.gpu_runtime_class()
        } else {
            None
        },
        ..PodSpec::default()
    };
    ctx.pod.apply_scheduling(&mut pod);
    Ok(pod)
}
