//! A unified diff of two texts as Python's `difflib.unified_diff` writes it (what `patronictl edit-config` shows).
// difflib matches the longest common block first, then recurses on each side of it; an LCS would pair
// lines differently on some inputs, so the same algorithm is used here (without difflib's junk heuristic,
// which only starts at 200 lines).

/// `(tag, a_start, a_end, b_start, b_end)` as difflib's opcodes.
type Op = (Tag, usize, usize, usize, usize);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tag {
    Equal,
    Replace,
    Delete,
    Insert,
}

/// The lines of `unified_diff(before, after)` with 3 lines of context and empty file names: `--- `,
/// `+++ `, `@@ -1,6 +1,6 @@`, then ` `, `-` and `+` lines. Empty when the texts are equal.
pub fn unified(before: &str, after: &str) -> Vec<String> {
    let lines = |s: &str| -> Vec<String> {
        s.trim_end_matches('\n')
            .split('\n')
            .map(str::to_string)
            .collect()
    };
    let (a, b) = (lines(before), lines(after));
    let mut out = Vec::new();
    for group in grouped(&opcodes(&a, &b), 3) {
        if out.is_empty() {
            out.push("--- ".to_string());
            out.push("+++ ".to_string());
        }
        let (first, last) = (group[0], group[group.len() - 1]);
        out.push(format!(
            "@@ -{} +{} @@",
            range(first.1, last.2),
            range(first.3, last.4)
        ));
        for (tag, i1, i2, j1, j2) in group {
            if tag == Tag::Equal {
                out.extend(a[i1..i2].iter().map(|l| format!(" {l}")));
                continue;
            }
            out.extend(a[i1..i2].iter().map(|l| format!("-{l}")));
            out.extend(b[j1..j2].iter().map(|l| format!("+{l}")));
        }
    }
    out
}

/// difflib's `_format_range_unified`.
fn range(start: usize, stop: usize) -> String {
    match stop - start {
        1 => format!("{}", start + 1),
        0 => format!("{start},0"),
        n => format!("{},{n}", start + 1),
    }
}

/// difflib's `find_longest_match` without junk: the longest block, the earliest in `a`, then in `b`.
fn longest(a: &[String], b: &[String], (alo, ahi, blo, bhi): (usize, usize, usize, usize)) -> Op {
    let (mut bi, mut bj, mut bk) = (alo, blo, 0);
    let mut prev = vec![0usize; bhi - blo + 1];
    for (i, line) in a.iter().enumerate().take(ahi).skip(alo) {
        let mut cur = vec![0usize; bhi - blo + 1];
        for (j, other) in b.iter().enumerate().take(bhi).skip(blo) {
            if line == other {
                let k = prev[j - blo] + 1;
                cur[j - blo + 1] = k;
                if k > bk {
                    (bi, bj, bk) = (i + 1 - k, j + 1 - k, k);
                }
            }
        }
        prev = cur;
    }
    (Tag::Equal, bi, bi + bk, bj, bj + bk)
}

/// difflib's `get_opcodes`.
fn opcodes(a: &[String], b: &[String]) -> Vec<Op> {
    let mut queue = vec![(0, a.len(), 0, b.len())];
    let mut blocks = Vec::new();
    while let Some((alo, ahi, blo, bhi)) = queue.pop() {
        let (_, i, i_end, j, j_end) = longest(a, b, (alo, ahi, blo, bhi));
        if i_end > i {
            blocks.push((i, j, i_end - i));
            if alo < i && blo < j {
                queue.push((alo, i, blo, j));
            }
            if i_end < ahi && j_end < bhi {
                queue.push((i_end, ahi, j_end, bhi));
            }
        }
    }
    blocks.sort_unstable();
    blocks.push((a.len(), b.len(), 0));
    let (mut i, mut j, mut ops) = (0, 0, Vec::new());
    for (ai, bj, size) in blocks {
        let tag = match (i < ai, j < bj) {
            (true, true) => Some(Tag::Replace),
            (true, false) => Some(Tag::Delete),
            (false, true) => Some(Tag::Insert),
            (false, false) => None,
        };
        if let Some(tag) = tag {
            ops.push((tag, i, ai, j, bj));
        }
        (i, j) = (ai + size, bj + size);
        if size > 0 {
            // difflib merges adjacent equal blocks first; consecutive equal opcodes come out as one.
            match ops.last_mut() {
                Some((Tag::Equal, _, e1, _, e2)) if *e1 == ai && *e2 == bj => (*e1, *e2) = (i, j),
                _ => ops.push((Tag::Equal, ai, i, bj, j)),
            }
        }
    }
    ops
}

/// difflib's `get_grouped_opcodes(n)`: hunks with `n` lines of context.
fn grouped(ops: &[Op], n: usize) -> Vec<Vec<Op>> {
    let mut codes: Vec<Op> = if ops.is_empty() {
        vec![(Tag::Equal, 0, 1, 0, 1)]
    } else {
        ops.to_vec()
    };
    if let Some(first) = codes.first_mut().filter(|c| c.0 == Tag::Equal) {
        let (_, i1, i2, j1, j2) = *first;
        *first = (
            Tag::Equal,
            i1.max(i2.saturating_sub(n)),
            i2,
            j1.max(j2.saturating_sub(n)),
            j2,
        );
    }
    if let Some(last) = codes.last_mut().filter(|c| c.0 == Tag::Equal) {
        let (_, i1, i2, j1, j2) = *last;
        *last = (Tag::Equal, i1, i2.min(i1 + n), j1, j2.min(j1 + n));
    }
    let (mut groups, mut group) = (Vec::new(), Vec::new());
    for (tag, mut i1, i2, mut j1, j2) in codes {
        if tag == Tag::Equal && i2 - i1 > 2 * n {
            group.push((tag, i1, i2.min(i1 + n), j1, j2.min(j1 + n)));
            groups.push(std::mem::take(&mut group));
            (i1, j1) = (i1.max(i2 - n), j1.max(j2 - n));
        }
        group.push((tag, i1, i2, j1, j2));
    }
    let only_equal = group.len() == 1 && group[0].0 == Tag::Equal;
    if !group.is_empty() && !only_equal {
        groups.push(group);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::unified;

    /// The expected lines are what Python 3's difflib printed for the same texts.
    #[test]
    fn as_python_difflib_writes_it() {
        let a = "loop_wait: 10\npostgresql:\n  parameters:\n    work_mem: 4MB\nretry_timeout: 10\nttl: 30\n";
        let b = a
            .replace("loop_wait: 10", "loop_wait: 5")
            .replace("4MB", "8MB");
        assert_eq!(
            unified(a, &b),
            [
                "--- ",
                "+++ ",
                "@@ -1,6 +1,6 @@",
                "-loop_wait: 10",
                "+loop_wait: 5",
                " postgresql:",
                "   parameters:",
                "-    work_mem: 4MB",
                "+    work_mem: 8MB",
                " retry_timeout: 10",
                " ttl: 30"
            ]
        );
        let a: String = (0..20).map(|i| format!("k{i:02}: {i}\n")).collect();
        let b = a.replace("k03: 3\n", "k03: 33\n").replace("k15: 15\n", "") + "z: 1\n";
        assert_eq!(
            unified(&a, &b),
            [
                "--- ",
                "+++ ",
                "@@ -1,7 +1,7 @@",
                " k00: 0",
                " k01: 1",
                " k02: 2",
                "-k03: 3",
                "+k03: 33",
                " k04: 4",
                " k05: 5",
                " k06: 6",
                "@@ -13,8 +13,8 @@",
                " k12: 12",
                " k13: 13",
                " k14: 14",
                "-k15: 15",
                " k16: 16",
                " k17: 17",
                " k18: 18",
                " k19: 19",
                "+z: 1"
            ]
        );
        assert!(unified(&a, &a).is_empty());
    }
}
