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

#[test]
fn src_ha_imports_no_io_clock_env_randomness_or_runtime() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ha");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("src/ha exists") {
        let path = entry.expect("readable entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
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
