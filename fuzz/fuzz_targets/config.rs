//! Fuzzes `airlock.toml` parsing: any input is a configuration or a
//! refusal with a reason code, never a panic; limits stay within the hard
//! ceilings.
#![no_main]

use airlock_core::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(config) = Config::parse(text, None, std::path::Path::new("/fuzz")) else { return };
    assert!(config.ceilings.len() <= airlock_core::config::MAX_CEILINGS);
    assert!(config.limits.max_inputs <= airlock_core::limits::hard::MAX_INPUTS);
    assert!(config.limits.max_input_bytes <= airlock_core::limits::hard::MAX_INPUT_BYTES);
});
