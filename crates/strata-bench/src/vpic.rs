//! VPIC-like writes and BD-CATS-like reads: the worker processes of
//! `strata bench tiers` (experiment `tiering`).
//!
//! **VPIC** (particle-in-cell, write only): per timestep `t` one shared file
//! `vpic.T<t>` holding [`VARS`] variables (x, y, z, ux, uy, uz, id1, id2) of
//! every particle; each variable is a contiguous array over all processes and
//! rank `r` owns the `slice` bytes at `(v × procs + r) × slice` — VPIC-IO's
//! layout (one dataset per variable, one hyperslab per process). A process
//! writes its slices in large sequential `pwrite`s of at most [`WRITE_MAX`].
//!
//! **BD-CATS** (clustering, read only): the same files read back with a
//! different decomposition — each variable is cut into `read_size` blocks and
//! rank `r` reads blocks `r, r + procs, r + 2·procs, …` (strided), so every
//! reader touches every writer's slice.
//!
//! Every [`STAMP_UNIT`] bytes of a file start with a stamp naming
//! (timestep, variable, offset); the reader checks every stamp of every block
//! it reads, so a benchmark never reports bytes that came back wrong.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::team::{self, cpath, errno, mono_ns, WorkerReport};
use crate::zipf::Rng;

/// Variables per particle (x, y, z, ux, uy, uz, id1, id2), one array each.
pub const VARS: u64 = 8;
/// Largest single write.
pub const WRITE_MAX: u64 = 4 << 20;
/// Stamp granularity: every 64 KiB of a file starts with a stamp.
pub const STAMP_UNIT: u64 = 64 << 10;
/// Limits on the geometry (a limit on every loop).
pub const TIMESTEPS_MAX: u64 = 4096;
pub const SLICE_MAX: u64 = 1 << 34;

const MAGIC: u64 = 0x5650_4943_4244_4341; // "VPICBDCA"

#[derive(clap::Args, Debug, Clone)]
pub struct VpicWorkerArgs {
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long)]
    pub rank: usize,
    #[arg(long)]
    pub procs: usize,
    #[arg(long)]
    pub timesteps: u64,
    /// Bytes per process per variable per timestep.
    #[arg(long)]
    pub slice: u64,
    /// BD-CATS read size.
    #[arg(long)]
    pub read_size: u64,
}

/// The geometry shared by the coordinator and the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    pub procs: u64,
    pub timesteps: u64,
    pub slice: u64,
    pub read_size: u64,
}

impl Geometry {
    pub fn check(&self) -> Result<()> {
        if self.procs == 0 || self.procs > 1024 {
            bail!("processes must be 1..=1024");
        }
        if self.timesteps == 0 || self.timesteps > TIMESTEPS_MAX {
            bail!("timesteps must be 1..={TIMESTEPS_MAX}");
        }
        if self.slice == 0 || !self.slice.is_multiple_of(STAMP_UNIT) || self.slice > SLICE_MAX {
            bail!(
                "the per-process slice ({} B) must be a positive multiple of 64 KiB",
                self.slice
            );
        }
        if self.read_size == 0
            || !self.read_size.is_multiple_of(STAMP_UNIT)
            || self.read_size > WRITE_MAX * 4
        {
            bail!("the read size must be a multiple of 64 KiB, at most 16 MiB");
        }
        if !(self.procs * self.slice).is_multiple_of(self.read_size) {
            bail!(
                "a variable ({} B) must be a multiple of the read size ({} B)",
                self.procs * self.slice,
                self.read_size
            );
        }
        Ok(())
    }
    /// Bytes of one timestep file.
    pub fn file_bytes(&self) -> u64 {
        VARS * self.procs * self.slice
    }
    /// Bytes of the whole run (every file).
    pub fn total_bytes(&self) -> u64 {
        self.file_bytes() * self.timesteps
    }
    /// Read blocks per variable.
    pub fn blocks_per_var(&self) -> u64 {
        self.procs * self.slice / self.read_size
    }
    /// Blocks of one variable read by `rank`: `rank, rank + procs, …`.
    pub fn reader_blocks(&self, rank: u64) -> impl Iterator<Item = u64> {
        (rank..self.blocks_per_var()).step_by(self.procs as usize)
    }
}

pub fn file_of(dir: &Path, t: u64) -> PathBuf {
    dir.join(format!("vpic.T{t}"))
}

fn stamp_words(t: u64, off: u64) -> [u64; 2] {
    [MAGIC ^ t.rotate_left(40), off ^ 0x9e37_79b9_7f4a_7c15]
}

/// Writes the stamps of file offsets `off..off + buf.len()` into `buf` (`off` a multiple of STAMP_UNIT).
pub fn stamp(buf: &mut [u8], t: u64, off: u64) {
    debug_assert_eq!(off % STAMP_UNIT, 0);
    let mut at = 0usize;
    while at + 16 <= buf.len() {
        let w = stamp_words(t, off + at as u64);
        buf[at..at + 8].copy_from_slice(&w[0].to_le_bytes());
        buf[at + 8..at + 16].copy_from_slice(&w[1].to_le_bytes());
        at += STAMP_UNIT as usize;
    }
}

/// Checks every stamp of `buf` read at file offset `off` of timestep `t`.
pub fn check(buf: &[u8], t: u64, off: u64) -> Result<()> {
    let mut at = 0usize;
    while at + 16 <= buf.len() {
        let w = stamp_words(t, off + at as u64);
        let a = u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
        let b = u64::from_le_bytes(buf[at + 8..at + 16].try_into().expect("8 bytes"));
        if a != w[0] || b != w[1] {
            bail!(
                "data mismatch in timestep {t} at offset {}: read {a:#018x} {b:#018x}",
                off + at as u64
            );
        }
        at += STAMP_UNIT as usize;
    }
    Ok(())
}

/// `strata bench vpic-worker`: one process of the tiering experiment.
pub fn run_worker(a: VpicWorkerArgs) -> Result<()> {
    let g = Geometry {
        procs: a.procs as u64,
        timesteps: a.timesteps,
        slice: a.slice,
        read_size: a.read_size,
    };
    let rank = a.rank as u64;
    let setup = || -> Result<(Vec<u8>, Vec<u8>)> {
        g.check()?;
        if rank >= g.procs {
            bail!("rank {rank} ≥ procs {}", g.procs);
        }
        // Particle values: random bytes (incompressible), stamps written over them.
        let mut w = vec![0u8; a.slice.min(WRITE_MAX) as usize];
        Rng::new(0x7193_0000 + rank).fill(&mut w);
        Ok((w, vec![0u8; a.read_size as usize]))
    };
    let (mut wbuf, mut rbuf) = setup().map_err(team::setup_failed)?;
    team::serve(|phase| {
        let mut hist = crate::hist::Hist::new();
        let start_ns = mono_ns();
        let (mut ops, mut bytes) = (0u64, 0u64);
        match phase {
            "write" => {
                for t in 0..g.timesteps {
                    let p = cpath(&file_of(&a.dir, t))?;
                    // SAFETY: NUL-terminated path; every rank opens the shared file without O_TRUNC.
                    let fd = unsafe {
                        libc::open(
                            p.as_ptr(),
                            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                            0o644,
                        )
                    };
                    if fd < 0 {
                        bail!("open {p:?} for writing: {}", errno());
                    }
                    let res = (|| -> Result<()> {
                        for v in 0..VARS {
                            let base = (v * g.procs + rank) * g.slice;
                            let mut done = 0u64;
                            // Bounded: slice / WRITE_MAX rounds.
                            while done < g.slice {
                                let n = (g.slice - done).min(WRITE_MAX);
                                let buf = &mut wbuf[..n as usize];
                                stamp(buf, t, base + done);
                                let t0 = mono_ns();
                                team::write_all_at(fd, buf, Some(base + done)).with_context(
                                    || format!("pwrite at {} of timestep {t}", base + done),
                                )?;
                                hist.record_ns(mono_ns() - t0);
                                done += n;
                                ops += 1;
                                bytes += n;
                            }
                        }
                        Ok(())
                    })();
                    // SAFETY: fd is open and ours.
                    let rc = unsafe { libc::close(fd) };
                    res?;
                    if rc != 0 {
                        bail!("close of timestep {t}: {}", errno());
                    }
                }
            }
            "read" => {
                let var_bytes = g.procs * g.slice;
                for t in 0..g.timesteps {
                    let p = cpath(&file_of(&a.dir, t))?;
                    // SAFETY: NUL-terminated path.
                    let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                    if fd < 0 {
                        bail!("open {p:?} for reading: {}", errno());
                    }
                    let res = (|| -> Result<()> {
                        for v in 0..VARS {
                            for b in g.reader_blocks(rank) {
                                let off = v * var_bytes + b * g.read_size;
                                let t0 = mono_ns();
                                let got = team::read_full_at(fd, &mut rbuf, Some(off))
                                    .with_context(|| format!("pread at {off} of timestep {t}"))?;
                                hist.record_ns(mono_ns() - t0);
                                if got != rbuf.len() {
                                    bail!(
                                        "short read at {off} of timestep {t}: {got} of {} bytes",
                                        rbuf.len()
                                    );
                                }
                                check(&rbuf, t, off)?;
                                ops += 1;
                                bytes += got as u64;
                            }
                        }
                        Ok(())
                    })();
                    // SAFETY: fd is open and ours.
                    unsafe { libc::close(fd) };
                    res?;
                }
            }
            "cleanup" => {
                for t in (rank..g.timesteps).step_by(g.procs as usize) {
                    let p = cpath(&file_of(&a.dir, t))?;
                    // SAFETY: NUL-terminated path.
                    if unsafe { libc::unlink(p.as_ptr()) } != 0 {
                        bail!("unlink {p:?}: {}", errno());
                    }
                    ops += 1;
                }
            }
            other => bail!("unknown phase {other:?}"),
        }
        Ok(WorkerReport {
            start_ns,
            end_ns: mono_ns(),
            ops,
            bytes,
            hist: hist.encode(),
        })
    })
}

/// Writes back and drops the page cache of the timestep files in `dir` (so a
/// read measures the file system, not pages cached by the writes; the
/// slow-pfs is a FUSE mount).
pub fn drop_cache(dir: &Path, g: &Geometry) {
    for t in 0..g.timesteps {
        crate::tiers_org::drop_file_cache(&file_of(dir, t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_and_geometry() {
        let g = Geometry {
            procs: 4,
            timesteps: 2,
            slice: 1 << 20,
            read_size: 256 << 10,
        };
        g.check().unwrap();
        assert_eq!(g.file_bytes(), 32 << 20);
        assert_eq!(g.total_bytes(), 64 << 20);
        // Every block of a variable is read by exactly one rank.
        let mut seen = vec![0u32; g.blocks_per_var() as usize];
        for r in 0..4 {
            for b in g.reader_blocks(r) {
                seen[b as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
        let mut buf = vec![0u8; 256 << 10];
        stamp(&mut buf, 1, 3 << 20);
        check(&buf, 1, 3 << 20).unwrap();
        assert!(check(&buf, 0, 3 << 20).is_err());
        assert!(check(&buf, 1, 2 << 20).is_err());
        // A stamp in the middle of a block is checked too.
        buf[(128 << 10) + 3] ^= 1;
        assert!(check(&buf, 1, 3 << 20).is_err());
        assert!(Geometry {
            read_size: 3 << 20,
            ..g
        }
        .check()
        .is_err());
        assert!(Geometry { slice: 1000, ..g }.check().is_err());
    }
}
