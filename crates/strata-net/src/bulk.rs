//! **The bulk layer's connections** (Mercury's bulk layer, seed 003): blob
//! bytes travel on TCP connections of their own, never in RPC messages.
//! A node's bulk port is its cluster port + [`BULK_PORT_OFFSET`].
//!
//! A connection is dialed by a daemon ([`dial`], through its
//! [`Transport`], so partitions and refused connects apply), authenticated
//! with the cluster secret (the same handshake as the RPC), followed by the
//! dialer's node id; the daemon then hands the socket to a client process
//! on its node, which speaks the frames of `strata_proto::bulk` on it
//! directly — the bytes go from the client's buffer to the owner with no
//! hop through the local daemon. The owner side ([`accept`]) checks the
//! same handshake before reading a frame.
//!
//! **Invariant:** a connection that did not prove the secret carries no
//! frame; every blocking call here has a socket timeout.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::auth::{self, Secret};
use crate::faults::host_of;
use crate::transport::Transport;

/// The bulk port's distance from the node's cluster (RPC) port.
pub const BULK_PORT_OFFSET: u16 = 1;

/// `host:port` of the bulk listener of the node whose RPC endpoint is
/// `endpoint` (`host:port`, `[v6]:port`).
pub fn bulk_endpoint(endpoint: &str) -> io::Result<String> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{endpoint}: not host:port"),
        )
    };
    let (_, port) = endpoint.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let bulk = port.checked_add(BULK_PORT_OFFSET).ok_or_else(bad)?;
    let host = host_of(endpoint);
    Ok(if host.contains(':') {
        format!("[{host}]:{bulk}")
    } else {
        format!("{host}:{bulk}")
    })
}

/// Opens an authenticated bulk connection to `peer` (its bulk endpoint) for
/// node `me`; every step within `deadline`. The socket keeps `deadline` as
/// its read and write timeout.
pub fn dial(
    t: &dyn Transport,
    peer: &str,
    me: u32,
    secret: &Secret,
    deadline: Duration,
) -> io::Result<TcpStream> {
    dial_for(t, peer, me, 0, secret, deadline)
}

/// [`dial`] on behalf of client `client` of node `me` (its id at its own
/// daemon; 0: the daemon itself): the owner keeps that client's file holds
/// apart from the other clients' of the node.
pub fn dial_for(
    t: &dyn Transport,
    peer: &str,
    me: u32,
    client: u64,
    secret: &Secret,
    deadline: Duration,
) -> io::Result<TcpStream> {
    let mut s = t.dial_socket(peer, deadline)?;
    s.set_read_timeout(Some(deadline))?;
    s.set_write_timeout(Some(deadline))?;
    auth::client_blocking(&mut s, secret)?;
    let mut hello = [0u8; 12];
    hello[..4].copy_from_slice(&me.to_le_bytes());
    hello[4..].copy_from_slice(&client.to_le_bytes());
    s.write_all(&hello)?;
    Ok(s)
}

/// The owner's end of a bulk connection: the kernel socket itself, or a TLS
/// session on it (`cluster.tls`). Frames are read and written through it;
/// a write on the plain socket never raises SIGPIPE; a writer flushes after
/// each frame (a TLS session buffers records until then).
pub enum Served {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>),
}

impl Served {
    /// The kernel socket under it.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Served::Plain(s) => s,
            Served::Tls(t) => &t.sock,
        }
    }

    pub fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.tcp().set_read_timeout(d)
    }
}

impl Read for Served {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Served::Plain(s) => s.read(b),
            Served::Tls(t) => t.read(b),
        }
    }
}

impl Write for Served {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Served::Plain(s) => strata_proto::bulk::NoSigPipe(&*s).write(b),
            Served::Tls(t) => t.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Served::Plain(_) => Ok(()),
            Served::Tls(t) => t.flush(),
        }
    }
}

/// The owner's side of [`dial_for`] on an accepted socket: TLS first when
/// `tls` is given, then the secret's handshake and the dialer's hello, all
/// within `deadline` (the socket's timeouts are the caller's afterwards).
/// The stream to serve, the dialer's node id and the client it dialed for.
pub fn accept_served(
    s: TcpStream,
    tls: Option<&std::sync::Arc<crate::tls::Tls>>,
    secret: &Secret,
    deadline: Duration,
) -> io::Result<(Served, u32, u64)> {
    crate::transport::tune_bulk_socket(&s)?;
    s.set_read_timeout(Some(deadline))?;
    s.set_write_timeout(Some(deadline))?;
    let mut served = match tls {
        None => Served::Plain(s),
        Some(t) => Served::Tls(Box::new(t.accept_blocking(s, deadline)?)),
    };
    auth::server_blocking(&mut served, secret)?;
    served.flush()?;
    let mut hello = [0u8; 12];
    served.read_exact(&mut hello)?;
    let node = u32::from_le_bytes(hello[..4].try_into().expect("4 bytes"));
    let client = u64::from_le_bytes(hello[4..].try_into().expect("8 bytes"));
    Ok((served, node, client))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{FaultPlan, FaultyTransport};
    use crate::transport::TcpTransport;
    use std::sync::Arc;

    #[test]
    fn bulk_endpoints_are_next_to_the_rpc_port() {
        assert_eq!(bulk_endpoint("10.0.0.1:7707").unwrap(), "10.0.0.1:7708");
        assert_eq!(bulk_endpoint("[::1]:7707").unwrap(), "[::1]:7708");
        assert_eq!(bulk_endpoint("n1:80").unwrap(), "n1:81");
        assert!(bulk_endpoint("n1").is_err());
        assert!(bulk_endpoint("n1:65535").is_err());
    }

    fn serve_once(secret: Secret) -> (String, std::thread::JoinHandle<io::Result<u32>>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let h = std::thread::spawn(move || {
            let (s, _) = l.accept()?;
            let (mut s, id, _) = accept_served(s, None, &secret, Duration::from_secs(5))?;
            // Echo one byte: the connection works after the handshake.
            let mut b = [0u8; 1];
            s.read_exact(&mut b)?;
            s.write_all(&b)?;
            Ok(id)
        });
        (addr, h)
    }

    #[test]
    fn dial_authenticates_and_names_the_dialer() {
        let k = Secret::generate();
        let (addr, h) = serve_once(k.clone());
        let mut s = dial(&TcpTransport, &addr, 3, &k, Duration::from_secs(5)).unwrap();
        s.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"x");
        assert_eq!(h.join().unwrap().unwrap(), 3);
        // Another secret: refused on both sides.
        let (addr, h) = serve_once(k.clone());
        let e = dial(
            &TcpTransport,
            &addr,
            3,
            &Secret::generate(),
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(h.join().unwrap().is_err());
    }

    #[test]
    fn a_partitioned_peer_times_out_at_the_deadline() {
        let k = Secret::generate();
        let (addr, _h) = serve_once(k.clone());
        let t = FaultyTransport::new(Arc::new(TcpTransport), FaultPlan::none(1));
        t.partition("127.0.0.1");
        let e = dial(&t, &addr, 0, &k, Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        t.heal("127.0.0.1");
        dial(&t, &addr, 0, &k, Duration::from_secs(5)).unwrap();
    }
}
