//! The end of a bound output's run ([`crate::placement`]), in PID 1 once
//! every other process of the namespace is gone: the tool wrote the host
//! staging file itself, so nothing is copied out; it is only checked.
//!
//! - The file at the output path must still be the staging file (it is a
//!   mount point, so nothing could replace it; checked all the same).
//! - Extended attributes the tool could set are removed: `user.*` and the
//!   POSIX ACLs (an owner may set both; a tool could otherwise publish an
//!   ACL granting another user access). A copied output never carried
//!   any; a published file carries only what airlock gives it. The others
//!   (`security.*`, `trusted.*`) need capabilities the worker does not hold.
//! - An output over `max_bytes`, or one that is refused, is emptied: the
//!   staging file then holds nothing of the tool's.
#![forbid(unsafe_code)]

use std::fs::File;

use crate::error::{errno, SandboxError};
use crate::mounts::{verify_retained, RetainedOutput};
use crate::outcome::OutputExport;

/// Most bytes of attribute names read (the kernel's own limit, `XATTR_LIST_MAX`).
const XATTR_LIST_MAX: usize = 65536;

/// Checks the bound output `host` at `out.path` and says what is there.
pub(crate) fn settle(
    out: &RetainedOutput,
    host: &File,
    max_bytes: u64,
    virtual_path: &str,
) -> Result<OutputExport, SandboxError> {
    let fail = |call: &str| {
        let call = call.to_string();
        move |e: std::io::Error| SandboxError::Export { virtual_path: virtual_path.into(), call, errno: errno(e) }
    };
    let empty = |over_limit: bool, refused: Option<String>| {
        host.set_len(0).map_err(fail("ftruncate(bound output, 0)"))?;
        Ok(OutputExport { bytes: 0, over_limit, refused })
    };
    if let Err(why) = verify_retained(&out.path, host) {
        return empty(false, Some(why));
    }
    if let Err(why) = strip_tool_attributes(host) {
        return empty(false, Some(why));
    }
    let size = host.metadata().map_err(fail("fstat(bound output)"))?.len();
    if size > max_bytes {
        return empty(true, None);
    }
    Ok(OutputExport { bytes: size, over_limit: false, refused: None })
}

/// Removes the `user.*` and POSIX ACL attributes of `file`; why not, if
/// one could not be removed.
fn strip_tool_attributes(file: &File) -> Result<(), String> {
    let mut names = vec![0u8; XATTR_LIST_MAX];
    let len = match rustix::fs::flistxattr(file, &mut names[..]) {
        Ok(len) => len,
        Err(rustix::io::Errno::OPNOTSUPP) => return Ok(()),
        Err(e) => return Err(format!("flistxattr(output): {e}")),
    };
    for name in names[..len].split(|b| *b == 0).filter(|n| !n.is_empty()) {
        if !(name.starts_with(b"user.") || name.starts_with(b"system.posix_acl_")) {
            continue;
        }
        let name = std::ffi::CString::new(name).map_err(|e| e.to_string())?;
        rustix::fs::fremovexattr(file, name.as_c_str())
            .map_err(|e| format!("the output carries the attribute {name:?}, which could not be removed: {e}"))?;
    }
    Ok(())
}
