//! Fuzzes manifest parsing and validation: any input is a manifest or a
//! refusal with a reason code, never a panic; an accepted manifest binds no
//! arguments without refusing cleanly either.
#![no_main]

use airlock_core::manifest::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(manifest) = Manifest::parse(text, "fuzz.clad.toml") else { return };
    assert!(manifest.tool.timeout_seconds >= 1);
    assert!(manifest.tool.timeout_seconds <= airlock_core::limits::hard::MAX_TIMEOUT_SECONDS);
    let _ = manifest.check_executable();
    if let Ok(args) = manifest.bind_args(&[], &[]) {
        let _ = manifest.build_argv(&args);
        let _ = manifest.filesystem_plan(&args);
    }
});
