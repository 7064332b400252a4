//! Data frames on the shipping binary (issue 17, benchmark): file bytes
//! travel raw after a small JSON header. A raw client in the worker sends
//! hostile frames; each is refused with the protocol's existing codes
//! (`broker.limit` for data over 64 KiB, `broker.protocol` for a frame that
//! breaks the grammar or an old-style base64 `data` field), ends the
//! submission, and writes nothing.

use crate::isolated::{assert_op_failed, isolated_argv, raw_client, root};
use crate::util::{sha256_hex, Project};

const OPEN: &str = r#"b'{"id":1,"op":"write_open","root":"out","path":"big"}'"#;

#[test]
fn data_over_64_kib_is_refused_before_a_byte_is_charged_or_written() {
    for frames in [
        r#"[data_frame(b'{"id":1,"op":"write","root":"out","path":"big"}', bytes(65537))]"#.to_owned(),
        format!(
            r#"[{OPEN}, data_frame(b'{{"id":2,"op":"write_append","root":"out","path":"big","stream":1}}', bytes(65537))]"#
        ),
    ] {
        let p = Project::new();
        let run = isolated_argv(&p, &[root(&p, "out", "results", "w")], &["python3", "-c", &raw_client(&frames)]);
        assert_op_failed(&run, "broker.limit");
        assert_eq!(run.envelope["content"]["broker"]["usage"]["write_bytes"], 0, "{run:#?}");
        assert!(!p.path("results/big").exists());
        assert_eq!(std::fs::read_dir(p.path("results")).unwrap().count(), 0, "no staging entry left");
    }
}

#[test]
fn frames_that_break_the_grammar_end_the_submission() {
    let p = Project::new();
    p.write("results/a.txt", "a");
    let roots = [root(&p, "out", "results", "rw")];
    for frames in [
        // The header length runs past the frame.
        r#"[b'\x01\x00\xc8{"id":1}']"#,
        // A header length with no header.
        r#"[b'\x01\x00']"#,
        // A read sent in a data frame; a write without one.
        r#"[data_frame(b'{"id":1,"op":"read","root":"out","path":"a.txt","max":1}', b'x')]"#,
        r#"[b'{"id":1,"op":"write","root":"out","path":"b.txt"}']"#,
        // The old form: base64 in a `data` field.
        r#"[b'{"id":1,"op":"write","root":"out","path":"b.txt","data":"YQ=="}']"#,
        // A header that is not one JSON object, then data.
        r#"[data_frame(b'{"id":1,"op":"write","root":"out","path":"b.txt"} {}', b'x')]"#,
    ] {
        let run = isolated_argv(&p, &roots, &["python3", "-c", &raw_client(frames)]);
        assert_op_failed(&run, "broker.protocol");
        assert!(!p.path("results/b.txt").exists(), "{frames}");
    }
}

#[test]
fn every_byte_value_lands_and_reads_back_exactly() {
    let p = Project::new();
    let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let script = r#"
import hashlib
import airlock_fs
data = bytes(range(256)) * 273 + bytes(range(112))
airlock_fs.write("out", "all.bin", data)
back = airlock_fs.read("out", "all.bin")
print(len(back), hashlib.sha256(back).hexdigest())
"#;
    let run = isolated_argv(&p, &[root(&p, "out", "results", "rw")], &["python3", "-c", script]);
    run.assert_ok();
    assert_eq!(std::fs::read(p.path("results/all.bin")).unwrap(), bytes);
    let want = format!("{} {}\n", bytes.len(), sha256_hex(&bytes));
    assert_eq!(run.envelope["content"]["output"]["raw_output"], want.as_str(), "{run:#?}");
    assert_eq!(run.envelope["created_files"][0]["sha256"], format!("sha256:{}", sha256_hex(&bytes)));
}
