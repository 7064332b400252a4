//! `airlock-git-driver`: the program a Git query's worker runs, which
//! `airlock` binds into the worker when it finds it beside itself (without
//! it, `airlock` runs itself as the driver). Everything is in
//! [`airlock_git::driver`]; this binary links only the Git reader and the
//! core types, so the worker executes a few MiB with the code of one job
//! instead of all of `airlock` (its MCP server, cluster client, container
//! clients). It refuses a request from another build (`helper.mismatch`).
use std::process::ExitCode;

fn main() -> ExitCode {
    airlock_git::driver::maybe_run_driver();
    eprintln!("airlock-git-driver: airlock starts this program for each Git query; it is not a command");
    ExitCode::from(64)
}
