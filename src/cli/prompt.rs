//! Questions before a change of primary (a confirmation, a candidate): asked on a terminal only.
use std::io::{BufRead, IsTerminal, Write};

use super::CliError;

/// `Ok` when forced or answered yes; a refusal otherwise.
pub fn confirm(question: &str, force: bool) -> Result<(), CliError> {
    if force {
        return Ok(());
    }
    match ask(question, "[y/N]", "pass --force to proceed without asking")?
        .to_ascii_lowercase()
        .as_str()
    {
        "y" | "yes" => Ok(()),
        _ => Err(CliError::refused("Aborted")),
    }
}

/// The trimmed answer to `question` (shown with `choices`) on a terminal; without a terminal on stdin, a
/// usage error that says how to do without the question (`fix`).
pub fn ask(question: &str, choices: &str, fix: &str) -> Result<String, CliError> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(CliError::usage(format!(
            "refusing to ask \"{question}\" without a terminal on stdin: {fix}"
        )));
    }
    print!("{question} {choices}: ");
    std::io::stdout()
        .flush()
        .map_err(|e| CliError::internal(format!("stdout: {e}")))?;
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::internal(format!("stdin: {e}")))?;
    Ok(answer.trim().to_string())
}
