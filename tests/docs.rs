//! The manual: prose lines, links and anchors, the book's contents, every YAML example through
//! `tenure agent --validate-config`, the book's build; the reference pages and alert rules in `docs/`.
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

#[path = "docs/architecture.rs"]
mod architecture;
#[path = "api/harness.rs"]
#[allow(dead_code)]
mod harness;
#[path = "docs/md.rs"]
mod md;
#[path = "docs/monitoring.rs"]
mod monitoring;
#[path = "docs/reference.rs"]
mod reference;

use md::{blocks, lines, links, manual_files, read, root};

/// Table rows count too (a long cell belongs in a note under the table); code is exempt, copied as written.
const MAX_PROSE: usize = 200;

#[test]
fn no_prose_line_is_over_200_characters() {
    let mut long = Vec::new();
    for f in manual_files() {
        for l in lines(&read(&f)) {
            let n = l.text.chars().count();
            if !l.in_code && n > MAX_PROSE {
                long.push(format!(
                    "{f}:{}: {n} characters; wrap it (one sentence per line), or shorten the table cell",
                    l.number
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "prose lines over {MAX_PROSE} characters:\n{}",
        long.join("\n")
    );
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut files = manual_files();
    files.push("bench/README.md".into());
    let mut broken = Vec::new();
    for f in &files {
        let dir = root().join(f).parent().unwrap().to_path_buf();
        for (line, target) in links(&read(f)) {
            if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                root().join(f)
            } else {
                dir.join(path)
            };
            if !file.exists() {
                broken.push(format!(
                    "{f}:{line}: `{target}`: no file {}",
                    file.display()
                ));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if !md::anchors(&text).iter().any(|a| a == anchor) {
                broken.push(format!(
                    "{f}:{line}: `{target}`: no heading with anchor #{anchor}"
                ));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_book_lists_every_page() {
    let summary = read("docs/SUMMARY.md");
    let listed: BTreeSet<String> = links(&summary).into_iter().map(|(_, t)| t).collect();
    let missing: Vec<String> = manual_files()
        .into_iter()
        .filter_map(|f| f.strip_prefix("docs/").map(str::to_string))
        .filter(|f| f != "SUMMARY.md" && !listed.contains(f))
        .collect();
    assert!(
        missing.is_empty(),
        "pages missing from docs/SUMMARY.md (add a line `- [Title](page.md)`): {missing:?}"
    );
}

/// Merge `over` into `base`, mappings key by key. A file has one store section, so a fragment's `consul` or
/// `etcd3` replaces the base's.
fn merge_fragment(base: &mut yaml_serde::Value, over: yaml_serde::Value) {
    if let (yaml_serde::Value::Mapping(b), yaml_serde::Value::Mapping(o)) = (&mut *base, &over) {
        if o.contains_key("consul") || o.contains_key("etcd3") {
            b.remove("consul");
            b.remove("etcd3");
        }
    }
    merge(base, over);
}

fn merge(base: &mut yaml_serde::Value, over: yaml_serde::Value) {
    match (base, over) {
        (yaml_serde::Value::Mapping(b), yaml_serde::Value::Mapping(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// The base a `yaml fragment` block is merged over: README.md's example, a whole config.
fn base_config() -> yaml_serde::Value {
    let readme = read("README.md");
    let block = blocks(&readme)
        .into_iter()
        .find(|b| b.info == "yaml")
        .expect("README.md has a yaml example");
    yaml_serde::from_str(&block.text).unwrap()
}

fn validate(file: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["agent", "--validate-config"])
        .arg(file)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// ```` ```yaml ```` is a whole config file; ```` ```yaml fragment ```` is part of one, checked merged over
/// README.md's example. No other YAML info string is allowed, so no example escapes the check.
#[test]
fn every_yaml_example_passes_validate_config() {
    let dir = tempfile::tempdir().unwrap();
    let mut failed = Vec::new();
    let mut checked = 0;
    for f in manual_files() {
        for (i, b) in blocks(&read(&f)).into_iter().enumerate() {
            let doc = match b.info.as_str() {
                "yaml" => b.text.clone(),
                "yaml fragment" => {
                    let mut base = base_config();
                    match yaml_serde::from_str::<yaml_serde::Value>(&b.text) {
                        Ok(v) => merge_fragment(&mut base, v),
                        Err(e) => {
                            failed.push(format!("{f}:{}: not YAML: {e}", b.line));
                            continue;
                        }
                    }
                    yaml_serde::to_string(&base).unwrap()
                }
                other if other.starts_with("yaml") || other == "yml" => {
                    failed.push(format!(
                        "{f}:{}: info string `{other}`: use `yaml` or `yaml fragment`",
                        b.line
                    ));
                    continue;
                }
                _ => continue,
            };
            let file = dir.path().join(format!("{}-{i}.yml", f.replace('/', "_")));
            std::fs::write(&file, &doc).unwrap();
            let (ok, text) = validate(&file);
            checked += 1;
            if !ok {
                failed.push(format!("{f}:{} ({}): {}", b.line, b.info, text.trim()));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "YAML examples that fail `tenure agent --validate-config`:\n{}",
        failed.join("\n")
    );
    assert!(checked >= 5, "only {checked} YAML examples found");
}

/// The check above must be able to fail: a typo in a key is refused.
#[test]
fn validate_config_refuses_a_misspelt_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut base = base_config();
    merge(
        &mut base,
        yaml_serde::from_str("postgresql: {data_dri: /x}").unwrap(),
    );
    let file = dir.path().join("bad.yml");
    std::fs::write(&file, yaml_serde::to_string(&base).unwrap()).unwrap();
    let (ok, text) = validate(&file);
    assert!(!ok && text.contains("postgresql.data_dri"), "{text}");
}

/// Run a tool the CI machine has from `scripts/install-deps`; a missing tool fails, never skips.
pub fn run_tool(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool} ({e}): scripts/install-deps installs it"));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{tool} {args:?} failed:\n{text}");
    text
}

#[test]
fn the_book_builds() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let text = run_tool("mdbook", &["build", "docs", "--dest-dir", out]);
    assert!(
        !text.contains("WARN") && !text.contains("ERROR"),
        "mdbook warned:\n{text}"
    );
    let bench = std::fs::read_to_string(dir.path().join("benchmarks.html")).unwrap();
    assert!(
        bench.contains("Patroni"),
        "bench/README.md is not included in benchmarks.html"
    );
}
