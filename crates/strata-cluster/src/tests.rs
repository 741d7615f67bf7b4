use super::*;
use std::collections::HashMap;

fn no_env(_: &str) -> Option<String> {
    None
}

fn inputs<'a>(env: &'a dyn Fn(&str) -> Option<String>) -> Inputs<'a> {
    Inputs {
        hosts: None,
        hostfile: None,
        config_hosts: &[],
        env,
    }
}

fn names(m: &Membership) -> Vec<&str> {
    m.nodes.iter().map(|n| n.name.as_str()).collect()
}

#[test]
fn no_source_is_one_node_as_before() {
    assert_eq!(discover(&inputs(&no_env)).unwrap(), None);
    // Empty variables do not count.
    let env = |k: &str| (k == "SLURM_JOB_NODELIST").then(|| " ".to_string());
    assert_eq!(discover(&inputs(&env)).unwrap(), None);
}

#[test]
fn hosts_with_addresses_and_ports() {
    let mut i = inputs(&no_env);
    i.hosts = Some("node[01-02],node03=10.1.0.3,node04:7701,node05=10.1.0.5:7702,v6=[fd00::5]:9");
    let m = discover(&i).unwrap().unwrap();
    assert_eq!(m.source, Source::Hosts);
    assert_eq!(
        names(&m),
        ["node01", "node02", "node03", "node04", "node05", "v6"]
    );
    let ids: Vec<NodeId> = m.nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4, 5]);
    assert_eq!(m.nodes[0].endpoint(7700), "node01:7700");
    assert_eq!(m.nodes[2].endpoint(7700), "10.1.0.3:7700");
    assert_eq!(m.nodes[3].endpoint(7700), "node04:7701");
    assert_eq!(m.nodes[4].endpoint(7700), "10.1.0.5:7702");
    assert_eq!(m.nodes[5].endpoint(7700), "[fd00::5]:9");
    assert_eq!(m.find("10.1.0.3").unwrap().name, "node03");
    // The list given to each daemon parses back to the same membership.
    let mut j = inputs(&no_env);
    let arg = m.to_hosts_arg();
    j.hosts = Some(&arg);
    assert_eq!(discover(&j).unwrap().unwrap().nodes, m.nodes);
}

#[test]
fn first_source_wins() {
    let dir = tempfile::tempdir().unwrap();
    let hf = dir.path().join("hosts");
    std::fs::write(
        &hf,
        "# the job's nodes\nalpha\nbeta:7000   # a comment\n\nbeta:7000\ngamma slots=4\n",
    )
    .unwrap();
    let pbs = dir.path().join("pbs");
    std::fs::write(&pbs, "p1\np1\np1\np2\np2\n").unwrap();
    let vars: HashMap<&str, String> = [
        ("SLURM_JOB_NODELIST", "s[1-3]".to_string()),
        ("PBS_NODEFILE", pbs.display().to_string()),
        ("LSB_HOSTS", "l1 l1 l2".to_string()),
    ]
    .into();
    let config = vec!["c[1-2]".to_string(), "c9".to_string()];
    let all = |k: &str| vars.get(k).cloned();
    let mut i = Inputs {
        hosts: Some("h1,h2"),
        hostfile: Some(&hf),
        config_hosts: &config,
        env: &all,
    };
    assert_eq!(names(&discover(&i).unwrap().unwrap()), ["h1", "h2"]);
    i.hosts = None;
    let m = discover(&i).unwrap().unwrap();
    assert_eq!(names(&m), ["alpha", "beta", "gamma"]);
    assert_eq!(m.nodes[1].port, Some(7000));
    i.hostfile = None;
    assert_eq!(names(&discover(&i).unwrap().unwrap()), ["s1", "s2", "s3"]);
    let no_slurm = |k: &str| {
        (k != "SLURM_JOB_NODELIST")
            .then(|| vars.get(k).cloned())
            .flatten()
    };
    i.env = &no_slurm;
    let m = discover(&i).unwrap().unwrap();
    assert_eq!(
        (names(&m), m.source.clone()),
        (vec!["p1", "p2"], Source::Pbs(pbs.clone()))
    );
    let lsf_only = |k: &str| (k == "LSB_HOSTS").then(|| vars.get(k).cloned()).flatten();
    i.env = &lsf_only;
    assert_eq!(names(&discover(&i).unwrap().unwrap()), ["l1", "l2"]);
    i.env = &no_env;
    let m = discover(&i).unwrap().unwrap();
    assert_eq!(
        (names(&m), m.source.clone()),
        (vec!["c1", "c2", "c9"], Source::Config)
    );
}

#[test]
fn bad_entries_name_their_source_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let hf = dir.path().join("hosts");
    std::fs::write(&hf, "good\n\nbad host!\n").unwrap();
    let mut i = inputs(&no_env);
    i.hostfile = Some(&hf);
    let e = discover(&i).unwrap_err().to_string();
    assert!(e.contains("line 3") && e.contains("bad host name"), "{e}");

    std::fs::write(&hf, "a\nn[1-\n").unwrap();
    let e = discover(&i).unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains("unbalanced"), "{e}");

    std::fs::write(&hf, "# nothing\n").unwrap();
    assert!(discover(&i)
        .unwrap_err()
        .to_string()
        .contains("lists no host"));

    i.hostfile = Some(Path::new("/nonexistent/hosts"));
    assert!(discover(&i)
        .unwrap_err()
        .to_string()
        .contains("cannot read /nonexistent/hosts"));

    let mut i = inputs(&no_env);
    for (bad, why) in [
        ("a:0", "bad port"),
        ("a:70000", "bad port"),
        ("a=10.0.0.1,a=10.0.0.2", "listed twice"),
        ("a=10.0.0.1,b=10.0.0.1", "same address"),
        ("a=", "bad address"),
        ("a=[fd00::1", "unclosed"),
        ("=10.0.0.1", "bad host name"),
    ] {
        i.hosts = Some(bad);
        let e = discover(&i).unwrap_err().to_string();
        assert!(e.contains(why) && e.contains("--hosts"), "{bad}: {e}");
    }
    let config = vec!["ok".to_string(), "x[2-1]".to_string()];
    let i = Inputs {
        config_hosts: &config,
        ..inputs(&no_env)
    };
    let e = discover(&i).unwrap_err().to_string();
    assert!(
        e.contains("cluster.hosts, entry 2") && e.contains("bad range"),
        "{e}"
    );
}

#[test]
fn the_ring_is_the_names_ring() {
    let mut i = inputs(&no_env);
    i.hosts = Some("n[1-4]");
    let m = discover(&i).unwrap().unwrap();
    let r = m.ring();
    assert_eq!(r, Ring::new(&["n1", "n2", "n3", "n4"]).unwrap());
    assert_eq!(r.node_count(), 4);
}
