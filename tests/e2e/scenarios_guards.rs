//! The scenarios of the agent's safeguards and setup: the checker itself (and R2), the harness's configs through
//! `--validate-config`, the watchdog, SIGHUP reload, a second agent with a taken name, and a failed bootstrap.
use super::*;

/// The checker is tested too, and R2 with it: freeze a replica's agent and promote its PostgreSQL by hand
/// (`pg_promote()`, an operator's mistake). The checker must see two writable primaries; once thawed,
/// the agent must stop its primary that holds no lease (R2), and with `rejoin` the node must then rewind
/// and stream from the real primary.
pub fn checker_bites(kind: StoreKind, rejoin: bool) {
    let mut c = Cluster::start(kind);
    let p = c.primary().expect("one primary");
    let r = others(p).next().expect("a replica");
    c.sigstop_agent(r);
    c.sql(r, "SELECT pg_promote()").expect("pg_promote");
    log(
        &c,
        &format!(
            "froze {}'s agent and promoted its PostgreSQL by hand",
            c.nodes[r].name
        ),
    );
    let seen = c.wait_until(
        "the checker to see two writable primaries",
        Duration::from_secs(10),
        |c| c.double_primary_samples().first().cloned(),
    );
    log(
        &c,
        &format!(
            "the checker saw two writable primaries at {:.2} s, as it must",
            seen.at.as_secs_f64()
        ),
    );
    let t0 = Instant::now();
    c.sigcont_agent(r);
    c.wait_until(
        "the agent to stop its unleased primary",
        Duration::from_secs(20),
        |c| (c.recovery_states()[r] != Some(false)).then_some(()),
    );
    let stopped = t0.elapsed();
    assert_eq!(c.primary(), Some(p), "the real primary kept its role");
    log(
        &c,
        &format!(
            "rogue primary stopped {:.1} s after its agent thawed",
            stopped.as_secs_f64()
        ),
    );
    if rejoin {
        let took = wait_rejoined(&mut c, r, p);
        log(
            &c,
            &format!("rogue primary rejoined {:.1} s later", took.as_secs_f64()),
        );
    }
}

/// The config files the harness (and `tenure demo`) write pass `tenure agent --validate-config`, run as the
/// user the agents run as.
pub fn config_validates(kind: StoreKind) {
    use tenure::demo::local::{self, NodeSpec, RunAs, StoreAddr, Timings};
    let run_as = RunAs::detect().expect("run as");
    let dir = tempfile::Builder::new()
        .prefix("tenure-e2e-config-")
        .tempdir()
        .expect("temp dir");
    if let Some((uid, gid)) = run_as.owner() {
        nix::unistd::chown(dir.path(), Some(uid), Some(gid)).expect("chown");
    }
    let store = match kind {
        StoreKind::Etcd | StoreKind::EtcdTls => StoreAddr::Etcd("127.0.0.1:2379".into()),
        StoreKind::Consul => StoreAddr::Consul("127.0.0.1:8500".into()),
    };
    let spec = NodeSpec {
        scope: "e2e".into(),
        name: "n1".into(),
        dir: dir.path().join("n1"),
        pg_port: 5432,
        api_port: 8008,
        store,
        timings: Timings::FAST,
        postgresql_extra: String::new(),
        initdb_extra: String::new(),
        dcs_extra: String::new(),
        extra: String::new(),
    };
    spec.prepare(run_as.owner()).expect("config");
    let bin = env!("CARGO_BIN_EXE_tenure");
    let mut cmd = match run_as {
        RunAs::Postgres { .. } => {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--", bin]);
            c
        }
        RunAs::CurrentUser => std::process::Command::new(bin),
    };
    cmd.args(["agent", "--validate-config"])
        .arg(spec.config_path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = local::reaper().spawn(&mut cmd).expect("spawn tenure");
    let pid = child.id() as i32;
    let out = child.wait_with_output().expect("tenure --validate-config");
    local::reaper().release(pid);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("config OK"),
        "--validate-config failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

/// (g) `watchdog.mode: required` with the device pointing at the test watchdog: the primary's agent is
/// frozen (SIGSTOP, its fencing process keeps running): the watchdog fires within ttl of the last
/// keepalive, the fencing process stops PostgreSQL, and the thawed agent closes the watchdog.
pub fn watchdog_fires(kind: StoreKind) {
    use crate::support::watchdog::TestWatchdog;
    let ttl_ms = 10_000;
    let mut c = Cluster::start(kind);
    let owner = tenure::demo::local::RunAs::detect()
        .ok()
        .and_then(|r| r.owner());
    // Every node gets the watchdog; agents restart onto it, the primary last (it hands over to a replica
    // that now needs the watchdog to lead).
    let dogs: Vec<TestWatchdog> = (0..NODES)
        .map(|i| {
            let dog = TestWatchdog::start(&c.nodes[i].dir.join("watchdog"), owner);
            let path = c.nodes[i].config_path();
            let text = std::fs::read_to_string(&path).expect("read the node config");
            let with = text.replace(
                "watchdog:\n  mode: 'off'\n",
                &format!(
                    "watchdog:\n  mode: required\n  device: {}\n",
                    dog.path.display()
                ),
            );
            assert_ne!(
                with, text,
                "the node config has no `watchdog: mode: 'off'` block"
            );
            std::fs::write(&path, with).expect("write the node config");
            dog
        })
        .collect();
    let first = c.primary().expect("one primary");
    for i in others(first).chain([first]) {
        c.restart_agent(i);
        c.wait_healthy(Duration::from_secs(90));
    }
    let p = c.wait_healthy(Duration::from_secs(90));
    let armed = c.wait_until(
        "the primary to keep its watchdog alive",
        Duration::from_secs(10),
        |_| {
            let s = dogs[p].state();
            (s.armed && s.keepalives >= 2).then_some(s)
        },
    );
    log(
        &c,
        &format!(
            "{} is primary with its watchdog armed: timeout {:?} s, {} keepalives",
            c.nodes[p].name, armed.timeout_s, armed.keepalives
        ),
    );
    for r in others(p) {
        assert!(
            !dogs[r].state().armed,
            "replica {} has its watchdog armed",
            c.nodes[r].name
        );
    }
    let stopped_at = tenure::clock::monotonic().0;
    c.sigstop_agent(p);
    log(&c, &format!("SIGSTOP on {}'s agent", c.nodes[p].name));
    let fired = c.wait_until(
        "the test watchdog to fire",
        Duration::from_millis(ttl_ms + 5_000),
        |_| dogs[p].state().fired,
    );
    let pg_gone = c.wait_until(
        "the fencing process to stop PostgreSQL",
        Duration::from_millis(ttl_ms + 5_000),
        |c| c.postmaster_pid(p).is_none().then(tenure::clock::monotonic),
    );
    log(
        &c,
        &format!(
            "watchdog fired {} ms after the last keepalive (timeout {} s; agent frozen {} ms before); \
             PostgreSQL gone {} ms after the freeze",
            fired.at_ms - fired.last_keepalive_ms,
            fired.timeout_s,
            fired.at_ms.saturating_sub(stopped_at),
            pg_gone.0.saturating_sub(stopped_at)
        ),
    );
    assert!(
        fired.last_keepalive_ms <= stopped_at + 1_000,
        "a keepalive after the freeze: {fired:?}, frozen at {stopped_at}"
    );
    assert!(
        fired.timeout_s * 1_000 <= ttl_ms && fired.at_ms - fired.last_keepalive_ms <= ttl_ms,
        "the watchdog fired later than ttl after the last keepalive: {fired:?}"
    );
    let new = c.wait_until(
        "a new primary",
        FAILOVER_BUDGET + Duration::from_secs(10),
        |c| c.primary().filter(|n| *n != p),
    );
    log(&c, &format!("{} is primary", c.nodes[new].name));
    let closes = dogs[p].state().closes;
    c.sigcont_agent(p);
    c.wait_until(
        "the thawed agent to close its watchdog",
        Duration::from_secs(30),
        |_| {
            let s = dogs[p].state();
            (!s.armed && s.closes > closes).then_some(())
        },
    );
    wait_rejoined(&mut c, p, new);
    c.assert_never_two_primaries();
}

/// (i) SIGHUP: a replica's agent re-reads its file; new tags reach `GET /patroni` and the member key at
/// once, a changed REST listen address is logged as needing a restart (the API stays where it was).
pub fn sighup_reload(kind: StoreKind) {
    let mut c = Cluster::start(kind);
    let p = c.primary().expect("one primary");
    let r = others(p).next().expect("a replica");
    let path = c.nodes[r].config_path();
    let text = std::fs::read_to_string(&path).expect("read the node config");
    let old_listen = format!("  listen: 127.0.0.1:{}\n", c.nodes[r].api_port);
    assert!(text.contains(&old_listen), "no restapi listen line");
    let new_port = tenure::demo::local::free_port().expect("free port");
    let with = text.replacen(&old_listen, &format!("  listen: 127.0.0.1:{new_port}\n"), 1)
        + "tags:\n  rack: r9\n";
    std::fs::write(&path, with).expect("write the node config");
    c.kill_agent(r, Signal::SIGHUP);
    log(&c, &format!("SIGHUP to {}'s agent", c.nodes[r].name));
    c.wait_until(
        "the new tag in GET /patroni",
        Duration::from_secs(10),
        |c| (c.patroni(r)["tags"]["rack"] == "r9").then_some(()),
    );
    let agent_log = std::fs::read_to_string(c.nodes[r].agent_log()).unwrap_or_default();
    assert!(
        agent_log.contains("restart needed for restapi"),
        "the agent does not say the REST listen address needs a restart:\n{}",
        tenure::demo::local::tail(&c.nodes[r].agent_log(), 20)
    );
    assert!(
        agent_log
            .lines()
            .any(|l| l.contains("SIGHUP: config reloaded") && l.contains("tags")),
        "the agent does not say the tags changed"
    );
    assert_eq!(c.rest_get(r, "/health").0, 200, "the REST API moved");
    c.check_agents();
    c.assert_never_two_primaries();
}

/// (j) A second agent started with a running member's name (same scope, its own directory and ports)
/// exits 64 before touching PostgreSQL, naming the other agent's address.
pub fn duplicate_name(kind: StoreKind) {
    use tenure::demo::local::{self, NodeSpec, RunAs};
    let mut c = Cluster::start(kind);
    let r = 1;
    let run_as = RunAs::detect().expect("run as");
    let twin_dir = c.nodes[r].dir.with_file_name("twin");
    let twin = NodeSpec {
        dir: twin_dir.clone(),
        pg_port: local::free_port().expect("free port"),
        api_port: local::free_port().expect("free port"),
        ..c.nodes[r].clone()
    };
    twin.prepare(run_as.owner()).expect("twin config");
    let bin = env!("CARGO_BIN_EXE_tenure");
    let mut cmd = match run_as {
        RunAs::Postgres { .. } => {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--", bin]);
            c
        }
        RunAs::CurrentUser => std::process::Command::new(bin),
    };
    cmd.args(["agent", "--config"])
        .arg(twin.config_path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = local::reaper().spawn(&mut cmd).expect("spawn the twin");
    let pid = child.id() as i32;
    let until = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            local::reaper().release(pid);
            panic!("the twin agent is still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    local::reaper().release(pid);
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    log(
        &c,
        &format!("twin {} exited {status}: {}", twin.name, stderr.trim()),
    );
    assert_eq!(status.code(), Some(64), "stderr: {stderr}");
    let want = format!(
        "another agent named {} is running at http://127.0.0.1:{}/patroni",
        twin.name, c.nodes[r].api_port
    );
    assert!(stderr.contains(&want), "stderr lacks {want:?}: {stderr}");
    assert!(
        !twin.data_dir().exists(),
        "the twin touched its data directory"
    );
    c.assert_never_two_primaries();
}

/// (k) n1 and n2 carry a `bootstrap.initdb` encoding initdb refuses: whichever of them wins the bootstrap
/// race gives `initialize` up (Patroni's `cancel_initialization`), and n3 bootstraps the cluster; all three
/// then run, n1 and n2 cloned from n3. Before, a member whose bootstrap failed kept `initialize` and retried
/// for ever while the others waited (the cluster never came up when n1 or n2 won the race).
pub fn failed_bootstrap_hands_over(kind: StoreKind) {
    let broken = "    - encoding: NO_SUCH_ENCODING\n";
    let mut c = Cluster::start_full(
        kind,
        1,
        |_, addr| addr.clone(),
        |n| {
            if n.name != "n3" {
                n.initdb_extra = broken.into();
            }
        },
    );
    let p = c.primary().expect("one primary");
    assert_eq!(c.nodes[p].name, "n3", "only n3 can bootstrap");
    let failed: Vec<String> = (0..2)
        .filter(|i| {
            std::fs::read_to_string(c.nodes[*i].agent_log())
                .is_ok_and(|l| l.contains("bootstrap failed"))
        })
        .map(|i| c.nodes[i].name.clone())
        .collect();
    // n3 can win the first race itself (about one run in three): then nothing failed to hand over.
    log(&c, &format!("failed bootstraps before n3's: {failed:?}"));
    for i in others(p) {
        assert!(c.streams_from(i, p), "{} streams from n3", c.nodes[i].name);
    }
    c.assert_never_two_primaries();
}
