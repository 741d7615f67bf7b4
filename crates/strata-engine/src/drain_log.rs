//! The flusher's **event log**.
//!
//! The event log is a text file next to the socket (`<socket>.drain.log`),
//! one line per event:
//!
//! ```text
//! <unix time ns> ENQUEUE <path> <bytes>     a flush job was queued
//! <unix time ns> DEQUEUE <path> <bytes>     a worker started it
//! <unix time ns> DONE <path> <bytes>        it succeeded (bytes written)
//! <unix time ns> ERROR <path> <bytes> <error text>
//! <unix time ns> NOTE <text>                dropped events, truncation
//! ```
//!
//! Paths are written with `\n`, `\r` and `\\` escaped (`\\n`, `\\r`, `\\\\`).
//! The poller and the workers only format a line and `try_send` it on a
//! bounded queue (`EVENT_QUEUE_MAX`); a full queue drops the line and counts
//! it (reported as a NOTE). One writer thread appends lines; when the file
//! would exceed `EVENT_LOG_BYTES_MAX` it is truncated to empty and starts
//! with a NOTE saying so.
//!
//! **Architecture Invariant:** recording an event never blocks its caller.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Lines waiting for the writer; more are dropped (and counted).
pub const EVENT_QUEUE_MAX: usize = 65_536;
/// The log is truncated (with a note) before it would grow past this.
pub const EVENT_LOG_BYTES_MAX: u64 = 64 << 20;
/// The event log file of the daemon listening on `socket`.
pub fn event_log_path(socket: &Path) -> PathBuf {
    let mut s = socket.as_os_str().to_os_string();
    s.push(".drain.log");
    PathBuf::from(s)
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn escape(path: &str) -> String {
    if !path.contains(['\n', '\r', '\\']) {
        return path.to_string();
    }
    path.replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}

/// The cheap, cloneable sending side of the event log (never blocks).
#[derive(Clone)]
pub struct EventSink {
    tx: SyncSender<String>,
    dropped: Arc<AtomicU64>,
}

impl EventSink {
    fn send(&self, line: String) {
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// `ENQUEUE` / `DEQUEUE` / `DONE` with a byte count.
    pub fn event(&self, kind: &str, path: &str, bytes: u64) {
        self.send(format!("{} {kind} {} {bytes}\n", now_ns(), escape(path)));
    }

    pub fn error(&self, path: &str, bytes: u64, error: &str) {
        let e = error.replace(['\n', '\r'], " ");
        self.send(format!("{} ERROR {} {bytes} {e}\n", now_ns(), escape(path)));
    }
}

/// The event log: its sink and its writer thread.
pub struct EventLog {
    sink: Option<EventSink>,
    writer: Option<JoinHandle<()>>,
    pub path: PathBuf,
}

impl EventLog {
    /// Opens (appends to) `path` and starts the writer.
    pub fn start(path: &Path) -> std::io::Result<EventLog> {
        EventLog::start_capped(path, EVENT_LOG_BYTES_MAX, EVENT_QUEUE_MAX)
    }

    pub fn start_capped(path: &Path, cap_bytes: u64, queue: usize) -> std::io::Result<EventLog> {
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        let size = f.metadata()?.len();
        let (tx, rx) = mpsc::sync_channel::<String>(queue.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        let d = dropped.clone();
        let writer = std::thread::Builder::new()
            .name("strata-drainlog".into())
            .spawn(move || writer(f, size, cap_bytes, rx, d))?;
        Ok(EventLog {
            sink: Some(EventSink { tx, dropped }),
            writer: Some(writer),
            path: path.to_path_buf(),
        })
    }

    pub fn sink(&self) -> Option<EventSink> {
        self.sink.clone()
    }

    /// Closes this sink and waits for the writer; it ends once every other
    /// sink (the workers') is gone too.
    pub fn stop(&mut self) {
        self.sink = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

impl Drop for EventLog {
    fn drop(&mut self) {
        self.stop();
    }
}

fn writer(mut f: File, mut size: u64, cap: u64, rx: Receiver<String>, dropped: Arc<AtomicU64>) {
    let mut failed = false;
    // Lines are written in batches of at most this many bytes.
    let batch = ((cap / 4) as usize).clamp(1, 64 << 10);
    let mut put = |f: &mut File, size: &mut u64, line: &str| {
        if *size + line.len() as u64 > cap {
            let note = format!(
                "{} NOTE log truncated: it reached {} bytes (limit {cap})\n",
                now_ns(),
                *size
            );
            if f.set_len(0).is_ok() {
                *size = 0;
                if f.write_all(note.as_bytes()).is_ok() {
                    *size += note.len() as u64;
                }
            }
        }
        match f.write_all(line.as_bytes()) {
            Ok(()) => *size += line.len() as u64,
            Err(e) => {
                if !failed {
                    tracing::warn!("cannot write the drain event log: {e}");
                    failed = true;
                }
            }
        }
    };
    // Bounded by the queue: each round takes what is queued, writes it, and
    // sleeps in `recv` until more arrives or every sink is gone.
    while let Ok(first) = rx.recv() {
        let mut buf = String::with_capacity(4096);
        let mut line = Some(first);
        while let Some(l) = line {
            let lost = dropped.swap(0, Ordering::Relaxed);
            if lost > 0 {
                let note = format!("{} NOTE {lost} events dropped (queue full)\n", now_ns());
                if buf.len() + note.len() > batch {
                    put(&mut f, &mut size, &buf);
                    buf.clear();
                }
                buf.push_str(&note);
            }
            if buf.len() + l.len() > batch {
                put(&mut f, &mut size, &buf);
                buf.clear();
            }
            buf.push_str(&l);
            line = rx.try_recv().ok();
        }
        if !buf.is_empty() {
            put(&mut f, &mut size, &buf);
        }
    }
    // Every sink is gone: report drops that no later line carried.
    let lost = dropped.swap(0, Ordering::Relaxed);
    if lost > 0 {
        put(
            &mut f,
            &mut size,
            &format!("{} NOTE {lost} events dropped (queue full)\n", now_ns()),
        );
    }
}
