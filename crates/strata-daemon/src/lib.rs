//! strata-daemon: the per-node, per-user daemon — a shell around the
//! engine (`strata-engine`: tiers, metadata, placement, leases and pins,
//! the file model, the background services). It builds the engine from the
//! configuration, serves clients over shared-memory rings (`server.rs`: the
//! poller decodes a slot, calls `Engine::execute`, encodes the reply) and
//! answers the control socket.
//!
//! Threads: the **poller** (runs `server::Poller`, owns the `Engine`; the
//! only thread that touches metadata or tier allocators) and the **control
//! plane** (accept loop plus one small thread per connection). Signals
//! (SIGTERM/SIGINT) and `strata daemon stop` set a flag the poller checks.
//!
//! **Architecture Invariant:** all metadata mutation happens on the poller
//! thread, in request order per channel; control threads only pass
//! messages. Nothing a client writes to shared memory is trusted: requests
//! are copied, validated, and answered with `Errno::Malformed`.
//!
//! **API Boundary:** no client library here (see `strata-client`), no CLI.
//!
//! ## Shutdown
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! **Shutdown.** SIGTERM/SIGINT/`daemon stop` set a flag; the poller finishes the current
//! round, publishes `DAEMON_STOPPING` in the control segment (waiting clients fail with
//! `NoDaemon`), disconnects clients, drains every dirty DEFAULT file to its destination, and
//! syncs the journal (DEFAULT files are now clean, so only WORKFLOW files and native blobs on
//! non-volatile tiers remain in it), and removes its socket and shared memory. Dir tier files
//! and the journal stay: the next daemon on the same tiers restores them.

pub mod cluster;
pub mod get_index;
pub mod identity;
pub mod logging;
pub mod metrics;
pub mod read_ahead;
pub mod server;
pub mod stat_index;

/// The engine's modules the CLI reaches by their old paths.
pub use strata_engine::{drain, trace};

use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use anyhow::{bail, Context};
use strata_alloc::ExtentAllocator;
use strata_config::{Config, DeviceKind};
use strata_meta::{Limits, MetaStore};
use strata_place::Policy;
use strata_proto::control::HelloReply;
use strata_shm::ShmSegment;
use strata_transport_shm::layout::{self, CtlHeader};
use strata_transport_shm::PROTOCOL_VERSION;

use crate::server::{HelloTemplate, Poller, Shared};
use strata_engine::core::Core;
use strata_engine::tier::{Arena, DirTier, Tier, TierBackend, Tiers};
use strata_engine::{flush, journal, jpoller, jreplay, organizer, prefetch, stash, Done, Engine};

/// Staging reserve of the arena (leases when the RAM tier is full).
pub fn staging_bytes(cfg: &Config) -> u64 {
    (cfg.placement.lease_size_bytes * 8).max(64 << 20)
}

fn build_tiers(cfg: &Config, shm_prefix: &str) -> anyhow::Result<Tiers> {
    let ram = cfg.devices.iter().position(|d| d.kind == DeviceKind::Ram);
    let ram_bytes = ram.map(|i| cfg.devices[i].capacity_bytes).unwrap_or(0);
    let block = ram.map(|i| cfg.devices[i].block_size_bytes).unwrap_or(64);
    let arena_bytes = (ram_bytes + staging_bytes(cfg)).div_ceil(block) * block;
    // Check /dev/shm can hold the arena before we promise it.
    if let Ok(st) = rustix::fs::statvfs("/dev/shm") {
        let free = st.f_bavail * st.f_frsize;
        if ram_bytes > free {
            bail!(
                "devices[{}].capacity: the RAM tier wants {} but /dev/shm has only {} free; lower the capacity",
                ram.unwrap_or(0),
                strata_config::format_size(ram_bytes),
                strata_config::format_size(free)
            );
        }
    }
    let arena_name = format!("{shm_prefix}-arena");
    let seg = ShmSegment::create_or_replace(&arena_name, arena_bytes as usize)
        .with_context(|| format!("cannot create shared-memory arena /dev/shm/{arena_name}"))?;
    // Only reserved pages are handed out (item 7 of issue 12: a page of a
    // sparse /dev/shm file that cannot be allocated is SIGBUS in whoever
    // touches it). The staging reserve and a first chunk are reserved now;
    // the reserver thread keeps ahead of use; a full /dev/shm makes the RAM
    // tier smaller (writes spill), never a signal.
    let first =
        ((staging_bytes(cfg) + ARENA_RESERVE_FIRST_BYTES).div_ceil(block) * block).min(arena_bytes);
    let reserved = match seg.reserve(0..first as usize) {
        Ok(()) => first,
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            tracing::warn!("/dev/shm cannot reserve pages ({e}): the arena is not reserved, a full /dev/shm may end in SIGBUS");
            arena_bytes
        }
        Err(e) => bail!(
            "cannot reserve {} of shared memory for the arena (/dev/shm/{arena_name}): {e}; free space in /dev/shm or lower the RAM tier's capacity",
            strata_config::format_size(first)
        ),
    };
    let arena = Arena::new(seg, ExtentAllocator::new(reserved, block));
    let mut tiers = Vec::new();
    for (i, d) in cfg.devices.iter().enumerate() {
        let (backend, lock, alloc): (Arc<dyn TierBackend>, _, _) = match d.kind {
            DeviceKind::Ram => (arena.backend(), None, None),
            DeviceKind::Dir => {
                let dir = d.path.as_ref().context("dir device without path")?;
                let (tier, lock) = DirTier::create(&d.name, dir, d.capacity_bytes)?;
                (
                    Arc::new(tier),
                    Some(lock),
                    Some(ExtentAllocator::new(d.capacity_bytes, d.block_size_bytes)),
                )
            }
        };
        tiers.push(Tier {
            index: i,
            name: d.name.clone(),
            backend,
            lock,
            alloc,
            capacity_bytes: d.capacity_bytes,
            block_bytes: d.block_size_bytes,
            bandwidth_mib_s: d.bandwidth_mib_s,
            latency_us: d.latency_us,
            volatile: d.volatile,
            blob_bytes: 0,
            blob_extents: 0,
            remote: None,
            lost_blobs: 0,
        });
    }
    Ok(Tiers {
        tiers,
        arena,
        ram,
        remote_due_ns: 0,
    })
}

/// Block size of remote tiers' allocators.
const REMOTE_TIER_BLOCK_BYTES: u64 = 4096;
/// A remote tier's assumed bandwidth and latency until its link measured them.
const REMOTE_TIER_BANDWIDTH_MIB_S: f64 = 1000.0;
const REMOTE_TIER_LATENCY_US: f64 = 100.0;

/// One remote tier per other node (`cluster.remote_tier` bytes each, 0:
/// none), after the local tiers: memory those nodes lend this one when its
/// own tiers are full (`strata_net::donate`, `strata_engine::remote`).
fn add_remote_tiers(core: &mut Core, c: &cluster::Setup, shared: &Arc<Shared>) {
    if c.remote_tier_bytes == 0 {
        return;
    }
    for n in &c.membership.nodes {
        if n.id == c.me {
            continue;
        }
        let Ok(address) = strata_net::bulk::bulk_endpoint(&n.endpoint(c.port)) else {
            tracing::warn!(
                node = n.id,
                "no bulk address for node {}: no remote tier there",
                n.name
            );
            continue;
        };
        let up = {
            let (shared, node) = (shared.clone(), n.id as usize);
            Arc::new(move || {
                let s = shared.cluster.lock().ok()?;
                let p = s.as_ref()?.peers.get(node)?;
                if p.state == "up" {
                    p.boot_id
                } else {
                    None
                }
            })
        };
        let link = Arc::new(strata_net::donate::RemoteTier::new(
            strata_net::donate::DonorAddress {
                node: n.id,
                name: n.name.clone(),
                address,
                me: c.me,
                transport: c.transport.clone(),
                secret: c.secret.clone(),
                deadline: c.call_timeout,
                up,
            },
            c.remote_tier_bytes,
        ));
        let index = core.tiers.tiers.len();
        core.tiers.tiers.push(Tier {
            index,
            name: format!("remote:{}", n.name),
            backend: link.clone(),
            lock: None,
            alloc: Some(ExtentAllocator::new(
                c.remote_tier_bytes,
                REMOTE_TIER_BLOCK_BYTES,
            )),
            capacity_bytes: c.remote_tier_bytes,
            block_bytes: REMOTE_TIER_BLOCK_BYTES,
            bandwidth_mib_s: REMOTE_TIER_BANDWIDTH_MIB_S,
            latency_us: REMOTE_TIER_LATENCY_US,
            volatile: true,
            blob_bytes: 0,
            blob_extents: 0,
            remote: Some(link),
            lost_blobs: 0,
        });
    }
}

fn policy_of(cfg: &Config) -> Policy {
    cfg.placement
        .policy
        .as_str()
        .parse()
        .unwrap_or(Policy::MinimizeIoTime)
}

/// Removes shared-memory objects a crashed daemon of this user left behind.
fn sweep_stale_shm(prefix: &str) {
    if let Ok(rd) = std::fs::read_dir("/dev/shm") {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if is_own_segment(prefix, &name) {
                let _ = ShmSegment::unlink(&name);
            }
        }
    }
}

/// Names this daemon's instance creates: `<prefix>-ctl`, `<prefix>-arena`
/// and client segments `<prefix>-c<id>-<pid>`. Only those are swept, never
/// another daemon's whose prefix merely starts with ours (`strata-x-b`
/// vs `strata-x`).
fn is_own_segment(prefix: &str, name: &str) -> bool {
    let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    if rest == "ctl" || rest == "arena" || rest == "index" || rest == "statix" {
        return true;
    }
    let Some(ids) = rest.strip_prefix('c') else {
        return false;
    };
    let mut parts = ids.split('-');
    let (Some(id), Some(pid), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    !id.is_empty()
        && !pid.is_empty()
        && id.bytes().all(|b| b.is_ascii_digit())
        && pid.bytes().all(|b| b.is_ascii_digit())
}

/// Runs a daemon in the foreground until SIGTERM/SIGINT or `daemon stop`.
/// `ready` is called once the socket accepts connections.
/// Arena bytes pre-faulted in the background at start (from offset 0, where
/// best-fit allocation starts): the first writes then find their pages
/// allocated and zeroed instead of faulting them in on the write path.
pub const PREFAULT_BYTES_MAX: u64 = 2 << 30;
/// Arena bytes (beyond the staging reserve) reserved in /dev/shm at start.
pub const ARENA_RESERVE_FIRST_BYTES: u64 = 256 << 20;
/// One `fallocate` of the reserver thread.
const ARENA_RESERVE_CHUNK_BYTES: u64 = 64 << 20;
/// The reserver keeps this much (or a quarter of the use, if more) reserved
/// beyond what is in use.
const ARENA_RESERVE_AHEAD_BYTES: u64 = 512 << 20;
/// One `MADV_POPULATE_WRITE` call of the pre-fault thread.
const PREFAULT_CHUNK_BYTES: usize = 32 << 20;

/// Pre-faults the first `PREFAULT_BYTES_MAX` of the arena on a low-priority
/// thread with its own mapping (the pages are shared: every mapping sees
/// them). Stops at shutdown. Best effort: failures only cost speed.
fn spawn_prefault(arena_name: &str, arena_bytes: u64, shared: Arc<server::Shared>) {
    let name = arena_name.to_string();
    let end = arena_bytes.min(PREFAULT_BYTES_MAX) as usize;
    let res = std::thread::Builder::new()
        .name("strata-prefault".into())
        .spawn(move || {
            // Lowest priority for this thread only (Linux: per-thread nice).
            // SAFETY: setpriority takes plain integers; 0 is this thread.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
            let Ok(seg) = ShmSegment::open(&name) else {
                return;
            };
            let mut at = 0usize;
            // Bounded: end / chunk rounds; only reserved pages are touched.
            while at < end && !shared.shutdown.load(Ordering::Relaxed) {
                let reserved = shared.arena_reserved_bytes.load(Ordering::Acquire) as usize;
                if at >= reserved {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    continue;
                }
                let next = (at + PREFAULT_CHUNK_BYTES).min(end).min(reserved);
                seg.populate(at..next);
                at = next;
            }
            tracing::debug!(bytes = at, "arena pre-faulted");
        });
    if let Err(e) = res {
        tracing::warn!("cannot start the arena pre-fault thread: {e}");
    }
}

/// Reserves arena pages in /dev/shm (`fallocate`; tmpfs allocates them but
/// zeroes them at first touch, which the pre-fault thread does ahead of
/// use): the first `PREFAULT_BYTES_MAX` at once, beyond that ahead of use,
/// chunk by chunk, and publishes how far it got; the poller grows the arena
/// allocator to that. When /dev/shm is full the RAM tier stays at what is
/// reserved (placement spills to the next tier) and the reserver tries again
/// every second. Stops at shutdown.
fn spawn_reserver(arena_name: &str, arena_bytes: u64, shared: Arc<server::Shared>) {
    let name = arena_name.to_string();
    let res = std::thread::Builder::new().name("strata-reserve".into()).spawn(move || {
        let Ok(seg) = ShmSegment::open(&name) else {
            return;
        };
        let mut warned = false;
        // Bounded by shutdown; each round reserves one chunk or sleeps.
        while !shared.shutdown.load(Ordering::Relaxed) {
            let reserved = shared.arena_reserved_bytes.load(Ordering::Acquire);
            if reserved >= arena_bytes {
                return;
            }
            // the pre-fault region at once (as before reservation existed:
            // the pre-fault thread zeroes it ahead of the first writes), then
            // ahead of use
            let used = shared.arena_used_bytes.load(Ordering::Relaxed);
            let ahead = used.saturating_add(ARENA_RESERVE_AHEAD_BYTES.max(used / 4));
            let want = ahead.max(PREFAULT_BYTES_MAX).min(arena_bytes);
            if reserved >= want {
                std::thread::sleep(std::time::Duration::from_millis(5));
                continue;
            }
            let next = (reserved + ARENA_RESERVE_CHUNK_BYTES).min(arena_bytes);
            match seg.reserve(reserved as usize..next as usize) {
                Ok(()) => {
                    // (the poller may have reserved further meanwhile)
                    shared.arena_reserved_bytes.fetch_max(next, Ordering::AcqRel);
                    if warned {
                        tracing::info!(reserved_bytes = next, "/dev/shm has room again: the RAM tier grows");
                        warned = false;
                    }
                }
                Err(e) => {
                    if !warned {
                        tracing::warn!(
                            reserved = %strata_config::format_size(reserved),
                            "/dev/shm is full ({e}): the RAM tier is limited to what is reserved; writes spill to the next tier"
                        );
                        warned = true;
                    }
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
            }
        }
    });
    if let Err(e) = res {
        tracing::warn!(
            "cannot start the arena reserver thread: {e}; the RAM tier stays at what is reserved"
        );
    }
}

/// Reads the journal of the first non-volatile tier and restores what it
/// describes into the (empty) core; keeps the journal in the core.
fn replay_journal(core: &mut Core) -> anyhow::Result<()> {
    let Some(dir) = core
        .tiers
        .tiers
        .iter()
        .find(|t| !t.volatile && !t.is_ram())
        .map(|t| t.path())
    else {
        return Ok(());
    };
    let path = Path::new(&dir)
        .parent()
        .map(|d| d.join(journal::JOURNAL_NAME))
        .context("tier file without a directory")?;
    let scan = journal::read(&path)
        .with_context(|| format!("cannot read the journal {}", path.display()))?;
    if !scan.corrupt.is_empty() {
        // Keep the damaged journal for inspection; the rewrite replaces it.
        let keep = path.with_extension(format!(
            "journal.corrupt-{}",
            strata_engine::core::now_ns() / 1_000_000_000
        ));
        if let Err(e) = std::fs::copy(&path, &keep) {
            tracing::warn!("cannot keep a copy of the corrupt journal: {e}");
        } else {
            tracing::error!(copy = %keep.display(), "the journal had corrupt records (kept a copy)");
        }
    }
    let nonvolatile: Vec<bool> = core
        .tiers
        .tiers
        .iter()
        .map(|t| !t.volatile && !t.is_ram())
        .collect();
    core.journal = Some(jpoller::Journal::new(
        path.clone(),
        nonvolatile,
        Default::default(),
    ));
    core.meta.touched.on = true;
    let report = jreplay::replay(core, &scan);
    if report.blobs > 0
        || report.buckets > 0
        || report.corrupt_ranges > 0
        || report.dropped_blobs > 0
    {
        tracing::info!(
            buckets = report.buckets,
            files = report.files,
            blobs = report.blobs,
            bytes = report.bytes,
            dirty_files = report.dirty_files,
            corrupt = report.corrupt_ranges,
            dropped = report.dropped_blobs,
            crc_mismatches = report.crc_mismatches,
            held_runs = report.held_runs,
            ms = report.elapsed_ms,
            "journal replayed"
        );
    }
    if let Some(j) = core.journal.as_mut() {
        j.report = report;
    }
    Ok(())
}

pub fn run(cfg: Config, ready: impl FnOnce(&Path)) -> anyhow::Result<()> {
    run_with(cfg, None, ready)
}

/// [`run`], joined to a cluster when `cluster` is given (this node's id
/// then comes from its place in the node list).
/// How long a scrape waits for the poller's status (then 503).
const METRICS_STATUS_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

pub fn run_with(
    mut cfg: Config,
    cluster: Option<cluster::Setup>,
    ready: impl FnOnce(&Path),
) -> anyhow::Result<()> {
    if let Some(c) = &cluster {
        cfg.node.id = u16::try_from(c.me).context("node id beyond 16 bits")?;
    }
    cfg.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    // Every lock (socket, shm prefix, tiers) before anything is swept or replaced.
    let identity = identity::acquire(&cfg)?;
    let socket = identity.socket.clone();
    let prefix = identity.prefix.clone();
    // We hold the locks: any socket or shm object left there is stale.
    let _ = std::fs::remove_file(&socket);
    sweep_stale_shm(&prefix);
    // `daemon.group`: its members reach the socket (runtime directory 0710,
    // socket 0660) and map the segments (0660); all else stays private.
    let group = match &cfg.daemon.group {
        Some(spec) => {
            let gid = identity::resolve_group(spec)?;
            if let Some(dir) = socket.parent() {
                identity::share_with_group(dir, gid, 0o710)?;
            }
            tracing::info!(group = %spec, gid, "members of the group may use this daemon");
            Some(gid)
        }
        None => None,
    };
    strata_shm::set_segment_group(group);

    let tiers = build_tiers(&cfg, &prefix)?;
    if let Some(gid) = group {
        // Members' clients read dir tiers directly (read-only): the tier
        // file is the group's to read; the journal and locks stay ours.
        for d in cfg.devices.iter().filter(|d| d.kind == DeviceKind::Dir) {
            if let Some(dir) = &d.path {
                identity::share_with_group(dir, gid, 0o750)?;
                identity::share_with_group(&dir.join(strata_tier::DIR_TIER_FILE), gid, 0o640)?;
            }
        }
    }
    let limits = Limits {
        buckets_max: cfg.metadata.buckets_max as usize,
        blobs_max: cfg.metadata.blobs_max as usize,
        bucket_name_max: cfg.metadata.bucket_name_max as usize,
        blob_name_max: cfg.metadata.blob_name_max as usize,
        extents_per_blob_max: cfg.metadata.extents_per_blob_max as usize,
        tags_per_bucket_max: cfg.metadata.tags_per_bucket_max as usize,
        blob_size_max_bytes: cfg.metadata.blob_size_max_bytes,
    };
    let mut meta = MetaStore::new(cfg.node.id as u32, limits);
    meta.set_quotas(
        cfg.quotas
            .iter()
            .map(|q| {
                let rule = match &q.target {
                    strata_config::QuotaTarget::Bucket(b) => {
                        strata_meta::QuotaRule::Bucket(b.clone())
                    }
                    strata_config::QuotaTarget::Prefix(p) => {
                        strata_meta::QuotaRule::Prefix(p.to_string_lossy().into_owned())
                    }
                };
                (rule, q.limit_bytes)
            })
            .collect(),
    );
    let mut core = Core::new(
        meta,
        tiers,
        policy_of(&cfg),
        cfg.placement.seed,
        cfg.placement.lease_size_bytes,
    );
    core.fsync_relaxed = cfg
        .adapter
        .prefixes
        .iter()
        .filter(|p| p.fsync_relaxed)
        .map(|p| p.path.display().to_string())
        .collect();
    for p in &core.fsync_relaxed {
        tracing::warn!(prefix = p, "fsync is RELAXED under this prefix: it returns once data is buffered, not when it is durable");
    }
    if cfg.journal_enabled() {
        replay_journal(&mut core)?;
    } else if core.tiers.tiers.iter().any(|t| !t.volatile) {
        tracing::warn!("journal disabled: buffered data on non-volatile tiers is lost if the daemon crashes; fsync waits for the destination");
    }

    // The get index: off without a RAM tier, and while the I/O log is on
    // (it records every get, and direct reads never reach the daemon).
    let mut index_segment = String::new();
    if let (Some(ram), true, false) = (
        core.tiers.ram,
        cfg.daemon.get_index_entries > 0,
        cfg.trace.enabled,
    ) {
        let name = format!("{prefix}-index");
        match get_index::GetIndex::create(&name, cfg.daemon.get_index_entries, ram as u32) {
            Ok(ix) => {
                core.meta.set_index(Box::new(ix));
                index_segment = name;
            }
            Err(e) => tracing::warn!(
                "no get index (every get asks the daemon): cannot create /dev/shm/{name}: {e}"
            ),
        }
    }
    // The stat index: off in a cluster (a record may be served by another
    // node, whose changes this node's index would not see).
    let mut stat_segment = String::new();
    if cfg.daemon.stat_index_entries > 0 && cluster.is_none() {
        let name = format!("{prefix}-statix");
        match stat_index::StatIndex::create(&name, cfg.daemon.stat_index_entries) {
            Ok(ix) => {
                core.meta.set_stat_index(Box::new(ix));
                stat_segment = name;
            }
            Err(e) => tracing::warn!(
                "no stat index (every stat asks the daemon): cannot create /dev/shm/{name}: {e}"
            ),
        }
    }
    let ctl_name = format!("{prefix}-ctl");
    let ctl = ShmSegment::create_or_replace(&ctl_name, layout::CTL_SEGMENT_BYTES)
        .with_context(|| format!("cannot create /dev/shm/{ctl_name}"))?;
    // SAFETY: the control segment was just created with CTL_SEGMENT_BYTES ≥ size_of::<CtlHeader>() and is page-aligned; no client maps it before the socket exists.
    unsafe {
        let h = &mut *(ctl.as_ptr() as *mut CtlHeader);
        h.magic = layout::CTL_MAGIC;
        h.version = PROTOCOL_VERSION;
        h.daemon_pid = std::process::id();
        h.state.store(layout::DAEMON_RUNNING, Ordering::SeqCst);
    }
    let shared = Arc::new(Shared {
        group,
        ready: AtomicBool::new(false),
        shutdown: AtomicBool::new(false),
        discard: AtomicBool::new(false),
        msgs_pending: AtomicBool::new(false),
        next_client: AtomicU64::new(1),
        clients_live: AtomicU64::new(0),
        ctl,
        arena_reserved_bytes: AtomicU64::new(core.tiers.arena.alloc.capacity_bytes()),
        arena_used_bytes: AtomicU64::new(0),
        cluster: std::sync::Mutex::new(None),
        peers: std::sync::OnceLock::new(),
    });
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        let s = shared.clone();
        // SAFETY: the handler only does atomic stores and a futex wake.
        unsafe {
            signal_hook::low_level::register(sig, move || {
                s.shutdown.store(true, Ordering::SeqCst);
                s.bell().ring();
            })
        }
        .context("cannot install signal handler")?;
    }
    // A client that dies mid-write must not kill us with SIGPIPE.
    // SAFETY: ignoring SIGPIPE installs no handler code; it only changes the disposition.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };

    if let Some(c) = &cluster {
        add_remote_tiers(&mut core, c, &shared);
    }
    let hello = HelloTemplate {
        reply: HelloReply {
            version: PROTOCOL_VERSION,
            client_id: 0,
            node_id: cfg.node.id as u32,
            ctl_segment: ctl_name.clone(),
            client_segment: String::new(),
            arena_segment: core.tiers.arena.seg().name().to_string(),
            arena_bytes: core.tiers.arena.len(),
            arena_block_bytes: core.tiers.arena.alloc.block_bytes(),
            lease_bytes: cfg.placement.lease_size_bytes,
            channels: cfg.daemon.channels_per_client_max,
            depth: cfg.daemon.ring_depth,
            arg_bytes: cfg.daemon.slot_arg_size_bytes as u32,
            spin_us: cfg.daemon.spin_us as u64,
            ram_tier: core.tiers.ram.map(|r| r as u32),
            tiers: server::tier_infos(&core),
            cluster_nodes: cluster
                .as_ref()
                .map(|c| c.membership.nodes.iter().map(|n| n.name.clone()).collect())
                .unwrap_or_default(),
            files_at_owner: cluster.is_some() && cfg.cluster.files_at_owner,
            pages_where_written: cluster.is_some()
                && cfg.cluster.files_at_owner
                && cfg.cluster.pages_where_written,
            read_replicas: cluster.is_some()
                && cfg.cluster.files_at_owner
                && cfg.cluster.pages_where_written
                && cfg.cluster.read_replicas,
            remote_read_ahead: cluster.is_some()
                && cfg.cluster.files_at_owner
                && cfg.cluster.pages_where_written
                && cfg.cluster.read_replicas
                && cfg.cluster.remote_read_ahead,
            index_segment,
            stat_segment,
        },
        shm_prefix: prefix.clone(),
        clients_max: cfg.daemon.clients_max as u64,
    };

    let listener =
        UnixListener::bind(&socket).with_context(|| format!("cannot bind {}", socket.display()))?;
    match group {
        Some(gid) => identity::share_with_group(&socket, gid, 0o660)?,
        None => {
            let _ = std::fs::set_permissions(
                &socket,
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            );
        }
    }
    let (tx, rx) = mpsc::channel();
    // The engine's workers report here; the poller applies the completions.
    let (flush_tx, done_rx) = mpsc::channel::<Done>();
    let cluster = match cluster {
        Some(setup) => Some(cluster::start(
            setup,
            tx.clone(),
            shared.clone(),
            strata_engine::tier::TierIo::open(&core.tiers)?,
            core.tiers.ram,
        )?),
        None => None,
    };
    let status_tx = tx.clone();
    {
        let shared = shared.clone();
        let hello = Arc::new(hello);
        std::thread::Builder::new()
            .name("strata-control".into())
            .spawn(move || server::control_loop(listener, shared, tx, hello))
            .context("cannot spawn control thread")?;
    }
    spawn_reserver(
        core.tiers.arena.seg().name(),
        core.tiers.arena.len(),
        shared.clone(),
    );
    spawn_prefault(
        core.tiers.arena.seg().name(),
        core.tiers.arena.len(),
        shared.clone(),
    );
    let wake: Arc<dyn Fn() + Send + Sync> = {
        let shared = shared.clone();
        Arc::new(move || {
            shared.msgs_pending.store(true, Ordering::SeqCst);
            shared.bell().ring();
        })
    };
    let mut stash = stash::Stash::default();
    if core.journal.is_some() {
        let settings = journal::WriterSettings {
            sync_interval: std::time::Duration::from_secs_f64(cfg.journal.sync_interval_ms / 1e3),
            compact_min_bytes: cfg.journal.compact_min_bytes,
        };
        if let Some(j) = core.journal.as_mut() {
            j.inline_max_bytes = cfg.journal.inline_max_bytes;
        }
        jpoller::Journal::start(&mut core, settings, wake.clone())
            .context("cannot write the journal")?;
        stash = stash::start(
            &mut core,
            strata_engine::report(flush_tx.clone(), wake.clone(), Done::Stash),
        )
        .context("cannot start the stash thread")?;
    }
    let mut prefetcher = prefetch::Prefetch::start(
        &core,
        cfg.prefetch,
        strata_engine::report(flush_tx.clone(), wake.clone(), Done::Prefetch),
    )
    .context("cannot start the read-ahead threads")?;
    let mut tracer = trace::Tracer::off();
    if cfg.trace.enabled {
        let path = cfg.resolved_trace_path();
        if let Some(dir) = path.parent() {
            identity::private_dir(dir, "trace directory", true)?;
        }
        if prefetcher.settings.enabled && prefetcher.settings.predict {
            // The successor model starts from what the I/O log of earlier runs says.
            let pairs = prefetch::warm_from_trace(&core, &mut prefetcher, &path);
            if pairs > 0 {
                tracing::info!(pairs, path = %path.display(), "prefetch model warmed from the I/O log");
            }
        }
        let names = core.tiers.tiers.iter().map(|t| t.name.clone()).collect();
        tracer = trace::Tracer::start(&path, cfg.trace.size_max_bytes, names)
            .with_context(|| format!("cannot open the trace file {}", path.display()))?;
    }
    let org = organizer::start(
        &mut core,
        &cfg.organizer,
        strata_engine::report(flush_tx.clone(), wake.clone(), Done::Organizer),
    )
    .context("cannot start the organizer thread")?;
    let op_latency = Arc::new(metrics::OpLatency::default());
    let exporter = match cfg.daemon.metrics {
        Some(addr) => {
            let shared = shared.clone();
            let status_tx = std::sync::Mutex::new(status_tx);
            Some(metrics::start(
                addr,
                metrics::Sources {
                    ops: op_latency.clone(),
                    journal: core.journal.as_ref().map(|j| j.shared.clone()),
                    sync_wait: core.journal.as_ref().map(|j| j.sync_wait_latency.clone()),
                    status: Arc::new(move || {
                        let tx = status_tx
                            .lock()
                            .map_err(|_| "poisoned".to_string())?
                            .clone();
                        server::request_status(&tx, &shared, METRICS_STATUS_DEADLINE)
                    }),
                },
            )?)
        }
        None => {
            drop(status_tx);
            None
        }
    };
    tracing::info!(socket = %socket.display(), tiers = cfg.devices.len(), "strata daemon ready");
    shared.ready.store(true, Ordering::SeqCst);
    ready(&socket);

    let mut flush_io = flush::FlushIo::open(&core, cfg.flush.bandwidth_max_mib_s)
        .context("cannot open the tiers for the flusher")?;
    flush_io.verify = cfg.flush.verify;
    flush_io.pusher = Some(Arc::new(server::ViaPeers(shared.clone())));
    let log_path = drain::event_log_path(&socket);
    let log = match drain::EventLog::start(&log_path) {
        Ok(l) => {
            // Members of `daemon.group` follow the drain of their files too
            // (`strata drain status`, `drain log`): 0640, the group's.
            if let Some(gid) = group {
                if let Err(e) = identity::share_with_group(&log_path, gid, 0o640) {
                    tracing::warn!(path = %log_path.display(), "cannot share the drain event log with the group: {e}");
                }
            }
            Some(l)
        }
        Err(e) => {
            tracing::warn!(path = %log_path.display(), "cannot open the drain event log: {e}");
            None
        }
    };
    let mut flusher = flush::Flusher::start_with_log(
        flush::FlushSettings::from_config(&cfg.flush),
        flush_io,
        strata_engine::report(flush_tx, wake, Done::Flush),
        log,
    )
    .context("cannot start flush threads")?;
    flusher.set_stall_warn_ns((cfg.flush.stall_warn_ms * 1e6) as u64);
    flusher.set_give_up_ns((cfg.flush.stop_give_up_ms * 1e6) as u64);
    let mut poller = Poller::new(
        {
            let mut engine = Engine::new(core, Some(flusher));
            engine.prefetch = prefetcher;
            engine.trace = tracer;
            engine.org = org;
            engine.stash = stash;
            engine.locality.enabled = cfg.cluster.toward_readers;
            engine
        },
        done_rx,
        shared.clone(),
        rx,
        cfg.daemon.spin(),
        cfg.node.id as u32,
        socket.clone(),
    );
    poller.push_bandwidth_max_mib_s = cfg.flush.bandwidth_max_mib_s;
    if let Some(e) = &exporter {
        poller.op_latency = Some(op_latency);
        poller.metrics_addr = Some(e.addr);
    }
    poller.set_shadow_sweep_interval(std::time::Duration::from_secs_f64(
        cfg.cluster.shadow_sweep_interval_ms / 1e3,
    ));
    poller.run();

    tracing::info!("strata daemon stopping");
    // The endpoint goes first: a scrape would wait for a poller that is gone.
    drop(exporter);
    let _ = std::fs::remove_file(&socket);
    let _ = ShmSegment::unlink(&ctl_name);
    let _ = ShmSegment::unlink(poller.engine.core.tiers.arena.seg().name());
    sweep_stale_shm(&prefix);
    identity.release();
    // Last: a peer (or `cluster stop`) that sees this node stop answering
    // finds it gone for good.
    if let Some(c) = cluster {
        c.stop();
    }
    Ok(())
}

#[cfg(test)]
mod sweep_tests {
    use super::is_own_segment;
    #[test]
    fn sweeps_only_its_own_segment_names() {
        for n in [
            "strata-x-ctl",
            "strata-x-arena",
            "strata-x-c12-3456",
            "strata-x-index",
            "strata-x-statix",
        ] {
            assert!(is_own_segment("strata-x", n), "{n}");
        }
        for n in [
            "strata-x-b-ctl",
            "strata-x-b-arena",
            "strata-x-b-c1-2",
            "strata-x-c1",
            "strata-x-c1-2-3",
            "strata-x-cx-1",
            "strata-xy-ctl",
            "strata-x",
            "other",
        ] {
            assert!(!is_own_segment("strata-x", n), "{n}");
        }
    }
}
