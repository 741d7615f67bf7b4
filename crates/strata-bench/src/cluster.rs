//! `strata bench cluster`: the native API across nodes against raw TCP
//! between the same nodes, in the same run.
//!
//! For each node count it builds a bed (`crate::bed`: network namespaces,
//! else 127.x addresses), starts the cluster with `strata cluster start`,
//! and measures, `--repeats` times each:
//!
//! - **latency**: one client on node 1 puts and gets 4 KiB blobs of a
//!   bucket owned by node 0 (p50 of each), against a raw TCP ping-pong of
//!   the same size between the same two namespaces (`tcp-peer`, this
//!   binary: the client sends `size` bytes, the server echoes them);
//! - **bandwidth**: one client per node, node i using a bucket owned by
//!   node i+1 (every byte crosses the network, every node serves one
//!   peer), put then get phases of `--sizes` blobs, aggregate MiB/s;
//!   against iperf3 pairs in the same pattern, at once (our own TCP stream
//!   when iperf3 is missing; the table says which).
//!
//! With one node there is no remote: the same workloads run against the
//! local daemon and iperf3 runs over the node's loopback, as a reference.
//! Ratios are medians over the repeats, with their range.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::bed::{Bed, BedSpec};
use crate::hist::Hist;
use crate::kv::{format_size, parse_size, Phase, Proc};
use crate::team::median_min_max;

#[derive(clap::Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Node counts, each on a fresh bed.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub nodes: Vec<usize>,
    /// Blob sizes of the bandwidth runs.
    #[arg(long, value_delimiter = ',', default_value = "1MiB,16MiB", value_parser = parse_size)]
    pub sizes: Vec<u64>,
    /// Blob size of the latency runs.
    #[arg(long, default_value = "4KiB", value_parser = parse_size)]
    pub latency_size: u64,
    /// Seconds per measured phase.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// RAM tier of each node.
    #[arg(long, default_value = "1GiB")]
    pub ram: String,
    /// 127.x addresses even where namespaces could be made.
    #[arg(long)]
    pub loopback: bool,
    /// Also measure remote tiers on 2 nodes: puts and gets of a node whose
    /// own tiers are full (spilled onto memory its peer lends) against the
    /// same with room at home, and gets of another node's blobs once they
    /// moved toward the reader against the same without remote tiers.
    #[arg(long)]
    pub remote_tiers: bool,
    /// Run the beds with `cluster.tls: true` (every connection between
    /// daemons in TLS; the raw TCP peers stay plain).
    #[arg(long)]
    pub tls: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct TcpPeerArgs {
    /// Listen here, serve one connection, then exit.
    #[arg(long)]
    pub serve: Option<String>,
    /// Connect here and measure.
    #[arg(long)]
    pub connect: Option<String>,
    /// `pingpong` (echo `size` bytes) or `stream` (send for `seconds`).
    #[arg(long, default_value = "pingpong")]
    pub mode: String,
    #[arg(long, default_value_t = 4096)]
    pub size: u64,
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Ping-pong with busy-polling reads on both sides (the network's best
    /// round trip, no wake-up of an idle CPU in it).
    #[arg(long)]
    pub spin: bool,
}

/// Reads exactly `buf.len()` bytes, busy-polling when `spin`.
fn read_full(s: &mut TcpStream, buf: &mut [u8], spin: bool) -> std::io::Result<()> {
    if !spin {
        return s.read_exact(buf);
    }
    let mut at = 0;
    while at < buf.len() {
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` (a non-blocking socket may take it in parts).
fn write_full(s: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match s.write(&buf[at..]) {
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One line of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub nodes: usize,
    pub bed: String,
    pub what: String,
    pub unit: String,
    /// strata's values, one per repeat.
    pub strata: Vec<f64>,
    pub peer: String,
    pub peer_values: Vec<f64>,
    /// strata ÷ peer per repeat (`lower_is_better` for latencies).
    pub ratios: Vec<f64>,
    pub lower_is_better: bool,
}

impl Row {
    /// "median (min–max)" of the ratios, None when a repeat had no peer.
    pub fn ratio_text(&self) -> Option<String> {
        self.ratios.iter().all(|x| x.is_finite()).then(|| {
            let (q, lo, hi) = median_min_max(&self.ratios);
            format!("{q:.2} ({lo:.2}–{hi:.2})")
        })
    }
}

/// Buckets owned by each node (the first name of `bench-cluster-K` that
/// the ring gives it).
fn buckets(names: &[String]) -> Result<Vec<String>> {
    let ring = strata_meta::Ring::new(names).map_err(|e| anyhow::anyhow!("ring: {e}"))?;
    (0..names.len() as u32)
        .map(|t| {
            (0..100_000)
                .map(|k| format!("bench-cluster-{k}"))
                .find(|b| strata_meta::owner_of(b.as_bytes(), &ring) == t)
                .with_context(|| format!("no bucket name owned by node {t}"))
        })
        .collect()
}

/// A `kv-worker` in node `node` of `bed`, on `bucket`.
fn kv_worker(bed: &Bed, node: usize, bucket: &str, size: u64, seconds: f64) -> Result<Proc> {
    let exe = std::env::current_exe().context("this executable")?;
    let n = &bed.nodes[node];
    let keys = ((128u64 << 20) / size.max(1)).clamp(2, 64);
    let mut cmd = bed.in_node(node, &exe);
    cmd.arg("--config").arg(&n.config);
    cmd.args(["kv-worker", "--socket"]).arg(&n.socket);
    cmd.args([
        "--size",
        &size.to_string(),
        "--threads",
        "1",
        "--ops",
        "100000000",
        "--seconds",
        &seconds.to_string(),
        "--keys",
        &keys.to_string(),
        "--bucket",
        bucket,
        "--prefix",
        &format!("n{node}"),
    ]);
    cmd.env("STRATA_SOCKET", &n.socket);
    Proc::spawn(cmd)
}

/// Put then get on the given (node, bucket) pairs at once: (put, get)
/// results merged.
fn kv_phases(
    bed: &Bed,
    pairs: &[(usize, &str)],
    size: u64,
    seconds: f64,
) -> Result<(crate::kv::PhaseResult, crate::kv::PhaseResult)> {
    let mut ps = pairs
        .iter()
        .map(|(n, b)| kv_worker(bed, *n, b, size, seconds))
        .collect::<Result<Vec<_>>>()?;
    Proc::barrier(&mut ps)?;
    let put = Proc::run_phase(&mut ps, Phase::Put)?;
    let get = Proc::run_phase(&mut ps, Phase::Get)?;
    drop(ps);
    Ok((put, get))
}

fn mib_per_s(r: &crate::kv::PhaseResult) -> f64 {
    r.bytes as f64 / (1 << 20) as f64 / (r.elapsed_ns.max(1) as f64 / 1e9)
}

/// A child that printed its first line (`ready`, or iperf3's banner).
struct Ready {
    child: std::process::Child,
}

impl Drop for Ready {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_ready(mut cmd: Command) -> Result<Ready> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut child = cmd.spawn().context("spawn a peer")?;
    let out = child.stdout.take().context("peer stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    // The rest of its output is drained (and dropped) by this thread.
    std::thread::spawn(move || {
        let mut r = BufReader::new(out);
        let mut line = String::new();
        let _ = tx.send(r.read_line(&mut line).map(|n| n > 0));
        let _ = std::io::copy(&mut r, &mut std::io::sink());
    });
    let ready = Ready { child };
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(true)) => Ok(ready),
        Ok(_) => bail!("peer {:?} exited before it was ready", cmd.get_program()),
        Err(_) => bail!("peer {:?} not ready within 30 s", cmd.get_program()),
    }
}

/// p50 round trip (µs) of a `size`-byte ping-pong from node `from` to `to`.
#[allow(clippy::too_many_arguments)]
fn pingpong(
    bed: &Bed,
    from: usize,
    to: usize,
    size: u64,
    seconds: f64,
    port: u16,
    spin: bool,
) -> Result<f64> {
    let exe = std::env::current_exe()?;
    let addr = format!("{}:{port}", bed.nodes[to].addr);
    let mut s = bed.in_node(to, &exe);
    s.args(["tcp-peer", "--serve", &addr, "--size", &size.to_string()]);
    let mut c = bed.in_node(from, &exe);
    if spin {
        s.arg("--spin");
    }
    let _server = spawn_ready(s)?;
    c.args([
        "tcp-peer",
        "--connect",
        &addr,
        "--size",
        &size.to_string(),
        "--seconds",
        &seconds.to_string(),
    ]);
    if spin {
        c.arg("--spin");
    }
    let o = c.output()?;
    if !o.status.success() {
        bail!("tcp-peer: {}", String::from_utf8_lossy(&o.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)?;
    v["p50_us"].as_f64().context("tcp-peer p50")
}

/// Aggregate MiB/s of TCP streams `pairs` (from, to) at once: iperf3 when
/// installed, else `tcp-peer --mode stream`. Returns (MiB/s, peer name).
pub(crate) fn streams(
    bed: &Bed,
    pairs: &[(usize, usize)],
    seconds: f64,
    port0: u16,
) -> Result<(f64, &'static str)> {
    let iperf = which("iperf3");
    let exe = std::env::current_exe()?;
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for (k, &(from, to)) in pairs.iter().enumerate() {
        let port = port0 + k as u16;
        let host = if from == to {
            "127.0.0.1".to_string()
        } else {
            bed.nodes[to].addr.clone()
        };
        let mut c = match &iperf {
            Some(ip) => {
                let mut s = bed.in_node(to, ip);
                // --forceflush: its banner reaches the pipe at once.
                s.args([
                    "-s",
                    "-1",
                    "--forceflush",
                    "-p",
                    &port.to_string(),
                    "-B",
                    &host,
                ]);
                servers.push(spawn_ready(s)?);
                let mut c = bed.in_node(from, ip);
                c.args([
                    "-c",
                    &host,
                    "-p",
                    &port.to_string(),
                    "-t",
                    &format!("{}", seconds.max(1.0).ceil() as u64),
                    "-J",
                ]);
                c
            }
            None => {
                let addr = format!("{host}:{port}");
                let mut s = bed.in_node(to, &exe);
                s.args(["tcp-peer", "--serve", &addr, "--mode", "stream"]);
                servers.push(spawn_ready(s)?);
                let mut c = bed.in_node(from, &exe);
                c.args([
                    "tcp-peer",
                    "--connect",
                    &addr,
                    "--mode",
                    "stream",
                    "--seconds",
                    &seconds.to_string(),
                ]);
                c
            }
        };
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        clients.push(c.spawn().context("spawn a TCP client")?);
    }
    let mut total = 0.0;
    for c in clients {
        let o = c.wait_with_output()?;
        if !o.status.success() {
            bail!(
                "TCP stream client failed: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)?;
        total += match &iperf {
            Some(_) => {
                v["end"]["sum_received"]["bits_per_second"]
                    .as_f64()
                    .context("iperf3 JSON without end.sum_received")?
                    / 8.0
                    / (1 << 20) as f64
            }
            None => v["mib_per_s"].as_f64().context("tcp-peer mib_per_s")?,
        };
    }
    drop(servers);
    Ok((
        total,
        if iperf.is_some() {
            "iperf3"
        } else {
            "tcp stream"
        },
    ))
}

fn which(prog: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

pub fn run(a: ClusterArgs) -> Result<()> {
    if a.repeats == 0 || a.seconds <= 0.0 {
        bail!("--repeats and --seconds must be positive");
    }
    let strata = crate::strata_exe()?;
    let mut rows: Vec<Row> = Vec::new();
    for &n in &a.nodes {
        // No remote tiers: the bulk path itself, not blobs moved toward
        // their readers (measured apart, `--remote-tiers`).
        let bed = started(&a, &strata, n, &a.ram, "0", false)?;
        let res = measure(&a, &bed, n, &mut rows);
        let _ = bed.cli(&["cluster", "stop"]);
        res?;
    }
    if a.remote_tiers {
        measure_remote_tiers(&a, &strata, &mut rows)?;
    }
    report(&a, &rows)
}

/// A bed of `n` nodes (RAM `ram`, `remote_tier` lent to each peer), its
/// cluster started.
fn started(
    a: &ClusterArgs,
    strata: &Path,
    n: usize,
    ram: &str,
    remote_tier: &str,
    toward_readers: bool,
) -> Result<Bed> {
    let bed = Bed::new(&BedSpec {
        nodes: n,
        ram: ram.into(),
        disk: None,
        start_timeout: "60s".into(),
        remote_tier: Some(remote_tier.into()),
        toward_readers,
        files_at_owner: false,
        pages_where_written: false,
        strata: strata.to_path_buf(),
        loopback: a.loopback,
        log: "warn".into(),
        dest_in: None,
        tls: a.tls,
    })?;
    let o = bed.cli(&["cluster", "start", "--launcher", bed.launcher()])?;
    if !o.status.success() {
        bail!(
            "cluster start on {n} nodes failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(bed)
}

/// Remote tiers on 2 nodes, each figure against the same workload without
/// them in the same run: (1) a client on node 0 puts and gets 1 MiB blobs
/// of a bucket node 0 owns while node 0's RAM (16 MiB) holds a quarter of
/// them — the rest goes to memory node 1 lends — against node 0 with room
/// in RAM; (2) a client on node 1 reads node 0's blobs, which move toward
/// it after three reads each, against the same with no remote tiers
/// (every read through node 0).
fn measure_remote_tiers(a: &ClusterArgs, strata: &Path, rows: &mut Vec<Row>) -> Result<()> {
    let size = 1u64 << 20;
    let row = |what: &str, peer: &str| Row {
        nodes: 2,
        bed: String::new(),
        what: what.into(),
        unit: "MiB/s".into(),
        strata: Vec::new(),
        peer: peer.into(),
        peer_values: Vec::new(),
        ratios: Vec::new(),
        lower_is_better: false,
    };
    let mut spill_put = row("1MiB put, own RAM full", "room in own RAM");
    let mut spill_get = row("1MiB get, own RAM full", "room in own RAM");
    let mut toward = row("1MiB get of node 0's, moved", "through node 0");
    let names = |bed: &Bed| bed.nodes.iter().map(|x| x.name.clone()).collect::<Vec<_>>();
    for r in 0..a.repeats {
        let one = |ram: &str, lend: &str, node: usize| -> Result<(f64, f64, String)> {
            let bed = started(a, strata, 2, ram, lend, true)?;
            let owned = buckets(&names(&bed))?;
            let res = kv_phases(&bed, &[(node, &owned[0])], size, a.seconds);
            let _ = bed.cli(&["cluster", "stop"]);
            let (put, get) = res?;
            Ok((mib_per_s(&put), mib_per_s(&get), bed.kind.to_string()))
        };
        let (sp, sg, kind) = one("16MiB", "1GiB", 0)?;
        let (lp, lg, _) = one("1GiB", "1GiB", 0)?;
        let (_, tg, _) = one("1GiB", "1GiB", 1)?;
        let (_, ng, _) = one("1GiB", "0", 1)?;
        for (row, v, peer) in [
            (&mut spill_put, sp, lp),
            (&mut spill_get, sg, lg),
            (&mut toward, tg, ng),
        ] {
            row.bed = kind.clone();
            row.strata.push(v);
            row.peer_values.push(peer);
            row.ratios.push(v / peer);
        }
        progress(2, &format!("remote tiers {}/{}", r + 1, a.repeats));
    }
    rows.extend([spill_put, spill_get, toward]);
    Ok(())
}

fn measure(a: &ClusterArgs, bed: &Bed, n: usize, rows: &mut Vec<Row>) -> Result<()> {
    let names: Vec<String> = bed.nodes.iter().map(|x| x.name.clone()).collect();
    let owned = buckets(&names)?;
    let kind = bed.kind.to_string();
    let remote = n > 1;
    let (src, dst) = if remote { (1, 0) } else { (0, 0) };
    let tag = if remote { "remote" } else { "local" };
    let row = |what: String, unit: &str, lower: bool, peer: &str| Row {
        nodes: n,
        bed: kind.clone(),
        what,
        unit: unit.into(),
        strata: Vec::new(),
        peer: peer.into(),
        peer_values: Vec::new(),
        ratios: Vec::new(),
        lower_is_better: lower,
    };
    let ls = format_size(a.latency_size);
    let mut put_lat = row(format!("{tag} {ls} put p50"), "µs", true, "");
    let mut get_lat = row(format!("{tag} {ls} get p50"), "µs", true, "");
    // The raw round trip with blocking reads, against the busy-polled one:
    // what waking a sleeping thread costs on this machine.
    let mut blocking = row(format!("raw {ls} ping-pong, blocking"), "µs", true, "");
    for r in 0..a.repeats {
        let (put, get) = kv_phases(bed, &[(src, &owned[dst])], a.latency_size, a.seconds)?;
        let (pp, gp) = (put.hist.p50_us(), get.hist.p50_us());
        let port = 7800 + 2 * r as u16;
        let (rtt, rtt_blocking) = if remote {
            (
                pingpong(bed, src, dst, a.latency_size, a.seconds, port, true)?,
                pingpong(bed, src, dst, a.latency_size, a.seconds, port + 1, false)?,
            )
        } else {
            (f64::NAN, f64::NAN)
        };
        for (row, v) in [
            (&mut put_lat, pp),
            (&mut get_lat, gp),
            (&mut blocking, rtt_blocking),
        ] {
            row.strata.push(v);
            row.peer = format!("ping-pong {ls}, spin");
            row.peer_values.push(rtt);
            row.ratios.push(v / rtt);
        }
        progress(n, &format!("latency {}/{}", r + 1, a.repeats));
    }
    rows.push(put_lat);
    rows.push(get_lat);
    if remote {
        blocking.what = format!("(raw {ls} ping-pong, blocking)");
        rows.push(blocking);
    }
    let pairs: Vec<(usize, usize)> = (0..n)
        .map(|i| (i, if remote { (i + 1) % n } else { i }))
        .collect();
    let workers: Vec<(usize, &str)> = pairs.iter().map(|&(i, t)| (i, owned[t].as_str())).collect();
    for &size in &a.sizes {
        let s = format_size(size);
        let mut put_bw = row(format!("{tag} {s} put, aggregate"), "MiB/s", false, "");
        let mut get_bw = row(format!("{tag} {s} get, aggregate"), "MiB/s", false, "");
        for r in 0..a.repeats {
            let (put, get) = kv_phases(bed, &workers, size, a.seconds)?;
            let (tcp, peer) = streams(bed, &pairs, a.seconds, 7900 + (r as u16) * 16)?;
            for (row, v) in [
                (&mut put_bw, mib_per_s(&put)),
                (&mut get_bw, mib_per_s(&get)),
            ] {
                row.strata.push(v);
                row.peer = format!("{peer} ×{}", pairs.len());
                row.peer_values.push(tcp);
                row.ratios.push(v / tcp);
            }
            progress(n, &format!("{s} {}/{}", r + 1, a.repeats));
        }
        rows.push(put_bw);
        rows.push(get_bw);
        if !remote {
            continue;
        }
        // One client alone (node 1 on node 0's data) against one TCP
        // stream: what the pipelining of one large call buys when the
        // machine is not already busy with other streams.
        let mut put_one = row(format!("{tag} {s} put, one client"), "MiB/s", false, "");
        let mut get_one = row(format!("{tag} {s} get, one client"), "MiB/s", false, "");
        for r in 0..a.repeats {
            let (put, get) = kv_phases(bed, &[(src, &owned[dst])], size, a.seconds)?;
            let (tcp, peer) = streams(bed, &[(src, dst)], a.seconds, 7950 + (r as u16) * 16)?;
            for (row, v) in [
                (&mut put_one, mib_per_s(&put)),
                (&mut get_one, mib_per_s(&get)),
            ] {
                row.strata.push(v);
                row.peer = format!("{peer} ×1");
                row.peer_values.push(tcp);
                row.ratios.push(v / tcp);
            }
            progress(n, &format!("{s} one client {}/{}", r + 1, a.repeats));
        }
        rows.push(put_one);
        rows.push(get_one);
    }
    Ok(())
}

fn progress(n: usize, what: &str) {
    eprintln!("bench cluster: {n} node(s): {what}");
}

fn report(a: &ClusterArgs, rows: &[Row]) -> Result<()> {
    if a.json {
        println!("{}", serde_json::to_string_pretty(rows)?);
        return Ok(());
    }
    println!(
        "{:>5} {:<9} {:<28} {:>10} {:>6} {:<20} {:>10} {:>18}",
        "NODES", "BED", "WHAT", "STRATA", "UNIT", "PEER", "PEER", "RATIO (RANGE)"
    );
    for r in rows {
        let (m, _, _) = median_min_max(&r.strata);
        let (p, _, _) = median_min_max(&r.peer_values);
        let ratio = r.ratio_text().unwrap_or_else(|| "-".into());
        println!(
            "{:>5} {:<9} {:<28} {:>10.1} {:>6} {:<20} {:>10} {:>18}",
            r.nodes,
            r.bed,
            r.what,
            m,
            r.unit,
            r.peer,
            if p.is_finite() {
                format!("{p:.1}")
            } else {
                "-".into()
            },
            ratio
        );
    }
    println!(
        "(ratios are strata ÷ peer: bandwidth higher is better, latency lower is better; \
         median of {} repeats, {} s per phase)",
        a.repeats, a.seconds
    );
    Ok(())
}

/// `tcp-peer`: the raw TCP reference.
pub fn run_tcp_peer(a: TcpPeerArgs) -> Result<()> {
    let size = a.size.clamp(1, 64 << 20) as usize;
    if let Some(addr) = &a.serve {
        let l = TcpListener::bind(addr).with_context(|| format!("listen on {addr}"))?;
        println!("ready");
        std::io::stdout().flush()?;
        let (mut s, _) = l.accept()?;
        s.set_nodelay(true)?;
        let mut buf = vec![0u8; if a.mode == "stream" { 1 << 20 } else { size }];
        if a.mode == "stream" {
            // Read until the client closes.
            while s.read(&mut buf)? > 0 {}
            return Ok(());
        }
        s.set_nonblocking(a.spin)?;
        loop {
            match read_full(&mut s, &mut buf, a.spin) {
                Ok(()) => write_full(&mut s, &buf)?,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }
    let addr = a.connect.as_deref().context("--serve or --connect")?;
    let mut s = connect_retry(addr)?;
    s.set_nodelay(true)?;
    let deadline = Duration::from_secs_f64(a.seconds);
    if a.mode == "stream" {
        let buf = vec![7u8; 1 << 20];
        let t = Instant::now();
        let mut sent = 0u64;
        while t.elapsed() < deadline {
            s.write_all(&buf)?;
            sent += buf.len() as u64;
        }
        s.shutdown(std::net::Shutdown::Write)?;
        // Wait for the server to have read everything.
        let mut b = [0u8; 1];
        let _ = s.read(&mut b);
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{}",
            serde_json::json!({"mib_per_s": sent as f64 / (1 << 20) as f64 / secs})
        );
        return Ok(());
    }
    let mut buf = vec![1u8; size];
    let mut h = Hist::new();
    s.set_nonblocking(a.spin)?;
    // Warm-up.
    for _ in 0..100 {
        write_full(&mut s, &buf)?;
        read_full(&mut s, &mut buf, a.spin)?;
    }
    let t = Instant::now();
    while t.elapsed() < deadline {
        let t0 = Instant::now();
        write_full(&mut s, &buf)?;
        read_full(&mut s, &mut buf, a.spin)?;
        h.record_ns(t0.elapsed().as_nanos() as u64);
    }
    println!(
        "{}",
        serde_json::json!({"p50_us": h.p50_us(), "p99_us": h.p99_us(), "n": h.count()})
    );
    Ok(())
}

fn connect_retry(addr: &str) -> Result<TcpStream> {
    let mut last = None;
    for _ in 0..100 {
        match TcpStream::connect(addr) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(last.map_or_else(|| anyhow::anyhow!("connect {addr}"), Into::into))
}
