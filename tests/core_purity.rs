//! The decision core stays pure: no I/O, clock, environment, randomness or async runtime in `src/ha/`.
use std::path::Path;

/// Patterns that would let the core observe or change the world by itself.
const FORBIDDEN: &[&str] = &[
    "tokio",
    "std::fs",
    "std::net",
    "std::process",
    "std::env",
    "std::thread",
    "std::time",
    "Instant::now",
    "SystemTime",
    "rand::",
    "reqwest",
    "warp",
    "tokio_postgres",
    "etcd_client",
    "nix::",
    "println!",
    "eprintln!",
    "tracing::",
    "unsafe ",
    "static mut",
    "thread_local!",
];

/// Every `.rs` file under `dir`, in its subfolders too.
fn sources(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().and_then(|e| e.to_str()) == Some("rs") {
            found.push(path);
        }
    }
    found
}

/// What reads a clock: the shell's deadlines, wall time and the monotonic clock the fencer shares.
const CLOCK_READS: &[&str] = &["Instant::now", "SystemTime::now", "clock_gettime"];

#[test]
fn only_clock_rs_reads_the_clock() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut checked = 0;
    for path in sources(&src) {
        if path.ends_with("src/clock.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for read in CLOCK_READS {
                assert!(
                    !code.contains(read),
                    "{}:{}: `{read}` outside src/clock.rs (use crate::clock): {line}",
                    path.display(),
                    n + 1
                );
            }
        }
        checked += 1;
    }
    assert!(
        checked >= 100,
        "expected the crate's files, found {checked}"
    );
}

#[test]
fn src_ha_imports_no_io_clock_env_randomness_or_runtime() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ha");
    let mut checked = 0;
    for path in sources(&dir) {
        let text = std::fs::read_to_string(&path).expect("readable source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for bad in FORBIDDEN {
                assert!(
                    !code.contains(bad),
                    "{}:{}: `{bad}` in the pure core: {line}",
                    path.display(),
                    n + 1
                );
            }
        }
        checked += 1;
    }
    assert!(checked >= 10, "expected the core's files, found {checked}");
}

#[test]
fn the_purity_check_would_catch_an_import() {
    let line = "use std::time::Instant; let t = Instant::now();";
    assert!(FORBIDDEN.iter().any(|bad| line.contains(bad)));
}
