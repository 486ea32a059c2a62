//! PostgreSQL's config-file grammar for what tenure writes there: parameter names, quoted values, member names.
//!
//! Parameter names as its lexer reads them, values without control characters quoted as `quote_literal`, member names
//! without control characters. `RUNS_CODE` lists the parameters that load or run code, which the store sets only
//! where the local file allows them.
//
// Everything a file line is built from passes these checks first; a name or value from the store never
// reaches `tenure.conf` or `tenure.recovery.conf` otherwise (docs/security.md, "Store values are data").

/// Parameters that run programs or load code, or decide which files PostgreSQL trusts: whoever sets them
/// runs code as the PostgreSQL user on every member. The store's value is taken only where the local
/// file names the parameter in `postgresql.parameters_from_store_allowed`; the local file's own
/// `postgresql.parameters` (and `bootstrap.dcs`) may always set them.
pub const RUNS_CODE: &[(&str, &str)] = &[
    (
        "archive_command",
        "a shell command run for every WAL segment",
    ),
    ("archive_library", "a library loaded into the archiver"),
    (
        "restore_command",
        "a shell command run by a standby or a recovery",
    ),
    (
        "archive_cleanup_command",
        "a shell command run at every restartpoint",
    ),
    (
        "recovery_end_command",
        "a shell command run once at the end of recovery",
    ),
    (
        "ssl_passphrase_command",
        "a shell command run to unlock the server key",
    ),
    (
        "shared_preload_libraries",
        "libraries loaded into the postmaster",
    ),
    (
        "session_preload_libraries",
        "libraries loaded into every session",
    ),
    (
        "local_preload_libraries",
        "libraries loaded into every session",
    ),
    (
        "dynamic_library_path",
        "where LOAD and CREATE FUNCTION find libraries",
    ),
    ("jit_provider", "a library loaded to compile queries"),
    (
        "hba_file",
        "who may connect, and how (tenure writes pg_hba.conf itself)",
    ),
    ("ident_file", "which OS users map to which roles"),
    ("data_directory", "which data PostgreSQL serves"),
];

/// Why `name` (any case: PostgreSQL's names are case-insensitive) runs code, if it is in [`RUNS_CODE`].
pub fn runs_code(name: &str) -> Option<&'static str> {
    RUNS_CODE
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, why)| *why)
}

/// A parameter name as the config file's lexer reads one (`guc-file.l`'s ID and QUALIFIED_ID): a letter or
/// `_`, then letters, digits and `_`, with at most one `.` between two such parts (`auto_explain.log_min_duration`).
/// ASCII only: the lexer also takes bytes above 127, which no parameter uses. `$` is left out: `SET`
/// accepts it in a custom name, the file does not.
pub fn check_name(name: &str) -> Result<(), String> {
    let part = |p: &str| {
        let mut chars = p.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let ok = match name.split_once('.') {
        Some((prefix, rest)) => part(prefix) && part(rest),
        None => part(name),
    };
    if ok {
        Ok(())
    } else {
        Err(
            "is not a PostgreSQL parameter name (a letter or _, then letters, digits and _; \
             a custom one has one prefix and a dot)"
                .into(),
        )
    }
}

/// A value [`quote_value`] can write: the lexer's quoted string (`guc-file.l`'s STRING) takes no line
/// break, and a control character is more likely an attack or an accident than a setting; a tab is kept.
pub fn check_value(value: &str) -> Result<(), String> {
    match value.chars().find(|c| c.is_control() && *c != '\t') {
        Some(c) => Err(format!(
            "holds the control character {:?}; PostgreSQL's config file takes none",
            c
        )),
        None => Ok(()),
    }
}

/// `value` quoted for a config file as `quote_literal` quotes it: `'` doubled, `\` doubled (the file's
/// lexer reads backslash escapes inside quotes, `\n` included, so a bare `\` would change the value).
/// Only for a value that passed [`check_value`].
pub fn quote_value(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

/// The value PostgreSQL reads from a quoted string (`DeescapeQuotedString`): `''` is `'`; `\b \f \n \r \t`,
/// up to three octal digits, and `\` before anything else is that character. `None` when `quoted` is not
/// one STRING token. For tests and the fuzz target: the round trip of [`quote_value`].
pub fn unquote_value(quoted: &str) -> Option<String> {
    let body = quoted.strip_prefix('\'')?.strip_suffix('\'')?;
    let mut out = String::new();
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => return None,
            '\'' if chars.next_if_eq(&'\'').is_some() => out.push('\''),
            '\'' => return None,
            '\\' => match chars.next()? {
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                d @ '0'..='7' => {
                    let mut n = d.to_digit(8)?;
                    for _ in 0..2 {
                        match chars.next_if(|c| ('0'..='7').contains(c)) {
                            Some(d) => n = n * 8 + d.to_digit(8)?,
                            None => break,
                        }
                    }
                    out.push(char::from_u32(n & 0xff)?);
                }
                '\n' => return None,
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    Some(out)
}

/// One `name = 'value'` line of a config file, both checked; `Err` names the parameter and the reason.
pub fn line(name: &str, value: &str) -> Result<String, String> {
    check_name(name).map_err(|why| format!("parameter {name:?} {why}"))?;
    check_value(value).map_err(|why| format!("the value of parameter {name} {why}"))?;
    Ok(format!("{name} = {}\n", quote_value(value)))
}

/// A member name that may reach a file or a command line (`application_name`, the recovery file's
/// upstream line, `synchronous_standby_names`): not empty, no control character (a line break would add a
/// line to a file), no space at either end (read back trimmed, it would name another member). Every
/// other character is quoted where the name is written.
pub fn check_member_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is empty".into());
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(format!("holds the control character {c:?}"));
    }
    if name.trim() != name {
        return Err("begins or ends with a space".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_lexer() {
        for ok in ["work_mem", "_x1", "auto_explain.log_min_duration", "A.b_2"] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "work_mem = '5MB'\narchive_command",
            "a\nb",
            "a'b",
            "a=b",
            "a#b",
            "a b",
            "1abc",
            "a.b.c",
            ".a",
            "a.",
            "a$b",
            "wörk",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn values_round_trip_and_line_breaks_are_refused() {
        for v in [
            "",
            "5MB",
            "it's",
            r"C:\path\n",
            "a''b\\'",
            "%m [%p] \t",
            "'$user', public",
            "\\0",
        ] {
            assert_eq!(check_value(v), Ok(()), "{v:?}");
            assert_eq!(unquote_value(&quote_value(v)).as_deref(), Some(v), "{v:?}");
        }
        for bad in ["a\nb", "a\rb", "a\0b", "\u{7f}", "x\u{85}"] {
            assert!(check_value(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            line("work_mem", "5MB'\narchive_command = 'x"),
            Err(
                "the value of parameter work_mem holds the control character '\\n'; \
                 PostgreSQL's config file takes none"
                    .into()
            )
        );
        assert_eq!(line("a", r"x'\"), Ok("a = 'x''\\\\'\n".into()));
    }

    #[test]
    fn member_names_with_line_breaks_are_refused() {
        for ok in ["pg1", "node-1.a", "x y", "a'b\"c\\"] {
            assert_eq!(check_member_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "pg1\nrestore_command = 'x'",
            "a\rb",
            " pg1",
            "pg1 ",
            "\0",
        ] {
            assert!(check_member_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_list_is_case_insensitive() {
        assert!(runs_code("Archive_Command").is_some());
        assert!(runs_code("work_mem").is_none());
    }
}
