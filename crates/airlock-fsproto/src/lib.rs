//! airlock-fsproto: the protocol of the named-root file broker.
//!
//! Three parties speak it: a worker program (through the `airlock-fs`
//! clients), `airlock` (which checks and relays every call) and the broker
//! (which holds one directory handle per root). Every message is a frame: a
//! `u32` big-endian length, then that many bytes of one UTF-8 JSON object,
//! or, for the frames that carry file bytes (a read's answer, a write, an
//! append), a data frame: `0x01`, a `u16` big-endian header length, a JSON
//! header, then the bytes raw ([`split`], [`decode_body`], [`encode_data`];
//! the `data` module's header has the grammar). Decoding is strict: bounded
//! size, bounded nesting, no unknown fields, no missing or surplus fields
//! for the operation named, data only where the operation carries it.
//!
//! - [`Request`] / [`Response`]: worker ⇄ airlock, roots by name.
//! - [`BrokerRequest`] / [`BrokerResponse`]: airlock ⇄ broker, roots by
//!   index, writes split into prepare / commit so airlock can save a durable
//!   recovery record in between.
//! - [`check_path`]: the path rules (seed 003) every party applies.
//! - [`Rights`], [`check_root_name`]: the grant grammar.
//! - [`Handshake`]: what a helper says it is before it gets anything
//!   ([`PROTOCOL_VERSION`], [`BUILD_FINGERPRINT`]).
//!
//! Every number is bounded where it is decoded: ids at [`MAX_ID`], a
//! worker's `max` at its operation's limit ([`MAX_IO_BYTES`],
//! [`MAX_LIST_NAMES`]); the `validate` methods refuse anything over
//! ([`ProtoError::OutOfRange`]), so no party carries an unbounded number
//! into its budgets, its answers or the journal.
//!
//! # The messages
//!
//! A frame is at most 96 KiB, its JSON nested at most 3 deep. Worker →
//! airlock: `{id, op, root, path, …}` with `read` (`max`, `offset`?,
//! `version`?), `list` (`max`), `write` (a data frame), and a chunked
//! write for more than one frame: `write_open`, `write_append` (`stream`,
//! a data frame), `write_commit` / `write_abort` (`stream`). airlock →
//! worker: `{id, size + eof + version (a data frame) | written | names +
//! kinds + skipped + truncated | stream | aborted | error {code,
//! message}}`. Ids strictly increase across everything sent on
//! the socket: clients use `max(last + 1, CLOCK_MONOTONIC ns)`, so the
//! sequential `airlock-fs` processes of one shell script agree. airlock →
//! broker names roots by index and splits a write into `write_prepare` (an
//! `O_TMPFILE` written and synced in the target's directory; the answer is
//! its and the directory's `(dev, ino)`), `write_commit` (link it under the
//! staging name airlock chose, `.airlock-stage-` + 32 hex, rename it over the
//! target, sync the directory, check the target is the prepared file) and
//! `write_abort`; a chunked write is `write_open` (the same unnamed file,
//! empty), `write_append` …, then the same `write_commit`.
//!
//! # The window
//!
//! A worker may have up to its window of requests sent and not yet answered
//! ([`ENV_WINDOW`], airlock's `outstanding` budget: 1 … 8; [`window`]
//! parses it); more is `broker.budget` and ends the submission. Answers come
//! strictly in request order. airlock forwards read frames and appends to
//! the broker as they arrive (the broker, too, answers in order), and holds
//! every other operation until all before it are answered. Each request is
//! charged and checked when airlock takes it, in order; each answer is
//! checked (`version`, sizes) and logged in order. The first request that
//! fails, in request order, ends the submission: its error is the last
//! answer, the socket is then shut, and the requests after it are never
//! answered (read frames already forwarded are discarded; appends already
//! forwarded went into an unnamed file that is never named).
//!
//! Grants: root names are `[a-z][a-z0-9_-]{0,63}`, 1–64 roots a submission;
//! the rights `r` (read), `w` (create or replace) and `l` (list) are
//! independent.

mod data;
mod frame;
mod grant;
mod handshake;
mod message;
mod paths;
mod wait;

pub use data::{decode_body, encode_body, encode_data, frame_head, split, Body, DATA_TAG, MAX_DATA_HEADER};
pub use frame::{
    decode, encode, framed, read_frame, read_frame_into, take_frame, write_frame, write_parts, ProtoError,
};
pub use grant::{check_root_name, Rights, RightsError};
pub use handshake::{Handshake, BUILD_FINGERPRINT, HANDSHAKE_FLAG, MAX_HANDSHAKE, PROTOCOL_VERSION};
pub use message::{
    BrokerOp, BrokerRequest, BrokerResponse, EntryKind, ErrorBody, Op, ReadStamp, Request, Response, WriteIdentity,
};
pub use paths::{check_component, check_path, check_stage_name, PathError};
pub use wait::{wait_ready, PollFlags};

/// Largest frame body accepted, in bytes: a 64 KiB data frame's payload
/// plus room for its header.
pub const MAX_FRAME: usize = 96 * 1024;
/// Deepest JSON nesting accepted (an object holding an array or object).
pub const MAX_DEPTH: usize = 3;
/// Most bytes one read or write moves.
pub const MAX_IO_BYTES: u64 = 64 * 1024;
/// Most names one list returns.
pub const MAX_LIST_NAMES: u64 = 256;
/// The largest read offset: 2^53 − 1, like [`MAX_ID`].
pub const MAX_OFFSET: u64 = MAX_ID;
/// Hex digits of a read's `version`.
pub const VERSION_LEN: usize = 32;
/// Most chunked writes one submission holds open at once.
pub const MAX_OPEN_WRITES: usize = 4;
/// The largest id (of a request or of a prepared write): 2^53 − 1, the
/// largest integer every JSON reader holds exactly and the journal writes
/// as a number. A larger id is a protocol error.
pub const MAX_ID: u64 = (1 << 53) - 1;
/// Most roots one submission holds.
pub const MAX_ROOTS: usize = 64;
/// Names starting with this (in any letter case) are the broker's staging
/// entries; no path may name one.
pub const STAGE_PREFIX: &str = ".airlock-stage-";
/// The descriptor number of the socket inside the worker.
pub const WORKER_FD: i32 = 3;
/// The environment variable that names [`WORKER_FD`] inside the worker.
pub const ENV_FD: &str = "AIRLOCK_FS_FD";
/// The environment variable that tells the worker its window: how many
/// requests it may have sent and not yet seen answered (airlock's
/// `outstanding` budget). Absent or not a positive number: one at a time.
pub const ENV_WINDOW: &str = "AIRLOCK_FS_WINDOW";

/// The window [`ENV_WINDOW`]'s value allows: a decimal number of at least
/// 1, else 1 (one request at a time, which any airlock accepts).
pub fn window(value: Option<&str>) -> usize {
    value
        .filter(|v| !v.is_empty() && v.len() <= 4 && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

/// Reason codes carried in [`ErrorBody::code`]. Path grammar refusals use the
/// `path.*` codes of `airlock-core` instead (`path.traversal`, …).
pub mod codes {
    /// The root does not exist in this submission or lacks the right.
    pub const DENIED: &str = "broker.denied";
    /// A component starts with the reserved staging prefix.
    pub const PATH_RESERVED: &str = "broker.path_reserved";
    /// A symbolic link on the path.
    pub const SYMLINK: &str = "broker.symlink";
    /// The path crosses into another mount.
    pub const MOUNT_CROSSING: &str = "broker.mount_crossing";
    /// Nothing at the path (or a parent missing).
    pub const NOT_FOUND: &str = "broker.not_found";
    /// Read of a non-regular file, list of a non-directory, write over a
    /// directory or special file.
    pub const NOT_REGULAR: &str = "broker.not_regular";
    /// Read of a file with more than one link.
    pub const HARDLINK: &str = "broker.hardlink";
    /// A read or write over 64 KiB, a list over 256 names.
    pub const LIMIT: &str = "broker.limit";
    /// A submission budget is spent.
    pub const BUDGET: &str = "broker.budget";
    /// A malformed, oversized, out-of-order or unexpected message.
    pub const PROTOCOL: &str = "broker.protocol";
    /// An entry on the path changed while it was resolved or opened (a
    /// concurrent rename); nothing was read or written. Retrying may work.
    pub const RACE: &str = "broker.race";
    /// The file changed while it was read: between two frames of a
    /// streamed read (its `version` differs) or during one frame.
    pub const CHANGED: &str = "broker.changed";
    /// Any other I/O failure.
    pub const IO: &str = "broker.io";
    /// The submission already failed; no further operation is served.
    pub const ENDED: &str = "broker.ended";
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_window_is_a_positive_decimal_or_one() {
        assert_eq!(super::window(Some("4")), 4);
        assert_eq!(super::window(Some("1")), 1);
        for bad in [None, Some(""), Some("0"), Some("-2"), Some("+2"), Some(" 2"), Some("2x"), Some("99999")] {
            assert_eq!(super::window(bad), 1, "{bad:?}");
        }
    }
}
