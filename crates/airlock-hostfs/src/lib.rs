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
//! # One resolver, one walker, one checked file
//!
//! The most security-critical code exists once. Every path is resolved by
//! [`Resolver`] (its two backends compared by one test table); every tree is
//! walked by [`Dir::read_entries`] and the `open_child_*` calls, whose child
//! must be the inode the listing saw (`path.race`) on its parent's mount
//! (`path.mount_crossing`); every file is read through [`RegularFile`]'s one
//! rule. They report a typed fault (`fault.rs`); the edges name it: this
//! crate's [`Error`] codes for inputs, source queries and Git snapshots, the
//! broker's codes in [`rooted`]. A caller that wants another code (a Git
//! snapshot skipping a hard-linked file, a source query counting a race as
//! `changed`) maps the code at its own edge; no parameter forks a rule.
//!
//! Nothing walked crosses a mount, Git snapshots included: a repository's
//! content is what lies on the repository's mount, so a bind mount in a work
//! tree cannot slip another tree's files into a snapshot (the walker's docs
//! say how Git treats it).
//!
//! # Inputs
//!
//! An input is opened `O_PATH` first and checked (regular, one link, within
//! size) before it is reopened for reading, so a refused file is never opened
//! for reading at all. A snapshot whose size or ctime moves while it is read is
//! refused (`input.changed`).
//!
//! # Publication
//!
//! Publication is by identity, never by name (ATTACKS 28). The held parent's
//! `(dev, ino)` is checked against the descriptor; the output is copied into an
//! unnamed `O_TMPFILE` (`0600`, `O_RDWR`) in the held parent and synced, and the
//! receipt's size and hash are read back through that descriptor; the mode
//! the published file gets ([`Candidate::with_mode`]) is set on that
//! descriptor just before the link (a named candidate: after its rename is
//! checked). With `create_parents`, [`HeldOutput::hold_creating`] holds the
//! deepest existing ancestor and [`HeldOutput::make_next_parent`] makes the
//! missing directories through handles (`parents.rs`).
//! `linkat(fd, "", parent, name, AT_EMPTY_PATH)` publishes exactly that inode
//! and fails with `EEXIST` on a taken name (`output.exists`), so another user of
//! a shared (`0777`/`1777`) output directory has nothing to swap. Kernels before
//! 6.10 allow `AT_EMPTY_PATH` only with `CAP_DAC_READ_SEARCH`: there the link
//! goes through `/proc/self/fd/N` with `AT_SYMLINK_FOLLOW`. A file system
//! without `O_TMPFILE` gets a named candidate `.airlock-candidate-ID`,
//! `renameat2(RENAME_NOREPLACE)`, then an `fstatat` of the output's name that
//! must be the open candidate's `(dev, ino)`; otherwise
//! `output.identity_mismatch` (the runtime journals it in
//! `FilePublicationFinished`), and the foreign file is left in place, never
//! unlinked, never vouched for. A named candidate is removed on failure only
//! while its name is still its inode. Where the call's staged output (a
//! [`StagedFile`]) can be moved into the held parent, it is the candidate
//! itself ([`HeldOutput::adopt_staged`]): linked from its descriptor when
//! unnamed, renamed (no replace, then checked by `(dev, ino)`) from its
//! private staging directory when named.
//!
//! # Control files
//!
//! [`read_control_file`] opens the directory, then the file beneath it with
//! `O_NOFOLLOW | O_NONBLOCK`, requires a regular file, and takes the owner and
//! mode of both by `fstat` on those handles, so the caller judges the very
//! bytes it parses. [`holders`] names the directories that hold a control
//! file: for each existing prefix of its path, the directory opened (`O_PATH`)
//! and every directory above it by `openat(fd, "..")` up to `/`, so a link on
//! the way counts where it lies and where it leads, and a missing file where
//! it would be made.
//!
//! # Rooted operations (the named-root broker)
//!
//! [`rooted`] resolves beneath the root handle with no link and no mount
//! crossed (`broker.symlink`, `broker.mount_crossing`, `broker.not_found`; an
//! entry renamed while it is resolved or opened, once 16 `openat2` retries are
//! spent, is `broker.race`), reads only regular files with one link
//! (`broker.not_regular`, `broker.hardlink`), and lists names sorted, skipping
//! (and counting) names the path rules refuse. A write is prepared as an
//! `O_TMPFILE` (`0600`, or the mode of
//! [`rooted::prepare_write_with_mode`]) written and `fsync`ed in the
//! target's directory (its and the directory's `(dev, ino)` reported), then
//! committed: linked under
//! the staging name airlock chose (`.airlock-stage-` + 32 hex), renamed over
//! the target, the directory synced, and the target must then be the prepared
//! `(dev, ino)`, else `broker.race`.
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
mod copy;
mod dir;
mod error;
mod fault;
mod input;
mod output;
mod parents;
mod private;
mod publish;
mod resolve;
pub mod rooted;
mod stamp;
#[cfg(test)]
mod testutil;
mod umask;
mod walk;

pub use authority::HostAuthority;
pub use checked::{RangeRead, RegularFile};
pub use control::{holders, read_control_file, Ancestor, ControlFile, Owner};
pub use dir::Dir;
pub use error::{Error, Result};
pub use input::{InputFile, SnapshotInfo};
pub use output::HeldOutput;
pub use parents::MadeDir;
pub use private::{random_suffix, PrivateDir};
pub use publish::{AdoptError, Candidate, CandidateMode, EntryIdentity, Published, StagedFile, CANDIDATE_PREFIX};
pub use resolve::{Resolver, ResolverKind};
pub use stamp::{ListingStamp, SETTLED_AFTER};
pub use umask::process_umask;
pub use walk::{Entry, EntryKind};
