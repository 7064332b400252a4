//! The explicit token that lets code reach the host by absolute path.

/// Proof that the caller may open host paths by name.
///
/// Everything else in this crate works relative to a handle it was given.
/// Only the binary's entry point should make one (with
/// [`HostAuthority::ambient`]), so every place that turns a host path string
/// into a handle is greppable (cap-std's `ambient_authority()` idea).
#[derive(Debug)]
pub struct HostAuthority {
    _private: (),
}

impl HostAuthority {
    /// Claims ambient authority over host paths.
    pub fn ambient() -> HostAuthority {
        HostAuthority { _private: () }
    }
}
