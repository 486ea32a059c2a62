//! Markdown reading for the manual's tests: which files, code blocks, table rows under their headings, links.
use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// README.md, ARCHITECTURE.md and every page under docs/ (relative to the root), sorted.
pub fn manual_files() -> Vec<String> {
    let mut out = vec!["README.md".to_string(), "ARCHITECTURE.md".to_string()];
    let mut stack = vec![root().join("docs")];
    let mut docs = Vec::new();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "md") {
                docs.push(rel(&p));
            }
        }
    }
    docs.sort();
    out.extend(docs);
    out
}

pub fn rel(p: &Path) -> String {
    p.strip_prefix(root())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// One line of a page: its number (from 1), and whether it is inside a fenced code block (fences included).
pub struct Line<'a> {
    pub number: usize,
    pub text: &'a str,
    pub in_code: bool,
}

pub fn lines(text: &str) -> Vec<Line<'_>> {
    let mut in_code = false;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let fence = l.trim_start().starts_with("```");
        out.push(Line {
            number: i + 1,
            text: l,
            in_code: in_code || fence,
        });
        if fence {
            in_code = !in_code;
        }
    }
    out
}

/// A fenced block: its info string (`yaml fragment`), first line number and text.
pub struct Block {
    pub info: String,
    pub line: usize,
    pub text: String,
}

pub fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, l) in text.lines().enumerate() {
        let t = l.trim_start();
        match (&mut open, t.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    info: info.trim().to_string(),
                    line: i + 1,
                    text: String::new(),
                })
            }
            (Some(_), Some(_)) => out.extend(open.take()),
            (Some(b), None) => {
                b.text.push_str(l);
                b.text.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// A table row outside code blocks, with the `## ` heading it sits under and its cells.
pub struct Row {
    pub line: usize,
    pub h2: String,
    pub cells: Vec<String>,
}

pub fn rows(text: &str) -> Vec<Row> {
    let mut h2 = String::new();
    let mut out = Vec::new();
    for l in lines(text).into_iter().filter(|l| !l.in_code) {
        if let Some(h) = l.text.strip_prefix("## ") {
            h2 = h.trim().to_string();
        } else if l.text.starts_with('|') && !l.text.starts_with("|--") && !l.text.starts_with("|-")
        {
            let inner = l.text.trim().trim_start_matches('|').trim_end_matches('|');
            let cells: Vec<String> = split_cells(inner)
                .into_iter()
                .map(|c| c.trim().to_string())
                .collect();
            out.push(Row {
                line: l.number,
                h2: h2.clone(),
                cells,
            });
        }
    }
    out
}

/// Cells split on `|`, except an escaped `\|` and a `|` inside backticks.
fn split_cells(s: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut in_tick = false;
    let mut prev = ' ';
    for c in s.chars() {
        match c {
            '`' => in_tick = !in_tick,
            '|' if !in_tick && prev != '\\' => {
                out.push(String::new());
                prev = c;
                continue;
            }
            _ => {}
        }
        out.last_mut().unwrap().push(c);
        prev = c;
    }
    out
}

/// The backticked words of a cell (`` `a`, `b` `` -> a, b).
pub fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// GitHub's anchor for a heading: lowercase, punctuation dropped but `-` and `_`, spaces to `-`.
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every heading's anchor in a page, with GitHub's `-1`, `-2` for repeats.
pub fn anchors(text: &str) -> Vec<String> {
    let (mut out, mut bases) = (Vec::new(), Vec::<String>::new());
    for l in lines(text).into_iter().filter(|l| !l.in_code) {
        let t = l.text.trim_start_matches('#');
        if t.len() == l.text.len() || !t.starts_with(' ') {
            continue;
        }
        let base = slug(t);
        let n = bases.iter().filter(|b| **b == base).count();
        out.push(if n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        bases.push(base);
    }
    out
}

/// Every inline link target `[text](target)` outside code, with its line.
pub fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for l in lines(text).into_iter().filter(|l| !l.in_code) {
        // Drop inline code spans first: `[a](b)` inside backticks is not a link.
        let plain: String = l.text.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end]
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_string();
            out.push((l.number, target));
            rest = &after[end..];
        }
    }
    out
}
