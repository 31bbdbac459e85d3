//! A three-node JetStream cluster on loopback, for flows that must survive a broker node's
//! loss: every server routes to the others, JetStream is clustered (streams can be R3), and
//! clients get the URL list of all of them.

use videoflow_services::{NatsServer, free_port};

use crate::TestkitError;

/// Running servers of one cluster, stopped on drop.
#[derive(Debug)]
pub struct NatsCluster {
    servers: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts `size` servers (3 for JetStream's R3) named `n0`, `n1`, … with routes to each
    /// other. Returns once each accepts clients; the cluster elects its JetStream meta leader
    /// shortly after (see [`NatsCluster::monitoring_urls`] and `/jsz`).
    pub fn start(size: usize) -> Result<Self, TestkitError> {
        let io = |source| TestkitError::Io {
            what: "nats cluster: picking route ports".into(),
            source,
        };
        let route_ports = (0..size)
            .map(|_| free_port().map_err(io))
            .collect::<Result<Vec<u16>, _>>()?;
        let name = format!("vf-test-{}", std::process::id());
        let mut servers = Vec::with_capacity(size);
        for (i, port) in route_ports.iter().enumerate() {
            let routes: Vec<String> = route_ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| format!("nats://127.0.0.1:{p}"))
                .collect();
            let listen = format!("nats://127.0.0.1:{port}");
            let server_name = format!("n{i}");
            let routes = routes.join(",");
            servers.push(NatsServer::start_with(&[
                "--server_name",
                &server_name,
                "--cluster_name",
                &name,
                "--cluster",
                &listen,
                "--routes",
                &routes,
            ])?);
        }
        Ok(NatsCluster { servers })
    }

    /// `nats://a,nats://b,nats://c`: the URL list a client (`VF_NATS_URL`) fails over with.
    pub fn url(&self) -> String {
        self.servers
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Each server's monitoring base URL, in server order.
    pub fn monitoring_urls(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(NatsServer::monitoring_url)
            .collect()
    }

    /// The servers, in order (`n0` first).
    pub fn servers(&self) -> &[NatsServer] {
        &self.servers
    }
}
