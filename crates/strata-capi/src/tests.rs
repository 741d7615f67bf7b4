//! Unit tests of the C ABI that need no daemon: the header cannot drift from
//! `Errno` or from the exported functions, and misuse is rejected cleanly.

use super::*;
use std::collections::BTreeMap;
use std::ptr::{null, null_mut};

const HEADER: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../include/strata.h"
));
const SOURCE: &str = include_str!("lib.rs");

/// `#define NAME VALUE` lines of the header.
fn defines() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in HEADER.lines() {
        let mut w = line.split_whitespace();
        if w.next() != Some("#define") {
            continue;
        }
        let (Some(name), Some(value)) = (w.next(), w.next()) else {
            continue;
        };
        assert!(
            out.insert(name.to_string(), value.to_string()).is_none(),
            "{name} defined twice"
        );
    }
    out
}

fn c(p: *const c_char) -> String {
    assert!(!p.is_null());
    // SAFETY: `p` is a non-NULL, NUL-terminated string the library returned (strata_strerror / last error).
    unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string()
}

#[test]
fn header_error_codes_match_errno() {
    let d = defines();
    assert_eq!(d.get("STRATA_OK").map(String::as_str), Some("0"));
    let in_header: BTreeMap<&str, i32> = d
        .iter()
        .filter(|(k, _)| k.starts_with("STRATA_E") && *k != "STRATA_EXCL")
        .map(|(k, v)| {
            (
                k.as_str(),
                v.parse::<i32>()
                    .unwrap_or_else(|_| panic!("{k} = {v} is not a number")),
            )
        })
        .collect();
    for e in Errno::ALL {
        assert_eq!(
            in_header.get(e.name()),
            Some(&e.code()),
            "{} must be #defined as {} in include/strata.h",
            e.name(),
            e.code()
        );
    }
    for (name, code) in &in_header {
        let e =
            Errno::from_code(*code).unwrap_or_else(|| panic!("{name} = {code} is not an Errno"));
        assert_eq!(e.name(), *name, "code {code} is {} in Errno", e.name());
    }
    assert_eq!(in_header.len(), Errno::ALL.len());
}

#[test]
fn header_flags_match() {
    let d = defines();
    assert_eq!(d["STRATA_CREATE"], STRATA_CREATE.to_string());
    assert_eq!(d["STRATA_EXCL"], STRATA_EXCL.to_string());
    use crate::stage::*;
    for (name, v) in [
        ("STRATA_MODE_DEFAULT", STRATA_MODE_DEFAULT),
        ("STRATA_MODE_SCRATCH", STRATA_MODE_SCRATCH),
        ("STRATA_MODE_WORKFLOW", STRATA_MODE_WORKFLOW),
        ("STRATA_STAGE_EVICT", STRATA_STAGE_EVICT),
        ("STRATA_STAGE_NO_WAIT", STRATA_STAGE_NO_WAIT),
    ] {
        assert_eq!(d[name], v.to_string(), "{name}");
    }
}

#[test]
fn header_declares_exactly_the_exported_functions() {
    let mut exported: Vec<String> = SOURCE
        .lines()
        .chain(include_str!("stage.rs").lines())
        .filter_map(|l| {
            l.trim()
                .strip_prefix("pub unsafe extern \"C\" fn ")
                .or_else(|| l.trim().strip_prefix("pub extern \"C\" fn "))
        })
        .map(|rest| rest.split('(').next().unwrap().to_string())
        .collect();
    let mut declared: Vec<String> = HEADER
        .lines()
        .filter(|l| {
            !l.trim_start().starts_with("/*")
                && !l.trim_start().starts_with('*')
                && !l.starts_with('#')
                && !l.contains("typedef")
        })
        .filter_map(|l| {
            let i = l.find("strata_")?;
            let rest = &l[i..];
            let name = rest.split('(').next()?;
            (rest.contains('(') && !name.contains(' ')).then(|| name.to_string())
        })
        .collect();
    exported.sort();
    declared.sort();
    assert!(exported.len() >= 25, "found only {exported:?}");
    assert_eq!(exported, declared);
}

#[test]
fn strerror_matches_errno_display_for_both_signs() {
    for e in Errno::ALL {
        assert_eq!(c(strata_strerror(e.code())), e.to_string());
        assert_eq!(c(strata_strerror(-e.code())), e.to_string());
        assert_eq!(c(strata_error_name(-e.code())), e.name());
        assert_eq!(c(strata_error_name(e.code())), e.name());
    }
    assert_eq!(c(strata_strerror(0)), "success");
    assert_eq!(c(strata_error_name(0)), "STRATA_OK");
    let past = Errno::ALL.iter().map(|e| e.code()).max().unwrap() + 1;
    for bad in [999, -999, i32::MIN, i32::MAX, past, -past] {
        assert_eq!(c(strata_strerror(bad)), "unknown error");
        assert_eq!(c(strata_error_name(bad)), "STRATA_EUNKNOWN");
    }
    // Static: the pointer is the same every time.
    assert_eq!(strata_strerror(3), strata_strerror(-3));
}

const EINVAL: c_int = -(Errno::Inval as c_int);
const ENAME: c_int = -(Errno::Name as c_int);

#[test]
fn connect_failure_leaves_null_and_a_message() {
    let mut cl: *mut strata_client = std::ptr::dangling_mut();
    // SAFETY: test: every pointer passed is NULL (refused by the callee), a C string literal, or a live local.
    let rc = unsafe { strata_connect(c"/nonexistent/strata-capi-test.sock".as_ptr(), &mut cl) };
    assert_eq!(rc, -Errno::NoDaemon.code());
    assert!(cl.is_null());
    let msg = c(strata_last_error_message());
    assert!(
        msg.contains("strata_connect") && msg.contains("/nonexistent/strata-capi-test.sock"),
        "{msg}"
    );
    // SAFETY: test: every pointer passed is NULL (refused by the callee), a C string literal, or a live local.
    assert_eq!(unsafe { strata_connect(null(), null_mut()) }, EINVAL);
    assert!(c(strata_last_error_message()).contains("out is NULL"));
}

#[test]
fn null_handles_and_arguments_are_rejected() {
    let mut u = 0u64;
    let mut z = 0usize;
    let mut i = 0 as c_int;
    let mut p: *mut c_void = null_mut();
    let mut b: *mut strata_bucket = null_mut();
    let n = c"x".as_ptr();
    let buf = [0u8; 4];
    // SAFETY: test: every pointer passed is NULL (refused by the callee) or points to a live local.
    unsafe {
        assert_eq!(
            strata_bucket_open(null_mut(), n, STRATA_CREATE, &mut b),
            EINVAL
        );
        assert_eq!(strata_bucket_open(null_mut(), n, 0, null_mut()), EINVAL);
        assert_eq!(strata_bucket_destroy(null_mut()), EINVAL);
        assert_eq!(strata_bucket_size(null_mut(), &mut u, &mut u), EINVAL);
        assert_eq!(strata_bucket_rename(null_mut(), n), EINVAL);
        assert_eq!(strata_bucket_tag(null_mut(), n, n), EINVAL);
        assert_eq!(strata_bucket_list(null_mut(), None, null_mut()), EINVAL);
        assert_eq!(strata_put(null_mut(), n, buf.as_ptr().cast(), 4), EINVAL);
        assert_eq!(
            strata_put_at(null_mut(), n, 0, buf.as_ptr().cast(), 4, null_mut()),
            EINVAL
        );
        assert_eq!(
            strata_append(null_mut(), n, buf.as_ptr().cast(), 4, null_mut()),
            EINVAL
        );
        assert_eq!(strata_get(null_mut(), n, null_mut(), 0, &mut z), EINVAL);
        assert_eq!(
            strata_get_at(null_mut(), n, 0, null_mut(), 0, &mut z),
            EINVAL
        );
        assert_eq!(strata_get_alloc(null_mut(), n, &mut p, &mut z), EINVAL);
        assert_eq!(strata_delete(null_mut(), n), EINVAL);
        assert_eq!(strata_rename(null_mut(), n, n, 0), EINVAL);
        assert_eq!(strata_exists(null_mut(), n, &mut i), EINVAL);
        assert_eq!(strata_blob_size(null_mut(), n, &mut u), EINVAL);
        assert_eq!(strata_blob_list(null_mut(), None, null_mut()), EINVAL);
        assert_eq!(strata_set_score(null_mut(), n, 0.5, 0), EINVAL);
        strata_disconnect(null_mut());
        strata_bucket_close(null_mut());
        strata_free(null_mut());
    }
    assert!(b.is_null());
    assert!(c(strata_last_error_message()).contains("bucket handle is NULL"));
}

#[test]
fn wrong_handle_kind_is_rejected() {
    // A fake bucket whose magic is not a bucket's: detected, not dereferenced further.
    #[repr(C)]
    struct Fake {
        magic: u64,
        pad: [u64; 64],
    }
    let mut f = Fake {
        magic: CLIENT_MAGIC,
        pad: [0; 64],
    };
    let fb = &mut f as *mut Fake as *mut strata_bucket;
    let mut u = 0u64;
    // SAFETY: test: `fb` points to a live local `Fake` whose magic is wrong; the callee reads only the magic word and refuses it.
    unsafe {
        assert_eq!(strata_bucket_size(fb, &mut u, &mut u), EINVAL);
        strata_bucket_close(fb); // rejected: not freed
    }
    f.magic = BUCKET_MAGIC + 1;
    let fc = &mut f as *mut Fake as *mut strata_client;
    // SAFETY: test: `fc` points to a live local `Fake` whose magic is wrong; the callee reads only the magic word and refuses it.
    unsafe {
        assert_eq!(strata_bucket_list(fc, None, null_mut()), EINVAL);
        strata_disconnect(fc);
    }
    assert!(c(strata_last_error_message()).contains("not a strata_client"));
}

#[test]
fn bad_utf8_names_are_ename() {
    let bad = [0xffu8, 0xfe, 0];
    let s = bad.as_ptr() as *const c_char;
    // SAFETY: test: every pointer passed is NULL (refused by the callee) or points to a live local.
    unsafe {
        assert!(arg_name(s, "n").is_err_and(|e| e.errno == Errno::Name));
        assert!(arg_name(c"".as_ptr(), "n").is_err_and(|e| e.errno == Errno::Name));
        assert!(arg_name(null(), "n").is_err_and(|e| e.errno == Errno::Inval));
        assert!(arg_str(s, "tag", Errno::Inval).is_err_and(|e| e.errno == Errno::Inval));
        assert!(arg_bytes(null(), 1, "d").is_err_and(|e| e.errno == Errno::Inval));
        assert!(arg_bytes(null(), 0, "d").is_ok_and(|d| d.is_empty()));
        assert!(arg_buf(null_mut(), 0, "b").is_ok_and(|d| d.is_empty()));
        assert!(arg_buf(null_mut(), 8, "b").is_err());
    }
    assert_eq!(ENAME, -5);
}

#[test]
fn panics_become_einternal() {
    let rc = ffi("test_fn", || panic!("boom"));
    assert_eq!(rc, -Errno::Internal.code());
    let m = c(strata_last_error_message());
    assert!(m.contains("test_fn") && m.contains("boom"), "{m}");
    ffi_void("test_void", || panic!("boom2"));
    assert!(c(strata_last_error_message()).contains("boom2"));
}
