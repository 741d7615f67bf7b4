//! The adapter's semantic matrix (tests/adapter/semantics.c) under
//! `strata run`: every case is done on a tracked file and on an untracked
//! twin, and return values, errno and bytes must be identical. DEFAULT mode
//! is then checked at the destination after `strata flush --wait`; SCRATCH
//! mode by reading back through the adapter (inside the program) and by
//! checking that nothing reached the destination.

mod adapter_util;
mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use adapter_util::*;
use common::TestDaemon;

struct Setup {
    d: TestDaemon,
    tmp: tempfile::TempDir,
    tracked: PathBuf,
    twin: PathBuf,
    exe: PathBuf,
    seeds: BTreeMap<String, Vec<u8>>,
}

fn setup() -> Setup {
    let d = TestDaemon::start();
    let tmp = tempfile::Builder::new()
        .prefix("strata-sem-")
        .tempdir()
        .unwrap();
    let tracked = tmp.path().join("tracked");
    let twin = tmp.path().join("twin");
    std::fs::create_dir_all(&tracked).unwrap();
    std::fs::create_dir_all(&twin).unwrap();
    let exe = compile_c(
        &adapter_src("semantics.c"),
        &tmp.path().join("semantics"),
        &[],
    );
    let mut seeds = BTreeMap::new();
    for (i, (name, len)) in [
        ("seed_a.dat", (3 << 20) + 123),
        ("seed_b.dat", 200_000),
        ("seed_trunc.dat", 50_000),
    ]
    .into_iter()
    .enumerate()
    {
        let data = bytes(0x5eed + i as u64, len);
        seed_both(&[&tracked, &twin], name, &data);
        seeds.insert(name.to_string(), data);
    }
    Setup {
        d,
        tmp,
        tracked,
        twin,
        exe,
        seeds,
    }
}

fn run_matrix(s: &Setup, mode: Mode, extra_env: &[(&str, &str)]) -> Ran {
    let argv = [
        s.exe.as_os_str(),
        s.tracked.as_os_str(),
        s.twin.as_os_str(),
        std::ffi::OsStr::new(mode.as_str()),
    ];
    let mut cmd = strata_run_cmd(&s.d, mode, &s.tracked, s.tmp.path(), &argv);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    if let Ok(only) = std::env::var("STRATA_TEST_SEMANTICS_CASE") {
        cmd.arg(only);
    }
    let r = run_cmd(cmd, s.tmp.path());
    eprintln!("{}", r.stdout_str());
    r
}

fn assert_matrix_ok(r: &Ran, s: &Setup, ctx: &str) {
    assert!(
        r.ok() && r.stdout_str().contains("all identical"),
        "{ctx}: the semantic matrix found differences (exit {:?}, signal {:?}):\n{}\n--- stderr ---\n{}\n--- daemon log ---\n{}",
        r.code,
        r.signal,
        r.stdout_str(),
        tail(&r.stderr, 80),
        tail(&s.d.log(), 40)
    );
}

fn default_mode(page_size: Option<&str>) {
    let s = setup();
    let env: Vec<(&str, &str)> = page_size
        .map(|p| vec![("STRATA_ADAPTER_PAGE_SIZE", p)])
        .unwrap_or_default();
    let r = run_matrix(&s, Mode::Default, &env);
    assert_matrix_ok(&r, &s, "DEFAULT mode");
    flush_wait(&s.d, &s.tracked).assert_ok("strata flush --wait");
    // The destination now holds exactly what the twin holds.
    assert_same_tree(
        &s.tracked,
        &s.twin,
        &|_| false,
        "DEFAULT mode, destination after flush",
    );
}

#[test]
fn semantics_default_mode_destination_matches_twin() {
    default_mode(None);
}

#[test]
fn semantics_default_mode_small_pages() {
    // 64 KiB pages: the cases' boundaries (1 MiB, odd sizes) now straddle many pages.
    default_mode(Some("64KiB"));
}

#[test]
fn semantics_scratch_mode_reads_back_and_leaves_destination_alone() {
    let s = setup();
    let r = run_matrix(&s, Mode::Scratch, &[]);
    assert_matrix_ok(&r, &s, "SCRATCH mode");
    let leaks = scratch_leaks(&s.tracked, &s.seeds);
    assert!(
        leaks.is_empty(),
        "SCRATCH mode wrote to the destination:\n  {}",
        leaks.join("\n  ")
    );
    // The buffered files outlive the program: read one back in a second run.
    let back = strata_run(
        &s.d,
        Mode::Scratch,
        &s.tracked,
        &s.tracked,
        &["cat", "seq_large.dat"],
    );
    back.assert_ok("reading back a SCRATCH file in a second run");
    let want = std::fs::read(s.twin.join("seq_large.dat")).unwrap();
    assert!(
        back.stdout == want,
        "seq_large.dat read back in a second run: {} bytes, want {}",
        back.stdout.len(),
        want.len()
    );
}

#[test]
fn semantics_program_is_consistent_without_the_adapter() {
    // The matrix itself must be deterministic: both directories untracked.
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    for (i, (name, len)) in [
        ("seed_a.dat", (3 << 20) + 123),
        ("seed_b.dat", 200_000),
        ("seed_trunc.dat", 50_000),
    ]
    .into_iter()
    .enumerate()
    {
        seed_both(&[&a, &b], name, &bytes(0x5eed + i as u64, len));
    }
    let exe = compile_c(
        &adapter_src("semantics.c"),
        &tmp.path().join("semantics"),
        &[],
    );
    let r = plain_run(
        tmp.path(),
        &[
            exe.to_str().unwrap(),
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "default",
        ],
        tmp.path(),
    );
    assert!(
        r.ok() && r.stdout_str().contains("all identical"),
        "{}\n{}",
        r.stdout_str(),
        r.stderr
    );
    assert_same_tree(&a, &b, &|_| false, "plain run");
}

/// Three `rm` of one file at once: exactly one succeeds, buffered only
/// or flushed to the destination first (then the record's remover wins and
/// the others must not take the destination file for one of their own —
/// seen across nodes in CI: two of three succeeded).
#[test]
fn racing_unlinks_of_one_file_exactly_one_wins() {
    let d = TestDaemon::start();
    let tmp = tempfile::Builder::new()
        .prefix("strata-race-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().join("tracked");
    std::fs::create_dir_all(&dir).unwrap();
    let round = r#"
for i in $(seq 1 30); do
  seq 1 500 > z
  [ -n "$FLUSH" ] && strata_flush
  (rm z 2>/dev/null && echo 1 > r1 || echo 0 > r1) &
  (rm z 2>/dev/null && echo 1 > r2 || echo 0 > r2) &
  (rm z 2>/dev/null && echo 1 > r3 || echo 0 > r3) &
  wait
  w="$(cat r1)$(cat r2)$(cat r3)"
  case "$w" in
    100|010|001) ;;
    *) echo "round $i: $w unlinks won"; exit 1 ;;
  esac
  [ ! -e z ] || { echo "round $i: z still exists"; exit 1; }
  rm -f r1 r2 r3
done
echo rounds-ok
"#;
    for flush in [false, true] {
        let script = format!(
            "set -u; strata_flush() {{ env -u LD_PRELOAD '{}' --config '{}' flush --wait '{}' >/dev/null; }}\nFLUSH={}\n{round}",
            common::strata_bin().display(),
            d.config.display(),
            dir.display(),
            if flush { "1" } else { "" }
        );
        let r = strata_run(&d, Mode::Default, &dir, &dir, &["sh", "-c", &script]);
        r.assert_ok(&format!("unlink races (flushed first: {flush})"));
        assert!(
            r.stdout_str().ends_with("rounds-ok\n"),
            "flushed first: {flush}: {}\n{}",
            r.stdout_str(),
            r.stderr
        );
    }
}

/// Two processes renaming one buffered file at once (`mv` under one
/// `strata run`), 20 rounds each for a file only in the buffer and for one
/// flushed to the destination first: exactly one rename succeeds, as with
/// the kernel, and the file ends under that name with its bytes; an existing
/// target of the losing rename keeps its bytes.
#[test]
fn two_renames_of_one_file_exactly_one_wins() {
    let d = TestDaemon::start();
    let tmp = tempfile::Builder::new()
        .prefix("strata-race-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().join("tracked");
    std::fs::create_dir_all(&dir).unwrap();
    // Each round: x raced to y1 and y2 (y2 exists with "old"); one wins,
    // printed as "win1"/"win2", then the survivors' bytes are checked.
    let round = r#"
for i in $(seq 1 20); do
  seq 1 500 > x; echo old > y2; rm -f y1
  [ -n "$FLUSH" ] && strata_flush
  (mv -T x y1 2>/dev/null && echo 1 > r1 || echo 0 > r1) &
  (mv -T x y2 2>/dev/null && echo 1 > r2 || echo 0 > r2) &
  wait
  w="$(cat r1)$(cat r2)"
  case "$w" in
    10) cmp -s y1 want || { echo "round $i: y1 differs"; exit 1; }
        [ "$(cat y2)" = old ] || { echo "round $i: y2 lost its bytes"; exit 1; } ;;
    01) cmp -s y2 want || { echo "round $i: y2 differs"; exit 1; }
        [ ! -e y1 ] || { echo "round $i: y1 exists"; exit 1; } ;;
    *) echo "round $i: $w renames won"; exit 1 ;;
  esac
  [ ! -e x ] || { echo "round $i: x still exists"; exit 1; }
  rm -f y1 y2 r1 r2
done
echo rounds-ok
"#;
    let script = |flush: bool| {
        let flush_fn = format!(
            "strata_flush() {{ env -u LD_PRELOAD '{}' --config '{}' flush --wait '{}' >/dev/null; }}\n",
            common::strata_bin().display(),
            d.config.display(),
            dir.display()
        );
        format!(
            "set -u; seq 1 500 > want; {flush_fn}{}{round}",
            if flush { "FLUSH=1\n" } else { "FLUSH=\n" }
        )
    };
    for flush in [false, true] {
        let r = strata_run(&d, Mode::Default, &dir, &dir, &["sh", "-c", &script(flush)]);
        r.assert_ok(&format!("rename races (flushed first: {flush})"));
        assert!(
            r.stdout_str().ends_with("rounds-ok\n"),
            "flushed first: {flush}: {}\n{}",
            r.stdout_str(),
            r.stderr
        );
    }
}

/// A descriptor inherited over exec (a shell redirection) is held once per
/// process, not once per call: `seq > big` writes through its inherited
/// stdout and `cat <&3` reads a whole file through its inherited stdin,
/// each with one hold request (the stdio layer once asked on every call).
#[test]
fn an_inherited_descriptor_is_held_once_per_process() {
    let d = TestDaemon::small();
    let tmp = tempfile::Builder::new()
        .prefix("strata-hold-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    let script = "seq 1 40000 > big; exec 3<big; cat <&3 > copy; cmp big copy";
    let argv = [
        std::ffi::OsStr::new("sh"),
        std::ffi::OsStr::new("-c"),
        std::ffi::OsStr::new(script),
    ];
    let mut cmd = strata_run_cmd(&d, Mode::Scratch, dir, dir, &argv);
    cmd.env("STRATA_INTERNAL_ADAPTER_DEBUG", "1");
    let r = run_cmd(cmd, d.path());
    r.assert_ok(script);
    let mut holds: BTreeMap<String, u32> = BTreeMap::new();
    for l in r.stderr.lines().filter(|l| l.contains(": hold id=")) {
        // "strata-posix[PID]: hold id=ID -> …": one per (process, file)
        let pid = l.split(']').next().unwrap_or("");
        let id = l.split("hold id=").nth(1).and_then(|t| t.split(' ').next());
        *holds
            .entry(format!("{pid}] {}", id.unwrap_or("?")))
            .or_default() += 1;
    }
    assert!(
        holds.len() >= 2,
        "seq and cat hold their inherited descriptors: {holds:?}\n{}",
        tail(&r.stderr, 60)
    );
    assert!(
        holds.values().all(|&n| n == 1),
        "one hold per process and file: {holds:?}\n{}",
        tail(&r.stderr, 60)
    );
}
