//! Hardening against local attackers on real PostgreSQL 15: child environments, passwords in the server
//! log, the peer SQL probe's credentials, outbound HTTP and proxies (issue 13).
#[path = "support/pg.rs"]
mod pg_support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use pg_support::PgNode;
use tenure::dcs::consul::{ConsulDcs, ConsulSettings};
use tenure::dcs::{Dcs, MemberRecord};
use tenure::ha::types::NodeName;
use tenure::ha::PgRole;
use tenure::pg::ctl::{self, InitdbOptions};

/// Connections the hostile proxy accepted.
static PROXIED: AtomicUsize = AtomicUsize::new(0);

/// The environment every test here runs in, set once before any test spawns a child or builds a
/// client: secrets in `TENURE_*` variables and every proxy variable pointing at a listener we count.
fn hostile_env() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let proxy = TcpListener::bind(("127.0.0.1", pg_support::free_port())).unwrap();
        let url = format!("http://{}", proxy.local_addr().unwrap());
        std::thread::spawn(move || {
            for conn in proxy.incoming() {
                PROXIED.fetch_add(1, Ordering::SeqCst);
                drop(conn);
            }
        });
        std::env::set_var("TENURE_SUPERUSER_PASSWORD", "env-secret-1");
        std::env::set_var("TENURE_RESTAPI_PASSWORD", "env-secret-2");
        for var in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            std::env::set_var(var, &url);
        }
        for var in ["NO_PROXY", "no_proxy"] {
            std::env::remove_var(var);
        }
    });
}

/// A one-shot member REST API answering `/patroni` as a running primary; counts its requests.
fn fake_member_api(hits: &'static AtomicUsize) -> String {
    let listener = TcpListener::bind(("127.0.0.1", pg_support::free_port())).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            hits.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let body =
                r#"{"role":"primary","state":"running","timeline":3,"xlog":{"location":42}}"#;
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}/patroni")
}

async fn bootstrap(node: &PgNode) {
    ctl::bootstrap(&node.settings, &InitdbOptions::default())
        .await
        .unwrap_or_else(|e| panic!("bootstrap: {e}\n{}", node.log()));
}

/// One node started through the agent's code path with `TENURE_*` secrets in the environment and
/// `log_statement = all`: the postmaster's environment holds no `TENURE_` variable, and neither the
/// replication nor the rewind password reaches the server log although the roles were created with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_the_postmaster_environment_or_the_server_log() {
    hostile_env();
    let mut node = PgNode::new("hard-a");
    let s = &mut node.settings;
    s.parameters.insert("log_statement".into(), "all".into());
    s.parameters
        .insert("log_min_duration_statement".into(), "0".into());
    s.replication.password = "repl-pw-XYZZY-1".into();
    s.rewind.password = "rewind-pw-XYZZY-2".into();
    bootstrap(&node).await;

    let pid = node.postmaster_pid().expect("postmaster.pid");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("read environ");
    let vars: Vec<String> = environ
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .filter(|v| v.starts_with("TENURE_"))
        .collect();
    assert!(vars.is_empty(), "the postmaster inherited {vars:?}");

    // Run the role statements once more on a running server (the update path), then read the log.
    ctl::create_roles(&node.settings)
        .await
        .expect("create_roles");
    let log = node.log();
    assert!(
        log.contains("statement:"),
        "log_statement = all logged nothing: the check below would prove nothing\n{log}"
    );
    for pw in ["repl-pw-XYZZY-1", "rewind-pw-XYZZY-2"] {
        assert!(
            !log.contains(pw),
            "the password {pw} is in the server log:\n{log}"
        );
    }
}

/// The peer SQL probe (used when a member's REST API does not answer) authenticates with a password
/// holding a space, a backslash and a quote; before the fix the unquoted conninfo broke it and the probe
/// reported nothing, which silently disabled the "a peer is still primary" check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_sql_probe_works_with_a_password_holding_a_space_and_a_backslash() {
    hostile_env();
    let mut node = PgNode::new("hard-b");
    node.settings.superuser.password = r"pa ss\word 'q".into();
    bootstrap(&node).await;
    let s = &node.settings;
    let member = MemberRecord {
        conn_url: format!("postgres://127.0.0.1:{}/postgres", s.listen_port),
        // No REST API: the probe must fall back to SQL.
        api_url: String::new(),
        ..MemberRecord::default()
    };
    let client = reqwest::Client::new();
    let creds = s.superuser.clone();
    let probes = tenure::agent::peers::probe_all(
        &client,
        &[("peer".into(), member)],
        &NodeName::new("me"),
        creds,
    )
    .await;
    assert_eq!(probes.len(), 1);
    let answer = probes[0].answer.as_ref().expect("the SQL probe answered");
    assert_eq!(answer.role, Some(PgRole::Primary));
}

/// With every proxy variable pointing at a listener we control, neither the peer REST client nor the
/// Consul client connects to it: the peer's `/patroni` is fetched directly, and the Consul request goes
/// to the configured address (where nothing listens) instead of through the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_clients_ignore_proxies_from_the_environment() {
    static MEMBER_HITS: AtomicUsize = AtomicUsize::new(0);
    hostile_env();
    let api = tenure::api::RestApiSettings::new("127.0.0.1:1".parse().unwrap());
    let client = tenure::agent::peers::client(&api).expect("peer client");
    let member = MemberRecord {
        api_url: fake_member_api(&MEMBER_HITS),
        ..MemberRecord::default()
    };
    let probes = tenure::agent::peers::probe_all(
        &client,
        &[("peer".into(), member)],
        &NodeName::new("me"),
        tenure::pg::Credentials {
            username: "postgres".into(),
            password: "unused".into(),
            ssl: Default::default(),
        },
    )
    .await;
    let answer = probes[0].answer.as_ref().expect("the REST probe answered");
    assert_eq!((answer.role, answer.lsn.0), (Some(PgRole::Primary), 42));
    assert_eq!(MEMBER_HITS.load(Ordering::SeqCst), 1);

    let nobody = pg_support::free_port();
    let mut settings = ConsulSettings::new(
        &format!("http://127.0.0.1:{nobody}"),
        "s",
        "me",
        tenure::ha::SessionStore::Consul.session_ttl_ms(10_000),
    );
    settings.token = Some("consul-token".into());
    let consul = ConsulDcs::new(settings).expect("consul client");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    assert!(consul.get_cluster(false, deadline).await.is_err());
    assert_eq!(
        PROXIED.load(Ordering::SeqCst),
        0,
        "a request went through the proxy"
    );
}

/// A fence whose fencer runs the tenure binary (this test's own executable is not tenure).
fn fence_for(data_dir: &std::path::Path) -> tenure::agent::fence::Fence {
    tenure::agent::fence::Fence::with_program(data_dir, env!("CARGO_BIN_EXE_tenure").as_ref())
}

/// An expired deadline: the fencer acts on its first look.
fn expired() -> tenure::ha::types::Millis {
    tenure::ha::types::Millis(tenure::clock::monotonic().0 - 1)
}

fn sleeper() -> std::process::Child {
    std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap()
}

/// Poll every 100 ms for up to `timeout_ms`.
fn within(timeout_ms: u64, mut check: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms);
    while std::time::Instant::now() < until {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    check()
}

/// Two attacks on the fence of a running primary at once. A stale `<data_dir>.fence.pid` names a live
/// process that is no fencer: the agent used to take it for one and start none, so fencing was off.
/// And a `standby.signal` created under the running primary (what `COPY '' TO 'standby.signal'` does):
/// the fencer used to take it as proof of a standby and leave the primary running. Both fail to disarm
/// the fence now: the postmaster is gone shortly after the (already expired) deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_pid_file_and_a_planted_standby_signal_do_not_disarm_the_fencer() {
    hostile_env();
    let node = PgNode::new("hard-c");
    bootstrap(&node).await;
    let s = &node.settings;
    let pid = node.postmaster_pid().expect("postmaster.pid");
    std::fs::write(s.data_dir.join("standby.signal"), "").unwrap();
    let mut decoy = sleeper();
    let mut fence = fence_for(&s.data_dir);
    // Where the agent writes its fencer's PID for operators and harnesses.
    let mut pid_file = s.data_dir.as_os_str().to_owned();
    pid_file.push(".fence.pid");
    std::fs::write(&pid_file, format!("{}\n", decoy.id())).unwrap();

    fence.arm(expired()).expect("arm");
    let fenced = within(5_000, || {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
            || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|t| t.contains(") Z"))
    });
    fence.disarm().unwrap();
    fence.stop_process();
    assert!(
        decoy.try_wait().unwrap().is_none(),
        "the decoy was signalled"
    );
    let _ = decoy.kill();
    assert!(fenced, "the primary survived its expired fence");
}

/// `postmaster.pid` names a live process that is not a postmaster (a stale file after a crash and PID
/// reuse, or a file someone wrote): the fencer does not signal it. And the fencer ends when told to
/// through the file, its lock then free for the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fencer_never_signals_a_process_that_is_not_the_postmaster() {
    hostile_env();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    let mut victim = sleeper();
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // Even the start time matches: only the executable and working directory tell it apart.
    std::fs::write(
        data_dir.join("postmaster.pid"),
        format!("{}\n{}\n{now_s}\n5432\n", victim.id(), data_dir.display()),
    )
    .unwrap();
    let mut fence = fence_for(&data_dir);
    fence.arm(expired()).expect("arm");
    let lock = {
        let mut p = fence.file().as_os_str().to_owned();
        p.push(".lock");
        std::path::PathBuf::from(p)
    };
    let locked = || {
        // The fencer creates its lock file: none yet is no fencer yet.
        std::fs::File::open(&lock).is_ok_and(|f| {
            nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).is_err()
        })
    };
    assert!(within(3_000, locked), "no fencer holds the lock");
    std::thread::sleep(std::time::Duration::from_millis(1_000));
    let survived = victim.try_wait().unwrap().is_none();
    fence.disarm().unwrap();
    fence.stop_process();
    let ended = within(3_000, || !locked());
    let _ = victim.kill();
    assert!(
        survived,
        "the fencer signalled a process that is not the postmaster"
    );
    assert!(ended, "the fencer did not end after stop_process");
}

/// The other side of the standby rule: a real standby under an expired fence (a restarted agent that has
/// not stood its predecessor's fence down) is left alone, both while it starts (its copied pg_control
/// still says "in production"; `standby.signal` predates the postmaster) and once its `standby.signal`
/// is rewritten while it runs (pg_control then says archive recovery). Checked: with the pg_control rule
/// removed this test fails ("the fencer stopped a standby"); with the start-time rule removed it still
/// passed here, the start window being shorter than the fencer's 20 ms poll on this machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_standby_under_an_expired_fence_is_left_alone() {
    use tenure::pg::recovery::{self, StandbyConfig};
    hostile_env();
    let (a, b) = (PgNode::new("hard-d"), PgNode::new("hard-e"));
    bootstrap(&a).await;
    let sb = &b.settings;
    let nobody = StandbyConfig {
        upstream: None,
        slot: None,
        remote: None,
    };
    ctl::basebackup(sb, &a.endpoint(), &nobody)
        .await
        .expect("basebackup");
    let mut fence = fence_for(&sb.data_dir);
    fence.arm(expired()).expect("arm");
    ctl::start(sb)
        .await
        .unwrap_or_else(|e| panic!("start b: {e}\n{}", b.log()));
    let pid = b.postmaster_pid().expect("postmaster.pid");
    recovery::reconfigure_upstream(sb, &StandbyConfig::follow(sb, a.endpoint()))
        .await
        .expect("reconfigure");
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
    fence.disarm().unwrap();
    fence.stop_process();
    assert!(alive, "the fencer stopped a standby\n{}", b.log());
}

/// An agent exits (its fencer told to end through the file) and a new one arms at once: the new agent
/// sees the lock held and starts no fencer, so the old one must stay; a fencer still holds the lock a
/// second later. The narrow race behind `leave_or_stay` (the fencer reads `exit`, the agent writes
/// `armed` and try-locks, then the fencer's exit frees the lock: nobody watches) lasts microseconds and
/// is not hit here: this test passed before that fix too. It checks the common ordering stays watched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fencer_told_to_exit_stays_when_a_new_agent_arms_at_once() {
    hostile_env();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    let far = tenure::ha::types::Millis(tenure::clock::monotonic().0 + 600_000);
    let mut old = fence_for(&data_dir);
    old.arm(far).expect("arm");
    let mut lock = old.file().as_os_str().to_owned();
    lock.push(".lock");
    let locked = || {
        // The fencer creates its lock file: none yet is no fencer yet.
        std::fs::File::open(&lock).is_ok_and(|f| {
            nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).is_err()
        })
    };
    assert!(within(3_000, locked), "no fencer holds the lock");
    old.disarm().unwrap();
    old.stop_process();
    let mut new = fence_for(&data_dir);
    new.arm(far).expect("arm");
    std::thread::sleep(std::time::Duration::from_millis(1_000));
    let watched = locked();
    new.disarm().unwrap();
    new.stop_process();
    assert!(watched, "no fencer watches the newly armed fence");
}

/// Whether the postmaster `pid` is gone (or a zombie) within `timeout_ms`.
fn gone_within(pid: i32, timeout_ms: u64) -> bool {
    within(timeout_ms, || {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
            || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|t| t.contains(") Z"))
    })
}

/// A FIFO in place of `postmaster.pid` (issue 29 item 3): the fencer used to block reading it forever
/// and leave the primary running; it now opens it `O_NONBLOCK`, reads regular files only, finds the
/// postmaster in `/proc` (working in the data directory) and fences in time. Seen failing before the
/// fix: "the primary survived its expired fence behind a FIFO".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_at_postmaster_pid_does_not_block_the_fencer() {
    hostile_env();
    let node = PgNode::new("hard-f");
    bootstrap(&node).await;
    let s = &node.settings;
    let pid = node.postmaster_pid().expect("postmaster.pid");
    let pid_file = s.data_dir.join("postmaster.pid");
    let saved = std::fs::read(&pid_file).unwrap();
    std::fs::remove_file(&pid_file).unwrap();
    nix::unistd::mkfifo(&pid_file, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut fence = fence_for(&s.data_dir);
    fence.arm(expired()).expect("arm");
    let fenced = gone_within(pid, 5_000);
    fence.disarm().unwrap();
    fence.stop_process();
    // Never leave a FIFO where the harness reads (it would block there).
    // (An immediate shutdown removes it itself.)
    let _ = std::fs::remove_file(&pid_file);
    if !fenced {
        std::fs::write(&pid_file, saved).unwrap();
    }
    assert!(
        fenced,
        "the primary survived its expired fence behind a FIFO"
    );
}

/// The fencer's lock file replaced by a link (to a file standing in for one of root's): the fencer used
/// to fail to open it and exit, so no fencer ran at all. It now removes the entry itself, makes its own
/// with `O_EXCL`, and fences; the link's target is untouched. Seen failing before the fix: "the primary
/// survived its expired fence" (the fencer exited: cannot open ... .lock: Too many levels of symbolic
/// links).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_at_the_fencer_lock_does_not_disable_it() {
    hostile_env();
    let node = PgNode::new("hard-g");
    bootstrap(&node).await;
    let s = &node.settings;
    let pid = node.postmaster_pid().expect("postmaster.pid");
    let target = node.dir.path().join("precious");
    std::fs::write(&target, "root's").unwrap();
    let mut fence = fence_for(&s.data_dir);
    fence.disarm().unwrap();
    let mut lock = fence.file().as_os_str().to_owned();
    lock.push(".lock");
    let _ = std::fs::remove_file(&lock);
    std::os::unix::fs::symlink(&target, &lock).unwrap();
    fence.arm(expired()).expect("arm");
    let fenced = gone_within(pid, 5_000);
    fence.disarm().unwrap();
    fence.stop_process();
    assert!(fenced, "the primary survived its expired fence");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "root's");
}

/// The data directory's parent renamed while the fence is armed: the fencer used to take a missing parent
/// for "the cluster is gone" and exit without fencing. It holds the directories open now, and finds the
/// postmaster by the inode it works in: the primary is stopped at its deadline. Seen failing before the
/// fix: "the primary outlived its deadline after the parent was renamed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renaming_the_data_directorys_parent_does_not_stop_the_fencer() {
    hostile_env();
    let node = PgNode::new("hard-h");
    bootstrap(&node).await;
    let s = &node.settings;
    let pid = node.postmaster_pid().expect("postmaster.pid");
    let mut fence = fence_for(&s.data_dir);
    let soon = tenure::ha::types::Millis(tenure::clock::monotonic().0 + 1_500);
    fence.arm(soon).expect("arm");
    let root = node.dir.path().to_path_buf();
    let moved = root.with_extension("moved");
    std::thread::sleep(std::time::Duration::from_millis(300)); // the fencer has started and opened them
    std::fs::rename(&root, &moved).unwrap();
    let fenced = gone_within(pid, 6_000);
    std::fs::rename(&moved, &root).unwrap();
    fence.disarm().unwrap();
    fence.stop_process();
    assert!(
        fenced,
        "the primary outlived its deadline after the parent was renamed"
    );
}

/// A primary's `pg_control` written over to say "in archive recovery" (what a database superuser can do
/// with `COPY ... TO`), with a `standby.signal` beside it: the fencer used to read the state without the
/// CRC and take it for a standby. The CRC does not match, so it is not trusted and the primary is fenced.
/// Seen failing before the fix: "a pg_control without its CRC disarmed the fence".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_control_without_its_crc_is_not_trusted() {
    hostile_env();
    let node = PgNode::new("hard-i");
    bootstrap(&node).await;
    let s = &node.settings;
    let pid = node.postmaster_pid().expect("postmaster.pid");
    let control = s.data_dir.join("global/pg_control");
    let mut bytes = std::fs::read(&control).unwrap();
    bytes[16..20].copy_from_slice(&5i32.to_ne_bytes()); // DB_IN_ARCHIVE_RECOVERY
    std::fs::write(&control, &bytes).unwrap();
    std::fs::write(s.data_dir.join("standby.signal"), "").unwrap();
    let mut fence = fence_for(&s.data_dir);
    fence.arm(expired()).expect("arm");
    let fenced = gone_within(pid, 5_000);
    fence.disarm().unwrap();
    fence.stop_process();
    assert!(fenced, "a pg_control without its CRC disarmed the fence");
}
