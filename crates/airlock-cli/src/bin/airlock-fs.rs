//! `airlock-fs`: read, write and list named roots from inside an isolated
//! worker (see `airlock_fs::cli`).
fn main() -> std::process::ExitCode {
    airlock_fs::cli::main()
}
