//! Numbers that do not fit (issue 15, item 5), on the shipping binary: a
//! raw client in the worker sends a broker request whose `max` or id is
//! 2^53 + 1 after a write that landed. The decoder refuses the number, the
//! submission ends, and every record is journaled (the journal refuses
//! integers it cannot write exactly, so an unbounded number used to make
//! the end of the submission unrecordable and drop the landed write from
//! the answer).

use crate::util::{sha256_hex, Project, Run};

/// Python: writes `landed.txt` through the protocol, waits for its answer,
/// then sends `frame` and prints each answer's code.
fn client(frame: &str) -> String {
    format!(
        r#"
import json, os, socket, struct
s = socket.socket(fileno=int(os.environ["AIRLOCK_FS_FD"]))
def call(body, data=None):
    if data is not None:
        body = b"\x01" + struct.pack(">H", len(body)) + body + data
    s.sendall(struct.pack(">I", len(body)) + body)
    head = s.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return "closed"
    answer = json.loads(s.recv(struct.unpack(">I", head)[0], socket.MSG_WAITALL))
    return answer.get("error", {{}}).get("code", "ok")
print(call(json.dumps({{"id": 1, "op": "write", "root": "out", "path": "landed.txt"}}).encode(), b"landed"))
print(call({frame}))
"#
    )
}

fn submit(p: &Project, frame: &str, id: &str) -> Run {
    let root = format!("out={}:rw", p.path("results").display());
    p.run(&["isolated", "--invocation-id", id, "--root", &root, "--", "python3", "-c", &client(frame)])
}

#[test]
fn a_max_or_an_id_over_2_pow_53_ends_the_submission_with_every_record_journaled() {
    let over = (1u64 << 53) + 1;
    let cases = [
        (
            format!(r#"b'{{"id":2,"op":"read","root":"out","path":"landed.txt","max":{over}}}'"#),
            "broker.limit",
            "n-max",
        ),
        (format!(r#"b'{{"id":2,"op":"list","root":"out","path":".","max":{over}}}'"#), "broker.limit", "n-list"),
        (
            format!(r#"b'{{"id":{over},"op":"read","root":"out","path":"landed.txt","max":1}}'"#),
            "broker.protocol",
            "n-id",
        ),
    ];
    for (frame, code, id) in cases {
        let p = Project::new();
        let run = submit(&p, &frame, id);
        assert_eq!(
            (run.status(), run.reason(), run.envelope["content"]["broker"]["failure"]["code"].as_str()),
            ("failed", "broker.operation_failed", Some(code)),
            "{id}: {run:#?}"
        );
        // The write that landed before it is in the answer.
        assert_eq!(std::fs::read_to_string(p.path("results/landed.txt")).unwrap(), "landed");
        let created = &run.envelope["created_files"];
        assert_eq!(created[0]["path"], "out:landed.txt", "{id}: {run:#?}");
        assert_eq!(created[0]["sha256"], format!("sha256:{}", sha256_hex(b"landed")));
        // Every step is journaled, the chain verifies.
        let kinds = p.journal_kinds(id);
        for k in ["WorkerStarted", "BrokerWrite", "WorkerFinished", "BrokerOperations", "InvocationFinished"] {
            assert!(kinds.iter().any(|x| x == k), "{id}: no {k} in {kinds:?}");
        }
        let show = p.run(&["journal", "show", "--json"]);
        let records = show.envelope["content"]["records"].as_array().unwrap();
        let ops = records.iter().find(|r| r["kind"] == "BrokerOperations" && r["invocation_id"] == id).unwrap();
        assert_eq!(ops["body"]["failure"]["code"], code);
        assert_eq!(ops["body"]["writes"], 1);
        let end = records.iter().find(|r| r["kind"] == "InvocationFinished" && r["invocation_id"] == id).unwrap();
        assert_eq!(end["body"]["created_files"][0]["path"], "out:landed.txt");
        p.run(&["journal", "verify"]).assert_ok();
    }
}
