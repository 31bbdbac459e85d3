//! The metrics and health listener, dual-stack when asked for the unspecified IPv6 address.
//!
//! Why not plain `TcpListener::bind("[::]:8080")`: whether that socket also takes IPv4 is the
//! host's `net.ipv6.bindv6only`, so on some nodes Prometheus (or the kubelet) reaching the
//! pod's IPv4 address would find nothing. `[::]` here always means both families, with
//! `IPV6_V6ONLY` off; on a host without IPv6 it falls back to `0.0.0.0` on the same port.

use std::net::{Ipv4Addr, SocketAddr};

/// Binds `addr`; `[::]:port` as one socket for IPv6 and IPv4 (see the module docs).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        match dual_stack(addr) {
            Ok(l) => return Ok(l),
            Err(v6) => {
                tracing::debug!("no IPv6 listener ({v6}); IPv4 only");
                return tokio::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, addr.port())).await;
            }
        }
    }
    tokio::net::TcpListener::bind(addr).await
}

fn dual_stack(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(false)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    tokio::net::TcpListener::from_std(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[::]` answers on IPv4 and on IPv6 loopback alike.
    #[tokio::test]
    async fn the_unspecified_ipv6_address_takes_both_families() {
        let listener = bind("[::]:0".parse().expect("an address"))
            .await
            .expect("binds");
        let port = listener.local_addr().expect("bound").port();
        let accept = tokio::spawn(async move {
            for _ in 0..2 {
                let _ = listener.accept().await;
            }
        });
        tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .expect("IPv4 reaches the listener");
        if std::net::TcpListener::bind("[::1]:0").is_ok() {
            tokio::net::TcpStream::connect((std::net::Ipv6Addr::LOCALHOST, port))
                .await
                .expect("IPv6 reaches the listener");
        }
        accept.abort();
    }
}
