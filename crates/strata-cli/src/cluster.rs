//! `strata cluster start|stop|status|hosts`: one daemon per node, started
//! through a launcher, agreed on, inspected and drained over the cluster
//! RPC (the same authenticated service the daemons use among themselves).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use strata_cluster::{Membership, Node};
use strata_config::Config;
use strata_daemon::cluster::Args;
use strata_net::{pb, rpc, Secret, Transport};

use crate::table::{format_size, Table};

/// Where the nodes come from (flattened into each cluster command).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct HostArgs {
    /// Nodes in Slurm hostlist syntax: node[01-04,07],gpu3 (an entry may
    /// carry =ADDRESS and :PORT, e.g. node03=10.1.0.3:7707).
    #[arg(long)]
    pub hosts: Option<String>,
    /// A file with one host per line (# comments, optional =ADDRESS, :PORT).
    #[arg(long, conflicts_with = "hosts")]
    pub hostfile: Option<PathBuf>,
}

impl HostArgs {
    pub fn args(&self, node: Option<String>) -> Args {
        Args {
            hosts: self.hosts.clone(),
            hostfile: self.hostfile.clone(),
            node,
        }
    }
}

/// `{name}` and `{id}` of a per-node config path.
fn per_node(template: &str, n: &Node) -> String {
    template
        .replace("{name}", &n.name)
        .replace("{id}", &n.id.to_string())
}

/// The config a cluster command reads itself: the per-node template
/// filled for the first node (the `cluster` section must be the same on
/// every node).
pub fn load(config: Option<&Path>, hosts: &HostArgs) -> Result<(Config, Membership)> {
    let first = Config::load_effective(None).map_err(|e| anyhow::anyhow!("{e}"));
    let probe = match config {
        Some(p) if p.to_string_lossy().contains('{') => first?,
        Some(p) => Config::load_effective(Some(p)).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => first?,
    };
    let m = strata_daemon::cluster::membership(&probe, &hosts.args(None))?;
    let cfg = match config {
        Some(p) if p.to_string_lossy().contains('{') => {
            let path = per_node(&p.to_string_lossy(), &m.nodes[0]);
            Config::load_effective(Some(Path::new(&path))).map_err(|e| anyhow::anyhow!("{e}"))?
        }
        _ => probe,
    };
    let m = strata_daemon::cluster::membership(&cfg, &hosts.args(None))?;
    Ok((cfg, m))
}

struct Ctx {
    membership: Membership,
    secret: Secret,
    port: u16,
    call_timeout: Duration,
    transport: Arc<dyn Transport>,
}

impl Ctx {
    fn new(cfg: &Config, membership: Membership, secret: Secret) -> Result<Ctx> {
        Ok(Ctx {
            membership,
            secret,
            port: cfg.cluster.port,
            call_timeout: Duration::from_secs_f64(cfg.cluster.call_timeout_ms / 1e3),
            transport: strata_daemon::cluster::transport(cfg)?,
        })
    }

    async fn client(&self, n: &Node) -> std::io::Result<rpc::Client> {
        rpc::connect(
            self.transport.clone(),
            &n.endpoint(self.port),
            &self.secret,
            self.call_timeout,
        )
        .await
    }

    /// `f` on every node at once; per node its result or the error.
    async fn each<T: Send + 'static, F, Fut>(&self, f: F) -> Vec<Result<T, String>>
    where
        F: Fn(rpc::Client, Node) -> Fut,
        Fut: std::future::Future<Output = Result<T, String>> + Send + 'static,
    {
        let mut set = tokio::task::JoinSet::new();
        for n in &self.membership.nodes {
            let c = self.client(n).await;
            let (n2, fut) = match c {
                Ok(c) => (n.id, Some(f(c, n.clone()))),
                Err(e) => {
                    let id = n.id;
                    let msg = e.to_string();
                    set.spawn(async move { (id, Err(msg)) });
                    (id, None)
                }
            };
            if let Some(fut) = fut {
                set.spawn(async move { (n2, fut.await) });
            }
        }
        let mut out: BTreeMap<u32, Result<T, String>> = BTreeMap::new();
        while let Some(r) = set.join_next().await {
            if let Ok((id, r)) = r {
                out.insert(id, r);
            }
        }
        self.membership
            .nodes
            .iter()
            .map(|n| {
                out.remove(&n.id)
                    .unwrap_or_else(|| Err("the call was lost".into()))
            })
            .collect()
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start an async runtime")
}

fn status_msg(s: tonic::Status) -> String {
    format!("{}: {}", s.code(), s.message())
}

/// `strata cluster hosts`: the node list and its source.
pub fn hosts(config: Option<&Path>, h: &HostArgs, json: bool) -> Result<()> {
    let (cfg, m) = load(config, h)?;
    if json {
        let rows: Vec<_> = m
            .nodes
            .iter()
            .map(|n| {
                serde_json::json!({"id": n.id, "name": n.name, "endpoint": n.endpoint(cfg.cluster.port)})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"source": m.source.to_string(), "nodes": rows})
            )?
        );
        return Ok(());
    }
    let mut t = Table::new(&["ID", "NODE", "ADDRESS"]);
    for n in &m.nodes {
        t.row(vec![
            n.id.to_string(),
            n.name.clone(),
            n.endpoint(cfg.cluster.port),
        ]);
    }
    print!("{}", t.render());
    println!("{} node(s) from {}", m.nodes.len(), m.source);
    Ok(())
}

/// The command that starts the daemon of node `n`.
fn daemon_cmd(
    exe: &Path,
    config: Option<&Path>,
    m: &Membership,
    n: &Node,
    foreground: bool,
) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![exe.into()];
    if let Some(c) = config {
        v.push("--config".into());
        v.push(per_node(&c.to_string_lossy(), n).into());
    }
    v.extend(["daemon".into(), "start".into()]);
    if foreground {
        v.push("--foreground".into());
    }
    v.extend([
        "--cluster".into(),
        "--hosts".into(),
        m.to_hosts_arg().into(),
        "--node".into(),
        n.name.clone().into(),
    ]);
    v
}

/// Fills a launcher template: `{host}` (address, else name), `{name}`,
/// `{id}`; `{cmd}` becomes the command's words.
fn launch_argv(template: &str, n: &Node, cmd: &[OsString]) -> Result<Vec<OsString>> {
    let mut out = Vec::new();
    let mut has_cmd = false;
    for w in template.split_whitespace() {
        if w == "{cmd}" {
            out.extend(cmd.iter().cloned());
            has_cmd = true;
            continue;
        }
        let host = n.addr.clone().unwrap_or(n.name.clone());
        out.push(
            w.replace("{host}", &host)
                .replace("{name}", &n.name)
                .replace("{id}", &n.id.to_string())
                .into(),
        );
    }
    if !has_cmd {
        bail!("--launcher must contain {{cmd}} (e.g. 'ssh {{host}} {{cmd}}')");
    }
    Ok(out)
}

/// How daemons get started on their nodes.
enum Launch {
    Template(String),
    /// One step of the resource manager (or mpirun) on every node.
    Step(Step),
    Ssh,
    Print,
}

/// The launchers that start one process per node in a single command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Srun,
    Flux,
    Pbsdsh,
    Blaunch,
    Mpirun,
}

/// The argv prefix that runs a command once on each of `hosts`.
fn step_argv(step: Step, hosts: &[String]) -> Vec<OsString> {
    let n = hosts.len().to_string();
    let list = hosts.join(",");
    let v: Vec<String> = match step {
        // --overlap: the daemons must not block the job's own steps.
        Step::Srun => vec![
            "srun".into(),
            "--overlap".into(),
            "--exact".into(),
            "-N".into(),
            n,
            "--ntasks-per-node=1".into(),
            format!("--nodelist={list}"),
        ],
        Step::Flux => vec![
            "flux".into(),
            "run".into(),
            "-N".into(),
            n.clone(),
            "-n".into(),
            n,
            format!("--requires=host:{list}"),
        ],
        // -u: once per host of the job (PBS_NODEFILE lists a host per core).
        Step::Pbsdsh => vec!["pbsdsh".into(), "-u".into()],
        Step::Blaunch => vec!["blaunch".into(), "-z".into(), hosts.join(" ")],
        Step::Mpirun => vec![
            "mpirun".into(),
            "--host".into(),
            list,
            "-np".into(),
            n,
            "--map-by".into(),
            "ppr:1:node".into(),
        ],
    };
    v.into_iter().map(OsString::from).collect()
}

fn have(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

fn choose(launcher: Option<&str>, print: bool) -> Launch {
    if let Some(t) = launcher {
        return Launch::Template(t.to_string());
    }
    if print {
        return Launch::Print;
    }
    let env = |k: &str| std::env::var_os(k).is_some();
    // The job's resource manager first, then mpirun, then ssh.
    let managers = [
        (env("SLURM_JOB_ID") && have("srun"), Step::Srun),
        (env("FLUX_JOB_ID") && have("flux"), Step::Flux),
        (env("PBS_JOBID") && have("pbsdsh"), Step::Pbsdsh),
        (env("LSB_JOBID") && have("blaunch"), Step::Blaunch),
        (have("mpirun"), Step::Mpirun),
    ];
    if let Some((_, s)) = managers.iter().find(|(ok, _)| *ok) {
        return Launch::Step(*s);
    }
    if have("ssh") {
        return Launch::Ssh;
    }
    Launch::Print
}

/// Runs `argv` to completion (a detaching `daemon start`), bounded by `deadline`.
fn run_bounded(argv: &[OsString], deadline: Duration) -> Result<()> {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", argv[0].to_string_lossy()))?;
    let started = Instant::now();
    // Bounded by `deadline`.
    loop {
        if let Some(st) = child.try_wait()? {
            let out = child.wait_with_output()?;
            if !st.success() {
                bail!(
                    "{} ({st}): {}",
                    argv.iter()
                        .map(|a| a.to_string_lossy())
                        .collect::<Vec<_>>()
                        .join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            return Ok(());
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            bail!(
                "{} did not finish within {deadline:?}",
                argv[0].to_string_lossy()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts one long-lived launcher (srun, mpirun) detached from us.
fn spawn_detached(argv: &[OsString], log: &Path) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(f.try_clone()?)
        .stderr(f);
    // SAFETY: setsid is async-signal-safe; it only detaches the child from our session.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    cmd.spawn()
        .with_context(|| format!("cannot run {}", argv[0].to_string_lossy()))?;
    Ok(())
}

/// The launcher template of `cluster start` over ssh.
const SSH_TEMPLATE: &str = "ssh -o BatchMode=yes -o ConnectTimeout=10 {host} {cmd}";

/// Starts every node's daemon through launcher template `t`, all at once,
/// each bounded by `deadline`; the errors of those that failed, together
/// (`how` completes the message).
fn launch_each(
    t: &str,
    how: &str,
    exe: &Path,
    config: Option<&Path>,
    m: &Membership,
    deadline: Duration,
) -> Result<()> {
    let mut handles = Vec::new();
    for node in &m.nodes {
        let argv = launch_argv(t, node, &daemon_cmd(exe, config, m, node, false))?;
        let name = node.name.clone();
        handles.push(std::thread::spawn(move || {
            run_bounded(&argv, deadline).map_err(|e| format!("{name}: {e:#}"))
        }));
    }
    let errs: Vec<String> = handles
        .into_iter()
        .filter_map(|h| {
            h.join()
                .unwrap_or(Err("launcher thread panicked".into()))
                .err()
        })
        .collect();
    if !errs.is_empty() {
        bail!("cannot start every daemon{how}:\n  {}", errs.join("\n  "));
    }
    Ok(())
}

/// `strata cluster start`.
pub fn start(
    config: Option<&Path>,
    h: &HostArgs,
    launcher: Option<&str>,
    print: bool,
) -> Result<()> {
    let (cfg, m) = load(config, h)?;
    let secret_path = cfg.resolved_cluster_secret_path();
    let (secret, fresh) = strata_daemon::cluster::secret_for_start(&secret_path)?;
    if fresh {
        eprintln!(
            "strata: wrote a new cluster secret to {} (0600; every node must read the same file)",
            secret_path.display()
        );
    }
    if strata_daemon::cluster::tls_for_start(&cfg)? {
        eprintln!(
            "strata: made the cluster's TLS certificate and key in {} (every node must read the same files)",
            secret_path.parent().unwrap_or(Path::new("/")).display()
        );
    }
    let exe = std::env::current_exe().context("cannot find the strata executable")?;
    let deadline = Duration::from_secs_f64(cfg.cluster.start_timeout_ms / 1e3);
    let n = m.nodes.len();
    match choose(launcher, print) {
        Launch::Template(t) => {
            eprintln!("strata: starting {n} daemon(s) with `{t}`");
            launch_each(&t, "", &exe, config, &m, deadline)?;
        }
        Launch::Ssh => {
            eprintln!("strata: starting {n} daemon(s) over ssh");
            launch_each(
                SSH_TEMPLATE,
                " over ssh (or pass --launcher / --print)",
                &exe,
                config,
                &m,
                deadline,
            )?;
        }
        Launch::Step(step) => {
            // One step on all nodes, daemons in the foreground inside it; each
            // finds its node by host name (no --node).
            let mut d = daemon_cmd(&exe, config, &m, &m.nodes[0], true);
            d.truncate(d.len() - 2);
            let hostlist: Vec<String> = m.nodes.iter().map(|x| x.name.clone()).collect();
            let mut argv = step_argv(step, &hostlist);
            argv.extend(d);
            let log = secret_path.with_file_name("cluster-launch.log");
            eprintln!(
                "strata: starting {n} daemon(s) with {} (output in {})",
                argv[0].to_string_lossy(),
                log.display()
            );
            spawn_detached(&argv, &log)?;
        }
        Launch::Print => {
            eprintln!("strata: no launcher found (srun, mpirun, ssh): run on each node:");
            for node in &m.nodes {
                let c = daemon_cmd(&exe, config, &m, node, false);
                println!(
                    "  {}: {}",
                    node.name,
                    c.iter()
                        .map(|a| a.to_string_lossy())
                        .collect::<Vec<_>>()
                        .join(" ")
                );
            }
            eprintln!("strata: waiting up to {deadline:?} for all of them to agree …");
        }
    }
    let ctx = Ctx::new(&cfg, m, secret)?;
    let rt = runtime()?;
    rt.block_on(agree(&ctx, deadline))?;
    print!("{}", rt.block_on(status_table(&ctx))?.0);
    Ok(())
}

/// Waits until every node answers with the same node list and sees every
/// other one up; else an error naming the nodes that did not.
async fn agree(ctx: &Ctx, deadline: Duration) -> Result<()> {
    let started = Instant::now();
    let digest = ctx.membership.digest(ctx.port).to_vec();
    let total = ctx.membership.nodes.len() as u32;
    let mut last: Vec<Result<(), String>> = Vec::new();
    // Bounded by `deadline`.
    while started.elapsed() < deadline {
        let d = digest.clone();
        last = ctx
            .each(move |mut c, n| {
                let d = d.clone();
                async move {
                    let r = c
                        .hello(pb::HelloRequest {
                            from_node: u32::MAX,
                            from_name: "strata cluster".into(),
                            membership_digest: d.clone(),
                        })
                        .await
                        .map_err(status_msg)?
                        .into_inner();
                    if r.membership_digest != d {
                        return Err(format!("{} runs with another node list", n.name));
                    }
                    if r.peers_up < total {
                        return Err(format!("sees {}/{total} nodes up", r.peers_up));
                    }
                    Ok(())
                }
            })
            .await;
        let ready = last.iter().filter(|r| r.is_ok()).count();
        eprint!("\rstrata: {ready}/{total} nodes up and agreed   ");
        if ready as u32 == total {
            eprintln!();
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!();
    let missing: Vec<String> = ctx
        .membership
        .nodes
        .iter()
        .zip(&last)
        .filter_map(|(n, r)| {
            r.as_ref()
                .err()
                .map(|e| format!("{} ({}): {e}", n.name, n.endpoint(ctx.port)))
        })
        .collect();
    bail!(
        "the cluster did not come up within {deadline:?}; not ready:\n  {}",
        missing.join("\n  ")
    )
}

/// The status table; `.1` is true when every node answered.
async fn status_table(ctx: &Ctx) -> Result<(String, bool)> {
    let rows = ctx
        .each(|mut c, _| async move {
            c.status(pb::StatusRequest {})
                .await
                .map(|r| r.into_inner())
                .map_err(status_msg)
        })
        .await;
    let total = ctx.membership.nodes.len();
    let mut t = Table::new(&[
        "NODE",
        "NAME",
        "ADDRESS",
        "STATE",
        "TIERS USED/CAPACITY",
        "DIRTY",
        "FLUSH LAG",
        "PEERS UP",
        "CLIENTS",
    ]);
    let mut notes = Vec::new();
    for (n, r) in ctx.membership.nodes.iter().zip(&rows) {
        match r {
            Ok(s) => {
                let tiers = s
                    .tiers
                    .iter()
                    .map(|x| {
                        format!(
                            "{} {}/{}",
                            x.name,
                            format_size(x.used_bytes),
                            format_size(x.capacity_bytes)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let up = s.peers.iter().filter(|p| p.state == "up").count();
                for p in s.peers.iter().filter(|p| p.state != "up") {
                    notes.push(format!("{} sees node {} {}", n.name, p.node, p.state));
                }
                t.row(vec![
                    n.id.to_string(),
                    n.name.clone(),
                    n.endpoint(ctx.port),
                    "up".into(),
                    tiers,
                    format_size(s.dirty_bytes),
                    format!("{:.1}s", s.flush_lag_s),
                    format!("{up}/{total}"),
                    s.clients.to_string(),
                ]);
            }
            Err(e) => {
                notes.push(format!("{}: {e}", n.name));
                t.row(vec![
                    n.id.to_string(),
                    n.name.clone(),
                    n.endpoint(ctx.port),
                    "down".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]);
            }
        }
    }
    let mut out = t.render();
    for n in notes {
        out.push_str(&format!("  {n}\n"));
    }
    Ok((out, rows.iter().all(|r| r.is_ok())))
}

fn ctx_for(config: Option<&Path>, h: &HostArgs) -> Result<Ctx> {
    let (cfg, m) = load(config, h)?;
    let secret = Secret::load(&cfg.resolved_cluster_secret_path())?;
    Ctx::new(&cfg, m, secret)
}

/// `strata cluster status`: 0 when every node answers, 1 otherwise.
pub fn status(config: Option<&Path>, h: &HostArgs, json: bool) -> Result<bool> {
    let ctx = ctx_for(config, h)?;
    let rt = runtime()?;
    if json {
        let rows = rt.block_on(ctx.each(|mut c, _| async move {
            c.status(pb::StatusRequest {})
                .await
                .map(|r| r.into_inner())
                .map_err(status_msg)
        }));
        let all = rows.iter().all(|r| r.is_ok());
        let v: Vec<_> = ctx
            .membership
            .nodes
            .iter()
            .zip(rows)
            .map(|(n, r)| match r {
                Ok(s) => serde_json::json!({
                    "node": n.id, "name": n.name, "address": n.endpoint(ctx.port), "state": "up",
                    "dirty_bytes": s.dirty_bytes, "flush_lag_s": s.flush_lag_s, "boot_id": s.boot_id,
                    "clients": s.clients,
                    "tiers": s.tiers.iter().map(|t| serde_json::json!({"name": t.name, "used_bytes": t.used_bytes, "capacity_bytes": t.capacity_bytes})).collect::<Vec<_>>(),
                    "peers": s.peers.iter().map(|p| serde_json::json!({"node": p.node, "state": p.state, "rtt_us": (p.rtt_us >= 0.0).then_some(p.rtt_us)})).collect::<Vec<_>>(),
                }),
                Err(e) => serde_json::json!({"node": n.id, "name": n.name, "address": n.endpoint(ctx.port), "state": "down", "error": e}),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(all);
    }
    let (t, all) = rt.block_on(status_table(&ctx))?;
    print!("{t}");
    Ok(all)
}

/// `strata cluster stop`: drains every node (unless `no_drain`), then stops
/// each; true when every node stopped cleanly.
pub fn stop(config: Option<&Path>, h: &HostArgs, no_drain: bool) -> Result<bool> {
    let ctx = ctx_for(config, h)?;
    let rt = runtime()?;
    let ok = rt.block_on(async {
        let mut ok = true;
        if !no_drain {
            eprintln!("strata: draining {} node(s) …", ctx.membership.nodes.len());
            let drained = ctx
                .each(|mut c, _| async move {
                    let mut req = tonic::Request::new(pb::DrainRequest { wait_s: 3600.0 });
                    req.set_timeout(Duration::from_secs(3660));
                    let r = c.drain(req).await.map_err(status_msg)?.into_inner();
                    if r.done {
                        Ok(())
                    } else {
                        Err(format!(
                            "{} still dirty: {}",
                            format_size(r.dirty_bytes),
                            r.error
                        ))
                    }
                })
                .await;
            for (n, r) in ctx.membership.nodes.iter().zip(&drained) {
                if let Err(e) = r {
                    eprintln!("strata: {}: drain: {e}", n.name);
                }
            }
        }
        let stopped = ctx
            .each(|mut c, _| async move {
                c.stop(pb::StopRequest { drain: !no_drain })
                    .await
                    .map(|_| ())
                    .map_err(status_msg)
            })
            .await;
        for (n, r) in ctx.membership.nodes.iter().zip(&stopped) {
            if let Err(e) = r {
                ok = false;
                eprintln!("strata: {}: {e}", n.name)
            }
        }
        // Each daemon drains what is left and exits; wait until none answers.
        let started = Instant::now();
        let limit = Duration::from_secs(600);
        // Bounded by `limit`.
        loop {
            let alive = ctx
                .each(|mut c, _| async move {
                    c.hello(pb::HelloRequest::default())
                        .await
                        .map(|_| ())
                        .map_err(status_msg)
                })
                .await;
            let n = alive.iter().filter(|r| r.is_ok()).count();
            if n == 0 {
                break;
            }
            if started.elapsed() > limit {
                ok = false;
                eprintln!("strata: {n} daemon(s) still running after {limit:?}");
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if ok {
            eprintln!("strata: {} daemon(s) stopped", ctx.membership.nodes.len());
        }
        ok
    });
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(v: Vec<OsString>) -> String {
        v.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn each_launcher_runs_one_process_per_node() {
        let hosts = vec!["n01".to_string(), "n02".to_string(), "gpu3".to_string()];
        assert_eq!(
            words(step_argv(Step::Srun, &hosts)),
            "srun --overlap --exact -N 3 --ntasks-per-node=1 --nodelist=n01,n02,gpu3"
        );
        assert_eq!(
            words(step_argv(Step::Flux, &hosts)),
            "flux run -N 3 -n 3 --requires=host:n01,n02,gpu3"
        );
        assert_eq!(words(step_argv(Step::Pbsdsh, &hosts)), "pbsdsh -u");
        assert_eq!(step_argv(Step::Blaunch, &hosts)[2], "n01 n02 gpu3");
        assert_eq!(
            words(step_argv(Step::Mpirun, &hosts)),
            "mpirun --host n01,n02,gpu3 -np 3 --map-by ppr:1:node"
        );
    }

    #[test]
    fn ssh_is_a_launcher_template() {
        let n = Node {
            id: 2,
            name: "n03".into(),
            addr: Some("10.1.0.3".into()),
            port: None,
        };
        let argv = launch_argv(SSH_TEMPLATE, &n, &["strata".into(), "daemon".into()]).unwrap();
        assert_eq!(
            words(argv),
            "ssh -o BatchMode=yes -o ConnectTimeout=10 10.1.0.3 strata daemon"
        );
    }
}
