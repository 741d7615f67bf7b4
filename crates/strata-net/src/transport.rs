//! **The network abstraction** (Mercury's NA layer): how a daemon reaches
//! another one. A [`Transport`] connects to `host:port` and listens on an
//! address, handing out byte streams ([`Conn`]); everything above it — the
//! handshake, the RPC and the bulk path — only sees streams, so a transport
//! is swapped without touching them: [`TcpTransport`] for real networks,
//! [`crate::faults::FaultyTransport`] around it for tests.
//!
//! **Invariant:** a connect never blocks longer than the caller's deadline
//! (callers wrap every network call in one, see [`with_deadline`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

/// A boxed future (object-safe async methods).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A byte stream to a peer.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// A connection, whatever the transport.
pub type Conn = Box<dyn Stream>;

/// Socket buffer size asked of the kernel for every TCP connection (bulk
/// transfers need more than the default to fill a fast link).
pub const SOCKET_BUFFER_BYTES: u32 = 4 << 20;

/// A way to reach peers and be reached.
pub trait Transport: Send + Sync + 'static {
    /// Connects to `peer` (`host:port`, `[v6]:port`).
    fn connect<'a>(&'a self, peer: &'a str) -> BoxFuture<'a, io::Result<Conn>>;
    /// Listens on `addr` (`host:port`; port 0 picks one).
    fn listen<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Box<dyn Listener>>>;
    /// A kernel socket to `peer` for the bulk path (blocking, handed to a
    /// client process), connected within `deadline`.
    fn dial_socket(&self, peer: &str, deadline: Duration) -> io::Result<std::net::TcpStream>;
    /// The TLS this transport runs its streams in, if any (the bulk
    /// listener, which accepts kernel sockets itself, needs it).
    fn tls(&self) -> Option<&std::sync::Arc<crate::tls::Tls>> {
        None
    }
}

/// Accepts connections.
pub trait Listener: Send + 'static {
    /// The next connection and the peer's address.
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Conn, String)>>;
    /// The address listened on (with the port chosen for port 0).
    fn local_addr(&self) -> io::Result<String>;
}

/// Runs `f` with a deadline: `TimedOut` naming `what` when it passes.
pub async fn with_deadline<T>(
    deadline: Duration,
    what: &str,
    f: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match tokio::time::timeout(deadline, f).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{what}: no answer within {deadline:?}"),
        )),
    }
}

/// TCP: no Nagle delay, large socket buffers.
#[derive(Debug, Clone, Default)]
pub struct TcpTransport;

async fn resolve(peer: &str) -> io::Result<std::net::SocketAddr> {
    let mut addrs = tokio::net::lookup_host(peer).await?;
    addrs.next().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{peer}: the name resolves to no address"),
        )
    })
}

impl Transport for TcpTransport {
    fn connect<'a>(&'a self, peer: &'a str) -> BoxFuture<'a, io::Result<Conn>> {
        Box::pin(async move {
            let addr = resolve(peer).await?;
            let sock = if addr.is_ipv4() {
                tokio::net::TcpSocket::new_v4()?
            } else {
                tokio::net::TcpSocket::new_v6()?
            };
            // Best effort: the kernel caps them (net.core.*mem_max).
            let _ = sock.set_send_buffer_size(SOCKET_BUFFER_BYTES);
            let _ = sock.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
            let s = sock
                .connect(addr)
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("connect to {peer}: {e}")))?;
            s.set_nodelay(true)?;
            Ok(Box::new(s) as Conn)
        })
    }

    fn listen<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let a = resolve(addr).await?;
            let sock = if a.is_ipv4() {
                tokio::net::TcpSocket::new_v4()?
            } else {
                tokio::net::TcpSocket::new_v6()?
            };
            sock.set_reuseaddr(true)?;
            let _ = sock.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
            sock.bind(a)
                .map_err(|e| io::Error::new(e.kind(), format!("listen on {addr}: {e}")))?;
            let l = sock.listen(1024)?;
            Ok(Box::new(TcpListener(l)) as Box<dyn Listener>)
        })
    }

    fn dial_socket(&self, peer: &str, deadline: Duration) -> io::Result<std::net::TcpStream> {
        let addr = resolve_blocking(peer)?;
        let s = std::net::TcpStream::connect_timeout(&addr, deadline)
            .map_err(|e| io::Error::new(e.kind(), format!("connect to {peer}: {e}")))?;
        tune_bulk_socket(&s)?;
        Ok(s)
    }
}

/// Resolves `peer` without the async runtime (the bulk path's threads).
pub fn resolve_blocking(peer: &str) -> io::Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    peer.to_socket_addrs()?.next().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{peer}: the name resolves to no address"),
        )
    })
}

/// The bulk path's socket options: no Nagle delay, large buffers (best
/// effort: the kernel caps them at net.core.*mem_max).
pub fn tune_bulk_socket(s: &std::net::TcpStream) -> io::Result<()> {
    s.set_nodelay(true)?;
    let _ = rustix::net::sockopt::set_socket_send_buffer_size(s, SOCKET_BUFFER_BYTES as usize);
    let _ = rustix::net::sockopt::set_socket_recv_buffer_size(s, SOCKET_BUFFER_BYTES as usize);
    Ok(())
}

struct TcpListener(tokio::net::TcpListener);

impl Listener for TcpListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Conn, String)>> {
        Box::pin(async move {
            let (s, peer) = self.0.accept().await?;
            s.set_nodelay(true)?;
            Ok((Box::new(s) as Conn, peer.to_string()))
        })
    }
    fn local_addr(&self) -> io::Result<String> {
        self.0.local_addr().map(|a| a.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn tcp_round_trip_and_deadline() {
        let t = TcpTransport;
        let mut l = t.listen("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut c, _) = l.accept().await.unwrap();
            let mut b = [0u8; 5];
            c.read_exact(&mut b).await.unwrap();
            c.write_all(&b).await.unwrap();
        });
        let mut c = t.connect(&addr).await.unwrap();
        c.write_all(b"hello").await.unwrap();
        let mut b = [0u8; 5];
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"hello");
        server.await.unwrap();
        // A read nobody answers ends at the deadline, naming what waited.
        let e = with_deadline(Duration::from_millis(20), "reading a reply", async {
            c.read_exact(&mut b).await.map(|_| ())
        })
        .await
        .unwrap_err();
        assert!(
            e.kind() == io::ErrorKind::TimedOut || e.kind() == io::ErrorKind::UnexpectedEof,
            "{e}"
        );
        // Nobody listening: a clear error naming the peer.
        let dead = {
            let l = t.listen("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap()
        };
        let e = match t.connect(&dead).await {
            Err(e) => e,
            Ok(_) => panic!("connected to a closed port"),
        };
        assert!(e.to_string().contains(&dead), "{e}");
    }
}
