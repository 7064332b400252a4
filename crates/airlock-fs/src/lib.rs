//! airlock-fs: the clients a program inside an isolated worker uses to
//! reach the named roots airlock grants it.
//!
//! The worker holds one end of a connected socket (descriptor 3, named by
//! `AIRLOCK_FS_FD`). Every call is one frame of the
//! [`airlock_fsproto`] protocol out and one back: read, write or list a
//! path in a root that the worker knows only by name. Airlock checks and
//! relays each call; the worker never sees a host path or a host descriptor.
//!
//! - [`Client`]: the Rust library ([`Client::read`] of a whole file and
//!   [`Client::read_range`] / [`Client::read_into`], streamed in 64 KiB
//!   frames; [`Client::write`] / [`Client::write_from`], one frame or a
//!   chunked write; [`Client::list`] with each entry's [`EntryKind`]),
//!   errors as [`FsError`].
//! - [`cli`]: the `airlock-fs` command for shell scripts.
//! - [`PYTHON_MODULE`]: the source of `airlock_fs.py`, the same client for
//!   Python programs (standard library only).
//!
//! ```no_run
//! # fn main() -> Result<(), airlock_fs::FsError> {
//! let mut fs = airlock_fs::Client::from_env()?;
//! let text = fs.read("data", "message.txt")?;
//! fs.write("results", "copy.txt", &text)?;
//! let listing = fs.list("data", ".", 256)?;
//! println!("{} names, {} skipped, truncated: {}", listing.names.len(), listing.skipped, listing.truncated);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod cli;
mod client;
mod error;
mod ids;

pub use airlock_fsproto::EntryKind;
pub use client::{Client, Frame, Listing, Streamed};
pub use error::FsError;

/// The Python client module (`airlock_fs.py`), to be provided to workers
/// (e.g. at `/.airlock/python/airlock_fs.py`).
pub const PYTHON_MODULE: &str = include_str!("../python/airlock_fs.py");
