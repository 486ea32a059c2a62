//! `tenure-fencer`: the fencing process alone, a small binary the agent starts from beside its own (R5; issue 30).
// `tenure fencer` does the same from the whole agent binary; this one links only the fencer's code (the
// rest of the library is dropped at link time), so it maps and relocates a fraction of the pages: that is
// what keeps its resident memory under 2 MiB. The agent starts it with the command line `tenure fencer
// --file F --data-dir D` (argv[0] "tenure"), the one it had before, so what operators and scripts look for
// (`pgrep -f "tenure fencer"`) still finds it; `tenure-fencer --file F --data-dir D` works as well.
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a != "fencer") {
        args.insert(0, "fencer".into());
    }
    match tenure::agent::fence::fencer_argv(args.into_iter()) {
        Some((file, data_dir)) => tenure::agent::fence::fencer_main(&file, &data_dir),
        None => {
            eprintln!(
                "usage: tenure-fencer --file FILE --data-dir DIR (started by `tenure agent`)"
            );
            ExitCode::from(64)
        }
    }
}
