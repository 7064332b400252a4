//! What `airlock --version` says: the version, the Git commit it was built
//! from (`unknown` without Git, see `build.rs`) and the worker tiers built in.

/// The worker tiers this build can run (`[sandbox] tier`); the others are
/// reported by `airlock doctor` as not built.
macro_rules! built_tiers {
    () => {
        "native, gvisor, docker"
    };
}

/// `0.1.0 (commit 5f818c5; tiers: native, gvisor, docker)`.
pub const TEXT: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("AIRLOCK_GIT_COMMIT"), "; tiers: ", built_tiers!(), ")");
