//! What `airlock --version` says: the version, the Git commit it was built
//! from (`unknown` without Git, see `build.rs`) and the worker tiers built in.

/// The worker tiers this build can run (`[sandbox] tier`): a literal, for
/// `concat!`; the `--version` test holds it to `ALL_TIERS`.
macro_rules! built_tiers {
    () => {
        "native, gvisor, docker, microvm"
    };
}

/// `0.1.0 (commit 5f818c5; tiers: native, gvisor, docker, microvm)`.
pub const TEXT: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("AIRLOCK_GIT_COMMIT"), "; tiers: ", built_tiers!(), ")");
