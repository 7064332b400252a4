//! airlock-hostfs: the only crate that opens host paths.
//!
//! Every declared path is resolved *through file handles* beneath a
//! ceiling's directory handle, never by string prefix and never following a
//! link at any component:
//!
//! - [`Resolver`]: the one resolver. `openat2(RESOLVE_BENEATH | NO_SYMLINKS
//!   | NO_MAGICLINKS | NO_XDEV)` where the kernel allows it, and a
//!   per-component `O_NOFOLLOW` walk that gives the same answers where it
//!   does not; inputs, outputs, source queries and the broker all use it;
//! - [`RegularFile`]: the one checked file. Opened `O_PATH` first, checked
//!   to be a regular file with one link (and within a bound), then reopened
//!   non-blocking as the same inode; every file read goes through it;
//! - [`InputFile`]: a declared input opened as a [`RegularFile`] within
//!   `max_file_bytes`, and its bounded snapshot, hashed while it is read;
//! - [`HeldOutput`]: holds an output's parent directory open and records its
//!   `(dev, ino)`; refuses an existing output of any kind; publishes a
//!   [`Candidate`] by identity (an `O_TMPFILE` linked from its descriptor,
//!   or a checked no-replace rename);
//! - [`Dir::read_entries`], [`Dir::open_child_dir`], [`Dir::open_child_file`]:
//!   the one walker, for source queries and Git snapshots alike (every
//!   child checked to be the listed inode on its parent's mount);
//! - [`rooted`]: read, list and replace-by-rename beneath a granted root
//!   directory, for the filesystem broker (through the same resolver and
//!   checked file, with the broker's error type and codes);
//! - [`read_control_file`], [`holders`], [`Dir::ancestry`]: airlock's own
//!   control files read without following a link, with their owner and
//!   mode, and directories named by `(dev, ino)` up to `/`;
//! - [`PrivateDir`]: the state directory, `0700`, worked on through handles,
//!   with a removal that never follows links.
//!
//! Reaching the host by absolute path needs a [`HostAuthority`], which only
//! the binary makes.
//!
//! # What this crate does not do
//!
//! It is not a sandbox. It does not stop a process holding these handles
//! from using them; it does not defend against a host administrator who
//! bind-mounts over a ceiling while it is open (mount crossings beneath a
//! ceiling are refused, a mount over the ceiling itself is the operator's);
//! and a snapshot read is cooperative I/O, so a ceiling on a hung network
//! file system can stall it.
//!
//! ```no_run
//! use airlock_core::{RelPath, ResolverChoice};
//! use airlock_hostfs::{Dir, HostAuthority, InputFile, Resolver};
//! let authority = HostAuthority::ambient();
//! let ceiling = Dir::open_ambient(&authority, "/srv/data".as_ref())?;
//! let resolver = Resolver::new(ResolverChoice::Auto)?;
//! let path = RelPath::parse("input.csv").unwrap();
//! let input = InputFile::open(&resolver, &ceiling, &path, &path, 8 << 20)?;
//! let mut copy = Vec::new();
//! let info = input.snapshot_into(&mut copy, 8 << 20)?;
//! println!("{} bytes, {}", info.bytes, info.sha256_tagged());
//! # Ok::<(), airlock_hostfs::Error>(())
//! ```
#![deny(missing_docs)]

mod authority;
mod checked;
mod control;
mod dir;
mod error;
mod fault;
mod input;
mod output;
mod private;
mod publish;
mod resolve;
pub mod rooted;
#[cfg(test)]
mod testutil;
mod walk;

pub use authority::HostAuthority;
pub use checked::{RangeRead, RegularFile};
pub use control::{holders, read_control_file, Ancestor, ControlFile, Owner};
pub use dir::Dir;
pub use error::{Error, Result};
pub use input::{InputFile, SnapshotInfo};
pub use output::HeldOutput;
pub use private::{random_suffix, PrivateDir};
pub use publish::{Candidate, CandidateMode, EntryIdentity, Published, CANDIDATE_PREFIX};
pub use resolve::{Resolver, ResolverKind};
pub use walk::{Entry, EntryKind};
