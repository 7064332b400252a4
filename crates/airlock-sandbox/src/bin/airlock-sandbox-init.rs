//! `airlock-sandbox-init`: the native tier's sandbox init, which `airlock`
//! starts once per sandboxed call (found beside `airlock`; without it,
//! `airlock` runs itself as the init). Everything is in
//! [`airlock_sandbox::init`]; this binary links only that, so each call execs
//! about a MiB with few relocations instead of all of `airlock`, and it
//! builds as a static musl program (`scripts/static-init.sh`), which starts
//! without glibc's CPU and cache set-up. It refuses a spec from another
//! build (`helper.mismatch`).
use std::process::ExitCode;

fn main() -> ExitCode {
    airlock_sandbox::init::maybe_run_init();
    eprintln!("airlock-sandbox-init: airlock starts this program for each sandboxed call; it is not a command");
    ExitCode::from(64)
}
