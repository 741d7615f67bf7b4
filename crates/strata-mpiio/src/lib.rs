//! The MPI-IO adapter, `libstrata_mpiio` (issue 16): C over the MPI
//! profiling interface (`csrc/strata_mpiio.c`), built by `build.rs` once per
//! MPI found (Open MPI, MPICH: different ABIs) and embedded here, so the
//! one `strata` binary can preload the build that matches a program.
//!
//! **Architecture Invariant.** The adapter only turns MPI-IO semantics
//! (views, pointers, collectives, atomicity, error classes) into positioned
//! POSIX calls; strata's buffering of those calls is the POSIX adapter's
//! (`libstrata_posix`, preloaded first), and a file is served by the MPI-IO
//! adapter only when the POSIX adapter tracks its path on every rank
//! (`strata_posix_tracks`). Everything else goes to `PMPI_*` untouched.
//!
//! **API Boundary.** [`library`] (the embedded build), [`detect`] (which MPI
//! a command uses), [`install`] (the build written where `LD_PRELOAD` can
//! name it). The C side's boundary is the MPI standard's `MPI_File_*`.

use std::io::Write;
use std::path::{Path, PathBuf};

mod libs {
    include!(concat!(env!("OUT_DIR"), "/libs.rs"));
}

/// An MPI implementation the adapter is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mpi {
    OpenMpi,
    Mpich,
}

impl Mpi {
    pub const ALL: [Mpi; 2] = [Mpi::OpenMpi, Mpi::Mpich];

    pub fn name(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "openmpi",
            Mpi::Mpich => "mpich",
        }
    }

    /// `openmpi` | `mpich` (the value of `STRATA_MPI`).
    pub fn from_name(s: &str) -> Option<Mpi> {
        Mpi::ALL.into_iter().find(|m| m.name() == s)
    }

    /// The Debian package whose `mpicc` builds it.
    pub fn dev_package(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "libopenmpi-dev",
            Mpi::Mpich => "libmpich-dev",
        }
    }
}

/// The adapter built for `m`, if `mpicc` of that MPI was there at build time.
pub fn library(m: Mpi) -> Option<&'static [u8]> {
    match m {
        Mpi::OpenMpi => libs::OPENMPI,
        Mpi::Mpich => libs::MPICH,
    }
}

/// Bytes of an executable read to find the libraries it links.
const SCAN_BYTES_MAX: u64 = 256 << 20;

/// Which MPI the program at `exe` (a resolved path) uses: a launcher by its
/// real name (`orterun`/`prterun` → Open MPI, `mpiexec.hydra` → MPICH), a
/// program by the MPI library it links (`libmpi.so.40`, `libmpich.so.12`).
/// None for anything else (a script, a program without MPI).
pub fn detect(exe: &Path) -> Option<Mpi> {
    let real = std::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
    let name = real.file_name()?.to_string_lossy().into_owned();
    if ["orterun", "prterun", "openmpi"]
        .iter()
        .any(|n| name.contains(n))
    {
        return Some(Mpi::OpenMpi);
    }
    if ["hydra", "mpich"].iter().any(|n| name.contains(n)) {
        return Some(Mpi::Mpich);
    }
    let f = std::fs::File::open(&real).ok()?;
    let mut bytes = Vec::new();
    use std::io::Read;
    f.take(SCAN_BYTES_MAX).read_to_end(&mut bytes).ok()?;
    if !bytes.starts_with(b"\x7fELF") {
        return None;
    }
    // DT_NEEDED names sit NUL-terminated in .dynstr
    let has = |s: &[u8]| bytes.windows(s.len()).any(|w| w == s);
    if has(b"libmpich.so") || has(b"libmpi.so.12\0") {
        Some(Mpi::Mpich)
    } else if has(b"libmpi.so.4") {
        Some(Mpi::OpenMpi)
    } else {
        None
    }
}

/// Resolves a command name as `execvp` would (a name with a slash is a path).
pub fn which(cmd: &Path) -> Option<PathBuf> {
    if cmd.components().count() > 1 {
        return Some(cmd.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

fn fnv64(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
        (h ^ u64::from(*x)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Writes the adapter for `m` into `dir` (named by its content's hash, so
/// runs of different strata builds never share a stale copy) and returns its
/// path; an existing copy is reused.
pub fn install(m: Mpi, dir: &Path) -> Result<PathBuf, String> {
    let bytes = library(m).ok_or_else(|| {
        format!(
            "this strata was built without the MPI-IO adapter for {} (install {} and rebuild strata)",
            m.name(),
            m.dev_package()
        )
    })?;
    let path = dir.join(format!(
        "libstrata_mpiio_{}-{:016x}.so",
        m.name(),
        fnv64(bytes)
    ));
    if std::fs::metadata(&path).is_ok_and(|md| md.len() == bytes.len() as u64) {
        return Ok(path);
    }
    let tmp = dir.join(format!(
        ".libstrata_mpiio_{}.{}",
        m.name(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
    })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Mpi::ALL {
            assert_eq!(Mpi::from_name(m.name()), Some(m));
        }
        assert_eq!(Mpi::from_name("lam"), None);
    }

    #[test]
    fn a_program_without_mpi_is_not_detected() {
        let sh = which(Path::new("sh")).expect("sh in PATH");
        assert_eq!(detect(&sh), None);
        assert_eq!(detect(Path::new("/nonexistent/prog")), None);
    }

    #[test]
    fn launchers_are_detected_by_their_real_name() {
        let dir = tempdir();
        for (name, want) in [
            ("orterun", Mpi::OpenMpi),
            ("mpiexec.hydra", Mpi::Mpich),
            ("mpirun.openmpi", Mpi::OpenMpi),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, b"#!/bin/sh\n").unwrap();
            let link = dir.join(format!("link-{name}"));
            std::os::unix::fs::symlink(&p, &link).unwrap();
            assert_eq!(detect(&link), Some(want), "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn install_writes_once_and_reuses() {
        let Some(m) = Mpi::ALL.into_iter().find(|m| library(*m).is_some()) else {
            eprintln!("SKIPPED: no MPI-IO adapter built (no mpicc at build time)");
            return;
        };
        let dir = tempdir();
        let a = install(m, &dir).unwrap();
        let b = install(m, &dir).unwrap();
        assert_eq!(a, b);
        assert_eq!(std::fs::read(&a).unwrap(), library(m).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "strata-mpiio-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
