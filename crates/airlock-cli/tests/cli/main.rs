//! Integration tests: the real `airlock` binary on real files in temp
//! directories. One test binary, many modules (links once).

mod approval;
mod approvers;
mod attacks;
mod bounds;
mod cli_ux;
mod concurrency;
mod control_plane;
mod crash;
mod examples;
mod git;
mod git_control;
mod httpkit;
mod interop;
mod isolated;
mod journal;
mod manifest_once;
mod mcp;
mod mcp_auth;
mod mcp_worker;
mod mcpkit;
mod parser;
mod policy;
mod prepare;
mod principals;
mod publish_race;
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
