//! Fuzzes the host's reader of a repository's `.git/index` (the one parser
//! of that hostile file outside a worker): any bytes give entries within
//! the bounds it promises, and the trust rule holds for each.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    airlock_git::fuzzing::index(data);
    // The same bytes behind a valid header (the version from the first
    // byte, up to 63 entries from the next two), so that a run without
    // coverage feedback (CI's smoke run) reaches the entries too.
    if let [version, c0, c1, rest @ ..] = data {
        let mut index = b"DIRC".to_vec();
        index.extend_from_slice(&(2 + u32::from(*version) % 3).to_be_bytes());
        index.extend_from_slice(&(u32::from(u16::from_be_bytes([*c0, *c1])) % 64).to_be_bytes());
        index.extend_from_slice(rest);
        airlock_git::fuzzing::index(&index);
    }
});
