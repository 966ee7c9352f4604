use std::process::ExitCode;

fn main() -> ExitCode {
    clover::cli::main()
}
