//! `strata stage-in` / `strata stage-out` and their C ABI against a real
//! daemon: a staged tree is then read from the buffer under `strata run`
//! (no read-through), WORKFLOW output reaches the destination only at
//! stage-out (bytes identical), eviction, manifests and error reporting.
//! Work directories live outside the daemon socket's directory (the
//! adapter never buffers that one).

mod adapter_util;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use adapter_util::{bytes, preload_lib, run_cmd, workspace_root, Ran};
use common::{strata_bin, TestDaemon};

/// `strata run --mode MODE --include INCLUDE -- argv…` in `cwd` against `d`.
fn strata_run(d: &TestDaemon, mode: &str, include: &Path, cwd: &Path, argv: &[&str]) -> Ran {
    preload_lib();
    let mut c = Command::new(strata_bin());
    c.current_dir(cwd)
        .env_remove("LD_PRELOAD")
        .env_remove("STRATA_MODE")
        .env_remove("STRATA_INCLUDE")
        .env_remove("STRATA_EXCLUDE")
        .env_remove("STRATA_PRELOAD_LIB")
        .env("STRATA_SOCKET", &d.socket)
        .env("LC_ALL", "C")
        .arg("--config")
        .arg(&d.config)
        .args(["run", "--quiet", "--mode", mode, "--include"])
        .arg(include)
        .arg("--")
        .args(argv);
    run_cmd(c, d.path())
}

/// `strata ARGS…` against `d`, from `cwd`.
fn strata(d: &TestDaemon, cwd: &Path, args: &[&str]) -> Ran {
    let mut c = d.cmd();
    c.current_dir(cwd).env_remove("LD_PRELOAD").args(args);
    run_cmd(c, d.path())
}

fn write(path: &Path, data: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

/// A small tree: sizes around page boundaries, an empty file, deep nesting.
fn make_tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let files = [
        ("a/x.bin", (3 << 20) + 123),
        ("a/b/y.bin", 1 << 20),
        ("z.txt", 10),
        ("empty.bin", 0),
        ("c/d/e/f.bin", 700 << 10),
    ];
    let mut out = Vec::new();
    for (i, (rel, len)) in files.iter().enumerate() {
        let data = bytes(i as u64 + 1, *len);
        write(&root.join(rel), &data);
        out.push((rel.to_string(), data));
    }
    out
}

fn stage_state(d: &TestDaemon, path: &Path) -> strata_proto::control::StageReply {
    strata_client::stage::stage_state_at(&d.socket, &[path.to_str().unwrap().to_string()])
        .expect("stage state")
}

/// sha256sum of `rels` (relative to `cwd`), with or without strata.
fn sums(d: Option<(&TestDaemon, &Path)>, cwd: &Path, rels: &[&str]) -> String {
    let mut argv = vec!["sha256sum"];
    argv.extend_from_slice(rels);
    let r = match d {
        Some((d, include)) => strata_run(d, "workflow", include, cwd, &argv),
        None => {
            let mut c = Command::new("sha256sum");
            c.args(rels).current_dir(cwd).env_remove("LD_PRELOAD");
            run_cmd(c, cwd)
        }
    };
    r.assert_ok("sha256sum");
    r.stdout_str()
}

#[test]
fn staged_tree_is_read_from_the_buffer_under_strata_run() {
    let d = TestDaemon::start();
    let work = tempfile::Builder::new()
        .prefix("strata-stage-")
        .tempdir()
        .unwrap();
    let root = work.path().join("in");
    let files = make_tree(&root);
    let total: u64 = files.iter().map(|(_, b)| b.len() as u64).sum();
    let before = d.status().files;

    let r = strata(&d, work.path(), &["stage-in", "in", "--jobs", "3"]);
    r.assert_ok("stage-in");
    let out = r.stdout_str();
    assert!(out.contains("staged in 5 files"), "{out}");
    assert!(out.contains("MiB/s"), "{out}");
    let staged = d.status().files;
    assert!(
        staged.read_dest_bytes_total - before.read_dest_bytes_total >= total,
        "stage-in read {} bytes from the destination, want ≥ {total}",
        staged.read_dest_bytes_total - before.read_dest_bytes_total
    );
    let s = stage_state(&d, &root);
    assert_eq!(s.buffered_bytes, total, "{s:?}");
    assert_eq!(
        (s.persisted_files, s.pending_files()),
        (5, 0),
        "staged-in files are clean: {s:?}"
    );
    assert!(s.files.iter().all(|f| f.mode == "workflow"), "{s:?}");

    // Reads under `strata run` hit the buffer: no read-through at all.
    let rels: Vec<&str> = files.iter().map(|(r, _)| r.as_str()).collect();
    let want = sums(None, &root, &rels);
    let got = sums(Some((&d, work.path())), &root, &rels);
    assert_eq!(got, want);
    let after = d.status().files;
    assert_eq!(
        after.read_dest_bytes_total, staged.read_dest_bytes_total,
        "reads after stage-in went to the destination"
    );
    assert!(
        after.read_hit_bytes_total - staged.read_hit_bytes_total >= total,
        "reads did not hit the buffer: {after:?}"
    );

    // Staging again is cheap and changes nothing.
    strata(&d, work.path(), &["stage-in", "-q", "in"]).assert_ok("stage-in again");
    assert_eq!(
        d.status().files.read_dest_bytes_total,
        staged.read_dest_bytes_total
    );
}

#[test]
fn workflow_output_reaches_the_destination_only_at_stage_out() {
    let d = TestDaemon::start();
    let work = tempfile::Builder::new()
        .prefix("strata-stage-")
        .tempdir()
        .unwrap();
    let reference = tempfile::Builder::new()
        .prefix("strata-stage-ref-")
        .tempdir()
        .unwrap();
    let (a, b) = (bytes(11, (5 << 20) + 4097), bytes(12, 12345));
    write(&reference.path().join("a"), &a);
    write(&reference.path().join("b"), &b);
    let out = work.path().join("out");
    let script = format!(
        "mkdir -p out/sub && cp {r}/a out/a && cp {r}/b out/sub/b && printf hello > out/c.txt",
        r = reference.path().display()
    );
    strata_run(
        &d,
        "workflow",
        work.path(),
        work.path(),
        &["sh", "-c", &script],
    )
    .assert_ok("workflow run");
    for rel in ["a", "sub/b", "c.txt"] {
        assert!(
            !out.join(rel).exists(),
            "WORKFLOW file {rel} reached the destination before stage-out"
        );
    }
    let s = stage_state(&d, &out);
    assert_eq!((s.dirty_files, s.persisted_files), (3, 0), "{s:?}");
    assert_eq!(s.dirty_bytes, (a.len() + b.len() + 5) as u64);

    let r = strata(&d, work.path(), &["stage-out", "out"]);
    r.assert_ok("stage-out");
    assert!(
        r.stdout_str().contains("staged out 3 files"),
        "{}",
        r.stdout_str()
    );
    assert_eq!(std::fs::read(out.join("a")).unwrap(), a);
    assert_eq!(std::fs::read(out.join("sub/b")).unwrap(), b);
    assert_eq!(std::fs::read(out.join("c.txt")).unwrap(), b"hello");
    let s = stage_state(&d, &out);
    assert_eq!((s.persisted_files, s.pending_files()), (3, 0), "{s:?}");
    assert!(s.files.iter().all(|f| f.staged_out));
    assert_eq!(s.buffered_bytes, (a.len() + b.len() + 5) as u64);

    // Evict: the pages leave the buffer, reads go to the destination, bytes unchanged.
    let r = strata(&d, work.path(), &["stage-out", "--evict", "out"]);
    r.assert_ok("stage-out --evict");
    assert!(r.stdout_str().contains("evicted"), "{}", r.stdout_str());
    assert_eq!(stage_state(&d, &out).buffered_bytes, 0);
    let before = d.status().files;
    let want = sums(None, &out, &["a", "sub/b", "c.txt"]);
    assert_eq!(
        sums(Some((&d, work.path())), &out, &["a", "sub/b", "c.txt"]),
        want
    );
    let after = d.status().files;
    // Each evicted page was read from the destination once (and filled back).
    assert!(
        after.read_dest_bytes_total > before.read_dest_bytes_total,
        "evicted pages were not read from the destination: {before:?} → {after:?}"
    );
    assert_eq!(
        stage_state(&d, &out).buffered_bytes,
        (a.len() + b.len() + 5) as u64,
        "read-through fills the pages back"
    );
}

#[test]
fn manifests_and_errors() {
    let d = TestDaemon::start();
    let work = tempfile::Builder::new()
        .prefix("strata-stage-")
        .tempdir()
        .unwrap();
    let w = work.path();
    write(&w.join("one.bin"), &bytes(1, 5000));
    write(&w.join("dir/two.bin"), &bytes(2, 7000));
    write(&w.join("dir/three.bin"), &bytes(3, 100));
    let manifest = w.join("inputs.txt");
    std::fs::write(
        &manifest,
        format!(
            "# inputs of step 2\n\none.bin\n  {}  \n# {}\n",
            w.join("dir").display(),
            w.join("missing").display()
        ),
    )
    .unwrap();
    let r = strata(
        &d,
        w,
        &["stage-in", "--manifest", manifest.to_str().unwrap()],
    );
    r.assert_ok("stage-in --manifest");
    assert!(
        r.stdout_str().contains("staged in 3 files"),
        "{}",
        r.stdout_str()
    );

    // A missing path: the others are staged, the missing one named, exit 1.
    let r = strata(
        &d,
        w,
        &[
            "stage-in",
            "one.bin",
            "nope/missing.bin",
            "--mode",
            "default",
        ],
    );
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout_str(), r.stderr);
    assert!(
        r.stderr.contains("nope/missing.bin") && r.stderr.contains("No such file"),
        "{}",
        r.stderr
    );
    assert!(
        r.stdout_str().contains("staged in 1 file,") && r.stdout_str().contains("1 failed"),
        "{}",
        r.stdout_str()
    );
    let r = strata(&d, w, &["stage-out", "nope"]);
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout_str(), r.stderr);
    assert!(
        r.stderr.contains("nope") && r.stderr.contains("no such file or directory"),
        "{}",
        r.stderr
    );
    // Nothing to stage: a clear message, exit 1.
    for cmd in ["stage-in", "stage-out"] {
        let r = strata(&d, w, &[cmd]);
        assert_eq!(r.code, Some(1), "{cmd}: {}", r.stderr);
        assert!(
            r.stderr.contains("give at least one PATH"),
            "{cmd}: {}",
            r.stderr
        );
    }
    let r = strata(&d, w, &["stage-in", "--manifest", "absent.txt"]);
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("absent.txt"), "{}", r.stderr);
    // A path at the destination with nothing buffered is fine (nothing to do).
    write(&w.join("plain.bin"), b"x");
    let m2 = w.join("out.txt");
    std::fs::write(&m2, "plain.bin\none.bin\n").unwrap();
    let r = strata(&d, w, &["stage-out", "--manifest", m2.to_str().unwrap()]);
    r.assert_ok("stage-out of clean and unbuffered files");
    // No daemon: the error names the socket.
    let cfg = std::fs::read_to_string(&d.config).unwrap().replace(
        d.socket.to_str().unwrap(),
        w.join("none.sock").to_str().unwrap(),
    );
    let cfg_path = w.join("nodaemon.yaml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let mut c3 = Command::new(strata_bin());
    c3.current_dir(w)
        .env_remove("STRATA_SOCKET")
        .arg("--config")
        .arg(&cfg_path)
        .args(["stage-out", "one.bin"]);
    let r = run_cmd(c3, d.path());
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("none.sock"), "{}", r.stderr);
}

/// Builds libstrata.so like tests/c_api.rs and returns its directory.
fn lib_dir() -> PathBuf {
    let dir = strata_bin().parent().unwrap().to_path_buf();
    let profile = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_string();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(workspace_root())
        .args(["build", "-p", "strata-capi"]);
    if profile != "debug" {
        cmd.args(["--profile", &profile]);
    }
    let out = cmd.output().expect("cargo build -p strata-capi");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

const C_PROGRAM: &str = r#"
#include <stdio.h>
#include <string.h>
#include <strata.h>

static unsigned long calls, last_bytes;
static void progress(uint64_t fd, uint64_t ft, uint64_t bd, uint64_t bt, void *ctx) {
    (void)fd; (void)ft; (void)bt; (void)ctx;
    calls++;
    last_bytes = bd;
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    strata_client *c;
    int rc = strata_connect(argv[1], &c);
    if (rc) { printf("connect %s\n", strata_strerror(rc)); return 1; }
    const char *in[] = { argv[2] };
    strata_stage_report r;
    rc = strata_stage_in(c, in, 1, STRATA_MODE_WORKFLOW, 2, progress, NULL, &r);
    printf("in rc=%d files=%llu bytes=%llu buffered=%llu failed=%llu calls>0=%d last=%lu\n", rc,
           (unsigned long long)r.files, (unsigned long long)r.bytes, (unsigned long long)r.buffered_bytes,
           (unsigned long long)r.failed, calls > 0, last_bytes);
    rc = strata_stage_out(c, in, 1, STRATA_STAGE_EVICT, 60.0, NULL, NULL, &r);
    printf("out rc=%d files=%llu evicted=%llu buffered=%llu\n", rc, (unsigned long long)r.files,
           (unsigned long long)r.evicted_bytes, (unsigned long long)r.buffered_bytes);
    const char *missing[] = { argv[3] };
    rc = strata_stage_out(c, missing, 1, 0, 0.0, NULL, NULL, NULL);
    printf("missing rc=%s msg=%s\n", strata_error_name(rc), strstr(strata_last_error_message(), argv[3]) ? "names-path" : strata_last_error_message());
    rc = strata_stage_in(c, missing, 1, 7, 0, NULL, NULL, NULL);
    printf("badmode rc=%s\n", strata_error_name(rc));
    strata_disconnect(c);
    return 0;
}
"#;

#[test]
fn c_api_stage_in_and_out() {
    let d = TestDaemon::start();
    let work = tempfile::Builder::new()
        .prefix("strata-stage-c-")
        .tempdir()
        .unwrap();
    let root = work.path().join("data");
    let files = make_tree(&root);
    let total: u64 = files.iter().map(|(_, b)| b.len() as u64).sum();
    let src = work.path().join("stage.c");
    std::fs::write(&src, C_PROGRAM).unwrap();
    let lib = lib_dir();
    let exe = work.path().join("stage");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let o = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(workspace_root().join("include"))
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lstrata")
        .output()
        .expect("C compiler");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut c = Command::new(&exe);
    c.arg(&d.socket)
        .arg(&root)
        .arg(work.path().join("missing"))
        .env_remove("LD_PRELOAD");
    let r = run_cmd(c, d.path());
    r.assert_ok("C program");
    let out = r.stdout_str();
    assert!(
        out.contains(&format!(
            "in rc=0 files=5 bytes={total} buffered={total} failed=0 calls>0=1 last={total}\n"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("out rc=0 files=5 evicted={total} buffered=0\n")),
        "{out}"
    );
    assert!(
        out.contains("missing rc=STRATA_ENOFILE msg=names-path"),
        "{out}"
    );
    assert!(out.contains("badmode rc=STRATA_EINVAL"), "{out}");
}

#[test]
fn stage_out_failure_is_reported_then_retried() {
    let d = TestDaemon::start();
    let work = tempfile::Builder::new()
        .prefix("strata-stage-")
        .tempdir()
        .unwrap();
    let w = work.path();
    strata_run(
        &d,
        "workflow",
        w,
        w,
        &["sh", "-c", "mkdir -p out && printf payload > out/x"],
    )
    .assert_ok("workflow run");
    // The destination directory is replaced by a file: the flush cannot open out/x.
    std::fs::rename(w.join("out"), w.join("out.away")).unwrap();
    std::fs::write(w.join("out"), b"not a directory").unwrap();
    let r = strata(&d, w, &["stage-out", "-q", "out/x"]);
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout_str(), r.stderr);
    assert!(
        r.stderr.contains("out/x") && r.stderr.contains("cannot persist"),
        "{}",
        r.stderr
    );
    assert!(r.stdout_str().contains("1 failed"), "{}", r.stdout_str());
    let s = stage_state(&d, &w.join("out/x"));
    assert_eq!(s.failed_files, 1, "{s:?}");
    assert!(s.files[0].error.is_some());
    // Restored: stage-out retries at once and succeeds.
    std::fs::remove_file(w.join("out")).unwrap();
    std::fs::rename(w.join("out.away"), w.join("out")).unwrap();
    strata(&d, w, &["stage-out", "out/x"]).assert_ok("stage-out after the fix");
    assert_eq!(std::fs::read(w.join("out/x")).unwrap(), b"payload");
}
