use super::*;

const FULL: &str = r#"# a complete file
node:
  id: 7
daemon:
  socket: /run/strata/test.sock
  shm_prefix: strata-test
  log: debug
  clients_max: 128
  channels_per_client_max: 8
  ring_depth: 128
  spin: 20us
  slot_arg_size: 16KiB
  metrics: 127.0.0.1:9464
devices:
  - name: ram
    kind: ram
    capacity: 4GiB
    block_size: 64B
    bandwidth: 8GiB/s
    latency: 1us
  - name: disk0
    kind: dir
    path: /var/tmp/strata/disk0
    capacity: 16GiB
    block_size: 4KiB
    bandwidth: 190MB/s
    latency: 1.5ms
    volatile: false
  - name: nvme-1
    kind: dir
    path: "/mnt/nvme #1/tier"
    capacity: 1.5TiB
placement:
  policy: round_robin
  lease_size: 8MiB
  seed: 42
metadata:
  buckets_max: 1024
  blobs_max: 100000
  bucket_name_max: 255
  blob_name_max: 512
  extents_per_blob_max: 16
  tags_per_bucket_max: 0
adapter:
  page_size: 2MiB
  mode: workflow
  include: [/data, /scratch/run]
  exclude:
    - /data/tmp
  prefixes:
    - path: /data/ckpt
      mode: scratch
      page_size: 4MiB
    - path: /data/logs
      mode: bypass
flush:
  enabled: false
  interval: 250ms
  threads: 4
  bandwidth_max: 1GiB/s
organizer:
  enabled: true
  interval: 2s
  bandwidth_max: 0
  promote_threshold: 0.8
  demote_threshold: 0.25
quotas:
  - bucket: checkpoints
    limit: 10GiB
  - prefix: /scratch/job
    limit: 1TiB
"#;

const GOOD_DEVICES: &str = "devices:\n  - name: ram\n    kind: ram\n    capacity: 1GiB\n";

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_yaml_str(text, "strata.yaml")
}

/// Parse, expecting an error; check its key and line.
fn expect_err(text: &str, key: &str, line: Option<usize>) -> ConfigError {
    let e = parse(text).expect_err(&format!("should fail:\n{text}"));
    assert_eq!(e.origin, "strata.yaml", "{e}");
    assert_eq!(e.key, key, "{e}");
    assert_eq!(e.line, line, "{e}");
    e
}

#[test]
fn full_file_reads_as_written() {
    let c = parse(FULL).unwrap();
    assert_eq!(c.node.id, 7);
    assert_eq!(
        c.daemon.socket.as_deref(),
        Some(Path::new("/run/strata/test.sock"))
    );
    assert_eq!(
        c.resolved_socket_path(),
        PathBuf::from("/run/strata/test.sock")
    );
    assert_eq!(c.resolved_shm_prefix(), "strata-test");
    assert_eq!(c.daemon.log, LogLevel::Debug);
    assert_eq!(c.daemon.spin_us, 20.0);
    assert_eq!(c.daemon.slot_arg_size_bytes, 16 << 10);
    assert_eq!(c.devices.len(), 3);
    let ram = &c.devices[0];
    assert_eq!(
        (
            ram.kind,
            ram.capacity_bytes,
            ram.block_size_bytes,
            ram.volatile
        ),
        (DeviceKind::Ram, 4 << 30, 64, true)
    );
    let disk = &c.devices[1];
    assert_eq!(
        disk.path.as_deref(),
        Some(Path::new("/var/tmp/strata/disk0"))
    );
    assert_eq!(disk.bandwidth_mib_s, 190e6 / 1048576.0);
    assert_eq!(disk.latency_us, 1500.0);
    let nvme = &c.devices[2];
    assert_eq!(nvme.capacity_bytes, 3 << 39);
    assert_eq!(nvme.block_size_bytes, 4096); // dir defaults
    assert_eq!(nvme.bandwidth_mib_s, 2048.0);
    assert_eq!(nvme.latency_us, 100.0);
    assert!(!nvme.volatile);
    assert_eq!(c.placement.policy, PlacementPolicy::RoundRobin);
    assert_eq!(c.placement.seed, 42);
    assert_eq!(c.metadata.tags_per_bucket_max, 0);
    assert_eq!(
        c.adapter.include,
        vec![PathBuf::from("/data"), PathBuf::from("/scratch/run")]
    );
    assert_eq!(c.adapter.prefixes[1].page_size_bytes, None);
    assert_eq!(
        c.adapter.settings_for(Path::new("/data/ckpt/x")),
        (Mode::Scratch, 4 << 20)
    );
    assert_eq!(
        c.adapter.settings_for(Path::new("/data/logs/x")),
        (Mode::Bypass, 2 << 20)
    );
    assert_eq!(
        c.adapter.settings_for(Path::new("/data/ckptx")),
        (Mode::Workflow, 2 << 20)
    );
    assert!(!c.flush.enabled);
    assert_eq!(c.flush.interval_ms, 250.0);
    assert_eq!(c.flush.bandwidth_max_mib_s, 1024.0);
    assert_eq!(c.organizer.interval_ms, 2000.0);
    assert_eq!(c.organizer.interval(), std::time::Duration::from_secs(2));
    assert_eq!(c.organizer.bandwidth_max_mib_s, 0.0);
}

#[test]
fn full_file_round_trips() {
    let c = parse(FULL).unwrap();
    let text = c.to_yaml();
    let back =
        Config::from_yaml_str(&text, "expanded.yaml").unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(back, c, "{text}");
    assert_eq!(back.to_yaml(), text);
    assert!(text.contains("capacity: 1.5TiB"), "{text}");
    assert!(text.contains("metrics: 127.0.0.1:9464"), "{text}");
    assert_eq!(c.quotas.len(), 2);
    assert_eq!(c.quotas[1].limit_bytes, 1 << 40);
    assert!(
        text.contains("  - prefix: /scratch/job\n    limit: 1TiB"),
        "{text}"
    );
    assert!(text.contains("bandwidth: 190MB/s"), "{text}");
    assert!(text.contains("path: \"/mnt/nvme #1/tier\""), "{text}");
    assert!(text.contains('#'), "comments expected");
}

#[test]
fn defaults_round_trip_and_serde() {
    let c = Config::machine_default();
    let back = parse(&c.to_yaml()).unwrap();
    assert_eq!(back, c);
    let json = serde_json::to_string(&c).unwrap();
    let from_json: Config = serde_json::from_str(&json).unwrap();
    assert_eq!(from_json, c);
}

#[test]
fn empty_file_is_all_defaults() {
    for text in ["", "# nothing\n", "---\n", "node:\ndaemon: {}\n"] {
        let c = parse(text).unwrap();
        assert_eq!(c.node.id, 0);
        assert_eq!(c.daemon, DaemonConfig::default());
        assert_eq!(c.placement, PlacementConfig::default());
        assert_eq!(c.metadata, MetadataConfig::default());
        assert_eq!(c.adapter, AdapterConfig::default());
        assert_eq!(c.flush, FlushConfig::default());
        assert_eq!(c.organizer, OrganizerConfig::default());
        assert_eq!(c.devices.len(), 2);
        assert_eq!(c.devices[0].kind, DeviceKind::Ram);
        assert_eq!(c.devices[1].kind, DeviceKind::Dir);
    }
}

#[test]
fn machine_default_validates() {
    let c = Config::machine_default();
    assert_eq!(c.validate(), Ok(()));
    let ram = c.ram_device().unwrap();
    assert!(ram.capacity_bytes >= 64 << 20 && ram.capacity_bytes <= 64 << 30);
    assert_eq!(ram.capacity_bytes % (1 << 20), 0);
    assert_eq!(ram.block_size_bytes, 64);
    let disk = c.device("disk0").unwrap();
    assert!(disk.capacity_bytes >= 256 << 20 && disk.capacity_bytes <= 64 << 30);
    assert!(disk.path.as_ref().unwrap().is_absolute());
    assert!(disk.path.as_ref().unwrap().ends_with("tiers/disk0"));
    assert!(c.resolved_shm_prefix().starts_with("strata-"));
    let sock = c.resolved_socket_path();
    assert!(sock.is_absolute() && sock.ends_with("daemon.sock"));
}

#[test]
fn device_defaults_by_kind() {
    let c = parse(
        "devices:\n  - name: ram\n    kind: ram\n  - name: d\n    kind: dir\n    path: /tmp/x\n",
    )
    .unwrap();
    assert!(c.devices[0].capacity_bytes >= 64 << 20);
    assert!(c.devices[1].capacity_bytes >= 256 << 20);
    assert_eq!(c.devices[0].bandwidth_mib_s, 8192.0);
    assert_eq!(c.devices[0].latency_us, 1.0);
    assert_eq!(c.devices[1].block_size_bytes, 4096);
}

#[test]
fn tilde_paths_expand() {
    let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
        return;
    };
    let c =
        parse("devices:\n  - name: d\n    kind: dir\n    path: ~/tiers/d\n    capacity: 1GiB\n")
            .unwrap();
    assert_eq!(c.devices[0].path, Some(PathBuf::from(home).join("tiers/d")));
}

#[test]
fn display_format() {
    let e = expect_err(
        "node:\n  id: 1\ndevices:\n  - name: ram\n    kind: ram\n    capacity: 1GiB\n  - name: d\n    kind: dir\n    path: /x\n    capacity: 4GB2\n",
        "devices[1].capacity",
        Some(10),
    );
    assert_eq!(
        e.to_string(),
        "strata.yaml:10: devices[1].capacity: invalid size \"4GB2\" (expected a number with a unit such as 512MiB or 4GiB)"
    );
    let e = ConfigError {
        origin: ENV_ORIGIN.into(),
        key: "STRATA_X".into(),
        line: None,
        message: "bad".into(),
    };
    assert_eq!(e.to_string(), "environment: STRATA_X: bad");
}

#[test]
fn unknown_keys() {
    let e = expect_err("node:\n  id: 1\n  idd: 2\n", "node.idd", Some(3));
    assert!(e.message.contains("did you mean `id`"), "{e}");
    expect_err("nodes:\n  id: 1\n", "nodes", Some(1));
    expect_err(
        &format!("{GOOD_DEVICES}    colour: red\n"),
        "devices[0].colour",
        Some(5),
    );
    expect_err(
        "adapter:\n  prefixes:\n    - path: /a\n      mood: scratch\n",
        "adapter.prefixes[0].mood",
        Some(4),
    );
    let e = expect_err("flush:\n  zzzzzzzz: 1\n", "flush.zzzzzzzz", Some(2));
    assert!(e.message.contains("expected one of"), "{e}");
    expect_err("node:\n  id: 1\n  id: 2\n", "node.id", Some(3)); // duplicate key
}

#[test]
fn wrong_types() {
    expect_err("node: 5\n", "node", Some(1));
    expect_err("node:\n  id: [1, 2]\n", "node.id", Some(2));
    expect_err("node:\n  id: abc\n", "node.id", Some(2));
    expect_err("node:\n  id: 70000\n", "node.id", Some(2));
    expect_err("node:\n  id: -1\n", "node.id", Some(2));
    expect_err(
        "daemon:\n  clients_max: 1.5\n",
        "daemon.clients_max",
        Some(2),
    );
    expect_err("flush:\n  enabled: maybe\n", "flush.enabled", Some(2));
    expect_err("devices: ram\n", "devices", Some(1));
    expect_err("devices:\n  - ram\n", "devices[0]", Some(2));
    expect_err("adapter:\n  include: /data\n", "adapter.include", Some(2));
    expect_err(
        "placement:\n  policy: fastest\n",
        "placement.policy",
        Some(2),
    );
    expect_err("adapter:\n  mode: turbo\n", "adapter.mode", Some(2));
    expect_err("daemon:\n  log: loud\n", "daemon.log", Some(2));
    expect_err("daemon:\n  metrics: localhost\n", "daemon.metrics", Some(2));
    expect_err("quotas:\n  - bucket: b\n", "quotas[0]", Some(2));
    expect_err(
        "quotas:\n  - bucket: b\n    limit: lots\n",
        "quotas[0].limit",
        Some(3),
    );
    expect_err(
        "quotas:\n  - prefix: /a\n    bucket: b\n    limit: 1GiB\n",
        "quotas[0].prefix",
        Some(2),
    );
    expect_err(
        &format!("{GOOD_DEVICES}  - name: x\n    kind: tape\n"),
        "devices[1].kind",
        Some(6),
    );
    expect_err("- a\n- b\n", "", Some(1));
    expect_err(
        "organizer:\n  promote_threshold: nan\n",
        "organizer.promote_threshold",
        Some(2),
    );
}

#[test]
fn syntax_error_has_line() {
    let e = parse("node:\n  id: 1\ndaemon: [1, 2\n").unwrap_err();
    assert_eq!(e.key, "");
    assert!(e.line.unwrap() >= 3, "{e}");
    assert!(e.message.contains("YAML syntax error"), "{e}");
}

#[test]
fn bad_units() {
    expect_err(
        &format!("{GOOD_DEVICES}    block_size: 64Q\n"),
        "devices[0].block_size",
        Some(5),
    );
    expect_err(
        &format!("{GOOD_DEVICES}    bandwidth: 8GiB\n"),
        "devices[0].bandwidth",
        Some(5),
    );
    expect_err(
        &format!("{GOOD_DEVICES}    latency: 5 parsecs\n"),
        "devices[0].latency",
        Some(5),
    );
    expect_err("daemon:\n  spin: 50\n", "daemon.spin", Some(2));
    expect_err("flush:\n  interval: soon\n", "flush.interval", Some(2));
    expect_err(
        "organizer:\n  bandwidth_max: -1GiB/s\n",
        "organizer.bandwidth_max",
        Some(2),
    );
    expect_err(
        "adapter:\n  page_size: 1MiBB\n",
        "adapter.page_size",
        Some(2),
    );
    expect_err(
        "placement:\n  lease_size: \"\"\n",
        "placement.lease_size",
        Some(2),
    );
}

#[test]
fn out_of_range_values() {
    expect_err("daemon:\n  clients_max: 0\n", "daemon.clients_max", Some(2));
    expect_err(
        "daemon:\n  clients_max: 5000\n",
        "daemon.clients_max",
        Some(2),
    );
    expect_err(
        "daemon:\n  channels_per_client_max: 2000\n",
        "daemon.channels_per_client_max",
        Some(2),
    );
    expect_err("daemon:\n  spin: 11ms\n", "daemon.spin", Some(2));
    expect_err(
        "daemon:\n  slot_arg_size: 2KiB\n",
        "daemon.slot_arg_size",
        Some(2),
    );
    expect_err(
        "daemon:\n  slot_arg_size: 6KiB\n",
        "daemon.slot_arg_size",
        Some(2),
    );
    expect_err(
        "daemon:\n  socket: relative/daemon.sock\n",
        "daemon.socket",
        Some(2),
    );
    expect_err("daemon:\n  shm_prefix: a/b\n", "daemon.shm_prefix", Some(2));
    expect_err(
        "placement:\n  lease_size: 4KiB\n",
        "placement.lease_size",
        Some(2),
    );
    expect_err(
        "adapter:\n  page_size: 128MiB\n",
        "adapter.page_size",
        Some(2),
    );
    expect_err("flush:\n  threads: 0\n", "flush.threads", Some(2));
    expect_err("flush:\n  interval: 0s\n", "flush.interval", Some(2));
    expect_err(
        "organizer:\n  promote_threshold: 1.5\n",
        "organizer.promote_threshold",
        Some(2),
    );
    expect_err(
        "metadata:\n  buckets_max: 0\n",
        "metadata.buckets_max",
        Some(2),
    );
    expect_err(
        &format!("{GOOD_DEVICES}    capacity: 0\n"),
        "devices[0].capacity",
        Some(5),
    );
}

#[test]
fn power_of_two_rules() {
    let e = expect_err(
        "daemon:\n  spin: 1us\n  ring_depth: 100\n",
        "daemon.ring_depth",
        Some(3),
    );
    assert!(e.message.contains("power of two"), "{e}");
    expect_err(
        "daemon:\n  ring_depth: 8192\n",
        "daemon.ring_depth",
        Some(2),
    );
    let e = expect_err(
        &format!("{GOOD_DEVICES}    block_size: 96B\n"),
        "devices[0].block_size",
        Some(5),
    );
    assert!(e.message.contains("power of two"), "{e}");
    expect_err(
        &format!("{GOOD_DEVICES}    block_size: 32B\n"),
        "devices[0].block_size",
        Some(5),
    );
    expect_err(
        "adapter:\n  page_size: 12KiB\n",
        "adapter.page_size",
        Some(2),
    );
}

#[test]
fn device_rules() {
    // zero devices
    let e = expect_err("node:\n  id: 1\ndevices: []\n", "devices", Some(3));
    assert!(e.message.contains("at least one"), "{e}");
    // duplicate names
    let dup = "devices:\n  - name: a\n    kind: dir\n    path: /a\n    capacity: 1GiB\n  - name: a\n    kind: dir\n    path: /b\n    capacity: 1GiB\n";
    let e = expect_err(dup, "devices[1].name", Some(6));
    assert!(e.message.contains("duplicate"), "{e}");
    // dir without path: points at the device entry
    let e = expect_err(
        "devices:\n  - name: d\n    kind: dir\n    capacity: 1GiB\n",
        "devices[0]",
        Some(2),
    );
    assert!(e.message.contains("path"), "{e}");
    // ram with path
    expect_err(
        &format!("{GOOD_DEVICES}    path: /dev/shm/x\n"),
        "devices[0].path",
        Some(5),
    );
    // two ram devices
    let e = expect_err(
        &format!("{GOOD_DEVICES}  - name: ram2\n    kind: ram\n    capacity: 1GiB\n"),
        "devices[1].kind",
        Some(6),
    );
    assert!(e.message.contains("only one ram"), "{e}");
    // bad names
    expect_err(
        "devices:\n  - name: Fast\n    kind: ram\n    capacity: 1GiB\n",
        "devices[0].name",
        Some(2),
    );
    expect_err(
        &format!(
            "devices:\n  - name: {}\n    kind: ram\n    capacity: 1GiB\n",
            "x".repeat(33)
        ),
        "devices[0].name",
        Some(2),
    );
    // relative dir path
    expect_err(
        "devices:\n  - name: d\n    kind: dir\n    path: tiers/d\n    capacity: 1GiB\n",
        "devices[0].path",
        Some(4),
    );
    // same directory twice
    let same = "devices:\n  - name: a\n    kind: dir\n    path: /a\n    capacity: 1GiB\n  - name: b\n    kind: dir\n    path: /a\n    capacity: 1GiB\n";
    expect_err(same, "devices[1].path", Some(8));
    // missing name / kind
    expect_err("devices:\n  - kind: ram\n", "devices[0]", Some(2));
    expect_err("devices:\n  - name: r\n", "devices[0]", Some(2));
    // lease larger than the ram tier
    expect_err(
        "devices:\n  - name: ram\n    kind: ram\n    capacity: 1MiB\n",
        "placement.lease_size",
        None,
    );
}

#[test]
fn threshold_order() {
    let e = expect_err(
        "organizer:\n  promote_threshold: 0.3\n  demote_threshold: 0.3\n",
        "organizer.demote_threshold",
        Some(3),
    );
    assert!(e.message.contains("less than"), "{e}");
    // demote absent: the line of the organizer section
    expect_err(
        "organizer:\n  promote_threshold: 0.1\n",
        "organizer.demote_threshold",
        Some(1),
    );
}

#[test]
fn relative_include_paths() {
    expect_err(
        "adapter:\n  include:\n    - /ok\n    - data/run\n",
        "adapter.include[1]",
        Some(4),
    );
    expect_err(
        "adapter:\n  exclude: [tmp]\n",
        "adapter.exclude[0]",
        Some(2),
    );
    expect_err(
        "adapter:\n  prefixes:\n    - path: ckpt\n",
        "adapter.prefixes[0].path",
        Some(3),
    );
}

fn vars(list: &[(&str, &str)]) -> impl Iterator<Item = (String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<Vec<_>>()
        .into_iter()
}

#[test]
fn env_overrides() {
    let mut c = parse(FULL).unwrap();
    c.apply_env(vars(&[
        ("STRATA_NODE_ID", "9"),
        ("STRATA_DAEMON_SHM_PREFIX", "other"),
        ("STRATA_PLACEMENT_POLICY", "random"),
        ("STRATA_ADAPTER_PAGE_SIZE", "4MiB"),
        ("STRATA_FLUSH_INTERVAL", "1s"),
        ("STRATA_DEVICE_DISK0_CAPACITY", "32GiB"),
        ("STRATA_DEVICE_NVME_1_PATH", "/mnt/other"),
        ("STRATA_DEVICE_RAM_LATENCY", "2us"),
        ("STRATA_DEVICE_DISK0_BANDWIDTH", "1GiB/s"),
        ("STRATA_SOCKET", "/tmp/alias.sock"),
        ("STRATA_MODE", "bypass"),
        ("STRATA_LOG", "trace"),
        ("STRATA_INCLUDE", "/a:/b/c"),
        ("STRATA_EXCLUDE", ""),
        ("STRATA_CONFIG", "/whatever.yaml"),
        ("STRATA_CLIENT_ID", "x"),
        ("STRATA_INTERNAL_FOO", "x"),
        ("STRATA_RUN_DIR", "x"),
        ("HOME_NOT_OURS", "x"),
    ]))
    .unwrap();
    assert_eq!(c.node.id, 9);
    assert_eq!(c.resolved_shm_prefix(), "other");
    assert_eq!(c.placement.policy, PlacementPolicy::Random);
    assert_eq!(c.adapter.page_size_bytes, 4 << 20);
    assert_eq!(c.flush.interval_ms, 1000.0);
    assert_eq!(c.devices[1].capacity_bytes, 32 << 30);
    assert_eq!(c.devices[1].bandwidth_mib_s, 1024.0);
    assert_eq!(c.devices[2].path.as_deref(), Some(Path::new("/mnt/other")));
    assert_eq!(c.devices[0].latency_us, 2.0);
    assert_eq!(
        c.daemon.socket.as_deref(),
        Some(Path::new("/tmp/alias.sock"))
    );
    assert_eq!(c.adapter.mode, Mode::Bypass);
    assert_eq!(c.daemon.log, LogLevel::Trace);
    assert_eq!(
        c.adapter.include,
        vec![PathBuf::from("/a"), PathBuf::from("/b/c")]
    );
    assert_eq!(c.adapter.exclude, vec![PathBuf::from("/data/tmp")]); // empty value ignored

    // The full name wins over the alias.
    let mut c = parse(FULL).unwrap();
    c.apply_env(vars(&[
        ("STRATA_DAEMON_SOCKET", "/tmp/full.sock"),
        ("STRATA_SOCKET", "/tmp/alias.sock"),
    ]))
    .unwrap();
    assert_eq!(
        c.daemon.socket.as_deref(),
        Some(Path::new("/tmp/full.sock"))
    );

    // Every documented name is accepted.
    let c = parse(FULL).unwrap();
    for name in c.env_var_names() {
        assert!(
            env::apply_env(&mut c.clone(), vars(&[(&name, "")])).is_ok(),
            "{name}"
        );
    }
}

#[test]
fn env_errors() {
    let c = parse(FULL).unwrap();
    let check = |list: &[(&str, &str)], key: &str| -> ConfigError {
        let mut copy = c.clone();
        let e = copy.apply_env(vars(list)).expect_err(key);
        assert_eq!(e.key, key, "{e}");
        assert_eq!(e.origin, ENV_ORIGIN, "{e}");
        assert_eq!(e.line, None, "{e}");
        assert_eq!(copy, c, "config must be unchanged on error");
        e
    };
    let e = check(
        &[("STRATA_DEVICE_DISK0_CAPACITY", "lots")],
        "STRATA_DEVICE_DISK0_CAPACITY",
    );
    assert!(e.message.contains("invalid size"), "{e}");
    check(&[("STRATA_NODE_ID", "x")], "STRATA_NODE_ID");
    check(
        &[("STRATA_FLUSH_ENABLED", "perhaps")],
        "STRATA_FLUSH_ENABLED",
    );
    let e = check(
        &[("STRATA_PLACEMNT_POLICY", "random")],
        "STRATA_PLACEMNT_POLICY",
    );
    assert!(
        e.message.contains("did you mean STRATA_PLACEMENT_POLICY"),
        "{e}"
    );
    let e = check(&[("STRATA_BOGUS", "1")], "STRATA_BOGUS");
    assert!(e.message.contains("unknown"), "{e}");
    let e = check(
        &[("STRATA_DEVICE_TAPE_CAPACITY", "1GiB")],
        "STRATA_DEVICE_TAPE_CAPACITY",
    );
    assert!(e.message.contains("no device named"), "{e}");
    // Values that parse but fail validation are reported against the variable.
    let e = check(
        &[("STRATA_DAEMON_RING_DEPTH", "100")],
        "STRATA_DAEMON_RING_DEPTH",
    );
    assert!(
        e.message.contains("daemon.ring_depth") && e.message.contains("power of two"),
        "{e}"
    );
    check(
        &[("STRATA_DEVICE_DISK0_PATH", "relative")],
        "STRATA_DEVICE_DISK0_PATH",
    );
}

#[test]
fn enums_parse_and_display() {
    for m in Mode::ALL {
        assert_eq!(m.to_string().parse::<Mode>(), Ok(*m));
    }
    for p in PlacementPolicy::ALL {
        assert_eq!(p.to_string().parse::<PlacementPolicy>(), Ok(*p));
    }
    for k in DeviceKind::ALL {
        assert_eq!(k.to_string().parse::<DeviceKind>(), Ok(*k));
    }
    assert_eq!(
        "minimize_io_time".parse(),
        Ok(PlacementPolicy::MinimizeIoTime)
    );
    assert_eq!("Round-Robin".parse(), Ok(PlacementPolicy::RoundRobin));
    assert_eq!(Mode::Workflow.to_string(), "workflow");
    assert!("fast"
        .parse::<DeviceKind>()
        .unwrap_err()
        .contains("ram, dir"));
}

#[test]
fn load_reads_files() {
    let dir = std::env::temp_dir().join(format!("strata-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("strata.yaml");
    std::fs::write(&file, "node:\n  id: 3\n  bogus: 1\n").unwrap();
    let e = Config::load(&file).unwrap_err();
    assert_eq!(e.origin, file.display().to_string());
    assert_eq!(e.line, Some(3));
    std::fs::write(&file, FULL).unwrap();
    assert_eq!(Config::load(&file).unwrap().node.id, 7);
    // load_effective with an explicit path (the test environment has no STRATA_* config variables).
    if std::env::vars().all(|(k, _)| !k.starts_with("STRATA_")) {
        assert_eq!(Config::load_effective(Some(&file)).unwrap().node.id, 7);
    }
    let missing = Config::load(&dir.join("missing.yaml")).unwrap_err();
    assert!(missing.message.contains("cannot read"), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn flush_stall_warn() {
    assert_eq!(
        parse("").unwrap().flush.stall_warn_ms,
        10_000.0,
        "default 10 s"
    );
    let c = parse(&format!("{GOOD_DEVICES}flush:\n  stall_warn: 250ms\n")).unwrap();
    assert_eq!(c.flush.stall_warn_ms, 250.0);
    expect_err("flush:\n  stall_warn: 0s\n", "flush.stall_warn", Some(2));
    expect_err("flush:\n  stall_warn: 2h\n", "flush.stall_warn", Some(2));
}

#[test]
fn trace_and_prefetch_keys() {
    let c = parse("trace:\n  enabled: true\n  path: /tmp/x.trace\n  size_max: 8MiB\nprefetch:\n  readahead_pages: 16\n  predict: false\n").unwrap();
    assert!(c.trace.enabled);
    assert_eq!(c.resolved_trace_path(), Path::new("/tmp/x.trace"));
    assert_eq!(c.trace.size_max_bytes, 8 << 20);
    assert_eq!(c.prefetch.readahead_pages, 16);
    assert!(!c.prefetch.predict && c.prefetch.enabled);
    // Defaults: trace off, read-ahead on; `auto` path next to the socket.
    let d = parse("daemon:\n  socket: /tmp/s.sock\n").unwrap();
    assert!(!d.trace.enabled);
    assert_eq!(d.resolved_trace_path(), Path::new("/tmp/s.sock.trace"));
    assert_eq!(d.prefetch, PrefetchConfig::default());
    // Errors name key and line.
    expect_err("trace:\n  size_max: 1KiB\n", "trace.size_max", Some(2));
    expect_err(
        "trace:\n  enabled: true\n  path: rel/x\n",
        "trace.path",
        Some(3),
    );
    expect_err("prefetch:\n  threads: 0\n", "prefetch.threads", Some(2));
    expect_err(
        "prefetch:\n  readahead_pages: 5000\n",
        "prefetch.readahead_pages",
        Some(2),
    );
    expect_err(
        "prefetch:\n  readahed_pages: 4\n",
        "prefetch.readahed_pages",
        Some(2),
    );
    // Environment overrides are generic.
    let mut e = d.clone();
    e.apply_env(vars(&[
        ("STRATA_TRACE_ENABLED", "true"),
        ("STRATA_PREFETCH_READAHEAD_PAGES", "0"),
    ]))
    .unwrap();
    assert!(e.trace.enabled);
    assert_eq!(e.prefetch.readahead_pages, 0);
    // The written file reads back equal.
    let back = parse(&c.to_yaml()).unwrap();
    assert_eq!(back.trace, c.trace);
    assert_eq!(back.prefetch, c.prefetch);
}

#[test]
fn organizer_windows_and_water_marks() {
    let c = Config::from_yaml_str(
        &format!("{GOOD_DEVICES}organizer:\n  recency_window: 250ms\n  frequency_window: 2s\n  high_water: 0.8\n  low_water: 0.5\n"),
        "t.yaml",
    )
    .unwrap();
    assert_eq!(c.organizer.recency_window_ns(), 250_000_000);
    assert_eq!(c.organizer.frequency_window_ns(), 2_000_000_000);
    assert_eq!((c.organizer.high_water, c.organizer.low_water), (0.8, 0.5));
    let d = OrganizerConfig::default();
    assert_eq!(
        (
            d.recency_window_ms,
            d.frequency_window_ms,
            d.high_water,
            d.low_water
        ),
        (60_000.0, 300_000.0, 0.9, 0.75)
    );
    expect_err(
        "organizer:\n  recency_window: 0s\n",
        "organizer.recency_window",
        Some(2),
    );
    expect_err(
        "organizer:\n  frequency_window: 2d\n",
        "organizer.frequency_window",
        Some(2),
    );
    expect_err(
        "organizer:\n  frequency_window: soon\n",
        "organizer.frequency_window",
        Some(2),
    );
    expect_err(
        "organizer:\n  high_water: 1.5\n",
        "organizer.high_water",
        Some(2),
    );
    expect_err(
        "organizer:\n  low_water: -0.1\n",
        "organizer.low_water",
        Some(2),
    );
    let e = expect_err(
        "organizer:\n  high_water: 0.5\n  low_water: 0.6\n",
        "organizer.low_water",
        Some(3),
    );
    assert!(e.message.contains("less than"), "{e}");
}

/// Issue 12 item 17: a RAM tier larger than /dev/shm is a config error.
#[test]
fn a_ram_tier_larger_than_dev_shm_is_refused() {
    let e = expect_err(
        "devices:\n  - name: ram\n    kind: ram\n    capacity: 1PiB\n",
        "devices[0].capacity",
        Some(4),
    );
    assert!(e.to_string().contains("/dev/shm"), "{e}");
}

/// `STRATA_INCLUDE=rel` means what `strata run --include rel` means: the
/// directory below the current one (it was refused).
#[test]
fn env_include_relative_is_taken_from_the_current_directory() {
    let mut c = parse(FULL).unwrap();
    c.apply_env(vars(&[
        ("STRATA_INCLUDE", "/ok:relative/dir"),
        ("STRATA_EXCLUDE", "skip"),
    ]))
    .unwrap();
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(
        c.adapter.include,
        vec![PathBuf::from("/ok"), cwd.join("relative/dir")]
    );
    assert_eq!(c.adapter.exclude, vec![cwd.join("skip")]);
}

#[test]
fn cluster_keys() {
    let c = parse(
        "cluster:\n  hosts:\n    - node[01-04]\n    - gpu3=10.1.0.9:7800\n  port: 7000\n  call_timeout: 2s\n  heartbeat_interval: 250ms\n",
    )
    .unwrap();
    assert_eq!(c.cluster.hosts, ["node[01-04]", "gpu3=10.1.0.9:7800"]);
    assert_eq!(c.cluster.port, 7000);
    assert_eq!(c.cluster.call_timeout_ms, 2000.0);
    assert_eq!(c.cluster.heartbeat_interval_ms, 250.0);
    // One hostlist as a plain value.
    let one = parse("cluster:\n  hosts: n[1-2]\n").unwrap();
    assert_eq!(one.cluster.hosts, ["n[1-2]"]);
    // Defaults: no hosts (one node).
    let d = parse("").unwrap();
    assert_eq!(d.cluster, ClusterConfig::default());
    assert!(d.cluster.hosts.is_empty());
    // Errors name key and line.
    expect_err(
        "cluster:\n  hosts:\n    - ok\n    - n[1-\n",
        "cluster.hosts",
        Some(4),
    );
    expect_err("cluster:\n  port: 0\n", "cluster.port", Some(2));
    expect_err("cluster:\n  port: 70000\n", "cluster.port", Some(2));
    expect_err(
        "cluster:\n  call_timeout: 0s\n",
        "cluster.call_timeout",
        Some(2),
    );
    expect_err(
        "cluster:\n  call_timeout: 1s\n  heartbeat_interval: 2s\n",
        "cluster.heartbeat_interval",
        Some(3),
    );
    expect_err(
        "cluster:\n  secret_file: rel/s\n",
        "cluster.secret_file",
        Some(2),
    );
    expect_err("cluster:\n  host: a\n", "cluster.host", Some(2));
    expect_err(
        "cluster:\n  shadow_sweep_interval: 10ms\n",
        "cluster.shadow_sweep_interval",
        Some(2),
    );
    expect_err("cluster:\n  tls_key: k.pem\n", "cluster.tls_key", Some(2));
    expect_err("cluster:\n  tls: maybe\n", "cluster.tls", Some(2));
    let t = parse("cluster:\n  tls: true\n  tls_ca: /etc/ca.pem\n  secret_file: /s/k\n").unwrap();
    assert!(t.cluster.tls && !d.cluster.tls);
    let (cert, key, ca) = t.resolved_cluster_tls_files();
    assert_eq!(cert, std::path::PathBuf::from("/s/cluster-tls.crt"));
    assert_eq!(key, std::path::PathBuf::from("/s/cluster-tls.key"));
    assert_eq!(ca, std::path::PathBuf::from("/etc/ca.pem"));
    assert_eq!(parse(&t.to_yaml()).unwrap().cluster, t.cluster);
    let sw = parse("cluster:\n  shadow_sweep_interval: 2s\n").unwrap();
    assert_eq!(sw.cluster.shadow_sweep_interval_ms, 2000.0);
    assert_eq!(d.cluster.shadow_sweep_interval_ms, 60_000.0);
    // Environment override: one hostlist.
    let mut e = d.clone();
    e.apply_env(vars(&[("STRATA_CLUSTER_HOSTS", "a,b=10.0.0.2")]))
        .unwrap();
    assert_eq!(e.cluster.hosts, ["a,b=10.0.0.2"]);
    assert!(d
        .clone()
        .apply_env(vars(&[("STRATA_CLUSTER_HOSTS", "a[")]))
        .is_err());
    // The written file reads back equal.
    assert_eq!(parse(&c.to_yaml()).unwrap().cluster, c.cluster);
    assert_eq!(parse(&d.to_yaml()).unwrap().cluster, d.cluster);
}
