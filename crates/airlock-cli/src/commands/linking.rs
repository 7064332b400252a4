//! How the running `airlock` was linked, for `airlock doctor`
//! (`host.linking`). The static-pie programs of `scripts/static-airlock.sh`
//! start without the dynamic loader, and resolve host names with glibc's
//! built-in `files` and `dns` sources only (no other NSS module loads).

/// `AT_BASE` in the auxiliary vector: where the kernel loaded the program
/// interpreter; absent or 0 for a program without one.
const AT_BASE: u64 = 7;

/// The NSS sources built into glibc, the only ones a static program has.
const BUILT_IN_SOURCES: [&str; 2] = ["files", "dns"];

/// `host.linking` as `(ok, detail)`: ok when this process started
/// without a program interpreter; the detail says what that changes for
/// host-name lookups.
pub fn report() -> (bool, String) {
    let auxv = match std::fs::read("/proc/self/auxv") {
        Ok(auxv) => auxv,
        Err(e) => return (false, format!("cannot read /proc/self/auxv: {e}")),
    };
    if interpreter_loaded(&auxv) {
        return (
            false,
            "airlock is dynamically linked: each start (and each fork of it) pays for the dynamic loader; \
             scripts/static-airlock.sh builds airlock and its helpers as static-pie programs (0.3-0.6 ms less \
             a start here)"
                .to_owned(),
        );
    }
    let unused = match std::fs::read_to_string("/etc/nsswitch.conf") {
        Ok(text) => sources_not_built_in(&text),
        Err(_) => Vec::new(),
    };
    let mut detail = "airlock is a static-pie program: no dynamic loader at start; host names (a NATS URL's) \
                      resolve from /etc/hosts and DNS only"
        .to_owned();
    if !unused.is_empty() {
        detail.push_str(&format!(
            "; /etc/nsswitch.conf's hosts line also names {}, which a static airlock does not consult",
            unused.join(", ")
        ));
    }
    (true, detail)
}

/// True when the auxiliary vector `auxv` (native-endian pairs of words, as
/// `/proc/self/auxv` holds them) names a program interpreter's base.
fn interpreter_loaded(auxv: &[u8]) -> bool {
    const WORD: usize = std::mem::size_of::<u64>();
    let word = |bytes: &[u8]| u64::from_ne_bytes(bytes.try_into().unwrap_or([0; WORD]));
    auxv.chunks_exact(2 * WORD)
        .map(|pair| (word(&pair[..WORD]), word(&pair[WORD..])))
        .take_while(|&(key, _)| key != 0)
        .any(|(key, value)| key == AT_BASE && value != 0)
}

/// The sources of the `hosts` line of an nsswitch.conf `text` other than
/// the built-in ones, in order; `[STATUS=action]` criteria are not sources.
fn sources_not_built_in(text: &str) -> Vec<String> {
    let Some(line) = text.lines().map(|l| l.split('#').next().unwrap_or("")).find_map(|l| {
        let l = l.trim_start();
        l.strip_prefix("hosts").and_then(|rest| rest.trim_start().strip_prefix(':'))
    }) else {
        return Vec::new();
    };
    let mut sources = String::new();
    let mut in_criteria = false;
    for c in line.chars() {
        match c {
            '[' => in_criteria = true,
            ']' => in_criteria = false,
            c if !in_criteria => sources.push(c),
            _ => {}
        }
    }
    sources.split_whitespace().filter(|s| !BUILT_IN_SOURCES.contains(s)).map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auxv(pairs: &[(u64, u64)]) -> Vec<u8> {
        pairs.iter().flat_map(|&(k, v)| k.to_ne_bytes().into_iter().chain(v.to_ne_bytes())).collect()
    }

    #[test]
    fn an_interpreter_is_named_by_a_nonzero_at_base_before_at_null() {
        assert!(interpreter_loaded(&auxv(&[(6, 4096), (AT_BASE, 0x7f00_0000_0000), (0, 0)])));
        assert!(!interpreter_loaded(&auxv(&[(6, 4096), (AT_BASE, 0), (0, 0)])));
        assert!(!interpreter_loaded(&auxv(&[(6, 4096), (0, 0)])));
        assert!(!interpreter_loaded(&auxv(&[(0, 0), (AT_BASE, 1)])), "nothing after AT_NULL counts");
        assert!(!interpreter_loaded(&[]));
    }

    #[test]
    fn this_test_program_is_dynamically_linked() {
        // Test binaries are built without `crt-static`.
        assert!(interpreter_loaded(&std::fs::read("/proc/self/auxv").unwrap()));
    }

    #[test]
    fn only_sources_glibc_does_not_build_in_are_named() {
        let debian =
            "passwd: files\n# hosts: ldap\nhosts:          files mdns4_minimal [NOTFOUND=return] dns myhostname\n";
        assert_eq!(sources_not_built_in(debian), ["mdns4_minimal", "myhostname"]);
        assert_eq!(sources_not_built_in("hosts: files dns\n"), Vec::<String>::new());
        assert_eq!(sources_not_built_in("hosts: files [ !UNAVAIL=return ] resolve # systemd\n"), ["resolve"]);
        assert_eq!(sources_not_built_in("passwd: files\n"), Vec::<String>::new());
        assert_eq!(sources_not_built_in("hostsfoo: ldap\n"), Vec::<String>::new());
    }
}
