//! A private `redis-server` to compare against: started on 127.0.0.1 on a
//! free port with persistence off (`--save '' --appendonly no`), driven with
//! the `redis` crate's sync API (one connection per thread, GET/SET), and
//! shut down when done.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::ycsb::{KvConn, KvStore};

const START_TIMEOUT: Duration = Duration::from_secs(15);

pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// `explicit`, else `redis-server` on PATH, else /usr/bin/redis-server.
    pub fn find(explicit: Option<&Path>) -> Result<PathBuf> {
        if let Some(p) = explicit {
            if p.is_file() {
                return Ok(p.to_path_buf());
            }
            bail!("--redis-server {}: no such file", p.display());
        }
        let on_path = std::env::var_os("PATH")
            .map(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join("redis-server"))
                    .find(|p| p.is_file())
            })
            .unwrap_or(None);
        if let Some(p) = on_path {
            return Ok(p);
        }
        let fallback = PathBuf::from("/usr/bin/redis-server");
        if fallback.is_file() {
            return Ok(fallback);
        }
        bail!(
            "--vs-redis needs redis-server, which is not installed (not on PATH, not /usr/bin/redis-server).\n\
             Install it with `apt-get install redis-server` (Debian/Ubuntu), or pass --redis-server PATH."
        )
    }

    pub fn start(bin: &Path) -> Result<RedisServer> {
        let port = {
            let l =
                TcpListener::bind("127.0.0.1:0").context("cannot find a free port on 127.0.0.1")?;
            l.local_addr()?.port()
        };
        let dir =
            std::env::temp_dir().join(format!("strata-bench-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let log = std::fs::File::create(dir.join("redis.log"))?;
        let child = Command::new(bin)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let mut s = RedisServer {
            child: Some(child),
            port,
            dir,
        };
        let started = Instant::now();
        loop {
            if let Ok(mut c) = redis::Client::open(s.url()).and_then(|c| c.get_connection()) {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return Ok(s);
                }
            }
            if let Some(st) = s.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                let log = std::fs::read_to_string(s.dir.join("redis.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                s.child = None;
                bail!(
                    "redis-server exited at start ({st}):\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            if started.elapsed() > START_TIMEOUT {
                bail!("redis-server did not answer on port {port} within {START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// SHUTDOWN NOSAVE, then wait (kill after 5 s).
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(mut c) = redis::Client::open(self.url()).and_then(|c| c.get_connection()) {
            let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut c);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                let _ = std::fs::remove_dir_all(&self.dir);
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

pub struct RedisStore {
    client: redis::Client,
}

impl RedisStore {
    pub fn new(url: &str) -> Result<RedisStore> {
        Ok(RedisStore {
            client: redis::Client::open(url)?,
        })
    }
}

pub struct RedisConn {
    con: redis::Connection,
}

impl KvConn for RedisConn {
    fn read(&mut self, key: &str, buf: &mut Vec<u8>) -> Result<bool> {
        let v: Option<Vec<u8>> = redis::cmd("GET")
            .arg(key)
            .query(&mut self.con)
            .map_err(|e| anyhow!("redis GET {key}: {e}"))?;
        match v {
            Some(v) => {
                *buf = v;
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn write(&mut self, key: &str, val: &[u8]) -> Result<()> {
        redis::cmd("SET")
            .arg(key)
            .arg(val)
            .query::<()>(&mut self.con)
            .map_err(|e| anyhow!("redis SET {key}: {e}"))
    }
}

impl KvStore for RedisStore {
    type Conn = RedisConn;
    fn name(&self) -> &'static str {
        "redis"
    }
    fn connect(&self) -> Result<RedisConn> {
        Ok(RedisConn {
            con: self.client.get_connection()?,
        })
    }
    fn reset(&self) -> Result<()> {
        let mut c = self.client.get_connection()?;
        redis::cmd("FLUSHALL").query::<()>(&mut c)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_is_a_clear_error() {
        let e = RedisServer::find(Some(Path::new("/nonexistent/redis-server"))).unwrap_err();
        assert!(e.to_string().contains("no such file"));
    }
}
