"""`strata.connect()` with no daemon running starts a private one, shared
by every process that connects, stopped (after draining) by the last."""
import os
import subprocess
import sys
import textwrap

import pytest

import strata
from conftest import write_config


def test_connect_starts_and_stops_a_private_daemon(tmp_path):
    cfg = str(write_config(tmp_path, f"py-zc{os.getpid()}"))
    sock = tmp_path / "rt" / "daemon.sock"
    assert not sock.exists()
    with strata.connect(config=cfg) as c:
        assert c.started_daemon
        assert sock.exists()
        with strata.open(tmp_path / "out.bin", "wb", client=c) as f:
            f.write(b"drained at the end")
        # a second user shares it and does not stop it
        with strata.connect(config=cfg) as c2:
            assert not c2.started_daemon
            c2.bucket("b").put("k", b"v")
        assert sock.exists()
        assert c.bucket("b").get("k") == b"v"
    # the last user left: drained, then stopped
    assert not sock.exists()
    assert (tmp_path / "out.bin").read_bytes() == b"drained at the end"


def test_processes_share_one_private_daemon_and_the_last_stops_it(tmp_path):
    cfg = str(write_config(tmp_path, f"py-mp{os.getpid()}"))
    code = textwrap.dedent(f"""
        import sys, strata
        c = strata.connect(config={cfg!r})
        b = c.bucket("shared")
        b.put("p" + sys.argv[1], b"x" * 1000)
        sys.stdin.read()          # wait for the parent
        print(len(b.list()), c.started_daemon)
        c.close()
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(i)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for i in range(3)]
    # every process has put its blob once the daemon lists three
    with strata.connect(config=cfg) as c:
        import time
        deadline = time.monotonic() + 60
        b = c.bucket("shared")
        while len(b.list()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        outs = [p.communicate("")[0].split() for p in procs]
        # exactly one of the four processes started the daemon
        assert [o[1] for o in outs].count("True") + c.started_daemon == 1
        assert all(o[0] == "3" for o in outs)
        assert (tmp_path / "rt" / "daemon.sock").exists()  # we still use it
    assert not (tmp_path / "rt" / "daemon.sock").exists()


def test_a_daemon_the_user_started_is_never_stopped(daemon):
    with strata.connect(daemon) as c:
        assert not c.started_daemon
    with strata.connect(daemon) as c:
        assert c.buckets() is not None


def test_start_false_does_not_start_one(tmp_path):
    cfg = str(write_config(tmp_path, f"py-ns{os.getpid()}"))
    with pytest.raises(strata.NoDaemon):
        strata.connect(config=cfg, start=False)
    assert not (tmp_path / "rt" / "daemon.sock").exists()


def test_a_bad_configuration_names_the_key(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("daemon:\n  sockett: /x\n")
    with pytest.raises(strata.InvalidArgument, match="sockett"):
        strata.connect(config=str(cfg))


def test_a_client_dropped_unclosed_still_stops_what_it_started(tmp_path):
    import gc

    cfg = str(write_config(tmp_path, f"py-gc{os.getpid()}"))
    c = strata.connect(config=cfg)
    assert c.started_daemon
    with strata.open(tmp_path / "kept.bin", "wb", client=c) as f:
        f.write(b"drained by the drop")
    del c
    gc.collect()
    assert not (tmp_path / "rt" / "daemon.sock").exists()
    assert (tmp_path / "kept.bin").read_bytes() == b"drained by the drop"


def test_python_m_strata_daemon_start_and_stop_for_pip_only_users(tmp_path):
    cfg = str(write_config(tmp_path, f"py-cli{os.getpid()}"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    run = lambda *a: subprocess.run([sys.executable, "-m", "strata", "--config", cfg, *a],  # noqa: E731
                                    capture_output=True, env=env)
    # no daemon: a command says so and does not start one
    r = run("ls")
    assert r.returncode == 1 and b"strata" in r.stderr
    assert not (tmp_path / "rt" / "daemon.sock").exists()
    r = run("daemon", "start")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "rt" / "daemon.sock").exists()
    src = tmp_path / "in.bin"
    src.write_bytes(b"kept between commands")
    assert run("put", "b", "k", str(src)).returncode == 0
    assert run("get", "b", "k").stdout == b"kept between commands"
    # a connect() user does not stop a daemon the user started
    with strata.connect(config=cfg) as c:
        assert not c.started_daemon
    assert run("ls", "b").stdout.split() == [b"k"]
    r = run("daemon", "stop")
    assert r.returncode == 0 and b"stopped" in r.stdout, r.stderr
    assert not (tmp_path / "rt" / "daemon.sock").exists()


def test_strata_run_and_python_share_one_private_daemon(tmp_path):
    from conftest import clean_env, strata_bin

    cfg = str(write_config(tmp_path, f"py-run{os.getpid()}"))
    sock = tmp_path / "rt" / "daemon.sock"
    c = strata.connect(config=cfg)
    assert c.started_daemon
    pid = c.status()["pid"]
    # a `strata run` of the same configuration uses it and, not being its
    # last user, leaves it running
    r = subprocess.run([strata_bin(), "--config", cfg, "run", "--quiet", "--", "true"],
                       env=clean_env(), capture_output=True)
    assert r.returncode == 0, r.stderr
    assert sock.exists() and c.status()["pid"] == pid
    assert c.close() is True  # the last user: stopped
    assert not sock.exists()
    # the other way round: strata run starts it, a Python user outlives the
    # run and, as its last user, stops it
    import time

    run = subprocess.Popen([strata_bin(), "--config", cfg, "run", "--quiet", "--",
                            sys.executable, "-c", "import sys; sys.stdin.read()"],
                           stdin=subprocess.PIPE, env=clean_env())
    deadline = time.monotonic() + 60
    while not sock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    c = strata.connect(config=cfg)
    assert not c.started_daemon
    run.communicate(b"")
    assert run.returncode == 0
    assert sock.exists()  # we still use it
    assert c.close() is True
    assert not sock.exists()
