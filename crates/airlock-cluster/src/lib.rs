//! Scale-out for airlock (DESIGN.md, "Scale-out"): an *edge* (the airlock
//! that owns the files) prepares, authorizes and publishes as always, but
//! runs a call's tool on a *worker* of another host, reached through NATS
//! JetStream.
//!
//! - The edge uploads each input snapshot to an object store under its
//!   SHA-256 and publishes an [`order::Order`] signed with its journal key
//!   to `airlock.calls.<tier>.<pool>`, the invocation id as its message id
//!   ([`edge`]).
//! - A worker pulls it from the shared work queue, verifies the edge's
//!   signature against keys pinned in a bucket, the descriptor's digest and
//!   every blob's hash, runs it on its tier exactly as a local call, uploads
//!   its streams and output, and publishes a signed [`receipt::Receipt`]
//!   ([`worker`]).
//! - The edge verifies the receipt under a pinned worker key and every blob
//!   it fetches; publication, the journal and file authority never leave it.
#![forbid(unsafe_code)]

pub mod admin;
pub mod bus;
pub mod caps;
mod client;
pub mod credentials;
pub mod duplicates;
pub mod edge;
pub mod error;
pub mod journal_stream;
pub mod order;
pub mod policy;
pub mod receipt;
pub mod signed;
pub mod subjects;
pub mod worker;

pub use bus::{Bus, Endpoint};
pub use credentials::Credentials;
pub use error::ClusterError;
pub use order::{Blob, Order, OrderInput, OrderOutput, RunSpec};
pub use receipt::{Ran, Receipt, Verdict};
pub use subjects::Role;
