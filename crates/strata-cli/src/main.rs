//! `strata`: the command-line tool. Thin: every command is a few calls into
//! the library crates (daemon, client, config); `strata bench` execs the
//! separate `strata-bench` binary.

mod cluster;
mod daemonctl;
mod doctor;
mod drain;
mod flush;
mod ls;
mod run;
mod stage;
mod table;
mod trace;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use strata_config::Config;

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "strata: multi-tier I/O buffering for HPC and data-heavy applications"
)]
struct Cli {
    /// Configuration file (default: $STRATA_CONFIG, else derived from this machine).
    #[arg(long, global = true, env = "STRATA_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start, stop or inspect the per-user daemon.
    Daemon {
        #[command(subcommand)]
        cmd: DaemonCmd,
    },
    /// Many nodes, one system: start a daemon on every node, see them,
    /// drain and stop them.
    Cluster {
        #[command(subcommand)]
        cmd: ClusterCmd,
    },
    /// Store FILE (or stdin with `-`) as blob BLOB of bucket BUCKET.
    Put {
        bucket: String,
        blob: String,
        file: String,
    },
    /// Write blob BLOB of BUCKET to FILE (default stdout, or `-`).
    Get {
        bucket: String,
        blob: String,
        file: Option<String>,
    },
    /// List buckets, or the blobs of BUCKET.
    Ls {
        bucket: Option<String>,
        /// Per blob: size, tiers, score, user score, stationary, dirty, accesses.
        #[arg(long, short)]
        long: bool,
        #[arg(long)]
        json: bool,
    },
    /// Remove blob BLOB of BUCKET, or the whole bucket with --bucket-too.
    Rm {
        bucket: String,
        blob: Option<String>,
        /// Remove the bucket and all its blobs.
        #[arg(long)]
        bucket_too: bool,
    },
    /// Check this machine and the configuration: /dev/shm, ulimits, tier
    /// directories (space, file system, whether fdatasync is honoured),
    /// io_uring, clock, the daemon. Exit 1 when a check fails.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// The daemon's tiers and counters as a table.
    Status {
        #[arg(long)]
        json: bool,
        /// Refresh every SECONDS (default 2) until interrupted; with
        /// --json, one JSON object per line.
        #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
        watch: Option<f64>,
    },
    /// Check or print configuration.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
    /// Benchmarks (`strata bench --help`): runs the `strata-bench` binary
    /// beside `strata` with these arguments.
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Put, get and list through a zero-config private daemon, printing what happened.
    Demo,
    /// Run an unmodified program with its file I/O buffered by strata
    /// (LD_PRELOAD adapter). Uses the running daemon or starts a private one;
    /// drains DEFAULT-mode data when CMD ends and exits with CMD's status.
    #[command(trailing_var_arg = true)]
    Run {
        /// Adapter mode for the included paths: default, scratch, workflow, bypass.
        #[arg(long)]
        mode: Option<strata_config::Mode>,
        /// Buffer files under this path prefix (repeatable; default: the
        /// configuration's adapter.include, else the current directory).
        #[arg(long, value_name = "PATH")]
        include: Vec<PathBuf>,
        /// No summary on stderr.
        #[arg(long, short)]
        quiet: bool,
        /// The command and its arguments (after `--`).
        #[arg(required = true, allow_hyphen_values = true, value_name = "CMD")]
        cmd: Vec<std::ffi::OsString>,
    },
    /// Write buffered DEFAULT-mode files under PATHs (default: all) to their
    /// destination now.
    Flush {
        /// Wait until they are persisted (progress bar); exit 1 listing the
        /// files that cannot be.
        #[arg(long)]
        wait: bool,
        path: Vec<PathBuf>,
    },
    /// Per-file drain state of DEFAULT-mode files and staged-out WORKFLOW
    /// files (dirty, flushing, persisted, failed), waiting for it, and the
    /// flusher's event log.
    Drain {
        #[command(subcommand)]
        cmd: DrainCmd,
    },
    /// Read files or directory trees from their destination into the buffer
    /// (in parallel, with a progress bar), so a job's reads hit the buffer.
    /// Exit 1 listing the files that failed.
    StageIn(stage::StageInArgs),
    /// Write the buffered WORKFLOW (and DEFAULT) files under PATHs to their
    /// destination and wait until persisted (progress bar); --evict then
    /// drops them from the buffer. Exit 1 listing the files that failed.
    StageOut(stage::StageOutArgs),
    /// The daemon's I/O log (`trace.enabled: true`): time, pid, op, tier,
    /// size, offset, bucket/blob per operation, as a table or JSON lines;
    /// filters by bucket and op; --follow keeps printing.
    Trace(trace::TraceArgs),
}

#[derive(Subcommand)]
enum DrainCmd {
    /// A table of the DEFAULT files under PATHs (default: all): PATH, STATE,
    /// SIZE, DIRTY, FLUSHED, ERROR, and a summary line.
    Status {
        #[arg(long)]
        json: bool,
        path: Vec<PathBuf>,
    },
    /// Flush the DEFAULT files under PATHs (default: all) and block until
    /// every one is persisted (progress bar of dirty bytes on stderr). Exit 1
    /// listing the failed files when only failures are left; exit 2 on
    /// --timeout.
    Wait {
        path: Vec<PathBuf>,
        /// Give up after SECS seconds.
        #[arg(long, value_name = "SECS")]
        timeout: Option<f64>,
        /// Only wait: do not ask for an immediate flush.
        #[arg(long)]
        no_flush: bool,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Print the path of the event log (`<socket>.drain.log`: ENQUEUE,
    /// DEQUEUE, DONE, ERROR lines), or its last lines, or follow it.
    Log {
        /// Print the last N lines.
        #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "10")]
        tail: Option<usize>,
        /// Keep printing new lines (until interrupted).
        #[arg(long, short)]
        follow: bool,
    },
}

#[derive(Subcommand)]
enum ClusterCmd {
    /// Start a daemon on every node (through --launcher, else srun, mpirun
    /// or ssh as available, else print the commands) and wait until all
    /// agree they are up; fails naming the nodes that are not.
    Start {
        #[command(flatten)]
        hosts: cluster::HostArgs,
        /// How to run a command on a node: {host} (its address, else its
        /// name), {name}, {id}, {cmd}; e.g. 'ssh {host} {cmd}' or
        /// 'ip netns exec {name} {cmd}'. A --config path may hold {name}
        /// and {id} too (one config per node).
        #[arg(long, value_name = "TEMPLATE")]
        launcher: Option<String>,
        /// Only print the command to run on each node, then wait for them.
        #[arg(long, conflicts_with = "launcher")]
        print: bool,
    },
    /// Drain every node, then stop its daemon.
    Stop {
        #[command(flatten)]
        hosts: cluster::HostArgs,
        /// Stop without draining first (the daemons still drain as they stop).
        #[arg(long)]
        no_drain: bool,
    },
    /// A table of the nodes: address, state, tiers, dirty bytes, flush lag,
    /// peers seen; exit 1 when a node does not answer.
    Status {
        #[command(flatten)]
        hosts: cluster::HostArgs,
        #[arg(long)]
        json: bool,
    },
    /// The node list (ids, addresses) and where it came from.
    Hosts {
        #[command(flatten)]
        hosts: cluster::HostArgs,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum DaemonCmd {
    /// Start the daemon (detached unless --foreground).
    Start {
        #[arg(long)]
        foreground: bool,
        /// Join a cluster (its nodes from --hosts, --hostfile, the job's
        /// resource manager or cluster.hosts; the secret from
        /// cluster.secret_file, written by `strata cluster start`).
        #[arg(long)]
        cluster: bool,
        #[command(flatten)]
        hosts: cluster::HostArgs,
        /// This node's name in the node list (default: the host name).
        #[arg(long, requires = "cluster")]
        node: Option<String>,
    },
    /// Stop the daemon: it drains every buffered file to its destination
    /// first. Data the destination does not take is kept on a non-volatile
    /// tier (journal) for the next daemon, else the stop is refused.
    Stop {
        /// Stop even if unpersisted data must be dropped.
        #[arg(long)]
        discard: bool,
    },
    /// Is a daemon running? Prints its status table.
    Status {
        #[arg(long)]
        json: bool,
        /// Refresh every SECONDS (default 2) until interrupted; with
        /// --json, one JSON object per line.
        #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
        watch: Option<f64>,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Validate FILE; errors name the key and line.
    Check { file: PathBuf },
    /// Print the effective default configuration for this machine as YAML.
    Default,
}

/// `strata bench ARGS`: execs `strata-bench` (a binary of its own, so the
/// benchmarks are not linked into `strata`), found beside this executable as
/// `git` and `cargo` find their external subcommands. Returns only on error.
fn bench(config: Option<&std::path::Path>, args: &[std::ffi::OsString]) -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return anyhow::anyhow!("cannot find the strata executable: {e}"),
    };
    let bench = exe.with_file_name("strata-bench");
    if !bench.is_file() {
        return anyhow::anyhow!(
            "`strata bench` runs {}, which is not built: run `cargo build --release` \
             (or `cargo build --release -p strata-bench`)",
            bench.display()
        );
    }
    let mut cmd = std::process::Command::new(&bench);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    // The benchmarks start daemons with this very `strata`.
    let err = cmd.args(args).env("STRATA_BIN", &exe).exec();
    anyhow::anyhow!("cannot run {}: {err}", bench.display())
}

fn load_config(path: Option<&std::path::Path>) -> Result<Config> {
    Config::load_effective(path).map_err(|e| anyhow::anyhow!("{e}"))
}

/// A closed stdout (`strata … | head -1`) ends the command quietly, as
/// ripgrep does, instead of a panic of `println!` (exit 101).
fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    quiet_on_broken_pipe();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("strata: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn connect(cfg: &Config) -> Result<strata_client::Client> {
    let socket = cfg.resolved_socket_path();
    strata_client::Client::connect_to(&socket).map_err(|e| anyhow::anyhow!("{e}"))
}

fn run(cli: Cli) -> Result<ExitCode> {
    let cfg_path = cli.config.clone();
    match cli.cmd {
        Cmd::Config {
            cmd: ConfigCmd::Check { file },
        } => {
            let cfg = Config::load(&file).map_err(|e| anyhow::anyhow!("{e}"))?;
            println!(
                "{}: ok ({} devices, policy {})",
                file.display(),
                cfg.devices.len(),
                cfg.placement.policy
            );
        }
        Cmd::Config {
            cmd: ConfigCmd::Default,
        } => {
            let cfg = load_config(None)?;
            print!("{}", cfg.to_yaml());
        }
        Cmd::Daemon {
            cmd:
                DaemonCmd::Start {
                    foreground,
                    cluster,
                    hosts,
                    node,
                },
        } => {
            let cfg = load_config(cfg_path.as_deref())?;
            if (hosts.hosts.is_some() || hosts.hostfile.is_some()) && !cluster {
                bail!("--hosts and --hostfile start a cluster member: add --cluster");
            }
            let setup = if cluster || !cfg.cluster.hosts.is_empty() {
                Some(strata_daemon::cluster::Setup::from_args(
                    &cfg,
                    &hosts.args(node.clone()),
                )?)
            } else {
                None
            };
            if foreground {
                daemonctl::init_logging(&cfg);
                strata_daemon::run_with(cfg, setup, |s| {
                    eprintln!("strata daemon listening on {}", s.display())
                })?;
            } else {
                let mut extra: Vec<std::ffi::OsString> = Vec::new();
                if let Some(s) = &setup {
                    extra.extend([
                        "--cluster".into(),
                        "--hosts".into(),
                        s.membership.to_hosts_arg().into(),
                        "--node".into(),
                        s.membership.nodes[s.me as usize].name.clone().into(),
                    ]);
                }
                let socket = daemonctl::start_detached_with(cfg_path.as_deref(), &cfg, &extra)?;
                match &setup {
                    Some(s) => println!(
                        "strata daemon started (socket {}; cluster node {} of {}, listening on {})",
                        socket.display(),
                        s.me,
                        s.membership.nodes.len(),
                        s.membership.nodes[s.me as usize].endpoint(cfg.cluster.port)
                    ),
                    None => println!("strata daemon started (socket {})", socket.display()),
                }
            }
        }
        Cmd::Cluster { cmd } => {
            let c = cfg_path.as_deref();
            match cmd {
                ClusterCmd::Start {
                    hosts,
                    launcher,
                    print,
                } => cluster::start(c, &hosts, launcher.as_deref(), print)?,
                ClusterCmd::Stop { hosts, no_drain } => {
                    if !cluster::stop(c, &hosts, no_drain)? {
                        return Ok(ExitCode::from(1));
                    }
                }
                ClusterCmd::Status { hosts, json } => {
                    if !cluster::status(c, &hosts, json)? {
                        return Ok(ExitCode::from(1));
                    }
                }
                ClusterCmd::Hosts { hosts, json } => cluster::hosts(c, &hosts, json)?,
            }
        }
        Cmd::Daemon {
            cmd: DaemonCmd::Stop { discard },
        } => {
            let cfg = load_config(cfg_path.as_deref())?;
            let r = daemonctl::stop_with(
                &cfg,
                discard,
                std::io::IsTerminal::is_terminal(&std::io::stderr()),
            )?;
            match r.outcome.as_str() {
                "kept" => {
                    eprintln!("strata: {} file(s) could not be written to the destination; they are kept on the dir tier (journal) and the next daemon on these tiers flushes them:", r.files.len());
                    for f in &r.files {
                        eprintln!(
                            "  {} ({}): {}",
                            f.path,
                            strata_config::format_size(f.bytes),
                            f.error
                        );
                    }
                    println!("strata daemon stopped (data kept, not at the destination)");
                    return Ok(ExitCode::from(2));
                }
                "discarded" => {
                    eprintln!("strata: discarded as asked, never written to the destination:");
                    for f in r.files.iter().filter(|f| !f.kept) {
                        eprintln!(
                            "  {} ({}): {}",
                            f.path,
                            strata_config::format_size(f.bytes),
                            f.error
                        );
                    }
                    println!("strata daemon stopped (data discarded)");
                }
                _ => println!("strata daemon stopped"),
            }
        }
        Cmd::Daemon {
            cmd: DaemonCmd::Status { json, watch },
        }
        | Cmd::Status { json, watch } => {
            let cfg = load_config(cfg_path.as_deref())?;
            let socket = cfg.resolved_socket_path();
            return table::status_command(&socket, json, watch);
        }
        Cmd::Put { bucket, blob, file } => {
            let cfg = load_config(cfg_path.as_deref())?;
            let data = if file == "-" {
                let mut v = Vec::new();
                std::io::stdin().read_to_end(&mut v)?;
                v
            } else {
                std::fs::read(&file).with_context(|| format!("cannot read {file}"))?
            };
            let c = connect(&cfg)?;
            let b = c.bucket(&bucket)?;
            b.put(&blob, &data)?;
            eprintln!("put {bucket}/{blob}: {} bytes", data.len());
        }
        Cmd::Get { bucket, blob, file } => {
            let cfg = load_config(cfg_path.as_deref())?;
            let c = connect(&cfg)?;
            let b = c.bucket_open(&bucket)?;
            let data = b.get(&blob)?;
            match file.as_deref() {
                None | Some("-") => std::io::stdout().write_all(&data)?,
                Some(f) => std::fs::write(f, &data).with_context(|| format!("cannot write {f}"))?,
            }
        }
        Cmd::Ls { bucket, long, json } => {
            let cfg = load_config(cfg_path.as_deref())?;
            let c = connect(&cfg)?;
            match bucket {
                None => {
                    let names = c.bucket_names()?;
                    if json {
                        let mut rows = Vec::new();
                        for n in &names {
                            let (bytes, blobs) = c.bucket_open(n)?.size()?;
                            rows.push(
                                serde_json::json!({"bucket": n, "bytes": bytes, "blobs": blobs}),
                            );
                        }
                        println!("{}", serde_json::to_string_pretty(&rows)?);
                    } else if long {
                        let mut t = table::Table::new(&["BUCKET", "BLOBS", "BYTES"]);
                        for n in &names {
                            let (bytes, blobs) = c.bucket_open(n)?.size()?;
                            t.row(vec![
                                n.clone(),
                                blobs.to_string(),
                                table::format_size(bytes),
                            ]);
                        }
                        print!("{}", t.render());
                    } else {
                        for n in names {
                            println!("{}", table::printable(&n));
                        }
                    }
                }
                Some(bn) => {
                    let b = c.bucket_open(&bn)?;
                    let names = b.list()?;
                    if long || json {
                        let tiers: Vec<String> =
                            c.hello().tiers.iter().map(|t| t.name.clone()).collect();
                        print!("{}", ls::blobs(&b, &names, &tiers, json)?);
                    } else {
                        for n in names {
                            println!("{}", table::printable(&n));
                        }
                    }
                }
            }
        }
        Cmd::Rm {
            bucket,
            blob,
            bucket_too,
        } => {
            let cfg = load_config(cfg_path.as_deref())?;
            let c = connect(&cfg)?;
            let b = c.bucket_open(&bucket)?;
            match (blob, bucket_too) {
                (Some(n), false) => b.delete(&n)?,
                (None, true) => b.destroy()?,
                _ => bail!("give either BLOB or --bucket-too (to remove the whole bucket)"),
            }
        }
        Cmd::Bench { args } => return Err(bench(cfg_path.as_deref(), &args)),
        Cmd::Demo => daemonctl::demo(cfg_path.as_deref())?,
        Cmd::Doctor { json } => {
            let findings = doctor::run(load_config(cfg_path.as_deref()).map_err(|e| e.to_string()));
            if json {
                println!("{}", serde_json::to_string_pretty(&findings)?);
            } else {
                print!("{}", doctor::table(&findings));
            }
            if findings.iter().any(|f| f.verdict == doctor::Verdict::Fail) {
                return Ok(ExitCode::from(1));
            }
        }
        Cmd::Run {
            mode,
            include,
            quiet,
            cmd,
        } => {
            return run::run(run::RunArgs {
                config: cfg_path,
                mode,
                include,
                quiet,
                cmd,
            });
        }
        Cmd::Flush { wait, path } => {
            let cfg = load_config(cfg_path.as_deref())?;
            return flush::command(&cfg.resolved_socket_path(), &path, wait);
        }
        Cmd::StageIn(args) => {
            let cfg = load_config(cfg_path.as_deref())?;
            return stage::stage_in_command(&cfg, &args);
        }
        Cmd::StageOut(args) => {
            let cfg = load_config(cfg_path.as_deref())?;
            return stage::stage_out_command(&cfg, &args);
        }
        Cmd::Trace(args) => {
            let cfg = load_config(cfg_path.as_deref())?;
            return trace::command(&cfg, &args);
        }
        Cmd::Drain { cmd } => {
            let cfg = load_config(cfg_path.as_deref())?;
            let socket = cfg.resolved_socket_path();
            return match cmd {
                DrainCmd::Status { json, path } => drain::status_command(&socket, &path, json),
                DrainCmd::Wait {
                    path,
                    timeout,
                    no_flush,
                    quiet,
                } => drain::wait_command(&socket, &path, timeout, no_flush, quiet),
                DrainCmd::Log { tail, follow } => drain::log_command(&socket, tail, follow),
            };
        }
    }
    Ok(ExitCode::SUCCESS)
}
