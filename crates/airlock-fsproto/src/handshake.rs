//! The helpers' start-up handshake. Before airlock gives a helper
//! (`airlock-broker`, `airlock-fs`) anything, it runs the sealed copy once
//! with [`HANDSHAKE_FLAG`] alone: no descriptors beyond the standard three,
//! an empty environment. The helper prints one [`Handshake`] line and
//! exits 0; airlock refuses (`helper.mismatch`) unless the protocol version
//! and the build fingerprint equal its own. A helper from another build, or
//! one that predates the handshake (it refuses the flag), never gets a root.

/// The version of this protocol; a helper speaking another is refused.
pub const PROTOCOL_VERSION: u32 = 1;

/// This build's fingerprint (32 hex digits, see `build.rs`): equal in the
/// `airlock`, `airlock-broker` and `airlock-fs` of one build.
pub const BUILD_FINGERPRINT: &str = env!("AIRLOCK_BUILD_FINGERPRINT");

/// The helper's only argument when asked for its handshake.
pub const HANDSHAKE_FLAG: &str = "--handshake";

/// Most bytes a handshake line may have.
pub const MAX_HANDSHAKE: usize = 256;

/// What a helper says it is: `PROGRAM proto N build HEX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// The helper's name (`airlock-broker`, `airlock-fs`).
    pub program: String,
    /// Its protocol version.
    pub proto: u32,
    /// Its build fingerprint.
    pub build: String,
}

impl Handshake {
    /// This build's handshake for `program`.
    pub fn ours(program: &str) -> Handshake {
        Handshake { program: program.to_owned(), proto: PROTOCOL_VERSION, build: BUILD_FINGERPRINT.to_owned() }
    }

    /// The line a helper prints (with its newline).
    pub fn line(&self) -> String {
        format!("{} proto {} build {}\n", self.program, self.proto, self.build)
    }

    /// Parses one line exactly as [`Handshake::line`] writes it.
    pub fn parse(text: &str) -> Option<Handshake> {
        let line = text.strip_suffix('\n')?;
        let mut words = line.split(' ');
        let program = words.next()?;
        let proto = match (words.next()?, words.next()?) {
            ("proto", n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && n.len() <= 9 => n.parse().ok()?,
            _ => return None,
        };
        let build = match (words.next()?, words.next()?) {
            ("build", b) if !b.is_empty() && b.len() <= 64 && b.bytes().all(|c| c.is_ascii_hexdigit()) => b,
            _ => return None,
        };
        if words.next().is_some() || program.is_empty() || !program.bytes().all(|b| b.is_ascii_graphic()) {
            return None;
        }
        Some(Handshake { program: program.to_owned(), proto, build: build.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_round_trips_and_nothing_else_parses() {
        let ours = Handshake::ours("airlock-broker");
        assert_eq!(BUILD_FINGERPRINT.len(), 32);
        assert_eq!(Handshake::parse(&ours.line()), Some(ours));
        for bad in [
            "",
            "airlock-broker proto 1 build abc",
            "airlock-broker proto 1 build abc\nmore\n",
            "airlock-broker proto x build abc\n",
            "airlock-broker proto 1 build xyz\n",
            "airlock-broker proto 1 build abc extra\n",
            "airlock-broker build abc proto 1\n",
            " proto 1 build abc\n",
        ] {
            assert_eq!(Handshake::parse(bad), None, "{bad:?}");
        }
    }
}
