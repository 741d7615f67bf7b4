#!/usr/bin/env bash
# The whole test suite, installing what it needs (README "Quick start").
# Usage: scripts/test.sh            (from anywhere inside the repository)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> %s\n' "$*"; }

need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
command -v redis-server >/dev/null || need_apt+=(redis-server)
# Programs the adapter tests run under `strata run` (crates/strata-cli/tests/adapter_programs.rs).
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
command -v sqlite3 >/dev/null || need_apt+=(sqlite3)
command -v h5dump >/dev/null || need_apt+=(hdf5-tools)
{ [ -f /usr/include/hdf5/serial/hdf5.h ] || [ -f /usr/include/hdf5.h ]; } || need_apt+=(libhdf5-dev)
command -v fio >/dev/null || need_apt+=(fio)
command -v python3 >/dev/null || need_apt+=(python3)
command -v tar >/dev/null || need_apt+=(tar)
command -v git >/dev/null || need_apt+=(git)
command -v rsync >/dev/null || need_apt+=(rsync)
command -v make >/dev/null || need_apt+=(make)
# python -m venv and numpy.memmap cases (apt for Debian's python3; pip below for another one)
python3 -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv)
python3 -c 'import numpy' 2>/dev/null || need_apt+=(python3-numpy)
# MPI for crates/strata-cli/tests/adapter_mpi.rs (mpirun, and mpicc for tests/adapter/mpi_ranks.c).
command -v mpirun >/dev/null || need_apt+=(openmpi-bin)
command -v mpicc >/dev/null || need_apt+=(libopenmpi-dev)
# MPICH too for the MPI-IO adapter (crates/strata-cli/tests/adapter_mpiio.rs; built for both by crates/strata-mpiio)
command -v mpicc.openmpi >/dev/null || need_apt+=(libopenmpi-dev)
command -v mpirun.mpich >/dev/null || need_apt+=(mpich)
command -v mpicc.mpich >/dev/null || need_apt+=(libmpich-dev)
# parallel HDF5 through the MPI-IO adapter (tests/adapter/ph5.c)
command -v h5pcc.openmpi >/dev/null || need_apt+=(libhdf5-openmpi-dev)
# Network namespaces for the many-node tests (crates/strata-cli/tests/cluster_util).
command -v ip >/dev/null || need_apt+=(iproute2)
# The raw TCP peer of `strata bench cluster` (it falls back to its own TCP stream without it).
command -v iperf3 >/dev/null || need_apt+=(iperf3)
# Slurm across the namespace nodes (srun under the cluster tests: Bed::slurm runs its own munged, slurmctld, slurmds)
command -v srun >/dev/null || need_apt+=(slurm-client)
command -v slurmd >/dev/null || need_apt+=(slurmd)
command -v slurmctld >/dev/null || need_apt+=(slurmctld)
command -v munged >/dev/null || need_apt+=(munge)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    log "installing ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "missing: ${need_apt[*]} (install them with apt-get as root)" >&2
  fi
fi
# a python3 that is not Debian's does not see python3-numpy: PyPI then (the case is skipped without it)
python3 -c 'import numpy' 2>/dev/null || python3 -m pip install -q numpy >/dev/null 2>&1 || true
if ! command -v cargo >/dev/null; then
  [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }

# Tests start real daemons; keep their shared memory and sockets private.
export STRATA_LOG=${STRATA_LOG:-warn}
# Daemons overwrite freed dir-tier space with garbage: a path reading freed
# bytes (directory tiers keep freed blocks instead of punching them) shows.
export STRATA_INTERNAL_POISON_FREED=1

log "build (debug, whole workspace incl. libstrata.so and libstrata_posix.so)"
cargo build --workspace --all-targets
cargo build -p strata-posix

log "lints: every unsafe block states its SAFETY reason (workspace [lints], denied)"
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --workspace --all-targets --quiet
else
  echo "cargo clippy is not installed here (rustup component add clippy): lints not checked" >&2
fi

log "a python with h5py (its wheel's own HDF5 >= 1.14) for the HDF5 plugin test (tests/h5_driver.rs)"
if ! target/h5py-venv/bin/python -c 'import h5py' 2>/dev/null; then
  python3 -m venv target/h5py-venv && target/h5py-venv/bin/pip install -q h5py
fi
export TEST_H5PY_PYTHON="$PWD/target/h5py-venv/bin/python"

log "unit, property and integration tests"
cargo test --workspace -- --test-threads=2

log "the Python package (pip install ./python: PyO3 + maturin) and its pytest suite against a private daemon"
if ! target/py-venv/bin/python -c 'import maturin, pytest, numpy, fsspec, pandas, zarr, redis, mypy' 2>/dev/null; then
  python3 -m venv target/py-venv && target/py-venv/bin/pip install -q maturin pytest numpy fsspec pandas zarr redis mypy
fi
target/py-venv/bin/pip install -q ./python
(cd python && ../target/py-venv/bin/python -m mypy strata)  # the type stubs agree with the code
PYTEST_STRATA_BIN="$PWD/target/debug/strata" target/py-venv/bin/python -m pytest -q python/tests
log "bench python, bounded: 1 KiB and 1 MiB, one process, one short repeat (figures are not asserted)"
target/debug/strata bench python --python target/py-venv/bin/python --sizes 1KiB,1MiB --procs 1 --seconds 0.2 --repeats 1 --file-mib 16 --ram 512MiB

log "cluster tests again on 127.x addresses (the fallback where namespaces cannot be made)"
CLUSTER_TEST_BED=loopback cargo test -p strata-cli --test cluster -- --test-threads=2

log "differential tester across nodes, bounded: pages where written, DEFAULT and SCRATCH, 3 processes, 5 seeds (longer runs by hand: docs/FILES-ACROSS-NODES.md)"
FSDIFF_CLUSTER_NO_RENAMES=1 FSDIFF_CLUSTER_MODES=default,scratch FSDIFF_CLUSTER_PROCS=3 FSDIFF_CLUSTER_SEEDS=1:5 \
  cargo test -p strata-cli --test cluster -- --ignored the_differential_tester

log "bench cluster, bounded: 2 nodes, one short repeat (the figures in BENCHMARKS.md come from release builds)"
target/debug/strata bench cluster --nodes 2 --sizes 1MiB --seconds 0.3 --repeats 1 --ram 256MiB
target/debug/strata bench cluster --nodes 2 --sizes 1MiB --seconds 0.3 --repeats 1 --ram 256MiB --loopback
log "bench checkpoint, bounded: mpirun across 2 nodes, 4 MiB per rank, one repeat"
target/debug/strata bench checkpoint --nodes 2 --block 4MiB --repeats 1 --ram 256MiB

log "heavy integration tests (4 processes x 256 MiB with checksums)"
cargo test -p strata-cli --test multiproc -- --ignored --test-threads=1

log "crash test: SIGKILL of the daemon during fsync'ed checkpoints, restart, every acknowledged byte checked (scripts/kill9.sh 100 by hand)"
KILL9_BIN="$PWD/target/debug/strata" scripts/kill9.sh 6

log "fuzzing, bounded: 45 s per target from the checked-in corpus (crates/strata-fuzz; long runs: docs/FUZZING.md)"
scripts/fuzz.sh 45

log "C example against a real daemon"
tmp=$(mktemp -d)
trap 'target/debug/strata --config "$tmp/strata.yaml" daemon stop >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
cat >"$tmp/strata.yaml" <<YAML
daemon:
  socket: $tmp/daemon.sock
  shm_prefix: strata-ci-$$
devices:
  - name: ram
    kind: ram
    capacity: 256MiB
  - name: disk
    kind: dir
    path: $tmp/disk
    capacity: 1GiB
YAML
target/debug/strata --config "$tmp/strata.yaml" daemon start
make -s -C examples/c LIBDIR="$PWD/target/debug"
examples/c/example "$tmp/daemon.sock"

log "benchmark smoke runs (figures are not asserted)"
cargo build --release -p strata-cli -p strata-bench
target/release/strata --config "$tmp/strata.yaml" bench kv --sizes 4KiB,1MiB --threads 1 --procs 1 --seconds 1
target/release/strata --config "$tmp/strata.yaml" bench ycsb --workloads a,c --records 10000 --ops 20000 --threads 2 --vs-redis --repeat 1

log "file benchmark smoke runs: ior / md directly and through the adapter (figures are not asserted)"
bdir=$(mktemp -d)   # outside $tmp: the adapter never buffers the socket's directory
S="target/debug/strata --config $tmp/strata.yaml"
$S bench ior --dir "$bdir/ior" --procs 2 --block-size 4MiB --transfer-size 1MiB --verify full
$S bench ior --dir "$bdir/ior" --procs 2 --block-size 1MiB --transfer-size 64KiB --fsync
$S bench md  --dir "$bdir/md"  --procs 2 --files 50 --write-bytes 4KiB
$S bench ior --dir "$bdir/via" --via-strata scratch  --procs 2 --block-size 4MiB --verify full
$S bench ior --dir "$bdir/via" --via-strata default  --procs 2 --block-size 2MiB --transfer-size 256KiB --fsync
$S bench ior --dir "$bdir/via" --via-strata workflow --procs 2 --block-size 2MiB
$S bench md  --dir "$bdir/via-md" --via-strata default --procs 2 --files 50 --write-bytes 4KiB
$S bench md  --dir "$bdir/via-md-shared" --via-strata scratch --procs 2 --files 50 --write-bytes 4KiB --shared-dir
$S bench md  --dir "$bdir/md-excl" --procs 2 --files 50 --write-bytes 4KiB --excl
$S bench adapters --repeat 1 --block-size 4MiB --md-files 20 --setups tmpfs,scratch-ram,default-ram,default-ram+disk
$S bench tiers --repeat 1 --data 64MiB --procs 2 --timesteps 2 --put-data 64MiB --org-data 64MiB --org-hot 8MiB --org-passes 2 --org-think-us 0 --ra-data 16MiB --ra-think-us 100 --ra-io-think-us 0 --dest "$bdir/tiers"
rm -rf "$bdir"
target/debug/strata --config "$tmp/strata.yaml" daemon stop

log "all tests passed"
