//! Free loopback ports.

use std::net::TcpListener;

/// Asks the kernel for a free loopback port. The listener is dropped before the server binds,
/// so another process could take the port in between; servers that fail to bind are retried
/// by their starters with a fresh port.
pub fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}
