//! Integration tests of the native tier: real namespaces, Landlock and
//! seccomp, no mocks. One test binary (modules below).
mod confinement;
mod files;
mod lifecycle;
mod live;
mod program;
mod unprivileged;
mod util;
