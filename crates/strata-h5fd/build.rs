//! Compiles the HDF5 driver's C side (csrc/h5fd_strata.c: the H5FD class
//! and `H5Pset_fapl_strata`) against the system's serial HDF5 1.10
//! (`pkg-config hdf5-serial`, else `hdf5`) and links it. Without HDF5
//! development files the library is built without the driver (the Rust
//! file functions only) and a warning says so.
use std::process::Command;

fn pkg(args: &[&str]) -> Option<String> {
    let o = Command::new("pkg-config").args(args).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=csrc/h5fd_strata.c");
    println!("cargo:rerun-if-changed=../../include/H5FDstrata.h");
    println!("cargo:rustc-check-cfg=cfg(strata_hdf5)");
    let name = ["hdf5-serial", "hdf5"]
        .into_iter()
        .find(|n| pkg(&["--exists", n]).is_some());
    let Some(name) = name else {
        println!("cargo:warning=strata-h5fd: no HDF5 development files (pkg-config hdf5-serial): libstrata_h5fd is built without the HDF5 driver (install libhdf5-dev and rebuild)");
        return;
    };
    let cflags = pkg(&["--cflags", name]).unwrap_or_default();
    let libs = pkg(&["--libs", name]).unwrap_or_default();
    let mut b = cc::Build::new();
    b.file("csrc/h5fd_strata.c")
        .include("../../include")
        .warnings(true);
    for f in cflags.split_whitespace() {
        if let Some(dir) = f.strip_prefix("-I") {
            b.include(dir);
        } else {
            b.flag(f);
        }
    }
    b.compile("strata_h5fd_c");
    for f in libs.split_whitespace() {
        if let Some(dir) = f.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(l) = f.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={l}");
        }
    }
    println!("cargo:rustc-cfg=strata_hdf5");
}
