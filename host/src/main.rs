//! The `cairn` command-line entry point.

fn main() -> std::process::ExitCode {
    cairn::cli::main()
}
