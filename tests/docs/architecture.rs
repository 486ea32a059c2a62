//! ARCHITECTURE.md's module map: one line per module or folder, at most 120 characters, naming only paths that
//! exist, and together covering every source file.
use std::path::Path;

use crate::md::{read, root};

const MAX_MAP_LINE: usize = 120;

/// One line of the map: its line number, its text, and the paths it names before its first ": ".
struct Entry {
    line: usize,
    text: String,
    paths: Vec<String>,
}

/// The `- ` lines under "## Module map". A bare name (`mod.rs`) is relative to the folder of the path before it
/// on the line, or to the folder a group's heading line names ("The core, `src/ha/`:").
fn map_entries() -> Vec<Entry> {
    let text = read("ARCHITECTURE.md");
    let (mut in_map, mut folder, mut out) = (false, String::new(), Vec::new());
    for (i, l) in text.lines().enumerate() {
        if l.starts_with("## ") {
            in_map = l == "## Module map";
            continue;
        }
        let Some(item) = l.strip_prefix("- ").filter(|_| in_map) else {
            if in_map && !l.trim().is_empty() {
                folder = l
                    .split('`')
                    .nth(1)
                    .filter(|f| f.ends_with('/'))
                    .unwrap_or("")
                    .to_string();
            }
            continue;
        };
        let head = item.split(": ").next().unwrap_or("");
        let (mut base, mut paths) = (folder.clone(), Vec::new());
        for name in head.split('`').skip(1).step_by(2) {
            let full = if name.starts_with("src/") || name.starts_with("tests/") {
                name.to_string()
            } else {
                format!("{base}{name}")
            };
            base = full[..full.trim_end_matches('/').rfind('/').map_or(0, |n| n + 1)].to_string();
            paths.push(full);
        }
        out.push(Entry {
            line: i + 1,
            text: l.to_string(),
            paths,
        });
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(
                p.strip_prefix(root())
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
}

#[test]
fn module_map_has_one_short_line_per_module_naming_paths_that_exist() {
    let entries = map_entries();
    assert!(
        entries.len() >= 50,
        "ARCHITECTURE.md's \"## Module map\" should list one `- ` line per module; found {}",
        entries.len()
    );
    let mut bad = Vec::new();
    for e in &entries {
        let n = e.text.chars().count();
        if n > MAX_MAP_LINE {
            bad.push(format!(
                "ARCHITECTURE.md:{}: {n} characters (at most {MAX_MAP_LINE})",
                e.line
            ));
        }
        if e.paths.is_empty() {
            bad.push(format!(
                "ARCHITECTURE.md:{}: names no path before its \": \"",
                e.line
            ));
        }
        for p in e.paths.iter().filter(|p| !root().join(p).exists()) {
            bad.push(format!("ARCHITECTURE.md:{}: `{p}` does not exist", e.line));
        }
    }
    assert!(bad.is_empty(), "module map:\n{}", bad.join("\n"));
}

#[test]
fn module_map_covers_every_source_file() {
    let named: Vec<String> = map_entries().into_iter().flat_map(|e| e.paths).collect();
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !f.ends_with("_tests.rs"))
        .filter(|f| {
            !named
                .iter()
                .any(|p| p == *f || (p.ends_with('/') && f.starts_with(p.as_str())))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "source files on no line of ARCHITECTURE.md's module map (name the file, or its folder):\n{missing:?}"
    );
}
