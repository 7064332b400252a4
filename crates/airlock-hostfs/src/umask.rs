//! The process's umask, read without changing it.
//!
//! `umask(2)` can only be read by setting it, which would briefly give
//! every thread of the process another mask; Linux 4.7 and later show it as
//! `Umask:` in `/proc/self/status`, which is read instead. Only where that
//! line is missing is it set and set back, once, at start.

/// The process's file-mode creation mask (`0o022` on most systems).
pub fn process_umask() -> u32 {
    if let Some(mask) = std::fs::read_to_string("/proc/self/status").ok().as_deref().and_then(umask_line) {
        return mask;
    }
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    rustix::process::umask(old);
    old.bits() & 0o777
}

fn umask_line(status: &str) -> Option<u32> {
    let value = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(value.trim(), 8).ok().map(|m| m & 0o777)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_status_line() {
        assert_eq!(umask_line("Name:\tx\nUmask:\t0027\nState:\tR\n"), Some(0o027));
        assert_eq!(umask_line("Name:\tx\n"), None);
        // Setting the mask here would race the other tests' files.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert_eq!(Some(process_umask()), umask_line(&status));
    }
}
