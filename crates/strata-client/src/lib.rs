//! strata-client: the native Rust API of strata — buckets (named
//! collections) and blobs (named byte strings) stored by the node's daemon.
//!
//! ```no_run
//! let client = strata_client::Client::connect()?;
//! let bucket = client.bucket("results")?;
//! bucket.put("step-1", b"hello")?;
//! assert_eq!(bucket.get("step-1")?, b"hello");
//! # Ok::<(), strata_client::Error>(())
//! ```
//!
//! How it talks to the engine: every call builds a typed `strata_proto`
//! request; the metadata lookup ([`MetaLookup`], today [`LocalLookup`]: one
//! node) says which node holds what the request addresses, and that node's
//! [`Transport`] carries it. Today's transport is shared memory with the
//! node's daemon ([`shm::ShmTransport`]): a `Hello` over the Unix socket
//! maps the segments, each thread uses one channel (a [`Lane`]), blob bytes
//! travel by one copy into arena space the daemon leased to the channel,
//! and reads copy straight out of the arena or a tier's file under a pin.
//!
//! **Architecture Invariant:** the socket connection stays open for the
//! client's lifetime; when it closes the daemon reclaims leases and pins.
//! No code outside `shm`/`channel` knows rings, slots, leases or segments.
//! **API Boundary:** no placement or metadata logic here; the daemon decides.

mod channel;
pub mod file;
pub mod lookup;
mod pieces;
pub mod remote;
mod replica;
mod shadow;
pub mod shm;
pub mod stage;
pub mod transport;

use std::fs::File;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_proto::control::{self, ControlReply, ControlRequest, HelloReply, StatusReply};
pub use strata_proto::msg::{Reply, Request};
pub use strata_proto::types::{BlobStat, PolicyChoice, ReadExtent};
pub use strata_proto::Errno;
use strata_proto::PutMode;
use strata_transport_shm::PROTOCOL_VERSION;

pub use lookup::{LocalLookup, MetaLookup, RingLookup};
pub use strata_proto::Target;
pub use transport::{Answer, Lane, Ticket, Transport};

/// What the process does with a descriptor the client receives from its
/// daemon (a bulk connection, lent memory): the POSIX adapter moves it out
/// of the low numbers applications close and `dup2` onto blindly, and
/// marks it its own (the application's `close` of it is ignored).
static FD_ADOPTER: std::sync::OnceLock<fn(std::os::fd::RawFd) -> std::os::fd::RawFd> =
    std::sync::OnceLock::new();

/// Registers the process's [`FD_ADOPTER`] (once; later calls are ignored).
/// `f` takes a descriptor the client owns and returns the one to use
/// instead (the same, or a duplicate after closing the original).
pub fn set_fd_adopter(f: fn(std::os::fd::RawFd) -> std::os::fd::RawFd) {
    let _ = FD_ADOPTER.set(f);
}

/// A descriptor received from the daemon, adopted (see [`set_fd_adopter`]).
pub(crate) fn adopt_fd(fd: std::os::fd::OwnedFd) -> std::os::fd::OwnedFd {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let Some(f) = FD_ADOPTER.get() else {
        return fd;
    };
    let n = f(fd.into_raw_fd());
    debug_assert!(n >= 0);
    // SAFETY: the adopter hands back a descriptor this client owns alone
    // (the one given, or its duplicate after closing that one).
    unsafe { std::os::fd::OwnedFd::from_raw_fd(n) }
}

/// Errors of the client API: a strata error code plus context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub errno: Errno,
    pub context: String,
    /// The operating-system errno behind the error (destination file
    /// system), 0 when the error is strata's own.
    pub os: i32,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.context.is_empty() {
            write!(f, "{}", self.errno)
        } else {
            write!(f, "{}: {}", self.context, self.errno)
        }
    }
}
impl std::error::Error for Error {}
impl From<Errno> for Error {
    fn from(errno: Errno) -> Error {
        Error {
            errno,
            context: String::new(),
            os: 0,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn err(errno: Errno, context: impl Into<String>) -> Error {
    Error {
        errno,
        context: context.into(),
        os: 0,
    }
}

/// Placement engine override for a put (the protocol's choice).
pub type Placement = PolicyChoice;

/// Blob metadata (the protocol's record).
pub type BlobInfo = BlobStat;

/// Where the daemon listens, unless told otherwise: `STRATA_SOCKET`,
/// `STRATA_DAEMON_SOCKET`, then the effective configuration.
pub fn default_socket_path() -> Result<PathBuf> {
    for var in ["STRATA_SOCKET", "STRATA_DAEMON_SOCKET"] {
        if let Ok(v) = std::env::var(var) {
            if !v.is_empty() {
                return Ok(PathBuf::from(v));
            }
        }
    }
    let cfg = strata_config::Config::load_effective(None)
        .map_err(|e| err(Errno::Inval, e.to_string()))?;
    Ok(cfg.resolved_socket_path())
}

/// Runs `f` with this thread's effective uid switched to the real uid when
/// they differ and the switch can be undone: the daemon's socket, shared
/// memory and tier files belong to the real user (0600/0700), and the daemon
/// checks the peer's effective uid at connect. Raw system calls change only
/// the calling thread's credentials (glibc's `seteuid` would change every
/// thread's), and only for `f`; requests carry the caller's effective ids
/// for permission checks afterwards.
fn as_real_user<T>(f: impl FnOnce() -> T) -> T {
    let (mut r, mut e, mut s) = (0 as libc::uid_t, 0 as libc::uid_t, 0 as libc::uid_t);
    // SAFETY: three valid out-pointers.
    let got = unsafe { libc::getresuid(&mut r, &mut e, &mut s) } == 0;
    // restorable: the real uid is root (then anything is), or the effective
    // uid is also the saved one
    if !got || r == e || !(r == 0 || e == s) {
        return f();
    }
    // SAFETY: plain system calls on this thread's credentials; -1 = unchanged.
    let switched = unsafe { libc::syscall(libc::SYS_setresuid, -1i64, r as i64, -1i64) } == 0;
    let out = f();
    if switched {
        // SAFETY: as above; allowed by the check before the switch.
        let back = unsafe { libc::syscall(libc::SYS_setresuid, -1i64, e as i64, -1i64) };
        assert_eq!(
            back, 0,
            "restoring the effective uid after connecting failed"
        );
    }
    out
}

/// Refuses a daemon socket served by another user's process (`SO_PEERCRED`):
/// whoever listens on the path would receive our requests and data.
fn check_daemon_peer(s: &UnixStream, socket: &Path) -> Result<()> {
    let me = rustix::process::getuid().as_raw();
    let cred = rustix::net::sockopt::socket_peercred(s).map_err(|e| {
        err(
            Errno::NoDaemon,
            format!("{}: cannot check who serves it: {e}", socket.display()),
        )
    })?;
    let uid = cred.uid.as_raw();
    if uid != me && !shared_with_my_group(socket, uid) {
        return Err(err(
            Errno::Perm,
            format!("{} is served by a process of uid {uid}, not by your own daemon (uid {me}); refusing to use it — remove it or set STRATA_SOCKET", socket.display()),
        ));
    }
    Ok(())
}

/// Whether another user's daemon (`daemon_uid`) shares `socket` with a
/// group of ours (`daemon.group`): the socket and its directory belong to
/// that user, nobody else can write into the directory, and the socket is
/// read-write for a group we are in. Only that user could have put the
/// socket there.
fn shared_with_my_group(socket: &Path, daemon_uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(dir) = socket.parent() else {
        return false;
    };
    let (Ok(d), Ok(s)) = (
        std::fs::symlink_metadata(dir),
        std::fs::symlink_metadata(socket),
    ) else {
        return false;
    };
    if !d.is_dir() || d.uid() != daemon_uid || d.mode() & 0o022 != 0 {
        return false;
    }
    if s.uid() != daemon_uid || s.mode() & 0o060 != 0o060 {
        return false;
    }
    let g = s.gid();
    rustix::process::getegid().as_raw() == g
        || rustix::process::getgroups()
            .unwrap_or_default()
            .iter()
            .any(|x| x.as_raw() == g)
}

/// Control `Backing` on a fresh connection: offers `offer` (generation,
/// descriptor) when given; returns the backing's descriptor if the daemon
/// has one now, and the file's modification generation.
pub(crate) fn backing_request(
    socket: &Path,
    id: u64,
    offer: Option<(u64, std::os::fd::BorrowedFd<'_>)>,
) -> Result<(Option<std::os::fd::OwnedFd>, u64)> {
    let mut s = UnixStream::connect(socket)
        .map_err(|e| err(Errno::NoDaemon, format!("{}: {e}", socket.display())))?;
    check_daemon_peer(&s, socket)?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    let lost = |e: std::io::Error| err(Errno::NoDaemon, format!("shared backing: {e}"));
    let req = ControlRequest::Backing {
        id,
        offer_gen: offer.map(|o| o.0),
    };
    control::write_frame(&mut s, &req).map_err(lost)?;
    if let Some((_, fd)) = offer {
        control::send_fd(&s, fd).map_err(lost)?;
    }
    match control::read_frame(&mut s).map_err(lost)? {
        ControlReply::Backing { present, mod_gen } => {
            let fd = if present {
                Some(control::recv_fd(&s).map_err(lost)?)
            } else {
                None
            };
            Ok((fd, mod_gen))
        }
        ControlReply::Error { code, message } => Err(daemon_error(code, message)),
        other => Err(err(Errno::Internal, format!("unexpected reply {other:?}"))),
    }
}

/// The error a daemon answered on the control socket (`ControlReply::Error`).
pub(crate) fn daemon_error(code: i32, message: String) -> Error {
    err(Errno::from_code(code).unwrap_or(Errno::Internal), message)
}

/// Sends one control request on a fresh connection.
pub fn control_request(socket: &Path, req: &ControlRequest) -> Result<ControlReply> {
    let mut s = UnixStream::connect(socket)
        .map_err(|e| err(Errno::NoDaemon, format!("{}: {e}", socket.display())))?;
    check_daemon_peer(&s, socket)?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    control::write_frame(&mut s, req).map_err(|e| err(Errno::NoDaemon, e.to_string()))?;
    control::read_frame(&mut s).map_err(|e| err(Errno::NoDaemon, e.to_string()))
}

/// Fetches the daemon's status table.
pub fn status(socket: &Path) -> Result<StatusReply> {
    match control_request(socket, &ControlRequest::Status)? {
        ControlReply::Status(s) => Ok(s),
        ControlReply::Error { code, message } => Err(daemon_error(code, message)),
        other => Err(err(Errno::Internal, format!("unexpected reply {other:?}"))),
    }
}

/// A destination file kept for read-through: (path, descriptor, pinned by a
/// mapping).
pub(crate) type DestFd = (String, Arc<File>, bool);

pub(crate) struct Inner {
    pub hello: HelloReply,
    /// Which node holds what a request addresses.
    pub lookup: Box<dyn MetaLookup>,
    /// Index = node: the way to that node's engine (today one node, over
    /// shared memory with its daemon).
    pub nodes: Vec<Node>,
    pub tmp_seq: AtomicU64,
    /// Read-only descriptors of destination files for read-through, by file
    /// id: (path, descriptor, pinned by a mapping). Unpinned ones go when
    /// this process closes the file's last descriptor.
    pub dest_fds: Mutex<std::collections::HashMap<u64, DestFd>>,
    /// The daemon's socket (control requests such as stage-out).
    pub socket: PathBuf,
    /// Pages where written: files split, shadows known (shadow.rs).
    pub shadows: Mutex<shadow::Shadows>,
    pub(crate) replicas: Mutex<replica::Replicas>,
}

/// The way to one node's engine. The shared-memory transport is named so
/// the hot path calls it without dynamic dispatch; any other transport
/// (a network one) is a trait object. (One per node per client: the
/// shared-memory variant stays inline, no pointer to chase on the hot path.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum Node {
    Shm(shm::ShmTransport),
    /// Any other transport (a network one; `connect_through_trait`).
    Other(Box<dyn Transport>),
}

impl Node {
    fn transport(&self) -> &dyn Transport {
        match self {
            Node::Shm(s) => s,
            Node::Other(t) => t.as_ref(),
        }
    }
}

/// `Client::on_lane` through a `Transport` trait object. Cold and never
/// inlined: it keeps the shared-memory arm of `on_lane` small enough for
/// the request closures to be inlined there (a live second arm cost 4 KiB
/// get p50 +70 ns).
#[cold]
#[inline(never)]
fn on_dyn_lane<T>(
    t: &dyn Transport,
    at: Option<u32>,
    f: impl FnOnce(&mut dyn Lane) -> Result<T>,
) -> Result<T> {
    let mut f = Some(f);
    let mut out = None;
    t.with_lane(at, &mut |lane| {
        if let Some(f) = f.take() {
            out = Some(f(lane));
        }
        Ok(())
    })?;
    out.unwrap_or_else(|| {
        Err(err(
            Errno::Internal,
            "the transport did not run the request",
        ))
    })
}

/// A connection to the node's strata daemon. Cheap to clone; usable from
/// many threads at once.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl Client {
    /// The daemon's count of files that left the buffer because a process
    /// maps them shared and writable (`FileAttr::direct`): when it moves, an
    /// adapter looks whether its descriptors refer to such a file. One
    /// atomic load from the control segment.
    pub fn direct_gen(&self) -> u64 {
        self.local().direct_gen()
    }

    /// Connects to the daemon at the default socket.
    pub fn connect() -> Result<Client> {
        Client::connect_to(&default_socket_path()?)
    }

    /// Connects to the daemon listening on `socket`. A process that dropped
    /// its effective uid (`seteuid`, as servers and test suites do) connects
    /// as its real user, whose daemon it is: see [`as_real_user`].
    pub fn connect_to(socket: &Path) -> Result<Client> {
        as_real_user(|| Client::connect_as_is(socket, false))
    }

    /// Connects like [`Client::connect_to`], but every request goes
    /// through the `Transport` trait object, as a transport to another node
    /// would, instead of the direct shared-memory path: tests run the same
    /// workload both ways to show the trait path is complete.
    #[doc(hidden)]
    pub fn connect_through_trait(socket: &Path) -> Result<Client> {
        as_real_user(|| Client::connect_as_is(socket, true))
    }

    fn connect_as_is(socket: &Path, through_trait: bool) -> Result<Client> {
        let mut s = UnixStream::connect(socket).map_err(|e| {
            err(Errno::NoDaemon, format!("cannot reach the strata daemon at {} ({e}); start it with `strata daemon start`", socket.display()))
        })?;
        check_daemon_peer(&s, socket)?;
        let uid = rustix::process::getuid().as_raw();
        let hello = ControlRequest::Hello {
            version: PROTOCOL_VERSION,
            pid: std::process::id(),
            uid,
        };
        control::write_frame(&mut s, &hello).map_err(|e| err(Errno::NoDaemon, e.to_string()))?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
        let reply: ControlReply =
            control::read_frame(&mut s).map_err(|e| err(Errno::NoDaemon, e.to_string()))?;
        let _ = s.set_read_timeout(None);
        let hello = match reply {
            ControlReply::Hello(h) => h,
            ControlReply::Error { code, message } => return Err(daemon_error(code, message)),
            other => {
                return Err(err(
                    Errno::Internal,
                    format!("unexpected hello reply {other:?}"),
                ))
            }
        };
        let transport = shm::ShmTransport::attach(&hello, s, socket)?;
        let node = if through_trait {
            Node::Other(Box::new(transport))
        } else {
            Node::Shm(transport)
        };
        // A cluster member: the other nodes through this daemon, names by the ring.
        let (lookup, nodes): (Box<dyn MetaLookup>, Vec<Node>) = if hello.cluster_nodes.len() > 1 {
            let ring = strata_meta::Ring::new(&hello.cluster_nodes)
                .map_err(|e| err(Errno::Malformed, format!("the daemon's node list: {e}")))?;
            let me = hello.node_id;
            if me as usize >= hello.cluster_nodes.len() {
                return Err(err(
                    Errno::Malformed,
                    "the daemon's node id is not in its node list",
                ));
            }
            let mut node = Some(node);
            let nodes = (0..hello.cluster_nodes.len() as u32)
                .map(|i| {
                    if i == me {
                        node.take().expect("one local node")
                    } else {
                        Node::Other(Box::new(remote::RemoteTransport::new(
                            i,
                            socket.to_path_buf(),
                            hello.client_id,
                        )))
                    }
                })
                .collect();
            let lookup = lookup::RingLookup {
                ring,
                local: me,
                paths_at_owner: hello.files_at_owner,
            };
            (Box::new(lookup), nodes)
        } else {
            (Box::new(LocalLookup), vec![node])
        };
        Ok(Client {
            inner: Arc::new(Inner {
                hello,
                lookup,
                nodes,
                tmp_seq: AtomicU64::new(1),
                dest_fds: Mutex::new(Default::default()),
                socket: socket.to_path_buf(),
                shadows: Mutex::new(Default::default()),
                replicas: Mutex::new(Default::default()),
            }),
        })
    }

    pub fn hello(&self) -> &HelloReply {
        &self.inner.hello
    }

    /// The node (its id: its place in the cluster's list) that holds bucket
    /// `name`'s record and answers its requests; 0 on a single node.
    pub fn owner_of_bucket(&self, name: &str) -> u32 {
        self.inner.lookup.node_for(strata_proto::Target::Name(name))
    }

    /// The node this client's daemon runs on, and how many nodes there are.
    pub fn node(&self) -> (u32, u32) {
        (
            self.inner.lookup.local_node(),
            self.inner.lookup.node_count(),
        )
    }

    /// The socket this client is connected to.
    pub fn socket_path(&self) -> &Path {
        &self.inner.socket
    }

    /// Runs `f` on a lane of the transport (this thread's when `at` is
    /// None) and returns what `f` returns.
    pub(crate) fn on_lane<T>(
        &self,
        route: Target<'_>,
        at: Option<u32>,
        f: impl FnOnce(&mut dyn Lane) -> Result<T>,
    ) -> Result<T> {
        match self.node_for(route)? {
            // The node-local transport, called without dynamic dispatch:
            // every request of the native API and the adapters takes it.
            Node::Shm(s) => s.on_lane(at, f),
            Node::Other(t) => on_dyn_lane(t.as_ref(), at, f),
        }
    }

    /// The node holding what `route` addresses.
    fn node_for(&self, route: Target<'_>) -> Result<&Node> {
        let nodes = &self.inner.nodes;
        if nodes.len() == 1 {
            // One node holds everything (LocalLookup): no lookup to make.
            return Ok(&nodes[0]);
        }
        let node = self.inner.lookup.node_for(route);
        nodes.get(node as usize).ok_or_else(|| {
            err(
                Errno::NoDaemon,
                format!("{route:?} is held by node {node}, which this client has no transport to"),
            )
        })
    }

    /// The transport to the node holding what `route` addresses.
    pub(crate) fn transport_for(&self, route: Target<'_>) -> Result<&dyn Transport> {
        self.node_for(route).map(Node::transport)
    }

    /// The transport to this client's own node.
    pub(crate) fn local(&self) -> &dyn Transport {
        let node = self.inner.lookup.local_node() as usize;
        debug_assert!(node < self.inner.nodes.len());
        self.inner.nodes[node.min(self.inner.nodes.len() - 1)].transport()
    }

    /// True while the daemon is up.
    pub fn daemon_alive(&self) -> bool {
        self.local().daemon_alive()
    }

    /// Runs one request synchronously: the outer error is the transport's,
    /// the inner one the daemon's answer.
    pub(crate) fn call(&self, req: &Request) -> Result<std::result::Result<Reply<'static>, Errno>> {
        self.call_at(req.target(), req)
    }

    /// [`Client::call`] on the node `route` names.
    fn call_at(
        &self,
        route: Target<'_>,
        req: &Request,
    ) -> Result<std::result::Result<Reply<'static>, Errno>> {
        let answer = self.on_lane(route, None, |lane| {
            let t = lane.submit(req)?;
            lane.wait(t)
        })?;
        // The client's side of the boundary check (the engine asserts it).
        if let Ok(reply) = &answer {
            if !reply.answers(req) {
                return Err(err(
                    Errno::Malformed,
                    format!("the daemon answered {req:?} with {reply:?}"),
                ));
            }
        }
        Ok(answer)
    }

    /// `call`, the daemon's error reported with `context`.
    pub(crate) fn ask(
        &self,
        req: &Request,
        context: impl FnOnce() -> String,
    ) -> Result<Reply<'static>> {
        self.call(req)?.map_err(|e| err(e, context()))
    }

    /// `ask` for requests answered `Reply::Done`; the context names the op.
    pub(crate) fn simple(&self, req: &Request, name: &str) -> Result<()> {
        let op = strata_transport_shm::op_of(req);
        self.ask(req, || format!("{op:?} {name}"))?;
        Ok(())
    }

    /// Opens bucket `name`, creating it if needed.
    pub fn bucket(&self, name: &str) -> Result<Bucket> {
        self.bucket_with(name, true, false)
    }

    /// Opens an existing bucket (`NoBucket` if absent).
    pub fn bucket_open(&self, name: &str) -> Result<Bucket> {
        self.bucket_with(name, false, false)
    }

    /// Creates a bucket that must not exist yet (`Exists` otherwise).
    pub fn bucket_create(&self, name: &str) -> Result<Bucket> {
        self.bucket_with(name, true, true)
    }

    fn bucket_with(&self, name: &str, create: bool, exclusive: bool) -> Result<Bucket> {
        let req = Request::BucketOpen {
            name,
            create,
            excl: exclusive,
        };
        let r = self.ask(&req, || format!("BucketOpen {name}")).map_err(|e| {
            if e.errno == Errno::Name && name.starts_with('/') {
                err(Errno::Name, format!("bucket {name:?}: names starting with '/' are the files buffered through the adapters (strata run); a native bucket needs another name"))
            } else {
                e
            }
        })?;
        let Reply::Bucket { id, .. } = r else {
            return Err(unexpected("BucketOpen"));
        };
        Ok(Bucket {
            client: self.clone(),
            id,
            name: Mutex::new(name.to_string()),
        })
    }

    /// Names of all buckets.
    /// The buckets of every node (a cluster's listing merges them, sorted).
    pub fn bucket_names(&self) -> Result<Vec<String>> {
        let nodes = self.inner.nodes.len();
        let mut out = Vec::new();
        for node in 0..nodes {
            // A node's ids carry it in their top bits: this routes to it.
            let route = if nodes == 1 {
                Target::Local
            } else {
                Target::Id((node as u64) << strata_meta::NODE_SHIFT)
            };
            let mut cursor = 0u64;
            // Bounded: each round returns at least one name or ends.
            for _ in 0..(1u64 << 32) {
                let r = self
                    .call_at(route, &Request::BucketList { cursor })?
                    .map_err(|e| err(e, "list buckets"))?;
                let Reply::BucketNames { names, next_cursor } = r else {
                    return Err(unexpected("BucketList"));
                };
                out.extend(names);
                if next_cursor == 0 {
                    break;
                }
                cursor = next_cursor;
            }
        }
        if nodes > 1 {
            out.sort();
        }
        Ok(out)
    }

    /// A no-op round trip through the rings (for benchmarks).
    pub fn nop(&self) -> Result<()> {
        self.call(&Request::Nop)?.map_err(|e| err(e, "nop"))?;
        Ok(())
    }
}

/// A named collection of blobs.
pub struct Bucket {
    client: Client,
    id: u64,
    name: Mutex<String>,
}

/// Options for a put.
#[derive(Debug, Clone, Copy, Default)]
pub struct PutOptions {
    pub placement: Option<Placement>,
    /// Fail with `Exists` if the blob exists.
    pub exclusive: bool,
}

const TMP_PREFIX: char = '\u{1}';

/// Largest whole-blob get served from the get index into a fresh vector
/// (larger ones go through the daemon, which pipelines them).
const INDEXED_VEC_MAX_BYTES: u64 = 64 << 20;

impl Bucket {
    pub fn id(&self) -> u64 {
        self.id
    }
    pub fn name(&self) -> String {
        self.name.lock().map(|n| n.clone()).unwrap_or_default()
    }
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// (total bytes, blob count)
    pub fn size(&self) -> Result<(u64, u64)> {
        let r = self
            .client
            .ask(&Request::BucketInfo { bucket: self.id }, || {
                "BucketInfo ".into()
            })?;
        let Reply::BucketInfo { bytes, blobs } = r else {
            return Err(unexpected("BucketInfo"));
        };
        Ok((bytes, blobs))
    }

    pub fn rename(&self, new_name: &str) -> Result<()> {
        self.client.simple(
            &Request::BucketRename {
                bucket: self.id,
                new_name,
            },
            new_name,
        )?;
        if let Ok(mut n) = self.name.lock() {
            *n = new_name.to_string();
        }
        Ok(())
    }

    /// Destroys the bucket and every blob in it.
    pub fn destroy(&self) -> Result<()> {
        self.client
            .simple(&Request::BucketDestroy { bucket: self.id }, "")?;
        Ok(())
    }

    /// Sets tag `key` to `value` (an empty value removes it).
    pub fn tag(&self, key: &str, value: &str) -> Result<()> {
        self.client.simple(
            &Request::BucketTag {
                bucket: self.id,
                key,
                value,
            },
            key,
        )?;
        Ok(())
    }

    /// Sets the bucket's placement engine (None: the daemon's default);
    /// a put's own `PutOptions::placement` still wins.
    pub fn set_placement(&self, p: Option<Placement>) -> Result<()> {
        let v = match p {
            None => "",
            Some(Placement::MinimizeIoTime) => "minimize_io_time",
            Some(Placement::RoundRobin) => "round_robin",
            Some(Placement::Random) => "random",
        };
        self.tag("placement", v)
    }

    pub fn tags(&self) -> Result<Vec<(String, String)>> {
        let r = self
            .client
            .call(&Request::BucketTags { bucket: self.id })?
            .map_err(|e| err(e, ""))?;
        let Reply::Tags(tags) = r else {
            return Err(unexpected("BucketTags"));
        };
        Ok(tags)
    }

    /// Stores `data` as blob `name`, replacing any previous contents.
    pub fn put(&self, name: &str, data: &[u8]) -> Result<()> {
        self.put_with(name, data, PutOptions::default())
    }

    pub fn put_with(&self, name: &str, data: &[u8], opts: PutOptions) -> Result<()> {
        check_name(name)?;
        let policy = opts.placement;
        let put = |data| Request::Put {
            bucket: self.id,
            name,
            data,
            mode: PutMode::Replace {
                excl: opts.exclusive,
            },
            policy,
        };
        let answer = self.client.on_lane(Target::Id(self.id), None, |lane| {
            match lane.submit_data(data, &put)? {
                Some(t) => lane.wait(t).map(Some),
                None => Ok(None),
            }
        })?;
        match answer {
            Some(a) => {
                a.map_err(|e| err(e, format!("put {name}")))?;
                Ok(())
            }
            None => self.put_chunked(name, data, policy, opts.exclusive),
        }
    }

    /// A blob too big for any lease: written under a temporary name piece
    /// by piece, then renamed over `name` (so readers never see half of it).
    fn put_chunked(
        &self,
        name: &str,
        data: &[u8],
        policy: Option<PolicyChoice>,
        exclusive: bool,
    ) -> Result<()> {
        let seq = self.client.inner.tmp_seq.fetch_add(1, Ordering::Relaxed);
        let tmp = format!(
            "{TMP_PREFIX}tmp.{}.{}",
            self.client.inner.hello.client_id, seq
        );
        let res = (|| {
            self.write_pieces(&tmp, 0, data, policy)?;
            if data.is_empty() {
                self.put(&tmp, &[])?;
            }
            self.client.simple(
                &Request::Rename {
                    bucket: self.id,
                    from: &tmp,
                    to: name,
                    replace: !exclusive,
                },
                &tmp,
            )?;
            Ok(())
        })();
        res.map_err(|mut e: Error| {
            let _ = self.delete(&tmp);
            // Name what the caller asked for, not the hidden temporary blob.
            let bucket = self.name.lock().map(|n| n.clone()).unwrap_or_default();
            e.context = e.context.replace(&tmp, &format!("{bucket}/{name}"));
            e
        })
    }

    /// Writes `data` at `offset` in pieces that fit a lease (or the arg
    /// area); returns the blob's size after. Where the transport carries
    /// several requests at once (the bulk layer), the pieces go side by
    /// side, up to its `streams_max`.
    fn write_pieces(
        &self,
        name: &str,
        offset: u64,
        data: &[u8],
        policy: Option<PolicyChoice>,
    ) -> Result<u64> {
        let t = self.client.transport_for(Target::Id(self.id))?;
        let (piece_max, streams) = (t.data_max_bytes(), t.streams_max());
        if streams <= 1 || data.len() <= piece_max {
            return self.write_pieces_seq(name, offset, data, policy, piece_max);
        }
        let split = pieces::Pieces::new(data.len(), piece_max, streams);
        let sizes = pieces::run(split.ranges().collect(), streams, |(at, len)| {
            let piece = &data[at..at + len];
            self.write_pieces_seq(name, offset + at as u64, piece, policy, piece_max)
        })?;
        // Each reply's size is the blob's after its piece: the last is the largest.
        Ok(sizes.into_iter().max().unwrap_or(0))
    }

    /// [`Bucket::write_pieces`], one piece after another.
    fn write_pieces_seq(
        &self,
        name: &str,
        offset: u64,
        data: &[u8],
        policy: Option<PolicyChoice>,
        piece_max: usize,
    ) -> Result<u64> {
        let mut done = 0usize;
        let mut size = 0u64;
        // Bounded loop: every round writes at least one byte or fails.
        while done < data.len() || (data.is_empty() && done == 0) {
            let n = (data.len() - done).min(piece_max);
            let piece = &data[done..done + n];
            let put = |data| Request::Put {
                bucket: self.id,
                name,
                data,
                mode: PutMode::At(offset + done as u64),
                policy,
            };
            let (carried, answer) = self.client.on_lane(Target::Id(self.id), None, |lane| {
                let t = match lane.submit_data(piece, &put)? {
                    Some(t) => t,
                    None => lane.submit_inline(name.len(), piece, &put)?,
                };
                Ok((t.data_len, lane.wait(t)?))
            })?;
            let r = answer.map_err(|e| err(e, format!("put {name}")))?;
            let Reply::Size(s) = r else {
                return Err(unexpected("Put"));
            };
            size = s;
            done += carried;
            if data.is_empty() {
                break;
            }
        }
        Ok(size)
    }

    /// Writes `data` at byte `offset` of blob `name` (created if missing;
    /// a gap before `offset` reads as zeros). Returns the new blob size.
    pub fn put_at(&self, name: &str, offset: u64, data: &[u8]) -> Result<u64> {
        check_name(name)?;
        self.write_pieces(name, offset, data, None)
    }

    /// Appends `data` to blob `name`; returns the new size.
    pub fn append(&self, name: &str, data: &[u8]) -> Result<u64> {
        check_name(name)?;
        let append = |data| Request::Put {
            bucket: self.id,
            name,
            data,
            mode: PutMode::Append,
            policy: None,
        };
        let answer = self.client.on_lane(Target::Id(self.id), None, |lane| {
            match lane.submit_data(data, &append)? {
                Some(t) => lane.wait(t).map(Some),
                None => Ok(None),
            }
        })?;
        let Some(answer) = answer else {
            let size = self.size_of(name).unwrap_or(0);
            return self.write_pieces(name, size, data, None);
        };
        let r = answer.map_err(|e| err(e, format!("append {name}")))?;
        let Reply::Size(size) = r else {
            return Err(unexpected("Put"));
        };
        Ok(size)
    }

    /// Returns the whole blob.
    pub fn get(&self, name: &str) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.get_range_vec(name, 0, u64::MAX, &mut out)?;
        Ok(out)
    }

    /// Reads into `buf` from byte `offset`; returns the bytes read (short at the end of the blob).
    pub fn get_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize> {
        check_name(name)?;
        let t = self.client.transport_for(Target::Id(self.id))?;
        if let Some((_, copied)) = t.read_indexed(self.id, name, offset, buf) {
            return Ok(copied);
        }
        let (piece_max, streams) = (t.data_max_bytes(), t.streams_max());
        if streams <= 1 || buf.len() <= piece_max {
            return self.get_at_seq(name, offset, buf);
        }
        self.get_at_side_by_side(name, offset, buf, piece_max, streams)
    }

    /// [`Bucket::get_at`] in pieces side by side (the bulk layer).
    fn get_at_side_by_side(
        &self,
        name: &str,
        offset: u64,
        buf: &mut [u8],
        piece_max: usize,
        streams: usize,
    ) -> Result<usize> {
        let split = pieces::Pieces::new(buf.len(), piece_max, streams);
        let lens: Vec<usize> = split.ranges().map(|(_, l)| l).collect();
        let items: Vec<(u64, &mut [u8])> = buf
            .chunks_mut(split.piece)
            .enumerate()
            .map(|(i, c)| (offset + (i * split.piece) as u64, c))
            .collect();
        debug_assert_eq!(items.len(), lens.len());
        let got = pieces::run(items, streams, |(at, b)| self.get_at_seq(name, at, b))?;
        // Contiguous from `offset`: a short piece (the blob's end) ends it.
        let mut done = 0usize;
        for (g, l) in got.into_iter().zip(lens) {
            done += g;
            if g < l {
                break;
            }
        }
        Ok(done)
    }

    /// [`Bucket::get_at`], one request after another.
    fn get_at_seq(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut done = 0usize;
        // Bounded: each round covers ≥ 1 byte or ends.
        while done < buf.len() {
            let req = Request::Get {
                bucket: self.id,
                name,
                offset: offset + done as u64,
                len: (buf.len() - done) as u64,
            };
            let rest = &mut buf[done..];
            let (size, covered) = self.client.on_lane(Target::Id(self.id), None, |lane| {
                let t = lane.submit(&req)?;
                let r = lane.wait(t)?.map_err(|e| err(e, format!("get {name}")))?;
                let (size, covered, pin, exts) = extents_reply(r)?;
                let covered = (covered as usize).min(rest.len());
                let res = lane.read_extents(&exts, offset + done as u64, &mut rest[..covered]);
                lane.release(pin);
                res.map(|()| (size, covered))
            })?;
            done += covered;
            // The blob's end reached: no second request (it could read a
            // newer, longer version's tail after this one's head).
            if covered == 0 || offset + done as u64 >= size {
                break;
            }
        }
        Ok(done)
    }

    fn get_range_vec(&self, name: &str, offset: u64, len: u64, out: &mut Vec<u8>) -> Result<()> {
        check_name(name)?;
        let t = self.client.transport_for(Target::Id(self.id))?;
        if offset == 0
            && len == u64::MAX
            && t.read_indexed_vec(self.id, name, INDEXED_VEC_MAX_BYTES, out)
                .is_some()
        {
            return Ok(());
        }
        let (piece_max, streams) = (t.data_max_bytes(), t.streams_max());
        let mut at = offset;
        let mut remaining = len;
        for round in 0u64.. {
            let req = Request::Get {
                bucket: self.id,
                name,
                offset: at,
                len: remaining,
            };
            let covered = self.client.on_lane(Target::Id(self.id), None, |lane| {
                let t = lane.submit(&req)?;
                let r = lane.wait(t)?.map_err(|e| err(e, format!("get {name}")))?;
                let (size, covered, pin, exts) = extents_reply(r)?;
                if round == 0 {
                    let total = size.saturating_sub(offset).min(len);
                    out.clear();
                    // A blob larger than this process can hold is an error, not
                    // an abort of the process (use get_at with a buffer of your own).
                    let fits = usize::try_from(total)
                        .ok()
                        .is_some_and(|t| out.try_reserve_exact(t).is_ok());
                    if !fits {
                        lane.release(pin);
                        return Err(err(Errno::TooBig, format!("get {name}: {total} bytes do not fit in this process's memory; read it in pieces with get_at")));
                    }
                    remaining = total;
                }
                let covered = (covered as usize).min(remaining as usize);
                if round == 0 && streams > 1 && (covered as u64) < remaining && covered > 0 {
                    // Pipelined (the bulk layer): the rest is asked for on
                    // other connections while this reply's bytes arrive.
                    let total = remaining as usize;
                    // SAFETY: as below — every byte of 0..total is written by
                    // read_extents or the reads of the rest, or the length
                    // is cut back to what was written.
                    #[allow(clippy::uninit_vec)]
                    unsafe {
                        out.set_len(total)
                    };
                    let (head, tail) = out.split_at_mut(covered);
                    let (res, rest) = std::thread::scope(|s| {
                        let rest = s.spawn(|| {
                            let t_off = offset + covered as u64;
                            let n = streams - 1;
                            if n <= 1 || tail.len() <= piece_max {
                                self.get_at_seq(name, t_off, tail)
                            } else {
                                self.get_at_side_by_side(name, t_off, tail, piece_max, n)
                            }
                        });
                        let res = lane.read_extents(&exts, at, head);
                        lane.release(pin);
                        (res, rest.join())
                    });
                    let rest = rest
                        .map_err(|_| err(Errno::Internal, format!("get {name}: a reader panicked")))
                        .and_then(|r| r);
                    return match (res, rest) {
                        (Ok(()), Ok(got)) => {
                            out.truncate(covered + got);
                            Ok(covered + got)
                        }
                        (Err(e), _) | (_, Err(e)) => {
                            out.clear();
                            Err(e)
                        }
                    };
                }
                let start = out.len();
                // SAFETY: read_extents writes every byte of the covered range
                // (holes as zeros), or fails and the length is put back; the
                // capacity was reserved for the whole read in round 0.
                #[allow(clippy::uninit_vec)]
                unsafe {
                    out.set_len(start + covered)
                };
                let res = lane.read_extents(&exts, at, &mut out[start..start + covered]);
                lane.release(pin);
                if let Err(e) = res {
                    out.truncate(start);
                    return Err(e);
                }
                Ok(covered)
            })?;
            at += covered as u64;
            remaining = remaining.saturating_sub(covered as u64);
            if remaining == 0 || covered == 0 {
                break;
            }
        }
        Ok(())
    }

    pub fn delete(&self, name: &str) -> Result<()> {
        check_name(name)?;
        self.client.simple(
            &Request::Delete {
                bucket: self.id,
                name,
            },
            name,
        )?;
        Ok(())
    }

    /// Renames blob `from` to `to`; fails with `Exists` unless `replace`.
    pub fn rename_blob(&self, from: &str, to: &str, replace: bool) -> Result<()> {
        check_name(from)?;
        check_name(to)?;
        self.client.simple(
            &Request::Rename {
                bucket: self.id,
                from,
                to,
                replace,
            },
            from,
        )?;
        Ok(())
    }

    /// Makes this bucket's blobs durable. With `durable`, returns once every
    /// blob is on a non-volatile tier, recorded in the daemon's journal and
    /// synced — it survives a daemon crash (`NotDurable` when the daemon has
    /// no non-volatile tier). Without, there is nothing to do: a blob is in
    /// the buffer when `put` returns.
    pub fn flush(&self, durable: bool) -> Result<()> {
        if !durable {
            return Ok(());
        }
        self.client.bucket_flush(self.id).map_err(|mut e| {
            // A bucket has no destination: say what it would take instead.
            let bucket = self.name.lock().map(|n| n.clone()).unwrap_or_default();
            if e.errno == Errno::NotDurable {
                e.context = format!(
                    "durable flush of bucket {bucket} (add a `kind: dir` device to the \
                     daemon's configuration)"
                );
            } else {
                e.context = format!("durable flush of bucket {bucket}: {}", e.context);
            }
            e
        })
    }

    pub fn exists(&self, name: &str) -> Result<bool> {
        match self.stat(name) {
            Ok(_) => Ok(true),
            Err(e) if e.errno == Errno::NoBlob => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn size_of(&self, name: &str) -> Result<u64> {
        Ok(self.stat(name)?.size)
    }

    pub fn stat(&self, name: &str) -> Result<BlobInfo> {
        check_name(name)?;
        let r = self.client.ask(
            &Request::Stat {
                bucket: self.id,
                name,
            },
            || format!("stat {name}"),
        )?;
        let Reply::BlobStat(st) = r else {
            return Err(unexpected("Stat"));
        };
        Ok(st)
    }

    /// Names of the blobs in this bucket, sorted.
    pub fn list(&self) -> Result<Vec<String>> {
        let mut out: Vec<String> = Vec::new();
        let mut last = String::new();
        for _ in 0..(1u64 << 40) {
            let req = Request::BlobList {
                bucket: self.id,
                after: (!last.is_empty()).then_some(last.as_str()),
            };
            let r = self.client.ask(&req, || "list blobs".into())?;
            let Reply::BlobNames { names, more } = r else {
                return Err(unexpected("BlobList"));
            };
            if let Some(l) = names.last() {
                last = l.clone();
            }
            out.extend(names.into_iter().filter(|n| !n.starts_with(TMP_PREFIX)));
            if !more {
                break;
            }
        }
        Ok(out)
    }

    /// Sets (or with None clears) the user score in [0, 1]; `stationary`
    /// pins the blob where it is (the organizer will not move it).
    pub fn set_score(&self, name: &str, score: Option<f32>, stationary: bool) -> Result<()> {
        check_name(name)?;
        if let Some(s) = score {
            if !(0.0..=1.0).contains(&s) {
                return Err(err(
                    Errno::Inval,
                    format!("score {s} of {name} is outside [0, 1]"),
                ));
            }
        }
        let req = Request::Score {
            bucket: self.id,
            name,
            score,
            stationary,
        };
        self.client.ask(&req, || format!("score {name}"))?;
        Ok(())
    }

    /// Starts a put and returns at once (the bytes are already copied into
    /// shared memory, so `data` may be reused); `wait()` collects the result.
    pub fn put_async(&self, name: &str, data: &[u8]) -> Result<PendingPut<'_>> {
        check_name(name)?;
        let put = |data| Request::Put {
            bucket: self.id,
            name,
            data,
            mode: PutMode::Replace { excl: false },
            policy: None,
        };
        let ticket = self.client.on_lane(Target::Id(self.id), None, |lane| {
            lane.submit_data(data, &put)
        })?;
        Ok(match ticket {
            Some(t) => PendingPut {
                bucket: self,
                ticket: Some(t),
                fallback: None,
            },
            None => PendingPut {
                bucket: self,
                ticket: None,
                fallback: Some(self.put(name, data)),
            },
        })
    }

    /// Starts a get; `wait()` returns the bytes.
    pub fn get_async(&self, name: &str) -> Result<PendingGet<'_>> {
        check_name(name)?;
        let req = Request::Get {
            bucket: self.id,
            name,
            offset: 0,
            len: u64::MAX,
        };
        let ticket = self
            .client
            .on_lane(Target::Id(self.id), None, |lane| lane.submit(&req))?;
        Ok(PendingGet {
            bucket: self,
            name: name.to_string(),
            ticket,
        })
    }
}

/// An in-flight put.
pub struct PendingPut<'a> {
    bucket: &'a Bucket,
    ticket: Option<Ticket>,
    fallback: Option<Result<()>>,
}

impl PendingPut<'_> {
    pub fn wait(mut self) -> Result<()> {
        if let Some(r) = self.fallback.take() {
            return r;
        }
        let Some(t) = self.ticket.take() else {
            return Err(err(Errno::Internal, "pending put without a request"));
        };
        self.bucket
            .client
            .on_lane(Target::Id(self.bucket.id), Some(t.lane), |lane| {
                lane.wait(t)
            })?
            .map_err(|e| err(e, "put"))?;
        Ok(())
    }
}

impl Drop for PendingPut<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            let _ = self
                .bucket
                .client
                .on_lane(Target::Id(self.bucket.id), Some(t.lane), |lane| {
                    lane.wait(t)
                });
        }
    }
}

/// An in-flight get.
pub struct PendingGet<'a> {
    bucket: &'a Bucket,
    name: String,
    ticket: Ticket,
}

impl PendingGet<'_> {
    pub fn wait(self) -> Result<Vec<u8>> {
        let client = &self.bucket.client;
        let t = self.ticket;
        let out = client.on_lane(Target::Id(self.bucket.id), Some(t.lane), |lane| {
            let r = lane
                .wait(t)?
                .map_err(|e| err(e, format!("get {}", self.name)))?;
            let (size, covered, pin, exts) = extents_reply(r)?;
            let mut out = vec![0u8; covered as usize];
            let res = lane.read_extents(&exts, 0, &mut out);
            lane.release(pin);
            res.map(|()| (size as usize, out))
        });
        let (size, mut out) = out?;
        if out.len() < size {
            // Too many extents for one answer: read the rest synchronously.
            let mut rest = Vec::new();
            self.bucket
                .get_range_vec(&self.name, out.len() as u64, u64::MAX, &mut rest)?;
            out.extend_from_slice(&rest);
        }
        Ok(out)
    }
}

/// (size, bytes covered, pin, extents) of an extent reply.
pub(crate) fn extents_reply(r: Reply<'static>) -> Result<(u64, u64, u64, Vec<ReadExtent>)> {
    match r {
        Reply::Extents {
            size,
            covered,
            pin,
            extents,
        } => Ok((size, covered, pin, extents.into_owned())),
        _ => Err(unexpected("a read")),
    }
}

/// The daemon answered a request with a reply of another kind.
pub(crate) fn unexpected(what: &str) -> Error {
    err(
        Errno::Malformed,
        format!("the daemon answered {what} with a reply of another kind"),
    )
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('\0') {
        return Err(err(Errno::Name, format!("bad blob name {name:?}")));
    }
    Ok(())
}
