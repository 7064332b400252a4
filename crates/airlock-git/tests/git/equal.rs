//! Answers equal to the `git` CLI's.

use crate::util::{answer, op, take, Repo};
use airlock_git::{Limits, Operation};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

/// `git status --porcelain=v2 -z --branch --untracked-files=all`, as our
/// answer's shape: (head, path → (index, worktree, from)).
/// Path → (index letter, work-tree letter, renamed from).
pub type Entries = BTreeMap<String, (String, String, Option<String>)>;

pub fn git_status(repo: &Repo) -> (Value, Entries) {
    let out = repo.git(&["status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all"]);
    let mut fields = out.split('\0').filter(|s| !s.is_empty());
    let (mut oid, mut branch) = (None, None);
    let mut entries = BTreeMap::new();
    while let Some(rec) = fields.next() {
        if let Some(v) = rec.strip_prefix("# branch.oid ") {
            oid = (v != "(initial)").then(|| v.to_string());
        } else if let Some(v) = rec.strip_prefix("# branch.head ") {
            branch = (v != "(detached)").then(|| v.to_string());
        } else if rec.starts_with('#') {
        } else if let Some(p) = rec.strip_prefix("? ") {
            entries.insert(p.to_string(), ("?".into(), "?".into(), None));
        } else {
            let parts: Vec<&str> = rec.splitn(if rec.starts_with('2') { 10 } else { 9 }, ' ').collect();
            let xy = parts[1];
            let (x, y) = (xy[..1].to_string(), xy[1..].to_string());
            let path = parts.last().unwrap().to_string();
            let from = rec.starts_with('2').then(|| fields.next().unwrap().to_string());
            entries.insert(path, (x, y, from));
        }
    }
    let detached = branch.is_none();
    (json!({ "branch": branch, "commit": oid, "detached": detached }), entries)
}

fn ours_status(v: &Value) -> Entries {
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap().to_string();
            (s("path"), (s("index"), s("worktree"), e["from"].as_str().map(str::to_string)))
        })
        .collect()
}

pub fn assert_status_equal(repo: &Repo) {
    let ours = answer(&repo.path(), op("git_status")).unwrap();
    let (head, entries) = git_status(repo);
    assert_eq!(ours["head"], head, "head: ours {ours}");
    assert_eq!(ours_status(&ours), entries, "ours: {ours:#}");
}

/// `git log` in our shape.
pub fn git_log(repo: &Repo, n: u32) -> Vec<Value> {
    let format = "--format=%H%x1f%P%x1f%an%x1f%ae%x1f%ad%x1f%cn%x1f%ce%x1f%cd%x1f%s%x1e";
    let out = repo.git(&["log", format, "--date=raw", &format!("-n{n}")]);
    let sig = |name: &str, email: &str, raw: &str| {
        let (t, off) = raw.split_once(' ').unwrap();
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let off: i64 = sign * (off[1..3].parse::<i64>().unwrap() * 3600 + off[3..5].parse::<i64>().unwrap() * 60);
        json!({ "name": name, "email": email, "time": t.parse::<i64>().unwrap(), "offset": off })
    };
    out.split('\x1e')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| {
            let f: Vec<&str> = r.split('\x1f').collect();
            let parents: Vec<&str> = f[1].split_whitespace().collect();
            json!({
                "id": f[0], "parents": parents,
                "author": sig(f[2], f[3], f[4]), "committer": sig(f[5], f[6], f[7]), "summary": f[8],
            })
        })
        .collect()
}

pub fn assert_log_equal(repo: &Repo, n: u32) {
    let ours = answer(&repo.path(), json!({ "operation": "git_log", "max_count": n })).unwrap();
    let theirs = git_log(repo, n);
    assert_eq!(ours["commits"].as_array().unwrap(), &theirs, "ours: {ours:#}");
}

/// `git diff [--cached]` in our shape: path → (status, from, binary, added, removed, hunks).
pub fn git_diff(repo: &Repo, cached: bool) -> BTreeMap<String, Value> {
    let base: Vec<&str> = if cached { vec!["diff", "--cached", "-M"] } else { vec!["diff", "-M"] };
    let with = |extra: &[&str]| {
        let mut a = base.clone();
        a.extend_from_slice(extra);
        repo.git(&a)
    };
    let mut files: BTreeMap<String, Value> = BTreeMap::new();
    let names = with(&["--name-status", "-z"]);
    let mut f = names.split('\0').filter(|s| !s.is_empty());
    while let Some(status) = f.next() {
        let letter = &status[..1];
        let (path, from) = if letter == "R" || letter == "C" {
            let from = f.next().unwrap().to_string();
            (f.next().unwrap().to_string(), Some(from))
        } else {
            (f.next().unwrap().to_string(), None)
        };
        files.insert(path.clone(), json!({ "status": letter, "path": path, "from": from }));
    }
    let numstat = with(&["--numstat", "-z"]);
    let mut f = numstat.split('\0');
    while let Some(rec) = f.next() {
        if rec.is_empty() {
            continue;
        }
        let parts: Vec<&str> = rec.split('\t').collect();
        let path = if parts[2].is_empty() {
            f.next().unwrap();
            f.next().unwrap().to_string()
        } else {
            parts[2].to_string()
        };
        let e = files.get_mut(&path).unwrap_or_else(|| panic!("numstat path {path:?}"));
        let binary = parts[0] == "-";
        e["binary"] = json!(binary);
        e["added"] = json!(if binary { 0 } else { parts[0].parse::<u64>().unwrap() });
        e["removed"] = json!(if binary { 0 } else { parts[1].parse::<u64>().unwrap() });
    }
    // Hunks: per file, from the first "@@" on, without git's function context.
    let patch = with(&["--no-color", "-U3"]);
    let mut current: Option<String> = None;
    let mut hunks: BTreeMap<String, String> = BTreeMap::new();
    let mut in_hunks = false;
    for line in patch.split_inclusive('\n') {
        if line.starts_with("diff --git ") {
            current = None;
            in_hunks = false;
            continue;
        }
        if !in_hunks {
            if let Some(p) = line.strip_prefix("+++ b/") {
                current = Some(p.trim_end().to_string());
            } else if let Some(p) = line.strip_prefix("--- a/") {
                current = Some(p.trim_end().to_string());
            }
            if !line.starts_with("@@") {
                continue;
            }
            in_hunks = true;
        }
        let key = current.clone().expect("a hunk belongs to a file");
        let line = if let Some(rest) = line.strip_prefix("@@") {
            let end = rest.find("@@").unwrap() + 4;
            format!("{}\n", &line[..end])
        } else {
            line.to_string()
        };
        hunks.entry(key).or_default().push_str(&line);
    }
    for (path, e) in files.iter_mut() {
        e["hunks"] = json!(hunks.remove(path).unwrap_or_default());
    }
    assert!(hunks.is_empty(), "hunks for unknown files: {hunks:?}");
    files
}

pub fn assert_diff_equal(repo: &Repo, cached: bool) {
    let name = if cached { "git_staged_diff" } else { "git_diff" };
    let ours = answer(&repo.path(), op(name)).unwrap();
    let ours: BTreeMap<String, Value> = ours["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let mut f = f.clone();
            if f.get("from").is_none() {
                f["from"] = Value::Null;
            }
            (f["path"].as_str().unwrap().to_string(), f)
        })
        .collect();
    let theirs = git_diff(repo, cached);
    assert_eq!(ours, theirs, "{name}");
}

/// A history with a merge, then staged and unstaged changes of every kind.
pub fn busy_repo() -> Repo {
    let r = Repo::new();
    r.write("a.txt", "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n");
    r.write("b.txt", "bravo\n");
    r.write("bin.dat", b"\x00\x01\x02binary\x00");
    r.write("dir/c.txt", "charlie\ndelta\necho\nfoxtrot\ngolf\nhotel\n");
    r.write(".gitignore", "*.log\n");
    r.git(&["add", "-A"]);
    r.git(&["commit", "-q", "-m", "first\n\nwith a body"]);
    r.git(&["checkout", "-q", "-b", "feature"]);
    r.write("a.txt", "one\ntwo\nTHREE\nfour\nfive\nsix\nseven\neight\nnine\nten\n");
    r.git(&["commit", "-q", "-am", "feature: shout three"]);
    r.git(&["checkout", "-q", "main"]);
    r.write("b.txt", "bravo\nbravissimo\n");
    r.git(&["commit", "-q", "-am", "main: more b"]);
    r.git(&["merge", "-q", "--no-ff", "-m", "Merge branch feature", "feature"]);
    // Staged: a rename, a new file, a binary change, a deletion.
    r.git(&["mv", "dir/c.txt", "dir/renamed.txt"]);
    r.write("new.txt", "brand new\nno newline at end");
    r.write("bin.dat", b"\x00\x01\x02binary changed\x00");
    r.git(&["add", "new.txt", "bin.dat"]);
    r.git(&["rm", "-q", "--cached", ".gitignore"]);
    r.write(".gitignore", "*.log\n");
    // Unstaged: modifications, a deletion; untracked and ignored files.
    r.write("a.txt", "zero\none\ntwo\nTHREE\nfour\nfive\nsix\nseven\neight\nnine\nten\neleven\n");
    r.write("new.txt", "brand new\nno newline at end\nnow one more\n");
    r.remove("b.txt");
    r.write("untracked/deep/u.txt", "u\n");
    r.write("noise.log", "ignored\n");
    r
}

#[test]
fn status_equals_git_status_on_a_busy_repository() {
    assert_status_equal(&busy_repo());
}

#[test]
fn log_equals_git_log_across_a_merge() {
    let r = busy_repo();
    assert_log_equal(&r, 100);
    assert_log_equal(&r, 2);
    let ours = answer(&r.path(), json!({ "operation": "git_log", "max_count": 2 })).unwrap();
    assert_eq!(ours["truncated"], json!(true));
    assert_eq!(ours["commits"][0]["parents"].as_array().unwrap().len(), 2, "the merge comes first");
}

#[test]
fn staged_diff_equals_git_diff_cached() {
    assert_diff_equal(&busy_repo(), true);
}

#[test]
fn diff_equals_git_diff() {
    assert_diff_equal(&busy_repo(), false);
}

#[test]
fn a_detached_head_is_reported_as_git_does() {
    let r = busy_repo();
    r.git(&["stash", "-q", "-u"]);
    r.git(&["checkout", "-q", "--detach", "HEAD~1"]);
    assert_status_equal(&r);
    assert_log_equal(&r, 100);
    let ours = answer(&r.path(), op("git_status")).unwrap();
    assert_eq!(ours["head"]["detached"], json!(true));
    assert_eq!(ours["head"]["branch"], Value::Null);
}

#[test]
fn a_same_size_change_with_its_time_put_back_is_still_seen() {
    let r = Repo::new();
    r.write("a.txt", "aaaa\n");
    r.write("b.txt", "bbbb\n");
    r.git(&["add", "-A"]);
    r.git(&["commit", "-q", "-m", "one"]);
    // Let the index be older than any later write (no racy entries).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    r.git(&["update-index", "--refresh"]);
    let before = std::fs::metadata(r.path().join("a.txt")).unwrap().modified().unwrap();
    r.write("a.txt", "AAAA\n");
    let f = std::fs::File::options().write(true).open(r.path().join("a.txt")).unwrap();
    f.set_times(std::fs::FileTimes::new().set_modified(before)).unwrap();
    assert_status_equal(&r);
    let ours = answer(&r.path(), op("git_status")).unwrap();
    assert_eq!(ours["entries"][0]["path"], json!("a.txt"), "{ours}");
}

/// Waits until the next second, then lets git rewrite the index, so every
/// file written before is older than it (not racy): the snapshot then
/// records unchanged tracked files by their stat data alone.
fn age_the_index(r: &Repo) {
    std::thread::sleep(std::time::Duration::from_millis(1100));
    r.git(&["update-index", "-q", "--refresh"]);
}

#[test]
fn with_an_older_index_status_and_diffs_still_equal_git_s() {
    let r = busy_repo();
    age_the_index(&r);
    let (stats, _) = take(&r.path(), Operation::GitStatus, Limits::default()).unwrap();
    assert!(stats.stat_only > 0, "{stats:?}");
    assert_status_equal(&r);
    assert_diff_equal(&r, false);
    assert_diff_equal(&r, true);
}

#[test]
fn only_the_files_git_would_read_are_copied() {
    const UNCHANGED: &str = "UNCHANGED-4d1f-content-never-copied\n";
    let r = Repo::new();
    for name in ["a.txt", "touched.txt", "edited.txt", "mode.sh"] {
        r.write(name, if name == "a.txt" { UNCHANGED.to_string() } else { format!("{name}\n") });
    }
    r.git(&["add", "-A"]);
    r.git(&["commit", "-q", "-m", "one"]);
    age_the_index(&r);
    // Same content, new time: hashed (and clean); new content: changed;
    // a mode change; an untracked file.
    r.write("touched.txt", "touched.txt\n");
    r.write("edited.txt", "edited, and longer\n");
    let mode = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(r.path().join("mode.sh"), mode).unwrap();
    r.write("untracked.txt", "UNTRACKED-9a7c\n");

    let (stats, archive) = take(&r.path(), Operation::GitStatus, Limits::default()).unwrap();
    let bytes = std::fs::read(&archive).unwrap();
    let holds = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(!holds(UNCHANGED) && !holds("UNTRACKED-9a7c"), "{stats:?}");
    assert!(holds("touched.txt\n") && holds("edited, and longer"), "{stats:?}");
    assert_eq!(stats.stat_only, 2, "a.txt and untracked.txt: {stats:?}");
    assert_status_equal(&r);
    assert_diff_equal(&r, false);
    let ours = answer(&r.path(), op("git_status")).unwrap();
    let paths: Vec<&str> = ours["entries"].as_array().unwrap().iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["edited.txt", "mode.sh", "untracked.txt"], "{ours}");
}

/// The walk lists each directory by name, so `a/…` comes before `a.txt`
/// and `a-b.txt`, which git's index orders first ('-' and '.' sort below
/// '/'): the driver's lookup of each stat-only record in the index must
/// find it wherever it is, and mark nothing else up to date.
#[test]
fn status_equals_git_s_where_the_walk_order_is_not_the_index_s() {
    let r = Repo::new();
    for name in ["a.txt", "a-b.txt", "a/b.txt", "a/c.txt", "a/d/e.txt", "a0.txt", "b.txt"] {
        if let Some((dir, _)) = name.rsplit_once('/') {
            std::fs::create_dir_all(r.path().join(dir)).unwrap();
        }
        r.write(name, format!("{name}\n"));
    }
    r.git(&["add", "-A"]);
    r.git(&["commit", "-q", "-m", "one"]);
    age_the_index(&r);
    r.write("a/c.txt", "a/c.txt, longer now\n");
    r.write("a/new.txt", "new\n");
    r.write("a.txt.orig", "untracked beside a.txt\n");
    std::fs::remove_file(r.path().join("a0.txt")).unwrap();
    let (stats, _) = take(&r.path(), Operation::GitStatus, Limits::default()).unwrap();
    assert_eq!(stats.stat_only, 7, "five unchanged, two untracked: {stats:?}");
    assert_status_equal(&r);
    let ours = answer(&r.path(), op("git_status")).unwrap();
    let paths: Vec<&str> = ours["entries"].as_array().unwrap().iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["a.txt.orig", "a/c.txt", "a/new.txt", "a0.txt"], "{ours}");
}

#[test]
fn an_empty_repository_answers_empty() {
    let r = Repo::new();
    assert_status_equal(&r);
    let log = answer(&r.path(), op("git_log")).unwrap();
    assert_eq!(log["commits"], json!([]));
    r.write("x", "x\n");
    r.git(&["add", "x"]);
    assert_diff_equal(&r, true);
    assert_status_equal(&r);
}
