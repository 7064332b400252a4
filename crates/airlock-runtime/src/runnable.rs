//! Whether a tool's programs would run in the configured worker image:
//! checked by `tools validate`, `tools list` and the MCP catalog, so a tool
//! whose binary the worker cannot see is reported (`tool.not_runnable`)
//! before a call fails at run time.

use crate::transport::isolated::{CLIENT_PATH, WORKER_PATH as ISOLATED_PATH};
use crate::Runtime;
use airlock_core::manifest::Manifest;
use airlock_core::{ReasonCode, Refusal};
use airlock_sandbox::{find_program, NotRunnable, WORKER_PATH};
use std::path::Path;

impl Runtime {
    /// `Ok` when every program of `manifest` ([`Manifest::programs`]) is an
    /// executable regular file in the worker image as the worker would see
    /// it; `tool.not_runnable` saying what is missing and how to fix it
    /// otherwise. A source tool runs no program and is always runnable.
    pub fn check_runnable(&self, manifest: &Manifest) -> Result<(), Refusal> {
        let image = self.image();
        let (path, provided): (&str, &[&str]) =
            if manifest.broker.is_some() { (ISOLATED_PATH, &[CLIENT_PATH]) } else { (WORKER_PATH, &[]) };
        for (what, program) in manifest.programs() {
            let Err(why) = find_program(&image, path, provided, &program) else { continue };
            let dirs: Vec<String> = image.iter().map(|m| m.path.display().to_string()).collect();
            return Err(Refusal::new(
                ReasonCode::ToolNotRunnable,
                format!(
                    "{}: the {what} {program:?} would not run in the worker: {why}. The worker sees only the image \
                     [{}] (`[sandbox] image` in the config). {}",
                    manifest.name(),
                    dirs.join(", "),
                    fix(&why, &program)
                ),
            ));
        }
        Ok(())
    }
}

/// How to make the program runnable, for the refusal's message.
fn fix(why: &NotRunnable, program: &str) -> String {
    if let Some(outside) = why.outside_image() {
        let dir = outside.parent().filter(|p| *p != Path::new("/")).unwrap_or(outside);
        return format!(
            "To fix: add {} (or a directory above it, not /) to `[sandbox] image`, with the directories its \
             libraries live in",
            dir.display()
        );
    }
    match why {
        NotRunnable::NotOnPath { .. } => match on_host_path(program) {
            Some(host) => format!(
                "On this host it is {}, which the worker does not see: name it by its absolute path in the \
                 manifest and add its directory to `[sandbox] image` (or install it under /usr)",
                host.display()
            ),
            None => "To fix: install it in the image (e.g. under /usr/bin), or name it by an absolute path in a \
                     directory listed in `[sandbox] image`"
                .to_owned(),
        },
        NotRunnable::Relative(_) => "To fix: name the program by an absolute path inside the image".to_owned(),
        _ => "To fix: install the program in the image as an executable file, or correct its path in the manifest"
            .to_owned(),
    }
}

/// Where a bare `program` is on this process's own `PATH`, for the hint.
fn on_host_path(program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}
