//! The broker on real directories: limits at the edge and one past, links
//! and special files, nested and missing ceilings, evidence.

use super::*;
use airlock_core::{ReasonCode, RelPath};
use airlock_hostfs::{Dir, HostAuthority};
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

const CANARY: &str = "CANARY-5d1e-never-returned";

/// Ceilings on real directories: `(virtual root, host directory)`.
struct Roots(Vec<(Option<RelPath>, PathBuf)>);

impl Ceilings for Roots {
    fn roots(&self) -> Vec<Option<RelPath>> {
        self.0.iter().map(|(r, _)| r.clone()).collect()
    }
    fn open(&self, root: Option<&RelPath>) -> Result<Dir, Refusal> {
        let (_, host) = self.0.iter().find(|(r, _)| r.as_ref() == root).expect("asked for a configured root");
        Ok(Dir::open_ceiling(&HostAuthority::ambient(), host)?)
    }
}

fn one(dir: &Path) -> Roots {
    Roots(vec![(None, dir.to_path_buf())])
}

fn resolver() -> Resolver {
    Resolver::new(airlock_core::ResolverChoice::Auto).unwrap()
}

fn query(op: SourceOp, pairs: &[(&str, &str)]) -> Query {
    let args: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Query::from_args(op, &args).unwrap()
}

fn ask(roots: &Roots, op: SourceOp, pairs: &[(&str, &str)]) -> Result<Answer, Refusal> {
    run(&query(op, pairs), roots, &resolver(), None)
}

fn ok(roots: &Roots, op: SourceOp, pairs: &[(&str, &str)]) -> Answer {
    let a = ask(roots, op, pairs).unwrap();
    assert_eq!(verify_result(&a.result), Some(true), "result_sha256 must cover the result");
    assert_eq!(a.result["result_sha256"], Value::String(a.boundary.result_sha256.clone()));
    a
}

fn reasons(a: &Answer) -> Vec<String> {
    a.result["partial_reasons"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
}

fn paths(a: &Answer) -> Vec<String> {
    a.result["entries"].as_array().unwrap().iter().map(|e| e["path"].as_str().unwrap().to_owned()).collect()
}

fn write(dir: &Path, rel: &str, bytes: impl AsRef<[u8]>) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

fn sha(bytes: &[u8]) -> String {
    airlock_core::sha256_tagged(bytes)
}

#[test]
fn read_returns_the_range_and_binds_its_hash() {
    let t = tempfile::tempdir().unwrap();
    let body: Vec<u8> = (0..70_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    write(t.path(), "src/big.txt", &body);
    let a = ok(&one(t.path()), SourceOp::ReadFile, &[("path", "src/big.txt"), ("limit", "65536")]);
    assert_eq!(a.result["bytes"], 65_536);
    assert_eq!(a.result["partial"], true);
    assert_eq!(reasons(&a), ["read_limit"]);
    assert_eq!(a.result["next_offset"], 65_536);
    assert_eq!(a.boundary.ranges.len(), 1);
    assert_eq!(a.boundary.ranges[0].sha256, sha(&body[..65_536]));
    let rest = ok(&one(t.path()), SourceOp::ReadFile, &[("path", "src/big.txt"), ("offset", "65536")]);
    assert_eq!((rest.result["bytes"].as_u64(), rest.result["eof"].as_bool()), (Some(70_000 - 65_536), Some(true)));
    assert_eq!(rest.result["partial"], false);
    let past = ok(&one(t.path()), SourceOp::ReadFile, &[("path", "src/big.txt"), ("offset", "10000000")]);
    assert_eq!((past.result["bytes"].as_u64(), past.result["eof"].as_bool()), (Some(0), Some(true)));
}

#[test]
fn invalid_utf8_is_replaced_but_hashed_as_is() {
    let t = tempfile::tempdir().unwrap();
    let raw = b"ok \xff\xfe bytes";
    write(t.path(), "bin", raw);
    let a = ok(&one(t.path()), SourceOp::ReadFile, &[("path", "bin")]);
    assert_eq!(a.result["content"], "ok \u{fffd}\u{fffd} bytes");
    assert_eq!(a.result["replaced_invalid_utf8"], true);
    assert_eq!(a.result["content_sha256"], sha(raw));
    assert_eq!(a.boundary.ranges[0].sha256, sha(raw));
}

#[test]
fn links_specials_and_hardlinks_are_refused_to_read_and_skipped_in_walks() {
    let t = tempfile::tempdir().unwrap();
    let base = t.path().join("base");
    write(&base, "real.txt", "needle here");
    write(t.path(), "outside/secret.txt", CANARY);
    symlink(t.path().join("outside/secret.txt"), base.join("link.txt")).unwrap();
    symlink(t.path().join("outside"), base.join("linkdir")).unwrap();
    std::fs::hard_link(t.path().join("outside/secret.txt"), base.join("hard.txt")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        base.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        0,
    )
    .unwrap();
    write(&base, ".git/config", CANARY);
    let roots = one(&base);
    for (path, code) in [
        ("link.txt", ReasonCode::PathSymlink),
        ("linkdir/secret.txt", ReasonCode::PathSymlink),
        ("hard.txt", ReasonCode::InputHardlink),
        ("fifo", ReasonCode::InputNotRegular),
        ("missing.txt", ReasonCode::InputMissing),
    ] {
        assert_eq!(ask(&roots, SourceOp::ReadFile, &[("path", path)]).unwrap_err().code, code, "{path}");
    }
    let list = ok(&roots, SourceOp::ListFiles, &[]);
    assert_eq!(paths(&list), ["real.txt"]);
    assert_eq!(list.result["partial"], true);
    assert_eq!(reasons(&list), ["skipped_entries"]);
    let skipped = &list.result["skipped"];
    assert_eq!((skipped["symlink"].as_u64(), skipped["hardlink"].as_u64()), (Some(2), Some(1)));
    assert_eq!((skipped["special"].as_u64(), skipped["control_dir"].as_u64()), (Some(1), Some(1)));
    assert!(list.boundary.ranges.is_empty(), "a listing reads no content");
    let grep = ok(&roots, SourceOp::GrepFiles, &[("pattern", "CANARY")]);
    assert_eq!(grep.result["matches"].as_array().unwrap().len(), 0);
    assert!(!grep.result.to_string().contains(CANARY.split_at(10).1));
    let found = ok(&roots, SourceOp::GrepFiles, &[("pattern", "needle")]);
    assert_eq!(found.result["matches"][0]["path"], "real.txt");
    assert_eq!(found.boundary.ranges.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(), ["real.txt"]);
}

#[test]
fn nested_ceilings_hide_the_parent_beneath_them() {
    let t = tempfile::tempdir().unwrap();
    let base = t.path().join("base");
    let other = t.path().join("other");
    write(&base, "data/x.txt", "x");
    write(&base, "data/inner/secret.txt", CANARY);
    write(&other, "o.txt", "o");
    let roots = Roots(vec![(None, base.clone()), (Some(RelPath::parse("data/inner").unwrap()), other.clone())]);
    let list = ok(&roots, SourceOp::ListFiles, &[]);
    assert_eq!(paths(&list), ["data", "data/inner", "data/inner/o.txt", "data/x.txt"]);
    let sub = ok(&roots, SourceOp::ListFiles, &[("path", "data/inner")]);
    assert_eq!(paths(&sub), ["data/inner/o.txt"]);
    let grep = ok(&roots, SourceOp::GrepFiles, &[("pattern", "CANARY")]);
    assert_eq!(grep.result["matches"].as_array().unwrap().len(), 0);
    let err = ask(&roots, SourceOp::ReadFile, &[("path", "data/inner/secret.txt")]).unwrap_err();
    assert_eq!(err.code, ReasonCode::InputMissing);
    assert_eq!(ok(&roots, SourceOp::ReadFile, &[("path", "data/inner/o.txt")]).result["content"], "o");
    // A ceiling whose parent has no such directory appears as a directory.
    let roots = Roots(vec![(None, base.clone()), (Some(RelPath::parse("extra/deep").unwrap()), other)]);
    let list = ok(&roots, SourceOp::ListFiles, &[]);
    assert!(paths(&list).starts_with(&["data".into(), "data/inner".into(), "data/inner/secret.txt".into()]));
    assert!(paths(&list).ends_with(&["extra".into(), "extra/deep".into(), "extra/deep/o.txt".into()]));
}

#[test]
fn missing_ceilings_and_uncovered_paths_are_errors_not_empty_results() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "d/a.txt", "a");
    let missing = Roots(vec![(Some(RelPath::parse("data").unwrap()), t.path().join("nope"))]);
    for op in [SourceOp::ListFiles, SourceOp::GrepFiles] {
        let pairs: &[(&str, &str)] = if op == SourceOp::GrepFiles { &[("pattern", "a")] } else { &[] };
        assert_eq!(ask(&missing, op, pairs).unwrap_err().code, ReasonCode::ConfigCeiling, "{op}");
    }
    let err = ask(&missing, SourceOp::ReadFile, &[("path", "data/a.txt")]).unwrap_err();
    assert_eq!(err.code, ReasonCode::ConfigCeiling);
    let partial = Roots(vec![(Some(RelPath::parse("data").unwrap()), t.path().join("d"))]);
    assert_eq!(ask(&partial, SourceOp::ListFiles, &[("path", "src")]).unwrap_err().code, ReasonCode::GrantNoCeiling);
    assert_eq!(ask(&Roots(vec![]), SourceOp::ListFiles, &[]).unwrap_err().code, ReasonCode::GrantNoCeiling);
    // The working directory above a ceiling is a virtual directory.
    assert_eq!(paths(&ok(&partial, SourceOp::ListFiles, &[])), ["data", "data/a.txt"]);
    let err = ask(&partial, SourceOp::ListFiles, &[("path", "data/a.txt")]).unwrap_err();
    assert_eq!(err.code, ReasonCode::PathNotDirectory);
    assert_eq!(ask(&partial, SourceOp::ListFiles, &[("path", "data/zz")]).unwrap_err().code, ReasonCode::InputMissing);
}

#[test]
fn enumeration_entries_at_the_edge_and_one_past() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..10_000 {
        std::fs::create_dir(t.path().join(format!("d{i:05}"))).unwrap();
    }
    let a = ok(&one(t.path()), SourceOp::ListFiles, &[]);
    assert_eq!((a.result["dirs"].as_u64(), a.result["partial"].as_bool()), (Some(10_000), Some(false)));
    std::fs::create_dir(t.path().join("d10000")).unwrap();
    let a = ok(&one(t.path()), SourceOp::ListFiles, &[]);
    assert_eq!(a.result["dirs"], 10_000);
    assert_eq!(reasons(&a), ["max_entries"]);
}

#[test]
fn enumeration_files_at_the_edge_and_one_past() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..2_000 {
        write(t.path(), &format!("f{i:04}"), "");
    }
    let a = ok(&one(t.path()), SourceOp::ListFiles, &[]);
    assert_eq!((a.result["files"].as_u64(), a.result["partial"].as_bool()), (Some(2_000), Some(false)));
    write(t.path(), "f2000", "");
    let a = ok(&one(t.path()), SourceOp::ListFiles, &[]);
    assert_eq!(a.result["files"], 2_000);
    assert_eq!(reasons(&a), ["max_files"]);
}

#[test]
fn enumeration_depth_at_the_edge_and_one_past() {
    let t = tempfile::tempdir().unwrap();
    let chain = vec!["a"; 31].join("/");
    write(t.path(), &format!("{chain}/f32"), "");
    let a = ok(&one(t.path()), SourceOp::ListFiles, &[]);
    assert!(paths(&a).contains(&format!("{chain}/f32")));
    assert_eq!(a.result["partial"], false);
    write(t.path(), &format!("{chain}/a/f33"), "");
    let a = ok(&one(t.path()), SourceOp::ListFiles, &[]);
    assert!(paths(&a).contains(&format!("{chain}/a")), "the directory at level 32 is listed");
    assert!(!paths(&a).iter().any(|p| p.ends_with("f33")));
    assert_eq!(reasons(&a), ["max_depth"]);
}

#[test]
fn enumeration_path_bytes_at_the_edge_and_one_past() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..512 {
        write(t.path(), &format!("{i:03}{}", "p".repeat(125)), "");
    }
    let a = ok(&one(t.path()), SourceOp::ListFiles, &[]);
    assert_eq!((a.result["files"].as_u64(), a.result["partial"].as_bool()), (Some(512), Some(false)));
    write(t.path(), "z", "");
    let a = ok(&one(t.path()), SourceOp::ListFiles, &[]);
    assert_eq!(a.result["files"], 512);
    assert_eq!(reasons(&a), ["max_path_bytes"]);
}

#[test]
fn grep_file_bytes_at_the_edge_and_one_past() {
    let t = tempfile::tempdir().unwrap();
    let mut body = vec![b'.'; 1024 * 1024 - 6];
    body.extend_from_slice(b"NEEDLE");
    write(t.path(), "a", &body);
    let a = ok(&one(t.path()), SourceOp::GrepFiles, &[("pattern", "NEEDLE")]);
    assert_eq!((a.result["matches"].as_array().unwrap().len(), a.result["partial"].as_bool()), (1, Some(false)));
    body.insert(0, b'.');
    write(t.path(), "a", &body);
    let a = ok(&one(t.path()), SourceOp::GrepFiles, &[("pattern", "NEEDLE")]);
    assert_eq!(a.result["matches"].as_array().unwrap().len(), 0, "the needle lies past the first MiB");
    assert_eq!(reasons(&a), ["max_file_bytes"]);
    assert_eq!(a.boundary.ranges[0].bytes, 1024 * 1024);
    assert_eq!(a.boundary.ranges[0].sha256, sha(&body[..1024 * 1024]));
}

#[test]
fn grep_total_bytes_at_the_edge_and_one_past() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..8 {
        write(t.path(), &format!("f{i}"), vec![b'x'; 1024 * 1024]);
    }
    let a = ok(&one(t.path()), SourceOp::GrepFiles, &[("pattern", "y")]);
    assert_eq!((a.result["bytes_searched"].as_u64(), a.result["partial"].as_bool()), (Some(8 << 20), Some(false)));
    write(t.path(), "f8", "y");
    let a = ok(&one(t.path()), SourceOp::GrepFiles, &[("pattern", "y")]);
    assert_eq!(a.result["bytes_searched"], 8 << 20);
    assert_eq!(a.result["matches"].as_array().unwrap().len(), 0);
    assert_eq!(reasons(&a), ["max_total_bytes"]);
}

#[test]
fn grep_matches_at_the_edge_and_one_past() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "m", "hit\n".repeat(200));
    let a = ok(&one(t.path()), SourceOp::GrepFiles, &[("pattern", "hit")]);
    let m = a.result["matches"].as_array().unwrap();
    assert_eq!((m.len(), a.result["partial"].as_bool()), (200, Some(false)));
    assert_eq!((m[199]["line"].as_u64(), m[0]["column"].as_u64()), (Some(200), Some(1)));
    write(t.path(), "m", "hit\n".repeat(201));
    let a = ok(&one(t.path()), SourceOp::GrepFiles, &[("pattern", "hit")]);
    assert_eq!(a.result["matches"].as_array().unwrap().len(), 200);
    assert_eq!(reasons(&a), ["max_matches"]);
}

#[test]
fn excerpts_at_the_edge_and_one_past() {
    let t = tempfile::tempdir().unwrap();
    let line = format!("{}KEY{}", "a".repeat(300), "b".repeat(209));
    assert_eq!(line.len(), 512);
    write(t.path(), "e", format!("first\n{line}\n"));
    let a = ok(&one(t.path()), SourceOp::GrepFiles, &[("pattern", "KEY"), ("path", "e")]);
    let m = &a.result["matches"][0];
    assert_eq!((m["excerpt"].as_str(), m["excerpt_truncated"].as_bool()), (Some(line.as_str()), Some(false)));
    assert_eq!((m["line"].as_u64(), m["column"].as_u64()), (Some(2), Some(301)));
    let long = format!("{line}c");
    write(t.path(), "e", format!("first\n{long}\n"));
    let a = ok(&one(t.path()), SourceOp::GrepFiles, &[("pattern", "KEY"), ("path", "e")]);
    let m = &a.result["matches"][0];
    assert_eq!(m["excerpt"].as_str().unwrap().len(), 512);
    assert!(m["excerpt"].as_str().unwrap().contains("KEY"));
    assert_eq!(m["excerpt_truncated"], true);
}

#[test]
fn the_boundary_binds_operation_limits_and_the_broker() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "a", "abc");
    let a = ok(&one(t.path()), SourceOp::ReadFile, &[("path", "a"), ("limit", "2")]);
    let b = &a.boundary;
    assert_eq!((b.broker.as_str(), b.operation, b.path.as_str()), ("fixed_source_broker", SourceOp::ReadFile, "a"));
    assert_eq!((b.limits.read_bytes, b.limits.max_matches), (2, 200));
    assert!(b.broker_sha256.starts_with("sha256:") && b.broker_sha256.len() == 71);
    assert!(b.partial);
    assert_eq!(a.result["content"], "ab");
}

/// The same query on one thread and on several: the same result, byte for
/// byte, and the same ranges in the same order.
fn same_on_any_threads(roots: &Roots, pairs: &[(&str, &str)]) -> Answer {
    let q = query(SourceOp::GrepFiles, pairs);
    let serial = run_on(&q, roots, &resolver(), None, 1).unwrap();
    for threads in [2, 3, 8] {
        for _ in 0..3 {
            let parallel = run_on(&q, roots, &resolver(), None, threads).unwrap();
            let seen = |a: &Answer| (a.result["skipped"].to_string(), reasons(a), a.result["bytes_searched"].clone());
            assert_eq!(
                parallel.result["result_sha256"],
                serial.result["result_sha256"],
                "{threads} threads, {pairs:?}: {:?} vs {:?}",
                seen(&parallel),
                seen(&serial)
            );
            assert_eq!(parallel.boundary.ranges, serial.boundary.ranges, "{threads} threads, {pairs:?}");
        }
    }
    assert_eq!(verify_result(&serial.result), Some(true));
    serial
}

/// A tree where every budget can end the search part way: 300 files in
/// 10 directories, 3 matches in each (900 in all), 40 KiB each (12 MB in
/// all), links, FIFOs and hard links after every file, a nested ceiling.
fn busy_tree(t: &Path) -> Roots {
    let base = t.join("base");
    for d in 0..10 {
        for f in 0..30 {
            let mut body = vec![b'.'; 40 * 1024];
            for (i, at) in [100usize, 20_000, 40_000].into_iter().enumerate() {
                body[at - 1] = b'\n';
                body[at..at + 7].copy_from_slice(format!("HIT-{d}{f:02}{i}").as_bytes().get(..7).unwrap());
            }
            write(&base, &format!("d{d}/f{f:02}.txt"), &body);
            symlink("/etc/passwd", base.join(format!("d{d}/f{f:02}.z-link"))).unwrap();
        }
        std::fs::hard_link(base.join(format!("d{d}/f00.txt")), t.join(format!("hard{d}"))).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            base.join(format!("d{d}/fifo")),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap();
    }
    write(t, "nested/n.txt", "HIT-nested\n");
    Roots(vec![(None, base), (Some(RelPath::parse("d5/sub").unwrap()), t.join("nested"))])
}

#[test]
fn a_search_on_many_threads_answers_as_one_thread_does_wherever_it_stops() {
    let t = tempfile::tempdir().unwrap();
    let roots = busy_tree(t.path());
    // Cut by matches (200 of 900), by total bytes (8 MiB of 12 MB), by
    // neither (a needle found once), and on a path below the root.
    let matches = same_on_any_threads(&roots, &[("pattern", "HIT-")]);
    assert_eq!(reasons(&matches), ["max_matches", "skipped_entries"]);
    let bytes = same_on_any_threads(&roots, &[("pattern", "absent")]);
    assert_eq!(reasons(&bytes), ["max_total_bytes", "skipped_entries"]);
    assert_eq!(bytes.result["bytes_searched"], 8 << 20);
    let one = same_on_any_threads(&roots, &[("pattern", "HIT-nested")]);
    assert_eq!(one.result["matches"][0]["path"], "d5/sub/n.txt");
    same_on_any_threads(&roots, &[("pattern", "HIT-3"), ("path", "d3")]);
}

#[test]
fn what_the_walk_meets_after_the_file_a_search_stops_at_is_not_counted() {
    let t = tempfile::tempdir().unwrap();
    let roots = busy_tree(t.path());
    // Each directory's f00.txt has two links (skipped), so 29 files of 3
    // matches a directory: the 200th match is the second of d2/f09.txt.
    // The links after it, and the later directories' FIFOs, were never
    // reached.
    let q = query(SourceOp::GrepFiles, &[("pattern", "HIT-")]);
    for threads in [1, 2, 8] {
        let a = run_on(&q, &roots, &resolver(), None, threads).unwrap();
        let m = a.result["matches"].as_array().unwrap();
        assert_eq!((m.len(), m[199]["path"].as_str()), (200, Some("d2/f09.txt")), "{threads} threads");
        let skipped = &a.result["skipped"];
        let counts = ["symlink", "special", "hardlink"].map(|k| skipped[k].as_u64());
        // d0 and d1 whole (30 links, a FIFO, a hard link each), then d2's
        // hard link and its links f00 to f08.
        assert_eq!(counts, [Some(69), Some(2), Some(3)], "{threads} threads");
        assert_eq!(a.boundary.ranges.len(), 67, "{threads} threads");
    }
}

#[test]
fn a_passed_deadline_stops_a_search_on_any_threads() {
    let t = tempfile::tempdir().unwrap();
    let roots = busy_tree(t.path());
    let q = query(SourceOp::GrepFiles, &[("pattern", "HIT-")]);
    for threads in [1, 2, 8] {
        let a = run_on(&q, &roots, &resolver(), Some(std::time::Instant::now()), threads).unwrap();
        assert_eq!(reasons(&a), ["deadline"], "{threads} threads");
        assert_eq!(a.result["matches"].as_array().unwrap().len(), 0);
        assert!(a.boundary.ranges.is_empty());
    }
}
