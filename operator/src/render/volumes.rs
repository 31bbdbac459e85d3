//! The volumes videoflow adds to every pod it renders: their names and mount paths.
//!
//! In one module because two sides must agree on them: the pod builders mount them, and
//! `spec.pod` parsing refuses user volumes and mounts that would collide with them.

/// The writable scratch volume: the root filesystem is read-only.
pub const TMP_VOLUME: &str = "vf-tmp";
/// Where the scratch volume is mounted in every container.
pub const TMP_DIR: &str = "/tmp";
/// The volume the exec wrapper is copied into.
pub const WRAPPER_VOLUME: &str = "vf-bin";
/// Where exec pods find the worker binary the init container copied.
pub const WRAPPER_DIR: &str = "/videoflow/bin";
/// The specs ConfigMap's volume in the provisioning pod.
pub const SPECS_VOLUME: &str = "vf-specs";

/// Volume names the renderer owns; `spec.pod` may not reuse them.
pub const RESERVED_VOLUMES: [&str; 3] = [TMP_VOLUME, WRAPPER_VOLUME, SPECS_VOLUME];
/// Mount paths the renderer owns in worker containers; `spec.pod` may not reuse them.
pub const RESERVED_PATHS: [&str; 2] = [TMP_DIR, WRAPPER_DIR];
