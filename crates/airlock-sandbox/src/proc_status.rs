//! `/proc/PID/status`, read for the few facts the caller checks about a
//! sandbox's PID 1 before trusting its pid (its parent, its pid inside its
//! namespace, its state).
#![forbid(unsafe_code)]

/// `/proc/PID/status`, empty when it cannot be read (the process is gone).
pub(crate) fn read(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default()
}

/// The trimmed value of the `name` line (`"PPid:"`) of a `/proc/PID/status`
/// text, empty when it has none.
pub(crate) fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status.lines().find_map(|l| l.strip_prefix(name)).map_or("", str::trim)
}

#[cfg(test)]
mod tests {
    #[test]
    fn fields_are_read_from_this_process() {
        let status = super::read(std::process::id() as i32);
        assert_eq!(super::field(&status, "Pid:"), std::process::id().to_string());
        assert_eq!(super::field(&status, "NoSuchField:"), "");
        assert_eq!(super::read(-1), "");
    }
}
