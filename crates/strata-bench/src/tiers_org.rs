//! Experiment `organizer` of `strata bench tiers`: a read workload whose
//! working set is larger than the RAM tier, with the buffer organizer and the
//! prefetcher switched on and off through the private daemon's configuration.
//!
//! Load: `--org-data` bytes of `--org-size` blobs are put into a RAM + dir tier
//! daemon (the RAM tier holds a quarter by default; MinimizeIoTime fills RAM
//! first, the rest lands on the disk tier). The *hot set* is `--org-hot` bytes of
//! blobs that landed on the disk tier, read in one fixed shuffled order every
//! pass (a training epoch, a clustering sweep); after every 4 hot reads one
//! random cold blob is read (noise). `--org-think-us` of "compute" separate
//! reads (the time an organizer or prefetcher has to act). Before every pass
//! the dir tier's data file is written back and dropped from the page cache
//! (fdatasync + `POSIX_FADV_DONTNEED`), so a read from the disk tier reads the
//! disk, not pages the kernel cached.
//!
//! Per setup: read throughput over the I/O time of passes 2..N (the first pass
//! is the learning pass, reported apart), and the RAM hit rate — the share of
//! bytes whose blob was wholly in RAM (a `stat` just before each `get`, not
//! timed).
//!
//! | setup | configuration |
//! |---|---|
//! | `off` | organizer and prefetcher disabled |
//! | `organizer` | organizer only |
//! | `prefetch` | trace + prefetcher only |
//! | `both` | organizer + trace + prefetcher |

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::ProgressBar;

use crate::kv::format_size;
use crate::team::{DaemonSpec, PrivateDaemon, MIB};
use crate::tiers::{Sample, TiersArgs};
use crate::zipf::Rng;

pub const ORG_SETUPS: [&str; 4] = ["off", "organizer", "prefetch", "both"];
/// Passes over the hot set (a limit on the loop).
pub const PASSES_MAX: usize = 1000;

/// What this build's configuration knows (components may land after the bench).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Known {
    /// `prefetch:` and `trace:`.
    pub prefetch: bool,
    /// `organizer.recency_window` / `frequency_window`.
    pub windows: bool,
}

impl Known {
    pub fn probe() -> Known {
        Known {
            prefetch: config_knows("trace:\n  enabled: false\nprefetch:\n  enabled: false\n"),
            windows: config_knows("organizer:\n  recency_window: 1s\n  frequency_window: 5s\n"),
        }
    }
}

/// The configuration fragment of a setup.
pub fn setup_yaml(setup: &str, known: Known) -> String {
    let org = matches!(setup, "organizer" | "both");
    let pf = matches!(setup, "prefetch" | "both");
    let mut y = format!("organizer:\n  enabled: {org}\n");
    if org {
        y.push_str("  interval: 100ms\n");
    }
    if org && known.windows {
        // Windows scaled to the benchmark's time scale: the load happened seconds, not
        // minutes, before the reads (defaults: 1 min recency, 5 min frequency).
        y.push_str("  recency_window: 1s\n  frequency_window: 5s\n");
    }
    if known.prefetch {
        y.push_str(&format!(
            "trace:\n  enabled: {pf}\nprefetch:\n  enabled: {pf}\n"
        ));
    }
    y
}

/// Does this build's configuration know `fragment` (keys of components that may not exist yet)?
pub fn config_knows(fragment: &str) -> bool {
    let yaml = format!("devices:\n  - name: ram\n    kind: ram\n    capacity: 256MiB\n{fragment}");
    strata_config::Config::from_yaml_str(&yaml, "bench tiers").is_ok()
}

fn se(e: strata_client::Error) -> anyhow::Error {
    anyhow!("{e}")
}

/// Writes back and drops the page cache of a dir tier's data file.
pub fn drop_file_cache(path: &Path) {
    if let Ok(f) = std::fs::File::open(path) {
        use std::os::fd::AsRawFd;
        let _ = f.sync_data();
        // SAFETY: valid descriptor; advice only.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// Data files of the dir tiers of the daemon.
pub fn dir_tier_files(d: &PrivateDaemon) -> Result<Vec<std::path::PathBuf>> {
    Ok(d.status()?
        .tiers
        .iter()
        .filter(|t| t.kind == "dir" && !t.path.is_empty())
        .map(|t| std::path::PathBuf::from(&t.path))
        .collect())
}

fn stamp(buf: &mut [u8], i: u64) {
    buf[..8].copy_from_slice(&(i ^ 0x0c9a_11ed).to_le_bytes());
}

/// One setup, one repeat.
#[allow(clippy::too_many_arguments)]
pub fn org_run(
    setup: &str,
    rep: usize,
    a: &TiersArgs,
    tier_base: &Path,
    known: Known,
    timeout: Duration,
    pb: &ProgressBar,
    counters: &mut Vec<serde_json::Value>,
) -> Result<Vec<Sample>> {
    let pid = std::process::id();
    let tier_dir = tier_base.join(format!("strata-bench-tiers-{pid}-org-{setup}-r{rep}"));
    let ram = a.org_ram.unwrap_or((a.org_data / 4).max(64 << 20));
    let spec = DaemonSpec {
        ram_bytes: ram,
        disk: Some((tier_dir.clone(), 2 * a.org_data + (256 << 20))),
        extra_yaml: setup_yaml(setup, known),
    };
    let tag = format!("r{rep} organizer/{setup}");
    pb.set_message(format!("{tag}: starting a private daemon"));
    let mut d = PrivateDaemon::start(&spec)?;
    let size = a.org_size as usize;
    let n = a.org_data / a.org_size;
    let res = (|| -> Result<Vec<Sample>> {
        let client = strata_client::Client::connect_to(&d.socket).map_err(se)?;
        let bucket = client.bucket("strata-bench-tiers-org").map_err(se)?;
        let deadline = Instant::now() + timeout;
        pb.set_message(format!("{tag}: load {}", format_size(n * a.org_size)));
        let mut data = vec![0u8; size];
        Rng::new(0x0c9a).fill(&mut data);
        for i in 0..n {
            stamp(&mut data, i);
            bucket.put(&format!("b{i}"), &data).map_err(se)?;
        }
        // The hot set: blobs the load left off RAM, in a fixed shuffled order.
        let mut on_disk = Vec::new();
        for i in 0..n {
            if bucket.stat(&format!("b{i}")).map_err(se)?.tier_mask != 1 {
                on_disk.push(i);
            }
        }
        let hot_n = ((a.org_hot / a.org_size) as usize).min(on_disk.len());
        if hot_n == 0 {
            bail!("no blob landed on the disk tier: raise --org-data or lower --org-ram");
        }
        let mut rng = Rng::new(0x5eed + rep as u64);
        let mut hot: Vec<u64> = on_disk[on_disk.len() - hot_n..].to_vec();
        for i in (1..hot.len()).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            hot.swap(i, j);
        }
        let cold: Vec<u64> = (0..n).filter(|i| !hot.contains(i)).collect();
        let tier_files = dir_tier_files(&d)?;
        let mut buf = vec![0u8; size];
        // Per pass: (io seconds, bytes, bytes read from RAM).
        let mut passes: Vec<(f64, u64, u64)> = Vec::new();
        let think = Duration::from_micros(a.org_think_us);
        for p in 0..a.org_passes.min(PASSES_MAX) {
            pb.set_message(format!("{tag}: pass {}/{}", p + 1, a.org_passes));
            for f in &tier_files {
                drop_file_cache(f);
            }
            let (mut io, mut bytes, mut ram_bytes) = (0f64, 0u64, 0u64);
            let mut cold_rng = Rng::new(0xc01d + p as u64);
            for (k, &h) in hot.iter().enumerate() {
                let mut ids = vec![h];
                if k % 4 == 3 && !cold.is_empty() {
                    ids.push(cold[(cold_rng.next_u64() % cold.len() as u64) as usize]);
                }
                for i in ids {
                    let name = format!("b{i}");
                    let in_ram = bucket.stat(&name).map_err(se)?.tier_mask == 1;
                    let t0 = Instant::now();
                    let got = bucket.get_at(&name, 0, &mut buf).map_err(se)?;
                    io += t0.elapsed().as_secs_f64();
                    if got != size || buf[..8] != (i ^ 0x0c9a_11ed).to_le_bytes() {
                        bail!("blob {name} came back different");
                    }
                    bytes += got as u64;
                    if in_ram {
                        ram_bytes += got as u64;
                    }
                    if !think.is_zero() {
                        std::thread::sleep(think);
                    }
                }
                if Instant::now() > deadline {
                    bail!("the read passes exceeded their time limit");
                }
            }
            passes.push((io, bytes, ram_bytes));
        }
        let st = d.status()?;
        let stv = serde_json::to_value(&st).unwrap_or_default();
        counters.push(serde_json::json!({"exp": "organizer", "setup": setup, "rep": rep, "tiers": st.tiers, "organizer": stv["organizer"], "prefetch": stv["prefetch"], "passes": passes}));
        let mut out = Vec::new();
        let mut push = |metric: &str, value: f64| {
            out.push(Sample {
                exp: "organizer".into(),
                setup: setup.into(),
                metric: metric.into(),
                rep,
                value,
            })
        };
        let (io1, b1, r1) = passes[0];
        push("read pass 1", b1 as f64 / MIB / io1.max(1e-9));
        push("RAM hit pass 1", 100.0 * r1 as f64 / b1.max(1) as f64);
        let later = &passes[1.min(passes.len() - 1)..];
        let (io, b, r) = later.iter().fold((0.0, 0u64, 0u64), |acc, x| {
            (acc.0 + x.0, acc.1 + x.1, acc.2 + x.2)
        });
        push("read", b as f64 / MIB / io.max(1e-9));
        push("RAM hit", 100.0 * r as f64 / b.max(1) as f64);
        let (io_last, b_last, r_last) = passes[passes.len() - 1];
        push("read last pass", b_last as f64 / MIB / io_last.max(1e-9));
        push(
            "RAM hit last pass",
            100.0 * r_last as f64 / b_last.max(1) as f64,
        );
        Ok(out)
    })();
    crate::tiers::finish(pb, &tag, &mut d, Some(&tier_dir), res)
}

// ---------------------------------------------------------------- readahead (files)

pub const RA_SETUPS: [&str; 2] = ["off", "readahead"];

/// The configuration fragment of a read-ahead setup.
pub fn ra_yaml(setup: &str, pages: u32) -> String {
    match setup {
        "readahead" => {
            format!("prefetch:\n  enabled: true\n  readahead_pages: {pages}\n  predict: false\n")
        }
        _ => "prefetch:\n  enabled: false\n".into(),
    }
}

fn ra_file(dir: &Path, i: usize) -> std::path::PathBuf {
    dir.join(format!("ra.{i}"))
}

const RA_CHUNK: usize = 4 << 20;

/// Writes the read-ahead experiment's files directly at the destination (untimed, synced).
pub fn ra_prepare(dir: &Path, files: usize, file_bytes: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    std::fs::create_dir_all(dir)?;
    let mut buf = vec![0u8; RA_CHUNK];
    Rng::new(0x4ead).fill(&mut buf);
    for i in 0..files {
        let p = ra_file(dir, i);
        let f = std::fs::File::create(&p).with_context(|| format!("create {}", p.display()))?;
        let mut at = 0u64;
        // Bounded: file_bytes / RA_CHUNK rounds.
        while at < file_bytes {
            let n = (file_bytes - at).min(RA_CHUNK as u64) as usize;
            for (k, c) in buf[..n].chunks_mut(1 << 20).enumerate() {
                c[..8].copy_from_slice(
                    &(i as u64 ^ (at + (k as u64) * (1 << 20)) ^ 0x4ead).to_le_bytes(),
                );
            }
            f.write_all_at(&buf[..n], at)?;
            at += n as u64;
        }
        f.sync_all()?;
    }
    Ok(())
}

/// One read-ahead setup: `files` readers (threads, client file API = the adapter's path)
/// each read one destination file sequentially in 1 MiB reads with `think` between reads.
#[allow(clippy::too_many_arguments)]
pub fn ra_run(
    exp: &str,
    setup: &str,
    rep: usize,
    a: &TiersArgs,
    think_us: u64,
    dir: &Path,
    timeout: Duration,
    pb: &ProgressBar,
    counters: &mut Vec<serde_json::Value>,
) -> Result<Vec<Sample>> {
    use strata_client::file::{OpenFlags, Persist};
    let files = a.ra_files;
    let file_bytes = a.ra_data / files as u64 / (1 << 20) * (1 << 20);
    for i in 0..files {
        drop_file_cache(&ra_file(dir, i));
    }
    let ram = a.ra_ram.unwrap_or((a.ra_data / 4).max(64 << 20));
    let spec = DaemonSpec {
        ram_bytes: ram,
        disk: None,
        extra_yaml: ra_yaml(setup, a.ra_pages),
    };
    let tag = format!("r{rep} {exp}/{setup}");
    pb.set_message(format!("{tag}: starting a private daemon"));
    let mut d = PrivateDaemon::start(&spec)?;
    let think = Duration::from_micros(think_us);
    let res = (|| -> Result<Vec<Sample>> {
        let client = strata_client::Client::connect_to(&d.socket).map_err(se)?;
        let before = d.status()?;
        let deadline = Instant::now() + timeout;
        pb.set_message(format!(
            "{tag}: {files} readers × {}",
            format_size(file_bytes)
        ));
        let t0 = Instant::now();
        let io = std::thread::scope(|s| -> Result<Vec<f64>> {
            let hs: Vec<_> = (0..files)
                .map(|i| {
                    let client = &client;
                    s.spawn(move || -> Result<f64> {
                        let p = ra_file(dir, i);
                        let fl = OpenFlags {
                            read: true,
                            write: false,
                            create: false,
                            excl: false,
                            trunc: false,
                        };
                        let at = client
                            .file_open(
                                p.to_str().context("path")?,
                                fl,
                                0,
                                Persist::Default,
                                1 << 20,
                            )
                            .map_err(se)?;
                        let mut buf = vec![0u8; 1 << 20];
                        let mut io = 0f64;
                        let mut off = 0u64;
                        // Bounded: file_bytes / 1 MiB reads.
                        while off < file_bytes {
                            let t = Instant::now();
                            let n = client.file_read(at.id, off, &mut buf).map_err(se)?;
                            io += t.elapsed().as_secs_f64();
                            if n != buf.len() || buf[..8] != (i as u64 ^ off ^ 0x4ead).to_le_bytes()
                            {
                                bail!("{} at {off}: wrong bytes ({n} read)", p.display());
                            }
                            off += n as u64;
                            if !think.is_zero() {
                                std::thread::sleep(think);
                            }
                            if Instant::now() > deadline {
                                bail!("readers exceeded their time limit");
                            }
                        }
                        client.file_close(at.id).map_err(se)?;
                        Ok(io)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().map_err(|_| anyhow!("reader panicked"))?)
                .collect()
        })?;
        let wall = t0.elapsed().as_secs_f64();
        let st = d.status()?;
        let hit = st
            .files
            .read_hit_bytes_total
            .saturating_sub(before.files.read_hit_bytes_total) as f64;
        let dest = st
            .files
            .read_dest_bytes_total
            .saturating_sub(before.files.read_dest_bytes_total) as f64;
        let pf = serde_json::to_value(&st)
            .ok()
            .map(|v| v["prefetch"].clone())
            .unwrap_or_default();
        counters.push(serde_json::json!({"exp": exp, "setup": setup, "rep": rep, "files": st.files, "prefetch": pf, "io_s": io, "wall_s": wall}));
        let bytes = (file_bytes * files as u64) as f64;
        let io_mean = io.iter().sum::<f64>() / io.len() as f64;
        let mut out = Vec::new();
        let mut push = |metric: &str, value: f64| {
            out.push(Sample {
                exp: exp.into(),
                setup: setup.into(),
                metric: metric.into(),
                rep,
                value,
            })
        };
        push("read", bytes / MIB / io_mean.max(1e-9));
        push("run time", wall);
        push(
            "read from buffer",
            if hit + dest > 0.0 {
                100.0 * hit / (hit + dest)
            } else {
                0.0
            },
        );
        let mib = |k: &str| pf[k].as_u64().unwrap_or(0) as f64 / MIB;
        push("read ahead", mib("readahead_bytes_total"));
        push("read ahead unused", mib("unused_bytes_total"));
        Ok(out)
    })();
    crate::tiers::finish(pb, &tag, &mut d, None, res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_configs_parse() {
        // The organizer keys exist in every build; the prefetch keys only once the prefetcher landed.
        let known = Known::probe();
        for s in ORG_SETUPS {
            assert!(config_knows(&setup_yaml(s, Known::default())), "{s}");
            assert!(config_knows(&setup_yaml(s, known)), "{s}");
        }
        let pk = known.prefetch;
        let all = Known {
            prefetch: true,
            windows: true,
        };
        assert!(setup_yaml("off", all).contains("organizer:\n  enabled: false"));
        assert!(setup_yaml("both", all).contains("prefetch:\n  enabled: true"));
        assert!(setup_yaml("organizer", all).contains("recency_window: 1s"));
        assert!(!setup_yaml("off", all).contains("recency_window"));
        if pk {
            for s in RA_SETUPS {
                assert!(config_knows(&ra_yaml(s, 8)), "{s}");
            }
        }
    }
}
