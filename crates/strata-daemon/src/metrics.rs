//! The Prometheus endpoint (`daemon.metrics: ADDR:PORT`, off by default):
//! `GET /metrics` answers the daemon's state in the OpenMetrics text format.
//!
//! **Architecture Invariant:** the exporter never touches the engine. Each
//! scrape asks the poller for a status (the same `Msg::Status` as
//! `strata status`, with a deadline) and reads the latency histograms,
//! which the poller and the journal thread update with relaxed atomics. A
//! scrape that cannot get a status within the deadline answers 503; a slow
//! or stuck scraper holds one of [`CONNECTIONS_MAX`] connections for at
//! most [`CONNECTION_TIMEOUT`].
//!
//! **API Boundary:** HTTP/1.1 on a TCP address the configuration names.
//! The metric names (prefix `strata_`, units last, `_total` on counters)
//! are the public interface, listed in README's Operations section.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use http_body_util::Full;
use hyper::body::Bytes;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use strata_engine::latency::{LatencyHistogram, Snapshot};
use strata_proto::control::StatusReply;

/// Concurrent scrape connections; more are closed at once.
pub const CONNECTIONS_MAX: usize = 16;
/// A connection that sends no complete request within this is closed.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Op codes with a latency histogram (the ring's op codes are below it).
pub const OPS_MAX: usize = 128;

/// Service time of each ring request, per op code: from the poller taking
/// the request to its reply being written.
pub struct OpLatency {
    ops: Vec<LatencyHistogram>,
}

impl Default for OpLatency {
    fn default() -> Self {
        OpLatency {
            ops: (0..OPS_MAX).map(|_| LatencyHistogram::default()).collect(),
        }
    }
}

impl OpLatency {
    pub fn observe(&self, op: u32, d: Duration) {
        if let Some(h) = self.ops.get(op as usize) {
            h.observe(d);
        }
    }

    /// (op name, snapshot) of every op seen at least once.
    fn seen(&self) -> Vec<(String, Snapshot)> {
        self.ops
            .iter()
            .enumerate()
            .filter(|(_, h)| h.count() > 0)
            .filter_map(|(i, h)| {
                let op = strata_transport_shm::Op::from_u32(i as u32)?;
                Some((snake(&format!("{op:?}")), h.snapshot()))
            })
            .collect()
    }
}

/// `FileSyncState` → `file_sync_state`.
fn snake(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                s.push('_');
            }
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

/// What a scrape reads besides the status.
#[derive(Clone)]
pub struct Sources {
    pub ops: Arc<OpLatency>,
    pub journal: Option<Arc<strata_engine::journal::Shared>>,
    pub sync_wait: Option<Arc<LatencyHistogram>>,
    /// The poller's status, within a deadline.
    pub status: Arc<dyn Fn() -> Result<StatusReply, String> + Send + Sync>,
}

/// A running exporter; dropping it stops it.
pub struct Exporter {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Binds `addr` (an error names it: the start fails rather than running
/// without the metrics an operator asked for) and serves it on a thread.
pub fn start(addr: SocketAddr, sources: Sources) -> anyhow::Result<Exporter> {
    let listener = std::net::TcpListener::bind(addr).with_context(|| {
        format!("cannot listen on {addr} for metrics (daemon.metrics): is the port in use?")
    })?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the metrics runtime")?;
    let thread = std::thread::Builder::new()
        .name("strata-metrics".into())
        .spawn(move || rt.block_on(serve(listener, sources, stop_rx)))
        .context("cannot spawn the metrics thread")?;
    tracing::info!(%addr, "metrics at http://{addr}/metrics");
    Ok(Exporter {
        addr,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

async fn serve(
    listener: std::net::TcpListener,
    sources: Sources,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("metrics endpoint lost its socket: {e}");
            return;
        }
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut stop => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("metrics endpoint: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            continue; // too many scrapers: this one is closed
        };
        let sources = sources.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let sources = sources.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(req, sources).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(CONNECTION_TIMEOUT)
                .keep_alive(false)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT * 2, conn).await;
            drop(permit);
        });
    }
}

async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    sources: Sources,
) -> hyper::Response<Full<Bytes>> {
    let reply = |code: u16, ctype: &str, body: String| {
        hyper::Response::builder()
            .status(code)
            .header("content-type", ctype)
            .body(Full::new(Bytes::from(body)))
            .unwrap_or_default()
    };
    if req.method() != hyper::Method::GET {
        return reply(405, "text/plain", "only GET\n".into());
    }
    match req.uri().path() {
        "/metrics" => {
            // The status waits for the poller: off the runtime's thread.
            let r = tokio::task::spawn_blocking(move || {
                let s = (sources.status)()?;
                render(&s, &sources).map_err(|e| format!("encoding failed: {e}"))
            })
            .await;
            match r {
                Ok(Ok(text)) => reply(
                    200,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    text,
                ),
                Ok(Err(e)) => reply(503, "text/plain", format!("{e}\n")),
                Err(e) => reply(500, "text/plain", format!("{e}\n")),
            }
        }
        "/" => reply(
            200,
            "text/plain",
            "strata daemon: metrics at /metrics\n".into(),
        ),
        _ => reply(404, "text/plain", "not found; try /metrics\n".into()),
    }
}

/// The whole exposition of one scrape (every metric carries `node`).
pub fn render(s: &StatusReply, sources: &Sources) -> Result<String, std::fmt::Error> {
    let mut reg = Registry::with_labels(
        [(
            std::borrow::Cow::Borrowed("node"),
            std::borrow::Cow::Owned(s.node_id.to_string()),
        )]
        .into_iter(),
    );
    reg.register_collector(Box::new(Scrape {
        status: s.clone(),
        ops: sources.ops.seen(),
        journal_sync: sources.journal.as_ref().map(|j| j.sync_latency.snapshot()),
        sync_wait: sources.sync_wait.as_ref().map(|h| h.snapshot()),
    }));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg)?;
    Ok(out)
}

#[derive(Debug)]
struct Scrape {
    status: StatusReply,
    ops: Vec<(String, Snapshot)>,
    journal_sync: Option<Snapshot>,
    sync_wait: Option<Snapshot>,
}

/// Helpers writing one metric family each (names as Prometheus wants:
/// units last; the encoder appends `_total` to counters).
struct Out<'a, 'b>(&'a mut DescriptorEncoder<'b>);

impl Out<'_, '_> {
    fn gauge(&mut self, name: &str, help: &str, v: f64) -> std::fmt::Result {
        let m = self
            .0
            .encode_descriptor(name, help, None, MetricType::Gauge)?;
        ConstGauge::new(v).encode(m)
    }

    fn counter(&mut self, name: &str, help: &str, v: u64) -> std::fmt::Result {
        let m = self
            .0
            .encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(v).encode(m)
    }

    /// One gauge per label value.
    fn gauges(
        &mut self,
        name: &str,
        help: &str,
        rows: &[(Vec<(&str, String)>, f64)],
    ) -> std::fmt::Result {
        if rows.is_empty() {
            return Ok(());
        }
        let mut m = self
            .0
            .encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, v) in rows {
            let f = m.encode_family(labels)?;
            ConstGauge::new(*v).encode(f)?;
        }
        Ok(())
    }

    fn histogram(&mut self, name: &str, help: &str, h: &Snapshot) -> std::fmt::Result {
        let mut m = self
            .0
            .encode_descriptor(name, help, None, MetricType::Histogram)?;
        m.encode_histogram::<NoLabelSet>(h.sum_s, h.count, &per_bucket(h), None)
    }

    fn histograms(
        &mut self,
        name: &str,
        help: &str,
        label: &str,
        rows: &[(String, Snapshot)],
    ) -> std::fmt::Result {
        if rows.is_empty() {
            return Ok(());
        }
        let mut m = self
            .0
            .encode_descriptor(name, help, None, MetricType::Histogram)?;
        for (l, h) in rows {
            let labels = [(label, l.as_str())];
            let mut f = m.encode_family(&labels)?;
            f.encode_histogram::<NoLabelSet>(h.sum_s, h.count, &per_bucket(h), None)?;
        }
        Ok(())
    }
}

/// The encoder wants per-bucket counts and `f64::MAX` for `+Inf`.
fn per_bucket(h: &Snapshot) -> Vec<(f64, u64)> {
    let mut prev = 0;
    h.cumulative
        .iter()
        .map(|&(b, c)| {
            let n = c - prev;
            prev = c;
            (if b.is_finite() { b } else { f64::MAX }, n)
        })
        .collect()
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let s = &self.status;
        let mut o = Out(&mut enc);
        o.gauge(
            "strata_uptime_seconds",
            "Seconds since the daemon started",
            s.uptime_s,
        )?;
        o.gauge(
            "strata_clients",
            "Client processes connected to the daemon",
            s.clients as f64,
        )?;
        o.counter(
            "strata_requests",
            "Requests served on the clients' rings",
            s.requests_total,
        )?;
        o.counter(
            "strata_malformed_requests",
            "Requests refused as malformed",
            s.malformed_total,
        )?;
        o.gauge("strata_buckets", "Buckets (native API)", s.buckets as f64)?;
        o.gauge("strata_blobs", "Blobs, file pages included", s.blobs as f64)?;

        // Tiers.
        let tier = |f: &dyn Fn(&strata_proto::control::TierStatus) -> f64| {
            s.tiers
                .iter()
                .map(|t| {
                    (
                        vec![("tier", t.name.clone()), ("kind", t.kind.clone())],
                        f(t),
                    )
                })
                .collect::<Vec<_>>()
        };
        o.gauges(
            "strata_tier_capacity_bytes",
            "Configured capacity of each tier",
            &tier(&|t| t.capacity_bytes as f64),
        )?;
        o.gauges(
            "strata_tier_used_bytes",
            "Bytes of blob extents on each tier (freed space excluded)",
            &tier(&|t| t.used_bytes as f64),
        )?;
        o.gauges(
            "strata_tier_extents",
            "Blob extents on each tier",
            &tier(&|t| t.blob_count as f64),
        )?;
        o.gauges(
            "strata_tier_dirty_bytes",
            "Bytes on each tier not yet at the destination",
            &tier(&|t| t.dirty_bytes as f64),
        )?;
        o.gauges(
            "strata_tier_spilled_bytes",
            "Bytes beyond each tier's capacity (capacity pressure)",
            &tier(&|t| t.spilled_bytes as f64),
        )?;
        o.gauges(
            "strata_tier_leased_bytes",
            "RAM leased to clients for writes in flight",
            &tier(&|t| t.leased_bytes as f64),
        )?;

        // Files and the drain.
        let f = &s.files;
        o.gauge("strata_files", "Files the daemon buffers", f.files as f64)?;
        o.gauge(
            "strata_dirty_files",
            "Files with bytes not yet at the destination",
            f.dirty_files as f64,
        )?;
        o.gauge(
            "strata_dirty_bytes",
            "Bytes of files not yet at the destination",
            f.dirty_bytes as f64,
        )?;
        o.gauge(
            "strata_flush_lag_seconds",
            "Age of the oldest dirty file data (0: nothing dirty)",
            f.oldest_dirty_s,
        )?;
        o.counter(
            "strata_file_write_bytes",
            "Bytes written to files through strata",
            f.write_bytes_total,
        )?;
        o.counter(
            "strata_file_read_hit_bytes",
            "Bytes of file reads served from the buffer",
            f.read_hit_bytes_total,
        )?;
        o.counter(
            "strata_file_read_miss_bytes",
            "Bytes of file reads served from the destination",
            f.read_dest_bytes_total,
        )?;
        o.counter(
            "strata_flushed_bytes",
            "Bytes written to the destination by the drain (flush and stage-out)",
            f.flushed_bytes_total,
        )?;
        o.counter(
            "strata_flushed_files",
            "File flushes completed",
            f.flushed_files_total,
        )?;
        o.counter(
            "strata_flush_errors",
            "File flushes that failed",
            f.flush_errors_total,
        )?;
        o.counter(
            "strata_evicted_bytes",
            "Clean bytes evicted from the buffer under capacity pressure",
            f.evicted_bytes_total,
        )?;
        o.counter(
            "strata_write_through_bytes",
            "Bytes written straight to the destination (no room in the buffer)",
            f.write_through_bytes_total,
        )?;
        o.counter(
            "strata_outside_changes",
            "Destination files changed by someone else than strata",
            f.outside_changes_total,
        )?;
        o.counter(
            "strata_conflicts",
            "Files changed both outside and in strata (outside version kept aside)",
            f.conflicts_total,
        )?;
        if let Some(fl) = &s.flush {
            o.gauge(
                "strata_flush_jobs_in_flight",
                "Flush jobs running now",
                fl.in_flight as f64,
            )?;
            o.gauge(
                "strata_flush_yielding",
                "1 while the drain gives way to busy clients",
                if fl.yielding { 1.0 } else { 0.0 },
            )?;
        }

        // Journal.
        if let Some(j) = &s.journal {
            o.gauge(
                "strata_journal_file_bytes",
                "Size of the journal file",
                j.file_bytes as f64,
            )?;
            o.gauge(
                "strata_journal_live_records",
                "Live records in the journal",
                j.live_records as f64,
            )?;
            o.counter("strata_journal_syncs", "fdatasyncs of the journal", j.syncs)?;
            o.counter(
                "strata_journal_compactions",
                "Journal compactions",
                j.compactions,
            )?;
            o.gauge(
                "strata_journal_quarantined_bytes",
                "Freed non-volatile space not reusable until the journal syncs",
                j.quarantined_bytes as f64,
            )?;
            o.counter(
                "strata_fsync_journaled",
                "fsyncs made durable by the journal on a non-volatile tier",
                j.journal_syncs,
            )?;
        }
        if let Some(h) = &self.journal_sync {
            o.histogram(
                "strata_journal_sync_duration_seconds",
                "Duration of each fdatasync of the journal",
                h,
            )?;
        }
        if let Some(h) = &self.sync_wait {
            o.histogram(
                "strata_fsync_journal_wait_seconds",
                "From an fsync's journal record being asked for to it being durable",
                h,
            )?;
        }

        // Organizer, prefetch, get index.
        if let Some(g) = &s.organizer {
            o.counter(
                "strata_organizer_promoted_bytes",
                "Bytes moved to a faster tier",
                g.promoted_bytes,
            )?;
            o.counter(
                "strata_organizer_demoted_bytes",
                "Bytes moved to a slower tier",
                g.demoted_bytes,
            )?;
            o.counter(
                "strata_organizer_promoted_blobs",
                "Blobs moved to a faster tier",
                g.promoted_blobs,
            )?;
            o.counter(
                "strata_organizer_demoted_blobs",
                "Blobs moved to a slower tier",
                g.demoted_blobs,
            )?;
            o.counter(
                "strata_organizer_failed_moves",
                "Moves that failed (I/O error, CRC mismatch)",
                g.failed_moves,
            )?;
        }
        let p = &s.prefetch;
        o.counter(
            "strata_prefetch_bytes",
            "Bytes read ahead or promoted by the prefetcher",
            p.prefetched_bytes_total,
        )?;
        o.counter(
            "strata_prefetch_used_bytes",
            "Prefetched bytes read afterwards",
            p.used_bytes_total,
        )?;
        o.counter(
            "strata_prefetch_unused_bytes",
            "Prefetched bytes dropped unread",
            p.unused_bytes_total,
        )?;
        if let Some(g) = &s.get_index {
            o.counter(
                "strata_get_index_direct_reads",
                "Gets served from the arena without a request",
                g.direct_reads_total,
            )?;
            o.gauge(
                "strata_get_index_published",
                "Blobs clients may read without a request",
                g.published as f64,
            )?;
        }

        if let Some(x) = &s.stat_index {
            o.gauge(
                "strata_stat_index_published",
                "File records clients may stat without a request",
                x.published as f64,
            )?;
            o.counter(
                "strata_stat_index_forgotten",
                "Stat index entries forgotten because their record changed",
                x.forgotten_total,
            )?;
        }

        // Cluster: this node's view of every node.
        if let Some(c) = &s.cluster {
            let peer = |f: &dyn Fn(&strata_proto::control::PeerStatus) -> Option<f64>| {
                c.peers
                    .iter()
                    .filter_map(|p| {
                        f(p).map(|v| {
                            (
                                vec![("peer", p.node.to_string()), ("name", p.name.clone())],
                                v,
                            )
                        })
                    })
                    .collect::<Vec<_>>()
            };
            o.gauges(
                "strata_cluster_peer_up",
                "1 if the node answers its heartbeats",
                &peer(&|p| Some(if p.state == "up" { 1.0 } else { 0.0 })),
            )?;
            o.gauges(
                "strata_cluster_peer_last_seen_seconds",
                "Seconds since the node last answered",
                &peer(&|p| p.last_seen_s),
            )?;
            o.gauges(
                "strata_cluster_peer_rtt_seconds",
                "Smoothed heartbeat round trip to the node",
                &peer(&|p| p.rtt_us.map(|us| us / 1e6)),
            )?;
            o.gauge(
                "strata_cluster_tls",
                "1 if connections to other daemons run in TLS",
                if c.tls { 1.0 } else { 0.0 },
            )?;
            o.gauge(
                "strata_cluster_tls_relays",
                "Bulk connections relayed through TLS now",
                c.tls_relays as f64,
            )?;
        }

        // Quotas.
        let quota = |f: &dyn Fn(&strata_proto::control::QuotaStatus) -> u64| {
            s.quotas
                .iter()
                .map(|q| (vec![("rule", q.rule.clone())], f(q) as f64))
                .collect::<Vec<_>>()
        };
        o.gauges(
            "strata_quota_limit_bytes",
            "Configured limit of each quota",
            &quota(&|q| q.limit_bytes),
        )?;
        o.gauges(
            "strata_quota_used_bytes",
            "Bytes held against each quota",
            &quota(&|q| q.used_bytes),
        )?;

        // Service time per request.
        o.histograms(
            "strata_request_duration_seconds",
            "Daemon service time of each request, by op (put, get, file_read, file_write, file_sync, ...)",
            "op",
            &self.ops,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_names_are_snake_case() {
        assert_eq!(snake("FileSyncState"), "file_sync_state");
        assert_eq!(snake("Put"), "put");
    }

    #[test]
    fn a_scrape_of_a_default_status_is_valid_openmetrics() {
        let ops = Arc::new(OpLatency::default());
        ops.observe(
            strata_transport_shm::Op::Put as u32,
            Duration::from_micros(3),
        );
        ops.observe(
            strata_transport_shm::Op::Put as u32,
            Duration::from_millis(3),
        );
        ops.observe(999, Duration::from_millis(3)); // beyond the table: ignored
        let sources = Sources {
            ops,
            journal: None,
            sync_wait: None,
            status: Arc::new(|| Err("unused".into())),
        };
        let s = StatusReply {
            version: 1,
            pid: 1,
            node_id: 3,
            uptime_s: 1.5,
            socket: String::new(),
            clients: 2,
            buckets: 0,
            blobs: 0,
            buckets_max: 1,
            blobs_max: 1,
            requests_total: 7,
            malformed_total: 0,
            policy: String::new(),
            tiers: vec![strata_proto::control::TierStatus {
                name: "ram".into(),
                kind: "ram".into(),
                capacity_bytes: 1 << 20,
                used_bytes: 4096,
                ..Default::default()
            }],
            files: Default::default(),
            journal: None,
            trace: None,
            prefetch: Default::default(),
            organizer: None,
            cluster: None,
            get_index: None,
            stat_index: None,
            flush: None,
            metrics: None,
            log: None,
            quotas: vec![],
        };
        let text = render(&s, &sources).unwrap();
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(
            text.contains("strata_requests_total{node=\"3\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("strata_tier_used_bytes{node=\"3\",tier=\"ram\",kind=\"ram\"} 4096"),
            "{text}"
        );
        assert!(
            text.contains("strata_request_duration_seconds_count{node=\"3\",op=\"put\"} 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "strata_request_duration_seconds_bucket{node=\"3\",le=\"+Inf\",op=\"put\"} 2"
            ),
            "{text}"
        );
        assert!(!text.contains("op=\"\""), "{text}");
    }
}
