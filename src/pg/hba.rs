//! What a `pg_hba.conf` line from the store may say: no control characters, and no method that lets a client in
//! without proving who it is.
//
// A store writer who could add `host all all 0.0.0.0/0 trust` would log in as the superuser and run
// `COPY ... TO PROGRAM` on every member: the same power `guc::RUNS_CODE` keeps from the store.

/// Methods that admit a client without a secret it proves: `trust` admits anyone; `ident` over TCP believes the
/// identd on the client's own host, which whoever runs that host controls.
pub const PASSWORDLESS: [&str; 2] = ["trust", "ident"];

/// The first token of `line` (before a `#` comment) that names a method in [`PASSWORDLESS`], if any.
/// A token, not a column: a database or role named `trust` unquoted is refused too, which errs on the safe side.
pub fn passwordless_method(line: &str) -> Option<&'static str> {
    let code = line.split('#').next().unwrap_or("");
    code.split_whitespace().find_map(|t| {
        PASSWORDLESS
            .iter()
            .find(|m| t.eq_ignore_ascii_case(m))
            .copied()
    })
}

/// A line holds no control character but tab: a newline would add lines nobody checked.
pub fn check_line(line: &str) -> Result<(), String> {
    match line.chars().find(|c| c.is_control() && *c != '\t') {
        Some(c) => Err(format!("holds the control character {c:?}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_and_ident_are_found_as_methods_and_nowhere_in_comments() {
        assert_eq!(
            passwordless_method("host all all 0.0.0.0/0 trust"),
            Some("trust")
        );
        assert_eq!(
            passwordless_method("host all all 10.0.0.0 255.0.0.0 IDENT map=x"),
            Some("ident")
        );
        assert_eq!(passwordless_method("local all all peer # not trust"), None);
        assert_eq!(
            passwordless_method("host all all 10.0.0.0/8 scram-sha-256"),
            None
        );
        assert_eq!(passwordless_method("hostssl all all 10.0.0.0/8 cert"), None);
    }

    #[test]
    fn a_newline_or_carriage_return_is_refused_a_tab_is_not() {
        assert!(
            check_line("host all all 10.0.0.0/8 scram-sha-256\nhost all all 0.0.0.0/0 trust")
                .is_err()
        );
        assert!(check_line("host all all 10.0.0.0/8 md5\r").is_err());
        assert!(check_line("host\tall\tall\t10.0.0.0/8\tscram-sha-256").is_ok());
    }
}
