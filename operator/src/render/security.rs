//! `spec.pod.securityContext` and `spec.pod.containerSecurityContext` over the restricted
//! defaults.
//!
//! The rule: a field the Flow sets replaces ours, field by field; a value the restricted Pod
//! Security Standard forbids is refused with its path instead of applied — so a cluster that
//! enforces `restricted` never sees a pod it would reject, and no setting loosens the profile
//! without the author hearing of it. Refused: `privileged: true`,
//! `allowPrivilegeEscalation: true`, `runAsNonRoot: false`, `runAsUser: 0`, a
//! `seccompProfile` of `Unconfined`, `procMount: Unmasked`, added capabilities other than
//! `NET_BIND_SERVICE`, and a `capabilities.drop` without `ALL`. Allowed (the profile does not
//! ask for them): another numeric user or group, `readOnlyRootFilesystem: false` for images
//! that write outside `/tmp`, SELinux and AppArmor options. A pod-level `runAsUser` or
//! `runAsGroup` takes the place of our container default of 65532, so it is what runs
//! unless the container-level setting names another.

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};

use super::error::RenderError;

/// The numeric user and group the containers run as: the images' own (`USER 65532:65532`),
/// and what `runAsNonRoot` needs to admit an image whose `USER` is a name or root — the
/// kubelet cannot verify a named user is not root, and refuses to start the container.
pub const RUN_AS_ID: i64 = 65532;

/// The restricted Pod Security Standard, per container: the worker needs no privilege, and
/// clusters that enforce `restricted` must admit its pods unchanged.
pub(crate) fn restricted_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS_ID),
        run_as_group: Some(RUN_AS_ID),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            localhost_profile: None,
        }),
        ..SecurityContext::default()
    }
}

fn refused(path: String, what: &str) -> RenderError {
    RenderError::InvalidField {
        path,
        message: format!(
            "{what} would weaken the restricted Pod Security Standard the worker pods meet; \
             remove it (docs/OPERATIONS.md, \"Pod security\")"
        ),
    }
}

fn check_seccomp(profile: Option<&SeccompProfile>, path: &str) -> Result<(), RenderError> {
    match profile {
        Some(p) if p.type_ == "Unconfined" => Err(refused(
            format!("{path}.seccompProfile.type"),
            "seccompProfile Unconfined",
        )),
        _ => Ok(()),
    }
}

/// Checks the pod-level context against the rule (module docs).
pub(crate) fn check_pod(ctx: &PodSecurityContext) -> Result<(), RenderError> {
    const AT: &str = "spec.pod.securityContext";
    if ctx.run_as_non_root == Some(false) {
        return Err(refused(format!("{AT}.runAsNonRoot"), "runAsNonRoot: false"));
    }
    if ctx.run_as_user == Some(0) {
        return Err(refused(format!("{AT}.runAsUser"), "runAsUser: 0 (root)"));
    }
    check_seccomp(ctx.seccomp_profile.as_ref(), AT)
}

/// Checks the container-level context against the rule (module docs).
pub(crate) fn check_container(ctx: &SecurityContext) -> Result<(), RenderError> {
    const AT: &str = "spec.pod.containerSecurityContext";
    if ctx.privileged == Some(true) {
        return Err(refused(format!("{AT}.privileged"), "privileged: true"));
    }
    if ctx.allow_privilege_escalation == Some(true) {
        return Err(refused(
            format!("{AT}.allowPrivilegeEscalation"),
            "allowPrivilegeEscalation: true",
        ));
    }
    if ctx.run_as_non_root == Some(false) {
        return Err(refused(format!("{AT}.runAsNonRoot"), "runAsNonRoot: false"));
    }
    if ctx.run_as_user == Some(0) {
        return Err(refused(format!("{AT}.runAsUser"), "runAsUser: 0 (root)"));
    }
    if ctx.proc_mount.as_deref() == Some("Unmasked") {
        return Err(refused(format!("{AT}.procMount"), "procMount: Unmasked"));
    }
    if let Some(caps) = &ctx.capabilities {
        if let Some(add) = &caps.add
            && let Some((i, cap)) = add
                .iter()
                .enumerate()
                .find(|(_, c)| c.as_str() != "NET_BIND_SERVICE")
        {
            return Err(refused(
                format!("{AT}.capabilities.add[{i}]"),
                &format!("adding capability {cap}"),
            ));
        }
        if let Some(drop) = &caps.drop
            && !drop.iter().any(|c| c == "ALL")
        {
            return Err(refused(
                format!("{AT}.capabilities.drop"),
                "a drop list without ALL",
            ));
        }
    }
    check_seccomp(ctx.seccomp_profile.as_ref(), AT)
}

/// The security context of every videoflow container: the restricted defaults, the
/// pod-level user and group in place of ours, then the container-level fields the Flow
/// sets. Both inputs are checked already ([`check_pod`], [`check_container`]).
pub(crate) fn container_context(
    pod: Option<&PodSecurityContext>,
    over: Option<&SecurityContext>,
) -> SecurityContext {
    let mut sc = restricted_security_context();
    if let Some(pod) = pod {
        if pod.run_as_user.is_some() {
            sc.run_as_user = pod.run_as_user;
        }
        if pod.run_as_group.is_some() {
            sc.run_as_group = pod.run_as_group;
        }
    }
    let Some(o) = over else {
        return sc;
    };
    macro_rules! take {
        ($($field:ident),*) => {
            $(if o.$field.is_some() {
                sc.$field = o.$field.clone();
            })*
        };
    }
    take!(
        allow_privilege_escalation,
        app_armor_profile,
        capabilities,
        privileged,
        proc_mount,
        read_only_root_filesystem,
        run_as_group,
        run_as_non_root,
        run_as_user,
        se_linux_options,
        seccomp_profile,
        windows_options
    );
    sc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_fields_replace_ours_and_the_rest_stays_restricted() {
        let pod = PodSecurityContext {
            run_as_user: Some(1000),
            fs_group: Some(2000),
            ..PodSecurityContext::default()
        };
        let over = SecurityContext {
            read_only_root_filesystem: Some(false),
            run_as_group: Some(3000),
            ..SecurityContext::default()
        };
        assert_eq!(check_pod(&pod), Ok(()));
        assert_eq!(check_container(&over), Ok(()));
        let sc = container_context(Some(&pod), Some(&over));
        assert_eq!(sc.run_as_user, Some(1000));
        assert_eq!(sc.run_as_group, Some(3000));
        assert_eq!(sc.read_only_root_filesystem, Some(false));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(
            sc.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_owned()])
        );
    }

    #[test]
    fn weakening_fields_are_refused_with_their_paths() {
        let cases = [
            (
                SecurityContext {
                    privileged: Some(true),
                    ..SecurityContext::default()
                },
                "spec.pod.containerSecurityContext.privileged",
            ),
            (
                SecurityContext {
                    run_as_user: Some(0),
                    ..SecurityContext::default()
                },
                "spec.pod.containerSecurityContext.runAsUser",
            ),
            (
                SecurityContext {
                    capabilities: Some(Capabilities {
                        add: Some(vec!["NET_BIND_SERVICE".into(), "SYS_ADMIN".into()]),
                        drop: None,
                    }),
                    ..SecurityContext::default()
                },
                "spec.pod.containerSecurityContext.capabilities.add[1]",
            ),
            (
                SecurityContext {
                    seccomp_profile: Some(SeccompProfile {
                        type_: "Unconfined".into(),
                        localhost_profile: None,
                    }),
                    ..SecurityContext::default()
                },
                "spec.pod.containerSecurityContext.seccompProfile.type",
            ),
        ];
        for (ctx, path) in cases {
            match check_container(&ctx) {
                Err(RenderError::InvalidField { path: got, .. }) => assert_eq!(got, path),
                other => panic!("{path}: {other:?}"),
            }
        }
        let root = PodSecurityContext {
            run_as_non_root: Some(false),
            ..PodSecurityContext::default()
        };
        assert!(matches!(
            check_pod(&root),
            Err(RenderError::InvalidField { path, .. }) if path == "spec.pod.securityContext.runAsNonRoot"
        ));
    }
}
