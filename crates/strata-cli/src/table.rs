//! Plain-text tables for humans.

use strata_proto::control::StatusReply;

pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(head: &[&str]) -> Table {
        Table {
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }
    /// Cells are shown with control characters escaped (a name may hold a
    /// newline or an ESC sequence: never sent raw to the terminal).
    pub fn row(&mut self, r: Vec<String>) {
        self.rows
            .push(r.into_iter().map(|c| printable(&c)).collect());
    }
    pub fn render(&self) -> String {
        let mut w: Vec<usize> = self.head.iter().map(|h| h.len()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if i < w.len() {
                    w[i] = w[i].max(c.chars().count());
                }
            }
        }
        let line = |cells: &[String]| -> String {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i > 0 {
                    s.push_str("  ");
                }
                let pad = w
                    .get(i)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(c.chars().count());
                s.push_str(c);
                if i + 1 < cells.len() {
                    s.push_str(&" ".repeat(pad));
                }
            }
            s.push('\n');
            s
        };
        let mut out = line(&self.head);
        for r in &self.rows {
            out.push_str(&line(r));
        }
        out
    }
}

/// `strata status [--json] [--watch [SECONDS]]`: exit 3 when no daemon
/// answers (at the first look, or when it goes away while watched).
pub fn status_command(
    socket: &std::path::Path,
    json: bool,
    watch: Option<f64>,
) -> anyhow::Result<std::process::ExitCode> {
    use std::io::Write;
    let every = match watch {
        Some(s) if !(s.is_finite() && (0.1..=3600.0).contains(&s)) => {
            anyhow::bail!("--watch {s}: give an interval between 0.1 and 3600 seconds")
        }
        Some(s) => Some(std::time::Duration::from_secs_f64(s)),
        None => None,
    };
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut out = std::io::stdout().lock();
    loop {
        let st = match strata_client::status(socket) {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "strata: no daemon running at {} ({e}); start one with `strata daemon start`",
                    socket.display()
                );
                return Ok(std::process::ExitCode::from(3));
            }
        };
        let text = match (json, every.is_some()) {
            (true, false) => format!("{}\n", serde_json::to_string_pretty(&st)?),
            (true, true) => format!("{}\n", serde_json::to_string(&st)?),
            (false, _) => status_table(&st),
        };
        let Some(every) = every else {
            // A closed pipe (`strata status | head -1`) is not an error.
            match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e.into()),
                _ => return Ok(std::process::ExitCode::SUCCESS),
            }
        };
        if !json {
            // A terminal redraws in place; a pipe gets one table per refresh.
            let head = format!(
                "every {:.1}s (Ctrl-C to stop)  {}\n",
                every.as_secs_f64(),
                humantime_now()
            );
            // (errors show at the table's write below)
            if tty {
                let _ = out.write_all(b"\x1b[H\x1b[2J");
            }
            let _ = out.write_all(head.as_bytes());
        }
        // A closed pipe (`| head`) ends the watch quietly.
        if out
            .write_all(text.as_bytes())
            .and_then(|_| out.flush())
            .is_err()
        {
            return Ok(std::process::ExitCode::SUCCESS);
        }
        std::thread::sleep(every);
    }
}

/// The local wall-clock time as `HH:MM:SS` (UTC when the zone is unknown).
fn humantime_now() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as libc::time_t)
        .unwrap_or(0);
    // SAFETY: localtime_r writes only into `tm`, which lives on our stack.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return format!("{t}");
    }
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}

pub fn status_table(st: &StatusReply) -> String {
    let mut out = format!(
        "strata daemon pid {}  node {}  up {:.0}s  socket {}\nclients {}  buckets {}/{}  blobs {}/{}  requests {}  malformed {}  policy {}\n\n",
        st.pid, st.node_id, st.uptime_s, st.socket, st.clients, st.buckets, st.buckets_max, st.blobs, st.blobs_max, st.requests_total, st.malformed_total, st.policy
    );
    let mut extra = String::new();
    if let Some(m) = &st.metrics {
        extra.push_str(&format!("metrics {m}  "));
    }
    extra.push_str(&format!("log {}", st.log.as_deref().unwrap_or("stderr")));
    out.insert_str(out.len() - 1, &format!("{extra}\n"));
    let mut t = Table::new(&[
        "TIER", "KIND", "CAPACITY", "USED", "USE%", "EXTENTS", "DIRTY", "LEASED", "SPILLED",
        "VOLATILE", "PATH",
    ]);
    for tier in &st.tiers {
        let pct = if tier.capacity_bytes > 0 {
            100.0 * tier.used_bytes as f64 / tier.capacity_bytes as f64
        } else {
            0.0
        };
        t.row(vec![
            tier.name.clone(),
            tier.kind.clone(),
            format_size(tier.capacity_bytes),
            format_size(tier.used_bytes),
            // Spilled bytes are beyond the capacity: shown as "100.0+" (SPILLED says how much).
            if tier.used_bytes > tier.capacity_bytes {
                format!("{:.1}+", pct.min(100.0))
            } else {
                format!("{pct:.1}")
            },
            tier.blob_count.to_string(),
            format_size(tier.dirty_bytes),
            format_size(tier.leased_bytes),
            format_size(tier.spilled_bytes),
            if tier.volatile {
                "yes".into()
            } else {
                "no".into()
            },
            if tier.kind == "remote" {
                // Memory another node lends this one (`remote:NAME`).
                let by = tier.name.strip_prefix("remote:").unwrap_or(&tier.name);
                match tier.lost_blobs {
                    0 => format!("(memory {by} lends)"),
                    n => format!("(memory {by} lends; {n} blobs lost when it restarted)"),
                }
            } else if tier.path.is_empty() {
                "(shared memory)".into()
            } else {
                tier.path.clone()
            },
        ]);
    }
    out.push_str(&t.render());
    if !st.quotas.is_empty() {
        let mut q = Table::new(&["QUOTA", "LIMIT", "USED", "USE%"]);
        for x in &st.quotas {
            q.row(vec![
                x.rule.clone(),
                format_size(x.limit_bytes),
                format_size(x.used_bytes),
                format!(
                    "{:.0}%",
                    100.0 * x.used_bytes as f64 / x.limit_bytes.max(1) as f64
                ),
            ]);
        }
        out.push('\n');
        out.push_str(&q.render());
    }
    if let Some(ix) = &st.get_index {
        out.push_str(&format!(
            "get index: {} of {} entries published, {} direct reads (no round trip)\n",
            ix.published, ix.entries, ix.direct_reads_total
        ));
    }
    if let Some(ix) = &st.stat_index {
        out.push_str(&format!(
            "stat index: {} of {} entries published ({} published, {} forgotten on a change since start)\n",
            ix.published, ix.entries, ix.published_total, ix.forgotten_total
        ));
    }
    if let Some(f) = &st.flush {
        out.push_str(&if f.yielding {
            format!(
                "drain: yielding to busy clients ({} of at most {} background jobs, at most {}, workers at nice {}; full speed {} ms after their last write)\n",
                f.in_flight,
                f.busy_jobs,
                if f.busy_bandwidth_max_mib_s > 0.0 { format!("{:.0} MiB/s", f.busy_bandwidth_max_mib_s) } else { "any bandwidth".into() },
                f.nice,
                f.busy_window_ms
            )
        } else {
            format!(
                "drain: full speed ({} jobs in flight, limit {}; workers at nice {})\n",
                f.in_flight, f.concurrency, f.nice
            )
        });
    }
    out.push_str(&files_line(st));
    out.push_str(&journal_lines(st));
    out.push_str(&crate::trace::status_lines(st));
    out.push_str(&organizer_line(st));
    out.push_str(&cluster_lines(st));
    out
}

/// A cluster member's view of its peers (nothing outside a cluster).
fn cluster_lines(st: &StatusReply) -> String {
    let Some(c) = &st.cluster else {
        return String::new();
    };
    let up = c.peers.iter().filter(|p| p.state == "up").count();
    let mut out = format!(
        "\ncluster: node {} ({}, {}) of {} from {}; {up}/{} up{}\n",
        c.node,
        c.name,
        c.address,
        c.peers.len(),
        c.source,
        c.peers.len(),
        if c.tls {
            format!("; TLS, {} bulk relays", c.tls_relays)
        } else {
            String::new()
        }
    );
    let mut t = Table::new(&[
        "NODE",
        "NAME",
        "ADDRESS",
        "STATE",
        "LAST SEEN",
        "RTT",
        "ERROR",
    ]);
    for p in &c.peers {
        t.row(vec![
            p.node.to_string(),
            p.name.clone(),
            p.address.clone(),
            p.state.clone(),
            p.last_seen_s
                .map_or("never".into(), |s| format!("{s:.1}s ago")),
            p.rtt_us.map_or("-".into(), |us| format!("{us:.0}µs")),
            p.error.clone(),
        ]);
    }
    out.push_str(&t.render());
    out
}

/// What `status` says about files (the adapters' file model), totals since the start.
pub fn files_line(st: &StatusReply) -> String {
    let f = &st.files;
    let read = f.read_hit_bytes_total + f.read_dest_bytes_total;
    let hit = if read > 0 {
        format!(
            " ({:.1} % hits)",
            100.0 * f.read_hit_bytes_total as f64 / read as f64
        )
    } else {
        String::new()
    };
    format!(
        "\nfiles  {} ({} dirty, {})  written {}  read from buffer {} / destination {}{}  flushed {}  evicted {}  written through {}  fills declined {}{}{}{}{}{}{}{}{}\n",
        f.files,
        f.dirty_files,
        format_size(f.dirty_bytes),
        format_size(f.write_bytes_total),
        format_size(f.read_hit_bytes_total),
        format_size(f.read_dest_bytes_total),
        hit,
        format_size(f.flushed_bytes_total),
        format_size(f.evicted_bytes_total),
        format_size(f.write_through_bytes_total),
        format_size(f.fill_declined_bytes_total),
        if f.flush_errors_total > 0 { format!("  FLUSH ERRORS {} (see `strata drain status`)", f.flush_errors_total) } else { String::new() },
        if f.outside_changes_total > 0 { format!("  changed outside strata {} (cached copies dropped)", f.outside_changes_total) } else { String::new() },
        if f.conflicts_total > 0 { format!("  CONFLICTS {} (outside versions kept as *.strata-outside-*, see daemon.log)", f.conflicts_total) } else { String::new() },
        if f.published_pages_total > 0 { format!("  pages other nodes hold {} published (cluster.pages_where_written)", f.published_pages_total) } else { String::new() },
        if f.shadows_swept_total > 0 { format!("  held pages of {} files gone at their owners dropped", f.shadows_swept_total) } else { String::new() },
        if f.shadow_pages_flushed_total > 0 { format!("  held pages their owners flushed (evictable) {}", f.shadow_pages_flushed_total) } else { String::new() },
        if f.replica_write_bytes_total > 0 { format!("  replicas of other nodes' pages: {} copied here, {} read here", format_size(f.replica_write_bytes_total), format_size(f.replica_read_bytes_total)) } else { String::new() },
        if f.read_ahead_hints_total > 0 { format!("  remote read-ahead hints {} ({} dropped: worker busy)", f.read_ahead_hints_total, f.read_ahead_hints_dropped_total) } else { String::new() },
    )
}

/// What `status` says about the buffer organizer.
pub fn organizer_line(st: &StatusReply) -> String {
    let Some(o) = &st.organizer else {
        return String::new();
    };
    if !o.enabled {
        return "organizer  off (organizer.enabled: false, or a single tier)\n".into();
    }
    let bw = if o.bandwidth_max_mib_s > 0.0 {
        format!("{:.0} MiB/s max", o.bandwidth_max_mib_s)
    } else {
        "unlimited".into()
    };
    let scores: Vec<String> = o.tier_scores.iter().map(|s| format!("{s:.3}")).collect();
    format!(
        "organizer  promoted {} ({})  demoted {} ({})  toward readers {}  discarded {}  failed {}  requests {} ({} dropped, {} queued)  {}  tier scores {}\n",
        o.promoted_blobs,
        format_size(o.promoted_bytes),
        o.demoted_blobs,
        format_size(o.demoted_bytes),
        o.moved_toward_readers,
        o.discarded_moves,
        o.failed_moves,
        o.requests_total,
        o.requests_dropped,
        o.requests_queued,
        bw,
        scores.join("/"),
    )
}

/// What `status` says about durability: the journal, or why there is none.
fn journal_lines(st: &StatusReply) -> String {
    let Some(j) = &st.journal else {
        let volatile_only = st.tiers.iter().all(|t| t.volatile);
        return if volatile_only {
            "
journal  none: every tier is volatile — buffered data is lost if the daemon dies; fsync waits for the destination
".into()
        } else {
            "
journal  disabled (journal.enabled: false) — data on non-volatile tiers is lost if the daemon dies
"
            .into()
        };
    };
    let mut s = format!(
        "
journal  {}  {}  {} records  synced {}/{}  {} fsyncs journaled  {} relaxed  {} compactions{}
",
        j.path,
        format_size(j.file_bytes),
        j.live_records,
        j.synced_seq,
        j.written_seq,
        j.journal_syncs,
        j.relaxed_syncs,
        j.compactions,
        if j.quarantined_bytes > 0 {
            format!(
                "  {} freed space awaiting sync",
                format_size(j.quarantined_bytes)
            )
        } else {
            String::new()
        }
    );
    if j.inline_max_bytes > 0 {
        s.push_str(&format!(
            "journal  {} of fsync'ed pages inside the journal (max {}), {} pages since start
",
            format_size(j.inline_bytes),
            format_size(j.inline_max_bytes),
            j.inline_pages
        ));
    }
    if j.failed {
        s.push_str(&format!(
            "journal  FAILED: {} — fsync waits for the destination
",
            j.error.as_deref().unwrap_or("unknown error")
        ));
    }
    let r = &j.replay;
    if r.records > 0 || r.corrupt_ranges > 0 {
        s.push_str(&format!(
            "replayed {} records at start in {} ms: {} buckets ({} files, {} to flush), {} blobs, {}{}{}{}{}
",
            r.records,
            r.elapsed_ms,
            r.buckets,
            r.files,
            r.dirty_files,
            r.blobs,
            format_size(r.bytes),
            if r.torn_tail_bytes > 0 { format!(", incomplete last record ignored ({} B)", r.torn_tail_bytes) } else { String::new() },
            if r.dropped_blobs > 0 { format!(", {} blobs NOT restored", r.dropped_blobs) } else { String::new() },
            if r.crc_mismatches > 0 { format!(", {} checksum mismatches", r.crc_mismatches) } else { String::new() },
            if r.held_runs > 0 { format!(", {} runs of pages other nodes hold", r.held_runs) } else { String::new() },
        ));
        if r.corrupt_ranges > 0 {
            s.push_str(&format!("WARNING  the journal had {} corrupt ranges ({} bytes), not applied; a copy is kept next to it
", r.corrupt_ranges, r.corrupt_bytes));
        }
        for m in &r.messages {
            s.push_str(&format!(
                "  {m}
"
            ));
        }
    }
    s
}

/// Bytes for humans: 0B, 512B, 4.0KiB, 17.1MiB, 11.8GiB.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1}{}", UNITS[u])
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(super::format_size(0), "0B");
        assert_eq!(super::format_size(1023), "1023B");
        assert_eq!(super::format_size(4096), "4.0KiB");
        assert_eq!(super::format_size(12052 << 20), "11.8GiB");
    }
}

/// `s` with control characters escaped (`\n`, `\u{1b}`, …).
pub fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod printable_tests {
    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(super::printable("a\nb\u{1b}[31mc"), "a\\nb\\u{1b}[31mc");
        assert_eq!(super::printable("plain é"), "plain é");
    }
}
