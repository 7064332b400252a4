//! Integration tests: one binary, modules per concern.

mod concurrency;
mod journal;
mod key;
mod segments;
mod util;
