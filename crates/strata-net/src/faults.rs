//! **A fault-injecting transport**, driven by a seed: delays, connection
//! resets, failed connects and partitions, wrapped around any [`Transport`].
//! This machine's kernel has no `netem`, and faults injected here are
//! reproducible: the same seed gives every connection the same sequence of
//! decisions (connections draw their own generator from the transport's in
//! the order they are made).
//!
//! A partition behaves as a black hole, as a cut link does under TCP:
//! connects to a cut host hang, and reads and writes on existing
//! connections stall until the link heals — callers see their deadline
//! pass, never a hang and never corrupted bytes.

use std::collections::HashSet;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::transport::{BoxFuture, Conn, Listener, Transport};

/// How often a stalled operation looks whether its partition healed.
const PARTITION_RECHECK: Duration = Duration::from_millis(5);

/// What goes wrong, and how often.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    pub seed: u64,
    /// Probability that a write waits first, up to `delay_max`.
    pub delay_prob: f64,
    pub delay_max: Duration,
    /// Probability that a write resets the connection instead.
    pub reset_prob: f64,
    /// Probability that a connect is refused.
    pub connect_fail_prob: f64,
}

impl FaultPlan {
    /// No faults (partitions can still be set).
    pub fn none(seed: u64) -> FaultPlan {
        FaultPlan {
            seed,
            delay_prob: 0.0,
            delay_max: Duration::ZERO,
            reset_prob: 0.0,
            connect_fail_prob: 0.0,
        }
    }
}

/// The hosts cut off from this transport (by host, without the port).
#[derive(Debug, Default)]
pub struct Partitions(Mutex<HashSet<String>>);

impl Partitions {
    fn cut(&self, host: &str) -> bool {
        self.0.lock().map(|s| s.contains(host)).unwrap_or(false)
    }
}

/// A transport with faults.
pub struct FaultyTransport {
    inner: Arc<dyn Transport>,
    plan: FaultPlan,
    rng: Mutex<StdRng>,
    partitions: Arc<Partitions>,
}

/// The host part of `host:port` / `[v6]:port`.
pub fn host_of(peer: &str) -> &str {
    if let Some(r) = peer.strip_prefix('[') {
        return r.split(']').next().unwrap_or(r);
    }
    peer.rsplit_once(':').map_or(peer, |(h, _)| h)
}

impl FaultyTransport {
    pub fn new(inner: Arc<dyn Transport>, plan: FaultPlan) -> FaultyTransport {
        FaultyTransport {
            inner,
            rng: Mutex::new(StdRng::seed_from_u64(plan.seed)),
            plan,
            partitions: Arc::default(),
        }
    }

    /// Cuts the link to `host` (both directions) until [`Self::heal`].
    pub fn partition(&self, host: &str) {
        if let Ok(mut s) = self.partitions.0.lock() {
            s.insert(host.to_string());
        }
    }

    pub fn heal(&self, host: &str) {
        if let Ok(mut s) = self.partitions.0.lock() {
            s.remove(host);
        }
    }

    /// A refused connect, drawn from the plan's `connect_fail_prob`.
    fn maybe_refuse(&self, peer: &str) -> io::Result<()> {
        let refuse = {
            let mut r = self
                .rng
                .lock()
                .map_err(|_| io::Error::other("rng poisoned"))?;
            r.random_bool(self.plan.connect_fail_prob.clamp(0.0, 1.0))
        };
        if refuse {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("connect to {peer}: refused (injected fault)"),
            ));
        }
        Ok(())
    }

    fn conn_rng(&self) -> StdRng {
        let seed = self.rng.lock().map(|mut r| r.random::<u64>()).unwrap_or(0);
        StdRng::seed_from_u64(seed)
    }

    fn wrap(&self, c: Conn, peer: &str) -> Conn {
        Box::new(FaultyConn {
            inner: c,
            host: host_of(peer).to_string(),
            plan: self.plan.clone(),
            rng: self.conn_rng(),
            partitions: self.partitions.clone(),
            sleep: None,
            recheck: None,
            decided: false,
            broken: false,
        })
    }
}

impl Transport for FaultyTransport {
    fn connect<'a>(&'a self, peer: &'a str) -> BoxFuture<'a, io::Result<Conn>> {
        Box::pin(async move {
            let host = host_of(peer).to_string();
            // Bounded by the caller's deadline: a cut link never answers.
            while self.partitions.cut(&host) {
                tokio::time::sleep(PARTITION_RECHECK).await;
            }
            self.maybe_refuse(peer)?;
            let c = self.inner.connect(peer).await?;
            Ok(self.wrap(c, peer))
        })
    }

    /// Partitions and refused connects apply; the bytes of a socket handed
    /// to a client are not intercepted (it is the kernel's).
    fn dial_socket(&self, peer: &str, deadline: Duration) -> io::Result<std::net::TcpStream> {
        let host = host_of(peer).to_string();
        let end = std::time::Instant::now() + deadline;
        while self.partitions.cut(&host) {
            if std::time::Instant::now() >= end {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connect to {peer}: no answer within {deadline:?} (partitioned)"),
                ));
            }
            std::thread::sleep(PARTITION_RECHECK);
        }
        self.maybe_refuse(peer)?;
        self.inner.dial_socket(peer, deadline)
    }

    fn tls(&self) -> Option<&Arc<crate::tls::Tls>> {
        self.inner.tls()
    }

    fn listen<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let inner = self.inner.listen(addr).await?;
            Ok(Box::new(FaultyListener {
                inner,
                plan: self.plan.clone(),
                rng: self.conn_rng(),
                partitions: self.partitions.clone(),
            }) as Box<dyn Listener>)
        })
    }
}

struct FaultyListener {
    inner: Box<dyn Listener>,
    plan: FaultPlan,
    rng: StdRng,
    partitions: Arc<Partitions>,
}

impl Listener for FaultyListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Conn, String)>> {
        Box::pin(async move {
            let (c, peer) = self.inner.accept().await?;
            let conn: Conn = Box::new(FaultyConn {
                inner: c,
                host: host_of(&peer).to_string(),
                plan: self.plan.clone(),
                rng: StdRng::seed_from_u64(self.rng.random()),
                partitions: self.partitions.clone(),
                sleep: None,
                recheck: None,
                decided: false,
                broken: false,
            });
            Ok((conn, peer))
        })
    }
    fn local_addr(&self) -> io::Result<String> {
        self.inner.local_addr()
    }
}

struct FaultyConn {
    inner: Conn,
    host: String,
    plan: FaultPlan,
    rng: StdRng,
    partitions: Arc<Partitions>,
    /// The delay of the pending write.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The next look at a partition.
    recheck: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The fault for the pending write was drawn.
    decided: bool,
    broken: bool,
}

impl FaultyConn {
    /// Pending while the link is cut (re-checked every few ms).
    fn stall(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.partitions.cut(&self.host) {
            self.recheck = None;
            return Poll::Ready(());
        }
        // Bounded: a fresh timer is always pending when first polled.
        loop {
            let s = self
                .recheck
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(PARTITION_RECHECK)));
            if s.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.recheck = None;
            if !self.partitions.cut(&self.host) {
                return Poll::Ready(());
            }
        }
    }
}

use std::future::Future;

fn reset() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        "connection reset (injected fault)",
    )
}

impl AsyncRead for FaultyConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.broken {
            return Poll::Ready(Err(reset()));
        }
        if self.stall(cx).is_pending() {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for FaultyConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.broken {
            return Poll::Ready(Err(reset()));
        }
        if this.stall(cx).is_pending() {
            return Poll::Pending;
        }
        if !this.decided {
            this.decided = true;
            if this.rng.random_bool(this.plan.reset_prob.clamp(0.0, 1.0)) {
                this.broken = true;
                return Poll::Ready(Err(reset()));
            }
            if this.plan.delay_max > Duration::ZERO
                && this.rng.random_bool(this.plan.delay_prob.clamp(0.0, 1.0))
            {
                let ns = this
                    .rng
                    .random_range(0..=this.plan.delay_max.as_nanos() as u64);
                this.sleep = Some(Box::pin(tokio::time::sleep(Duration::from_nanos(ns))));
            }
        }
        if let Some(s) = this.sleep.as_mut() {
            if s.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.sleep = None;
        }
        let r = Pin::new(&mut this.inner).poll_write(cx, data);
        if r.is_ready() {
            this.decided = false;
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.broken {
            return Poll::Ready(Err(reset()));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{with_deadline, TcpTransport};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn echo_server(t: &dyn Transport) -> String {
        let mut l = t.listen("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            // Bounded by the test's lifetime.
            while let Ok((mut c, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut b = vec![0u8; 4096];
                    while let Ok(n) = c.read(&mut b).await {
                        if n == 0 || c.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    /// Sends 64 messages over `conns` connections; what each write met.
    async fn run(plan: FaultPlan) -> Vec<String> {
        let addr = echo_server(&TcpTransport).await;
        let t = FaultyTransport::new(Arc::new(TcpTransport), plan);
        let mut log = Vec::new();
        for conn in 0..4 {
            let mut c = match t.connect(&addr).await {
                Ok(c) => c,
                Err(e) => {
                    log.push(format!("{conn}: connect {:?}", e.kind()));
                    continue;
                }
            };
            for i in 0..16u8 {
                let r = c.write_all(&[i; 8]).await;
                let mut b = [0u8; 8];
                match r {
                    Ok(()) => {
                        c.read_exact(&mut b).await.unwrap();
                        assert_eq!(b, [i; 8], "bytes arrive intact or not at all");
                        log.push(format!("{conn}.{i}: ok"));
                    }
                    Err(e) => {
                        log.push(format!("{conn}.{i}: {:?}", e.kind()));
                        break;
                    }
                }
            }
        }
        log
    }

    #[tokio::test]
    async fn the_same_seed_gives_the_same_faults() {
        let plan = |seed| FaultPlan {
            seed,
            delay_prob: 0.2,
            delay_max: Duration::from_millis(2),
            reset_prob: 0.05,
            connect_fail_prob: 0.2,
        };
        let (a, b, c) = (run(plan(7)).await, run(plan(7)).await, run(plan(8)).await);
        assert_eq!(a, b);
        assert_ne!(a, c, "another seed, other faults");
        assert!(
            a.iter().any(|l| !l.ends_with("ok")),
            "faults were injected: {a:?}"
        );
    }

    #[tokio::test]
    async fn a_partition_stalls_until_it_heals_and_deadlines_end_the_wait() {
        let addr = echo_server(&TcpTransport).await;
        let t = Arc::new(FaultyTransport::new(
            Arc::new(TcpTransport),
            FaultPlan::none(1),
        ));
        let mut c = t.connect(&addr).await.unwrap();
        t.partition("127.0.0.1");
        let e = with_deadline(Duration::from_millis(30), "echo", async {
            c.write_all(b"x").await?;
            let mut b = [0u8; 1];
            c.read_exact(&mut b).await.map(|_| ())
        })
        .await
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let e = with_deadline(Duration::from_millis(30), "connect", async {
            t.connect(&addr).await.map(|_| ())
        })
        .await
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        t.heal("127.0.0.1");
        let mut c = t.connect(&addr).await.unwrap();
        c.write_all(b"y").await.unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"y");
    }
}
