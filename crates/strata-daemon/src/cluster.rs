//! The daemon's **cluster side**: one more transport into the same daemon.
//! A thread runs a tokio runtime with the control RPC service
//! (`strata_net::rpc`) on this node's cluster address and a heartbeat loop
//! that calls `Hello` on every peer. Requests that need the engine go to the
//! poller as control messages (`Msg`), exactly as the control socket's do —
//! the engine's thread stays the only one touching its state.
//!
//! **Invariants:** every remote call has the configured deadline; a peer
//! that does not answer within it is `down` (never a hang of this thread or
//! of the poller); a peer with another node list is `mismatch` and never
//! counted as up; nothing listens before the secret is loaded, and nothing
//! answers a connection that did not prove it.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use strata_cluster::{Inputs, Membership};
use strata_config::Config;
use strata_meta::NodeId;
use strata_net::{pb, rpc, Secret, Transport};
use strata_proto::control::{ClusterStatus, PeerStatus, StatusReply};

use crate::server::{BulkConn, Msg, Peers, Shared};
use strata_proto::Errno;

mod bulk;

/// Peers called at once by one heartbeat round.
const HEARTBEAT_FANOUT_MAX: usize = 64;
/// How long a stopping daemon lets its open cluster calls finish.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);
/// Longest `Drain` wait a caller may ask for.
const DRAIN_WAIT_MAX: Duration = Duration::from_secs(24 * 3600);
/// Paths one `Flush` call may name.
const FLUSH_PATHS_MAX: usize = 4096;
/// Flush errors one `Flush` answer carries (the rest are counted only).
const FLUSH_ERRORS_MAX: usize = 256;
/// Local clients whose bulk dials are remembered (for `client_gone`).
const DIALED_CLIENTS_MAX: usize = 65_536;
/// Deadline of a `ShadowPush` call (≤ `PUSH_PAGES_MAX` pages written, and
/// synced when asked, at the destination by the holder): a hung
/// destination fails the owner's flush job, which retries.
const PUSH_DEADLINE: Duration = rpc::LONG_CALL_DEADLINE;
/// Files one ShadowsGone call names (larger notices go in parts).
const SHADOWS_GONE_PER_CALL_MAX: usize = 4096;

/// What a daemon needs to join its cluster.
pub struct Setup {
    pub membership: Membership,
    /// This node.
    pub me: NodeId,
    pub secret: Secret,
    /// Port of hosts that name none.
    pub port: u16,
    pub call_timeout: Duration,
    pub heartbeat: Duration,
    pub transport: Arc<dyn Transport>,
    /// Memory lent to (and asked of) every other node as a remote tier.
    pub remote_tier_bytes: u64,
    /// `cluster.files_at_owner`: flushes and drains ask every node.
    pub files_at_owner: bool,
}

/// How `daemon start --cluster` was asked to find its nodes and itself.
#[derive(Debug, Default, Clone)]
pub struct Args {
    pub hosts: Option<String>,
    pub hostfile: Option<std::path::PathBuf>,
    /// This node's name in the list (default: the host name).
    pub node: Option<String>,
}

/// This machine's host name.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `len` bytes into the buffer we own.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The node list from `args`, the resource manager or the config (first
/// found); an error naming what to pass when there is none.
pub fn membership(cfg: &Config, args: &Args) -> anyhow::Result<Membership> {
    let env = |k: &str| std::env::var(k).ok();
    let inputs = Inputs {
        hosts: args.hosts.as_deref(),
        hostfile: args.hostfile.as_deref(),
        config_hosts: &cfg.cluster.hosts,
        env: &env,
    };
    match strata_cluster::discover(&inputs)? {
        Some(m) => Ok(m),
        None => bail!(
            "no cluster nodes: pass --hosts 'node[01-04]' or --hostfile FILE, run inside a Slurm, PBS or LSF job, or set cluster.hosts in the config"
        ),
    }
}

impl Setup {
    /// Everything `daemon start --cluster` needs: the node list, which node
    /// this is, the secret (it must exist: `cluster start` writes it).
    pub fn from_args(cfg: &Config, args: &Args) -> anyhow::Result<Setup> {
        let membership = membership(cfg, args)?;
        let host = hostname();
        let wanted = args.node.clone().unwrap_or(host.clone());
        let short = wanted.split('.').next().unwrap_or(&wanted).to_string();
        let me = membership
            .find(&wanted)
            .or_else(|| membership.find(&short))
            .map(|n| n.id)
            .with_context(|| {
                format!(
                    "this node ({wanted}) is not among the cluster's {} nodes from {}: pass --node NAME",
                    membership.nodes.len(),
                    membership.source
                )
            })?;
        let secret_path = cfg.resolved_cluster_secret_path();
        let secret = Secret::load(&secret_path)?;
        Ok(Setup {
            membership,
            me,
            secret,
            port: cfg.cluster.port,
            call_timeout: Duration::from_secs_f64(cfg.cluster.call_timeout_ms / 1e3),
            heartbeat: Duration::from_secs_f64(cfg.cluster.heartbeat_interval_ms / 1e3),
            transport: transport(cfg)?,
            remote_tier_bytes: cfg.cluster.remote_tier_bytes,
            files_at_owner: cfg.cluster.files_at_owner,
        })
    }

    fn endpoint(&self, id: NodeId) -> String {
        self.membership.nodes[id as usize].endpoint(self.port)
    }
}

/// The TLS files of `cfg` (`auto` resolved next to the secret).
pub fn tls_files(cfg: &Config) -> strata_net::tls::TlsFiles {
    let (cert, key, ca) = cfg.resolved_cluster_tls_files();
    strata_net::tls::TlsFiles { cert, key, ca }
}

/// The way daemons (and `strata cluster`) reach each other: TCP, with TLS
/// inside when `cluster.tls` is on (its files must exist and be valid: an
/// error names the file and what to do).
pub fn transport(cfg: &Config) -> anyhow::Result<Arc<dyn Transport>> {
    let tcp: Arc<dyn Transport> = Arc::new(strata_net::TcpTransport);
    if !cfg.cluster.tls {
        return Ok(tcp);
    }
    let tls = strata_net::tls::Tls::load(&tls_files(cfg)).context("cluster.tls is on")?;
    Ok(Arc::new(strata_net::tls::TlsTransport {
        inner: tcp,
        tls: Arc::new(tls),
    }))
}

/// `cluster start` with `cluster.tls` on and every TLS file `auto`: makes
/// the files when none exists (`true` then).
pub fn tls_for_start(cfg: &Config) -> anyhow::Result<bool> {
    let k = &cfg.cluster;
    if !k.tls || k.tls_cert.is_some() || k.tls_key.is_some() || k.tls_ca.is_some() {
        return Ok(false);
    }
    let (_, made) = strata_net::tls::load_or_generate(&tls_files(cfg))?;
    Ok(made)
}

/// Loads the secret at `path`, or writes a new one there (0600) when there
/// is none (`cluster start`).
pub fn secret_for_start(path: &Path) -> anyhow::Result<(Secret, bool)> {
    match Secret::load(path) {
        Ok(s) => Ok((s, false)),
        Err(strata_net::auth::SecretError::Read { error, .. })
            if error.kind() == std::io::ErrorKind::NotFound =>
        {
            let s = Secret::generate();
            s.save(path)?;
            Ok((s, true))
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, Clone)]
struct Peer {
    state: &'static str,
    last_seen: Option<Instant>,
    error: String,
    /// Heartbeat round trip, smoothed (the measured latency to the peer).
    rtt: Option<Duration>,
    /// The peer process's boot id (its last answer).
    boot_id: Option<u64>,
}

struct State {
    setup: Setup,
    digest: Vec<u8>,
    boot_id: u64,
    peers: Mutex<Vec<Peer>>,
    tx: Mutex<mpsc::Sender<Msg>>,
    shared: Arc<Shared>,
    /// The tiers' backends, for the bulk threads' reads and leased puts.
    tiers: Arc<strata_engine::tier::TierIo>,
    /// The RAM tier's index (the arena).
    ram: Option<usize>,
    /// Memory this node lends the others (served on the bulk threads).
    donations: strata_net::donate::Donations,
}

impl State {
    fn send(&self, m: Msg) -> Result<(), tonic::Status> {
        let tx = self
            .tx
            .lock()
            .map_err(|_| tonic::Status::internal("message channel poisoned"))?;
        tx.send(m)
            .map_err(|_| tonic::Status::unavailable("the daemon is stopping"))?;
        self.shared.msgs_pending.store(true, Ordering::SeqCst);
        self.shared.bell().ring();
        Ok(())
    }

    /// Asks the poller and waits for its answer (bounded by the call deadline).
    async fn ask<T: Send + 'static>(
        &self,
        make: impl FnOnce(mpsc::Sender<T>) -> Msg,
    ) -> Result<T, tonic::Status> {
        let (rtx, rrx) = mpsc::channel();
        self.send(make(rtx))?;
        let deadline = self.setup.call_timeout;
        tokio::task::spawn_blocking(move || rrx.recv_timeout(deadline))
            .await
            .map_err(|e| tonic::Status::internal(format!("waiting for the engine: {e}")))?
            .map_err(|_| tonic::Status::deadline_exceeded("the engine did not answer in time"))
    }

    fn peers_up(&self) -> u32 {
        let p = self.peers.lock().map(|p| p.clone()).unwrap_or_default();
        p.iter().filter(|x| x.state == "up").count() as u32
    }

    /// The status snapshot `strata status` shows.
    fn snapshot(&self) -> ClusterStatus {
        let peers = self.peers.lock().map(|p| p.clone()).unwrap_or_default();
        let m = &self.setup.membership;
        ClusterStatus {
            node: self.setup.me,
            name: m.nodes[self.setup.me as usize].name.clone(),
            address: self.setup.endpoint(self.setup.me),
            source: m.source.to_string(),
            tls: self.setup.transport.tls().is_some(),
            tls_relays: strata_net::tls::relays() as u64,
            peers: m
                .nodes
                .iter()
                .zip(peers)
                .map(|(n, p)| PeerStatus {
                    node: n.id,
                    name: n.name.clone(),
                    address: n.endpoint(self.setup.port),
                    state: p.state.to_string(),
                    last_seen_s: if n.id == self.setup.me {
                        Some(0.0)
                    } else {
                        p.last_seen.map(|t| t.elapsed().as_secs_f64())
                    },
                    error: p.error,
                    rtt_us: p.rtt.map(|d| d.as_secs_f64() * 1e6),
                    boot_id: if n.id == self.setup.me {
                        Some(self.boot_id)
                    } else {
                        p.boot_id
                    },
                })
                .collect(),
        }
    }

    fn publish(&self) {
        let snap = self.snapshot();
        if let Ok(mut c) = self.shared.cluster.lock() {
            *c = Some(snap);
        }
    }
}

struct Service(Arc<State>);

fn node_status(st: &State, s: &StatusReply) -> pb::NodeStatus {
    let me = st.setup.me;
    let snap = st.snapshot();
    pb::NodeStatus {
        node: me,
        name: snap.name,
        address: snap.address,
        boot_id: st.boot_id,
        tiers: s
            .tiers
            .iter()
            .map(|t| pb::TierUse {
                name: t.name.clone(),
                used_bytes: t.used_bytes,
                capacity_bytes: t.capacity_bytes,
            })
            .collect(),
        dirty_bytes: s.files.dirty_bytes,
        flush_lag_s: s.files.oldest_dirty_s,
        peers: snap
            .peers
            .iter()
            .map(|p| pb::PeerState {
                node: p.node,
                state: p.state.clone(),
                last_seen_s: p.last_seen_s.unwrap_or(-1.0),
                rtt_us: p.rtt_us.unwrap_or(-1.0),
            })
            .collect(),
        clients: s.clients as u32,
    }
}

/// A call only the owner of file `file` may make (`ShadowPush`,
/// `ShadowSync`): the caller is another node of this cluster and the file's
/// id carries the caller's node.
fn check_owner_call(st: &State, from_node: u32, file: u64) -> Result<(), tonic::Status> {
    if from_node as usize >= st.setup.membership.nodes.len()
        || from_node == st.setup.me
        || (file >> strata_meta::NODE_SHIFT) as u32 != from_node
    {
        return Err(tonic::Status::permission_denied(
            "only the file's owner, another node of this cluster, may ask this",
        ));
    }
    Ok(())
}

/// A call naming files of the callee from another node (`ShadowsGone`,
/// `ShadowsPending`, `ShadowsUnknown`): the caller is another node of this
/// cluster and names at most `SHADOWS_GONE_PER_CALL_MAX` files.
fn check_files_call(st: &State, from_node: u32, files: usize) -> Result<(), tonic::Status> {
    if from_node as usize >= st.setup.membership.nodes.len() || from_node == st.setup.me {
        return Err(tonic::Status::invalid_argument(
            "not another node of this cluster",
        ));
    }
    if files > SHADOWS_GONE_PER_CALL_MAX {
        return Err(tonic::Status::invalid_argument(format!(
            "{files} files in one call (at most {SHADOWS_GONE_PER_CALL_MAX})"
        )));
    }
    Ok(())
}

/// File ids grouped by the node that issued them (a file id carries its owner).
fn per_owner(files: Vec<u64>) -> std::collections::BTreeMap<u32, Vec<u64>> {
    let mut per_node: std::collections::BTreeMap<u32, Vec<u64>> = Default::default();
    for f in files {
        per_node
            .entry((f >> strata_meta::NODE_SHIFT) as u32)
            .or_default()
            .push(f);
    }
    per_node
}

#[tonic::async_trait]
impl pb::cluster_server::Cluster for Service {
    async fn hello(
        &self,
        r: tonic::Request<pb::HelloRequest>,
    ) -> Result<tonic::Response<pb::HelloReply>, tonic::Status> {
        let st = &self.0;
        let r = r.into_inner();
        if r.membership_digest != st.digest {
            tracing::warn!(
                from = r.from_name,
                "a node with another node list called: start every node with the same hosts"
            );
        }
        let me = &st.setup.membership.nodes[st.setup.me as usize];
        Ok(tonic::Response::new(pb::HelloReply {
            node: st.setup.me,
            name: me.name.clone(),
            membership_digest: st.digest.clone(),
            boot_id: st.boot_id,
            peers_up: st.peers_up(),
            peers_total: st.setup.membership.nodes.len() as u32,
        }))
    }

    async fn status(
        &self,
        _: tonic::Request<pb::StatusRequest>,
    ) -> Result<tonic::Response<pb::NodeStatus>, tonic::Status> {
        let s = self.0.ask(|reply| Msg::Status { reply }).await?;
        Ok(tonic::Response::new(node_status(&self.0, &s)))
    }

    async fn drain(
        &self,
        r: tonic::Request<pb::DrainRequest>,
    ) -> Result<tonic::Response<pb::DrainReply>, tonic::Status> {
        let st = &self.0;
        let wait =
            Duration::from_secs_f64(r.into_inner().wait_s.clamp(0.0, 1e9)).min(DRAIN_WAIT_MAX);
        let started = Instant::now();
        let mut f = st
            .ask(|reply| Msg::Flush {
                paths: Vec::new(),
                reply,
            })
            .await?;
        // Bounded by `wait`.
        loop {
            if f.drained() || f.only_failures_left() || started.elapsed() >= wait {
                let error = f
                    .errors
                    .iter()
                    .take(8)
                    .map(|e| format!("{}: {}", e.path, e.message))
                    .collect::<Vec<_>>()
                    .join("; ");
                return Ok(tonic::Response::new(pb::DrainReply {
                    done: f.drained(),
                    dirty_bytes: f.dirty_bytes,
                    error,
                }));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            f = st
                .ask(|reply| Msg::FlushState {
                    paths: Vec::new(),
                    reply,
                })
                .await?;
        }
    }

    async fn drain_status(
        &self,
        r: tonic::Request<pb::DrainStatusRequest>,
    ) -> Result<tonic::Response<pb::DrainStatusReply>, tonic::Status> {
        let paths = r.into_inner().paths;
        if paths.len() > FLUSH_PATHS_MAX {
            return Err(tonic::Status::invalid_argument(format!(
                "{} paths in one drain status (at most {FLUSH_PATHS_MAX})",
                paths.len()
            )));
        }
        let d = self
            .0
            .ask(|reply| Msg::DrainStatus { paths, reply })
            .await?;
        let json = serde_json::to_vec(&d)
            .map_err(|e| tonic::Status::internal(format!("drain status: {e}")))?;
        Ok(tonic::Response::new(pb::DrainStatusReply { json }))
    }

    async fn stage(
        &self,
        r: tonic::Request<pb::StageRequest>,
    ) -> Result<tonic::Response<pb::StageReply>, tonic::Status> {
        let r = r.into_inner();
        if r.paths.len() > FLUSH_PATHS_MAX {
            return Err(tonic::Status::invalid_argument(format!(
                "{} paths in one stage call (at most {FLUSH_PATHS_MAX})",
                r.paths.len()
            )));
        }
        let (paths, evict) = (r.paths, r.evict);
        let d = if r.out {
            self.0
                .ask(|reply| Msg::StageOut {
                    paths,
                    evict,
                    reply,
                })
                .await?
        } else {
            self.0.ask(|reply| Msg::StageState { paths, reply }).await?
        };
        let json =
            serde_json::to_vec(&d).map_err(|e| tonic::Status::internal(format!("stage: {e}")))?;
        Ok(tonic::Response::new(pb::StageReply { json }))
    }

    async fn shadows_gone(
        &self,
        r: tonic::Request<pb::ShadowsGoneRequest>,
    ) -> Result<tonic::Response<pb::ShadowsGoneReply>, tonic::Status> {
        let r = r.into_inner();
        let st = &self.0;
        check_files_call(st, r.from_node, r.files.len() + r.flushed.len())?;
        st.send(Msg::ShadowsGone {
            from: r.from_node,
            files: r.files,
            flushed: r
                .flushed
                .into_iter()
                .map(|f| (f.file, f.first_page, f.last_page))
                .collect(),
        })?;
        Ok(tonic::Response::new(pb::ShadowsGoneReply {}))
    }

    async fn shadow_push(
        &self,
        r: tonic::Request<pb::ShadowPushRequest>,
    ) -> Result<tonic::Response<pb::ShadowPushReply>, tonic::Status> {
        let r = r.into_inner();
        let st = self.0.clone();
        // Only the file's owner flushes it (a file id carries its owner).
        check_owner_call(&st, r.from_node, r.file)?;
        let pages: u64 = r
            .firsts
            .iter()
            .zip(&r.lasts)
            .map(|(a, b)| b.saturating_sub(*a).saturating_add(1))
            .fold(0u64, |t, n| t.saturating_add(n));
        if r.firsts.len() != r.lasts.len()
            || r.firsts.is_empty()
            || r.firsts.iter().zip(&r.lasts).any(|(a, b)| a > b)
            || pages > strata_engine::flush::PUSH_PAGES_MAX
        {
            return Err(tonic::Status::invalid_argument(format!(
                "page ranges: {} firsts, {} lasts, {pages} pages (at most {})",
                r.firsts.len(),
                r.lasts.len(),
                strata_engine::flush::PUSH_PAGES_MAX
            )));
        }
        let runs: Vec<(u64, u64)> = r.firsts.into_iter().zip(r.lasts).collect();
        let (file, me) = (r.file, st.setup.me);
        let taken = st.ask(|reply| Msg::PushTake { file, runs, reply }).await?;
        let (pages, pin, io) = taken.map_err(|e| match e {
            Errno::NoFile => tonic::Status::failed_precondition(format!(
                "node {me} lacks published pages of file {file:#x}: it restarted since they were written, and they are lost"
            )),
            e => tonic::Status::internal(format!("pages of file {file:#x} on node {me}: {e:?}")),
        })?;
        let (path, dest, sync) = (r.path, (r.dev, r.ino), r.sync);
        let wrote =
            tokio::task::spawn_blocking(move || io.push_pages(&path, dest, &pages, sync)).await;
        // The pages stay pinned until written (or given up).
        st.send(Msg::PushDone { pin })?;
        let bytes = wrote
            .map_err(|e| tonic::Status::internal(format!("writing pages: {e}")))?
            .map_err(|e| tonic::Status::unavailable(format!("node {me}: {e}")))?;
        Ok(tonic::Response::new(pb::ShadowPushReply { bytes }))
    }

    async fn shadows_pending(
        &self,
        r: tonic::Request<pb::ShadowsPendingRequest>,
    ) -> Result<tonic::Response<pb::ShadowsPendingReply>, tonic::Status> {
        let r = r.into_inner();
        let st = &self.0;
        check_files_call(st, r.from_node, r.files.len())?;
        let holder = r.from_node;
        let (pending, error) = st
            .ask(|reply| Msg::ShadowsPending {
                holder,
                files: r.files,
                reply,
            })
            .await?;
        Ok(tonic::Response::new(pb::ShadowsPendingReply {
            pending,
            error,
        }))
    }

    async fn shadow_sync(
        &self,
        r: tonic::Request<pb::ShadowSyncRequest>,
    ) -> Result<tonic::Response<pb::ShadowSyncReply>, tonic::Status> {
        let r = r.into_inner();
        let st = self.0.clone();
        // Only the file's owner asks (a file id carries its owner).
        check_owner_call(&st, r.from_node, r.file)?;
        let (file, me) = (r.file, st.setup.me);
        let started = std::time::Instant::now();
        let (shadow, target) = st
            .ask(|reply| Msg::ShadowSync { file, reply })
            .await?
            .map_err(|e| match e {
                Errno::NoFile => tonic::Status::failed_precondition(format!(
                    "node {me} has no pages of file {file:#x} (restarted since they were written?)"
                )),
                Errno::NotDurable => tonic::Status::failed_precondition(format!(
                    "node {me} has no journal on a non-volatile tier for its pages of file {file:#x}"
                )),
                e => tonic::Status::internal(format!("pages of file {file:#x} on node {me}: {e:?}")),
            })?;
        if target == 0 {
            return Ok(tonic::Response::new(pb::ShadowSyncReply {}));
        }
        let mut sleep = Duration::from_millis(1);
        // Bounded by the longest call deadline (the caller's ends it sooner).
        loop {
            let s = st
                .ask(|reply| Msg::ShadowSyncState {
                    shadow,
                    target,
                    reply,
                })
                .await?
                .map_err(|e| tonic::Status::internal(format!("node {me}: {e:?}")))?;
            if s.done {
                break;
            }
            if let Some(e) = s.error {
                return Err(tonic::Status::unavailable(format!("node {me}: {e}")));
            }
            if started.elapsed() > rpc::LONG_CALL_DEADLINE {
                return Err(tonic::Status::deadline_exceeded(format!(
                    "node {me}: its journal did not take the pages in time"
                )));
            }
            tokio::time::sleep(sleep).await;
            sleep = (sleep * 2).min(Duration::from_millis(20));
        }
        Ok(tonic::Response::new(pb::ShadowSyncReply {}))
    }

    async fn shadows_unknown(
        &self,
        r: tonic::Request<pb::ShadowsUnknownRequest>,
    ) -> Result<tonic::Response<pb::ShadowsUnknownReply>, tonic::Status> {
        let r = r.into_inner();
        let st = &self.0;
        check_files_call(st, r.from_node, r.files.len())?;
        // Only ids this node issued (a file id carries its owner).
        let me = st.setup.me;
        let files: Vec<u64> = r
            .files
            .into_iter()
            .filter(|f| (f >> strata_meta::NODE_SHIFT) as u32 == me)
            .collect();
        let unknown = st.ask(|reply| Msg::ShadowsUnknown { files, reply }).await?;
        Ok(tonic::Response::new(pb::ShadowsUnknownReply { unknown }))
    }

    async fn client_gone(
        &self,
        r: tonic::Request<pb::ClientGoneRequest>,
    ) -> Result<tonic::Response<pb::ClientGoneReply>, tonic::Status> {
        let r = r.into_inner();
        let st = &self.0;
        if r.from_node as usize >= st.setup.membership.nodes.len() || r.from_node == st.setup.me {
            return Err(tonic::Status::invalid_argument(
                "not another node of this cluster",
            ));
        }
        st.send(Msg::RemoteClientGone {
            holder: crate::server::remote_holder(r.from_node, r.client),
        })?;
        Ok(tonic::Response::new(pb::ClientGoneReply {}))
    }

    async fn flush(
        &self,
        r: tonic::Request<pb::FlushRequest>,
    ) -> Result<tonic::Response<pb::FlushState>, tonic::Status> {
        let r = r.into_inner();
        if r.paths.len() > FLUSH_PATHS_MAX {
            return Err(tonic::Status::invalid_argument(format!(
                "{} paths in one flush (at most {FLUSH_PATHS_MAX})",
                r.paths.len()
            )));
        }
        let paths = r.paths;
        let f = if r.request {
            self.0.ask(|reply| Msg::Flush { paths, reply }).await?
        } else {
            self.0.ask(|reply| Msg::FlushState { paths, reply }).await?
        };
        Ok(tonic::Response::new(pb::FlushState {
            dirty_files: f.dirty_files,
            dirty_bytes: f.dirty_bytes,
            flushing_files: f.flushing_files,
            flushed_bytes_total: f.flushed_bytes_total,
            errors: f
                .errors
                .into_iter()
                .take(FLUSH_ERRORS_MAX)
                .map(|e| pb::FlushError {
                    path: e.path,
                    message: e.message,
                })
                .collect(),
        }))
    }

    async fn stop(
        &self,
        _: tonic::Request<pb::StopRequest>,
    ) -> Result<tonic::Response<pb::StopReply>, tonic::Status> {
        tracing::info!("stop asked by the cluster");
        // The daemon's stop drains every buffered file first.
        self.0.shared.shutdown.store(true, Ordering::SeqCst);
        self.0.shared.bell().ring();
        Ok(tonic::Response::new(pb::StopReply {}))
    }
}

/// One heartbeat to peer `id`: its new state.
/// One heartbeat: the round trip of the `Hello` call (connecting excluded).
async fn beat(
    st: &State,
    id: NodeId,
    client: &mut Option<rpc::Client>,
) -> Result<(Duration, u64), String> {
    let s = &st.setup;
    if client.is_none() {
        *client = Some(
            rpc::connect(
                s.transport.clone(),
                &s.endpoint(id),
                &s.secret,
                s.call_timeout,
            )
            .await
            .map_err(|e| e.to_string())?,
        );
    }
    let c = client.as_mut().expect("connected above");
    let me = &s.membership.nodes[s.me as usize];
    let started = Instant::now();
    let r = c
        .hello(pb::HelloRequest {
            from_node: s.me,
            from_name: me.name.clone(),
            membership_digest: st.digest.clone(),
        })
        .await
        .map_err(|e| {
            *client = None;
            format!("{}: {}", e.code(), e.message())
        })?
        .into_inner();
    if r.membership_digest != st.digest {
        return Err(format!(
            "mismatch: {} has another node list (start every node with the same hosts)",
            r.name
        ));
    }
    if r.node != id {
        return Err(format!(
            "mismatch: node {id}'s address answers as node {}",
            r.node
        ));
    }
    Ok((started.elapsed(), r.boot_id))
}

async fn heartbeats(st: Arc<State>) {
    let n = st.setup.membership.nodes.len();
    let me = st.setup.me as usize;
    let clients: Vec<Arc<tokio::sync::Mutex<Option<rpc::Client>>>> =
        (0..n).map(|_| Arc::default()).collect();
    let fanout = Arc::new(tokio::sync::Semaphore::new(HEARTBEAT_FANOUT_MAX));
    let mut tick = tokio::time::interval(st.setup.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Bounded: one round per heartbeat until the runtime stops.
    loop {
        tick.tick().await;
        let mut set = tokio::task::JoinSet::new();
        for (id, client) in clients.iter().enumerate() {
            if id == me {
                continue;
            }
            let (st, client, fanout) = (st.clone(), client.clone(), fanout.clone());
            set.spawn(async move {
                let _permit = fanout.acquire().await;
                // One beat at a time per peer; a beat never outlives the deadline.
                let Ok(mut c) = client.try_lock() else { return };
                let res =
                    tokio::time::timeout(st.setup.call_timeout, beat(&st, id as NodeId, &mut c))
                        .await
                        .unwrap_or_else(|_| {
                            *c = None;
                            Err(format!("no answer within {:?}", st.setup.call_timeout))
                        });
                if let Ok(mut peers) = st.peers.lock() {
                    let p = &mut peers[id];
                    match res {
                        Ok((rtt, boot)) => {
                            if p.boot_id.is_some_and(|b| b != boot) {
                                tracing::warn!(
                                    node = id,
                                    "cluster peer restarted (another boot id)"
                                );
                            }
                            p.boot_id = Some(boot);
                            if p.state != "up" {
                                tracing::info!(node = id, "cluster peer up");
                            }
                            // Smoothed as TCP does (7/8 old, 1/8 new).
                            p.rtt = Some(p.rtt.map_or(rtt, |old| (old * 7 + rtt) / 8));
                            p.state = "up";
                            p.last_seen = Some(Instant::now());
                            p.error.clear();
                        }
                        Err(e) => {
                            let expired = p
                                .last_seen
                                .is_none_or(|t| t.elapsed() >= st.setup.call_timeout);
                            let state = if e.starts_with("mismatch") {
                                "mismatch"
                            } else if p.last_seen.is_none() {
                                "starting"
                            } else if expired {
                                "down"
                            } else {
                                p.state
                            };
                            if state != p.state && state != "starting" {
                                tracing::warn!(node = id, "cluster peer {state}: {e}");
                            }
                            p.state = state;
                            p.error = e;
                        }
                    }
                }
            });
        }
        while set.join_next().await.is_some() {}
        st.publish();
    }
}

/// Opens bulk connections to other nodes for this daemon's clients, and
/// asks the others for their flush state.
struct Dialer {
    state: Arc<State>,
    stopped: std::sync::atomic::AtomicBool,
    /// The cluster runtime (control-socket threads call peers through it).
    rt: tokio::runtime::Handle,
    /// The nodes each local client asked a bulk connection to (≤
    /// `DIALED_CLIENTS_MAX` clients).
    dialed: Mutex<std::collections::HashMap<u64, std::collections::BTreeSet<NodeId>>>,
}

impl Peers for Dialer {
    fn bulk_dial(&self, node: u32, client: u64) -> Result<BulkConn, (Errno, String)> {
        let s = &self.state.setup;
        if node as usize >= s.membership.nodes.len() || node == s.me {
            return Err((
                Errno::Inval,
                format!("node {node}: not another node of this cluster"),
            ));
        }
        if self.stopped.load(Ordering::SeqCst) {
            return Err((Errno::Shutdown, "the daemon is stopping".into()));
        }
        let nd = &s.membership.nodes[node as usize];
        let address = strata_net::bulk::bulk_endpoint(&s.endpoint(node))
            .map_err(|e| (Errno::Inval, e.to_string()))?;
        if client != 0 {
            // Remembered so its holds there end with it (`client_gone`).
            if let Ok(mut d) = self.dialed.lock() {
                if d.len() < DIALED_CLIENTS_MAX || d.contains_key(&client) {
                    d.entry(client).or_default().insert(node);
                }
            }
        }
        let stream = strata_net::bulk::dial_for(
            s.transport.as_ref(),
            &address,
            s.me,
            client,
            &s.secret,
            s.call_timeout,
        )
        .map_err(|e| {
            (
                Errno::NodeDown,
                format!(
                    "node {node} ({}, {address}) is down or unreachable: {e}",
                    nd.name
                ),
            )
        })?;
        Ok(BulkConn {
            stream,
            name: nd.name.clone(),
            address,
            timeout: s.call_timeout,
        })
    }

    fn lent(&self, node: u32) -> Option<(u32, u64, std::fs::File)> {
        self.state.donations.lent_to(node)
    }

    fn push_pages(
        &self,
        holder: u32,
        file: u64,
        path: &str,
        dest: (u64, u64),
        runs: &[(u64, u64)],
        sync: bool,
    ) -> Result<u64, String> {
        let st = self.state.clone();
        if holder as usize >= st.setup.membership.nodes.len() || holder == st.setup.me {
            return Err(format!("node {holder}: not another node of this cluster"));
        }
        if self.stopped.load(Ordering::SeqCst) {
            return Err("the daemon's cluster side has stopped".into());
        }
        let req = pb::ShadowPushRequest {
            from_node: st.setup.me,
            file,
            path: path.to_string(),
            dev: dest.0,
            ino: dest.1,
            firsts: runs.iter().map(|r| r.0).collect(),
            lasts: runs.iter().map(|r| r.1).collect(),
            sync,
        };
        // A flusher thread, not the runtime's: it may wait here.
        let deadline = st.setup.call_timeout.max(PUSH_DEADLINE);
        self.rt.block_on(call_node_within(
            &st,
            holder,
            deadline,
            |mut c| async move {
                let r = c.shadow_push(req).await.map_err(status_text)?;
                Ok(r.into_inner().bytes)
            },
        ))
    }

    fn shadows_pending(
        &self,
        files: Vec<u64>,
    ) -> Option<mpsc::Receiver<Result<(u32, String), String>>> {
        if self.stopped.load(Ordering::SeqCst) {
            return None;
        }
        let per_node = per_owner(files);
        let (tx, rx) = mpsc::channel();
        let st = self.state.clone();
        self.rt.spawn(async move {
            let me = st.setup.me;
            let (mut pending, mut errors) = (0u32, Vec::new());
            for (n, files) in per_node {
                if n as usize >= st.setup.membership.nodes.len() || n == me {
                    continue;
                }
                for part in files.chunks(SHADOWS_GONE_PER_CALL_MAX) {
                    let files = part.to_vec();
                    let r = call_node(&st, n, |mut c| async move {
                        let r = c
                            .shadows_pending(pb::ShadowsPendingRequest {
                                from_node: me,
                                files,
                            })
                            .await
                            .map_err(status_text)?;
                        Ok(r.into_inner())
                    })
                    .await;
                    match r {
                        Ok(r) => {
                            pending += r.pending;
                            if !r.error.is_empty() {
                                errors.push(r.error);
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
            }
            let _ = tx.send(Ok((pending, errors.join("; "))));
        });
        Some(rx)
    }

    fn held_sync(
        &self,
        file: u64,
        holders: Vec<u32>,
    ) -> Option<mpsc::Receiver<Result<(), String>>> {
        if self.stopped.load(Ordering::SeqCst) {
            return None;
        }
        let (tx, rx) = mpsc::channel();
        let st = self.state.clone();
        self.rt.spawn(async move {
            let me = st.setup.me;
            let deadline = st.setup.call_timeout.max(PUSH_DEADLINE);
            // All holders at once (≤ the cluster's nodes).
            let mut calls = tokio::task::JoinSet::new();
            for n in holders {
                let st = st.clone();
                calls.spawn(async move {
                    if n as usize >= st.setup.membership.nodes.len() || n == me {
                        return Err(format!("node {n}: not another node of this cluster"));
                    }
                    call_node_within(&st, n, deadline, |mut c| async move {
                        c.shadow_sync(pb::ShadowSyncRequest {
                            from_node: me,
                            file,
                        })
                        .await
                        .map_err(status_text)?;
                        Ok(())
                    })
                    .await
                });
            }
            let mut r = Ok(());
            // Bounded: one answer per holder.
            while let Some(done) = calls.join_next().await {
                let one = done
                    .map_err(|e| format!("a held sync call failed: {e}"))
                    .and_then(|x| x);
                if r.is_ok() {
                    r = one;
                }
            }
            let _ = tx.send(r);
        });
        Some(rx)
    }

    fn shadows_unknown(&self, files: Vec<u64>) -> Option<mpsc::Receiver<Vec<u64>>> {
        if self.stopped.load(Ordering::SeqCst) {
            return None;
        }
        let per_node = per_owner(files);
        let (tx, rx) = mpsc::channel();
        let st = self.state.clone();
        self.rt.spawn(async move {
            let me = st.setup.me;
            let mut unknown = Vec::new();
            for (n, files) in per_node {
                if n as usize >= st.setup.membership.nodes.len() || n == me {
                    continue;
                }
                for part in files.chunks(SHADOWS_GONE_PER_CALL_MAX) {
                    let files = part.to_vec();
                    let asked: std::collections::HashSet<u64> = files.iter().copied().collect();
                    let r = call_node(&st, n, |mut c| async move {
                        let r = c
                            .shadows_unknown(pb::ShadowsUnknownRequest {
                                from_node: me,
                                files,
                            })
                            .await
                            .map_err(status_text)?;
                        Ok(r.into_inner().unknown)
                    })
                    .await;
                    match r {
                        // (only ids asked: an answer names nothing else)
                        Ok(u) => unknown.extend(u.into_iter().filter(|f| asked.contains(f))),
                        Err(e) => {
                            // keeps them: a down owner may come back
                            tracing::debug!(node = n, "shadow sweep not answered: {e}");
                            break;
                        }
                    }
                }
            }
            let _ = tx.send(unknown);
        });
        Some(rx)
    }

    fn client_gone(&self, client: u64) {
        let Some(nodes) = self.dialed.lock().ok().and_then(|mut d| d.remove(&client)) else {
            return;
        };
        let st = self.state.clone();
        // In the background: a node that does not answer keeps the holds
        // until it restarts (never data, only an orphan's lifetime).
        self.rt.spawn(async move {
            for n in nodes {
                let me = st.setup.me;
                let told = call_node(&st, n, |mut c| async move {
                    c.client_gone(pb::ClientGoneRequest {
                        from_node: me,
                        client,
                    })
                    .await
                    .map_err(status_text)
                })
                .await;
                if let Err(e) = told {
                    tracing::debug!(node = n, client, "client-gone not told: {e}");
                }
            }
        });
    }

    fn shadows_gone(&self, notices: Vec<(u32, u64)>) {
        let mut per_node: std::collections::BTreeMap<u32, Vec<u64>> = Default::default();
        for (n, f) in notices {
            per_node.entry(n).or_default().push(f);
        }
        let st = self.state.clone();
        // In the background: a node that does not answer keeps its shadows
        // until its next sweep asks (space, never data: nothing reads them).
        self.rt.spawn(async move {
            let me = st.setup.me;
            for (n, files) in per_node {
                for part in files.chunks(SHADOWS_GONE_PER_CALL_MAX) {
                    let files = part.to_vec();
                    let told = call_node(&st, n, |mut c| {
                        let files = files.clone();
                        async move {
                            c.shadows_gone(pb::ShadowsGoneRequest {
                                from_node: me,
                                files,
                                flushed: Vec::new(),
                            })
                            .await
                            .map_err(status_text)
                        }
                    })
                    .await;
                    if let Err(e) = told {
                        tracing::debug!(node = n, "shadows-gone not told: {e}");
                    }
                }
            }
        });
    }

    fn shadows_flushed(&self, notices: Vec<(u32, u64, u64, u64)>) {
        let mut per_node: std::collections::BTreeMap<u32, Vec<pb::FlushedPages>> =
            Default::default();
        for (n, file, first_page, last_page) in notices {
            per_node.entry(n).or_default().push(pb::FlushedPages {
                file,
                first_page,
                last_page,
            });
        }
        let st = self.state.clone();
        // In the background: a node not told keeps those pages (dirty,
        // never evicted) until the file goes — space, never data.
        self.rt.spawn(async move {
            let me = st.setup.me;
            for (n, flushed) in per_node {
                for part in flushed.chunks(SHADOWS_GONE_PER_CALL_MAX) {
                    let flushed = part.to_vec();
                    let told = call_node(&st, n, |mut c| {
                        let flushed = flushed.clone();
                        async move {
                            c.shadows_gone(pb::ShadowsGoneRequest {
                                from_node: me,
                                files: Vec::new(),
                                flushed,
                            })
                            .await
                            .map_err(status_text)
                        }
                    })
                    .await;
                    if let Err(e) = told {
                        tracing::debug!(node = n, "shadows-flushed not told: {e}");
                    }
                }
            }
        });
    }

    fn drain_others(
        &self,
        paths: &[String],
    ) -> Vec<Result<strata_proto::control::DrainReply, String>> {
        let req = pb::DrainStatusRequest {
            paths: paths.to_vec(),
        };
        self.ask_others(paths.len(), move |mut c| {
            let req = req.clone();
            async move {
                let r = c.drain_status(req).await.map_err(status_text)?.into_inner();
                serde_json::from_slice(&r.json).map_err(|e| format!("unreadable answer: {e}"))
            }
        })
    }

    fn stage_others(
        &self,
        paths: &[String],
        out: bool,
        evict: bool,
    ) -> Vec<Result<strata_proto::control::StageReply, String>> {
        let req = pb::StageRequest {
            paths: paths.to_vec(),
            out,
            evict,
        };
        self.ask_others(paths.len(), move |mut c| {
            let req = req.clone();
            async move {
                let r = c.stage(req).await.map_err(status_text)?.into_inner();
                serde_json::from_slice(&r.json).map_err(|e| format!("unreadable answer: {e}"))
            }
        })
    }

    fn flush_others(
        &self,
        paths: &[String],
        request: bool,
    ) -> Vec<Result<strata_proto::control::FlushReply, String>> {
        let req = pb::FlushRequest {
            paths: paths.to_vec(),
            request,
        };
        self.ask_others(paths.len(), move |mut c| {
            let req = req.clone();
            async move {
                let r = c.flush(req).await.map_err(status_text)?.into_inner();
                Ok(strata_proto::control::FlushReply {
                    dirty_files: r.dirty_files,
                    dirty_bytes: r.dirty_bytes,
                    flushing_files: r.flushing_files,
                    flushed_bytes_total: r.flushed_bytes_total,
                    errors: r
                        .errors
                        .into_iter()
                        .map(|e| strata_proto::control::FlushError {
                            path: e.path,
                            message: e.message,
                        })
                        .collect(),
                })
            }
        })
    }
}

impl Dialer {
    /// With files at their path's owner: `call` on every other node at once
    /// (≤ NODES_MAX), each connection and call within the call deadline, in
    /// node order; a node that does not answer is an `Err` naming it. Empty
    /// when files stay with their node (or the daemon is stopping);
    /// `paths_len` over `FLUSH_PATHS_MAX` is one `Err`.
    fn ask_others<T, F, Fut>(&self, paths_len: usize, call: F) -> Vec<Result<T, String>>
    where
        T: Send + 'static,
        F: Fn(rpc::Client) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = Result<T, String>> + Send,
    {
        let st = self.state.clone();
        let s = &st.setup;
        if !s.files_at_owner || self.stopped.load(Ordering::SeqCst) {
            return Vec::new();
        }
        if paths_len > FLUSH_PATHS_MAX {
            return vec![Err(format!(
                "{paths_len} paths in one call (at most {FLUSH_PATHS_MAX})"
            ))];
        }
        let others: Vec<NodeId> = (0..s.membership.nodes.len() as NodeId)
            .filter(|&n| n != s.me)
            .collect();
        self.rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for (i, &n) in others.iter().enumerate() {
                let (st, call) = (st.clone(), call.clone());
                set.spawn(async move { (i, call_node(&st, n, call).await) });
            }
            let mut out: Vec<Result<T, String>> =
                (0..others.len()).map(|_| Err(String::new())).collect();
            while let Some(r) = set.join_next().await {
                if let Ok((i, r)) = r {
                    out[i] = r;
                }
            }
            out
        })
    }
}

/// A tonic status as one line.
fn status_text(e: tonic::Status) -> String {
    format!("{}: {}", e.code(), e.message())
}

/// `call` on a new connection to node `n`: an error naming the node when it
/// does not answer within the call deadline.
async fn call_node<T, F, Fut>(st: &State, n: NodeId, call: F) -> Result<T, String>
where
    F: FnOnce(rpc::Client) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    call_node_within(st, n, st.setup.call_timeout, call).await
}

/// `call_node` with a deadline of its own for the call (connecting keeps
/// the cluster's): a call that does destination I/O on the node.
async fn call_node_within<T, F, Fut>(
    st: &State,
    n: NodeId,
    deadline: Duration,
    call: F,
) -> Result<T, String>
where
    F: FnOnce(rpc::Client) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let s = &st.setup;
    let nd = &s.membership.nodes[n as usize];
    let down = |e: String| {
        format!(
            "node {n} ({}, {}) holds files here and did not answer: {e}",
            nd.name,
            s.endpoint(n)
        )
    };
    // Err(Ok(e)): no connection; Err(Err(e)): the node answered an error.
    let attempt = async {
        let c = rpc::connect_for(
            s.transport.clone(),
            &s.endpoint(n),
            &s.secret,
            s.call_timeout,
            deadline,
        )
        .await
        .map_err(|e| Ok(e.to_string()))?;
        call(c).await.map_err(Err)
    };
    match tokio::time::timeout(deadline, attempt).await {
        Err(_) => Err(down(format!("no answer within {deadline:?}"))),
        Ok(Ok(v)) => Ok(v),
        Ok(Err(Ok(e))) => Err(down(e)),
        Ok(Err(Err(e))) => Err(format!("node {n} ({}) answered: {e}", nd.name)),
    }
}

/// The running cluster side; [`Handle::stop`] ends it.
pub struct Handle {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    dialer: Arc<Dialer>,
    bulk: Option<bulk::Listening>,
}

impl Handle {
    pub fn stop(mut self) {
        self.dialer.stopped.store(true, Ordering::SeqCst);
        if let Some(b) = self.bulk.take() {
            b.stop();
        }
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the cluster side: listens on this node's address (an error now,
/// e.g. an address in use, fails the daemon's start) and serves until
/// [`Handle::stop`].
pub fn start(
    setup: Setup,
    tx: mpsc::Sender<Msg>,
    shared: Arc<Shared>,
    tiers: strata_engine::tier::TierIo,
    ram: Option<usize>,
) -> anyhow::Result<Handle> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("strata-cluster")
        .enable_all()
        .build()
        .context("cannot start the cluster runtime")?;
    let addr = setup.endpoint(setup.me);
    let listener = rt
        .block_on(setup.transport.listen(&addr))
        .with_context(|| format!("cannot listen on the cluster address {addr}"))?;
    let n = setup.membership.nodes.len();
    let mut peers = vec![
        Peer {
            state: "starting",
            last_seen: None,
            error: String::new(),
            rtt: None,
            boot_id: None,
        };
        n
    ];
    peers[setup.me as usize] = Peer {
        state: "up",
        last_seen: Some(Instant::now()),
        error: String::new(),
        rtt: None,
        boot_id: None,
    };
    let boot_id = {
        use rand::RngCore;
        rand::rng().next_u64()
    };
    let setup_remote_bytes = setup.remote_tier_bytes;
    let state = Arc::new(State {
        digest: setup.membership.digest(setup.port).to_vec(),
        boot_id,
        peers: Mutex::new(peers),
        tx: Mutex::new(tx),
        shared,
        setup,
        tiers: Arc::new(tiers),
        ram,
        donations: strata_net::donate::Donations::new(setup_remote_bytes, boot_id),
    });
    state.publish();
    let bulk_addr = strata_net::bulk::bulk_endpoint(&addr)?;
    let bulk = bulk::listen(state.clone(), &bulk_addr)?;
    let dialer = Arc::new(Dialer {
        state: state.clone(),
        stopped: std::sync::atomic::AtomicBool::new(false),
        rt: rt.handle().clone(),
        dialed: Mutex::new(Default::default()),
    });
    let _ = state.shared.peers.set(dialer.clone());
    tracing::info!(
        node = state.setup.me,
        address = addr,
        bulk = bulk_addr,
        nodes = n,
        source = %state.setup.membership.source,
        "cluster service listening"
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("strata-cluster".into())
        .spawn(move || {
            rt.block_on(async move {
                let beats = tokio::spawn(heartbeats(state.clone()));
                let s = &state.setup;
                let quit = Arc::new(tokio::sync::Notify::new());
                let q = quit.clone();
                let mut server = tokio::spawn(rpc::serve(
                    listener,
                    s.secret.clone(),
                    s.call_timeout,
                    s.call_timeout.max(DRAIN_WAIT_MAX),
                    Service(state.clone()),
                    async move { q.notified().await },
                ));
                let res = tokio::select! {
                    r = &mut server => Some(r),
                    _ = stop_rx => {
                        // A graceful end waits for every connection to close,
                        // and live peers keep theirs open: bounded.
                        quit.notify_one();
                        tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await.ok()
                    }
                };
                beats.abort();
                server.abort();
                match res {
                    Some(Ok(Err(e))) => {
                        tracing::error!("cluster service ended: {}", rpc::error_chain(&e))
                    }
                    Some(Err(e)) if e.is_panic() => tracing::error!("cluster service panicked"),
                    _ => {}
                }
            });
            rt.shutdown_timeout(Duration::from_secs(1));
        })
        .context("cannot spawn the cluster thread")?;
    Ok(Handle {
        stop: Some(stop_tx),
        thread: Some(thread),
        dialer,
        bulk: Some(bulk),
    })
}
