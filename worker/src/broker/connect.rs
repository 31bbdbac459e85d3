//! The connection: one NATS client and its JetStream context, shared by every part of the
//! broker layer.
//!
//! Why one handle: the pull loops, the keepalive ticker, publications and the control
//! subscription all ride one connection, so closing it is one act and a broken broker shows
//! up everywhere at once rather than in one corner.

use std::time::Duration;

use async_nats::jetstream;

use videoflow_core::redact::{UrlCredentials, redact_url, split_credentials};

use super::error::{BrokerError, REMEDY_CONNECT};

/// How long a connect may take before it is BrokerUnavailable (STREAM-7).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The JetStream request bound: the longest single publish attempt DELIV-5 allows. Every
/// caller that needs less (observe 5 s, DLQ 5 s, ack 2 s) bounds its own call further.
pub const JETSTREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// A connected broker: the NATS client and a JetStream context on it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Broker {
    client: async_nats::Client,
    jetstream: jetstream::Context,
    url: String,
}

impl Broker {
    /// The plain NATS client (control subject, ack replies).
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The JetStream context (streams, consumers, publications).
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// The URL this broker was reached at, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Flushes what the client buffered (acks, NAKs, control messages), bounded by `within`;
    /// `false` when the flush did not complete. Fire-and-forget settlements are only on the
    /// wire after a flush, which is why close and the control sender call it.
    pub async fn flush(&self, within: Duration) -> bool {
        matches!(
            tokio::time::timeout(within, self.client.flush()).await,
            Ok(Ok(()))
        )
    }
}

/// Connects to `url` within [`CONNECT_TIMEOUT`] (STREAM-7).
///
/// # Errors
/// BrokerUnavailable `could not connect to NATS at <url>: <type>: <detail>`.
pub async fn connect(url: &str) -> Result<Broker, BrokerError> {
    connect_within(url, CONNECT_TIMEOUT).await
}

/// `options` authenticating with the credentials a URL carried; the client is given the URL
/// without them, so its own logs of the server address carry no password.
pub fn with_credentials(
    options: async_nats::ConnectOptions,
    credentials: Option<UrlCredentials>,
) -> async_nats::ConnectOptions {
    match credentials {
        Some(UrlCredentials::UserPassword { user, password }) => {
            options.user_and_password(user, password)
        }
        Some(UrlCredentials::Token(token)) => options.token(token),
        None => options,
    }
}

/// The servers of a URL list (`nats://a:4222,nats://b:4222`, how a cluster is named): the
/// client connects to one of them and fails over to the others when it is lost. A single
/// URL is a list of one.
///
/// # Errors
/// The text of the first entry that is not a server address.
pub fn server_list(urls: &str) -> Result<Vec<async_nats::ServerAddr>, String> {
    urls.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| {
            u.parse::<async_nats::ServerAddr>()
                .map_err(|e| format!("'{}' is not a server address: {e}", redact_url(u)))
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|list| {
            if list.is_empty() {
                Err("no server address given".to_owned())
            } else {
                Ok(list)
            }
        })
}

/// [`connect`] with an explicit bound (tests use a short one).
///
/// # Errors
/// BrokerUnavailable with STREAM-7's text.
pub async fn connect_within(url: &str, within: Duration) -> Result<Broker, BrokerError> {
    let failed = |kind: &str, detail: String| {
        BrokerError::unavailable(
            format!(
                "could not connect to NATS at {}: {kind}: {detail}",
                redact_url(url)
            ),
            REMEDY_CONNECT,
        )
    };
    let (servers, credentials) = split_credentials(url);
    let servers = server_list(&servers).map_err(|e| failed("ConnectError", e))?;
    let options = with_credentials(
        async_nats::ConnectOptions::new().connection_timeout(within),
        credentials,
    );
    let client = match tokio::time::timeout(within, options.connect(servers)).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => return Err(failed("ConnectError", e.to_string())),
        Err(_) => {
            return Err(failed(
                "TimeoutError",
                format!("no connection within {} s", within.as_secs_f64()),
            ));
        }
    };
    let jetstream = jetstream::ContextBuilder::new()
        .timeout(JETSTREAM_TIMEOUT)
        .build(client.clone());
    Ok(Broker {
        client,
        jetstream,
        url: url.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::server_list;

    #[test]
    fn a_url_list_names_every_server_of_a_cluster() {
        let list = server_list("nats://127.0.0.1:4222, nats://127.0.0.1:4223,nats://h:4224")
            .expect("a list");
        let ports: Vec<u16> = list.iter().map(|a| a.port()).collect();
        assert_eq!(ports, [4222, 4223, 4224]);
        assert_eq!(server_list("nats://one:4222").expect("one").len(), 1);
        assert!(server_list(" , ").is_err());
        assert!(server_list("nats://a:4222,nats://b:notaport").is_err());
    }
}
