//! `strata run` with a real MPI (Open MPI's `mpirun`), issue 3: one daemon per
//! node shared by all ranks, results byte-identical to runs without strata.
//!
//! * `mpirun -np 4 strata run --mode default -- mpi_ranks …`: one `strata run`
//!   per rank, all started at once against a private config with no daemon
//!   running, so they race to start it. `tests/adapter/mpi_ranks.c` writes one
//!   shared file at disjoint, page-straddling offsets per rank (pwrite), a
//!   per-rank file (stdio), reads a neighbour's data after MPI_Barrier, and
//!   rank 0 checks the whole file. Every rank must have seen the same daemon,
//!   exactly one rank (the last) stops it, and the destination must equal
//!   the reference run's files byte for byte.
//! * `strata run --mode scratch -- mpirun -np 4 python3 …`: the launcher and
//!   all ranks under one `strata run` writing a file per rank; a second
//!   `strata run` reads them back from the buffer; nothing reaches the
//!   destination.
//!
//! Missing `mpirun`/`mpicc` fails with "install openmpi-bin" /
//! "install libopenmpi-dev" unless STRATA_TEST_ALLOW_MISSING=1
//! (scripts/test.sh installs them).

mod adapter_util;
mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use adapter_util::*;
use common::{strata_bin, TestDaemon};

const RANKS: usize = 4;

/// `mpirun --oversubscribe -np RANKS` (the test machine may have fewer cores).
fn mpirun_args() -> Vec<String> {
    vec![
        "mpirun".into(),
        "--oversubscribe".into(),
        "-np".into(),
        RANKS.to_string(),
    ]
}

fn showme(what: &str) -> Vec<String> {
    let o = Command::new("mpicc")
        .arg(format!("--showme:{what}"))
        .output()
        .expect("run mpicc --showme");
    assert!(
        o.status.success(),
        "mpicc --showme:{what} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Compiles tests/adapter/mpi_ranks.c with the system compiler and the
/// flags `mpicc` reports.
fn compile_mpi_ranks(out: &Path) -> PathBuf {
    let mut flags = showme("compile");
    flags.extend(showme("link"));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    compile_c(&adapter_src("mpi_ranks.c"), out, &flags)
}

fn daemon_answers(socket: &Path) -> bool {
    matches!(
        strata_client::control_request(socket, &strata_proto::control::ControlRequest::Ping),
        Ok(strata_proto::control::ControlReply::Ok)
    )
}

fn sh_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

#[test]
fn mpi_ranks_each_under_strata_run_share_one_private_daemon() {
    if !(require("mpirun", "openmpi-bin") && require("mpicc", "libopenmpi-dev")) {
        return;
    }
    preload_lib();
    let tmp = tempfile::Builder::new()
        .prefix("strata-mpi-")
        .tempdir()
        .unwrap();
    let (config, socket) = private_config(tmp.path());
    let tracked = tmp.path().join("tracked");
    let reference = tmp.path().join("reference");
    let pids = tmp.path().join("pids");
    let work = tmp.path().join("work");
    for p in [&tracked, &reference, &pids, &work] {
        std::fs::create_dir_all(p).unwrap();
    }
    let exe = compile_mpi_ranks(&work.join("mpi_ranks"));
    // 1 MiB + 4 KiB + 5 bytes per rank: rank boundaries fall inside pages.
    let chunk = ((1u64 << 20) + 4096 + 5).to_string();

    // Reference run, without strata.
    let mut c = Command::new("mpirun");
    c.args(&mpirun_args()[1..])
        .arg(&exe)
        .args(["shared.bin", &chunk])
        .current_dir(&reference)
        .env_remove("LD_PRELOAD");
    mpi_env(&mut c);
    let want = run_cmd(c, &work);
    want.assert_ok("mpi_ranks without strata");
    let want_ok = format!(
        "ok {} bytes\n",
        RANKS as u64 * chunk.parse::<u64>().unwrap()
    );
    assert_eq!(want.stdout_str(), want_ok, "reference run's report");

    // One `strata run` per rank. Each records the daemon it uses (status
    // without the adapter), then runs the MPI program; the ranks meet at
    // MPI_Barrier, so all of them hold the daemon at the same time.
    assert!(!daemon_answers(&socket));
    let script = format!(
        "env -u LD_PRELOAD {bin} --config {cfg} status --json | grep '\"pid\"' > {pids}/pid.$OMPI_COMM_WORLD_RANK && exec {exe} shared.bin {chunk}",
        bin = sh_quote(&strata_bin()),
        cfg = sh_quote(&config),
        pids = sh_quote(&pids),
        exe = sh_quote(&exe),
    );
    let mut c = Command::new("mpirun");
    c.args(&mpirun_args()[1..])
        .arg(strata_bin())
        .arg("--config")
        .arg(&config)
        .args(["run", "--mode", "default", "--include"])
        .arg(&tracked)
        .args(["--", "sh", "-c", &script])
        .current_dir(&tracked)
        .env_remove("LD_PRELOAD")
        .env_remove("STRATA_SOCKET")
        .env_remove("STRATA_CONFIG")
        .env_remove("STRATA_MODE")
        .env_remove("STRATA_INCLUDE")
        .env_remove("STRATA_EXCLUDE")
        .env_remove("STRATA_PRELOAD_LIB")
        .env("LC_ALL", "C");
    mpi_env(&mut c);
    let got = run_cmd(c, &work);
    got.assert_ok("mpirun -np 4 strata run --mode default -- mpi_ranks");
    assert_eq!(
        got.stdout_str(),
        want_ok,
        "rank 0's report under strata run; stderr:\n{}",
        got.stderr
    );

    // One daemon, shared by every rank, stopped by the last one.
    let seen: Vec<String> = (0..RANKS)
        .map(|r| {
            std::fs::read_to_string(pids.join(format!("pid.{r}")))
                .unwrap_or_else(|e| {
                    panic!(
                        "rank {r} recorded no daemon pid ({e}); stderr:\n{}",
                        got.stderr
                    )
                })
                .trim()
                .to_string()
        })
        .collect();
    assert!(
        seen.iter().all(|p| p == &seen[0] && !p.is_empty()),
        "ranks saw different daemons: {seen:?}"
    );
    // mpirun merges the ranks' stderr: summaries may interleave mid-line, so count matches.
    let summaries = got.stderr.matches("written to the buffer").count();
    assert_eq!(summaries, RANKS, "one summary per rank:\n{}", got.stderr);
    // Each rank's writes happened inside its own summary's window: a 0B summary
    // means the adapter passed the files straight through.
    assert!(
        !got.stderr.contains("strata: 0B written"),
        "a rank buffered nothing:\n{}",
        got.stderr
    );
    let stopped = got.stderr.matches("private daemon stopped").count();
    assert_eq!(
        stopped, 1,
        "exactly one rank (the last) stops the private daemon:\n{}",
        got.stderr
    );
    assert!(
        !daemon_answers(&socket),
        "the private daemon is still running"
    );

    // DEFAULT mode: everything drained to the destination, byte for byte.
    assert_same_tree(
        &tracked,
        &reference,
        &|_| false,
        "mpi_ranks (DEFAULT mode, destination after the runs)",
    );
}

/// Writes `scratch.<rank>` (a size and bytes depending on the rank) in the
/// current directory; no communication between ranks.
const RANK_WRITER: &str = r#"
import os
r = int(os.environ["OMPI_COMM_WORLD_RANK"])
n = 300000 + r * 65537
data = bytes((i * 31 + r * 7 + (i >> 12)) % 251 for i in range(n))
with open(f"scratch.{r}", "wb") as f:
    for at in range(0, n, 70001):
        f.write(data[at:at + 70001])
with open(f"scratch.{r}", "rb") as f:
    assert f.read() == data, "read back differs"
"#;

#[test]
fn mpirun_under_one_strata_run_scratch_then_read_back() {
    if !(require("mpirun", "openmpi-bin") && require("python3", "python3")) {
        return;
    }
    let d = TestDaemon::start();
    // Outside the daemon's directory (the socket's directory is never tracked).
    let tmp = tempfile::Builder::new()
        .prefix("strata-mpi-")
        .tempdir()
        .unwrap();
    let tracked = tmp.path().join("tracked");
    let reference = tmp.path().join("reference");
    let work = tmp.path().join("work");
    for p in [&tracked, &reference, &work] {
        std::fs::create_dir_all(p).unwrap();
    }
    let mut argv = mpirun_args();
    argv.extend(["python3".into(), "-c".into(), RANK_WRITER.into()]);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();

    let mut c = Command::new(argv[0]);
    c.args(&argv[1..])
        .current_dir(&reference)
        .env_remove("LD_PRELOAD");
    mpi_env(&mut c);
    run_cmd(c, &work).assert_ok("mpirun python3 without strata");

    let os_argv: Vec<&OsStr> = argv.iter().map(OsStr::new).collect();
    let mut c = strata_run_cmd(&d, Mode::Scratch, &tracked, &tracked, &os_argv);
    mpi_env(&mut c);
    let got = run_cmd(c, &work);
    if !got.ok() {
        panic!(
            "strata run --mode scratch -- mpirun … failed (exit {:?}, signal {:?})\n--- stderr ---\n{}\n--- daemon log ---\n{}",
            got.code,
            got.signal,
            tail(&got.stderr, 60),
            tail(&d.log(), 30)
        );
    }
    assert!(
        !got.stderr.contains("strata: 0B written"),
        "nothing was buffered:\n{}",
        got.stderr
    );

    // A later run reads every rank's file back from the buffer.
    let names: Vec<String> = (0..RANKS).map(|r| format!("scratch.{r}")).collect();
    let mut cat = vec!["cat", "--"];
    cat.extend(names.iter().map(String::as_str));
    let want = plain_run(&reference, &cat, &work);
    want.assert_ok("cat of the reference files");
    let back = strata_run(&d, Mode::Scratch, &tracked, &tracked, &cat);
    back.assert_ok("strata run --mode scratch -- cat");
    assert!(
        back.stdout == want.stdout,
        "files read back through the adapter differ from the reference ({} bytes, want {})",
        back.stdout.len(),
        want.stdout.len()
    );

    // SCRATCH: none of them exists at the destination.
    let at_dest: Vec<&String> = names.iter().filter(|n| tracked.join(n).exists()).collect();
    assert!(
        at_dest.is_empty(),
        "SCRATCH files reached the destination: {at_dest:?}"
    );
    let leaks = scratch_leaks(&tracked, &Default::default());
    assert!(
        leaks.is_empty(),
        "SCRATCH mode wrote to the destination:\n  {}",
        leaks.join("\n  ")
    );
}
