//! strata-cluster: **who the nodes of a strata cluster are**.
//!
//! A cluster is an ordered list of nodes; a node's id is its position in
//! that list (carried in the top bits of bucket and blob ids), its name is
//! what the owner function hashes ([`strata_meta::Ring`]), and its address
//! is where its daemon listens. The list comes from the first source that
//! is present ([`discover`]): `--hosts` (Slurm hostlist syntax), `--hostfile`,
//! `SLURM_JOB_NODELIST`, `PBS_NODEFILE`, `LSB_HOSTS`, the config's
//! `cluster.hosts`. None of them: no cluster, one node, exactly as before.
//!
//! **Architecture Invariant:** the same inputs give the same list, ids and
//! ring on every node and in every process; every list is bounded
//! ([`NODES_MAX`]); a malformed entry is an error naming its source (and
//! line), never a silently dropped host.
//!
//! **API Boundary:** pure — reads only the files and variables it is
//! given (the environment through a closure, so tests inject it); no
//! network, no name resolution.
#![forbid(unsafe_code)]

pub mod hostlist;

use std::path::{Path, PathBuf};
use strata_meta::{NodeId, Ring};

/// Nodes one cluster may have (node ids are 16 bits in blob ids; the ring
/// bounds it further).
pub const NODES_MAX: usize = strata_meta::ring::RING_NODES_MAX;
/// Bytes of a hostfile read at most.
pub const HOSTFILE_BYTES_MAX: u64 = 16 << 20;

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Position in the list: stable for a given list.
    pub id: NodeId,
    /// Host name (what the owner function hashes, what launchers use).
    pub name: String,
    /// An explicit address (`node03=10.1.0.3`); else the name is resolved.
    pub addr: Option<String>,
    /// An explicit port (`node03:7700`); else the cluster's port.
    pub port: Option<u16>,
}

impl Node {
    /// `host:port` to connect to, with `default_port` when none was given.
    pub fn endpoint(&self, default_port: u16) -> String {
        let host = self.addr.as_deref().unwrap_or(&self.name);
        let port = self.port.unwrap_or(default_port);
        if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    }
}

/// Where the node list came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Hosts,
    Hostfile(PathBuf),
    Slurm,
    Pbs(PathBuf),
    Lsf,
    Config,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Hosts => write!(f, "--hosts"),
            Source::Hostfile(p) => write!(f, "--hostfile {}", p.display()),
            Source::Slurm => write!(f, "SLURM_JOB_NODELIST"),
            Source::Pbs(p) => write!(f, "PBS_NODEFILE ({})", p.display()),
            Source::Lsf => write!(f, "LSB_HOSTS"),
            Source::Config => write!(f, "the config's cluster.hosts"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("{source_name}: {error}")]
    Hostlist {
        source_name: String,
        error: hostlist::HostlistError,
    },
    #[error("{source_name}, line {line}: {what}")]
    Entry {
        source_name: String,
        line: usize,
        what: String,
    },
    #[error("{source_name}: node {name:?} is listed twice with different addresses or ports")]
    Conflict { source_name: String, name: String },
    #[error("{source_name}: {count} nodes, at most {NODES_MAX}")]
    TooMany { source_name: String, count: usize },
    #[error("{source_name}: lists no host")]
    Empty { source_name: String },
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// What [`discover`] looks at.
pub struct Inputs<'a> {
    /// `--hosts` (Slurm hostlist syntax; entries may carry `=addr`, `:port`).
    pub hosts: Option<&'a str>,
    /// `--hostfile F`.
    pub hostfile: Option<&'a Path>,
    /// The config's `cluster.hosts` (each element a hostlist).
    pub config_hosts: &'a [String],
    /// The environment (`std::env::var` in production).
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

/// The cluster's nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub nodes: Vec<Node>,
    pub source: Source,
}

impl Membership {
    /// The owner function's ring over these nodes.
    pub fn ring(&self) -> Ring {
        let names: Vec<&str> = self.nodes.iter().map(|n| n.name.as_str()).collect();
        // Names were checked unique and non-empty, and their count bounded.
        Ring::new(&names).expect("a membership is a valid ring")
    }

    /// The node called `name` (its host name or its explicit address).
    pub fn find(&self, name: &str) -> Option<&Node> {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .or_else(|| self.nodes.iter().find(|n| n.addr.as_deref() == Some(name)))
    }

    /// SHA-256 of the node list and the default port: two daemons agree on
    /// the cluster when their digests are equal.
    pub fn digest(&self, default_port: u16) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(b"strata-membership-v1\0");
        h.update(default_port.to_le_bytes());
        for n in &self.nodes {
            h.update(n.endpoint(default_port).as_bytes());
            h.update(b"\0");
            h.update(n.name.as_bytes());
            h.update(b"\0");
        }
        h.finalize().into()
    }

    /// The hosts in the `--hosts` syntax (what a daemon started on each
    /// node is given, so all agree on one list).
    pub fn to_hosts_arg(&self) -> String {
        let mut out = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&n.name);
            if let Some(a) = &n.addr {
                out.push('=');
                if a.contains(':') {
                    out.push('[');
                    out.push_str(a);
                    out.push(']');
                } else {
                    out.push_str(a);
                }
            }
            if let Some(p) = n.port {
                out.push(':');
                out.push_str(&p.to_string());
            }
        }
        out
    }
}

/// Splits one entry `name[=addr][:port]`.
fn entry(text: &str) -> Result<(String, Option<String>, Option<u16>), String> {
    let (name, rest) = match text.split_once('=') {
        Some((n, a)) => (n, Some(a)),
        None => (text, None),
    };
    let port_of = |s: &str| -> Result<u16, String> {
        s.parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("bad port {s:?} in {text:?}"))
    };
    let (name, mut port) = match (rest, name.rsplit_once(':')) {
        (None, Some((n, p))) => (n, Some(port_of(p)?)),
        _ => (name, None),
    };
    let good_name = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    };
    if !good_name(name) {
        return Err(format!("bad host name {name:?} in {text:?}"));
    }
    let addr = match rest {
        None => None,
        Some(a) => {
            // `[v6]:port`, `[v6]`, `v4:port`, `v4` or a name.
            let (host, p) = if let Some(r) = a.strip_prefix('[') {
                let (h, tail) = r
                    .split_once(']')
                    .ok_or_else(|| format!("unclosed '[' in {text:?}"))?;
                match tail.strip_prefix(':') {
                    Some(p) => (h, Some(p)),
                    None if tail.is_empty() => (h, None),
                    None => return Err(format!("bad address {a:?} in {text:?}")),
                }
            } else {
                match a.split_once(':') {
                    Some((h, p)) => (h, Some(p)),
                    None => (a, None),
                }
            };
            let ok = !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b));
            if !ok {
                return Err(format!("bad address {a:?} in {text:?}"));
            }
            if let Some(p) = p {
                port = Some(port_of(p)?);
            }
            Some(host.to_string())
        }
    };
    Ok((name.to_string(), addr, port))
}

/// Builds the node list from (line, entry) pairs; identical repeats (a
/// PBS node file lists a host once per core) collapse onto the first.
fn build(source: Source, entries: Vec<(usize, String)>) -> Result<Membership, MembershipError> {
    let source_name = source.to_string();
    let mut nodes: Vec<Node> = Vec::new();
    for (line, text) in entries {
        let (name, addr, port) = entry(&text).map_err(|what| MembershipError::Entry {
            source_name: source_name.clone(),
            line,
            what,
        })?;
        if let Some(prev) = nodes.iter().find(|n| n.name == name) {
            if prev.addr != addr || prev.port != port {
                return Err(MembershipError::Conflict { source_name, name });
            }
            continue;
        }
        if addr.is_some() && nodes.iter().any(|n| n.addr == addr && n.port == port) {
            return Err(MembershipError::Entry {
                source_name,
                line,
                what: format!("{text:?}: another node has the same address and port"),
            });
        }
        if nodes.len() >= NODES_MAX {
            return Err(MembershipError::TooMany {
                source_name,
                count: NODES_MAX + 1,
            });
        }
        nodes.push(Node {
            id: nodes.len() as NodeId,
            name,
            addr,
            port,
        });
    }
    if nodes.is_empty() {
        return Err(MembershipError::Empty { source_name });
    }
    Ok(Membership { nodes, source })
}

fn expand_list(
    source: &Source,
    list: &str,
    line: usize,
) -> Result<Vec<(usize, String)>, MembershipError> {
    hostlist::expand(list)
        .map(|v| v.into_iter().map(|h| (line, h)).collect())
        .map_err(|error| MembershipError::Hostlist {
            source_name: if line > 0 {
                format!("{source}, line {line}")
            } else {
                source.to_string()
            },
            error,
        })
}

fn read_bounded(path: &Path) -> Result<String, MembershipError> {
    use std::io::Read;
    let read = |path: &Path| -> std::io::Result<String> {
        let mut s = String::new();
        std::fs::File::open(path)?
            .take(HOSTFILE_BYTES_MAX)
            .read_to_string(&mut s)?;
        Ok(s)
    };
    read(path).map_err(|error| MembershipError::Read {
        path: path.to_path_buf(),
        error,
    })
}

/// A host file: one host (or hostlist) per line, `#` comments, optional
/// `=addr` and `:port`. PBS node files have the same shape (a host per
/// line, repeated per core).
fn hostfile(source: Source, path: &Path) -> Result<Membership, MembershipError> {
    let text = read_bounded(path)?;
    let mut entries = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        // `host slots=4` (Open MPI hostfiles): the host is the first word,
        // the others must be `key=value`.
        let mut words = line.split_whitespace();
        let host = words.next().unwrap_or(line);
        if let Some(w) = words.find(|w| !w.contains('=') || w.starts_with('=')) {
            return Err(MembershipError::Entry {
                source_name: source.to_string(),
                line: i + 1,
                what: format!("bad host name {line:?} (unexpected {w:?})"),
            });
        }
        entries.extend(expand_list(&source, host, i + 1)?);
    }
    build(source, entries)
}

/// The cluster's nodes from the first source present, or `None` (one node,
/// no cluster).
pub fn discover(i: &Inputs<'_>) -> Result<Option<Membership>, MembershipError> {
    if let Some(h) = i.hosts {
        let s = Source::Hosts;
        let e = expand_list(&s, h, 0)?;
        return build(s, e).map(Some);
    }
    if let Some(p) = i.hostfile {
        return hostfile(Source::Hostfile(p.to_path_buf()), p).map(Some);
    }
    let var = |k: &str| (i.env)(k).filter(|v| !v.trim().is_empty());
    if let Some(h) = var("SLURM_JOB_NODELIST") {
        let s = Source::Slurm;
        let e = expand_list(&s, &h, 0)?;
        return build(s, e).map(Some);
    }
    if let Some(p) = var("PBS_NODEFILE") {
        let p = PathBuf::from(p);
        return hostfile(Source::Pbs(p.clone()), &p).map(Some);
    }
    if let Some(h) = var("LSB_HOSTS") {
        let e = h.split_whitespace().map(|w| (0, w.to_string())).collect();
        return build(Source::Lsf, e).map(Some);
    }
    if !i.config_hosts.is_empty() {
        let s = Source::Config;
        let mut e = Vec::new();
        for (n, h) in i.config_hosts.iter().enumerate() {
            let hosts = hostlist::expand(h).map_err(|error| MembershipError::Hostlist {
                source_name: format!("{s}, entry {}", n + 1),
                error,
            })?;
            e.extend(hosts.into_iter().map(|h| (n + 1, h)));
        }
        return build(s, e).map(Some);
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
