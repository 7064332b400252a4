//! Integration tests: the real `airlock` binary on real files in temp
//! directories. One test binary, many modules (links once).

mod approval;
mod attacks;
mod bounds;
mod cli_ux;
mod concurrency;
mod crash;
mod examples;
mod git;
mod interop;
mod isolated;
mod journal;
mod journal_segments;
mod manifest_once;
mod mcp;
mod mcp_worker;
mod mcpkit;
mod parser;
mod policy;
mod prepare;
mod principals;
mod protocol_numbers;
mod race;
mod resolvers;
mod run;
mod runkit;
mod source;
mod staging_pool;
mod tools;
mod unprivileged;
mod util;
mod worker;
