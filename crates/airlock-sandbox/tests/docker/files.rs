//! The call's files: inputs read (and only read), the one output exported
//! exactly, bounded by the file-size limit and `max_bytes`, nothing else of
//! the host visible.
use std::time::Duration;

use super::lab::{lab, run_on};
use super::util::{sh, show, text, Dir};

#[test]
fn an_input_is_read_and_the_output_exported_exactly() {
    let Some(lab) = lab("an_input_is_read_and_the_output_exported_exactly") else { return };
    let d = Dir::new();
    let bytes: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 251) as u8).collect();
    d.write("in", &bytes);
    let mut spec = sh("wc -c < data/in.bin; cat data/in.bin data/in.bin > out/result.bin", &[]);
    spec.inputs.push(d.input("in", "data/in.bin"));
    spec.output = Some(d.output("out", "out/result.bin", 1 << 20));
    let o = lab.run(spec);
    assert!(o.exit.success() && o.cleanup_confirmed, "{}", show(&o));
    assert_eq!(text(&o.stdout).trim(), "70000");
    let export = o.output.clone().unwrap();
    assert!(export.exported(), "{}", show(&o));
    assert_eq!(export.bytes, 140_000);
    assert_eq!(d.read("out"), [bytes.clone(), bytes].concat());
}

#[test]
fn the_input_cannot_be_changed_and_the_working_dir_takes_no_files() {
    let Some(lab) = lab("the_input_cannot_be_changed_and_the_working_dir_takes_no_files") else { return };
    let d = Dir::new();
    d.write("in", b"original");
    let script = "echo x >> in.txt && echo appended; echo y > in.txt && echo truncated; \
                  chmod 666 in.txt && echo chmodded; rm -f in.txt && echo removed; \
                  mv in.txt moved && echo moved; echo z > new.txt && echo created; \
                  ln -s /etc/passwd out.txt 2>/dev/null && echo linked; cat in.txt";
    let mut spec = sh(script, &[]);
    spec.inputs.push(d.input("in", "in.txt"));
    spec.output = Some(d.output("out", "out.txt", 1024));
    let o = lab.run(spec);
    assert_eq!(text(&o.stdout), "original", "{}", show(&o));
    assert_eq!(d.read("in"), b"original");
    assert!(o.output.as_ref().unwrap().exported() && d.read("out").is_empty(), "{}", show(&o));
}

#[test]
fn a_sibling_file_and_host_secrets_are_invisible() {
    let Some(lab) = lab("a_sibling_file_and_host_secrets_are_invisible") else { return };
    let d = Dir::new();
    d.write("in", b"granted");
    d.write("sibling", b"secret beside the input");
    let t = lab.tier(None);
    let state = t.tier.settings().state_dir.display().to_string();
    let script = "ls -a .; echo --; ls -a /; for p in \"$@\"; do [ -e \"$p\" ] && echo \"VISIBLE $p\"; done; \
                  cat /etc/shadow 2>/dev/null && echo SHADOW; cat /etc/resolv.conf; echo done";
    let host_dir = d.tmp.path().display().to_string();
    let sibling = d.path("sibling").display().to_string();
    let mut spec = sh(script, &["/etc/shadow", &host_dir, &sibling, &state, "/var/lib/docker", "/root", "/home"]);
    spec.inputs.push(d.input("in", "in.txt"));
    let o = run_on(&t, spec);
    let out = text(&o.stdout);
    assert!(o.exit.success(), "{}", show(&o));
    assert!(!out.contains("VISIBLE") && !out.contains("SHADOW") && !out.contains("secret"), "{out}");
    // The working directory holds the input and nothing else.
    let listing: Vec<&str> = out.lines().take_while(|l| *l != "--").collect();
    assert_eq!(listing, [".", "..", "in.txt"], "{out}");
    assert!(out.trim_end().ends_with("done"));
    // Not even the host's resolvers (the daemon writes a resolv.conf).
    let host_resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    for server in host_resolv.lines().filter(|l| l.starts_with("nameserver") && !l.contains("127.0.0.1")) {
        assert!(!out.contains(server), "{server} visible: {out}");
    }
}

#[test]
fn a_write_past_the_file_size_limit_fails() {
    let Some(lab) = lab("a_write_past_the_file_size_limit_fails") else { return };
    let d = Dir::new();
    let mut spec = sh(
        "dd if=/dev/zero of=out.bin bs=1024 count=64 2>/dev/null; echo out=$?; \
         dd if=/dev/zero of=/tmp/scratch bs=1024 count=64 2>/dev/null; echo tmp=$?; wc -c < /tmp/scratch",
        &[],
    );
    spec.limits.file_size = 8192;
    spec.output = Some(d.output("out", "out.bin", 1 << 20));
    let o = lab.run(spec);
    let out = text(&o.stdout);
    assert!(!out.contains("out=0") && !out.contains("tmp=0"), "{}", show(&o));
    assert!(out.trim_end().ends_with("8192"), "{}", show(&o));
    assert_eq!(d.read("out").len(), 8192, "{}", show(&o));
}

#[test]
fn an_output_over_max_bytes_is_not_exported() {
    let Some(lab) = lab("an_output_over_max_bytes_is_not_exported") else { return };
    let d = Dir::new();
    let mut spec = sh("head -c 100 /dev/zero > out.txt", &[]);
    spec.output = Some(d.output("out", "out.txt", 10));
    let o = lab.run(spec);
    let export = o.output.clone().unwrap();
    assert!(export.over_limit && export.bytes == 0, "{}", show(&o));
    assert_eq!(o.reason_code(), Some("limit.output_size"));
    assert!(d.read("out").is_empty());
}

#[test]
fn stdout_is_bounded_and_drained_into_its_sink() {
    let Some(lab) = lab("stdout_is_bounded_and_drained_into_its_sink") else { return };
    let d = Dir::new();
    let mut spec = sh("head -c 3000000 /dev/zero | tr '\\0' a; head -c 5000 /dev/zero >&2; echo end >&2", &[]);
    spec.stdout_limit = 100_000;
    spec.stderr_limit = 1000;
    spec.stdout_sink = Some(std::fs::File::create(d.path("stdout")).unwrap());
    spec.timeout = Duration::from_secs(60);
    let o = lab.run(spec);
    assert!(o.exit.success(), "{}", show(&o));
    assert!(o.stdout_truncated && o.stderr_truncated);
    assert_eq!(d.read("stdout"), vec![b'a'; 100_000]);
    assert_eq!(o.stdout, vec![b'a'; airlock_sandbox::STDOUT_TAIL]);
    assert_eq!(o.stderr.len(), 1000);
}
