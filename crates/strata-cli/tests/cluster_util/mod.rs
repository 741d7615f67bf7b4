//! The cluster tests' bed: `strata_bench::bed` (network namespaces, else
//! 127.x.y.z addresses) with this build's `strata`, failing the test on
//! any error. `CLUSTER_TEST_BED=loopback` skips the namespaces (to test the
//! fallback).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Output;

pub use strata_bench::bed::{Bed, BedSpec};

pub fn strata_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_strata"))
}

/// `n` nodes, each with RAM `ram` (and a dir tier when `disk` is given);
/// `cluster start` gives up after `start_timeout`.
pub fn bed(n: usize, ram: &str, disk: Option<&str>, start_timeout: &str) -> Bed {
    bed_lending(n, ram, disk, start_timeout, None, false)
}

/// [`bed`] where each node lends `remote_tier` to every other one.
pub fn bed_lending(
    n: usize,
    ram: &str,
    disk: Option<&str>,
    start_timeout: &str,
    remote_tier: Option<&str>,
    toward_readers: bool,
) -> Bed {
    Bed::new(&BedSpec {
        nodes: n,
        ram: ram.into(),
        disk: disk.map(Into::into),
        start_timeout: start_timeout.into(),
        remote_tier: remote_tier.map(Into::into),
        toward_readers,
        files_at_owner: false,
        pages_where_written: false,
        strata: strata_bin(),
        loopback: std::env::var("CLUSTER_TEST_BED").is_ok_and(|v| v == "loopback"),
        log: "info".into(),
        dest_in: None,
        tls: false,
    })
    .expect("test bed")
}

/// [`bed`] with `cluster.files_at_owner` (and, as by default, pages where
/// written) and the adapter buffering the
/// shared destination (`bed.dest`, DEFAULT mode).
pub fn bed_with_files(n: usize, ram: &str, disk: Option<&str>) -> Bed {
    bed_with_files_pages(n, ram, disk, true)
}

/// [`bed_with_files`], with `cluster.pages_where_written` when `pages`.
pub fn bed_with_files_pages(n: usize, ram: &str, disk: Option<&str>, pages: bool) -> Bed {
    Bed::new(&BedSpec {
        nodes: n,
        ram: ram.into(),
        disk: disk.map(Into::into),
        start_timeout: "60s".into(),
        remote_tier: None,
        toward_readers: false,
        files_at_owner: true,
        pages_where_written: pages,
        strata: strata_bin(),
        loopback: std::env::var("CLUSTER_TEST_BED").is_ok_and(|v| v == "loopback"),
        log: "info".into(),
        dest_in: None,
        tls: false,
    })
    .expect("test bed")
}

/// `Bed` calls that fail the test instead of returning errors.
pub trait BedExt {
    fn run_cli(&self, args: &[&str]) -> Output;
    fn statuses(&self) -> Vec<serde_json::Value>;
    fn wait_for(
        &self,
        what: &str,
        ok: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value>;
    fn start(&self, i: usize) -> Output;
}

impl BedExt for Bed {
    fn run_cli(&self, args: &[&str]) -> Output {
        self.cli(args).expect("strata cli")
    }
    fn statuses(&self) -> Vec<serde_json::Value> {
        self.status().expect("cluster status")
    }
    fn wait_for(
        &self,
        what: &str,
        ok: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        self.wait_status(what, ok).expect("cluster status")
    }
    fn start(&self, i: usize) -> Output {
        self.start_node(i).expect("start node")
    }
}
