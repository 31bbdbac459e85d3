//! A three-node JetStream cluster on loopback, for flows that must survive a broker node's
//! loss: every server routes to the others, JetStream is clustered (streams can be R3), and
//! clients get the URL list of all of them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use videoflow_services::{NatsServer, free_port};

use crate::TestkitError;

/// Whole-cluster starts tried before giving up (see [`NatsCluster::start`]).
const CLUSTER_ATTEMPTS: usize = 3;

/// Running servers of one cluster, stopped on drop.
#[derive(Debug)]
pub struct NatsCluster {
    servers: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts `size` servers (3 for JetStream's R3) named `n0`, `n1`, … with routes to each
    /// other. Returns once each accepts clients; the cluster elects its JetStream meta leader
    /// shortly after (see [`NatsCluster::monitoring_urls`] and `/jsz`).
    ///
    /// Every server names every route port before any listens, so a route port another test
    /// takes meanwhile fails one server whatever its own retries pick: the whole cluster is
    /// then started again on fresh route ports.
    pub fn start(size: usize) -> Result<Self, TestkitError> {
        let mut last = None;
        for _ in 0..CLUSTER_ATTEMPTS {
            match Self::start_once(size) {
                Ok(cluster) => return Ok(cluster),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| TestkitError::Io {
            what: "nats cluster: no attempt made".into(),
            source: std::io::Error::other("CLUSTER_ATTEMPTS is 0"),
        }))
    }

    fn start_once(size: usize) -> Result<Self, TestkitError> {
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
            // On an error the servers already started are dropped, which stops them.
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

    /// Server `i` (`n<i>`), to kill, restart, pause or resume it.
    pub fn server_mut(&mut self, i: usize) -> &mut NatsServer {
        &mut self.servers[i]
    }

    /// The index of the server a JetStream leader name (`n1`) names.
    pub fn index_of(&self, server_name: &str) -> Option<usize> {
        server_name
            .strip_prefix('n')
            .and_then(|i| i.parse::<usize>().ok())
            .filter(|i| *i < self.servers.len())
    }

    /// Waits until every running server's `/jsz` reports a JetStream meta leader over all
    /// the cluster's peers (streams cannot be placed before).
    pub fn wait_for_meta_leader(&self, within: Duration) -> Result<(), TestkitError> {
        let deadline = Instant::now() + within;
        let size = format!("\"cluster_size\": {}", self.servers.len());
        for base in self.monitoring_urls() {
            loop {
                let body = http_get(&base, "/jsz");
                if body.contains("\"leader\"") && body.contains(&size) {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(TestkitError::Io {
                        what: format!("nats cluster: no meta leader at {base} (last /jsz: {body})"),
                        source: std::io::Error::from(std::io::ErrorKind::TimedOut),
                    });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }
}

/// The body of `GET <base><path>` (plain HTTP/1.0 on loopback); empty when the server does
/// not answer.
pub fn http_get(base: &str, path: &str) -> String {
    let addr = base.trim_start_matches("http://");
    let Ok(mut s) = TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned()
}
