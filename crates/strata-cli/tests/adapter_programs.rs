//! Real, unmodified programs under `strata run`, with results byte-identical
//! to the same commands run without it: cp, cat, dd, tar, sort, sha256sum,
//! a python3 script, sqlite3, h5dump/h5repack, fio (verify=crc32c, psync).
//!
//! Each program's steps run in a reference directory without strata and in
//! a tracked directory under `strata run`, on identical inputs that exist at
//! the destination beforehand (read-through). Standard output must match
//! step by step; then
//! * DEFAULT mode: after `strata flush --wait`, the tracked directory at the
//!   destination must equal the reference directory byte for byte;
//! * SCRATCH mode: every reference file read back through the adapter (one
//!   `sha256sum` under `strata run`) must match, and nothing but the
//!   untouched inputs may hold data at the destination.
//!
//! A missing program fails the test with "install X" unless
//! STRATA_TEST_ALLOW_MISSING=1 (scripts/test.sh installs them all).

mod adapter_util;
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use adapter_util::*;
use common::TestDaemon;

/// One step: a shell command line (run with `sh -c` in the test directory)
/// and whether its standard output must be identical.
struct Step {
    sh: String,
    same_stdout: bool,
}

fn step(sh: impl Into<String>) -> Step {
    Step {
        sh: sh.into(),
        same_stdout: true,
    }
}

/// A check of the tracked directory at the destination (DEFAULT mode).
type AfterCheck = Box<dyn Fn(&Path)>;

struct Case {
    name: &'static str,
    /// Input files (relative path → bytes) created in both directories first.
    inputs: Vec<(String, Vec<u8>)>,
    /// Shell commands run in both directories without strata first (what
    /// `inputs` cannot make: links, trees).
    outside: Vec<String>,
    steps: Vec<Step>,
    /// Files whose bytes legitimately differ between runs (checked otherwise).
    not_byte_identical: Vec<&'static str>,
    /// Extra checks after the steps (DEFAULT: at the destination after flush).
    after_default: Option<AfterCheck>,
}

impl Case {
    fn new(name: &'static str) -> Case {
        Case {
            name,
            inputs: vec![],
            outside: vec![],
            steps: vec![],
            not_byte_identical: vec![],
            after_default: None,
        }
    }
    fn input(mut self, rel: &str, data: Vec<u8>) -> Case {
        self.inputs.push((rel.to_string(), data));
        self
    }
    fn outside(mut self, sh: &str) -> Case {
        self.outside.push(sh.to_string());
        self
    }
    fn step(mut self, s: Step) -> Case {
        self.steps.push(s);
        self
    }
}

struct Dirs {
    d: TestDaemon,
    _tmp: tempfile::TempDir,
    tracked: PathBuf,
    reference: PathBuf,
    scratch: PathBuf,
}

fn dirs() -> Dirs {
    let d = TestDaemon::start();
    let tmp = tempfile::Builder::new()
        .prefix("strata-prog-")
        .tempdir()
        .unwrap();
    let tracked = tmp.path().join("tracked");
    let reference = tmp.path().join("reference");
    let scratch = tmp.path().join("work");
    for p in [&tracked, &reference, &scratch] {
        std::fs::create_dir_all(p).unwrap();
    }
    Dirs {
        d,
        _tmp: tmp,
        tracked,
        reference,
        scratch,
    }
}

fn run_case(case: Case, mode: Mode) {
    let x = dirs();
    let mut inputs = BTreeMap::new();
    for (rel, data) in &case.inputs {
        seed_both(&[&x.tracked, &x.reference], rel, data);
        inputs.insert(rel.clone(), data.clone());
    }
    for sh in &case.outside {
        for dir in [&x.tracked, &x.reference] {
            plain_run(dir, &["sh", "-c", sh], &x.scratch)
                .assert_ok(&format!("{}: `{sh}` without strata", case.name));
        }
    }
    if !case.outside.is_empty() {
        // What the outside commands made is there before strata, like inputs.
        let mut stack = vec![x.tracked.clone()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                let md = std::fs::symlink_metadata(&p).unwrap();
                if md.is_dir() {
                    stack.push(p);
                } else if md.is_file() {
                    let rel = p
                        .strip_prefix(&x.tracked)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    inputs.insert(rel, std::fs::read(&p).unwrap());
                }
            }
        }
    }
    for (i, s) in case.steps.iter().enumerate() {
        let ctx = format!("{} ({} mode) step {i} `{}`", case.name, mode.as_str(), s.sh);
        let want = plain_run(&x.reference, &["sh", "-c", &s.sh], &x.scratch);
        want.assert_ok(&format!("{ctx} without strata"));
        let got = strata_run(&x.d, mode, &x.tracked, &x.tracked, &["sh", "-c", &s.sh]);
        if !got.ok() {
            panic!(
                "{ctx} under strata run failed (exit {:?}, signal {:?})\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- daemon log ---\n{}",
                got.code,
                got.signal,
                tail(&got.stdout_str(), 40),
                tail(&got.stderr, 60),
                tail(&x.d.log(), 30)
            );
        }
        if s.same_stdout && got.stdout != want.stdout {
            panic!(
                "{ctx}: standard output differs under strata run ({} bytes, want {})\n--- got ---\n{}\n--- want ---\n{}\n--- stderr ---\n{}",
                got.stdout.len(),
                want.stdout.len(),
                tail(&got.stdout_str(), 30),
                tail(&want.stdout_str(), 30),
                tail(&got.stderr, 30)
            );
        }
    }
    // an entry ending in '/' skips everything beneath that directory
    let skip = |name: &str| {
        case.not_byte_identical.iter().any(|n| {
            *n == name
                || (n.ends_with('/') && (name.starts_with(n) || name == n.trim_end_matches('/')))
        })
    };
    match mode {
        Mode::Default => {
            flush_wait(&x.d, &x.tracked).assert_ok(&format!("{}: strata flush --wait", case.name));
            assert_same_tree(
                &x.tracked,
                &x.reference,
                &skip,
                &format!("{} (DEFAULT mode, destination after flush)", case.name),
            );
            if let Some(f) = &case.after_default {
                f(&x.tracked);
            }
        }
        Mode::Scratch => {
            // Read every reference file back through the adapter.
            let files: Vec<String> = tree(&x.reference)
                .into_iter()
                .filter(|(n, e)| e.is_some() && !skip(n))
                .map(|(n, _)| n)
                .collect();
            if !files.is_empty() {
                let mut argv = vec!["sha256sum", "--"];
                argv.extend(files.iter().map(String::as_str));
                let want = plain_run(&x.reference, &argv, &x.scratch);
                want.assert_ok("sha256sum of the reference files");
                let got = strata_run(&x.d, Mode::Scratch, &x.tracked, &x.tracked, &argv);
                assert!(
                    got.ok() && got.stdout == want.stdout,
                    "{} (SCRATCH mode): files read back through the adapter differ from the reference (exit {:?})\n--- got ---\n{}\n--- want ---\n{}\n--- stderr ---\n{}",
                    case.name,
                    got.code,
                    got.stdout_str(),
                    want.stdout_str(),
                    tail(&got.stderr, 30)
                );
            }
            let leaks = scratch_leaks(&x.tracked, &inputs);
            assert!(
                leaks.is_empty(),
                "{} (SCRATCH mode) wrote to the destination:\n  {}",
                case.name,
                leaks.join("\n  ")
            );
        }
    }
}

// ---------------------------------------------------------------------------
// The programs

fn text_lines(seed: u64, n: usize) -> Vec<u8> {
    let words = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
        "juliet", "kilo", "lima",
    ];
    let r = bytes(seed, n * 3);
    let mut out = String::new();
    for i in 0..n {
        let w = words[r[3 * i] as usize % words.len()];
        out.push_str(&format!(
            "{w}-{:03} {}\n",
            r[3 * i + 1],
            u16::from(r[3 * i + 2]) * 7 % 1000
        ));
    }
    out.into_bytes()
}

fn cp_case() -> Option<Case> {
    require("cp", "coreutils").then(|| {
        Case::new("cp")
            .input("in.bin", bytes(1, (5 << 20) + 4321))
            .input("small.txt", text_lines(2, 100))
            .step(step("cp in.bin out.bin"))
            .step(step("cp out.bin out2.bin && cp small.txt small_copy.txt"))
            .step(step(
                "mkdir -p d && cp -r in.bin small.txt d/ && cp --sparse=always in.bin sparse.bin",
            ))
    })
}

fn cat_case() -> Option<Case> {
    require("cat", "coreutils").then(|| {
        Case::new("cat")
            .input("in.bin", bytes(3, (3 << 20) + 77))
            .input("small.txt", text_lines(4, 500))
            .step(step("cat in.bin small.txt > cat_out.bin"))
            .step(step("cat cat_out.bin | cat > piped.bin && cat small.txt"))
            .step(step(
                "cat small.txt >> log.txt; cat small.txt >> log.txt; cat log.txt | wc -c",
            ))
    })
}

fn dd_case() -> Option<Case> {
    require("dd", "coreutils").then(|| {
        Case::new("dd")
            .input("in.bin", bytes(5, (4 << 20) + 999))
            .input("small.txt", text_lines(6, 300))
            .step(step("dd if=in.bin of=dd1.bin bs=64k status=none"))
            .step(step("dd if=in.bin of=dd2.bin bs=1M count=3 skip=1 status=none && dd if=small.txt of=dd1.bin bs=1000 seek=7 conv=notrunc status=none"))
            .step(step("dd if=/dev/zero of=dd3.bin bs=4096 count=10 seek=100 status=none && dd if=dd1.bin bs=777 status=none | sha256sum"))
            .step(step("dd if=in.bin of=dd4.bin bs=3000000 iflag=fullblock status=none && dd if=dd4.bin of=dd4.bin bs=1000 count=1 seek=5000 conv=notrunc status=none"))
    })
}

fn tar_case() -> Option<Case> {
    require("tar", "tar").then(|| {
        let mut c = Case::new("tar")
            .input("src/a.bin", bytes(7, (2 << 20) + 5))
            .input("src/b.txt", text_lines(8, 2000))
            .input("src/empty", vec![])
            .input("src/nested/c.bin", bytes(9, 70_000))
            .input("src/nested/deeper/d.txt", text_lines(10, 10));
        c = c
            .step(step("tar --sort=name --mtime=@1700000000 --owner=0 --group=0 --numeric-owner -cf archive.tar src"))
            .step(step("mkdir -p out && tar -xf archive.tar -C out && tar -tf archive.tar"))
            .step(step("tar --sort=name --mtime=@1700000000 --owner=0 --group=0 --numeric-owner -czf archive.tgz out && tar -tzvf archive.tgz | wc -l"))
            .step(step("mkdir -p out2 && tar -xzf archive.tgz -C out2 && cmp out2/out/src/a.bin src/a.bin"));
        c
    })
}

fn sort_case() -> Option<Case> {
    require("sort", "coreutils").then(|| {
        let nums: String = bytes(11, 40_000).chunks(4).map(|c| format!("{}\n", u32::from_le_bytes(c.try_into().unwrap()) % 1_000_000)).collect();
        Case::new("sort")
            .input("words.txt", text_lines(12, 150_000))
            .input("nums.txt", nums.into_bytes())
            // -S 1M -T . : temporary merge files in the tracked directory.
            .step(step("sort -S 1M -T . -o sorted.txt words.txt"))
            .step(step("sort -n nums.txt > nums_sorted.txt && sort -u -r words.txt | head -100"))
            .step(step("sort -m sorted.txt sorted.txt > merged.txt && sort -c merged.txt && wc -l merged.txt"))
    })
}

fn sha256sum_case() -> Option<Case> {
    require("sha256sum", "coreutils").then(|| {
        Case::new("sha256sum")
            .input("in.bin", bytes(13, (6 << 20) + 1))
            .input("small.txt", text_lines(14, 50))
            .step(step(
                "sha256sum in.bin small.txt > sums.txt && cat sums.txt",
            ))
            .step(step("sha256sum -c sums.txt"))
            .step(step(
                "head -c 1000000 in.bin > head.bin && sha256sum head.bin | tee -a sums.txt",
            ))
    })
}

fn python_case() -> Option<Case> {
    require("python3", "python3").then(|| {
        let script = adapter_src("pyio.py");
        Case::new("python3")
            .input("input.bin", bytes(15, 777_777))
            .step(step(format!("python3 {}", script.display())))
            .step(step("python3 -c \"import hashlib,sys; print(hashlib.sha256(open('transformed.bin','rb').read()).hexdigest())\""))
            // a module written by the program, then imported: Python's import
            // caches directory listings by the directory's mtime, which a
            // file created only in the buffer did not move (ModuleNotFoundError)
            .step(step(format!("python3 -c \"{}\"", PY_IMPORT.replace('"', "\\\""))))
            // and removed: the directory's mtime moves again
            .step(step("python3 -c \"import os, time\nt = os.stat('.').st_mtime_ns\ntime.sleep(0.02)\nos.unlink('fresh_mod.py')\nprint(os.stat('.').st_mtime_ns > t)\""))
    })
}

const PY_IMPORT: &str = r#"import os, sys, time
sys.path.insert(0, os.getcwd())
try:
    import fresh_mod
except ImportError:
    print('not yet')
time.sleep(0.02)
open('fresh_mod.py', 'w').write('X = 42\n')
import fresh_mod
print(fresh_mod.X)
"#;

fn sqlite_case() -> Option<Case> {
    require("sqlite3", "sqlite3").then(|| {
        let build = "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL);\n\
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 30000) \
            INSERT INTO t SELECT x, printf('name-%06d', (x*7919)%30011), x*0.5 FROM c;\n\
            CREATE INDEX ti ON t(name);\n\
            UPDATE t SET v = v*2 WHERE id % 3 = 0;\n\
            DELETE FROM t WHERE id % 7 = 0;\n\
            CREATE TABLE blobs(k INTEGER PRIMARY KEY, b BLOB);\n\
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 200) \
            INSERT INTO blobs SELECT x, zeroblob(5000 + x) FROM c;\n";
        Case::new("sqlite3")
            .input("build.sql", build.as_bytes().to_vec())
            .step(step("sqlite3 db.sqlite < build.sql"))
            .step(step(
                "sqlite3 db.sqlite 'SELECT count(*), sum(v), min(name), max(name) FROM t; SELECT name, v FROM t WHERE id BETWEEN 100 AND 120 ORDER BY name; SELECT sum(length(b)) FROM blobs;'",
            ))
            .step(step("sqlite3 db.sqlite 'BEGIN; DELETE FROM blobs WHERE k % 2 = 0; UPDATE t SET name = upper(name) WHERE id < 500; COMMIT; PRAGMA integrity_check;'"))
            .step(step("sqlite3 db.sqlite 'VACUUM; PRAGMA integrity_check;' && sqlite3 db.sqlite .dump > dump.sql && wc -l dump.sql"))
    })
}

fn hdf5_case(work: &Path) -> Option<Case> {
    if !(require("h5dump", "hdf5-tools") && require("h5repack", "hdf5-tools")) {
        return None;
    }
    let flags = std::process::Command::new("pkg-config")
        .args(["--cflags", "--libs", hdf5_pc()])
        .output()
        .ok()
        .filter(|o| o.status.success());
    let Some(flags) = flags else {
        if allow_missing() {
            eprintln!("SKIPPED: hdf5 development files missing (install libhdf5-dev pkg-config)");
            return None;
        }
        panic!("pkg-config cannot find hdf5: install libhdf5-dev and pkg-config");
    };
    let flags = String::from_utf8_lossy(&flags.stdout).into_owned();
    let args: Vec<&str> = flags.split_whitespace().collect();
    let exe = compile_c(&adapter_src("mkh5.c"), &work.join("mkh5"), &args);
    Some(
        Case::new("hdf5")
            .step(step(format!("{} data.h5 && h5dump -H data.h5", exe.display())))
            .step(step("h5dump data.h5 > dump.txt && h5dump -d /simulation/temperature -s 10,10 -c 3,4 data.h5"))
            .step(step("h5repack -f GZIP=1 data.h5 repacked.h5 && h5dump -d /ids repacked.h5 > dump2.txt"))
            .step(step("h5repack -f NONE -l CONTI data.h5 plain.h5 && h5dump -d /simulation/temperature plain.h5 | sha256sum")),
    )
}

fn fio_case() -> Option<Case> {
    if !require("fio", "fio") {
        return None;
    }
    let job = |name: &str, rw: &str, bs: &str, size: &str, extra: &str| {
        format!(
            "fio --name={name} --filename={name}.dat --rw={rw} --bs={bs} --size={size} --ioengine=psync --verify=crc32c --do_verify=1 --verify_fatal=1 --randseed=42 --output-format=terse {extra} > /dev/null"
        )
    };
    let verify_only = |name: &str, rw: &str, bs: &str, size: &str| {
        format!("fio --name={name} --filename={name}.dat --rw={rw} --bs={bs} --size={size} --ioengine=psync --verify=crc32c --verify_only --verify_fatal=1 --randseed=42 --output-format=terse > /dev/null")
    };
    let mut c = Case::new("fio")
        .step(step(job("rand", "randwrite", "4k", "8m", "")))
        .step(step(job("seq", "write", "1m", "12m", "")))
        .step(step(job(
            "mixed",
            "randwrite",
            "3k-200k",
            "6m",
            "--bs_unaligned=1",
        )))
        // A second process verifies what the first wrote.
        .step(step(format!(
            "{} && {}",
            verify_only("rand", "randwrite", "4k", "8m"),
            verify_only("seq", "write", "1m", "12m")
        )));
    // fio's verify headers carry timestamps: compared by fio itself instead.
    c.not_byte_identical = vec!["rand.dat", "seq.dat", "mixed.dat"];
    c.after_default = Some(Box::new(move |tracked: &Path| {
        // What reached the destination verifies without strata.
        let r = plain_run(
            tracked,
            &[
                "sh",
                "-c",
                &format!(
                    "{} && {}",
                    verify_only("rand", "randwrite", "4k", "8m"),
                    verify_only("seq", "write", "1m", "12m")
                ),
            ],
            tracked.parent().unwrap(),
        );
        r.assert_ok("fio --verify_only of the flushed files at the destination");
    }));
    Some(c)
}

/// Issue 12 item 9: a program compiled (and a script written) under strata
/// runs at once — the file is made real (DEFAULT) or run from a private copy
/// (SCRATCH) before `execve`; also through `posix_spawn` (glibc's internal
/// exec, which no exec hook sees).
fn exec_case() -> Option<Case> {
    (require("cc", "build-essential") && require("python3", "python3")).then(|| {
        let main_c = b"#include <stdio.h>\nint main(int argc, char **argv) { printf(\"hello from %s with %d args\\n\", argc > 1 ? argv[1] : \"-\", argc); return 3; }\n";
        let mut c = Case::new("exec")
            .input("main.c", main_c.to_vec())
            .step(step("cc -O0 -o app main.c && ./app one two; echo \"exit $?\""))
            .step(step("printf '#!/bin/sh\\necho script ran with \"$1\"\\n' > s.sh && chmod +x s.sh && ./s.sh arg && sh -c ./s.sh"))
            .step(step("python3 -c \"import os; pid = os.posix_spawn('./app', ['./app', 'spawned'], os.environ); print(os.waitpid(pid, 0)[1] >> 8)\""))
            .step(step("chmod -x s.sh; ./s.sh; echo \"not executable: $?\""));
        // The linker's output may differ in build ids between toolchains' runs.
        c.not_byte_identical = vec!["app"];
        c
    })
}

/// Issue 12 item 10: `sed -i` creates its output with mkostemp, which glibc
/// opens with an internal `open` no hook sees: under SCRATCH the temporary
/// file reached the destination.
fn sed_case() -> Option<Case> {
    require("sed", "sed").then(|| {
        Case::new("sed")
            .input("words.txt", text_lines(21, 3000))
            .step(step("sed -i 's/a/A/g' words.txt && sha256sum words.txt"))
            .step(step("seq 1 5000 > n.txt && sed -i -e 's/1/x/' -e '/5/d' n.txt && wc -l n.txt && tail -3 n.txt && ls"))
    })
}

/// Issue 12 item 2: renaming a directory carries the buffered files beneath
/// it (they stayed at the old path, were retried forever and lost); a
/// target directory holding only buffered files is not empty; recreating
/// the old directory shows no ghosts; a tree leaving the buffer is made real.
fn dir_rename_case() -> Option<Case> {
    (require("mv", "coreutils") && require("python3", "python3")).then(|| {
        Case::new("dir-rename")
            .step(step("mkdir -p a/sub/deep && echo x > a/s && echo y > a/sub/t && seq 1 100000 > a/sub/deep/big && mv a b && cat b/s b/sub/t && wc -l b/sub/deep/big && test -e a/s; echo \"old name: $?\""))
            .step(step("mkdir a && ls -A a; echo new > a/s && cat a/s b/s && rmdir a 2>/dev/null; echo \"rmdir non-empty: $?\""))
            .step(step("mkdir -p c d && echo z > c/f && mv -T c d && cat d/f && ls -A"))
            .step(step("mkdir -p e g && echo 1 > e/f && echo 2 > g/h && mv -T e g 2>/dev/null; echo \"over non-empty: $?\"; cat g/h e/f"))
            .step(step("mkdir in && seq 1 3000 > in/old.txt && sync && echo more >> in/old.txt && mv in out && tail -2 out/old.txt && mkdir -p deep/x/y && mv out deep/x/y/ && tail -1 deep/x/y/out/old.txt"))
            .step(step("mkdir -p o && echo out > o/f && D=$(mktemp -d) && mv o $D/o && cat $D/o/f && rm -rf $D && test -e o; echo \"gone: $?\""))
            .step(step("python3 -c \"import os\nos.mkdir('dd'); open('ff','w').write('q')\ntry:\n    os.rename('ff','dd')\nexcept OSError as e: print('file over dir:', e.errno)\""))
    })
}

/// Issue 12 item 22: a name that exists only in the buffer exists: mkdir,
/// mkfifo, mknod and symlink over it are EEXIST, as over a real file.
fn names_case() -> Option<Case> {
    require("mkfifo", "coreutils").then(|| {
        Case::new("names")
            .step(step("echo x > f && mkdir f 2>/dev/null; echo \"mkdir $?\"; mkfifo f 2>/dev/null; echo \"mkfifo $?\"; ln -s t f 2>/dev/null; echo \"symlink $?\"; cat f"))
            .step(step("mkdir -p d && echo y > d/g && mkdir d/g 2>/dev/null; echo \"nested $?\"; mkdir new && ls -A"))
    })
}

/// Issue 12 item 4: symbolic links resolve as the kernel resolves them
/// (writing through `link -> t.txt` made a second record; a directory
/// symlink likewise; a link to a buffered-only file was ENOENT).
fn symlinks_case() -> Option<Case> {
    require("python3", "python3").then(|| {
        Case::new("symlinks")
            .step(step("echo old > t.txt && ln -s t.txt link && echo new > link && cat t.txt link && stat -c '%F %s %N' link t.txt"))
            .step(step("mkdir real && ln -s real alias && echo x > alias/f && echo y >> real/f && cat alias/f real/f && ls alias && stat -c '%F %N' alias"))
            .step(step("ln -s target3 dangling && echo created > dangling && cat target3 && stat -c '%F' dangling target3"))
            .step(step("mkdir -p d/e && ln -s d/e de && echo q > de/../g && cat d/g && ls d && ln -s link link2 && cat link2"))
            // absolute names (resolved by openat2 without /proc when no link is on the way)
            .step(step("echo z > \"$PWD/alias/h\" && cat real/h && echo w >> \"$PWD/real/h\" && cat \"$PWD/alias/h\" && echo r > \"$PWD/de/../g2\" && cat d/g2 && stat -c '%s' \"$PWD/d/g2\" \"$PWD/alias/h\" && ls d"))
            .step(step("ln -s loop1 loop2 && ln -s loop2 loop1 && cat loop1 2>&1 | sed 's/.*: //'"))
            .step(step("python3 -c \"import os\nfor fl in (os.O_RDONLY | os.O_NOFOLLOW, os.O_WRONLY | os.O_CREAT | os.O_EXCL):\n    try:\n        os.open('link', fl)\n    except OSError as e: print('errno', e.errno)\nprint(os.path.samefile('link', 't.txt'), os.stat('link').st_ino == os.stat('t.txt').st_ino)\""))
            .step(step("mv link link3 && cat link3 && readlink link3 && rm link3 && cat t.txt && ls"))
    })
}

/// Issue 12 item 3: hard links are one file behind several names, in the
/// buffer and at the destination (`ln`, `cp -a`, `tar x` of hard links).
fn hardlinks_case() -> Option<Case> {
    (require("python3", "python3") && require("tar", "tar")).then(|| {
        Case::new("hardlinks")
            .step(step("echo one > f && ln f g && echo two >> g && cat f && stat -c '%h' f g && rm f && cat g && stat -c '%h' g"))
            .step(step("ln g h && mv h i && echo three >> i && cat g && stat -c '%h' g i && ln g i 2>/dev/null; echo \"exists $?\"; python3 -c \"import os; os.rename('g', 'i')\" && stat -c %h g i && ls"))
            .step(step("rm g && ln i g && mkdir d && ln g d/x && mv d e && echo four >> e/x && cat i && ls e && python3 -c \"import os; print(os.stat('g').st_ino == os.stat('e/x').st_ino, os.stat('i').st_nlink)\""))
            .step(step("mkdir s && seq 1 20000 > s/a && ln s/a s/b && ln -s a s/c && cp -a s t && stat -c %h t/a t/b && readlink t/c && echo more >> t/b && tail -1 t/a"))
            .step(step("tar cf x.tar s && mkdir u && tar xf x.tar -C u && stat -c %h u/s/a u/s/b && readlink u/s/c && rm x.tar && echo five >> u/s/a && tail -1 u/s/b"))
            .step(step("seq 1 1000 > p && ln p q && python3 -c \"import os\nfd = os.open('q', os.O_RDWR)\nos.pwrite(fd, b'XYZ', 100)\nos.close(fd)\nprint(open('p').read()[95:110])\" && rm p q && ls"))
    })
}

/// Hard links made outside strata, at the destination only, then copied
/// with their identity checked (`cp -a` compares stat and fstat of each
/// file: "skipping file …, as it was replaced while being copied" when a
/// stat by path and an fstat of the opened file disagreed).
fn hardlinks_outside_case() -> Option<Case> {
    require("cp", "coreutils").then(|| {
        Case::new("hardlinks_outside")
            .outside("mkdir s && seq 1 2000 > s/a && ln s/a s/b && echo c > s/c")
            .step(step(
                "cp -a s t && stat -c %h t/a t/b s/a && cat t/c && tail -1 t/b",
            ))
            .step(step(
                "tar cf x.tar s && mkdir u && tar xf x.tar -C u && stat -c %h u/s/a && rm x.tar",
            ))
    })
}

/// Issue 12 items 18 and 20: chown/lchown/fchown of buffered files (they
/// were ENOENT), with the kernel's clearing of set-user-ID and set-group-ID
/// (with group execute) bits, and the owner at the destination. As root the
/// owner changes; otherwise both runs print the same EPERM.
fn owner_case() -> Option<Case> {
    require("python3", "python3").then(|| {
        let mut c = Case::new("owner")
            .step(step("echo hi > f && chown 1000:1000 f; echo \"rc $?\"; stat -c '%u %g %a' f"))
            .step(step("chmod 6755 f && chown 1000 f; stat -c '%a' f; chmod 6745 f && chgrp 0 f; stat -c '%g %a' f"))
            .step(step("ln -s f l && chown -h 1000 l; echo \"rc $?\"; stat -c '%u %F' l; chown -h 1000 f; stat -c '%u %a' f"))
            .step(step("python3 -c \"import os\nfd = os.open('g', os.O_CREAT | os.O_WRONLY, 0o4755)\nos.write(fd, b'x')\ntry:\n    os.fchown(fd, 1000, 1000)\nexcept OSError as e: print('errno', e.errno)\nos.close(fd)\nst = os.stat('g'); print(st.st_uid, st.st_gid, oct(st.st_mode))\""));
        c.after_default = Some(Box::new(|dir: &Path| {
            use std::os::unix::fs::MetadataExt;
            // SAFETY: geteuid/getuid take no arguments and cannot fail.
            if unsafe { libc::geteuid() } != 0 {
                return;
            }
            for (name, uid) in [("f", 1000), ("g", 1000)] {
                let md = std::fs::metadata(dir.join(name)).unwrap();
                assert_eq!(md.uid(), uid, "{name}: owner at the destination");
            }
        }));
        c
    })
}

/// Issue 12 items 11 and 23: shared mappings see and publish what read and
/// write do; copy_file_range, sendfile (shutil.copyfile), posix_fadvise,
/// fstatfs and fallocate's punch/zero modes on buffered files.
fn mmap_case() -> Option<Case> {
    (require("python3", "python3") && require("fallocate", "util-linux")).then(|| {
        Case::new("mmap")
            .step(step(format!("python3 -c \"{}\"", MMAP_PY.replace('"', "\\\""))))
            .step(step(format!("python3 -c \"{}\"", MMAP_OTHER_PY.replace('"', "\\\""))))
            .step(step("seq 1 3000 > p && fallocate -p -o 4096 -l 4096 p && fallocate -z -o 100 -l 50 p && fallocate -z -o 13000 -l 100 -n p && stat -c %s p && od -c p | tail -5 && fallocate -z -o 13000 -l 1000 p && stat -c %s p && sha256sum p"))
    })
}

const MMAP_PY: &str = r#"import mmap, os, shutil
with open('m.dat', 'wb') as f:
    f.write(b'a' * 8192)
fd = os.open('m.dat', os.O_RDWR)
other = os.open('m.dat', os.O_RDONLY)
mm = mmap.mmap(fd, 8192)
mm[0:5] = b'HELLO'
print(os.pread(other, 5, 0))
os.pwrite(fd, b'WORLD', 100)
print(mm[100:105])
os.lseek(fd, 0, os.SEEK_END)
os.write(fd, b'tail')
print(os.fstat(fd).st_size, os.fstat(other).st_size)
mm.flush()
os.close(fd)
mm[200:203] = b'xyz'
mm.close()
os.close(other)
print(open('m.dat', 'rb').read()[:8], open('m.dat', 'rb').read()[195:210], len(open('m.dat', 'rb').read()))
# a second mapping of the same file, and a read-only one
with open('m.dat', 'r+b') as f:
    m2 = mmap.mmap(f.fileno(), 0)
    m2[1] = ord('E')
    f.seek(0)
    print(f.read(6))
    m2.close()
with open('m.dat', 'rb') as f:
    m3 = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    print(m3[:6], len(m3))
    m3.close()
# copy_file_range, sendfile (shutil.copyfile), splice-free paths
src = os.open('m.dat', os.O_RDONLY)
dst = os.open('c.dat', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
n = 0
while True:
    k = os.copy_file_range(src, dst, 3000)
    if k == 0:
        break
    n += k
os.close(src); os.close(dst)
shutil.copyfile('m.dat', 's.dat')
print(n, open('c.dat', 'rb').read() == open('m.dat', 'rb').read(), open('s.dat', 'rb').read() == open('m.dat', 'rb').read())
fd = os.open('m.dat', os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
print(os.fstatvfs(fd).f_bsize == os.statvfs('.').f_bsize)
os.close(fd)
"#;

/// A mapping's copy-back keeps what another process wrote meanwhile to
/// pages the mapping did not change (it wrote the whole file back: the other
/// process's write lost).
const MMAP_OTHER_PY: &str = r#"import mmap, os, subprocess
open('n.dat', 'wb').write(b'a' * 16384)
open('w.py', 'w').write("import os\nfd = os.open('n.dat', os.O_WRONLY)\nos.pwrite(fd, b'BBBBB', 12288)\nos.close(fd)\n")
fd = os.open('n.dat', os.O_RDWR)
mm = mmap.mmap(fd, 16384)
mm[0:5] = b'AAAAA'
subprocess.run(['python3', 'w.py'], check=True)
mm.flush()
mm.close()
os.close(fd)
d = open('n.dat', 'rb').read()
print(d[0:5], d[12288:12293], len(d))
"#;

/// A DEFAULT file mapped shared and writable is one file for every process
/// (issue 12 item 11): a process that opens it later reads the mapping's
/// bytes at once and writes next to them on the same page; the mapping
/// sees that at once and writes after it; a process that had the file open
/// before the mapping reads and writes it coherently too; nothing is lost
/// at the destination (a buffered page flushed over the mapping's later
/// bytes lost them).
const MMAP_COHERENT_PY: &str = r#"import mmap, os, subprocess, sys
open('k.dat', 'wb').write(b'a' * 16384)
early = subprocess.Popen([sys.executable, 'early.py'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
print('early', early.stdout.readline().strip())
fd = os.open('k.dat', os.O_RDWR)
mm = mmap.mmap(fd, 16384)
mm[0:5] = b'AAAAA'
late = "import os\nfd = os.open('k.dat', os.O_RDWR)\nprint(os.pread(fd, 5, 0))\nos.pwrite(fd, b'BBBBB', 5)\nos.close(fd)\n"
print('late', subprocess.run([sys.executable, '-c', late], check=True, capture_output=True, text=True).stdout.strip())
print('map', mm[0:10])
mm[10:15] = b'CCCCC'
early.stdin.write('go\n'); early.stdin.flush()
print('early', early.stdout.readline().strip())
early.wait()
print('map', mm[0:20])
mm[20:25] = b'EEEEE'
other = "import mmap, os\nfd = os.open('k.dat', os.O_RDWR)\nm = mmap.mmap(fd, 16384)\nprint(m[0:25])\nm[30:35] = b'FFFFF'\nm.close()\nos.close(fd)\n"
print('other', subprocess.run([sys.executable, '-c', other], check=True, capture_output=True, text=True).stdout.strip())
print('map', mm[25:40])
mm[40:45] = b'GGGGG'
mm.flush(); mm.close(); os.close(fd)
subprocess.run(['sh', '-c', 'echo tail >> k.dat'], check=True)
d = open('k.dat', 'rb').read()
print(d[0:45], len(d), os.stat('k.dat').st_size)
"#;

const MMAP_EARLY_PY: &str = r#"import os, sys
fd = os.open('k.dat', os.O_RDWR)
print(os.pread(fd, 5, 0), flush=True)
sys.stdin.readline()
print(os.pread(fd, 15, 0), flush=True)
os.pwrite(fd, b'DDDDD', 15)
os.close(fd)
"#;

/// Shared writable mappings across processes: `read` in other processes
/// sees a mapping's stores at once, a second mapper's bytes in the same
/// page survive (DEFAULT: the destination file; SCRATCH: one shared
/// backing for every process).
fn mmap_coherent_case() -> Option<Case> {
    require("python3", "python3").then(|| {
        Case::new("mmap-coherent")
            .input("coh.py", MMAP_COHERENT_PY.as_bytes().to_vec())
            .input("early.py", MMAP_EARLY_PY.as_bytes().to_vec())
            .step(step("python3 coh.py"))
    })
}

/// A process killed (SIGKILL) while it maps a file shared: what it stored
/// through the mapping is the file's, as with the kernel (the page cache
/// outlives the process; here the shared backing does).
fn mmap_killed_case() -> Option<Case> {
    require("python3", "python3").then(|| {
        Case::new("mmap-killed")
            .step(step("head -c 8192 /dev/zero | tr '\\0' x > m.dat && python3 -c \"import mmap, os, signal\nfd = os.open('m.dat', os.O_RDWR)\nm = mmap.mmap(fd, 8192)\nm[100:104] = b'KILL'\nos.kill(os.getpid(), signal.SIGKILL)\n\"; echo status $?; head -c 110 m.dat | tail -c 12; echo"))
            .step(step("head -c 110 m.dat | tail -c 12; echo; python3 -c \"import mmap, os\nfd = os.open('m.dat', os.O_RDWR)\nm = mmap.mmap(fd, 8192)\nm[8000:8004] = b'BACK'\n\" && tail -c 200 m.dat | head -c 10; echo"))
    })
}

/// Issue 12 item 21 (pjdfstest link/03): a DEFAULT file hard-linked to a
/// name outside the buffer (here: beside the tracked directory) is one set
/// of bytes behind both names, whichever name a process writes through, a
/// descriptor opened before the link included; the link count is the
/// kernel's. Then the same across runs (a record made from a file that
/// already has a name outside the buffer).
fn link_outside_case() -> Option<Case> {
    Some(
        Case::new("link-outside")
            .step(step("o=../$(basename $PWD).o1 && echo one > f && exec 3>>f && echo a >&3 && ln f $o && echo b >&3 && echo two >> $o && cat f && stat -c %h f && echo three >> f && cat $o && exec 3>&- && rm $o && stat -c %h f && echo four >> f && cat f"))
            .step(step("ln f ../$(basename $PWD).o2 && stat -c %h f"))
            .step(step("o=../$(basename $PWD).o2 && echo five >> $o && cat f && echo six >> f && cat $o && stat -c %h f $o && rm $o && stat -c %h f && echo seven >> f && cat f")),
    )
}

#[test]
fn link_outside_default() {
    if let Some(c) = link_outside_case() {
        run_case(c, Mode::Default);
    }
}

/// rsync -a with hard links (-H) and symbolic links, then an update that
/// sends only what changed (rsync compares sizes and mtimes: the buffer's
/// times must be the kernel's).
fn rsync_case() -> Option<Case> {
    require("rsync", "rsync").then(|| {
        Case::new("rsync")
            .input("src/a.bin", bytes(31, 300_000))
            .input("src/sub/b.txt", text_lines(32, 500))
            // (the link is of a file made in the run: a link of a file at the
            // destination is the kernel's, at the destination, in every mode)
            .step(step("cp -p src/a.bin src/c.bin && ln src/c.bin src/hard && ln -s sub/b.txt src/link && rsync -aH src/ dst/ && stat -c '%h %s' dst/c.bin dst/hard && readlink dst/link && sha256sum dst/c.bin dst/sub/b.txt"))
            .step(step("echo more >> src/sub/b.txt && rsync -aHi src/ dst/ | sort && sha256sum dst/sub/b.txt && rsync -aHi src/ dst/ | wc -l"))
    })
}

/// make decides by mtimes: a rebuild after a source changes, none when
/// nothing changed.
fn make_case() -> Option<Case> {
    (require("make", "make") && require("cc", "build-essential")).then(|| {
        let mk = b"app: a.o b.o\n\tcc -o app a.o b.o\n%.o: %.c\n\tcc -O0 -c -o $@ $<\n".to_vec();
        let mut c = Case::new("make")
            .input("Makefile", mk)
            .input("a.c", b"int f(void);\nint main(void) { return f(); }\n".to_vec())
            .input("b.c", b"int f(void) { return 0; }\n".to_vec())
            .step(step("make && ./app; echo \"rc $?\""))
            .step(step("make; sleep 1.1; echo 'int g(void) { return 1; }' >> b.c && make && ./app; echo \"rc $?\""));
        c.not_byte_identical = vec!["app", "a.o", "b.o"];
        c
    })
}

/// python -m venv (symbolic links, copies, a pyvenv.cfg), then the
/// environment's interpreter runs.
fn venv_case() -> Option<Case> {
    require("python3", "python3").then(|| {
        let mut c = Case::new("venv")
            .step(step("python3 -m venv --without-pip v && v/bin/python -c \"import sys, os; print(os.path.basename(sys.prefix), sys.prefix != sys.base_prefix)\" && ls v && cat v/pyvenv.cfg | grep -c home"));
        // the activation scripts and pyvenv.cfg name the environment's
        // absolute path, which differs between the two runs' directories
        c.not_byte_identical = vec![
            "v/bin/activate",
            "v/bin/activate.csh",
            "v/bin/activate.fish",
            "v/pyvenv.cfg",
        ];
        c
    })
}

/// numpy.memmap (a shared writable mapping) and np.load(mmap_mode): what
/// the mapping wrote is read back by file reads, in the run and at the
/// destination.
fn numpy_case() -> Option<Case> {
    let have = std::process::Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("skipped: numpy missing (python3 -m pip install numpy)");
        return None;
    }
    Some(
        Case::new("numpy")
            .input("workers.py", NUMPY_WORKERS_PY.as_bytes().to_vec())
            .step(step(format!(
                "python3 -c \"{}\"",
                NUMPY_PY.replace('"', "\\\"")
            )))
            .step(step("python3 workers.py")),
    )
}

/// The parent maps a file, spawned workers (new processes, not forks) map
/// it too and fill one row each; the parent's mapping sees their rows, and
/// its own later store keeps them (the per-process copy-back lost all four
/// rows in SCRATCH).
const NUMPY_WORKERS_PY: &str = r#"import numpy as np, multiprocessing as mp
def work(i):
    m = np.memmap('mm.dat', dtype='int64', mode='r+', shape=(4, 1024))
    m[i, :] = i + 1
    m.flush()
if __name__ == '__main__':
    m = np.memmap('mm.dat', dtype='int64', mode='w+', shape=(4, 1024))
    ps = [mp.get_context('spawn').Process(target=work, args=(i,)) for i in range(4)]
    [p.start() for p in ps]
    [p.join() for p in ps]
    print('parent map sees', [int(m[i, 5]) for i in range(4)])
    m[0, 0] = 99
    m.flush()
    f = np.fromfile('mm.dat', dtype='int64').reshape(4, 1024)
    print('file has', [int(x) for x in f[:, 7]], int(f[0, 0]))
"#;

const NUMPY_PY: &str = r#"import numpy as np
a = np.memmap('arr.dat', dtype='float64', mode='w+', shape=(1000, 100))
a[:] = np.arange(100000, dtype='float64').reshape(1000, 100)
a.flush()
del a
b = np.memmap('arr.dat', dtype='float64', mode='r+', shape=(1000, 100))
b[10, :] *= 2
b.flush()
del b
c = np.fromfile('arr.dat', dtype='float64')
print(c.sum(), c[1000:1003], c.size)
np.save('x.npy', np.arange(12.0).reshape(3, 4))
m = np.load('x.npy', mmap_mode='r+')
m[0, 0] = 100
m.flush()
del m
print(np.load('x.npy').sum())
"#;

/// git on a local repository: clone (hard links), commit (objects linked
/// from temporary files), gc and fsck — at the destination too.
fn git_case() -> Option<Case> {
    require("git", "git").then(|| {
        let env = "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@x GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@x GIT_AUTHOR_DATE='2026-01-01T00:00:00Z' GIT_COMMITTER_DATE='2026-01-01T00:00:00Z'";
        let mut c = Case::new("git")
            .step(step(format!("{env} && git init -q -b main src && cd src && for i in 1 2 3; do seq $i 40000 > f$i && git add f$i && git commit -qm c$i; done && git log --format=%s")))
            .step(step(format!("{env} && git clone -q src dst && cd dst && git fsck --full 2>&1 && git log --format=%s && sha256sum f1 f2 f3")))
            .step(step(format!("{env} && cd dst && seq 1 300000 > big && git add big && git commit -qm big && echo x >> f1 && git commit -qam more && git gc -q && git fsck --full 2>&1 && git count-objects -v | grep -E '^(count|in-pack)'")));
        c.not_byte_identical = vec!["src/.git/", "dst/.git/"];
        c.after_default = Some(Box::new(|root: &Path| {
            for repo in ["src", "dst"] {
                let out = std::process::Command::new("git").args(["-C", &root.join(repo).to_string_lossy(), "fsck", "--full"]).output().unwrap();
                assert!(out.status.success(), "git fsck of {repo} at the destination after flush: {}", String::from_utf8_lossy(&out.stderr));
            }
        }));
        c
    })
}

macro_rules! program_tests {
    ($($default:ident, $scratch:ident => $make:expr;)*) => {$(
        #[test]
        fn $default() {
            let work = tempfile::tempdir().unwrap();
            #[allow(clippy::redundant_closure_call)]
            if let Some(c) = ($make)(work.path()) {
                run_case(c, Mode::Default);
            }
        }
        #[test]
        fn $scratch() {
            let work = tempfile::tempdir().unwrap();
            #[allow(clippy::redundant_closure_call)]
            if let Some(c) = ($make)(work.path()) {
                run_case(c, Mode::Scratch);
            }
        }
    )*};
}

program_tests! {
    cp_default, cp_scratch => |_: &Path| cp_case();
    cat_default, cat_scratch => |_: &Path| cat_case();
    dd_default, dd_scratch => |_: &Path| dd_case();
    tar_default, tar_scratch => |_: &Path| tar_case();
    sort_default, sort_scratch => |_: &Path| sort_case();
    sha256sum_default, sha256sum_scratch => |_: &Path| sha256sum_case();
    python3_default, python3_scratch => |_: &Path| python_case();
    sqlite3_default, sqlite3_scratch => |_: &Path| sqlite_case();
    hdf5_default, hdf5_scratch => |w: &Path| hdf5_case(w);
    fio_default, fio_scratch => |_: &Path| fio_case();
    exec_default, exec_scratch => |_: &Path| exec_case();
    sed_default, sed_scratch => |_: &Path| sed_case();
    dir_rename_default, dir_rename_scratch => |_: &Path| dir_rename_case();
    names_default, names_scratch => |_: &Path| names_case();
    symlinks_default, symlinks_scratch => |_: &Path| symlinks_case();
    hardlinks_default, hardlinks_scratch => |_: &Path| hardlinks_case();
    hardlinks_outside_default, hardlinks_outside_scratch => |_: &Path| hardlinks_outside_case();
    git_default, git_scratch => |_: &Path| git_case();
    mmap_default, mmap_scratch => |_: &Path| mmap_case();
    owner_default, owner_scratch => |_: &Path| owner_case();
    rsync_default, rsync_scratch => |_: &Path| rsync_case();
    make_default, make_scratch => |_: &Path| make_case();
    venv_default, venv_scratch => |_: &Path| venv_case();
    numpy_default, numpy_scratch => |_: &Path| numpy_case();
    mmap_coherent_default, mmap_coherent_scratch => |_: &Path| mmap_coherent_case();
    mmap_killed_default, mmap_killed_scratch => |_: &Path| mmap_killed_case();
}

/// Seed 000's checkpoint/restart workflow: a producer run writes a
/// checkpoint in SCRATCH mode and exits; a later consumer run against the
/// same (persistent) daemon reads it from the buffer; the destination never
/// sees the data.
#[test]
fn checkpoint_restart_across_two_scratch_runs() {
    let x = dirs();
    let size = 9_000_001usize;
    let producer = format!("head -c {size} /dev/urandom > ckpt.bin && sha256sum ckpt.bin > ckpt.sha256 && echo step=17 > ckpt.meta");
    strata_run(
        &x.d,
        Mode::Scratch,
        &x.tracked,
        &x.tracked,
        &["sh", "-c", &producer],
    )
    .assert_ok("producer run");
    let before = x.d.status().files;
    let consumer = strata_run(
        &x.d,
        Mode::Scratch,
        &x.tracked,
        &x.tracked,
        &[
            "sh",
            "-c",
            "sha256sum -c ckpt.sha256 && cat ckpt.meta && wc -c < ckpt.bin",
        ],
    );
    consumer.assert_ok("consumer run");
    assert_eq!(
        consumer.stdout_str(),
        format!("ckpt.bin: OK\nstep=17\n{size}\n"),
        "consumer output"
    );
    let after = x.d.status().files;
    assert!(
        after.read_hit_bytes_total - before.read_hit_bytes_total >= size as u64,
        "the consumer should have read the checkpoint from the buffer: read_hit_bytes_total went from {} to {}",
        before.read_hit_bytes_total,
        after.read_hit_bytes_total
    );
    assert_eq!(
        after.read_dest_bytes_total, before.read_dest_bytes_total,
        "nothing should be read through from the destination"
    );
    let leaks = scratch_leaks(&x.tracked, &BTreeMap::new());
    assert!(
        leaks.is_empty(),
        "SCRATCH checkpoint reached the destination:\n  {}",
        leaks.join("\n  ")
    );
}

/// The serial HDF5 library's pkg-config name: with libhdf5-openmpi-dev
/// installed (the MPI-IO tests), plain `hdf5` points at the parallel build.
fn hdf5_pc() -> &'static str {
    let serial = std::process::Command::new("pkg-config")
        .args(["--exists", "hdf5-serial"])
        .status()
        .is_ok_and(|s| s.success());
    if serial {
        "hdf5-serial"
    } else {
        "hdf5"
    }
}
