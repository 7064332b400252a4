//! Integration tests of the native tier: real namespaces, Landlock and
//! seccomp, no mocks. One test binary (modules below).
mod bound;
mod confinement;
mod files;
mod fs_socket;
mod lifecycle;
mod limits;
mod live;
mod program;
mod provided;
mod surface;
mod unprivileged;
mod util;
mod warm;
