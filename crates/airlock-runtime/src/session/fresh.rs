//! Whether a session still holds what it was started with: every input's
//! host file has its snapshot's bytes, and the output's parent is the
//! directory held at start.

use super::Session;
use crate::Runtime;
use airlock_core::{ReasonCode, Refusal, RelPath};

impl Runtime {
    /// `session.stale` when an input's host file no longer has its
    /// snapshot's bytes, or the output's parent is no longer the directory
    /// held at start.
    pub(super) fn check_fresh(&self, session: &Session) -> Result<(), Refusal> {
        let record = session.prepared.record();
        let limits = &self.config().limits;
        for input in &record.inputs {
            let path = RelPath::parse(&input.path)?;
            let stale = |why: String| {
                Refusal::new(
                    ReasonCode::SessionStale,
                    format!(
                        "input {:?} {why} since the session started; the session was discarded: start a new one",
                        input.path
                    ),
                )
            };
            let (ceiling, rel) = self.ceiling_for(&path)?;
            let rel = rel.ok_or_else(|| stale("is a ceiling directory".into()))?;
            let dir = crate::ceilings::open(self.authority(), ceiling, self.protected())?;
            let file = airlock_hostfs::InputFile::open(self.resolver(), &dir, &rel, &path, limits.max_input_file_bytes)
                .map_err(|e| stale(format!("cannot be read ({})", Refusal::from(e).code)))?;
            let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
            let info = file
                .snapshot_into(&mut hasher, limits.max_input_file_bytes)
                .map_err(|e| stale(format!("cannot be read ({})", Refusal::from(e).code)))?;
            if info.sha256_tagged() != input.sha256 || info.bytes != input.bytes {
                return Err(stale("changed".into()));
            }
        }
        if let (Some(out), Some(held)) = (&record.output, session.prepared.output()) {
            let path = RelPath::parse(&out.path)?;
            let creating = record.descriptor.command_boundary.filesystem.create_dirs.is_some();
            let now = self.hold_output(&path, creating).map(|h| h.parent().identity());
            if now.as_ref().ok() != Some(&held.parent().identity()) {
                return Err(Refusal::new(
                    ReasonCode::SessionStale,
                    format!(
                        "the parent directory of output {:?} is not the one held when the session started; the \
                         session was discarded: start a new one",
                        out.path
                    ),
                ));
            }
        }
        Ok(())
    }
}
