//! ATTACKS.md 15–18 from inside the worker, through `airlock run`: the tool
//! is a python3 or sh script that probes its confinement and prints what it
//! found as JSON, which the envelope carries as `content`.

use crate::runkit::*;
use crate::util::{Project, Run, CANARY};
use serde_json::{json, Value};
use std::time::Duration;

fn json_rest(fs: &str) -> String {
    format!("[output]\nformat = \"json\"\n\n{fs}")
}

/// Runs a python probe with the `input` and `output` arguments on
/// `data/in.txt` and `results/out.txt`, expecting `ok`; returns the run and
/// its content.
fn probe(p: &Project, name: &str, script: &str) -> (Run, Value) {
    p.tool(name, &py_tool(name, "timeout_seconds = 20", IO_ARGS, script, &json_rest(IO_FS)));
    let run = p.run(&["run", name, "data/in.txt", "results/out.txt"]);
    run.assert_ok();
    let content = run.envelope["content"].clone();
    (run, content)
}

/// ATTACKS.md 16: who the tool is and what it holds.
#[test]
fn the_worker_is_65534_without_capabilities_extra_descriptors_or_host_mounts() {
    let p = Project::new();
    p.write("data/in.txt", "hello\n");
    let script = r#"
import json, os, sys
status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)
fds = sorted(os.listdir('/proc/self/fd'))
open(sys.argv[2], 'w').write('done\n')
print(json.dumps(dict(
    uid=[os.getuid(), os.geteuid()], gid=[os.getgid(), os.getegid()], groups=os.getgroups(),
    status_uid=status['Uid'].split(), status_gid=status['Gid'].split(),
    cap_eff=status['CapEff'].strip(), cap_prm=status['CapPrm'].strip(), cap_bnd=status['CapBnd'].strip(),
    no_new_privs=status['NoNewPrivs'].strip(), fds=fds,
    mountinfo=open('/proc/self/mountinfo').read(),
)))
"#;
    let (run, c) = probe(&p, "whoami", script);
    assert_eq!(c["uid"], json!([65534, 65534]), "{c:#}");
    assert_eq!(c["gid"], json!([65534, 65534]), "{c:#}");
    assert_eq!(c["status_uid"], json!(["65534", "65534", "65534", "65534"]), "{c:#}");
    assert_eq!(c["status_gid"], json!(["65534", "65534", "65534", "65534"]), "{c:#}");
    for cap in ["cap_eff", "cap_prm", "cap_bnd"] {
        assert_eq!(c[cap], "0000000000000000", "{cap}: {c:#}");
    }
    assert_eq!(c["no_new_privs"], "1");
    // 0, 1, 2 and the descriptor of the listing itself.
    let fds: Vec<&str> = c["fds"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(fds.starts_with(&["0", "1", "2"]) && fds.len() <= 4, "descriptors {fds:?}");

    let info = c["mountinfo"].as_str().unwrap();
    let points: Vec<&str> = info.lines().filter_map(|l| l.split(' ').nth(4)).collect();
    for declared in ["/workspace/data/in.txt", "/workspace/results/out.txt"] {
        assert!(points.contains(&declared), "{declared} is not a mount point:\n{info}");
    }
    let under_workspace: Vec<&&str> = points.iter().filter(|m| m.starts_with("/workspace")).collect();
    assert_eq!(under_workspace.len(), 2, "only the declared files are mounted under /workspace:\n{info}");
    let root = p.root().to_str().unwrap();
    let real_root = std::fs::canonicalize(p.root()).unwrap();
    for host in [root, real_root.to_str().unwrap(), ".airlock", "staging", "invocations"] {
        assert!(!info.contains(host), "the host path {host:?} shows in the worker's mountinfo:\n{info}");
    }
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "done\n");
    p.assert_absent(&run, CANARY);
}

/// ATTACKS.md 16: a file beside the granted input, the canary outside, and
/// the host's /etc/shadow are neither visible nor readable.
#[test]
fn a_file_beside_the_input_and_host_secrets_are_out_of_reach() {
    let p = Project::new();
    p.write("data/in.txt", "granted\n");
    p.write("data/secret.txt", CANARY);
    let beside = p.path("data/secret.txt").to_str().unwrap().to_owned();
    let outside = p.path("outside/secret.txt").to_str().unwrap().to_owned();
    let script = format!(
        r#"
import json, os, sys
def attempt(path):
    try:
        return 'READ ' + open(path, 'rb').read().decode('latin-1')
    except OSError as e:
        return 'errno ' + str(e.errno)
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as e:
        return 'errno ' + str(e.errno)
tries = dict()
for path in ['data/secret.txt', '/workspace/data/secret.txt', {beside:?}, {outside:?}, '/etc/shadow', '/etc/gshadow', '/root/.bash_history']:
    tries[path] = attempt(path)
open(sys.argv[2], 'w').write(open(sys.argv[1]).read())
print(json.dumps(dict(
    tries=tries, data=listing('data'), workspace=listing('.'), etc=listing('/etc'),
    passwd=attempt('/etc/passwd'), input=attempt(sys.argv[1]),
)))
"#
    );
    let (run, c) = probe(&p, "snoop", &script);
    for (path, got) in c["tries"].as_object().unwrap() {
        assert!(got.as_str().unwrap().starts_with("errno "), "{path} was readable: {c:#}");
    }
    assert_eq!(c["data"], json!(["in.txt"]), "{c:#}");
    assert_eq!(c["workspace"], json!(["data", "results"]), "{c:#}");
    assert_eq!(c["input"], "READ granted\n", "{c:#}");
    // The worker's /etc is its own: no host accounts but root and nobody.
    let passwd = c["passwd"].as_str().unwrap();
    for line in passwd.trim_start_matches("READ ").lines() {
        assert!(line.starts_with("root:") || line.starts_with("nobody:"), "{passwd}");
    }
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "granted\n");
    p.assert_absent(&run, CANARY);
    assert!(!std::fs::read_to_string(p.path("results/out.txt")).unwrap().contains(CANARY));
}

/// ATTACKS.md 16: a listener on the host's loopback is unreachable and never accepts.
#[test]
fn the_network_is_unreachable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let p = Project::new();
    let script = r#"
import json, socket, sys
out = dict()
for host in ['127.0.0.1', 'localhost']:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, int(sys.argv[1])))
        out[host] = 'connected'
    except OSError as e:
        out[host] = 'errno ' + str(e.errno)
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b'x', ('127.0.0.1', int(sys.argv[1])))
    out['udp'] = 'sent'
except OSError as e:
    out['udp'] = 'errno ' + str(e.errno)
try:
    out['interfaces'] = [i[1] for i in socket.if_nameindex()]
except OSError as e:
    out['interfaces'] = 'errno ' + str(e.errno)
print(json.dumps(out))
"#;
    p.tool(
        "net",
        &py_tool("net", "timeout_seconds = 20", &[("port", "port")], script, "[output]\nformat = \"json\"\n"),
    );
    let run = p.run(&["run", "net", &port]);
    run.assert_ok();
    let c = &run.envelope["content"];
    for key in ["127.0.0.1", "localhost", "udp"] {
        assert!(c[key].as_str().unwrap().starts_with("errno "), "{key}: {c:#}");
    }
    if let Some(ifaces) = c["interfaces"].as_array() {
        assert!(ifaces.iter().all(|i| i == "lo"), "the worker has interfaces {ifaces:?}");
    }
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the host listener accepted a connection from the worker: {other:?}"),
    }
}

/// ATTACKS.md 16: no ptrace, no mount, no new namespaces.
#[test]
fn ptrace_mount_and_unshare_are_denied() {
    let p = Project::new();
    let script = r#"
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
def call(f, *args):
    r = f(*args)
    return [r, ctypes.get_errno()]
out = dict(
    ptrace_traceme=call(libc.ptrace, 0, 0, 0, 0),
    ptrace_attach_pid1=call(libc.ptrace, 16, 1, 0, 0),
    mount_tmpfs=call(libc.mount, b'none', b'/tmp', b'tmpfs', 0, None),
    mount_proc=call(libc.mount, b'proc', b'/tmp', b'proc', 0, None),
    unshare_user=call(libc.unshare, 0x10000000),
    unshare_mount=call(libc.unshare, 0x20000),
    unshare_net=call(libc.unshare, 0x40000000),
    chroot=call(libc.chroot, b'/tmp'),
)
print(json.dumps(out))
"#;
    p.tool("escape", &py_tool("escape", "timeout_seconds = 20", &[], script, "[output]\nformat = \"json\"\n"));
    let run = p.run(&["run", "escape"]);
    run.assert_ok();
    let c = run.envelope["content"].as_object().unwrap().clone();
    assert_eq!(c.len(), 8, "{c:#?}");
    for (call, got) in &c {
        assert_eq!(got[0], -1, "{call} succeeded in the worker: {c:#?}");
        assert_ne!(got[1], 0, "{call}: {c:#?}");
    }
}

/// ATTACKS.md 18: the tool cannot delete, move or replace its output, nor
/// change its input in any way; the host input is unchanged and the output
/// it then writes normally is what is published.
#[test]
fn the_tool_cannot_delete_its_output_or_rewrite_its_input() {
    let p = Project::new();
    p.write("data/in.txt", "the original input\n");
    let script = r#"
import json, os, sys
inp, out = sys.argv[1], sys.argv[2]
def attempt(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return 'errno ' + str(e.errno)
open('/tmp/other', 'w').write('replacement\n')
tries = dict(
    remove_output=attempt(lambda: os.remove(out)),
    move_output=attempt(lambda: os.rename(out, '/tmp/moved')),
    replace_output=attempt(lambda: os.rename('/tmp/other', out)),
    link_over_output=attempt(lambda: os.link('/tmp/other', out)),
    rewrite_input=attempt(lambda: open(inp, 'w').write('EVIL\n')),
    patch_input=attempt(lambda: open(inp, 'r+b').write(b'EVIL')),
    append_input=attempt(lambda: open(inp, 'ab').write(b'EVIL')),
    truncate_input=attempt(lambda: os.truncate(inp, 0)),
    remove_input=attempt(lambda: os.remove(inp)),
    move_input=attempt(lambda: os.rename(inp, '/tmp/in')),
    replace_input=attempt(lambda: os.rename('/tmp/other', inp)),
    chmod_input=attempt(lambda: os.chmod(inp, 0o666)),
    utime_input=attempt(lambda: os.utime(inp, (0, 0))),
    new_file_beside=attempt(lambda: open('data/new.txt', 'w').write('x')),
    new_file_in_results=attempt(lambda: open('results/extra.txt', 'w').write('x')),
)
open(out, 'w').write('final ' + open(inp).read())
print(json.dumps(tries))
"#;
    let (run, c) = probe(&p, "vandal", script);
    for (what, got) in c.as_object().unwrap() {
        assert_ne!(got, "ok", "{what} succeeded in the worker: {c:#}");
    }
    assert_eq!(std::fs::read_to_string(p.path("data/in.txt")).unwrap(), "the original input\n");
    assert_eq!(names(&p.path("data")), ["in.txt"]);
    assert_eq!(names(&p.path("results")), ["out.txt"]);
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "final the original input\n");
    assert_eq!(run.envelope["created_files"][0]["bytes"], 25);
    assert_staging_empty(&p);
}

fn limited_project() -> Project {
    let p = Project::new();
    p.write("data/in.txt", "x\n");
    p
}

const LIMIT_FS: &str = "[filesystem]\nread = [\"{input}\"]\ncreate = [\"{output}\"]\nmax_file_bytes = 1024\n";

/// Why `run` is not a failed/limit.output_size call that published nothing, if it is not.
fn over_limit_mismatch(p: &Project, run: &Run, how: &str) -> Option<String> {
    let got = (run.status(), run.reason(), run.code);
    let published = std::fs::symlink_metadata(p.path("results/out.txt")).ok().map(|m| m.len());
    let candidates: Vec<String> =
        names(&p.path("results")).into_iter().filter(|n| n.starts_with(".airlock-candidate-")).collect();
    let staging = staged_entries(p.root());
    (got != ("failed", "limit.output_size", 1)
        || run.envelope["created_files"] != json!([])
        || published.is_some()
        || !candidates.is_empty()
        || !staging.is_empty())
    .then(|| {
        format!(
            "{how}: got {got:?}, created_files {}, results/out.txt {published:?} bytes, candidates {candidates:?}, \
             staging {staging:?}; envelope {}",
            run.envelope["created_files"], run.stdout
        )
    })
}

#[track_caller]
fn assert_over_limit_published_nothing(p: &Project, run: &Run, how: &str) {
    if let Some(why) = over_limit_mismatch(p, run, how) {
        panic!("expected failed/limit.output_size/1 and nothing published: {why}");
    }
}

/// Runs `grow` of each (label, manifest) and fails with every mismatch at once.
#[track_caller]
fn assert_all_over_limit(tools: Vec<(&str, String)>) {
    let mut wrong = Vec::new();
    for (how, tool) in tools {
        let p = limited_project();
        p.tool("grow", &tool);
        let run = p.run(&["run", "grow", "data/in.txt", "results/out.txt"]);
        wrong.extend(over_limit_mismatch(&p, &run, how));
    }
    assert!(wrong.is_empty(), "expected failed/limit.output_size/1 and nothing published:\n{}", wrong.join("\n"));
}

/// ATTACKS.md 15: writing, truncating or fallocating the output past
/// `max_file_bytes` fails the call and publishes nothing; exactly
/// `max_file_bytes` is fine.
#[test]
fn growing_the_output_past_max_file_bytes_fails_and_publishes_nothing() {
    let mut cases: Vec<(&str, Vec<&str>)> = vec![
        ("write", vec!["dd", "if=/dev/zero", "of={output}", "bs=2048", "count=1"]),
        ("truncate", vec!["truncate", "-s", "2048", "{output}"]),
    ];
    if std::path::Path::new("/usr/bin/fallocate").exists() || std::path::Path::new("/bin/fallocate").exists() {
        cases.push(("fallocate", vec!["fallocate", "-l", "2048", "{output}"]));
    } else {
        eprintln!("fallocate is not installed; its case is skipped");
    }
    for (how, exec) in cases {
        let p = limited_project();
        p.tool("grow", &manifest("grow", "", IO_ARGS, &exec, LIMIT_FS));
        let run = p.run(&["run", "grow", "data/in.txt", "results/out.txt"]);
        assert_over_limit_published_nothing(&p, &run, how);
    }
    // The bound itself is allowed.
    let p = limited_project();
    let exec = ["dd", "if=/dev/zero", "of={output}", "bs=1024", "count=1"];
    p.tool("fits", &manifest("fits", "", IO_ARGS, &exec, LIMIT_FS));
    let run = p.run(&["run", "fits", "data/in.txt", "results/out.txt"]);
    run.assert_ok();
    assert_eq!(std::fs::metadata(p.path("results/out.txt")).unwrap().len(), 1024);
}

/// ATTACKS.md 15, a tool that does not die of the limit: a shell whose
/// child writes 2048 bytes into a 1024-byte output, or a python tool that
/// catches EFBIG, and then exits 0. The tool wrote more than
/// `max_file_bytes`; the call must fail and nothing may be published.
#[test]
fn a_write_past_max_file_bytes_is_never_published_truncated() {
    let shell = sh_tool("grow", "", IO_ARGS, r#"head -c 2048 /dev/zero > "$2"; exit 0"#, LIMIT_FS);
    let python = py_tool(
        "grow",
        "",
        IO_ARGS,
        "import sys\ntry:\n    open(sys.argv[2], 'wb').write(b'x' * 2048)\nexcept OSError:\n    pass\n",
        LIMIT_FS,
    );
    // Python ignores SIGXFSZ; an unchecked file object flushed at exit loses the error.
    let unchecked = py_tool("grow", "", IO_ARGS, "import sys\nopen(sys.argv[2], 'wb').write(b'x' * 2048)\n", LIMIT_FS);
    assert_all_over_limit(vec![
        ("shell child", shell),
        ("python catching EFBIG", python),
        ("python, file closed at exit", unchecked),
    ]);
}

/// ATTACKS.md 15, the reason: a write past `max_file_bytes` that makes the
/// tool fail is reported as `limit.output_size` whoever received the
/// signal or the error.
#[test]
fn a_write_past_max_file_bytes_is_reported_as_limit_output_size() {
    let shell = sh_tool("grow", "", IO_ARGS, r#"head -c 2048 /dev/zero > "$2""#, LIMIT_FS);
    let python = py_tool(
        "grow",
        "",
        IO_ARGS,
        "import sys\nf = open(sys.argv[2], 'wb')\nf.write(b'x' * 2048)\nf.close()\n",
        LIMIT_FS,
    );
    assert_all_over_limit(vec![("shell child", shell), ("python, EFBIG on close", python)]);
}

/// ATTACKS.md 17: children left behind (a background subshell and a
/// `setsid nohup` one) that append to the output after the tool exits
/// never reach the published file, and do not survive the call.
#[test]
fn a_detached_child_cannot_write_late() {
    let p = Project::new();
    p.write("data/in.txt", "x\n");
    let m = marker(1);
    let _guard = KillOnDrop(m.clone());
    let script = r#"echo early > "$2"
(sleep "$3"; echo late >> "$2") &
setsid nohup sh -c 'sleep "$1"; echo late-setsid >> "$2"' sh "$3" "$2" > /dev/null 2>&1 &
exit 0"#;
    let args = [("input", "path"), ("output", "path"), ("marker", "string")];
    p.tool("linger", &sh_tool("linger", "timeout_seconds = 20", &args, script, IO_FS));
    let run = p.run(&["run", "linger", "data/in.txt", "results/out.txt", &m]);
    run.assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "early\n");
    assert_eq!(run.envelope["created_files"][0]["bytes"], 6);
    // Give the children (had they survived) time to write.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "early\n");
    let left = procs_with(&m);
    assert!(left.is_empty(), "detached children outlived the call: {left:?}");
    assert_staging_empty(&p);
}
