//! Issue 6: the fixed source broker, in-process, against the command-line
//! tools an agent would otherwise run: `grep_files` over a generated tree
//! at the 8 MiB search budget vs the faster of `rg -F --no-ignore` and
//! `grep -rnF`, and `list_files` vs
//! `find`. Targets: ratio <= 1.5 each.

use crate::harness::{compare, Report, Target};
use airlock_core::{Refusal, RelPath, SourceOp};
use airlock_hostfs::{Dir, HostAuthority, Resolver};
use airlock_source::{Ceilings, Query};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Files in the generated tree and the bytes of each: 8 MiB in all.
const FILES: usize = 1024;
const FILE_BYTES: usize = 8 * 1024;
/// Directories the files are spread over.
const DIRS: usize = 32;
const NEEDLE: &str = "airlock_bench_needle";

struct Root(PathBuf);

impl Ceilings for Root {
    fn roots(&self) -> Vec<Option<RelPath>> {
        vec![None]
    }
    fn open(&self, _: Option<&RelPath>) -> Result<Dir, Refusal> {
        Ok(Dir::open_ceiling(&HostAuthority::ambient(), &self.0)?)
    }
}

/// A source-like tree: text lines, the needle in every 8th file.
fn tree() -> Result<tempfile::TempDir, String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let line = "    let value = compute(input, &mut state); // ordinary source text\n";
    for i in 0..FILES {
        let dir = tmp.path().join(format!("src/mod{:02}", i % DIRS));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut body = String::with_capacity(FILE_BYTES);
        while body.len() + line.len() <= FILE_BYTES {
            body.push_str(line);
        }
        if i % 8 == 0 {
            body.replace_range(0..NEEDLE.len() + 1, &format!("{NEEDLE}\n"));
        }
        body.push_str(&"x".repeat(FILE_BYTES - body.len()));
        std::fs::write(dir.join(format!("file{i:04}.rs")), body).map_err(|e| e.to_string())?;
    }
    Ok(tmp)
}

fn broker(root: &Path, op: SourceOp, pairs: &[(&str, &str)]) -> Result<serde_json::Value, String> {
    let args = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let query = Query::from_args(op, &args).map_err(|e| e.to_string())?;
    let resolver = Resolver::new(airlock_core::ResolverChoice::Auto).map_err(|e| e.to_string())?;
    let answer = airlock_source::run(&query, &Root(root.to_path_buf()), &resolver, None).map_err(|e| e.to_string())?;
    Ok(answer.result)
}

fn tool(program: &str, args: &[&str], root: &Path) -> Result<(), String> {
    let status = Command::new(program)
        .args(args)
        .current_dir(root)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("{program}: {e} (install it: apt-get install -y ripgrep findutils)"))?;
    // rg exits 1 for "no match"; anything above is an error.
    if status.code().is_some_and(|c| c <= 1) {
        Ok(())
    } else {
        Err(format!("{program} failed: {status}"))
    }
}

/// grep_files over 1,024 files of 8 KiB (exactly the 8 MiB budget) vs
/// the faster (by p50) of `rg -F --no-ignore NEEDLE .` and GNU
/// `grep -rnF NEEDLE .`; both readings are printed under the row.
pub fn grep_vs_rg(quick: bool) -> Result<Report, String> {
    let tmp = tree()?;
    let root = tmp.path();
    let check = broker(root, SourceOp::GrepFiles, &[("pattern", NEEDLE)])?;
    let found = check["matches"].as_array().map_or(0, Vec::len);
    if found != FILES / 8 || check["bytes_searched"] != (FILES * FILE_BYTES) as u64 || check["partial"] != false {
        return Err(format!(
            "the broker's answer is not the expected one: {found} matches, {}",
            check["partial_reasons"]
        ));
    }
    let samples = if quick { 5 } else { 21 };
    let grep_files = || broker(root, SourceOp::GrepFiles, &[("pattern", NEEDLE)]).map(drop);
    let rg = compare(samples, grep_files, || tool("rg", &["-F", "--no-ignore", NEEDLE, "."], root))?;
    let gnu = compare(samples, grep_files, || tool("grep", &["-rnF", NEEDLE, "."], root))?;
    let ms = |s: &crate::harness::Summary| s.p50.as_secs_f64() * 1e3;
    let line = |name: &str, (a, b): &(crate::harness::Summary, crate::harness::Summary)| {
        format!("vs {name}: airlock p50 {:.3} ms, {name} p50 {:.3} ms, ratio {:.3}", ms(a), ms(b), ms(a) / ms(b))
    };
    let extra = vec![
        format!("{FILES} files of {FILE_BYTES} bytes in {DIRS} directories, {found} matches"),
        line("rg -F --no-ignore", &rg),
        line("grep -rnF", &gnu),
    ];
    // The row compares with the faster of the two tools.
    let ((candidate, baseline), faster) =
        if rg.1.p50 <= gnu.1.p50 { (rg, "rg -F --no-ignore") } else { (gnu, "grep -rnF") };
    Ok(Report {
        name: if faster == "grep -rnF" {
            "grep_files 8 MiB (in-process) vs the faster of rg -F --no-ignore and grep -rnF: grep"
        } else {
            "grep_files 8 MiB (in-process) vs the faster of rg -F --no-ignore and grep -rnF: rg"
        },
        extra,
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(1.5),
        bytes: Some((FILES * FILE_BYTES) as u64),
        samples,
    })
}

/// list_files over the same tree (1,024 files, 33 directories) vs `find`
/// printing what list_files reports (type, size, link count, path), which
/// like list_files must `lstat` every entry. Bare `find .` (names only,
/// from `d_type`, no `lstat`) is timed too and printed under the row.
pub fn list_vs_find(quick: bool) -> Result<Report, String> {
    let tmp = tree()?;
    let root = tmp.path();
    let check = broker(root, SourceOp::ListFiles, &[])?;
    if check["files"] != FILES as u64 || check["partial"] != false {
        return Err(format!("the broker listed {} files, partial {}", check["files"], check["partial_reasons"]));
    }
    let samples = if quick { 5 } else { 21 };
    let list = || broker(root, SourceOp::ListFiles, &[]).map(drop);
    let (candidate, baseline) = compare(samples, list, || tool("find", &[".", "-printf", "%y %s %n %p\\n"], root))?;
    let (again, bare) = compare(samples, list, || tool("find", &["."], root))?;
    let bare_ratio = again.p50.as_secs_f64() / bare.p50.as_secs_f64();
    Ok(Report {
        name: "list_files (in-process) vs find -printf",
        extra: vec![
            format!("{FILES} files in {} directories; baseline: find . -printf '%y %s %n %p\\n'", DIRS + 1),
            format!(
                "vs bare `find .` (no lstat): airlock p50 {:.3} ms, find p50 {:.3} ms, ratio {bare_ratio:.3} (not a target)",
                again.p50.as_secs_f64() * 1e3,
                bare.p50.as_secs_f64() * 1e3
            ),
        ],
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(1.5),
        bytes: None,
        samples,
    })
}
