//! The C API end to end: builds libstrata.so (strata-capi), compiles C
//! programs against include/strata.h with the system C compiler, and runs
//! them against a real daemon.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Builds libstrata.so with the profile of the `strata` binary under test
/// and returns the directory holding it (the binary's own directory).
fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let bin = common::strata_bin();
        let dir = bin
            .parent()
            .expect("strata binary has a directory")
            .to_path_buf();
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
        let out = cmd.output().expect("run cargo build -p strata-capi");
        assert!(
            out.status.success(),
            "cargo build -p strata-capi failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lib = dir.join("libstrata.so");
        assert!(
            lib.exists(),
            "{} missing after building strata-capi (is the target dir/triple different?)",
            lib.display()
        );
        dir
    })
}

/// Compiles `src` against the header and libstrata.so; returns the executable.
fn compile(src: &Path, out_dir: &Path, name: &str) -> PathBuf {
    let lib = lib_dir();
    let exe = out_dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g"])
        .arg("-I")
        .arg(workspace_root().join("include"))
        .arg("-o")
        .arg(&exe)
        .arg(src)
        .arg("-L")
        .arg(lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lstrata", "-lm"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run C compiler {cc}: {e}"));
    assert!(
        out.status.success(),
        "compiling {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn run(exe: &Path, d: &common::TestDaemon) -> (Output, String) {
    let out = Command::new(exe)
        .arg(&d.socket)
        .env_remove("STRATA_SOCKET")
        .env_remove("STRATA_DAEMON_SOCKET")
        .output()
        .expect("run C program");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

#[test]
fn c_example_runs_against_a_real_daemon() {
    let d = common::TestDaemon::start();
    let tmp = tempfile::tempdir().unwrap();
    let exe = compile(
        &workspace_root().join("examples/c/example.c"),
        tmp.path(),
        "example",
    );
    let (out, text) = run(&exe, &d);
    assert!(
        out.status.success(),
        "example.c failed ({}):\n{text}\ndaemon log:\n{}",
        out.status,
        d.log()
    );
    for line in [
        "ok   big round-trips (memcmp)",
        "ok   get_at sees the patch",
        "ok   log holds both lines",
        "blobs: big empty greeting log sparse",
        "get of a deleted blob: -3 = -STRATA_ENOBLOB: no such blob",
        "ok   destroy bucket",
        "all checks passed",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(!text.contains("FAIL"), "{text}");
    // The bucket is gone afterwards.
    assert!(!d
        .client()
        .bucket_names()
        .unwrap()
        .iter()
        .any(|n| n == "c-example"));
}

const MISUSE_C: &str = r#"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "strata.h"

static int failures = 0;
#define EXPECT(call, want) do { \
    int rc_ = (call); \
    if (rc_ != (want)) { \
        printf("FAIL line %d: %s = %d (%s), want %d (%s) [%s]\n", __LINE__, #call, rc_, strata_error_name(rc_), \
               (want), strata_error_name(want), strata_last_error_message()); \
        failures++; \
    } else { \
        printf("ok   %s -> %s\n", #call, strata_error_name(rc_)); \
    } \
} while (0)
#define CHECK(cond) do { if (!(cond)) { printf("FAIL line %d: %s\n", __LINE__, #cond); failures++; } } while (0)

static int count(const char *name, void *ctx) { (void)name; (*(int *)ctx)++; return 0; }

int main(int argc, char **argv) {
    const char *sock = argc > 1 ? argv[1] : NULL;
    const char bad_utf8[] = { (char)0xff, (char)0xfe, 'x', 0 };
    char buf[64];
    size_t len = 12345, got = 0;
    uint64_t u = 0, v = 0;
    int ex = -1, n = 0;
    void *p = (void *)1;
    strata_client *c = (strata_client *)1;
    strata_bucket *b = (strata_bucket *)1;

    /* Connection. */
    EXPECT(strata_connect("/nonexistent/dir/strata.sock", &c), -STRATA_ENODAEMON);
    CHECK(c == NULL);
    CHECK(strstr(strata_last_error_message(), "/nonexistent/dir/strata.sock") != NULL);
    EXPECT(strata_connect(sock, NULL), -STRATA_EINVAL);
    EXPECT(strata_connect(sock, &c), STRATA_OK);
    CHECK(c != NULL);

    /* Error strings. */
    CHECK(strcmp(strata_strerror(-STRATA_ENOBLOB), "no such blob") == 0);
    CHECK(strcmp(strata_strerror(STRATA_ENOBLOB), "no such blob") == 0);
    CHECK(strcmp(strata_strerror(0), "success") == 0);
    CHECK(strcmp(strata_strerror(-4242), "unknown error") == 0);
    CHECK(strcmp(strata_strerror(-2147483647 - 1), "unknown error") == 0);
    CHECK(strcmp(strata_error_name(-STRATA_ETIMEDOUT), "STRATA_ETIMEDOUT") == 0);

    /* Bucket opening. */
    EXPECT(strata_bucket_open(NULL, "m", STRATA_CREATE, &b), -STRATA_EINVAL);
    CHECK(b == NULL);
    EXPECT(strata_bucket_open(c, NULL, STRATA_CREATE, &b), -STRATA_EINVAL);
    EXPECT(strata_bucket_open(c, "", STRATA_CREATE, &b), -STRATA_ENAME);
    EXPECT(strata_bucket_open(c, bad_utf8, STRATA_CREATE, &b), -STRATA_ENAME);
    EXPECT(strata_bucket_open(c, "m", STRATA_CREATE, NULL), -STRATA_EINVAL);
    EXPECT(strata_bucket_open(c, "m", 0x40, &b), -STRATA_EINVAL);
    EXPECT(strata_bucket_open(c, "m", STRATA_EXCL, &b), -STRATA_EINVAL);
    EXPECT(strata_bucket_open(c, "misuse-none", 0, &b), -STRATA_ENOBUCKET);
    CHECK(b == NULL);
    EXPECT(strata_bucket_open((strata_client *)&buf, "m", STRATA_CREATE, &b), -STRATA_EINVAL); /* not a handle */
    EXPECT(strata_bucket_open(c, "misuse", STRATA_CREATE | STRATA_EXCL, &b), STRATA_OK);
    strata_bucket *b2 = NULL;
    EXPECT(strata_bucket_open(c, "misuse", STRATA_CREATE | STRATA_EXCL, &b2), -STRATA_EEXIST);
    CHECK(b2 == NULL);

    /* Wrong handle kinds. */
    EXPECT(strata_put((strata_bucket *)c, "x", "a", 1), -STRATA_EINVAL);
    EXPECT(strata_bucket_list((strata_client *)b, count, &n), -STRATA_EINVAL);
    strata_bucket_close((strata_bucket *)c); /* rejected, not freed */
    strata_disconnect((strata_client *)b);   /* rejected, not freed */

    /* Blob arguments. */
    EXPECT(strata_put(NULL, "x", "a", 1), -STRATA_EINVAL);
    EXPECT(strata_put(b, NULL, "a", 1), -STRATA_EINVAL);
    EXPECT(strata_put(b, "", "a", 1), -STRATA_ENAME);
    EXPECT(strata_put(b, bad_utf8, "a", 1), -STRATA_ENAME);
    EXPECT(strata_put(b, "x", NULL, 5), -STRATA_EINVAL);
    EXPECT(strata_put(b, "x", "abc", 3), STRATA_OK);
    EXPECT(strata_put_at(b, "x", 0, NULL, 1, &u), -STRATA_EINVAL);
    EXPECT(strata_put_at(b, "x", UINT64_MAX, "a", 1, NULL), -STRATA_EINVAL);
    EXPECT(strata_append(b, NULL, "a", 1, NULL), -STRATA_EINVAL);
    EXPECT(strata_append(b, "x", NULL, 1, NULL), -STRATA_EINVAL);
    EXPECT(strata_append(b, "x", NULL, 0, &u), STRATA_OK);
    CHECK(u == 3);

    EXPECT(strata_get(b, "x", buf, sizeof buf, NULL), -STRATA_EINVAL);
    EXPECT(strata_get(b, "x", NULL, 3, &len), -STRATA_EINVAL);
    len = 0;
    EXPECT(strata_get(b, "x", NULL, 0, &len), -STRATA_ERANGE); /* size query */
    CHECK(len == 3);
    memset(buf, '#', sizeof buf);
    EXPECT(strata_get(b, "x", buf, 2, &len), -STRATA_ERANGE);
    CHECK(len == 3 && buf[0] == '#' && buf[1] == '#'); /* nothing copied */
    EXPECT(strata_get(b, "nope", buf, sizeof buf, &len), -STRATA_ENOBLOB);
    CHECK(strstr(strata_last_error_message(), "nope") != NULL);
    EXPECT(strata_get_at(b, "x", 0, buf, sizeof buf, NULL), -STRATA_EINVAL);
    EXPECT(strata_get_at(b, "x", 0, NULL, 4, &got), -STRATA_EINVAL);
    EXPECT(strata_get_at(b, "nope", 0, NULL, 0, &got), -STRATA_ENOBLOB);
    EXPECT(strata_get_at(b, "x", 0, NULL, 0, &got), STRATA_OK);
    CHECK(got == 0);
    EXPECT(strata_get_at(b, "x", 10, buf, sizeof buf, &got), STRATA_OK); /* past the end */
    CHECK(got == 0);
    EXPECT(strata_get_alloc(b, "x", NULL, &len), -STRATA_EINVAL);
    EXPECT(strata_get_alloc(b, "x", &p, NULL), -STRATA_EINVAL);
    EXPECT(strata_get_alloc(b, "nope", &p, &len), -STRATA_ENOBLOB);
    CHECK(p == NULL && len == 0);
    EXPECT(strata_get_alloc(b, "x", &p, &len), STRATA_OK);
    CHECK(p != NULL && len == 3 && memcmp(p, "abc", 3) == 0);
    strata_free(p);
    strata_free(NULL);

    EXPECT(strata_delete(b, NULL), -STRATA_EINVAL);
    EXPECT(strata_delete(b, "nope"), -STRATA_ENOBLOB);
    EXPECT(strata_rename(b, "x", NULL, 0), -STRATA_EINVAL);
    EXPECT(strata_rename(b, NULL, "y", 0), -STRATA_EINVAL);
    EXPECT(strata_rename(b, "x", bad_utf8, 0), -STRATA_ENAME);
    EXPECT(strata_rename(b, "nope", "y", 0), -STRATA_ENOBLOB);
    EXPECT(strata_exists(b, "x", NULL), -STRATA_EINVAL);
    EXPECT(strata_exists(b, bad_utf8, &ex), -STRATA_ENAME);
    EXPECT(strata_blob_size(b, "x", NULL), -STRATA_EINVAL);
    EXPECT(strata_blob_size(b, "nope", &u), -STRATA_ENOBLOB);
    EXPECT(strata_blob_list(b, NULL, NULL), -STRATA_EINVAL);
    EXPECT(strata_blob_list(NULL, count, &n), -STRATA_EINVAL);
    EXPECT(strata_set_score(b, "x", 2.0f, 0), -STRATA_EINVAL);
    EXPECT(strata_set_score(b, "x", -0.5f, 0), -STRATA_EINVAL);
    EXPECT(strata_set_score(b, NULL, 0.5f, 0), -STRATA_EINVAL);
    EXPECT(strata_set_score(b, "nope", 0.5f, 0), -STRATA_ENOBLOB);
    EXPECT(strata_set_score(b, "x", NAN, 0), -STRATA_EINVAL);
    EXPECT(strata_set_score(b, "x", STRATA_SCORE_NONE, 0), STRATA_OK);
    strata_blob_stat bst;
    EXPECT(strata_stat(b, "x", NULL), -STRATA_EINVAL);
    EXPECT(strata_stat(b, NULL, &bst), -STRATA_EINVAL);
    EXPECT(strata_stat(NULL, "x", &bst), -STRATA_EINVAL);
    EXPECT(strata_stat(b, bad_utf8, &bst), -STRATA_ENAME);
    EXPECT(strata_stat(b, "nope", &bst), -STRATA_ENOBLOB);

    /* Bucket-level arguments. */
    EXPECT(strata_bucket_size(b, NULL, &v), -STRATA_EINVAL);
    EXPECT(strata_bucket_size(b, &u, NULL), -STRATA_EINVAL);
    EXPECT(strata_bucket_size(b, &u, &v), STRATA_OK);
    CHECK(u == 3 && v == 1);
    EXPECT(strata_bucket_tag(b, NULL, "v"), -STRATA_EINVAL);
    EXPECT(strata_bucket_tag(b, "k", NULL), -STRATA_EINVAL);
    EXPECT(strata_bucket_tag(b, "k", bad_utf8), -STRATA_EINVAL);
    EXPECT(strata_bucket_rename(b, NULL), -STRATA_EINVAL);
    EXPECT(strata_bucket_rename(b, ""), -STRATA_ENAME);
    EXPECT(strata_bucket_list(c, NULL, NULL), -STRATA_EINVAL);
    EXPECT(strata_bucket_list(NULL, count, &n), -STRATA_EINVAL);
    EXPECT(strata_bucket_destroy(NULL), -STRATA_EINVAL);
    strata_bucket_close(NULL);
    strata_disconnect(NULL);

    /* A bucket outlives its client handle. */
    strata_disconnect(c);
    EXPECT(strata_put(b, "after-disconnect", "z", 1), STRATA_OK);
    EXPECT(strata_exists(b, "after-disconnect", &ex), STRATA_OK);
    CHECK(ex == 1);
    EXPECT(strata_bucket_destroy(b), STRATA_OK);

    if (failures) { printf("%d misuse check(s) FAILED\n", failures); return 1; }
    printf("misuse: all checks passed\n");
    return 0;
}
"#;

#[test]
fn c_api_rejects_misuse_without_crashing() {
    let d = common::TestDaemon::start();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("misuse.c");
    std::fs::write(&src, MISUSE_C).unwrap();
    let exe = compile(&src, tmp.path(), "misuse");
    let (out, text) = run(&exe, &d);
    assert!(
        out.status.success(),
        "misuse.c failed ({}):\n{text}\ndaemon log:\n{}",
        out.status,
        d.log()
    );
    assert!(text.contains("misuse: all checks passed"), "{text}");
    assert!(!text.contains("FAIL"), "{text}");
    assert!(!d
        .client()
        .bucket_names()
        .unwrap()
        .iter()
        .any(|n| n == "misuse"));
}
