//! Every local step has a deadline (issue 15), against real PostgreSQL 15: a `CHECKPOINT` the checkpointer
//! never finishes, a leader that lets a client in and then never answers (the divergence check's history
//! queries, a clone from it); each step ends within its bound with a message naming it and the bound, and
//! nothing it started is left running.
#[path = "support/pg.rs"]
mod pg_support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pg_support::{eventually, PgNode};
use tenure::agent::execute::Executor;
use tenure::dcs::consul::{ConsulDcs, ConsulSettings};
use tenure::dcs::MemberRecord;
use tenure::ha::types::NodeName;
use tenure::ha::{Action, Divergence, Job, JobResult, JobStatus, Outcome};
use tenure::pg::ctl::{self, InitdbOptions, StopMode};
use tenure::pg::{rewind, Endpoint, PgSettings};

/// A server that speaks just enough of PostgreSQL's protocol to let a client in (no TLS, trust
/// authentication, the parameters libpq's tools check), then reads whatever comes and never answers: a
/// leader whose backends hang once connected (no TCP keep-alive notices that).
fn silent_leader() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            std::thread::spawn(move || {
                let _ = let_in(&mut s);
                let mut buf = [0u8; 4096];
                while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    port
}

/// Refuse TLS and GSS encryption, take the startup message, answer AuthenticationOk, the parameters and
/// ReadyForQuery.
fn let_in(s: &mut TcpStream) -> std::io::Result<()> {
    const SSL_REQUEST: u32 = 80_877_103;
    const GSSENC_REQUEST: u32 = 80_877_104;
    loop {
        let mut len = [0u8; 4];
        s.read_exact(&mut len)?;
        let mut body = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
        s.read_exact(&mut body)?;
        match body
            .get(..4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
        {
            Some(SSL_REQUEST | GSSENC_REQUEST) => s.write_all(b"N")?,
            _ => break,
        }
    }
    let mut out = vec![b'R', 0, 0, 0, 8, 0, 0, 0, 0];
    for (k, v) in [
        ("server_version", "15.4"),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
    ] {
        out.push(b'S');
        out.extend_from_slice(&((4 + k.len() + v.len() + 2) as u32).to_be_bytes());
        for part in [k, v] {
            out.extend(part.bytes());
            out.push(0);
        }
    }
    out.extend_from_slice(&[b'K', 0, 0, 0, 12, 0, 0, 0, 1, 0, 0, 0, 1]);
    out.extend_from_slice(&[b'Z', 0, 0, 0, 5, b'I']);
    s.write_all(&out)
}

/// An executor for `pg`; its store is never called here.
fn executor(pg: &PgSettings) -> Executor {
    let nobody = pg_support::free_port();
    let store = ConsulSettings::new(
        &format!("http://127.0.0.1:{nobody}"),
        "s",
        "me",
        tenure::ha::SessionStore::Consul.session_ttl_ms(10_000),
    );
    let dcs = Arc::new(ConsulDcs::new(store).expect("consul client"));
    Executor::new(dcs, pg.clone(), InitdbOptions::default())
}

fn far() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(600)
}

/// PIDs of live processes whose command line contains every one of `words`.
fn processes_with(words: &[&str]) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rfind(')')
                .is_some_and(|i| stat[i + 1..].trim_start().starts_with('Z'));
            !zombie && words.iter().all(|w| cmdline.contains(w))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_that_never_finishes_fails_within_its_deadline() {
    let node = PgNode::bootstrapped("pg1").await;
    let pg = PgSettings {
        pg_ctl_timeout_s: 3,
        ..node.settings.clone()
    };
    let mut exec = executor(&pg);
    assert_eq!(exec.run(&Action::Checkpoint, far()).await.0, Outcome::Done);
    // A checkpointer that does not run (stuck on I/O, here SIGSTOPped): CHECKPOINT waits for it.
    let postmaster = node.postmaster_pid().expect("postmaster pid");
    let checkpointer = processes_with(&["postgres: checkpointer"])
        .into_iter()
        .find(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat[stat.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .nth(1);
            ppid == Some(&postmaster.to_string())
        })
        .expect("our postmaster's checkpointer");
    kill(Pid::from_raw(checkpointer), Signal::SIGSTOP).unwrap();
    let t0 = Instant::now();
    let (outcome, _) = exec.run(&Action::Checkpoint, far()).await;
    let took = t0.elapsed();
    kill(Pid::from_raw(checkpointer), Signal::SIGCONT).unwrap();
    match outcome {
        Outcome::Failed(why) => assert!(
            why.contains("CHECKPOINT did not finish within 3000 ms"),
            "{why}"
        ),
        other => panic!("a hung CHECKPOINT must fail, not {other:?}"),
    }
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(5),
        "ended after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_queries_to_a_leader_that_never_answers_end_within_their_deadline() {
    let node = PgNode::bootstrapped("pg1").await;
    ctl::stop(&node.settings, StopMode::Fast)
        .await
        .expect("stop");
    let leader = Endpoint {
        name: NodeName::new("pg2"),
        host: "127.0.0.1".into(),
        port: silent_leader(),
    };
    let t0 = Instant::now();
    let d = rewind::check_divergence(&node.settings, &leader).await;
    let took = t0.elapsed();
    match d {
        Divergence::Unknown { why, .. } => assert!(
            why.contains("the history queries to pg2 did not finish within 5000 ms"),
            "{why}"
        ),
        other => {
            panic!("a leader that never answers must leave the check inconclusive, not {other:?}")
        }
    }
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(7),
        "ended after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_from_a_leader_that_never_answers_fails_at_the_job_bound_and_leaves_nothing_running(
) {
    let node = PgNode::new("pg3");
    let port = silent_leader();
    let mut exec = executor(&node.settings);
    exec.job_timeout_ms = 4_000;
    exec.seen.insert(
        "pg2".into(),
        MemberRecord {
            conn_url: format!("postgres://127.0.0.1:{port}/postgres"),
            ..MemberRecord::default()
        },
    );
    let clone = Job::Clone {
        from: NodeName::new("pg2"),
    };
    assert_eq!(
        exec.run(&Action::StartJob(clone.clone()), far()).await.0,
        Outcome::Done
    );
    let data_dir = node.settings.data_dir.display().to_string();
    eventually(5, "pg_basebackup to run", || async {
        (!processes_with(&["pg_basebackup", &data_dir]).is_empty()).then_some(())
    })
    .await;
    assert!(matches!(exec.job_status(), JobStatus::Running(_)));
    let t0 = Instant::now();
    let result = eventually(10, "the job to end", || {
        let status = exec.job_status();
        async move {
            match status {
                JobStatus::Finished(job, result) => Some((job, result)),
                _ => None,
            }
        }
    })
    .await;
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    match result {
        (job, JobResult::Failed(why)) if job == clone => assert!(
            why.contains("clone from pg2 did not finish within 4000 ms"),
            "{why}"
        ),
        other => panic!("a hung clone must fail at its bound, not {other:?}"),
    }
    eventually(3, "pg_basebackup (and runuser) to be gone", || async {
        processes_with(&[&data_dir]).is_empty().then_some(())
    })
    .await;
    let left = std::fs::read_dir(&node.settings.data_dir).map_or(0, |d| d.count());
    assert_eq!(left, 0, "the partial copy is removed");
}
