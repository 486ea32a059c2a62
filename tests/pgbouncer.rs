//! The PgBouncer adapter against a real PgBouncer 1.18 and PostgreSQL 15: pause, repoint, resume; and the
//! failures (stopped, wrong password, a transaction held past the deadline) bounded by the step deadline.
#[path = "support/pg.rs"]
mod pg_support;
#[path = "support/pgbouncer.rs"]
mod pgbouncer_support;

use std::time::{Duration, Instant};

use pg_support::PgNode;
use pgbouncer_support::{PgBouncerProc, ADMIN_PASSWORD};
use tenure::pgbouncer::{PgBouncer, PoolerError, Target};

/// A client of PgBouncer's `postgres` database, as the superuser.
async fn client(pb: &PgBouncerProc, node: &PgNode) -> tokio_postgres::Client {
    let creds = &node.settings.superuser;
    let (client, conn) = tokio_postgres::Config::new()
        .host("127.0.0.1")
        .port(pb.port)
        .user(&creds.username)
        .password(&creds.password)
        .dbname("postgres")
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect through pgbouncer: {e}\n{}", pb.log()));
    tokio::spawn(conn);
    client
}

async fn server_port(c: &tokio_postgres::Client) -> u16 {
    let rows = c
        .simple_query("SELECT inet_server_port()")
        .await
        .expect("query");
    rows.iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0)?.parse().ok(),
            _ => None,
        })
        .expect("a row")
}

fn users(node: &PgNode) -> Vec<(String, String)> {
    let c = &node.settings.superuser;
    vec![(c.username.clone(), c.password.clone())]
}

fn start_pgbouncer(target: &PgNode) -> PgBouncerProc {
    let u = users(target);
    let u: Vec<(&str, &str)> = u.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    PgBouncerProc::start(target.settings.listen_port, &["postgres"], &u)
}

fn soon() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(10)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_repoints_held_client_connections_to_the_new_primary_after_a_pause() {
    let (a, b) = (
        PgNode::bootstrapped("a").await,
        PgNode::bootstrapped("b").await,
    );
    let pb = start_pgbouncer(&a);
    let admin = PgBouncer::new(pb.settings(ADMIN_PASSWORD));
    let c = client(&pb, &a).await;
    assert_eq!(server_port(&c).await, a.settings.listen_port);

    // A transaction runs: PAUSE waits for it, and a client's next query queues behind the pause.
    c.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let pausing = {
        let admin = admin.clone();
        tokio::spawn(async move { admin.pause(soon()).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !pausing.is_finished(),
        "PAUSE waits for the running transaction"
    );
    c.batch_execute("COMMIT").await.unwrap();
    pausing
        .await
        .unwrap()
        .expect("paused once the transaction ended");
    let queued = tokio::spawn(async move {
        let port = server_port(&c).await;
        (port, c)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!queued.is_finished(), "a query queues while paused");

    let started = Instant::now();
    let to_b = Target::new("127.0.0.1", b.settings.listen_port).unwrap();
    admin.route(&to_b, soon()).await.expect("route to b");
    let (port, c) = queued.await.unwrap();
    println!("repointed and resumed in {:?}", started.elapsed());
    assert_eq!(
        port, b.settings.listen_port,
        "the queued query ran on b, on the same client connection"
    );
    assert_eq!(server_port(&c).await, b.settings.listen_port);
    let dbs = admin.show_databases(soon()).await.unwrap();
    assert!(
        dbs.iter()
            .any(|(n, h, p)| n == "postgres" && h == "127.0.0.1" && *p == b.settings.listen_port),
        "SHOW DATABASES: {dbs:?}"
    );
    let file = std::fs::read_to_string(pb.databases_file()).unwrap();
    assert!(file.contains(&format!(
        "postgres = host=127.0.0.1 port={} dbname=postgres",
        b.settings.listen_port
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_pgbouncer_costs_at_most_the_step_deadline_and_says_so() {
    let a = PgNode::bootstrapped("a").await;
    let mut pb = start_pgbouncer(&a);
    let admin = PgBouncer::new(pb.settings(ADMIN_PASSWORD));
    pb.stop();
    let started = Instant::now();
    let err = admin.pause(soon()).await.expect_err("nobody answers");
    let took = started.elapsed();
    println!("pause of a stopped PgBouncer: {err} after {took:?}");
    assert!(matches!(err, PoolerError::Unreachable { .. }), "{err}");
    assert!(took <= Duration::from_millis(2_000 + 300), "{took:?}");
    let to = Target::new("127.0.0.1", a.settings.listen_port).unwrap();
    let err = admin.route(&to, soon()).await.expect_err("nobody answers");
    assert!(matches!(err, PoolerError::Unreachable { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_pgbouncer_costs_at_most_the_step_deadline() {
    use nix::sys::signal::{kill, Signal};
    let a = PgNode::bootstrapped("a").await;
    let pb = start_pgbouncer(&a);
    let admin = PgBouncer::new(pb.settings(ADMIN_PASSWORD));
    let pid = nix::unistd::Pid::from_raw(pb.child.as_ref().unwrap().id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    let started = Instant::now();
    let paused = admin.pause(soon()).await;
    let took = started.elapsed();
    let to = Target::new("127.0.0.1", a.settings.listen_port).unwrap();
    let routed = admin.route(&to, soon()).await;
    kill(pid, Signal::SIGCONT).unwrap();
    let err = paused.expect_err("a frozen PgBouncer does not answer");
    println!("pause of a frozen PgBouncer: {err} after {took:?}");
    assert!(matches!(err, PoolerError::Timeout { .. }), "{err}");
    assert!(took <= Duration::from_millis(2_000 + 300), "{took:?}");
    assert!(routed.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_admin_password_is_refused_and_reported() {
    let a = PgNode::bootstrapped("a").await;
    let pb = start_pgbouncer(&a);
    let admin = PgBouncer::new(pb.settings("not the password"));
    let started = Instant::now();
    let err = admin.pause(soon()).await.expect_err("refused");
    println!(
        "pause with a wrong password: {err} after {:?}",
        started.elapsed()
    );
    assert!(matches!(err, PoolerError::Refused { .. }), "{err}");
    assert!(started.elapsed() <= Duration::from_millis(4_500));
    assert!(
        !err.to_string().contains("not the password"),
        "no password in the message"
    );
    // PgBouncer was not paused: clients go on.
    let c = client(&pb, &a).await;
    assert_eq!(server_port(&c).await, a.settings.listen_port);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_held_past_the_deadline_fails_the_pause_and_leaves_pgbouncer_running() {
    let a = PgNode::bootstrapped("a").await;
    let pb = start_pgbouncer(&a);
    let mut settings = pb.settings(ADMIN_PASSWORD);
    settings.step_timeout_ms = 500;
    let admin = PgBouncer::new(settings);
    let holder = client(&pb, &a).await;
    holder.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let started = Instant::now();
    let err = admin
        .pause(soon())
        .await
        .expect_err("the transaction stays open");
    let took = started.elapsed();
    println!("pause past a held transaction: {err} after {took:?}");
    assert!(matches!(err, PoolerError::Timeout { .. }), "{err}");
    assert!(took < Duration::from_millis(800), "{took:?}");
    // Resumed again: a new client is served while the holder still holds its transaction.
    let other = client(&pb, &a).await;
    let served = tokio::time::timeout(Duration::from_secs(3), server_port(&other)).await;
    assert_eq!(served.expect("served, not queued"), a.settings.listen_port);
    holder.batch_execute("COMMIT").await.unwrap();
}

#[test]
fn a_target_that_would_add_a_line_or_an_option_to_the_file_is_refused() {
    for host in [
        "10.0.0.1\nevil = host=x",
        "a port=1",
        "a'b",
        "",
        "-x",
        "a=b",
    ] {
        let err = Target::new(host, 5432).expect_err(host);
        assert!(
            matches!(err, PoolerError::BadTarget { .. }),
            "{host:?}: {err}"
        );
    }
    assert!(Target::new("db-1.example.com", 5432).is_ok());
    assert!(Target::new("::1", 5432).is_ok());
    assert!(Target::new("10.0.0.1", 0).is_err());
}
