//! airlock's own small programs that run in its sandboxes (the native
//! tier's init, the Git driver): each is found beside the running
//! executable, which can do its job too where it is missing.

use std::path::PathBuf;

/// `name` beside the running executable when a file of that name is
/// there, else the running executable itself.
pub fn beside_or_self(name: &str) -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let small = exe.with_file_name(name);
    Ok(if small.is_file() { small } else { exe })
}
