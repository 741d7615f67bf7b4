//! The Prometheus endpoint (`daemon.metrics`) of a real daemon: a scrape
//! agrees with `strata status --json`, histograms count the requests that
//! ran, bad requests get HTTP errors, and a taken port fails the start with
//! a message naming the key.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::Duration;

use common::{TestDaemon, Tiers};

/// A daemon whose configuration turns the endpoint on at `addr`.
fn with_metrics(addr: &str) -> TestDaemon {
    let d = TestDaemon::configured(Tiers {
        ram: "64MiB",
        disk: Some("256MiB"),
        extra_yaml: "",
    });
    let yaml = std::fs::read_to_string(&d.config).unwrap();
    let yaml = yaml.replacen(
        "  log: warn\n",
        &format!("  log: warn\n  metrics: {addr}\n"),
        1,
    );
    assert!(yaml.contains("metrics:"), "{yaml}");
    std::fs::write(&d.config, yaml).unwrap();
    d
}

/// (status code, body) of `GET path` (or another method), with deadlines.
fn http(addr: &str, method: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let code: u16 = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {raw:?}"));
    let body = raw.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    (code, body.to_string())
}

/// `name{labels}` → value, for every sample of the exposition.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {l:?}"));
            (
                k.to_string(),
                v.parse::<f64>()
                    .unwrap_or_else(|_| panic!("bad value in {l:?}")),
            )
        })
        .collect()
}

fn status_json(d: &TestDaemon) -> serde_json::Value {
    let out = d.cmd().args(["status", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_scrape_agrees_with_status_json() {
    let mut d = with_metrics("127.0.0.1:0");
    d.spawn();
    let st = d.status();
    let url = st
        .metrics
        .clone()
        .expect("status names the metrics endpoint");
    let addr = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{url}"))
        .to_string();

    // Some work: puts, gets, a durable flush (onto the dir tier, journaled).
    let c = d.client();
    let b = c.bucket("m").unwrap();
    for i in 0..20 {
        b.put(&format!("k{i}"), &vec![i as u8; 100_000]).unwrap();
    }
    for i in 0..20 {
        assert_eq!(b.get(&format!("k{i}")).unwrap().len(), 100_000);
    }
    b.flush(true).unwrap();
    drop(b);
    drop(c);
    // Quiet now: the counters stand still between the scrape and the status
    // (bounded wait for the client to be gone).
    let t = std::time::Instant::now();
    while d.status().clients > 0 && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }

    let (code, text) = http(&addr, "GET", "/metrics");
    assert_eq!(code, 200, "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
    let m = samples(&text);
    let j = status_json(&d);
    let node = j["node_id"].as_u64().unwrap();
    let get = |name: &str, labels: &str| -> f64 {
        let key = if labels.is_empty() {
            format!("{name}{{node=\"{node}\"}}")
        } else {
            format!("{name}{{node=\"{node}\",{labels}}}")
        };
        *m.get(&key)
            .unwrap_or_else(|| panic!("no sample {key} in\n{text}"))
    };
    let num = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("{v}"));

    assert_eq!(get("strata_requests_total", ""), num(&j["requests_total"]));
    assert_eq!(get("strata_clients", ""), num(&j["clients"]));
    assert_eq!(get("strata_blobs", ""), num(&j["blobs"]));
    assert_eq!(get("strata_buckets", ""), num(&j["buckets"]));
    for t in j["tiers"].as_array().unwrap() {
        let labels = format!(
            "tier=\"{}\",kind=\"{}\"",
            t["name"].as_str().unwrap(),
            t["kind"].as_str().unwrap()
        );
        for (metric, field) in [
            ("strata_tier_capacity_bytes", "capacity_bytes"),
            ("strata_tier_used_bytes", "used_bytes"),
            ("strata_tier_extents", "blob_count"),
            ("strata_tier_dirty_bytes", "dirty_bytes"),
            ("strata_tier_spilled_bytes", "spilled_bytes"),
        ] {
            assert_eq!(get(metric, &labels), num(&t[field]), "{metric} {labels}");
        }
    }
    let used: f64 = j["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| num(&t["used_bytes"]))
        .sum();
    assert!(used >= 2_000_000.0, "the blobs are somewhere ({used})");
    let jr = &j["journal"];
    assert!(jr.is_object(), "a dir tier journals: {j}");
    assert_eq!(get("strata_journal_file_bytes", ""), num(&jr["file_bytes"]));
    assert_eq!(get("strata_journal_syncs_total", ""), num(&jr["syncs"]));
    assert!(get("strata_journal_syncs_total", "") >= 1.0);
    assert_eq!(
        get("strata_journal_sync_duration_seconds_count", ""),
        num(&jr["syncs"]),
        "one observation per fdatasync"
    );
    assert_eq!(
        get("strata_dirty_bytes", ""),
        num(&j["files"]["dirty_bytes"])
    );
    assert_eq!(
        get("strata_flushed_bytes_total", ""),
        num(&j["files"]["flushed_bytes_total"])
    );
    assert_eq!(
        get("strata_prefetch_used_bytes_total", ""),
        num(&j["prefetch"]["used_bytes_total"])
    );

    // Service-time histograms count every request that ran.
    assert!(get("strata_request_duration_seconds_count", "op=\"put\"") >= 20.0);
    // Gets go to the daemon, or straight to the arena through the get index
    // (whose reads the daemon counts every 100 ms: scrape again, bounded).
    let t = std::time::Instant::now();
    loop {
        let (_, text) = http(&addr, "GET", "/metrics");
        let m = samples(&text);
        let opt = |key: String| m.get(&key).copied().unwrap_or(0.0);
        let gets = opt(format!(
            "strata_request_duration_seconds_count{{node=\"{node}\",op=\"get\"}}"
        )) + opt(format!(
            "strata_get_index_direct_reads_total{{node=\"{node}\"}}"
        ));
        if gets >= 20.0 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{gets} gets counted:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        get(
            "strata_request_duration_seconds_bucket",
            "le=\"+Inf\",op=\"put\""
        ),
        get("strata_request_duration_seconds_count", "op=\"put\"")
    );
    assert!(get("strata_request_duration_seconds_sum", "op=\"put\"") > 0.0);

    // Other paths and methods are refused; the endpoint still serves.
    assert_eq!(http(&addr, "GET", "/nope").0, 404);
    assert_eq!(http(&addr, "POST", "/metrics").0, 405);
    assert_eq!(http(&addr, "GET", "/metrics").0, 200);

    // A second daemon asking for the same address does not start, and says why.
    let mut d2 = with_metrics(&addr);
    let out = d2
        .cmd()
        .args(["daemon", "start", "--foreground"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("daemon.metrics") && err.contains(&addr),
        "{err}"
    );
    d2.stop();

    // The table shows where the metrics are.
    let out = d.cmd().arg("status").output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains(&url), "{table}");
    d.stop();
}

#[test]
fn metrics_are_off_by_default_and_status_watch_refreshes() {
    let d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: None,
        extra_yaml: "",
    });
    assert_eq!(d.status().metrics, None);
    // --watch with --json: one object per refresh; a closed pipe ends it.
    let mut child = d
        .cmd()
        .args(["status", "--json", "--watch", "0.1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for _ in 0..3 {
        let mut l = String::new();
        std::io::BufRead::read_line(&mut out, &mut l).unwrap();
        let v: serde_json::Value = serde_json::from_str(&l).expect("a JSON object per line");
        lines.push(v["uptime_s"].as_f64().unwrap());
    }
    drop(out);
    let _ = child.kill();
    let _ = child.wait();
    assert!(lines.windows(2).all(|w| w[0] <= w[1]), "{lines:?}");
    // A bad interval is refused with a clear message.
    let out = d.cmd().args(["status", "--watch", "0"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--watch"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
