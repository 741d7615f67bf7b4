# Sourced by the bench wrappers: slow_pfs_args NAME mounts the slow-pfs
# emulation (../shared/tools/slow-pfs up, relative to the repository, if
# present) and sets the array SLOW_PFS_ARGS to (--slow-pfs MOUNT), or to ()
# with a warning naming NAME when it cannot be mounted.
slow_pfs_args() {
  local slow=../shared/tools/slow-pfs mnt
  SLOW_PFS_ARGS=()
  if [ -x "$slow" ]; then
    if mnt=$("$slow" up | tail -n 1) && mountpoint -q "$mnt"; then
      SLOW_PFS_ARGS=(--slow-pfs "$mnt")
    else
      echo "$1: slow-pfs could not be mounted; the slow-pfs runs are skipped" >&2
    fi
  else
    echo "$1: $slow not found; the slow-pfs runs are skipped" >&2
  fi
}
