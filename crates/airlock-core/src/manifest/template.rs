//! Command words: splitting a `template` with shell-like quoting, and finding
//! the `{placeholders}` in one word.
//!
//! Splitting happens once, at parse, *before* any value exists, so a value is
//! always exactly one word (or part of one) and is never split, unquoted or
//! expanded. The splitter knows single quotes, double quotes and backslash
//! escapes and nothing else: `$`, `` ` ``, `|`, `;`, `>`, `*`, `~` and `#` are
//! ordinary characters.

/// The placeholder replaced by the path of the `[filesystem]` create entry.
pub const OUTPUT_FILE_PLACEHOLDER: &str = "_output_file";

/// One piece of a word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Literal text from the manifest.
    Text(String),
    /// `{name}`.
    Placeholder(String),
}

/// One argv word of the command, as written in the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    pub(crate) segments: Vec<Segment>,
}

impl Word {
    /// The placeholder names in this word, in order.
    pub(crate) fn placeholders(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Placeholder(p) => Some(p.as_str()),
            Segment::Text(_) => None,
        })
    }

    /// Whether the word holds any placeholder.
    pub(crate) fn has_placeholder(&self) -> bool {
        self.placeholders().next().is_some()
    }

    /// Whether the word is made of placeholders only (no literal text).
    pub(crate) fn only_placeholders(&self) -> bool {
        self.segments.iter().all(|s| matches!(s, Segment::Placeholder(_)))
    }
}

/// Splits `template` into words: blanks (space, tab, CR, LF) separate words
/// outside quotes; `'…'` is literal; inside `"…"` a backslash escapes only
/// `"`, `\`, `$`, `` ` `` and a newline; outside quotes a backslash escapes
/// any character and a backslash-newline joins lines. `''` is an empty word.
pub(crate) fn split_template(template: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' | '\r' => {
                if in_word {
                    words.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => current.push(ch),
                        None => return Err("a single quote is not closed".to_owned()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(e @ ('"' | '\\' | '$' | '`')) => current.push(e),
                            Some('\n') => {}
                            Some(other) => {
                                current.push('\\');
                                current.push(other);
                            }
                            None => return Err("a double quote is not closed".to_owned()),
                        },
                        Some(ch) => current.push(ch),
                        None => return Err("a double quote is not closed".to_owned()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(ch) => {
                    in_word = true;
                    current.push(ch);
                }
                None => return Err("the template ends with a lone backslash".to_owned()),
            },
            other => {
                in_word = true;
                current.push(other);
            }
        }
    }
    if in_word {
        words.push(current);
    }
    Ok(words)
}

/// Finds the placeholders in one word. `{{` and `}}` are literal braces; a
/// `{` must be closed by `}` with a non-empty name between that holds no
/// blank and no brace.
pub(crate) fn parse_word(word: &str) -> Result<Word, String> {
    let mut segments = Vec::new();
    let mut text = String::new();
    let mut chars = word.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some('{') | None => {
                            return Err(format!(
                                "the word {word:?} has a `{{` that is not closed; write `{{{{` for a literal brace"
                            ))
                        }
                        Some(ch) => name.push(ch),
                    }
                }
                if name.is_empty() || name.chars().any(char::is_whitespace) {
                    return Err(format!("the word {word:?} has an invalid placeholder {{{name}}}"));
                }
                if !text.is_empty() {
                    segments.push(Segment::Text(std::mem::take(&mut text)));
                }
                segments.push(Segment::Placeholder(name));
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '}' => return Err(format!("the word {word:?} has a lone `}}`; write `}}}}` for a literal brace")),
            other => text.push(other),
        }
    }
    if !text.is_empty() || segments.is_empty() {
        segments.push(Segment::Text(text));
    }
    Ok(Word { segments })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> Vec<String> {
        split_template(s).unwrap()
    }

    #[test]
    fn blanks_separate_words() {
        assert_eq!(split("  wc  -l\t{input}\n"), ["wc", "-l", "{input}"]);
        assert!(split("").is_empty());
        assert!(split(" \t ").is_empty());
    }

    #[test]
    fn quotes_group_and_are_removed() {
        assert_eq!(split(r#"grep -e 'a b' "c d" e'f'"g""#), ["grep", "-e", "a b", "c d", "efg"]);
        assert_eq!(split("a '' \"\" b"), ["a", "", "", "b"]);
        assert_eq!(split(r#"x "it's" 'say "hi"'"#), ["x", "it's", r#"say "hi""#]);
    }

    #[test]
    fn backslashes() {
        assert_eq!(split(r"a\ b c\\d \'"), ["a b", r"c\d", "'"]);
        assert_eq!(
            split(r#""q\"uote" "back\\slash" "keep\n" 'raw\"'"#),
            [r#"q"uote"#, r"back\slash", r"keep\n", r#"raw\""#]
        );
        assert_eq!(split("one \\\ntwo"), ["one", "two"]);
        assert_eq!(split("jo\\\nined"), ["joined"]);
    }

    #[test]
    fn metacharacters_are_never_interpreted() {
        assert_eq!(
            split("echo a|b ; $HOME `id` > out & *.txt ~ #c"),
            ["echo", "a|b", ";", "$HOME", "`id`", ">", "out", "&", "*.txt", "~", "#c"]
        );
        assert_eq!(split(r#""$(id)" '$x'"#), ["$(id)", "$x"]);
    }

    #[test]
    fn unterminated_is_an_error() {
        assert!(split_template("a 'b").is_err());
        assert!(split_template("a \"b").is_err());
        assert!(split_template("a \"b\\").is_err());
        assert!(split_template("a \\").is_err());
    }

    #[test]
    fn placeholders_in_words() {
        let w = parse_word("--out={out}.json").unwrap();
        assert_eq!(
            w.segments,
            [Segment::Text("--out=".into()), Segment::Placeholder("out".into()), Segment::Text(".json".into())]
        );
        assert!(w.has_placeholder() && !w.only_placeholders());
        let w = parse_word("{a}{b}").unwrap();
        assert!(w.only_placeholders());
        assert_eq!(w.placeholders().collect::<Vec<_>>(), ["a", "b"]);
        let w = parse_word("{_secret:token}").unwrap();
        assert_eq!(w.placeholders().collect::<Vec<_>>(), ["_secret:token"]);
    }

    #[test]
    fn doubled_braces_are_literal() {
        let w = parse_word("{{x}}").unwrap();
        assert_eq!(w.segments, [Segment::Text("{x}".into())]);
        assert!(!w.has_placeholder());
        let w = parse_word("{{{x}}}").unwrap();
        assert_eq!(
            w.segments,
            [Segment::Text("{".into()), Segment::Placeholder("x".into()), Segment::Text("}".into())]
        );
    }

    #[test]
    fn empty_word_is_one_empty_text() {
        assert_eq!(parse_word("").unwrap().segments, [Segment::Text(String::new())]);
    }

    #[test]
    fn bad_braces() {
        for w in ["{", "a{b", "{a{b}}", "}", "a}b", "{}", "{a b}"] {
            assert!(parse_word(w).is_err(), "{w:?}");
        }
    }
}
