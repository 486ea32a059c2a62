//! Questions before a change: a confirmation or a candidate (on a terminal only), and `remove`'s typed answers.
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

/// click's `prompt(question, type=str)`, as `patronictl remove` asks: `question: ` on stdout, a line read
/// from stdin whether or not it is a terminal (so a script can pipe the answers), an empty line asked
/// again; end of input is click's `Aborted!`. Only the line end is taken off: the answer is compared as typed.
pub fn type_in(question: &str) -> Result<String, CliError> {
    let stdin = std::io::stdin();
    loop {
        print!("{question}: ");
        std::io::stdout()
            .flush()
            .map_err(|e| CliError::internal(format!("stdout: {e}")))?;
        let mut line = String::new();
        let read = stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| CliError::internal(format!("stdin: {e}")))?;
        if read == 0 {
            return Err(CliError::refused("Aborted!"));
        }
        let answer = line.trim_end_matches(['\r', '\n']);
        if !answer.is_empty() {
            return Ok(answer.to_string());
        }
    }
}
