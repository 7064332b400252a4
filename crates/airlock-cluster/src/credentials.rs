//! Who an airlock is on the cluster: nobody (a server that asks for no
//! credentials), a user with a password, or an NKey (an Ed25519 key of
//! NATS's own; the server holds only its public half, per account, so
//! each tenant's edges and workers live in an account of their own with
//! subjects, streams and buckets no other account sees). No secret is
//! ever printed: `Debug` shows the user name or the NKey's public key.

use crate::error::ClusterError;

/// How this process authenticates to the NATS servers.
#[derive(Clone, Default)]
pub enum Credentials {
    /// No credentials.
    #[default]
    None,
    /// A user and its password.
    Password {
        /// The user name.
        user: String,
        /// Its password.
        password: String,
    },
    /// A user NKey: the server checks a signature of its nonce.
    NKey {
        /// The seed (`SU…`).
        seed: String,
        /// Its public key (`U…`), the one the server's configuration names.
        public: String,
    },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::None => f.write_str("None"),
            Credentials::Password { user, .. } => f.debug_struct("Password").field("user", user).finish(),
            Credentials::NKey { public, .. } => f.debug_struct("NKey").field("public", public).finish(),
        }
    }
}

impl Credentials {
    /// The NKey whose seed is `seed` (surrounding white space ignored); a
    /// seed that does not parse, or is not a user's, is refused without
    /// being repeated.
    pub fn nkey(seed: &str) -> Result<Credentials, ClusterError> {
        let seed = seed.trim();
        let pair = nkeys::KeyPair::from_seed(seed).map_err(|e| {
            ClusterError::Protocol(format!("the NKey seed does not parse ({e}); it must be a user seed (SU…)"))
        })?;
        let public = pair.public_key();
        if pair.key_pair_type() != nkeys::KeyPairType::User {
            return Err(ClusterError::Protocol(format!(
                "the NKey {public} is not a user key: a client of the cluster connects with a user seed (SU…)"
            )));
        }
        Ok(Credentials::NKey { seed: seed.to_owned(), public })
    }

    /// The client options that present these credentials.
    pub(crate) fn options(&self) -> async_nats::ConnectOptions {
        match self {
            Credentials::None => async_nats::ConnectOptions::new(),
            Credentials::Password { user, password } => {
                async_nats::ConnectOptions::with_user_and_password(user.clone(), password.clone())
            }
            Credentials::NKey { seed, .. } => async_nats::ConnectOptions::with_nkey(seed.clone()),
        }
    }
}

/// A new user NKey: its seed (secret) and its public key.
pub fn new_user_nkey() -> (String, String) {
    let pair = nkeys::KeyPair::new_user();
    // A freshly made pair always has its seed.
    let seed = pair.seed().unwrap_or_default();
    (seed, pair.public_key())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_seed_is_taken_and_nothing_else_and_no_secret_is_printed() {
        let (seed, public) = new_user_nkey();
        assert!(seed.starts_with("SU") && public.starts_with('U'), "{public}");
        let c = Credentials::nkey(&format!("{seed}\n")).unwrap();
        let shown = format!("{c:?}");
        assert!(shown.contains(&public) && !shown.contains(&seed), "{shown}");
        let account = nkeys::KeyPair::new_account().seed().unwrap();
        let e = Credentials::nkey(&account).unwrap_err();
        assert!(e.to_string().contains("not a user key") && !e.to_string().contains(&account), "{e}");
        let e = Credentials::nkey("SUnotaseed").unwrap_err();
        assert!(!e.to_string().contains("SUnotaseed"), "{e}");
        let p = Credentials::Password { user: "edge".into(), password: "hunter2".into() };
        assert!(!format!("{p:?}").contains("hunter2"));
    }
}
