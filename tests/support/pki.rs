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
    assert!(
        Command::new("openssl").arg("version").output().is_ok(),
        "openssl not found: install it (scripts/install-deps does)"
    );
    let run = |args: &[&str]| {
        let out = tenure::demo::local::reaper()
            .output(Command::new("openssl").args(args).current_dir(dir))
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
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
    run(&ca);
    for (name, ext) in [
        (
            "server",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        ),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ] {
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
        let subj = format!("/CN={name}");
        let mut req = vec!["req"];
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        run(&req);
        run(&[
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
        ]);
    }
}
