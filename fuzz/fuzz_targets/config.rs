//! The config file parser: YAML text (and `TENURE_*` overrides) -> typed, checked `Config`.
//!
//! Input: the file's text, optionally followed by a NUL byte and `NAME=value` lines, the environment.
//! Beyond "does not panic": a config that loads has timing the core accepts, runs with an empty `config`
//! key, writes each of its parameters as one line of `tenure.conf`, and prints (`Debug`, error messages) without panicking.
#![no_main]
use std::collections::BTreeMap;
use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (file, env) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    // The agent reads the file with `read_to_string`: only UTF-8 reaches the parser.
    let Ok(text) = std::str::from_utf8(file) else {
        return;
    };
    let env: BTreeMap<String, String> = String::from_utf8_lossy(env)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match tenure::config::parse(text, Path::new("/etc/tenure/fuzz.yml"), &env) {
        Ok(loaded) => {
            let c = &loaded.config;
            c.timing()
                .validate()
                .expect("a loaded config has timing the core accepts");
            c.check_dynamic(&serde_json::json!({}))
                .expect("a loaded config runs with an empty config key");
            // Every parameter the file gives becomes one line of tenure.conf.
            for (name, value) in &c.pg_settings().parameters {
                tenure::pg::guc::line(name, value)
                    .unwrap_or_else(|e| panic!("{name:?} = {value:?} loaded but unwritable: {e}"));
            }
            let _ = (
                c.api_url(),
                c.restapi_settings(),
                c.pg_settings(),
                c.core_config(),
            );
            let _ = format!("{c:?}");
            for w in &loaded.warnings {
                let _ = format!("{w:?}");
            }
        }
        Err(errors) => {
            let _ = errors.to_string();
        }
    }
});
