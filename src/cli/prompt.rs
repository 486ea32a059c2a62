//! The confirmation before a change of primary: asked on a terminal, refused without one unless `--force`.
use std::io::{BufRead, IsTerminal, Write};

use super::CliError;

/// `Ok` when forced or answered yes; a refusal otherwise.
pub fn confirm(question: &str, force: bool) -> Result<(), CliError> {
    if force {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(CliError::usage(format!(
            "refusing to ask \"{question}\" without a terminal on stdin: pass --force to proceed without asking"
        )));
    }
    print!("{question} [y/N]: ");
    std::io::stdout()
        .flush()
        .map_err(|e| CliError::internal(format!("stdout: {e}")))?;
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::internal(format!("stdin: {e}")))?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(CliError::refused("Aborted")),
    }
}
