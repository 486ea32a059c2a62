//! The callback vocabulary the core and the shell share: events, role words, which hook scripts exist.
use std::fmt;

/// Which callback (Patroni's `postgresql.callbacks` keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CallbackEvent {
    OnStart,
    OnStop,
    OnRestart,
    OnReload,
    OnRoleChange,
}

impl CallbackEvent {
    pub const ALL: [CallbackEvent; 5] = [
        CallbackEvent::OnStart,
        CallbackEvent::OnStop,
        CallbackEvent::OnRestart,
        CallbackEvent::OnReload,
        CallbackEvent::OnRoleChange,
    ];
    /// The config key, which is also the script's first argument.
    pub fn as_str(self) -> &'static str {
        match self {
            CallbackEvent::OnStart => "on_start",
            CallbackEvent::OnStop => "on_stop",
            CallbackEvent::OnRestart => "on_restart",
            CallbackEvent::OnReload => "on_reload",
            CallbackEvent::OnRoleChange => "on_role_change",
        }
    }
}

/// The role word passed to a callback (Patroni's; `standby_leader` needs a standby cluster, which tenure
/// does not run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallbackRole {
    Primary,
    Replica,
    /// A former primary, stopped or about to follow (Patroni's `demoted`).
    Demoted,
}

impl CallbackRole {
    pub fn as_str(self) -> &'static str {
        match self {
            CallbackRole::Primary => "primary",
            CallbackRole::Replica => "replica",
            CallbackRole::Demoted => "demoted",
        }
    }
}

impl fmt::Display for CallbackEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for CallbackRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The hook scripts configured (the core only needs to know which exist).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hooks {
    /// Any of `postgresql.callbacks` is set.
    pub callbacks: bool,
    /// `postgresql.pre_promote` is set.
    pub pre_promote: bool,
    /// `postgresql.before_stop` is set.
    pub before_stop: bool,
}
