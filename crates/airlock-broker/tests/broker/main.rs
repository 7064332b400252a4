//! The broker as a process: started by `airlock_sandbox::spawn_broker` from a
//! sealed copy, confined, serving frames. One test binary (see `util`).

mod jail;
mod serve;
mod util;
