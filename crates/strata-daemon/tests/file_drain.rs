//! End to end through a real in-process daemon and the client file API:
//! DEFAULT data written with background flushing off reaches the
//! destination when the daemon stops (drain), SCRATCH data never does, and
//! FileSync waits for the destination.

use std::path::Path;
use std::sync::mpsc;

use strata_client::file::{OpenFlags, Persist};
use strata_client::Client;
use strata_proto::control::{ControlReply, ControlRequest};

fn config(dir: &Path, n: u32) -> strata_config::Config {
    let yaml = format!(
        "daemon:\n  socket: {}\n  shm_prefix: strata-dd{}-{n}\n  log: warn\nplacement:\n  lease_size: 1MiB\ndevices:\n  - name: ram\n    kind: ram\n    capacity: 32MiB\nflush:\n  enabled: false\n  threads: 2\n",
        dir.join("d.sock").display(),
        std::process::id()
    );
    strata_config::Config::from_yaml_str(&yaml, "test").unwrap()
}

fn rw() -> OpenFlags {
    OpenFlags {
        read: true,
        write: true,
        create: true,
        ..OpenFlags::default()
    }
}

#[test]
fn stop_drains_default_files_and_sync_waits() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let cfg = config(dir.path(), 1);
    let socket = cfg.resolved_socket_path();
    let (ready_tx, ready_rx) = mpsc::channel();
    let daemon =
        std::thread::spawn(move || strata_daemon::run(cfg, move |_| ready_tx.send(()).unwrap()));
    ready_rx.recv().unwrap();

    let c = Client::connect_to(&socket).unwrap();
    let a = out.join("a.bin");
    let s = out.join("scratch.bin");
    let y = out.join("synced.bin");
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    let fa = c
        .file_open(a.to_str().unwrap(), rw(), 0o644, Persist::Default, 1 << 20)
        .unwrap();
    c.file_write(fa.id, 0, &data).unwrap();
    c.file_write(fa.id, 5_000_000, b"end").unwrap();
    let fs = c
        .file_open(s.to_str().unwrap(), rw(), 0o644, Persist::Scratch, 1 << 20)
        .unwrap();
    c.file_write(fs.id, 0, b"never at the destination").unwrap();
    // Sync: returns once the bytes are at the destination.
    let fy = c
        .file_open(y.to_str().unwrap(), rw(), 0o600, Persist::Default, 64 << 10)
        .unwrap();
    c.file_write(fy.id, 0, b"synced bytes").unwrap();
    c.file_sync(fy.id).unwrap();
    assert_eq!(std::fs::read(&y).unwrap(), b"synced bytes");
    // Nothing else is flushed while background flushing is off.
    assert!(!a.exists());
    let mut buf = vec![0u8; 100];
    assert_eq!(c.file_read(fa.id, 4_999_950, &mut buf).unwrap(), 53);
    assert!(buf[..50].iter().all(|b| *b == 0));
    assert_eq!(&buf[50..53], b"end");
    match strata_client::control_request(&socket, &ControlRequest::FlushState { paths: vec![] })
        .unwrap()
    {
        ControlReply::Flush(r) => {
            assert_eq!(r.dirty_files, 1, "{r:?}");
            assert!(r.dirty_bytes >= data.len() as u64);
        }
        other => panic!("{other:?}"),
    }
    match strata_client::control_request(&socket, &ControlRequest::Status).unwrap() {
        ControlReply::Status(st) => {
            assert_eq!(st.files.files, 3);
            assert_eq!(st.files.dirty_files, 1);
            assert!(st.files.write_bytes_total >= data.len() as u64);
        }
        other => panic!("{other:?}"),
    }
    drop(c);
    assert!(matches!(
        strata_client::control_request(&socket, &ControlRequest::Stop).unwrap(),
        ControlReply::Ok
    ));
    daemon.join().unwrap().unwrap();
    let got = std::fs::read(&a).unwrap();
    assert_eq!(got.len(), 5_000_003);
    assert_eq!(&got[..data.len()], &data[..]);
    assert!(got[data.len()..5_000_000].iter().all(|b| *b == 0));
    assert_eq!(&got[5_000_000..], b"end");
    assert!(!s.exists(), "SCRATCH is never written to the destination");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&y).unwrap().permissions().mode() & 0o777,
        0o600
    );
}
