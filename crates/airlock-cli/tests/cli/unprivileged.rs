//! The shipping binary run by an unprivileged caller (uid 65534 through
//! `setpriv`) in a project that caller owns: it runs, publishes a file the
//! caller owns, and the worker is as confined as for a root caller.
//! Skipped, with the reason printed, when not root or without `setpriv`.

use crate::runkit::*;
use crate::util::{Project, CANARY};
use serde_json::json;
use std::os::unix::fs::MetadataExt;

fn nobody() -> Option<Nobody> {
    match Nobody::new() {
        Ok(n) => Some(n),
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

#[test]
fn an_unprivileged_caller_runs_publishes_and_its_worker_is_confined() {
    let Some(nobody) = nobody() else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();

    let p = Project::new();
    p.write("data/in.txt", "granted input\n");
    p.write("data/secret.txt", CANARY);
    let script = r#"
import json, os, socket, sys
status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)
def attempt(path):
    try:
        return 'READ ' + open(path, 'rb').read().decode('latin-1')
    except OSError as e:
        return 'errno ' + str(e.errno)
s = socket.socket()
s.settimeout(3)
try:
    s.connect(('127.0.0.1', int(sys.argv[3])))
    net = 'connected'
except OSError as e:
    net = 'errno ' + str(e.errno)
open(sys.argv[2], 'w').write(open(sys.argv[1]).read().upper())
print(json.dumps(dict(
    uid=status['Uid'].split(), gid=status['Gid'].split(), cap_eff=status['CapEff'].strip(),
    cap_prm=status['CapPrm'].strip(), no_new_privs=status['NoNewPrivs'].strip(), net=net,
    beside=attempt('data/secret.txt'), shadow=attempt('/etc/shadow'), data=sorted(os.listdir('data')),
)))
"#;
    let args = [("input", "path"), ("output", "path"), ("port", "port")];
    let rest = format!("[output]\nformat = \"json\"\n\n{IO_FS}");
    p.tool("probe", &py_tool("probe", "timeout_seconds = 20", &args, script, &rest));
    nobody.adopt(&p);

    let run = nobody.run(p.root(), &["run", "probe", "data/in.txt", "results/out.txt", &port]);
    run.assert_ok();
    let c = &run.envelope["content"];
    assert_eq!(c["uid"], json!(["65534", "65534", "65534", "65534"]), "{c:#}");
    assert_eq!(c["gid"], json!(["65534", "65534", "65534", "65534"]), "{c:#}");
    assert_eq!(c["cap_eff"], "0000000000000000", "{c:#}");
    assert_eq!(c["cap_prm"], "0000000000000000", "{c:#}");
    assert_eq!(c["no_new_privs"], "1", "{c:#}");
    assert!(c["net"].as_str().unwrap().starts_with("errno "), "{c:#}");
    assert!(c["beside"].as_str().unwrap().starts_with("errno "), "{c:#}");
    assert!(c["shadow"].as_str().unwrap().starts_with("errno "), "{c:#}");
    assert_eq!(c["data"], json!(["in.txt"]), "{c:#}");
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the host listener accepted a connection from the worker: {other:?}"),
    }

    let out = p.path("results/out.txt");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "GRANTED INPUT\n");
    let meta = std::fs::metadata(&out).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY), "the published file's owner");
    assert_eq!(run.envelope["created_files"][0]["bytes"], 14);
    let state = std::fs::metadata(p.path(".airlock")).unwrap();
    assert_eq!((state.uid(), state.mode() & 0o777), (NOBODY, 0o700));
    assert_no_candidates(&p, "results");
    assert_staging_empty(&p);
    p.assert_absent(&run, CANARY);
}

/// An unprivileged caller's refusals are the same as root's.
#[test]
fn an_unprivileged_caller_is_refused_an_existing_output() {
    let Some(nobody) = nobody() else { return };
    let p = Project::new();
    p.write("data/in.txt", "x\n");
    p.write("results/out.txt", "precious\n");
    p.tool("shcopy", &sh_tool("shcopy", "", IO_ARGS, r#"cat "$1" > "$2""#, IO_FS));
    nobody.adopt(&p);
    let run = nobody.run(p.root(), &["run", "shcopy", "data/in.txt", "results/out.txt"]);
    run.assert_refused("output.exists", 73);
    assert!(run.envelope.get("exit_code").is_none(), "{run:#?}");
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "precious\n");
    assert_staging_empty(&p);
}

#[test]
fn an_unprivileged_caller_reaches_its_roots_through_the_broker() {
    let Some(nobody) = nobody() else { return };
    let p = Project::new();
    p.write("data/in.txt", "unprivileged input");
    nobody.adopt(&p);
    let data = format!("data={}:r", p.path("data").display());
    let out = format!("out={}:w", p.path("results").display());
    let script = "airlock-fs read data in.txt | tr a-z A-Z | airlock-fs write out up.txt && cat /proc/self/status";
    let run = nobody.run(p.root(), &["isolated", "--root", &data, "--root", &out, "--", "sh", "-c", script]);
    run.assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/up.txt")).unwrap(), "UNPRIVILEGED INPUT");
    assert_eq!(std::fs::metadata(p.path("results/up.txt")).unwrap().uid(), 65534, "the caller owns what it wrote");
    let status = run.envelope["content"]["output"]["raw_output"].as_str().unwrap();
    assert!(status.contains("CapEff:\t0000000000000000"), "{status}");
}
