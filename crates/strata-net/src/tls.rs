//! **Optional TLS between daemons** (rustls, `cluster.tls: on`): every
//! byte one daemon sends another — control RPC, bulk frames, remote-tier
//! pages — is encrypted and integrity-checked, under mutual certificate
//! authentication, *beneath* the cluster-secret handshake ([`crate::auth`]),
//! which still runs inside the TLS channel (a certificate proves the node
//! belongs to the facility's CA, the secret that it belongs to this job).
//!
//! It is a layer of its own, as the rest of the network side: a
//! [`TlsTransport`] wraps any [`Transport`] (TCP, the fault-injecting one)
//! and hands out streams that are TLS inside, so the RPC and the bulk
//! code are unchanged.
//!
//! **The bulk path's handed-over sockets.** A bulk connection is a kernel
//! socket the daemon passes to a client process (SCM_RIGHTS), which reads
//! and writes frames on it directly. A TLS session's state cannot cross a
//! process boundary (and this kernel has no kTLS), so with TLS the daemon
//! terminates the session and *relays*: the client gets one end of a
//! loopback TCP connection, the daemon copies between its other end and
//! the TLS stream ([`Tls::dial_relay`]). Plaintext never leaves the node.
//! The owner's side needs no relay: its bulk threads serve frames on a
//! blocking session ([`Tls::accept_blocking`], `bulk::Served`). The
//! relays run on one runtime of their own, at most [`RELAYS_MAX`] at
//! once; a relay whose one direction ended gives the other
//! [`RELAY_GRACE`] to end too, then closes both (a dead peer cannot keep a
//! relay alive).
//!
//! **Trust.** Both sides present a certificate chain from `cluster.tls_cert`
//! and check the other's against the CA in `cluster.tls_ca` (mutual TLS).
//! The host name in a certificate is *not* checked (as PostgreSQL's
//! `verify-ca`): nodes are reached by addresses from a host list, often
//! private ones no certificate names; possession of a key the CA signed is
//! what counts. `auto` files are made by `strata cluster start` next to the
//! cluster secret ([`generate`]): a CA made for this cluster and one
//! certificate it signed, shared by the nodes as the secret is.
//!
//! **Invariant:** with TLS configured, no connection carries a byte of a
//! frame or a call before both sides verified each other's certificate;
//! every handshake has the caller's deadline.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::transport::{with_deadline, BoxFuture, Conn, Listener, Transport};

/// The name a client asks for (SNI) and `auto` certificates carry.
pub const CLUSTER_NAME: &str = "strata-cluster";
/// Relays (handed-over bulk connections) alive at once.
pub const RELAYS_MAX: usize = 4096;
/// How long a relay's second direction may run after the first ended.
pub const RELAY_GRACE: Duration = Duration::from_secs(30);
/// How much longer than its deadline a dial waits for the relay's answer.
const RELAY_ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// Plaintext a blocking session takes per write before it sends.
const TLS_BUFFER_BYTES: usize = 1 << 20;
/// Bytes a relay copies per read.
const RELAY_CHUNK_BYTES: usize = 256 << 10;
/// Strangers a loopback pair's listener may see before ours arrives.
const LOOPBACK_STRANGERS_MAX: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {error} (strata cluster start makes the auto files; or set cluster.tls_cert, tls_key and tls_ca)")]
    Read {
        what: &'static str,
        path: String,
        error: io::Error,
    },
    #[error("{what} {path} holds no PEM {kind}")]
    Pem {
        what: &'static str,
        path: String,
        kind: &'static str,
    },
    #[error("the TLS key {path} is readable by others (mode {mode:o}): chmod 600 it")]
    Mode { path: String, mode: u32 },
    #[error("cannot write {path}: {error}")]
    Write { path: String, error: io::Error },
    #[error("TLS setup: {0}")]
    Setup(String),
}

/// Where a node's TLS material is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This node's certificate chain (PEM; leaf first).
    pub cert: PathBuf,
    /// Its private key (PEM, mode 0600).
    pub key: PathBuf,
    /// The CA certificates a peer's chain must lead to (PEM).
    pub ca: PathBuf,
}

impl TlsFiles {
    /// The `auto` files: next to the cluster secret at `secret`.
    pub fn auto_beside(secret: &Path) -> TlsFiles {
        let dir = secret.parent().unwrap_or(Path::new("."));
        TlsFiles {
            cert: dir.join("cluster-tls.crt"),
            key: dir.join("cluster-tls.key"),
            ca: dir.join("cluster-tls-ca.crt"),
        }
    }
}

/// A node's TLS configuration, both directions.
pub struct Tls {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls(…)")
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_file(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        what,
        path: path.display().to_string(),
        error,
    })
}

fn certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_file(what, path)?;
    let out: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .filter_map(|c| c.ok())
        .collect();
    if out.is_empty() {
        return Err(TlsError::Pem {
            what,
            path: path.display().to_string(),
            kind: "CERTIFICATE",
        });
    }
    Ok(out)
}

impl Tls {
    /// Loads `files`: an error names the file and what to do.
    pub fn load(files: &TlsFiles) -> Result<Tls, TlsError> {
        let chain = certs("the TLS certificate", &files.cert)?;
        let cas = certs("the TLS CA", &files.ca)?;
        let p = files.key.display().to_string();
        match crate::auth::others_may_access(&files.key) {
            Err(error) => {
                return Err(TlsError::Read {
                    what: "the TLS key",
                    path: p,
                    error,
                })
            }
            Ok(Some(mode)) => return Err(TlsError::Mode { path: p, mode }),
            Ok(None) => {}
        }
        let key_pem = read_file("the TLS key", &files.key)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| TlsError::Pem {
            what: "the TLS key",
            path: p,
            kind: "PRIVATE KEY",
        })?;
        let mut roots = RootCertStore::empty();
        for c in cas {
            roots
                .add(c)
                .map_err(|e| TlsError::Setup(format!("{}: {e}", files.ca.display())))?;
        }
        let roots = Arc::new(roots);
        let setup = |e: rustls::Error| TlsError::Setup(e.to_string());
        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
                .build()
                .map_err(|e| TlsError::Setup(e.to_string()))?;
        let server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(setup)?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(setup)?;
        let server_verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| TlsError::Setup(e.to_string()))?;
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(setup)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(CaOnly(server_verifier)))
            .with_client_auth_cert(chain, key)
            .map_err(setup)?;
        Ok(Tls {
            client: Arc::new(client),
            server: Arc::new(server),
        })
    }

    fn name() -> ServerName<'static> {
        ServerName::try_from(CLUSTER_NAME).expect("a valid DNS name")
    }

    /// The connecting side's handshake on `conn`.
    pub async fn connect(&self, conn: Conn) -> io::Result<Conn> {
        let c = tokio_rustls::TlsConnector::from(self.client.clone());
        let s = c.connect(Self::name(), conn).await.map_err(tls_refused)?;
        Ok(Box::new(s) as Conn)
    }

    /// The accepting side's stream on `conn`: the handshake runs on its
    /// first read or write (so under whatever deadline the caller puts on
    /// those, and not in an accept loop).
    pub fn accept(&self, conn: Conn) -> Conn {
        let a = tokio_rustls::TlsAcceptor::from(self.server.clone()).accept(conn);
        Box::new(Accepting::Handshake(Box::new(a)))
    }

    /// The dialing side of a bulk connection: the TLS handshake on `s`
    /// within `deadline`, then a relay; returns the plaintext loopback end
    /// (see the module's text).
    pub fn dial_relay(
        &self,
        s: std::net::TcpStream,
        deadline: Duration,
    ) -> io::Result<std::net::TcpStream> {
        let c = tokio_rustls::TlsConnector::from(self.client.clone());
        relay(s, deadline, move |tcp| {
            Box::pin(async move {
                let t = c.connect(Self::name(), tcp).await.map_err(tls_refused)?;
                Ok(Box::new(t) as Conn)
            })
        })
    }

    /// The accepting side of a bulk connection served in this process (the
    /// owner's bulk threads): a blocking TLS session on `s`, its handshake
    /// done within `deadline` (the socket's timeouts bound each step).
    pub fn accept_blocking(
        &self,
        mut s: std::net::TcpStream,
        deadline: Duration,
    ) -> io::Result<rustls::StreamOwned<rustls::ServerConnection, std::net::TcpStream>> {
        let end = std::time::Instant::now() + deadline;
        let mut conn =
            rustls::ServerConnection::new(self.server.clone()).map_err(io::Error::other)?;
        // Bounded by the deadline (a peer trickling bytes cannot stretch it).
        while conn.is_handshaking() {
            if std::time::Instant::now() >= end {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("TLS handshake: not done within {deadline:?}"),
                ));
            }
            conn.complete_io(&mut s).map_err(tls_refused)?;
        }
        // A reply's bytes are written in 1 MiB pieces (the default 64 KiB
        // would cut them into many more encrypt-and-send rounds).
        conn.set_buffer_limit(Some(TLS_BUFFER_BYTES));
        Ok(rustls::StreamOwned::new(conn, s))
    }
}

fn tls_refused(e: io::Error) -> io::Error {
    match e.kind() {
        io::ErrorKind::InvalidData => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("TLS handshake refused: {e} (do both nodes use certificates of the same CA, and cluster.tls on?)"),
        ),
        io::ErrorKind::UnexpectedEof => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("the peer closed the connection during the TLS handshake ({e}; is cluster.tls on at both ends?)"),
        ),
        _ => e,
    }
}

/// A server stream whose handshake runs on first use.
enum Accepting {
    Handshake(Box<tokio_rustls::Accept<Conn>>),
    Ready(Box<tokio_rustls::server::TlsStream<Conn>>),
    Failed,
}

impl Accepting {
    fn ready(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<&mut tokio_rustls::server::TlsStream<Conn>>> {
        if let Accepting::Handshake(a) = self {
            match Pin::new(a).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(s)) => *self = Accepting::Ready(Box::new(s)),
                Poll::Ready(Err(e)) => {
                    *self = Accepting::Failed;
                    return Poll::Ready(Err(tls_refused(e)));
                }
            }
        }
        match self {
            Accepting::Ready(s) => Poll::Ready(Ok(s)),
            _ => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the TLS handshake failed",
            ))),
        }
    }
}

use std::future::Future;

impl AsyncRead for Accepting {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.ready(cx) {
            Poll::Ready(Ok(s)) => Pin::new(s).poll_read(cx, buf),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Accepting {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.ready(cx) {
            Poll::Ready(Ok(s)) => Pin::new(s).poll_write(cx, buf),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.ready(cx) {
            Poll::Ready(Ok(s)) => Pin::new(s).poll_flush(cx),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.ready(cx) {
            Poll::Ready(Ok(s)) => Pin::new(s).poll_shutdown(cx),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Checks a server's chain against the CA, not its host name (module text).
#[derive(Debug)]
struct CaOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for CaOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The name is checked last, after the chain: a name error means the
        // chain verified.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Makes the `auto` files: a CA for this cluster and a certificate it
/// signed (for every node), the key 0600; never over existing files.
pub fn generate(files: &TlsFiles) -> Result<(), TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let setup = |e: rcgen::Error| TlsError::Setup(e.to_string());
    let ca_key = KeyPair::generate().map_err(setup)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(setup)?;
    ca.distinguished_name
        .push(DnType::CommonName, "strata cluster CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).map_err(setup)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().map_err(setup)?;
    let mut leaf = CertificateParams::new(vec![CLUSTER_NAME.to_string()]).map_err(setup)?;
    leaf.distinguished_name
        .push(DnType::CommonName, "strata cluster node");
    leaf.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = leaf.signed_by(&key, &issuer).map_err(setup)?;
    // The CA's key is not kept: nothing else is signed for this cluster.
    write_new(&files.key, key.serialize_pem().as_bytes(), 0o600)?;
    write_new(&files.ca, ca_cert.pem().as_bytes(), 0o644)?;
    write_new(
        &files.cert,
        format!("{}{}", cert.pem(), ca_cert.pem()).as_bytes(),
        0o644,
    )
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    crate::auth::write_new(path, bytes, mode).map_err(|error| TlsError::Write {
        path: path.display().to_string(),
        error,
    })
}

/// Loads the `auto` files at `files`, making them first when none exists
/// (`cluster start`); `true` when they were made.
pub fn load_or_generate(files: &TlsFiles) -> Result<(Tls, bool), TlsError> {
    let none = [&files.cert, &files.key, &files.ca]
        .iter()
        .all(|p| !p.exists());
    if none {
        generate(files)?;
    }
    Ok((Tls::load(files)?, none))
}

/// Any transport with TLS inside its streams.
pub struct TlsTransport {
    pub inner: Arc<dyn Transport>,
    pub tls: Arc<Tls>,
}

impl Transport for TlsTransport {
    fn connect<'a>(&'a self, peer: &'a str) -> BoxFuture<'a, io::Result<Conn>> {
        Box::pin(async move {
            let c = self.inner.connect(peer).await?;
            self.tls.connect(c).await
        })
    }

    fn listen<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let l = self.inner.listen(addr).await?;
            Ok(Box::new(TlsListener {
                inner: l,
                tls: self.tls.clone(),
            }) as Box<dyn Listener>)
        })
    }

    fn dial_socket(&self, peer: &str, deadline: Duration) -> io::Result<std::net::TcpStream> {
        let s = self.inner.dial_socket(peer, deadline)?;
        self.tls.dial_relay(s, deadline)
    }

    fn tls(&self) -> Option<&Arc<Tls>> {
        Some(&self.tls)
    }
}

struct TlsListener {
    inner: Box<dyn Listener>,
    tls: Arc<Tls>,
}

impl Listener for TlsListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Conn, String)>> {
        Box::pin(async move {
            let (c, peer) = self.inner.accept().await?;
            Ok((self.tls.accept(c), peer))
        })
    }
    fn local_addr(&self) -> io::Result<String> {
        self.inner.local_addr()
    }
}

// ---- relays ----

static RELAYS: AtomicUsize = AtomicUsize::new(0);

/// Relays alive now.
pub fn relays() -> usize {
    RELAYS.load(Ordering::Relaxed)
}

/// The relays' runtime: one worker thread, never dropped.
fn relay_runtime() -> io::Result<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RT.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("strata-tls-relay")
        .enable_all()
        .build()?;
    Ok(RT.get_or_init(|| rt))
}

/// A connected loopback TCP pair (ours: a stranger reaching the short-lived
/// listener first is dropped).
fn loopback_pair() -> io::Result<(std::net::TcpStream, std::net::TcpStream)> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("TLS relay: cannot listen on the loopback interface ({e}); TLS needs it up"),
        )
    })?;
    let a = std::net::TcpStream::connect(l.local_addr()?)?;
    let me = a.local_addr()?;
    for _ in 0..LOOPBACK_STRANGERS_MAX {
        let (b, from) = l.accept()?;
        if from == me {
            return Ok((a, b));
        }
    }
    Err(io::Error::other(
        "TLS relay: too many strangers on the loopback listener",
    ))
}

/// Gives a slot back when the relay ends.
struct Slot;
impl Drop for Slot {
    fn drop(&mut self) {
        RELAYS.fetch_sub(1, Ordering::Relaxed);
    }
}

fn relay(
    s: std::net::TcpStream,
    deadline: Duration,
    handshake: impl FnOnce(tokio::net::TcpStream) -> BoxFuture<'static, io::Result<Conn>>
        + Send
        + 'static,
) -> io::Result<std::net::TcpStream> {
    if RELAYS.fetch_add(1, Ordering::Relaxed) >= RELAYS_MAX {
        RELAYS.fetch_sub(1, Ordering::Relaxed);
        return Err(io::Error::other(format!(
            "TLS relay: {RELAYS_MAX} relays already alive"
        )));
    }
    let slot = Slot;
    let rt = relay_runtime()?;
    let (app, ours) = loopback_pair()?;
    // No Nagle delay on any of the three sockets (the network one may be
    // freshly accepted, untuned): a delayed small record stalls a reply.
    for sock in [&app, &ours, &s] {
        crate::transport::tune_bulk_socket(sock)?;
    }
    s.set_nonblocking(true)?;
    ours.set_nonblocking(true)?;
    // The caller's socket timeouts were for blocking use; the relay's are
    // its deadline and grace.
    let _ = s.set_read_timeout(None);
    let _ = s.set_write_timeout(None);
    let (tx, rx) = std::sync::mpsc::sync_channel::<io::Result<()>>(1);
    rt.spawn(async move {
        let _slot = slot;
        let (tcp, ours) = match (
            tokio::net::TcpStream::from_std(s),
            tokio::net::TcpStream::from_std(ours),
        ) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        let tls = match with_deadline(deadline, "TLS handshake", handshake(tcp)).await {
            Ok(t) => t,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        if tx.send(Ok(())).is_err() {
            return;
        }
        pump(tls, ours).await;
    });
    // The task answers within the deadline (its handshake has it); the
    // margin covers a busy runtime.
    match rx.recv_timeout(deadline + RELAY_ANSWER_MARGIN) {
        Ok(Ok(())) => Ok(app),
        Ok(Err(e)) => Err(e),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("TLS relay: no handshake within {deadline:?}"),
        )),
        Err(_) => Err(io::Error::other(
            "TLS relay: the relay ended during the handshake",
        )),
    }
}

/// Copies both ways until both ended, or one ended and the other had
/// [`RELAY_GRACE`] more.
async fn pump(tls: Conn, plain: tokio::net::TcpStream) {
    let (mut tr, mut tw) = tokio::io::split(tls);
    let (mut pr, mut pw) = plain.into_split();
    let up = async {
        let r = copy(&mut pr, &mut tw).await;
        let _ = tw.shutdown().await;
        r
    };
    let down = async {
        let r = copy(&mut tr, &mut pw).await;
        let _ = pw.shutdown().await;
        r
    };
    tokio::pin!(up, down);
    tokio::select! {
        _ = &mut up => { let _ = tokio::time::timeout(RELAY_GRACE, down).await; }
        _ = &mut down => { let _ = tokio::time::timeout(RELAY_GRACE, up).await; }
    }
}

async fn copy<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(r: &mut R, w: &mut W) -> io::Result<()> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; RELAY_CHUNK_BYTES];
    // Bounded by the stream: ends at its end or first error.
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        w.write_all(&buf[..n]).await?;
        w.flush().await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Secret;
    use crate::transport::TcpTransport;
    use std::io::{Read, Write};

    fn files(dir: &Path) -> TlsFiles {
        TlsFiles::auto_beside(&dir.join("cluster.secret"))
    }

    #[test]
    fn auto_files_are_made_once_private_and_load() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let f = files(d.path());
        let (_, made) = load_or_generate(&f).unwrap();
        assert!(made);
        let (_, made) = load_or_generate(&f).unwrap();
        assert!(!made, "existing files are kept");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&f.key), 0o600);
        assert!(generate(&f).is_err(), "never overwrites");
        std::fs::set_permissions(&f.key, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(matches!(Tls::load(&f), Err(TlsError::Mode { .. })));
        std::fs::set_permissions(&f.key, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&f.ca, "not pem\n").unwrap();
        let e = Tls::load(&f).unwrap_err();
        assert!(e.to_string().contains("cluster-tls-ca.crt"), "{e}");
        let e = Tls::load(&files(&d.path().join("none"))).unwrap_err();
        assert!(e.to_string().contains("strata cluster start"), "{e}");
    }

    /// Two TLS transports over TCP: a server echoing after the secret.
    async fn serve_echo(t: Arc<dyn Transport>, k: Secret) -> String {
        let mut l = t.listen("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                let k = k.clone();
                tokio::spawn(async move {
                    use tokio::io::AsyncReadExt;
                    if crate::auth::server(&mut c, &k, Duration::from_secs(5))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    let mut b = [0u8; 5];
                    if c.read_exact(&mut b).await.is_ok() {
                        let _ = c.write_all(&b).await;
                        let _ = c.flush().await;
                    }
                });
            }
        });
        addr
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn same_ca_talks_other_ca_and_plain_peers_are_refused() {
        use tokio::io::AsyncReadExt;
        let d = tempfile::tempdir().unwrap();
        let (a, _) = load_or_generate(&files(&d.path().join("a"))).unwrap();
        let (b, _) = load_or_generate(&files(&d.path().join("b"))).unwrap();
        let a = Arc::new(a);
        let k = Secret::generate();
        let ta: Arc<dyn Transport> = Arc::new(TlsTransport {
            inner: Arc::new(TcpTransport),
            tls: a.clone(),
        });
        let addr = serve_echo(ta.clone(), k.clone()).await;
        // Same CA: the secret handshake and bytes go through TLS.
        let mut c = ta.connect(&addr).await.unwrap();
        crate::auth::client(&mut c, &k, Duration::from_secs(5))
            .await
            .unwrap();
        c.write_all(b"hello").await.unwrap();
        c.flush().await.unwrap();
        let mut got = [0u8; 5];
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
        // Another CA: refused at the TLS handshake.
        let tb: Arc<dyn Transport> = Arc::new(TlsTransport {
            inner: Arc::new(TcpTransport),
            tls: Arc::new(b),
        });
        let e = match tb.connect(&addr).await {
            Err(e) => e,
            Ok(_) => panic!("a certificate of another CA was accepted"),
        };
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        // A plain peer: its secret handshake meets TLS and is refused.
        let mut p = TcpTransport.connect(&addr).await.unwrap();
        let e = crate::auth::client(&mut p, &k, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        // A TLS client against a plain server: refused, within the deadline.
        let plain = serve_echo(Arc::new(TcpTransport), k.clone()).await;
        let r = with_deadline(Duration::from_secs(5), "tls to plain", ta.connect(&plain)).await;
        assert!(r.is_err());
    }

    #[test]
    fn relayed_bulk_sockets_carry_plaintext_ends_and_encrypt_the_wire() {
        let d = tempfile::tempdir().unwrap();
        let (t, _) = load_or_generate(&files(d.path())).unwrap();
        let t = Arc::new(t);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        // A wire tap: a proxy recording what crosses between the nodes.
        let tap = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tap_addr = tap.local_addr().unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let seen2 = seen.clone();
        std::thread::spawn(move || {
            let (mut a, _) = tap.accept().unwrap();
            let mut b = std::net::TcpStream::connect(addr).unwrap();
            let (mut a2, mut b2) = (a.try_clone().unwrap(), b.try_clone().unwrap());
            let s3 = seen2.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = b2.read(&mut buf) {
                    if n == 0 || a2.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    s3.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                let _ = a2.shutdown(std::net::Shutdown::Write);
            });
            let mut buf = [0u8; 4096];
            while let Ok(n) = a.read(&mut buf) {
                if n == 0 || b.write_all(&buf[..n]).is_err() {
                    break;
                }
                seen2.lock().unwrap().extend_from_slice(&buf[..n]);
            }
            let _ = b.shutdown(std::net::Shutdown::Write);
        });
        let t2 = t.clone();
        let owner = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut p = t2.accept_blocking(s, Duration::from_secs(5)).unwrap();
            let mut got = vec![0u8; 1 << 20];
            p.read_exact(&mut got).unwrap();
            p.write_all(&got[..16]).unwrap();
            p.flush().unwrap();
            got
        });
        let before = relays() + 1;
        let s = std::net::TcpStream::connect(tap_addr).unwrap();
        let mut p = t.dial_relay(s, Duration::from_secs(5)).unwrap();
        let secret_bytes: Vec<u8> = (0..1u32 << 18)
            .flat_map(|i| (i ^ 0x5EC2E7).to_le_bytes())
            .collect();
        p.write_all(&secret_bytes).unwrap();
        let mut back = [0u8; 16];
        p.read_exact(&mut back).unwrap();
        assert_eq!(&back[..], &secret_bytes[..16]);
        assert_eq!(owner.join().unwrap(), secret_bytes);
        drop(p);
        // The wire carried ciphertext: no 64-byte run of the plaintext.
        let wire = seen.lock().unwrap().clone();
        assert!(wire.len() > secret_bytes.len());
        assert!(!wire.windows(64).any(|w| w == &secret_bytes[4096..4160]));
        // The relay ends once both ends closed.
        for _ in 0..500 {
            if relays() == before.saturating_sub(1) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(relays(), before.saturating_sub(1));
    }
}
