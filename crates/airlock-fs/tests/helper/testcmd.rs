//! Test helper binary (not shipped): the `airlock-fs` command, built from
//! this crate so its tests can run it (the shipped binary is declared by
//! airlock-cli and is the same one-line call).
fn main() -> std::process::ExitCode {
    airlock_fs::cli::main()
}
