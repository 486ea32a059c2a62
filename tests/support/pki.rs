//! A throwaway PKI for TLS tests (the REST API, the Consul test double's HTTPS, etcd over https), made with
//! the openssl CLI.
use std::path::{Path, PathBuf};
use std::process::Command;

/// The files of one test PKI, written by [`pki`]; they live as long as `dir`.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Pki {
    /// A client certificate signed by this PKI's CA with `CN=<cn>` (what `clientcert=verify-full` matches
    /// against the role name): `(cert, key)` in `dir`.
    pub fn client_for(&self, cn: &str) -> (PathBuf, PathBuf) {
        let name = format!("client-{cn}");
        issue(
            self.dir.path(),
            &name,
            &format!("/CN={cn}"),
            "extendedKeyUsage=clientAuth\n",
        );
        let p = |ext: &str| self.dir.path().join(format!("{name}.{ext}"));
        (p("pem"), p("key"))
    }

    /// [`Pki::generate`] with client certificates for `cns` too, running openssl without tenure's
    /// process-wide reaper: for test binaries that reap their own children (`support/pg.rs`), where that
    /// reaper would take the exit statuses of PostgreSQL binaries from under their waits. Call it before
    /// any node starts.
    pub fn generate_plain(cns: &[&str]) -> (Pki, Vec<(PathBuf, PathBuf)>) {
        PLAIN.with(|p| p.set(true));
        let pki = Pki::generate();
        let clients = cns.iter().map(|cn| pki.client_for(cn)).collect();
        PLAIN.with(|p| p.set(false));
        (pki, clients)
    }

    /// A fresh PKI in a temporary directory.
    pub fn generate() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        pki(dir.path());
        let p = |name: &str| dir.path().join(name);
        Pki {
            ca: p("ca.pem"),
            server_cert: p("server.pem"),
            server_key: p("server.key"),
            client_cert: p("client.pem"),
            client_key: p("client.key"),
            dir,
        }
    }
}

/// A CA (`ca.pem`), a server certificate for 127.0.0.1 (`server.pem`, `server.key`) and a client
/// certificate (`client.pem`, `client.key`) in `dir`. Needs the openssl CLI (`scripts/install-deps` installs it).
pub fn pki(dir: &Path) {
    if let Err(e) = openssl(dir, &["version"]) {
        panic!("cannot run openssl ({e}): install it (scripts/install-deps does)");
    }
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=tenure test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    run(dir, &ca);
    issue(
        dir,
        "server",
        "/CN=server",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    issue(dir, "client", "/CN=client", "extendedKeyUsage=clientAuth\n");
}

thread_local! {
    /// Set by [`Pki::generate_plain`] on its thread.
    static PLAIN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `openssl <args>` in `dir`, waited for past tenure's reaper when it runs in this process: a plain
/// `Command::output` there can lose the exit status to the reaper and fail with ECHILD (CI, 12-03: the
/// `openssl version` check failed so under parallel etcd_tls cases and was reported as "openssl not found").
fn openssl(dir: &Path, args: &[&str]) -> std::io::Result<std::process::Output> {
    let mut cmd = Command::new("openssl");
    cmd.args(args).current_dir(dir);
    if PLAIN.with(|p| p.get()) {
        cmd.output()
    } else {
        tenure::demo::local::reaper().output(&mut cmd)
    }
}

fn run(dir: &Path, args: &[&str]) {
    let out = openssl(dir, args).unwrap_or_else(|e| panic!("openssl {args:?}: {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `<name>.pem` and `<name>.key` in `dir`: a P-256 key and a certificate for `subj` with the extensions
/// `ext`, signed by `ca.pem`/`ca.key` there.
fn issue(dir: &Path, name: &str, subj: &str, ext: &str) {
    std::fs::write(
        dir.join(format!("{name}.ext")),
        format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n{ext}"),
    )
    .unwrap();
    let (key, csr, pem, extfile) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.ext"),
    );
    run(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            subj,
        ],
    );
    run(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "1",
            "-extfile",
            &extfile,
        ],
    );
}
