//! Compiles the HDF5 driver's C side (csrc/h5fd_strata.c: the H5FD classes
//! of HDF5 1.10 and of 1.14/2.x, `H5Pset_fapl_strata`, the plugin entry
//! points). It includes no HDF5 header and links no HDF5: the HDF5 it
//! serves is found in the process at run time.
fn main() {
    println!("cargo:rerun-if-changed=csrc/h5fd_strata.c");
    cc::Build::new()
        .file("csrc/h5fd_strata.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("strata_h5fd_c");
}
