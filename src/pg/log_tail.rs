//! The last lines of PostgreSQL's server log, for the message of a failed start.
use std::io::{Read, Seek, SeekFrom};

/// How much of the log's end is read: a few lines of any failure fit, and a runaway log of gigabytes is
/// never read into the agent's memory to report five lines.
pub(crate) const MAX_TAIL_BYTES: u64 = 64 * 1024;

/// The last `lines` non-empty lines of PostgreSQL's log, joined with " | " (empty if unreadable).
pub(crate) fn log_tail(path: &std::path::Path, lines: usize) -> String {
    std::fs::File::open(path)
        .and_then(|f| tail_of(f, MAX_TAIL_BYTES, lines))
        .unwrap_or_default()
}

/// The last `lines` non-empty lines within `reader`'s last `max_bytes`, joined with " | "; a line the
/// window cuts is left out. Reads at most `max_bytes + 1` bytes, whatever the size behind the reader.
pub(crate) fn tail_of(
    mut reader: impl Read + Seek,
    max_bytes: u64,
    lines: usize,
) -> std::io::Result<String> {
    let len = reader.seek(SeekFrom::End(0))?;
    let start = len.saturating_sub(max_bytes);
    // One byte before the window tells whether its first line is whole.
    let from = start.saturating_sub(1);
    reader.seek(SeekFrom::Start(from))?;
    let mut buf = Vec::new();
    reader.take(len - from).read_to_end(&mut buf)?;
    if start > 0 {
        let cut = buf
            .iter()
            .position(|&b| b == b'\n')
            .map_or(buf.len(), |i| i + 1);
        buf.drain(..cut);
    }
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    Ok(all[all.len().saturating_sub(lines)..].join(" | "))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::{tail_of, MAX_TAIL_BYTES};

    /// Bytes this thread has read through `read(2)` so far (the kernel's per-thread `rchar`).
    fn thread_rchar() -> u64 {
        let io = std::fs::read_to_string("/proc/thread-self/io").expect("/proc/thread-self/io");
        io.lines()
            .find_map(|l| l.strip_prefix("rchar: "))
            .and_then(|v| v.trim().parse().ok())
            .expect("an rchar line")
    }

    #[test]
    fn a_huge_log_is_read_from_its_end_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("postgresql.log");
        let mut f = std::fs::File::create(&path).unwrap();
        // 64 MiB of a runaway log (sparse: it costs no disk), then the lines that explain the failure.
        f.set_len(64 << 20).unwrap();
        std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)).unwrap();
        writeln!(
            f,
            "\nLOG:  starting\n\nFATAL:  bad setting\nLOG:  shut down"
        )
        .unwrap();
        drop(f);
        let before = thread_rchar();
        let tail = super::log_tail(&path, 2);
        let read = thread_rchar() - before;
        assert_eq!(tail, "FATAL:  bad setting | LOG:  shut down");
        assert!(
            // What reading /proc/thread-self/io itself counts is well under a page.
            read <= MAX_TAIL_BYTES + 4096,
            "read {read} bytes of the log"
        );
    }

    #[test]
    fn a_short_log_gives_its_last_lines_and_a_missing_one_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "a\n\nb\nc\n").unwrap();
        assert_eq!(super::log_tail(&path, 5), "a | b | c");
        assert_eq!(super::log_tail(&path, 2), "b | c");
        assert_eq!(super::log_tail(&dir.path().join("none"), 2), "");
    }

    #[test]
    fn a_line_the_window_cuts_is_left_out_and_a_whole_one_kept() {
        let text = b"first line\nsecond\nthird\n";
        let tail = |max| tail_of(std::io::Cursor::new(&text[..]), max, 5).unwrap();
        assert_eq!(tail(12), "third", "the window starts inside 'second'");
        assert_eq!(tail(13), "second | third", "the window starts at 'second'");
        assert_eq!(
            tail(14),
            "second | third",
            "the window starts at the end of 'first line'"
        );
        assert_eq!(tail(100), "first line | second | third");
    }
}
