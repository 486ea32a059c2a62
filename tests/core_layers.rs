//! The core's layers hold: type files import only type files, no module imports `decide.rs`, mutants enter by seams.
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
