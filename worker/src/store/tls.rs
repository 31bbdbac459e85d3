//! `rediss://`: the trust check a worker makes before it relies on a TLS Redis.
//!
//! Why a check at start-up: every other Redis failure is transient (the server restarts,
//! the delivery is retried), but a certificate the worker does not trust never heals by
//! itself, and retrying it would look like a slow store rather than a wrong setting. So a
//! `rediss://` URL is connected to once when the worker starts; a refused certificate is
//! `VF_CONFIG` (exit 2) naming the variable, the URL (redacted) and the fix. A server that is
//! merely not there yet is left to the usual lazy connect and its retries.
//!
//! The trust store is the system's (`rustls-native-certs`), which honours `SSL_CERT_FILE`
//! and `SSL_CERT_DIR` — the same variables OpenSSL, and so the Python reference worker,
//! read — so one mounted CA bundle serves both runtimes.

use std::time::Duration;

use redis::AsyncConnectionConfig;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::redact::redact_url;

/// How long the start-up check waits for the server before leaving it to the lazy connect.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `url` asks for TLS.
fn is_tls(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case("rediss"))
}

/// Whether a client error is the TLS handshake refusing the server's certificate (or the
/// server refusing ours), rather than the server being unreachable.
fn is_certificate_failure(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    [
        "certificate",
        "unknownissuer",
        "tls handshake",
        "handshake failure",
        "alert",
    ]
    .iter()
    .any(|needle| t.contains(needle))
}

/// Connects once to a `rediss://` URL (no-op for other schemes); see the module docs.
///
/// # Errors
/// `VF_CONFIG` when the TLS handshake fails on the certificate.
pub async fn check_trust(variable: &str, url: &str) -> Result<(), VfError> {
    if !is_tls(url) {
        return Ok(());
    }
    let Ok(client) = redis::Client::open(url) else {
        // A malformed URL is reported by the store that parses it, with its own text.
        return Ok(());
    };
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CHECK_TIMEOUT))
        .set_response_timeout(Some(CHECK_TIMEOUT));
    match client
        .get_multiplexed_async_connection_with_config(&config)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_certificate_failure(&e.to_string()) => Err(untrusted(variable, url, &e)),
        Err(e) => {
            tracing::debug!(variable, url = %redact_url(url), "TLS check: {e}; left to the lazy connect");
            Ok(())
        }
    }
}

fn untrusted(variable: &str, url: &str, e: &redis::RedisError) -> VfError {
    let shown = redact_url(url);
    VfError::new(
        ErrorCode::Config,
        format!("{variable} ({shown}): the TLS handshake failed: {e}"),
    )
    .with_remedy(
        "The server's certificate is not signed by a CA this worker trusts, or does not name \
         the host in the URL. Mount the CA bundle (PEM) that signed it and point SSL_CERT_FILE \
         at it (spec.pod.volumes/volumeMounts and the node's env on Kubernetes), or use the \
         host name the certificate was issued for.",
    )
    .with_context("variable", variable)
    .with_context("url", shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_rediss_is_checked_and_certificate_failures_are_told_apart() {
        assert!(is_tls("rediss://h:6380/0"));
        assert!(is_tls("REDISS://h:6380/0"));
        assert!(!is_tls("redis://h:6379/0"));
        assert!(!is_tls("unix:///tmp/r.sock"));
        assert!(is_certificate_failure(
            "invalid peer certificate: UnknownIssuer"
        ));
        assert!(!is_certificate_failure("Connection refused (os error 111)"));
    }
}
