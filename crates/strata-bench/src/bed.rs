//! A test bed of "nodes" on one machine: each node is a network namespace
//! (`ip netns`, a veth pair to a private bridge, an address in a private
//! range) with its own daemon config — socket, shared-memory prefix, tiers —
//! and all share one destination directory and one cluster secret, as a
//! job's nodes share a parallel file system and a home directory. Where
//! namespaces cannot be made (not root, no `ip`), nodes are distinct
//! 127.x.y.z addresses instead; [`Bed::kind`] says which ran, and the tests
//! print it. Used by `strata bench cluster` and by the cluster tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// What a bed is made of.
#[derive(Debug, Clone)]
pub struct BedSpec {
    pub nodes: usize,
    /// RAM tier capacity per node (`128MiB`).
    pub ram: String,
    /// A directory tier per node, of this capacity.
    pub disk: Option<String>,
    /// `cluster.start_timeout`.
    pub start_timeout: String,
    /// `cluster.remote_tier` (None: the default).
    pub remote_tier: Option<String>,
    /// `cluster.toward_readers`.
    pub toward_readers: bool,
    /// `cluster.files_at_owner`, and the adapter buffers the shared
    /// destination directory (DEFAULT mode, 64 KiB pages).
    pub files_at_owner: bool,
    /// `cluster.pages_where_written` (with `files_at_owner`).
    pub pages_where_written: bool,
    /// The `strata` executable the nodes run.
    pub strata: PathBuf,
    /// Skip the namespaces even where they could be made.
    pub loopback: bool,
    /// The daemons' log level.
    pub log: String,
    /// The shared destination is a fresh directory inside this one (a
    /// mount of the file system to drain to); default: `dest` inside the
    /// bed's own directory.
    pub dest_in: Option<PathBuf>,
    /// `cluster.tls: true` (the auto files, made by `cluster start`).
    pub tls: bool,
}

pub struct BedNode {
    pub name: String,
    pub addr: String,
    /// Its network namespace (None: loopback fallback).
    pub netns: Option<String>,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub shm_prefix: String,
}

pub struct Bed {
    pub dir: tempfile::TempDir,
    pub strata: PathBuf,
    pub nodes: Vec<BedNode>,
    /// "netns" or "loopback".
    pub kind: &'static str,
    bridge: Option<String>,
    /// `--hosts` of the bed.
    pub hosts: String,
    /// `--config` template (`{name}`).
    pub config_template: String,
    pub dest: PathBuf,
}

fn run(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The third octet of a 10.213.x.0/24 no interface of this machine has an
/// address in, starting at `first`: two beds on one subnet (another run's,
/// or a hand bed left up) would answer each other's daemons. `first` when
/// every subnet is taken or the addresses cannot be listed.
fn free_net(first: u8) -> u8 {
    let Ok(out) = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
    else {
        return first;
    };
    let used = String::from_utf8_lossy(&out.stdout).into_owned();
    // Bounded: 256 candidates.
    (0..=255u8)
        .map(|k| first.wrapping_add(k))
        .find(|net| !used.contains(&format!(" 10.213.{net}.")))
        .unwrap_or(first)
}

fn try_netns(id: &str, n: usize, net: u8) -> Option<(String, Vec<(String, String)>)> {
    let bridge = format!("{id}br");
    if !run(&["ip", "link", "add", &bridge, "type", "bridge"]) {
        return None;
    }
    let ok = run(&[
        "ip",
        "addr",
        "add",
        &format!("10.213.{net}.254/24"),
        "dev",
        &bridge,
    ]) && run(&["ip", "link", "set", &bridge, "up"]);
    let mut made = Vec::new();
    let mut good = ok;
    for i in 0..n {
        if !good {
            break;
        }
        let ns = format!("{id}n{i}");
        let (host_end, ns_end) = (format!("{id}v{i}"), format!("{id}p{i}"));
        let addr = format!("10.213.{net}.{}", i + 1);
        good = run(&["ip", "netns", "add", &ns])
            && run(&[
                "ip", "link", "add", &host_end, "type", "veth", "peer", "name", &ns_end,
            ])
            && run(&["ip", "link", "set", &host_end, "master", &bridge])
            && run(&["ip", "link", "set", &host_end, "up"])
            && run(&["ip", "link", "set", &ns_end, "netns", &ns])
            && run(&["ip", "netns", "exec", &ns, "ip", "link", "set", "lo", "up"])
            && run(&[
                "ip",
                "netns",
                "exec",
                &ns,
                "ip",
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                &ns_end,
            ])
            && run(&[
                "ip", "netns", "exec", &ns, "ip", "link", "set", &ns_end, "up",
            ]);
        made.push((ns, addr));
    }
    if !good {
        for (ns, _) in &made {
            run(&["ip", "netns", "del", ns]);
        }
        run(&["ip", "link", "del", &bridge]);
        return None;
    }
    Some((bridge, made))
}

impl Bed {
    /// The nodes of `spec`, their configs written (no daemon started).
    pub fn new(spec: &BedSpec) -> Result<Bed> {
        let n = spec.nodes;
        if n == 0 || n > 200 {
            bail!("a bed has 1 to 200 nodes, not {n}");
        }
        let r: u32 = rand::random();
        let id = format!("s{:05x}", r & 0xfffff);
        let net = free_net((r >> 20) as u8);
        let dir = tempfile::Builder::new()
            .prefix("strata-bed-")
            .tempdir()
            .context("cannot make the bed's directory")?;
        let dest = match &spec.dest_in {
            Some(d) => d.join(format!("strata-bed-{id}")),
            None => dir.path().join("dest"),
        };
        std::fs::create_dir_all(&dest)
            .with_context(|| format!("cannot make the destination {}", dest.display()))?;
        let (kind, bridge, named) = match (!spec.loopback).then(|| try_netns(&id, n, net)).flatten()
        {
            Some((b, made)) => (
                "netns",
                Some(b),
                made.into_iter()
                    .map(|(ns, a)| (ns.clone(), a, Some(ns)))
                    .collect::<Vec<_>>(),
            ),
            None => (
                "loopback",
                None,
                (0..n)
                    .map(|i| {
                        (
                            format!("{id}n{i}"),
                            format!("127.{}.{}.{}", 100 + (net % 100), (r >> 12) as u8, i + 1),
                            None,
                        )
                    })
                    .collect(),
            ),
        };
        let secret = dir.path().join("cluster.secret");
        let mut nodes = Vec::new();
        for (name, addr, netns) in named {
            let nd = dir.path().join(&name);
            let rt = nd.join("rt");
            std::fs::create_dir_all(&rt)?;
            std::fs::set_permissions(&rt, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
            let socket = rt.join("daemon.sock");
            let shm_prefix = format!("strata-bed-{name}");
            let mut y = format!(
                "daemon:\n  socket: {}\n  shm_prefix: {shm_prefix}\n  log: {}\ndevices:\n  - name: ram\n    kind: ram\n    capacity: {}\n",
                socket.display(),
                spec.log,
                spec.ram
            );
            if let Some(d) = &spec.disk {
                y.push_str(&format!(
                    "  - name: disk\n    kind: dir\n    path: {}\n    capacity: {d}\n",
                    nd.join("tier").display()
                ));
            }
            y.push_str(&format!(
                "cluster:\n  secret_file: {}\n  call_timeout: 2s\n  heartbeat_interval: 200ms\n  start_timeout: {}\n",
                secret.display(),
                spec.start_timeout
            ));
            if let Some(r) = &spec.remote_tier {
                y.push_str(&format!("  remote_tier: {r}\n"));
            }
            if spec.toward_readers {
                y.push_str("  toward_readers: true\n");
            }
            if spec.tls {
                y.push_str("  tls: true\n");
            }
            y.push_str(&format!(
                "  pages_where_written: {}\n",
                spec.pages_where_written
            ));
            if !spec.files_at_owner {
                y.push_str("  files_at_owner: false\n");
            } else {
                y.push_str(&format!(
                    "  files_at_owner: true\nadapter:\n  page_size: 64KiB\n  mode: default\n  include: [{}]\n",
                    dest.display()
                ));
            }
            let config = dir.path().join(format!("{name}.yaml"));
            std::fs::write(&config, y)?;
            nodes.push(BedNode {
                name,
                addr,
                netns,
                config,
                socket,
                shm_prefix,
            });
        }
        let hosts = nodes
            .iter()
            .map(|n| format!("{}={}", n.name, n.addr))
            .collect::<Vec<_>>()
            .join(",");
        let config_template = dir.path().join("{name}.yaml").display().to_string();
        eprintln!("bed: {n} nodes on {kind} ({hosts})");
        Ok(Bed {
            dir,
            strata: spec.strata.clone(),
            nodes,
            kind,
            bridge,
            hosts,
            config_template,
            dest,
        })
    }

    pub fn launcher(&self) -> &'static str {
        if self.kind == "netns" {
            "ip netns exec {name} {cmd}"
        } else {
            "{cmd}"
        }
    }

    pub fn secret_path(&self) -> PathBuf {
        self.dir.path().join("cluster.secret")
    }

    /// `strata --config TEMPLATE ARGS… --hosts HOSTS` from outside the nodes.
    pub fn cli(&self, args: &[&str]) -> Result<Output> {
        let mut c = Command::new(&self.strata);
        c.arg("--config").arg(&self.config_template).args(args);
        c.arg("--hosts").arg(&self.hosts);
        c.env("STRATA_LOG", "warn")
            .output()
            .with_context(|| format!("cannot run {}", self.strata.display()))
    }

    /// A command run inside node `i` (its namespace).
    pub fn in_node(&self, i: usize, prog: &Path) -> Command {
        match &self.nodes[i].netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(prog);
                c
            }
            None => Command::new(prog),
        }
    }

    /// `mpirun` across the bed's nodes, `per_node` ranks on each (Open MPI,
    /// `--map-by ppr:P:node` over a hostfile of the node addresses), as a
    /// job launcher runs ranks on a real cluster: every rank runs inside its
    /// node (namespace, host name = its address) with `STRATA_CONFIG` naming
    /// that node's config — what a node-local default config gives on real
    /// hardware. Open MPI reaches the other nodes through an "rsh agent"
    /// script that runs its daemon inside the node instead of over ssh.
    /// Append the program and its arguments to the returned command.
    pub fn mpirun(&self, per_node: usize) -> Result<Command> {
        let dir = self.dir.path();
        let hostfile = dir.join("mpi-hosts");
        let agent = dir.join("mpi-agent.sh");
        let netns = self.kind == "netns";
        let mut cases = String::new();
        let mut hosts = String::new();
        for n in &self.nodes {
            // Inside a namespace the node gets a host name of its own (a
            // UTS namespace); on loopback addresses the machine's stays.
            let (enter, name) = match &n.netns {
                Some(ns) => (
                    format!("ip netns exec {ns} unshare --uts "),
                    "hostname \"$0\"; ",
                ),
                None => (String::new(), ""),
            };
            cases.push_str(&format!(
                "{addr}) exec {enter}sh -c '{name}export STRATA_CONFIG=\"$1\"; shift; exec sh -c \"$*\"' {addr} '{cfg}' \"$@\";;\n",
                addr = n.addr,
                cfg = n.config.display()
            ));
            hosts.push_str(&format!("{} slots={per_node}\n", n.addr));
        }
        let script = format!(
            "#!/bin/sh\n# Open MPI's rsh agent for the strata test bed: `agent [opts] HOST CMD…`\n# runs CMD inside node HOST with that node's strata config.\nwhile [ $# -gt 0 ]; do case \"$1\" in -*) shift;; *) break;; esac; done\nhost=$1; shift\ncase \"$host\" in\n{cases}*) echo \"mpi-agent: unknown node $host\" >&2; exit 255;;\nesac\n"
        );
        std::fs::write(&agent, script).context("cannot write the mpirun agent")?;
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        std::fs::write(&hostfile, hosts).context("cannot write the mpirun hostfile")?;
        // Open MPI's own traffic stays on the bed's network.
        let ifs = if netns {
            let a = &self.nodes[0].addr;
            format!("{}.0/24", &a[..a.rfind('.').unwrap_or(a.len())])
        } else {
            "lo".to_string()
        };
        let mut c = Command::new(if netns { "ip" } else { "mpirun" });
        if let Some(ns) = &self.nodes[0].netns {
            c.args(["netns", "exec", ns, "unshare", "--uts", "sh", "-c"])
                .arg("hostname \"$0\"; exec \"$@\"")
                .arg(&self.nodes[0].addr)
                .arg("mpirun");
        }
        c.args(["--mca", "plm_rsh_agent"])
            .arg(&agent)
            .args(["--mca", "oob_tcp_if_include", &ifs])
            .args(["--mca", "btl_tcp_if_include", &ifs])
            // One host name for all nodes on loopback: Open MPI's
            // shared-memory segments would collide between "nodes".
            .args([
                "--mca",
                "btl",
                if netns { "self,vader,tcp" } else { "self,tcp" },
            ])
            // Every "node" shares this machine's cores: ranks waiting in a
            // barrier yield them instead of spinning.
            .args(["--mca", "mpi_yield_when_idle", "1"])
            .args(["-np", &(per_node * self.nodes.len()).to_string()])
            .args(["--map-by", &format!("ppr:{per_node}:node")])
            .arg("--hostfile")
            .arg(&hostfile)
            .env("STRATA_CONFIG", &self.nodes[0].config)
            .env_remove("STRATA_SOCKET")
            .env_remove("LD_PRELOAD");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        }
        Ok(c)
    }

    /// Starts node `i`'s daemon alone (`daemon start --cluster`).
    pub fn start_node(&self, i: usize) -> Result<Output> {
        let n = &self.nodes[i];
        self.in_node(i, &self.strata)
            .arg("--config")
            .arg(&n.config)
            .args([
                "daemon",
                "start",
                "--cluster",
                "--hosts",
                &self.hosts,
                "--node",
                &n.name,
            ])
            .output()
            .context("cannot start a node's daemon")
    }

    /// The pid of node `i`'s daemon (its control socket is a file: no namespace needed).
    pub fn pid(&self, i: usize) -> Option<u32> {
        let o = Command::new(&self.strata)
            .arg("--config")
            .arg(&self.nodes[i].config)
            .args(["status", "--json"])
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
        v["pid"].as_u64().map(|p| p as u32)
    }

    /// `cluster status --json` rows.
    pub fn status(&self) -> Result<Vec<serde_json::Value>> {
        let o = self.cli(&["cluster", "status", "--json"])?;
        serde_json::from_slice(&o.stdout).with_context(|| {
            format!(
                "cluster status --json:\n{}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
    }

    /// Polls `cluster status` until `ok` (a generous guard, not a timing check).
    pub fn wait_status(
        &self,
        what: &str,
        ok: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Result<Vec<serde_json::Value>> {
        let started = Instant::now();
        loop {
            let s = self.status()?;
            if ok(&s) {
                return Ok(s);
            }
            if started.elapsed() > Duration::from_secs(120) {
                bail!("{what}: never reached; last status {s:#?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            if let Some(p) = self.pid(i) {
                // SAFETY: kill(2) on a pid we read from our own daemon's status.
                unsafe { libc::kill(p as i32, libc::SIGKILL) };
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        for n in &self.nodes {
            if let Ok(rd) = std::fs::read_dir("/dev/shm") {
                for e in rd.flatten() {
                    if e.file_name().to_string_lossy().starts_with(&n.shm_prefix) {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
            if let Some(ns) = &n.netns {
                run(&["ip", "netns", "del", ns]);
            }
        }
        if let Some(b) = &self.bridge {
            run(&["ip", "link", "del", b]);
        }
        if !self.dest.starts_with(self.dir.path()) {
            let _ = std::fs::remove_dir_all(&self.dest);
        }
    }
}

/// A Slurm cluster over a namespace bed ([`Bed::slurm`]): a private
/// `munged`, a `slurmctld` on the bed's bridge address and one `slurmd` in
/// each node (its namespace, its own host name = the node's name). Every
/// task gets its node's strata config from a `TaskProlog` (`export
/// STRATA_CONFIG=…`), as a node-local default config does on real nodes.
/// Stopped (every daemon killed) on drop.
pub struct Slurm {
    pub conf: PathBuf,
    dir: PathBuf,
    pids: Vec<PathBuf>,
    nodes: usize,
}

/// How long the Slurm daemons may take to show every node idle.
const SLURM_START_TIMEOUT: Duration = Duration::from_secs(60);

impl Bed {
    /// Starts Slurm across the bed's nodes (network namespaces only: on
    /// loopback addresses every "node" would share one host name).
    /// Needs root and `munged`, `slurmctld`, `slurmd` (Debian: munge,
    /// slurmctld, slurmd, slurm-client).
    pub fn slurm(&self) -> Result<Slurm> {
        if self.kind != "netns" {
            bail!(
                "Slurm across the bed needs network namespaces (this bed is {})",
                self.kind
            );
        }
        let dir = self.dir.path().join("slurm");
        std::fs::create_dir_all(dir.join("state"))?;
        // munge: a key of our own, a socket of our own (the system's is not touched)
        let key = dir.join("munge.key");
        let bytes: Vec<u8> = (0..1024).map(|_| rand::random::<u8>()).collect();
        std::fs::write(&key, bytes)?;
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let sock = dir.join("munge.sock");
        let st = Command::new("munged")
            .arg(format!("--socket={}", sock.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--pid-file={}", dir.join("munged.pid").display()))
            .arg(format!("--log-file={}", dir.join("munged.log").display()))
            .arg(format!("--seed-file={}", dir.join("munged.seed").display()))
            .arg("--force")
            .status()
            .context("cannot run munged (install munge)")?;
        let mut slurm = Slurm {
            conf: dir.join("slurm.conf"),
            dir: dir.clone(),
            pids: vec![dir.join("munged.pid")],
            nodes: self.nodes.len(),
        };
        if !st.success() {
            bail!("munged failed: see {}", dir.join("munged.log").display());
        }
        let first = &self.nodes[0].addr;
        let ctld_addr = format!("{}.254", &first[..first.rfind('.').unwrap_or(first.len())]);
        let ctld_port = {
            let l = std::net::TcpListener::bind((ctld_addr.as_str(), 0))
                .with_context(|| format!("no free port on {ctld_addr}"))?;
            l.local_addr()?.port()
        };
        let prolog = dir.join("task-prolog.sh");
        let mut cases = String::new();
        let mut node_lines = String::new();
        for n in &self.nodes {
            cases.push_str(&format!(
                "{}) echo \"export STRATA_CONFIG={}\";;\n",
                n.name,
                n.config.display()
            ));
            node_lines.push_str(&format!(
                "NodeName={name} NodeHostname={name} NodeAddr={addr} CPUs=2 State=UNKNOWN\n",
                name = n.name,
                addr = n.addr
            ));
        }
        std::fs::write(
            &prolog,
            format!("#!/bin/sh\n# each task's node-local strata config\ncase \"$SLURMD_NODENAME\" in\n{cases}esac\n"),
        )?;
        std::fs::set_permissions(&prolog, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let d = dir.display();
        std::fs::write(
            &slurm.conf,
            format!(
                "ClusterName=stratabed\nSlurmctldHost=ctld({ctld_addr})\nSlurmctldPort={ctld_port}\nSlurmdPort={}\n\
                 AuthType=auth/munge\nAuthInfo=socket={}\nCredType=cred/munge\nSlurmUser=root\nSlurmdUser=root\n\
                 StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool-%n\nSlurmctldPidFile={d}/ctld.pid\n\
                 SlurmdPidFile={d}/d-%n.pid\nSlurmctldLogFile={d}/ctld.log\nSlurmdLogFile={d}/d-%n.log\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n\
                 AccountingStorageType=accounting_storage/none\nSwitchType=switch/none\nMpiDefault=none\n\
                 ReturnToService=2\nSchedulerType=sched/builtin\nSelectType=select/linear\nTaskProlog={}\n\
                 {node_lines}PartitionName=bed Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n",
                ctld_port + 1,
                sock.display(),
                prolog.display()
            ),
        )?;
        // cgroup v1 as this kernel mounts it; the plugins above use none of it
        std::fs::write(
            dir.join("cgroup.conf"),
            "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n",
        )?;
        slurm.pids.push(dir.join("ctld.pid"));
        let st = Command::new("unshare")
            .args(["--uts", "sh", "-c", "hostname ctld && exec slurmctld -i"])
            .env("SLURM_CONF", &slurm.conf)
            .status()
            .context("cannot run slurmctld (install slurmctld)")?;
        if !st.success() {
            bail!("slurmctld failed: see {d}/ctld.log");
        }
        for n in &self.nodes {
            slurm.pids.push(dir.join(format!("d-{}.pid", n.name)));
            let ns = n.netns.as_deref().expect("a namespace bed");
            let st = Command::new("ip")
                .args(["netns", "exec", ns, "unshare", "--uts", "sh", "-c"])
                .arg(format!("hostname {0} && exec slurmd -N {0}", n.name))
                .env("SLURM_CONF", &slurm.conf)
                .status()
                .context("cannot run slurmd (install slurmd)")?;
            if !st.success() {
                bail!("slurmd of {} failed: see {d}/d-{}.log", n.name, n.name);
            }
        }
        // every node idle: a generous guard, not a timing check
        let started = Instant::now();
        loop {
            let o = Command::new("sinfo")
                .args(["-h", "-N", "-o", "%T"])
                .env("SLURM_CONF", &slurm.conf)
                .output()
                .context("cannot run sinfo (install slurm-client)")?;
            let states = String::from_utf8_lossy(&o.stdout).to_string();
            let idle = states.lines().filter(|l| l.trim() == "idle").count();
            if idle == self.nodes.len() {
                break;
            }
            if started.elapsed() > SLURM_START_TIMEOUT {
                bail!(
                    "Slurm nodes not idle within {SLURM_START_TIMEOUT:?}: {states:?} (logs in {d})"
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(slurm)
    }
}

impl Slurm {
    /// `srun -N <all nodes> --ntasks-per-node=per_node`: every task inside
    /// its node with that node's `STRATA_CONFIG`. Append the program.
    pub fn srun(&self, per_node: usize) -> Command {
        let mut c = Command::new("srun");
        c.env("SLURM_CONF", &self.conf)
            .args(["-N", &self.nodes.to_string()])
            .args(["--ntasks-per-node", &per_node.to_string()])
            // the "nodes" share this machine's 2 cores
            .arg("--overcommit")
            .arg("--kill-on-bad-exit=1")
            .env_remove("STRATA_CONFIG")
            .env_remove("STRATA_SOCKET")
            .env_remove("LD_PRELOAD");
        c
    }

    /// The Slurm daemons' logs (for a failing test's output).
    pub fn logs(&self) -> String {
        let mut s = String::new();
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                if e.path().extension().is_some_and(|x| x == "log") {
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(15).collect();
                    s.push_str(&format!("--- {}\n", e.path().display()));
                    for l in tail.into_iter().rev() {
                        s.push_str(l);
                        s.push('\n');
                    }
                }
            }
        }
        s
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        // slurmds and slurmctld first, munged last
        for p in self.pids.iter().rev() {
            let pid = std::fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok());
            if let Some(pid) = pid.filter(|p| *p > 1) {
                // SAFETY: kill(2) on a pid our own daemon wrote to our private directory.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}
