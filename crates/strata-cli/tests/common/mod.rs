//! A real daemon for integration tests: private socket, shm prefix and tier
//! directory per test, started with the real `strata` binary and stopped
//! (SIGTERM, then SIGKILL) when dropped.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static COUNTER: AtomicU32 = AtomicU32::new(0);

pub fn strata_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_strata"))
}

pub struct TestDaemon {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub child: Option<Child>,
    /// Its shared-memory prefix: what a killed daemon left in /dev/shm goes
    /// when the test ends (many SIGKILLed daemons filled /dev/shm).
    pub shm_prefix: String,
}

/// Tier sizes for a test daemon.
pub struct Tiers {
    pub ram: &'static str,
    pub disk: Option<&'static str>,
    pub extra_yaml: &'static str,
}

impl Default for Tiers {
    fn default() -> Self {
        Tiers {
            ram: "512MiB",
            disk: Some("2GiB"),
            extra_yaml: "",
        }
    }
}

impl TestDaemon {
    /// RAM 64 MiB + disk 128 MiB: small enough to fill in a test.
    pub fn small() -> TestDaemon {
        TestDaemon::start_with(Tiers {
            ram: "64MiB",
            disk: Some("128MiB"),
            extra_yaml: "",
        })
    }

    pub fn start() -> TestDaemon {
        TestDaemon::start_with(Tiers::default())
    }

    pub fn start_with(t: Tiers) -> TestDaemon {
        let mut d = TestDaemon::configured(t);
        d.spawn();
        d
    }

    /// A daemon's private directory and configuration, not started yet
    /// (`spawn`, `spawn_env`).
    pub fn configured(t: Tiers) -> TestDaemon {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = tempfile::Builder::new()
            .prefix("strata-test-")
            .tempdir()
            .expect("tempdir");
        let socket = dir.path().join("daemon.sock");
        let prefix = format!("strata-t{}-{}", std::process::id(), n);
        let mut yaml = format!(
            "daemon:\n  socket: {}\n  shm_prefix: {}\n  log: warn\nplacement:\n  lease_size: 1MiB\ndevices:\n  - name: ram\n    kind: ram\n    capacity: {}\n",
            socket.display(),
            prefix,
            t.ram
        );
        if let Some(d) = t.disk {
            yaml.push_str(&format!(
                "  - name: disk\n    kind: dir\n    path: {}\n    capacity: {}\n",
                dir.path().join("disk").display(),
                d
            ));
        }
        yaml.push_str(t.extra_yaml);
        let config = dir.path().join("strata.yaml");
        std::fs::write(&config, yaml).unwrap();
        TestDaemon {
            dir,
            config,
            socket,
            child: None,
            shm_prefix: prefix,
        }
    }

    /// Starts the daemon process (again, e.g. after a kill).
    pub fn spawn(&mut self) {
        self.spawn_env(&[]);
    }

    /// `spawn` with extra environment variables for the daemon only.
    pub fn spawn_env(&mut self, env: &[(&str, &str)]) {
        let log = std::fs::File::create(self.dir.path().join("daemon.log")).unwrap();
        let child = Command::new(strata_bin())
            .arg("--config")
            .arg(&self.config)
            .args(["daemon", "start", "--foreground"])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn strata daemon");
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            // Ready, not just listening: a daemon still starting answers
            // Ping with an error.
            if matches!(
                strata_client::control_request(
                    &self.socket,
                    &strata_proto::control::ControlRequest::Ping,
                ),
                Ok(strata_proto::control::ControlReply::Ok)
            ) {
                return;
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("daemon exited at start: {st}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("daemon did not come up; log:\n{}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    pub fn client(&self) -> strata_client::Client {
        strata_client::Client::connect_to(&self.socket).expect("connect to test daemon")
    }

    /// A `strata` command using this daemon's config.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(strata_bin());
        c.arg("--config").arg(&self.config);
        c.env("STRATA_SOCKET", &self.socket);
        c
    }

    pub fn status(&self) -> strata_proto::control::StatusReply {
        strata_client::status(&self.socket).expect("status")
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Stops gracefully and waits for the process.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill takes plain integers; a pid that is gone is an error return, not undefined behaviour.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(30) {
                if c.try_wait().unwrap().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        self.stop();
        remove_shm(&self.shm_prefix);
    }
}

/// The segments and lock of a dead daemon with shared-memory prefix
/// `prefix` (a clean stop removes them itself; a SIGKILL leaves them).
pub fn remove_shm(prefix: &str) {
    for suffix in ["-arena", "-ctl", "-index", "-statix", ".lock"] {
        let _ = std::fs::remove_file(format!("/dev/shm/{prefix}{suffix}"));
    }
    // the clients' segments: `<prefix>-c<id>-<pid>`
    let clients = format!("{prefix}-c");
    if let Ok(rd) = std::fs::read_dir("/dev/shm") {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(&clients) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
