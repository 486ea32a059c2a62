//! A failed assertion of the decision core ends the agent with exit code 70 and the assertion's message.
//!
//! The agent then stops without acting, PostgreSQL is left to the fencing process, and `tenure agent` exits 70 with
//! the assertion's message rather than a panic's 101.
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::ha::{decide, CoreConfig, Decision, Memory, Observation};

use super::AgentError;

/// `decide`, with its assertions (the core's specification: TigerBeetle's style) turned into
/// `AgentError::CoreAssertion` instead of a panic. A violated assertion means the core's own rules no
/// longer hold, so the agent must not act on anything: it stops, leaving PostgreSQL to the fencing
/// process, which stops it when the lease runs out (as for any agent that dies), and `main` exits 70.
pub(super) fn decide_or_stop(
    core: &CoreConfig,
    mem: &Memory,
    obs: &Observation,
) -> Result<Decision, AgentError> {
    guarded(|| decide(core, mem, obs))
}

fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, AgentError> {
    // The core holds no locks and shares nothing mutable: nothing is left half-updated by an unwind.
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        AgentError::CoreAssertion(message.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::{guarded, AgentError};

    #[test]
    fn a_failed_assertion_becomes_an_error_with_its_message() {
        let lease_ms = 5;
        let r = guarded(|| {
            assert!(lease_ms > 10, "lease {lease_ms} ms past its deadline");
        });
        match r {
            Err(AgentError::CoreAssertion(m)) => assert_eq!(m, "lease 5 ms past its deadline"),
            other => panic!("expected CoreAssertion, got {other:?}"),
        }
        assert_eq!(guarded(|| 7).ok(), Some(7));
    }
}
