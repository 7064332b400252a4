//! Tests of the three clients against a test peer that speaks airlock's
//! side of the protocol on a socketpair. One test binary (modules below).
mod command;
mod library;
mod peer;
mod python;
mod spawn;
