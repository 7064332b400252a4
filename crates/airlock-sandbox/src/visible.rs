//! Whether a program would run in a worker, decided before any worker is
//! started: its path resolved as the worker sees the file system.
//!
//! The worker's root ([`crate::mounts`]) holds the image directories at
//! their host paths (a directory bound read-only with everything below it;
//! a symbolic link recreated as the same link), the directories above them
//! (empty, made on the root's tmpfs), and the sandbox's own `/etc`, `/dev`,
//! `/proc`, `/tmp`, working directory and `/.airlock`, which hold no
//! programs of the host. So a path is looked up component by component:
//! inside an image directory the host's entry is what the worker sees, and
//! a symbolic link is followed only as the worker would follow it (its
//! target looked up by the same rule); anything else is outside the image.
//! A bare name is looked up on the worker's `PATH` as `execvp` does. The
//! file found must be a regular file with an execute bit; a script's `#!`
//! interpreter must itself be found by the same rule.
//!
//! This reads the host's file system as it is now: a check for people
//! (`tools validate`, `tools list`, the MCP catalog), not a guarantee —
//! the worker's `execve` is what decides at run time.
#![forbid(unsafe_code)]

use crate::spec::ImageMount;
use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// The worker's `PATH` when the spec sets none.
pub const WORKER_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Most symbolic links followed in one lookup (Linux's `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// Most `#!` interpreters in a chain (Linux allows 4 levels).
const MAX_INTERPRETERS: usize = 4;

/// Why a program would not run in the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotRunnable {
    /// A bare name found in no directory of the worker's `PATH`.
    NotOnPath {
        /// The name.
        program: String,
        /// The worker's `PATH`.
        path: String,
    },
    /// A relative path with a `/`: it would be looked up in the worker's
    /// working directory, which holds only a call's own files.
    Relative(String),
    /// The lookup reached a path no image directory holds.
    OutsideImage(PathBuf),
    /// Nothing at this path in the image.
    Missing(PathBuf),
    /// What the path names is not a regular file with an execute bit.
    NotExecutable(PathBuf),
    /// Too many symbolic links, or too many `#!` interpreters.
    TooManyLinks(PathBuf),
    /// A script whose `#!` interpreter would not run.
    Interpreter {
        /// The script.
        script: PathBuf,
        /// Why its interpreter would not run.
        why: Box<NotRunnable>,
    },
}

impl NotRunnable {
    /// The path outside the image the lookup needed, if that is why.
    pub fn outside_image(&self) -> Option<&Path> {
        match self {
            NotRunnable::OutsideImage(p) => Some(p),
            NotRunnable::Interpreter { why, .. } => why.outside_image(),
            _ => None,
        }
    }
}

impl fmt::Display for NotRunnable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotRunnable::NotOnPath { program, path } => {
                write!(f, "{program:?} is in no directory of the worker's PATH ({path}) within the image")
            }
            NotRunnable::Relative(p) => write!(
                f,
                "{p:?} is relative, so the worker would look for it in its working directory, which holds only the \
                 call's own files"
            ),
            NotRunnable::OutsideImage(p) => write!(f, "{} is outside the worker image", p.display()),
            NotRunnable::Missing(p) => write!(f, "{} does not exist in the worker image", p.display()),
            NotRunnable::NotExecutable(p) => write!(f, "{} is not an executable regular file", p.display()),
            NotRunnable::TooManyLinks(p) => write!(f, "{} goes through too many links or interpreters", p.display()),
            NotRunnable::Interpreter { script, why } => {
                write!(f, "{} is a script whose #! interpreter would not run: {why}", script.display())
            }
        }
    }
}

/// Where `program` (an argv\[0\]) would be found in a worker whose image is
/// `image`, with `path` as its `PATH`; `provided` are the files the sandbox
/// itself puts into the worker (e.g. under `/.airlock/bin`), taken as
/// present. Returns the path the worker would execute.
pub fn find_program(
    image: &[ImageMount],
    path: &str,
    provided: &[&str],
    program: &str,
) -> Result<PathBuf, NotRunnable> {
    if program.contains('/') {
        if !program.starts_with('/') {
            return Err(NotRunnable::Relative(program.to_owned()));
        }
        if provided.contains(&program) {
            return Ok(PathBuf::from(program));
        }
        return runnable(image, Path::new(program), 0);
    }
    let mut last = None;
    for dir in path.split(':').filter(|d| d.starts_with('/')) {
        let candidate = Path::new(dir).join(program);
        if candidate.to_str().is_some_and(|c| provided.contains(&c)) {
            return Ok(candidate);
        }
        match runnable(image, &candidate, 0) {
            Ok(found) => return Ok(found),
            // Nothing of that name here, or a PATH directory the image lacks.
            Err(NotRunnable::Missing(_)) => {}
            Err(NotRunnable::OutsideImage(p)) if candidate.starts_with(&p) => {}
            // Like execvp: something there that would not run (not
            // executable, a link out of the image) is the more useful
            // answer than "not found" in a later directory.
            Err(e) => {
                last.get_or_insert(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| NotRunnable::NotOnPath { program: program.to_owned(), path: path.to_owned() }))
}

/// Resolves `path` in the worker's view and checks that it is an executable
/// regular file whose interpreter (for a script) is runnable too.
fn runnable(image: &[ImageMount], path: &Path, depth: usize) -> Result<PathBuf, NotRunnable> {
    let found = resolve(image, path)?;
    let md = std::fs::metadata(&found).map_err(|_| NotRunnable::Missing(found.clone()))?;
    if !md.is_file() || md.permissions().mode() & 0o111 == 0 {
        return Err(NotRunnable::NotExecutable(found));
    }
    if let Some(interpreter) = interpreter_of(&found) {
        if depth >= MAX_INTERPRETERS {
            return Err(NotRunnable::TooManyLinks(found));
        }
        runnable(image, &interpreter, depth + 1)
            .map_err(|why| NotRunnable::Interpreter { script: found.clone(), why: Box::new(why) })?;
    }
    Ok(found)
}

/// The absolute `#!` interpreter of a script, if `file` starts with one.
fn interpreter_of(file: &Path) -> Option<PathBuf> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(file).and_then(|mut f| f.read(&mut head)).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    let word = text.split([' ', '\t']).find(|w| !w.is_empty())?;
    word.starts_with('/').then(|| PathBuf::from(word))
}

/// How the worker sees an absolute, lexically normal path.
enum Seen {
    /// Inside an image entry: the host's entry is what the worker sees.
    Image,
    /// A directory above an image entry (or `/`): empty but for the image.
    Above,
    /// Nothing of the host.
    Outside,
}

fn seen(image: &[ImageMount], path: &Path) -> Seen {
    if image.iter().any(|m| path.starts_with(&m.path)) {
        Seen::Image
    } else if image.iter().any(|m| m.path.starts_with(path)) {
        Seen::Above
    } else {
        Seen::Outside
    }
}

/// Follows `path` component by component in the worker's view (see the
/// module documentation); the result has no link left in it.
fn resolve(image: &[ImageMount], path: &Path) -> Result<PathBuf, NotRunnable> {
    let mut done = PathBuf::from("/");
    let mut todo: Vec<OsString> = parts(path).into_iter().rev().collect();
    let mut links = 0;
    while let Some(part) = todo.pop() {
        if part == ".." {
            done.pop();
            continue;
        }
        let next = done.join(&part);
        match seen(image, &next) {
            Seen::Outside => return Err(NotRunnable::OutsideImage(next)),
            Seen::Above => done = next,
            Seen::Image => {
                let md = std::fs::symlink_metadata(&next).map_err(|_| NotRunnable::Missing(next.clone()))?;
                if md.file_type().is_symlink() {
                    links += 1;
                    let target = std::fs::read_link(&next).map_err(|_| NotRunnable::Missing(next.clone()))?;
                    if links > MAX_LINKS {
                        return Err(NotRunnable::TooManyLinks(next));
                    }
                    if target.is_absolute() {
                        done = PathBuf::from("/");
                    }
                    todo.extend(parts(&target).into_iter().rev());
                } else if md.is_dir() || todo.is_empty() {
                    done = next;
                } else {
                    return Err(NotRunnable::Missing(next.join(todo.last().map(PathBuf::from).unwrap_or_default())));
                }
            }
        }
    }
    Ok(done)
}

/// The normal components of `path` (`..` kept, `.` and `/` dropped).
fn parts(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn exe(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn links_are_followed_only_within_the_image() {
        let t = tempfile::tempdir().unwrap();
        let (img, out) = (t.path().join("img"), t.path().join("out"));
        std::fs::create_dir_all(img.join("bin")).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        exe(&img.join("bin/tool"), "\x7fELF");
        exe(&out.join("hidden"), "\x7fELF");
        symlink(img.join("bin/tool"), img.join("bin/inside")).unwrap();
        symlink(out.join("hidden"), img.join("bin/escape")).unwrap();
        symlink("tool", img.join("bin/relative")).unwrap();
        std::fs::write(img.join("bin/plain"), "x").unwrap();
        let image = [ImageMount::new(&img)];
        let path = img.join("bin").display().to_string();
        let find = |p: &str| find_program(&image, &path, &[], p);
        assert_eq!(find("tool"), Ok(img.join("bin/tool")));
        assert_eq!(find("inside"), Ok(img.join("bin/tool")));
        assert_eq!(find("relative"), Ok(img.join("bin/tool")));
        assert_eq!(find("escape"), Err(NotRunnable::OutsideImage(out.clone())));
        assert_eq!(find("plain"), Err(NotRunnable::NotExecutable(img.join("bin/plain"))));
        assert!(matches!(find("nothing"), Err(NotRunnable::NotOnPath { .. })));
        assert_eq!(find(out.join("hidden").to_str().unwrap()), Err(NotRunnable::OutsideImage(out.clone())));
        assert!(matches!(find("./tool"), Err(NotRunnable::Relative(_))));
        assert_eq!(find_program(&image, &path, &["/.airlock/bin/x"], "/.airlock/bin/x"), Ok("/.airlock/bin/x".into()));
    }

    #[test]
    fn a_script_needs_its_interpreter_in_the_image() {
        let t = tempfile::tempdir().unwrap();
        let img = t.path().join("img");
        std::fs::create_dir_all(&img).unwrap();
        exe(&img.join("interp"), "\x7fELF");
        exe(&img.join("good"), &format!("#!{} -x\n", img.join("interp").display()));
        exe(&img.join("bad"), "#!/nonexistent/python3\n");
        let image = [ImageMount::new(&img)];
        let path = img.display().to_string();
        assert_eq!(find_program(&image, &path, &[], "good"), Ok(img.join("good")));
        let err = find_program(&image, &path, &[], "bad").unwrap_err();
        assert_eq!(err.outside_image(), Some(Path::new("/nonexistent")), "{err}");
    }
}
