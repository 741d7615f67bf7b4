//! Compiles the C shim for the variadic entry points (open, openat, fcntl and
//! their 64-bit aliases); src/shim.rs exports them under their libc names.
fn main() {
    println!("cargo:rerun-if-changed=csrc/shim.c");
    cc::Build::new()
        .file("csrc/shim.c")
        .warnings(true)
        .compile("strata_posix_shim");
}
