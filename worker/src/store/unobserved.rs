//! What a user is told when a configured store's durability cannot be read back (STORE-6
//! Unknown).
//!
//! Why this matters: STORE-6 makes an unreadable store count as not durable, so a worker
//! whose run ledger refuses its password runs on as if it had none — no EOS-7 barrier, no
//! ledger attempt budget, no sink effect markers, no slot claims. That is the protocol's
//! rule and 1.0.4's behaviour; silence about it is not. Every Unknown therefore becomes one
//! WARNING naming the variable, the store (its password masked: the detail starts with the
//! redacted URL), why it could not be read, what the worker does without it and the fix,
//! which depends on the why: a refused password is fixed in the Secret, a refused CONFIG by
//! the Redis user's permissions, an unreachable store by the network.

use videoflow_core::scaling::Observation;

use super::StoreCapabilities;
use super::redis::{CONFIG_REFUSED, CREDENTIALS_REFUSED};

/// The fix for a store whose durability reads back `durability`, set through `var`; `None`
/// when it was read.
pub fn remedy(var: &str, durability: &Observation<bool>) -> Option<String> {
    let Observation::Unknown { reason, detail } = durability else {
        return None;
    };
    Some(match reason.as_str() {
        "auth" if detail.contains(CREDENTIALS_REFUSED) => format!(
            "The Redis behind {var} refused its credentials: put the password (and user) it \
             requires into {var} — on Kubernetes the Secret the Flow's urlFrom names."
        ),
        "auth" if detail.contains(CONFIG_REFUSED) => format!(
            "The Redis behind {var} refused CONFIG GET, so its persistence cannot be read: \
             allow it to this user (ACL `+config|get`), or use a Redis whose configuration \
             can be read."
        ),
        "timeout" | "unreachable" => format!(
            "Check that the Redis behind {var} is up and reachable from the worker, then \
             restart the worker."
        ),
        _ => format!("Check {var}: the store's configuration could not be read."),
    })
}

/// The WARNING when a run ledger's durability is Unknown — a worker logs it at start, the
/// provision job prints it: the ledger is off (records kept in process memory only). `None`
/// when the durability was read.
pub fn ledger_warning(var: &str, caps: &StoreCapabilities) -> Option<String> {
    let Observation::Unknown { reason, detail } = &caps.durable else {
        return None;
    };
    let fix = remedy(var, &caps.durable).unwrap_or_default();
    Some(format!(
        "the run ledger ({var}, {scheme}) could not be read back ({reason}: {detail}); it \
         counts as not durable, so the workers keep no ledger records: no EOS-7 barrier \
         (end of stream by quiescence), retries capped by the broker, no sink effect markers, \
         no replica slot claims. {fix}",
        scheme = caps.scheme,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(reason: &str, detail: &str) -> StoreCapabilities {
        StoreCapabilities {
            scheme: "redis".into(),
            durable: Observation::unknown(reason, detail),
            shared: true,
        }
    }

    #[test]
    fn store_6_each_unknown_gets_its_own_fix() {
        let refused = remedy(
            "VF_RUNTIME_STORE_URL",
            &Observation::unknown("auth", "redis://:***@h:6379/0: credentials refused: x"),
        )
        .expect("a fix");
        assert!(refused.contains("password"), "{refused}");
        let config = remedy(
            "VF_RUNTIME_STORE_URL",
            &Observation::unknown("auth", "redis://h:6379/0: CONFIG GET refused: x"),
        )
        .expect("a fix");
        assert!(config.contains("+config|get"), "{config}");
        let down = remedy(
            "VF_BLOB_REDIS_URL",
            &Observation::unknown("unreachable", "redis://h:1/0: refused"),
        )
        .expect("a fix");
        assert!(down.contains("VF_BLOB_REDIS_URL"), "{down}");
        assert!(remedy("V", &Observation::Known(false)).is_none());
    }

    #[test]
    fn store_6_the_warning_names_the_store_what_is_lost_and_the_fix() {
        let w = ledger_warning(
            "VF_RUNTIME_STORE_URL",
            &caps(
                "auth",
                "redis://:***@h:6379/0: credentials refused: WRONGPASS",
            ),
        )
        .expect("a warning");
        assert!(
            w.starts_with("the run ledger (VF_RUNTIME_STORE_URL, redis)"),
            "{w}"
        );
        assert!(w.contains("redis://:***@h:6379/0"), "{w}");
        assert!(w.contains("no EOS-7 barrier"), "{w}");
        assert!(w.contains("refused its credentials"), "{w}");
        let known = StoreCapabilities {
            durable: Observation::Known(false),
            ..caps("auth", "")
        };
        assert!(ledger_warning("VF_RUNTIME_STORE_URL", &known).is_none());
    }
}
