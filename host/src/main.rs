//! The `cairn` command-line entry point.

fn main() -> std::process::ExitCode {
    // Like other command-line tools, end quietly when the reader of our output goes away
    // (`cairn memory list | head`) instead of failing on a broken pipe.
    // SAFETY: restoring the default action of SIGPIPE before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // SAFETY: no other thread exists yet.
    unsafe {
        cairn::memory::embed::local_model::settle_process_threads();
    }
    cairn::cli::main()
}
