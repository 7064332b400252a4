//! Fuzzes the path grammar: any accepted path must be safe by construction.
#![no_main]

use airlock_core::{PathEntry, RelPath};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(path) = RelPath::parse_bytes(data) {
        let s = path.as_str();
        assert!(!s.is_empty() && !s.starts_with('/') && s.len() <= 4096);
        assert!(!s.contains('\\') && !s.contains(':') && !s.bytes().any(|b| b < 0x20 || b == 0x7f));
        for c in path.components() {
            assert!(!c.is_empty() && c != "." && c != ".." && c.len() <= 255);
            assert!(!c.ends_with('.') && !c.ends_with(' '));
            assert!(!c.eq_ignore_ascii_case(".git") && !c.eq_ignore_ascii_case(".airlock"));
        }
        assert!(path.depth() <= 64);
        // Re-parsing what was accepted is stable.
        assert_eq!(RelPath::parse(s).unwrap(), path);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = PathEntry::parse(text);
    }
});
