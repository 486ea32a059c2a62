//! `postgresql.callbacks`, `pre_promote` and `before_stop`: each a command line split as Patroni splits it.
use std::collections::BTreeMap;

use super::ctx::Ctx;
use super::raw::RawCallbacks;
use crate::ha::{CallbackEvent, Hooks};

/// The hook commands, each as an argv (program first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HookCommands {
    pub callbacks: BTreeMap<CallbackEvent, Vec<String>>,
    pub pre_promote: Option<Vec<String>>,
    pub before_stop: Option<Vec<String>>,
}

impl HookCommands {
    /// What the core needs to know: which hooks exist.
    pub fn configured(&self) -> Hooks {
        Hooks {
            callbacks: !self.callbacks.is_empty(),
            pre_promote: self.pre_promote.is_some(),
            before_stop: self.before_stop.is_some(),
        }
    }
}

pub(crate) fn build(
    callbacks: Option<RawCallbacks>,
    pre_promote: Option<String>,
    before_stop: Option<String>,
    ctx: &mut Ctx,
) -> HookCommands {
    let c = callbacks.unwrap_or_default();
    let raw = [
        (CallbackEvent::OnStart, c.on_start),
        (CallbackEvent::OnStop, c.on_stop),
        (CallbackEvent::OnRestart, c.on_restart),
        (CallbackEvent::OnReload, c.on_reload),
        (CallbackEvent::OnRoleChange, c.on_role_change),
    ];
    let mut out = HookCommands::default();
    for (event, cmd) in raw {
        let key = format!("postgresql.callbacks.{event}");
        if let Some(argv) = cmd.and_then(|s| argv(&s, &key, ctx)) {
            out.callbacks.insert(event, argv);
        }
    }
    out.pre_promote = pre_promote.and_then(|s| argv(&s, "postgresql.pre_promote", ctx));
    out.before_stop = before_stop.and_then(|s| argv(&s, "postgresql.before_stop", ctx));
    out
}

fn argv(s: &str, key: &str, ctx: &mut Ctx) -> Option<Vec<String>> {
    match split(s) {
        Some(v) if !v.is_empty() => Some(v),
        Some(_) => {
            ctx.invalid(key, "is empty", Some("give a command, or remove the key"));
            None
        }
        None => {
            ctx.invalid(
                key,
                format!("{s:?} has an unclosed quote"),
                Some("close the quote"),
            );
            None
        }
    }
}

/// Split a command line into words as POSIX shells (and Python's `shlex.split`) do: whitespace separates,
/// single quotes keep everything, double quotes keep all but `\"` and `\\`, a backslash escapes outside
/// quotes. No expansions. None: an unclosed quote.
pub fn split(s: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => w.push(c),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            c @ ('"' | '\\' | '$' | '`') => w.push(c),
                            c => {
                                w.push('\\');
                                w.push(c);
                            }
                        },
                        c => w.push(c),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).push(chars.next()?),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Some(words)
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn splits_like_shlex() {
        assert_eq!(
            split("/bin/cb.sh 'a b' \"c \\\"d\\\"\" e\\ f").unwrap(),
            vec!["/bin/cb.sh", "a b", "c \"d\"", "e f"]
        );
        assert_eq!(split("  x  ").unwrap(), vec!["x"]);
        assert_eq!(split("''").unwrap(), vec![""]);
        assert!(split("x 'y").is_none());
    }
}
