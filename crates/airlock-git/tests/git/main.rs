//! airlock-git against the `git` CLI on repositories the tests build:
//! snapshot through handles, then the very driver code the worker runs
//! (outside a sandbox here; `airlock-cli`'s tests run it in one).
mod control;
mod equal;
mod hostile;
mod limits;
mod util;
