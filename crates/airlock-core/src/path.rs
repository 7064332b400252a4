//! The path grammar: what a declared file path may look like.
//!
//! One function, [`RelPath::parse`], decides whether a string is an
//! acceptable relative path, and one table of [`ReasonCode`]s says why not.
//! It is used for `[filesystem]` entries, `path` arguments, ceiling virtual
//! destinations and every path a later component resolves. Nothing is
//! trimmed, decoded or normalised: a path is accepted exactly as written or
//! refused.
//!
//! Refused (ATTACKS.md §Paths, seeds 000 and 003): empty paths, rooted paths,
//! `..`, empty or `.` components, backslashes, mount delimiters and drive
//! prefixes (`:`), characters reserved on portable file systems
//! (`<>"|?*`), NUL, CR, LF and every other control or bidirectional-override
//! character, components over 255 bytes, paths over 4,096 bytes or 64
//! components, Windows device names with any extension or trailing dots and
//! spaces, components ending in a dot or a space, and the control
//! directories `.git` and `.airlock` in any letter case.
//!
//! # Letter case beyond ASCII
//!
//! A case-insensitive file system compares names by a Unicode case fold
//! (ext4 and f2fs `casefold`: NFD then full case folding; APFS and HFS+:
//! their own tables; NTFS and exFAT: an upper-case table), and HFS+ also
//! ignores some invisible code points. So `.airloc` + U+212A KELVIN SIGN,
//! `.gıt` (dotless ı, whose upper case is `I`) or the staging prefix spelt
//! `.airlock-ſtage-` (long s, which folds to `s`) name the reserved entry
//! there, though they differ from it in ASCII. Control names, the broker's
//! staging prefix and Windows device names are therefore compared by
//! [`fold_key`]:
//!
//! 1. the code points HFS+ ignores (U+200C–U+200F, U+202A–U+202E,
//!    U+206A–U+206F, U+FEFF; the list Git uses for the same reason) are
//!    dropped;
//! 2. each non-ASCII character whose case mapping or fold — simple or full,
//!    upper or lower, Turkic included — consists only of ASCII letters is
//!    replaced by that fold ([`ASCII_FOLDS`], 13 characters: K → k,
//!    ſ → s, ı and İ → i, ß and ẞ → ss, the ligatures ﬀ ﬁ ﬂ ﬃ ﬄ ﬅ ﬆ);
//! 3. ASCII letters are lower-cased; every other character stays as it is.
//!
//! Any other non-ASCII character keeps a non-ASCII code point under every
//! fold and canonical decomposition (a test walks every `char` against the
//! standard library's case tables), so it can never make a name equal to an
//! ASCII control name. Compatibility forms (fullwidth `Ｇ`) are not folded
//! by these file systems and stay distinct. A name is refused only when its
//! key is a control name; otherwise it is accepted exactly as written, so
//! `straße.txt` and Turkish names are unaffected.

use crate::reason::{ReasonCode, Refusal};
use std::fmt;

/// Longest accepted path, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted component, in bytes.
pub const MAX_COMPONENT_BYTES: usize = 255;
/// Most components in one path.
pub const MAX_COMPONENTS: usize = 64;

/// Control directories that are refused anywhere in a path, written in
/// lower case and compared by [`fold_key`] (see the module documentation).
pub const CONTROL_DIRS: &[&str] = &[".git", ".airlock"];

/// The non-ASCII characters whose case mappings or folds (simple, full or
/// Turkic) are made only of ASCII letters, with that fold.
pub const ASCII_FOLDS: &[(char, &str)] = &[
    ('\u{00DF}', "ss"),  // ß LATIN SMALL LETTER SHARP S (full fold)
    ('\u{0130}', "i"),   // İ CAPITAL I WITH DOT ABOVE (simple lower case, Turkic fold)
    ('\u{0131}', "i"),   // ı SMALL DOTLESS I (upper case I)
    ('\u{017F}', "s"),   // ſ SMALL LONG S (fold)
    ('\u{1E9E}', "ss"),  // ẞ CAPITAL SHARP S (full fold)
    ('\u{212A}', "k"),   // K KELVIN SIGN (fold; also its canonical decomposition)
    ('\u{FB00}', "ff"),  // ﬀ
    ('\u{FB01}', "fi"),  // ﬁ
    ('\u{FB02}', "fl"),  // ﬂ
    ('\u{FB03}', "ffi"), // ﬃ
    ('\u{FB04}', "ffl"), // ﬄ
    ('\u{FB05}', "st"),  // ﬅ
    ('\u{FB06}', "st"),  // ﬆ
];

/// Code points HFS+ ignores when it compares names.
fn is_fold_ignorable(c: char) -> bool {
    matches!(c, '\u{200C}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{206A}'..='\u{206F}' | '\u{FEFF}')
}

/// The key under which a case-insensitive file system could compare `name`
/// with an ASCII name: ignorable code points dropped, the characters of
/// [`ASCII_FOLDS`] folded, ASCII lower-cased, everything else kept. Two
/// names one of which is ASCII can open the same entry only if their keys
/// are equal (the module documentation says why).
pub fn fold_key(name: &str) -> String {
    if name.is_ascii() {
        // Every fold and every ignorable code point is outside ASCII, so an
        // ASCII name's key is the name lower-cased (one pass, no lookups: a
        // snapshot's reader folds every path it reads).
        return name.to_ascii_lowercase();
    }
    fold_chars(name)
}

/// Whether `name`'s [`fold_key`] is `key` (an ASCII, lower-case key),
/// without making the key of an ASCII name: checks that run on every path
/// of a snapshot allocate nothing for the usual name.
pub fn folds_to(name: &str, key: &str) -> bool {
    if name.is_ascii() {
        return name.eq_ignore_ascii_case(key);
    }
    fold_chars(name) == key
}

/// [`fold_key`] character by character.
fn fold_chars(name: &str) -> String {
    let mut key = String::with_capacity(name.len());
    for c in name.chars().filter(|c| !is_fold_ignorable(*c)) {
        match ASCII_FOLDS.iter().find(|(from, _)| *from == c) {
            Some((_, to)) => key.push_str(to),
            None => key.push(c.to_ascii_lowercase()),
        }
    }
    key
}

/// Whether `name` is, or folds to, a control directory name ([`CONTROL_DIRS`]).
pub fn is_control_name(name: &str) -> bool {
    if name.is_ascii() {
        // An ASCII name's key is the name lower-cased: no allocation.
        return CONTROL_DIRS.iter().any(|d| name.eq_ignore_ascii_case(d));
    }
    let key = fold_key(name);
    CONTROL_DIRS.contains(&key.as_str())
}

const RESERVED_CHARS: &[char] = &['<', '>', '"', '|', '?', '*'];

const DEVICE_NAMES: &[&str] = &[
    "CON",
    "PRN",
    "AUX",
    "NUL",
    "CONIN$",
    "CONOUT$",
    "COM1",
    "COM2",
    "COM3",
    "COM4",
    "COM5",
    "COM6",
    "COM7",
    "COM8",
    "COM9",
    "COM\u{b9}",
    "COM\u{b2}",
    "COM\u{b3}",
    "LPT1",
    "LPT2",
    "LPT3",
    "LPT4",
    "LPT5",
    "LPT6",
    "LPT7",
    "LPT8",
    "LPT9",
    "LPT\u{b9}",
    "LPT\u{b2}",
    "LPT\u{b3}",
];

/// A relative path that passed the grammar: one or more components joined by
/// single `/`, none of them refused.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct RelPath(String);

impl RelPath {
    /// Parses `path` under the full grammar.
    pub fn parse(path: &str) -> Result<RelPath, Refusal> {
        check_path(path)?;
        Ok(RelPath(path.to_owned()))
    }

    /// Parses raw bytes: they must be UTF-8 and then pass [`RelPath::parse`].
    pub fn parse_bytes(path: &[u8]) -> Result<RelPath, Refusal> {
        if path.is_empty() {
            return Err(refuse(ReasonCode::PathEmpty, "the path is empty"));
        }
        let s =
            std::str::from_utf8(path).map_err(|_| refuse(ReasonCode::PathEncoding, "the path is not valid UTF-8"))?;
        RelPath::parse(s)
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its components, in order.
    pub fn components(&self) -> impl DoubleEndedIterator<Item = &str> + Clone {
        self.0.split('/')
    }

    /// Number of components (at least one).
    pub fn depth(&self) -> usize {
        self.components().count()
    }

    /// The last component.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// Everything before the last component, or `None` for a one-component path.
    pub fn parent(&self) -> Option<RelPath> {
        self.0.rfind('/').map(|i| RelPath(self.0[..i].to_owned()))
    }

    /// The rest of `self` below `prefix`, compared component by component
    /// (never by string prefix): `data/x` is below `data`, `data-evil/x` is not.
    /// `Some(None)` when `self == prefix`.
    pub fn strip_prefix(&self, prefix: &RelPath) -> Option<Option<RelPath>> {
        let mut mine = self.components();
        for want in prefix.components() {
            if mine.next() != Some(want) {
                return None;
            }
        }
        let rest: Vec<&str> = mine.collect();
        if rest.is_empty() {
            Some(None)
        } else {
            Some(Some(RelPath(rest.join("/"))))
        }
    }

    /// `self` followed by `child`. Both already pass the grammar, whose
    /// every other check is by character or by component, so only the
    /// length and the depth of the whole are checked again.
    pub fn join(&self, child: &RelPath) -> Result<RelPath, Refusal> {
        let mut path = String::with_capacity(self.0.len() + 1 + child.0.len());
        path.push_str(&self.0);
        path.push('/');
        path.push_str(&child.0);
        check_whole(&path)?;
        Ok(RelPath(path))
    }
}

impl fmt::Debug for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn refuse(code: ReasonCode, message: impl Into<String>) -> Refusal {
    Refusal::new(code, message)
}

fn is_forbidden_control(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The whole grammar. Checks run in a fixed order so a path always gets the
/// same code.
fn check_path(path: &str) -> Result<(), Refusal> {
    if path.is_empty() {
        return Err(refuse(ReasonCode::PathEmpty, "the path is empty"));
    }
    if let Some(c) = path.chars().find(|c| is_forbidden_control(*c)) {
        return Err(refuse(
            ReasonCode::PathControlChar,
            format!("the path contains the control character U+{:04X}", c as u32),
        ));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(too_long(path));
    }
    if path.contains('\\') {
        return Err(refuse(ReasonCode::PathBackslash, "the path contains a backslash"));
    }
    if path.starts_with('/') {
        return Err(refuse(
            ReasonCode::PathAbsolute,
            "the path is rooted; paths are relative to the working directory",
        ));
    }
    check_depth(path)?;
    for component in path.split('/') {
        check_component(component)?;
    }
    Ok(())
}

fn too_long(path: &str) -> Refusal {
    refuse(ReasonCode::PathTooLong, format!("the path is {} bytes, more than {MAX_PATH_BYTES}", path.len()))
}

fn check_depth(path: &str) -> Result<(), Refusal> {
    let count = path.split('/').count();
    if count > MAX_COMPONENTS {
        return Err(refuse(
            ReasonCode::PathTooDeep,
            format!("the path has {count} components, more than {MAX_COMPONENTS}"),
        ));
    }
    Ok(())
}

/// The checks of the whole path that joining two valid paths can fail, in
/// [`check_path`]'s order.
fn check_whole(path: &str) -> Result<(), Refusal> {
    if path.len() > MAX_PATH_BYTES {
        return Err(too_long(path));
    }
    check_depth(path)
}

fn check_component(c: &str) -> Result<(), Refusal> {
    if c.is_empty() {
        return Err(refuse(ReasonCode::PathEmptyComponent, "the path has an empty component"));
    }
    if c == "." {
        return Err(refuse(ReasonCode::PathDotComponent, "the path has a `.` component"));
    }
    if c == ".." {
        return Err(refuse(ReasonCode::PathTraversal, "the path has a `..` component"));
    }
    if c.len() > MAX_COMPONENT_BYTES {
        return Err(refuse(
            ReasonCode::PathComponentTooLong,
            format!("a component is {} bytes, more than {MAX_COMPONENT_BYTES}", c.len()),
        ));
    }
    if c.contains(':') {
        return Err(refuse(
            ReasonCode::PathMountDelimiter,
            "the path contains `:` (a mount delimiter or drive prefix)",
        ));
    }
    if let Some(r) = c.chars().find(|ch| RESERVED_CHARS.contains(ch)) {
        return Err(refuse(ReasonCode::PathReservedChar, format!("the path contains the reserved character `{r}`")));
    }
    if c.ends_with('.') || c.ends_with(' ') {
        return Err(refuse(
            ReasonCode::PathTrailingDotOrSpace,
            format!("the component {c:?} ends in a dot or a space"),
        ));
    }
    if is_device_name(c) {
        return Err(refuse(ReasonCode::PathDeviceName, format!("the component {c:?} is a Windows device name")));
    }
    if is_control_name(c) {
        return Err(refuse(ReasonCode::PathControlDir, format!("the component {c:?} is a control directory")));
    }
    Ok(())
}

/// `CON`, `nul.txt`, `Com1 .log`, `LPT1.tar.gz`, `CONıN$`: the stem before
/// the first dot, with trailing spaces removed, compared by [`fold_key`].
fn is_device_name(component: &str) -> bool {
    let stem = component.split('.').next().unwrap_or(component).trim_end_matches(' ');
    if stem.is_ascii() {
        // An ASCII stem's key is the stem lower-cased: no allocation.
        return DEVICE_NAMES.iter().any(|d| stem.eq_ignore_ascii_case(d));
    }
    let key = fold_key(stem);
    DEVICE_NAMES.iter().any(|d| key.eq_ignore_ascii_case(d))
}

/// One `[filesystem]` entry: a literal path or exactly one whole argument
/// reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathEntry {
    /// A literal relative path such as `data/input.csv`.
    Literal(RelPath),
    /// `{name}`: the value of argument `name`, which must itself pass the grammar.
    Arg(String),
}

impl PathEntry {
    /// Parses an entry. A `{` or `}` anywhere but as the whole entry is a
    /// concatenated template and refused (`manifest.path_template`).
    pub fn parse(entry: &str) -> Result<PathEntry, Refusal> {
        if let Some(inner) = entry.strip_prefix('{').and_then(|e| e.strip_suffix('}')) {
            if is_arg_name(inner) {
                return Ok(PathEntry::Arg(inner.to_owned()));
            }
        }
        if entry.contains('{') || entry.contains('}') {
            return Err(refuse(
                ReasonCode::ManifestPathTemplate,
                format!("{entry:?} is not a literal path or exactly one whole {{argument}} reference"),
            ));
        }
        RelPath::parse(entry).map(PathEntry::Literal)
    }
}

/// Argument names: `[A-Za-z][A-Za-z0-9_]{0,63}`; names starting with `_` are
/// reserved for values airlock injects.
pub fn is_arg_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(p: &str) -> Option<ReasonCode> {
        RelPath::parse(p).err().map(|r| r.code)
    }

    #[test]
    fn table() {
        use ReasonCode::*;
        let long_comp = "a".repeat(256);
        let long_path = vec!["abcdefg"; 600].join("/");
        let deep = vec!["a"; 65].join("/");
        let cases: &[(&str, Option<ReasonCode>)] = &[
            ("data/input.csv", None),
            ("a", None),
            ("résumé/naïve file.txt", None),
            ("", Some(PathEmpty)),
            ("../p-evil/x", Some(PathTraversal)),
            ("data/../x", Some(PathTraversal)),
            ("a//b", Some(PathEmptyComponent)),
            ("a/", Some(PathEmptyComponent)),
            ("./x", Some(PathDotComponent)),
            ("/etc/passwd", Some(PathAbsolute)),
            ("data\\..\\x", Some(PathBackslash)),
            ("C:x", Some(PathMountDelimiter)),
            ("data:rw", Some(PathMountDelimiter)),
            ("a\0b", Some(PathControlChar)),
            ("a\rb", Some(PathControlChar)),
            ("a\nb", Some(PathControlChar)),
            ("a\u{7f}b", Some(PathControlChar)),
            ("a\u{202e}b", Some(PathControlChar)),
            (&long_comp, Some(PathComponentTooLong)),
            (&long_path, Some(PathTooLong)),
            (&deep, Some(PathTooDeep)),
            ("CON", Some(PathDeviceName)),
            ("out/nul.txt", Some(PathDeviceName)),
            ("COM1", Some(PathDeviceName)),
            ("LPT1.log", Some(PathDeviceName)),
            ("con .txt", Some(PathDeviceName)),
            ("lpt\u{b9}", Some(PathDeviceName)),
            ("console", None),
            ("com10", None),
            ("x.", Some(PathTrailingDotOrSpace)),
            ("x ", Some(PathTrailingDotOrSpace)),
            (".git/config", Some(PathControlDir)),
            ("a/.GiT/b", Some(PathControlDir)),
            ("a/.Airlock", Some(PathControlDir)),
            (".gitignore", None),
            ("a*b", Some(PathReservedChar)),
            ("a?b", Some(PathReservedChar)),
        ];
        for (p, want) in cases {
            assert_eq!(code(p), *want, "{p:?}");
        }
    }

    #[test]
    fn unicode_spellings_of_control_names_are_refused() {
        use ReasonCode::*;
        let cases: &[(&str, Option<ReasonCode>)] = &[
            (".airloc\u{212A}", Some(PathControlDir)), // KELVIN SIGN
            (".AIRLOC\u{212A}/x", Some(PathControlDir)),
            ("a/.airlock\u{200C}", Some(PathControlDir)), // ZERO WIDTH NON-JOINER (HFS+)
            ("\u{FEFF}.git", Some(PathControlDir)),
            (".g\u{0131}t/config", Some(PathControlDir)), // dotless ı
            (".G\u{0130}T", Some(PathControlDir)),        // dotted İ
            (".a\u{0130}rlock", Some(PathControlDir)),
            (".airlock", Some(PathControlDir)),
            ("CON\u{0131}N$", Some(PathDeviceName)),
            ("\u{017F}ecret.txt", None), // ſ folds to s: not a control name
            (".g\u{0131}tignore", None),
            ("stra\u{00DF}e.txt", None),
            ("\u{0131}l\u{0131}k.txt", None),
            (".\u{FF47}it", None), // fullwidth g: not folded by file systems
        ];
        for (p, want) in cases {
            assert_eq!(code(p), *want, "{p:?}");
        }
        assert_eq!(fold_key("\u{017F}\u{FB06}\u{212A}\u{1E9E}"), "sstkss");
    }

    /// Every non-ASCII character whose case mapping (as the standard
    /// library's Unicode tables give it) is only ASCII is in ASCII_FOLDS,
    /// and every other one keeps a non-ASCII code point in its key.
    #[test]
    fn ascii_folds_is_complete() {
        let all_ascii = |s: &str| s.is_ascii();
        for c in (0x80u32..=0x10FFFF).filter_map(char::from_u32) {
            let lower: String = c.to_lowercase().collect();
            let upper: String = c.to_uppercase().collect();
            let maps_to_ascii = all_ascii(&lower) || all_ascii(&upper) || all_ascii(&upper.to_lowercase());
            let folded = ASCII_FOLDS.iter().any(|(f, _)| *f == c);
            if maps_to_ascii {
                assert!(folded, "U+{:04X} case-maps to ASCII but is not in ASCII_FOLDS", c as u32);
            }
            let key = fold_key(&c.to_string());
            assert!(folded || is_fold_ignorable(c) || !all_ascii(&key), "U+{:04X} has an ASCII key {key:?}", c as u32);
        }
        for (c, to) in ASCII_FOLDS {
            assert!(!c.is_ascii() && all_ascii(to) && to.chars().all(|t| t.is_ascii_lowercase()), "{c}");
        }
    }

    /// The ASCII shortcut gives what the character-by-character fold gives.
    #[test]
    fn an_ascii_name_folds_as_its_characters_do() {
        let every: String = (0u8..0x80).map(char::from).collect();
        assert_eq!(fold_key(&every), fold_chars(&every));
        assert_eq!(fold_key("Src/Main.RS"), "src/main.rs");
    }

    #[test]
    fn folds_to_agrees_with_the_key() {
        let names = [
            ".git",
            ".GIT",
            ".GiT",
            ".gi",
            ".gitx",
            "git",
            ".g\u{200C}it",
            ".\u{0130}git",
            ".GI\u{FEFF}T",
            ".G\u{0130}T",
            ".g\u{0131}t",
            "",
        ];
        for name in names {
            for key in [".git", "", "git"] {
                assert_eq!(folds_to(name, key), fold_key(name) == key, "{name:?} {key:?}");
            }
        }
        assert!(folds_to(".g\u{200C}IT", ".git"));
    }

    #[test]
    fn edges_are_inclusive() {
        assert_eq!(code(&"a".repeat(255)), None);
        assert_eq!(code(&vec!["a"; 64].join("/")), None);
        let exact = format!("{}/{}", "b".repeat(255), vec!["c".repeat(255); 15].join("/"));
        assert_eq!(exact.len(), 4095);
        assert_eq!(code(&exact), None);
    }

    #[test]
    fn strip_prefix_is_by_component() {
        let p = RelPath::parse("data/x").unwrap();
        let q = RelPath::parse("data-evil/x").unwrap();
        let data = RelPath::parse("data").unwrap();
        assert_eq!(p.strip_prefix(&data), Some(Some(RelPath::parse("x").unwrap())));
        assert_eq!(q.strip_prefix(&data), None);
        assert_eq!(data.strip_prefix(&data), Some(None));
    }

    #[test]
    fn entries() {
        assert_eq!(PathEntry::parse("{input}").unwrap(), PathEntry::Arg("input".into()));
        assert_eq!(code_entry("data/{input}"), Some(ReasonCode::ManifestPathTemplate));
        assert_eq!(code_entry("{input}.csv"), Some(ReasonCode::ManifestPathTemplate));
        assert_eq!(code_entry("{a}{b}"), Some(ReasonCode::ManifestPathTemplate));
        assert_eq!(code_entry("{_output}"), Some(ReasonCode::ManifestPathTemplate));
        assert!(matches!(PathEntry::parse("data/in.csv").unwrap(), PathEntry::Literal(_)));
    }

    fn code_entry(e: &str) -> Option<ReasonCode> {
        PathEntry::parse(e).err().map(|r| r.code)
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn safe_component() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,20}[a-zA-Z0-9_]"
            .prop_filter("not a device name or control dir", |c| check_component(c).is_ok())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Anything accepted holds every invariant the resolvers rely on.
        #[test]
        fn accepted_paths_are_safe(s in "\\PC{0,80}|[a-zA-Z./\\\\:]{0,30}") {
            if let Ok(p) = RelPath::parse(&s) {
                prop_assert!(!p.as_str().starts_with('/'));
                prop_assert!(p.as_str().len() <= MAX_PATH_BYTES);
                prop_assert!(p.depth() <= MAX_COMPONENTS);
                for c in p.components() {
                    prop_assert!(!c.is_empty() && c != "." && c != "..");
                    prop_assert!(!c.contains('\\') && !c.contains(':'));
                    prop_assert!(c.len() <= MAX_COMPONENT_BYTES);
                }
            }
        }

        /// Safe components joined by `/` are always accepted, unchanged.
        #[test]
        fn safe_paths_are_accepted(parts in proptest::collection::vec(safe_component(), 1..10)) {
            let s = parts.join("/");
            prop_assert_eq!(RelPath::parse(&s).map(|p| p.as_str().to_owned()), Ok(s));
        }

        /// Splicing any forbidden piece into a safe path is always refused.
        #[test]
        fn forbidden_pieces_are_refused(
            parts in proptest::collection::vec(safe_component(), 1..6),
            at in 0usize..6,
            bad in prop::sample::select(vec!["..", ".", "", ".git", ".AIRLOCK", ".airloc\u{212A}", ".g\u{0131}t", "CON", "nul.txt", "a\\b", "c:d", "e\0f", "g\rh", "i\nj", "k ", "l.", "m*"]),
        ) {
            let mut parts = parts;
            let at = at.min(parts.len());
            parts.insert(at, bad.to_owned());
            let s = parts.join("/");
            prop_assert!(RelPath::parse(&s).is_err(), "{:?} was accepted", s);
        }

        /// Joining two accepted paths answers as parsing the joined text
        /// does: the same path, or the same refusal (length, depth).
        #[test]
        fn join_is_parse_of_the_joined_text(
            a in proptest::collection::vec("[a-z]{1,200}", 1..40),
            b in proptest::collection::vec("[a-z]{1,200}", 1..40),
        ) {
            let (a, b) = (a.join("/"), b.join("/"));
            if let (Ok(pa), Ok(pb)) = (RelPath::parse(&a), RelPath::parse(&b)) {
                let joined = pa.join(&pb).map_err(|r| r.code);
                prop_assert_eq!(joined, RelPath::parse(&format!("{a}/{b}")).map_err(|r| r.code));
            }
        }

        /// Device and control names are found by the folded key, ASCII or not.
        #[test]
        fn device_and_control_names_match_their_folded_key(c in "[a-zA-Z0-9$. \u{131}\u{212A}\u{17F}\u{200C}]{1,9}") {
            let stem = fold_key(c.split('.').next().unwrap_or(&c).trim_end_matches(' '));
            prop_assert_eq!(is_device_name(&c), DEVICE_NAMES.iter().any(|d| d.to_ascii_lowercase() == stem));
            prop_assert_eq!(is_control_name(&c), CONTROL_DIRS.contains(&fold_key(&c).as_str()));
        }

        /// A leading `/` is always refused.
        #[test]
        fn rooted_is_refused(parts in proptest::collection::vec(safe_component(), 1..6)) {
            let s = format!("/{}", parts.join("/"));
            prop_assert!(RelPath::parse(&s).is_err());
        }
    }
}
