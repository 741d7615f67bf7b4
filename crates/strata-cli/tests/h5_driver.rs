//! The HDF5 virtual file driver (`libstrata_h5fd`, issue 16), HDF5 1.10:
//! a C program linked with it (`tests/adapter/h5vfd.c`: chunked + gzip
//! datasets, attributes, resizes, reopen, 200 small datasets) against a
//! private daemon, compared with the same program on HDF5's sec2 driver.
//!
//! * DEFAULT: after `strata flush --wait` the destination file is
//!   byte-identical to sec2's, and so is `h5dump`'s output.
//! * SCRATCH: nothing reaches the destination, and `h5dump` under
//!   `strata run --mode scratch` (the POSIX adapter) reads the same buffered
//!   file the driver wrote — one file model for both.
//!
//! Missing HDF5 packages fail with what to install unless
//! STRATA_TEST_ALLOW_MISSING=1 (scripts/test.sh installs them).

mod adapter_util;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use adapter_util::*;
use common::TestDaemon;

fn hdf5_flags() -> Option<Vec<String>> {
    let o = Command::new("pkg-config")
        .args(["--cflags", "--libs", "hdf5-serial"])
        .output()
        .ok()
        .filter(|o| o.status.success());
    match o {
        Some(o) => Some(
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .map(str::to_string)
                .collect(),
        ),
        None if allow_missing() => {
            eprintln!("SKIPPED: hdf5-serial development files missing (install libhdf5-dev)");
            None
        }
        None => panic!("pkg-config cannot find hdf5-serial: install libhdf5-dev and pkg-config"),
    }
}

/// h5vfd.c linked with libstrata_h5fd (found through an rpath).
fn build(out: &Path) -> Option<PathBuf> {
    if !require("h5dump", "hdf5-tools") {
        return None;
    }
    let mut flags = hdf5_flags()?;
    let lib = h5fd_lib();
    let libdir = lib.parent().unwrap().display().to_string();
    let include = workspace_root().join("include").display().to_string();
    flags.extend([
        format!("-I{include}"),
        format!("-L{libdir}"),
        "-lstrata_h5fd".into(),
        format!("-Wl,-rpath,{libdir}"),
    ]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Some(compile_c(&adapter_src("h5vfd.c"), out, &flags))
}

fn h5vfd(exe: &Path, d: &TestDaemon, args: &[&str], cwd: &Path) -> Ran {
    let mut c = Command::new(exe);
    c.args(args)
        .current_dir(cwd)
        .env_remove("LD_PRELOAD")
        .env("STRATA_SOCKET", &d.socket)
        .env("STRATA_CONFIG", &d.config);
    run_cmd(c, d.path())
}

fn dump(dir: &Path, name: &str) -> String {
    let o = Command::new("h5dump")
        .arg(name)
        .current_dir(dir)
        .output()
        .expect("run h5dump");
    assert!(o.status.success(), "h5dump {name} in {}", dir.display());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn default_mode_drains_the_same_bytes_as_sec2() {
    let d = TestDaemon::start();
    let tmp = tempfile::tempdir().unwrap();
    let Some(exe) = build(&tmp.path().join("h5vfd")) else {
        return;
    };
    let (buf, twin) = (tmp.path().join("buffered"), tmp.path().join("twin"));
    std::fs::create_dir_all(&buf).unwrap();
    std::fs::create_dir_all(&twin).unwrap();
    let want = h5vfd(&exe, &d, &["sec2", "f.h5"], &twin);
    want.assert_ok("h5vfd sec2");
    let got = h5vfd(&exe, &d, &["strata", "f.h5", "default"], &buf);
    got.assert_ok("h5vfd strata default");
    assert_eq!(got.stdout_str(), want.stdout_str(), "values read back");
    flush_wait(&d, &buf).assert_ok("strata flush --wait");
    assert_same_tree(&buf, &twin, &|_| false, "HDF5 file: strata driver vs sec2");
    assert_eq!(dump(&buf, "f.h5"), dump(&twin, "f.h5"), "h5dump outputs");
}

#[test]
fn scratch_mode_is_the_file_the_posix_adapter_sees() {
    let d = TestDaemon::start();
    let tmp = tempfile::tempdir().unwrap();
    let Some(exe) = build(&tmp.path().join("h5vfd")) else {
        return;
    };
    let (buf, twin) = (tmp.path().join("buffered"), tmp.path().join("twin"));
    std::fs::create_dir_all(&buf).unwrap();
    std::fs::create_dir_all(&twin).unwrap();
    let want = h5vfd(&exe, &d, &["sec2", "s.h5"], &twin);
    want.assert_ok("h5vfd sec2");
    let got = h5vfd(&exe, &d, &["strata", "s.h5", "scratch"], &buf);
    got.assert_ok("h5vfd strata scratch");
    assert_eq!(got.stdout_str(), want.stdout_str(), "values read back");
    assert!(
        !buf.join("s.h5").exists(),
        "a SCRATCH file reached the destination"
    );
    // HDF5's metadata went to page 0 (the superblock, object headers): hot
    let path = buf.join("s.h5").canonicalize().unwrap_or(buf.join("s.h5"));
    let bucket = d
        .client()
        .bucket_open(&path.display().to_string())
        .expect("the driver's file is a bucket of the file model");
    let page0 = bucket.stat("0").expect("page 0 is buffered");
    assert_eq!(page0.user_score, Some(1.0), "metadata page marked hot");
    let seen = strata_run(&d, Mode::Scratch, &buf, &buf, &["h5dump", "s.h5"]);
    seen.assert_ok("strata run --mode scratch -- h5dump s.h5");
    assert_eq!(
        seen.stdout_str(),
        dump(&twin, "s.h5"),
        "h5dump through the POSIX adapter of the driver's SCRATCH file vs sec2's"
    );
}

#[test]
fn a_missing_daemon_is_an_hdf5_error_naming_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(exe) = build(&tmp.path().join("h5vfd")) else {
        return;
    };
    let mut c = Command::new(&exe);
    c.args(["strata", "f.h5", "default"])
        .current_dir(tmp.path())
        .env_remove("LD_PRELOAD")
        .env("STRATA_SOCKET", tmp.path().join("no-daemon.sock"));
    let r = run_cmd(c, tmp.path());
    assert!(!r.ok(), "opened a file without a daemon");
    assert!(
        r.stderr.contains("cannot reach the strata daemon")
            && r.stderr.contains("strata daemon start"),
        "HDF5's error stack should carry strata's message:\n{}",
        r.stderr
    );
    assert!(!tmp.path().join("f.h5").exists());
}

/// A Python with h5py (whose wheel bundles its own HDF5, 1.14 or later):
/// `$TEST_H5PY_PYTHON` (scripts/test.sh makes a venv), else python3.
fn h5py_python() -> Option<String> {
    let py = std::env::var("TEST_H5PY_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import h5py"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(py);
    }
    if allow_missing() {
        eprintln!("SKIPPED: no python with h5py ({py}); scripts/test.sh makes one");
        return None;
    }
    panic!("{py} cannot import h5py: pip install h5py (or set TEST_H5PY_PYTHON)");
}

/// h5py_vfd.py in `cwd` on `name`; `mode` selects strata's plugin
/// (HDF5_DRIVER=strata, HDF5_DRIVER_CONFIG=mode), None HDF5's default sec2.
fn h5py_run(
    py: &str,
    d: &TestDaemon,
    plugins: &Path,
    mode: Option<&str>,
    cwd: &Path,
    name: &str,
) -> Ran {
    let mut c = Command::new(py);
    c.arg(adapter_src("h5py_vfd.py"))
        .arg(name)
        .current_dir(cwd)
        .env_remove("LD_PRELOAD")
        .env_remove("HDF5_DRIVER")
        .env_remove("HDF5_DRIVER_CONFIG")
        .env("STRATA_SOCKET", &d.socket)
        .env("STRATA_CONFIG", &d.config);
    if let Some(m) = mode {
        c.env("HDF5_PLUGIN_PATH", plugins)
            .env("HDF5_DRIVER", "strata")
            .env("HDF5_DRIVER_CONFIG", m);
    }
    run_cmd(c, d.path())
}

/// The plugin inside h5py (HDF5 ≥ 1.14 from the wheel, which the system's
/// HDF5 1.10 must not meet — the library links no HDF5): DEFAULT drains a
/// file byte-identical to sec2's; SCRATCH stays in the buffer and is the
/// file `h5dump` sees through the POSIX adapter.
#[test]
fn h5py_through_the_plugin_matches_sec2() {
    let Some(py) = h5py_python() else {
        return;
    };
    if !require("h5dump", "hdf5-tools") {
        return;
    }
    let d = TestDaemon::start();
    let tmp = tempfile::tempdir().unwrap();
    let plugins = tmp.path().join("plugins");
    let (buf, twin) = (tmp.path().join("buffered"), tmp.path().join("twin"));
    for p in [&plugins, &buf, &twin] {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::copy(h5fd_lib(), plugins.join("libstrata_h5fd.so")).unwrap();

    let want = h5py_run(&py, &d, &plugins, None, &twin, "f.h5");
    want.assert_ok("h5py, sec2");
    let got = h5py_run(&py, &d, &plugins, Some("default"), &buf, "f.h5");
    got.assert_ok("h5py, strata plugin, default");
    let (w, g) = (want.stdout_str(), got.stdout_str());
    assert!(
        w.contains("driver=sec2") && g.contains("driver=unknown"),
        "{w}{g}"
    );
    assert_eq!(
        g.split(" driver").next(),
        w.split(" driver").next(),
        "checksums of what was read back"
    );
    flush_wait(&d, &buf).assert_ok("strata flush --wait");
    assert_same_tree(&buf, &twin, &|_| false, "h5py file: strata plugin vs sec2");
    assert_eq!(dump(&buf, "f.h5"), dump(&twin, "f.h5"), "h5dump outputs");

    let got = h5py_run(&py, &d, &plugins, Some("scratch"), &buf, "s.h5");
    got.assert_ok("h5py, strata plugin, scratch");
    assert!(
        !buf.join("s.h5").exists(),
        "a SCRATCH file reached the destination"
    );
    std::fs::rename(twin.join("f.h5"), twin.join("s.h5")).unwrap();
    let seen = strata_run(&d, Mode::Scratch, &buf, &buf, &["h5dump", "s.h5"]);
    seen.assert_ok("strata run --mode scratch -- h5dump s.h5");
    assert_eq!(seen.stdout_str(), dump(&twin, "s.h5"));
}
