//! The layers hold: the crate's modules import only layers below them; in the core, type files import only type
//! files, no module imports `decide.rs`, and mutants enter by seams.
use std::path::{Path, PathBuf};

/// The bottom layer: files that only hold types (and their arithmetic); they import only each other.
const TYPE_FILES: &[&str] = &[
    "types",
    "observation",
    "action",
    "reason",
    "hooks",
    "memory",
    "config",
    "lease",
    "mutants",
];

fn ha_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ha")
}

/// Every module file directly in `src/ha/`, by name without `.rs`, with its text.
fn modules() -> Vec<(String, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(ha_dir()).expect("src/ha") {
        let path = entry.expect("readable entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a file name");
        let text = std::fs::read_to_string(&path).expect("readable source");
        found.push((name.to_string(), text));
    }
    assert!(
        found.len() >= 20,
        "expected the core's files, found {}",
        found.len()
    );
    found
}

/// The sibling modules a file names as `super::<module>` or `crate::ha::<module>`, comments aside.
fn imports(text: &str, siblings: &[String]) -> Vec<String> {
    let mut named = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        for prefix in ["super::", "crate::ha::"] {
            for (at, _) in code.match_indices(prefix) {
                let rest = &code[at + prefix.len()..];
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                let name = &rest[..end];
                if siblings.iter().any(|s| s == name) && !named.iter().any(|n| n == name) {
                    named.push(name.to_string());
                }
            }
        }
    }
    named
}

#[test]
fn type_files_import_only_type_files_and_ctx_only_them() {
    let all = modules();
    let names: Vec<String> = all.iter().map(|(n, _)| n.clone()).collect();
    for (name, text) in &all {
        let lower: &[&str] = if TYPE_FILES.contains(&name.as_str()) || name == "ctx" {
            TYPE_FILES
        } else {
            continue;
        };
        for import in imports(text, &names) {
            assert!(
                lower.contains(&import.as_str()),
                "src/ha/{name}.rs imports {import}, a layer above it (type files and ctx.rs import only type files)"
            );
        }
    }
}

#[test]
fn no_module_imports_decide_rs() {
    let all = modules();
    let names: Vec<String> = all.iter().map(|(n, _)| n.clone()).collect();
    for (name, text) in &all {
        if name == "decide" || name == "mod" {
            continue;
        }
        assert!(
            !imports(text, &names).iter().any(|i| i == "decide"),
            "src/ha/{name}.rs imports decide.rs: rule modules sit below it (Ctx and Plan are in ctx.rs)"
        );
    }
}

#[test]
fn mutants_enter_a_module_only_through_its_seam() {
    for (name, text) in modules() {
        if name == "mutants" {
            continue;
        }
        let code: Vec<&str> = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect();
        for (n, line) in code.iter().enumerate() {
            assert!(
                !line.contains(".mutant(") || line.contains("fn mutant("),
                "src/ha/{name}.rs:{}: a mutant read outside the module's seam (use `mutated`): {line}",
                n + 1
            );
        }
        let asks = code.iter().any(|l| l.contains("mutated("));
        let seam = code.iter().any(|l| l.contains("mutants::seam!("));
        assert_eq!(
            asks, seam,
            "src/ha/{name}.rs: `mutated(..)` calls and one `seam!` line go together"
        );
    }
}

/// The crate's layers, lowest first (ARCHITECTURE.md, "The layers"): a module imports only from layers below
/// its own; two modules of one layer (the adapters) do not import each other.
const CRATE_LAYERS: &[&[&str]] = &[
    &["ha", "http_body"],
    &["clock"],
    &["pg"],
    &["dcs", "pgbouncer"],
    &["api"],
    &["config"],
    &["logging", "demo"],
    &["agent"],
    &["cli"],
    &["bin"],
];

fn layer_of(module: &str) -> Option<usize> {
    CRATE_LAYERS.iter().position(|l| l.contains(&module))
}

/// The crate's top modules a file's code names (`crate::x`, `crate::{x, y::z}`, and `tenure::x` in the binary).
fn crate_imports(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut named: Vec<String> = Vec::new();
    let mut push = |name: &str| {
        if !name.is_empty() && !named.iter().any(|n| n == name) {
            named.push(name.to_string());
        }
    };
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for prefix in ["crate::", "tenure::"] {
        for (at, _) in code.match_indices(prefix) {
            if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue; // `my_crate::`, not ours
            }
            let rest = &code[at + prefix.len()..];
            let Some(group) = rest.strip_prefix('{') else {
                push(&ident(rest));
                continue;
            };
            // The first name of each comma-separated item at the group's top level.
            let (mut depth, mut start) = (0usize, 0usize);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        push(&ident(&group[start..i]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        push(&ident(&group[start..i]));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        }
    }
    named
}

/// The top module a source file belongs to: `src/pg/probe.rs` -> `pg`, `src/clock.rs` -> `clock`.
fn top_module(src: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(src).expect("a file under src");
    let first = rel.components().next().expect("a path");
    let first = first.as_os_str().to_str().expect("a UTF-8 name");
    first.trim_end_matches(".rs").to_string()
}

fn layer_violations(module: &str, text: &str) -> Vec<String> {
    let own =
        layer_of(module).unwrap_or_else(|| panic!("src/{module} is in no layer of CRATE_LAYERS"));
    crate_imports(text)
        .into_iter()
        .filter(|import| import != module && layer_of(import).is_some_and(|l| l >= own))
        .collect()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            found.extend(rust_files(&path));
        } else if path.extension().and_then(|e| e.to_str()) == Some("rs") {
            found.push(path);
        }
    }
    found
}

#[test]
fn the_crates_modules_import_only_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut checked = 0;
    for path in rust_files(&src) {
        let module = top_module(&src, &path);
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable source");
        let wrong = layer_violations(&module, &text);
        assert!(
            wrong.is_empty(),
            "{} ({module}) imports {wrong:?}: a layer above its own, or beside it (see CRATE_LAYERS)",
            path.display()
        );
        checked += 1;
    }
    assert!(
        checked >= 100,
        "expected the crate's files, found {checked}"
    );
}

#[test]
fn the_layer_check_would_catch_an_arrow_up_or_sideways() {
    assert_eq!(
        layer_violations("pg", "use crate::agent::Executor;"),
        ["agent"]
    );
    assert_eq!(
        layer_violations("api", "use crate::{ha::Millis, config::defaults};"),
        ["config"]
    );
    assert_eq!(
        layer_violations("dcs", "crate::pgbouncer::x()"),
        ["pgbouncer"]
    );
    assert!(layer_violations("agent", "use crate::{api, dcs::{Dcs, KeyLayout}, pg};").is_empty());
}
