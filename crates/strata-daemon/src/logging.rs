//! The daemon's log file: size-rotated in place.
//!
//! A detached daemon's stdout and stderr are its log file
//! (`<socket>.log`, opened by the launcher in append mode, 0600). The log
//! lines go to file descriptor 2 like any other output, so a panic message
//! lands in the same file. Past `daemon.log_size_max` the file is renamed
//! to `.1` (older ones shift up to `daemon.log_keep`, the oldest goes) and a
//! fresh file is put on descriptors 1 and 2 with `dup2`.
//!
//! **Architecture Invariant:** rotation happens only when descriptor 2 is
//! that very file (same device and inode), so a foreground daemon whose
//! output goes to a terminal, a pipe or systemd's journal is never
//! rotated; a failed rotation logs once and keeps writing to the old file.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The file descriptor 2 is, when it is the daemon's log file.
static LOG_PATH: OnceLock<PathBuf> = OnceLock::new();

/// Where the log goes: the file, if the daemon writes its log to one it
/// rotates (for `strata status`).
pub fn log_path() -> Option<&'static Path> {
    LOG_PATH.get().map(|p| p.as_path())
}

pub struct RotatingStderr {
    path: PathBuf,
    size_max_bytes: u64,
    keep: u32,
    /// Bytes in the current file (approximate: other writers to fd 2, such
    /// as a panic message, are not counted until the next rotation).
    written: AtomicU64,
    rotating: Mutex<()>,
    failed: AtomicBool,
}

impl RotatingStderr {
    /// Some when descriptor 2 is the file at `path`.
    pub fn attach(path: &Path, size_max_bytes: u64, keep: u32) -> Option<Arc<RotatingStderr>> {
        assert!(size_max_bytes > 0 && keep > 0);
        // SAFETY: descriptor 2 is open for the life of the process.
        let fd2 = unsafe { BorrowedFd::borrow_raw(2) };
        let st = rustix::fs::fstat(fd2).ok()?;
        let meta = std::fs::metadata(path).ok()?;
        if meta.dev() != st.st_dev || meta.ino() != st.st_ino {
            return None;
        }
        let _ = LOG_PATH.set(path.to_path_buf());
        Some(Arc::new(RotatingStderr {
            path: path.to_path_buf(),
            size_max_bytes,
            keep,
            written: AtomicU64::new(st.st_size as u64),
            rotating: Mutex::new(()),
            failed: AtomicBool::new(false),
        }))
    }

    fn rotated(&self, n: u32) -> PathBuf {
        let mut s = self.path.as_os_str().to_owned();
        s.push(format!(".{n}"));
        PathBuf::from(s)
    }

    fn rotate(&self) {
        let Ok(_g) = self.rotating.lock() else {
            return;
        };
        // Someone else rotated while we waited.
        if self.written.load(Ordering::Relaxed) < self.size_max_bytes {
            return;
        }
        let r = (|| -> std::io::Result<()> {
            // Bounded by `keep` (≤ 100).
            let _ = std::fs::remove_file(self.rotated(self.keep));
            for n in (1..self.keep).rev() {
                let from = self.rotated(n);
                if from.exists() {
                    std::fs::rename(&from, self.rotated(n + 1))?;
                }
            }
            std::fs::rename(&self.path, self.rotated(1))?;
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&self.path)?;
            for target in [1, 2] {
                // SAFETY: dup2 onto the process's own stdout/stderr; `f`
                // stays open for the call.
                if unsafe { libc::dup2(f.as_raw_fd(), target) } < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        })();
        match r {
            Ok(()) => self.written.store(0, Ordering::Relaxed),
            Err(e) => {
                // Keep writing to whatever descriptor 2 is; say so once.
                if !self.failed.swap(true, Ordering::Relaxed) {
                    let msg = format!(
                        "strata: cannot rotate the log {}: {e}; it keeps growing\n",
                        self.path.display()
                    );
                    write_fd2(msg.as_bytes());
                }
                self.written.store(0, Ordering::Relaxed);
            }
        }
    }
}

fn write_fd2(mut buf: &[u8]) {
    // Bounded: each round writes at least one byte or stops.
    while !buf.is_empty() {
        // SAFETY: buf is valid for its length; fd 2 is open.
        let n = unsafe { libc::write(2, buf.as_ptr().cast(), buf.len()) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        buf = &buf[n as usize..];
    }
}

/// One log line's writer: the line goes to descriptor 2 in one `write`
/// (O_APPEND keeps lines whole), then the size is checked.
pub struct LineWriter(Arc<RotatingStderr>);

impl std::io::Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write_fd2(buf);
        let total = self
            .0
            .written
            .fetch_add(buf.len() as u64, Ordering::Relaxed)
            + buf.len() as u64;
        if total >= self.0.size_max_bytes {
            self.0.rotate();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RotatingStderrMaker {
    type Writer = LineWriter;
    fn make_writer(&'a self) -> LineWriter {
        LineWriter(self.0.clone())
    }
}

/// The `MakeWriter` tracing's formatter takes.
#[derive(Clone)]
pub struct RotatingStderrMaker(pub Arc<RotatingStderr>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_on_stderr_is_rotated_past_its_size_keeping_the_newest() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.log");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .unwrap();
        // SAFETY: dup/dup2 of this process's descriptors 1 and 2 (rotation
        // replaces both), restored below.
        let saved = unsafe { libc::dup(2) };
        // SAFETY: as above.
        let saved1 = unsafe { libc::dup(1) };
        assert!(saved >= 0 && saved1 >= 0);
        // SAFETY: as above.
        assert!(unsafe { libc::dup2(f.as_raw_fd(), 2) } >= 0);
        drop(f);
        let r = RotatingStderr::attach(&p, 1 << 20, 2).expect("stderr is the log file");
        let mut w = LineWriter(r);
        let line = [b'~'; 1023];
        for i in 0..3584u32 {
            // 3.5 MiB of 1 KiB lines: three rotations.
            let mut l = line.to_vec();
            l[..4].copy_from_slice(&i.to_le_bytes().map(|b| b'a' + b % 26));
            l[4] = b'~';
            l.push(b'\n');
            w.write_all(&l).unwrap();
        }
        // SAFETY: restores the saved descriptors.
        unsafe {
            libc::dup2(saved, 2);
            libc::close(saved);
            libc::dup2(saved1, 1);
            libc::close(saved1);
        }
        let size = |q: &Path| std::fs::metadata(q).map(|m| m.len()).unwrap_or(0);
        let one = dir.path().join("d.log.1");
        let two = dir.path().join("d.log.2");
        // (Other tests of this process may write to descriptors 1 and 2
        // meanwhile: sizes are bounds, not exact.)
        assert!(!dir.path().join("d.log.3").exists(), "keep = 2");
        assert!(size(&one) >= 1 << 20, "a rotation happens at the size");
        assert!(size(&two) >= 1 << 20);
        assert!(size(&p) < (1 << 20) + (64 << 10), "{}", size(&p));
        // Lines stay whole across rotations.
        let mut ours = 0;
        for q in [&p, &one, &two] {
            let t = std::fs::read(q).unwrap();
            for l in t.split(|b| *b == b'\n').filter(|l| l.contains(&b'~')) {
                // Another test's unfinished line ("test x ... ") may precede
                // ours; ours, one write each, is whole at the end.
                assert!(l.len() >= 1023, "a torn line in {}", q.display());
                let mine = &l[l.len() - 1023..];
                assert!(
                    mine[..4].iter().all(u8::is_ascii_lowercase)
                        && mine[4..].iter().all(|b| *b == b'~'),
                    "a torn line in {}",
                    q.display()
                );
                ours += 1;
            }
        }
        assert!(ours >= 2048 + 512 - 8, "{ours} lines kept");
        assert_eq!(log_path(), Some(p.as_path()));
    }

    #[test]
    fn an_unrelated_file_is_never_attached() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.log");
        std::fs::write(&p, b"x").unwrap();
        // This test process's stderr is not that file.
        assert!(RotatingStderr::attach(&p, 1 << 20, 2).is_none());
        assert!(RotatingStderr::attach(&dir.path().join("absent"), 1 << 20, 2).is_none());
    }
}
