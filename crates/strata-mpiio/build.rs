//! Builds `libstrata_mpiio` (csrc/strata_mpiio.c) once per MPI found — Open
//! MPI and MPICH have different ABIs (`MPI_Comm` is a pointer in one and an
//! int in the other) — and writes `libs.rs`, which embeds each build
//! (`include_bytes!`) or says it is missing.
//!
//! Compilers: `$STRATA_MPICC_OPENMPI` / `$STRATA_MPICC_MPICH`, else Debian's
//! `mpicc.openmpi` / `mpicc.mpich`, else a plain `mpicc` of that flavour.
//! `STRATA_NO_MPI=1` builds none. A compiler that is present but fails is a
//! build error (the adapter's C must compile wherever the MPI is there).
use std::path::{Path, PathBuf};
use std::process::Command;

fn runs(cmd: &str, arg: &str) -> Option<String> {
    let o = Command::new(cmd).arg(arg).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

fn compiler(env: &str, debian: &str, flavour_probe: impl Fn() -> bool) -> Option<String> {
    println!("cargo:rerun-if-env-changed={env}");
    if let Ok(c) = std::env::var(env) {
        return (!c.is_empty()).then_some(c);
    }
    if runs(debian, "-show").is_some() || runs(debian, "--showme").is_some() {
        return Some(debian.to_string());
    }
    flavour_probe().then(|| "mpicc".to_string())
}

fn build(cc: &str, out: &Path) -> bool {
    let status = Command::new(cc)
        .args(["-O2", "-g", "-Wall", "-Wextra", "-fPIC", "-shared", "-o"])
        .arg(out)
        .arg("csrc/strata_mpiio.c")
        .arg("-ldl")
        .status();
    match status {
        Ok(s) if s.success() => true,
        Ok(s) => panic!("{cc} failed ({s}) building {}", out.display()),
        Err(e) => {
            println!("cargo:warning=cannot run {cc}: {e}");
            false
        }
    }
}

fn main() {
    println!("cargo:rerun-if-changed=csrc/strata_mpiio.c");
    println!("cargo:rerun-if-env-changed=STRATA_NO_MPI");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let none = std::env::var("STRATA_NO_MPI").is_ok_and(|v| v == "1");
    let flavours: [(&str, Option<String>); 2] = [
        (
            "OPENMPI",
            if none {
                None
            } else {
                compiler("STRATA_MPICC_OPENMPI", "mpicc.openmpi", || {
                    runs("mpicc", "--showme:version").is_some()
                })
            },
        ),
        (
            "MPICH",
            if none {
                None
            } else {
                compiler("STRATA_MPICC_MPICH", "mpicc.mpich", || {
                    runs("mpicc", "-show").is_some_and(|s| s.contains("mpich"))
                })
            },
        ),
    ];
    let mut code = String::new();
    for (name, cc) in flavours {
        let lib = out_dir.join(format!("libstrata_mpiio_{}.so", name.to_lowercase()));
        let built = cc.as_deref().is_some_and(|cc| build(cc, &lib));
        if built {
            code.push_str(&format!(
                "/// The adapter built with this MPI's `mpicc`.\npub static {name}: Option<&[u8]> = Some(include_bytes!({:?}));\n",
                lib.display().to_string()
            ));
        } else {
            println!("cargo:warning=strata-mpiio: no {name} compiler found: `strata run` cannot preload the MPI-IO adapter for that MPI (install its -dev package and rebuild)");
            code.push_str(&format!(
                "/// Not built: no `mpicc` of this MPI when strata was built.\npub static {name}: Option<&[u8]> = None;\n"
            ));
        }
    }
    std::fs::write(out_dir.join("libs.rs"), code).expect("write libs.rs");
}
