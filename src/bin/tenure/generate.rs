//! `tenure generate man|completions SHELL`: the man page and the shell completions, from the command tree
//! itself, so the `.deb` ships what this binary accepts (scripts/package-deb runs it).
use std::io::Write;
use std::process::ExitCode;

use super::args::GenerateWhat;

pub(crate) fn generate(what: GenerateWhat, mut cmd: clap::Command) -> ExitCode {
    let mut out = Vec::new();
    match what {
        GenerateWhat::Man => {
            if let Err(e) = man_page(cmd, &mut out) {
                eprintln!("tenure generate man: {e}");
                return ExitCode::from(70);
            }
        }
        GenerateWhat::Completions { shell } => {
            clap_complete::generate(shell, &mut cmd, "tenure", &mut out)
        }
    }
    match std::io::stdout().write_all(&out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenure generate: stdout: {e}");
            ExitCode::from(70)
        }
    }
}

/// One page, tenure(1): clap_mangen's page for `tenure`, then a section per visible command with its
/// description, synopsis and options (`man tenure`, then `/TENURE LIST`).
fn man_page(mut cmd: clap::Command, out: &mut Vec<u8>) -> std::io::Result<()> {
    cmd.build();
    let mut main = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut main)?;
    // The commands are sections of this page, not pages of their own (`tenure-list(1)`), and the after-help
    // text is the exit status.
    let mut main = String::from_utf8_lossy(&main).replacen(".SH EXTRA", ".SH \"EXIT STATUS\"", 1);
    for sub in cmd.get_subcommands() {
        let name = sub.get_name().replace('-', "\\-");
        main = main.replacen(
            &format!("tenure\\-{name}(1)"),
            &format!("\\fBtenure {name}\\fR"),
            1,
        );
    }
    out.extend_from_slice(main.as_bytes());
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        let page = clap_mangen::Man::new(sub.clone());
        let mut text = Vec::new();
        page.render_description_section(&mut text)?;
        page.render_synopsis_section(&mut text)?;
        page.render_options_section(&mut text)?;
        let heading = format!(".SH \"TENURE {}\"", sub.get_name().to_uppercase());
        let text = String::from_utf8_lossy(&text)
            .replacen(".SH DESCRIPTION", &heading, 1)
            .replacen(".SH SYNOPSIS", ".SS Synopsis", 1)
            .replacen(".SH OPTIONS", ".SS Options", 1);
        out.extend_from_slice(text.as_bytes());
    }
    Ok(())
}
