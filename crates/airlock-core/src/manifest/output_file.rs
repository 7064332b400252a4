//! `[output] stdout_file` (airlock extension): the tool's standard output
//! is the call's one output file.
//!
//! Ordinary command-line tools (`jq`, `sqlite3`, `pandoc`) print their
//! result; with `stdout_file = "{out}"` airlock writes that bounded stdout
//! into the output's private staging file and publishes it like any other
//! output, so no `sh -c '… > "$3"'` wrapper is needed. The value must be
//! the `[filesystem] create` entry exactly as written (`"{out}"` or the
//! literal path), so the file it names is the one the descriptor binds.
//! It cannot be combined with `[mcp]` (the server's stdout is the MCP
//! stream) or a custom parser (the parser would read a file the tool never
//! wrote); `[output] format` then says what the file holds.

use super::filesystem::CompiledFilesystem;
use super::model::OutputDef;
use crate::reason::{ReasonCode, Refusal};

/// Checks `[output] stdout_file`; `true` when the manifest has it.
pub(crate) fn compile(
    output: Option<&OutputDef>,
    filesystem: &CompiledFilesystem,
    has_mcp: bool,
) -> Result<bool, Refusal> {
    let Some(target) = output.and_then(|o| o.stdout_file.as_deref()) else {
        return Ok(false);
    };
    let invalid =
        |why: String| Refusal::new(ReasonCode::ManifestInvalid, format!("[output] stdout_file = {target:?}: {why}"));
    match filesystem.create_key() {
        None => return Err(invalid("there is no [filesystem] create entry for the output to go to".to_owned())),
        Some(create) if create != target => {
            return Err(invalid(format!("it must be the [filesystem] create entry as written, {create:?}")))
        }
        Some(_) => {}
    }
    if has_mcp {
        return Err(invalid("an [mcp] tool's standard output is its MCP stream".to_owned()));
    }
    if output.and_then(OutputDef::custom_parser).is_some() {
        return Err(invalid("a custom parser cannot be used: the output file is the tool's stdout itself".to_owned()));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::super::Manifest;
    use crate::reason::ReasonCode;

    fn manifest(output: &str, create: &str, extra: &str) -> Result<Manifest, crate::reason::Refusal> {
        let text = format!(
            r#"
            [tool]
            name = "jq"
            version = "1"
            description = "jq"
            [args.input]
            position = 1
            type = "path"
            [args.out]
            position = 2
            type = "path"
            [command]
            exec = ["jq", ".", "{{input}}"]
            [filesystem]
            read = ["{{input}}"]
            {create}
            [output]
            format = "json"
            {output}
            {extra}
            "#
        );
        Manifest::parse(&text, "t.clad.toml")
    }

    #[test]
    fn stdout_file_names_the_create_entry() {
        let m = manifest(r#"stdout_file = "{out}""#, r#"create = ["{out}"]"#, "").unwrap();
        assert!(m.stdout_is_output());
        m.check_executable().unwrap();
        assert!(!manifest("", r#"create = ["{out}"]"#, "").unwrap().stdout_is_output());
        let lit = manifest(r#"stdout_file = "results/a.json""#, r#"create = ["results/a.json"]"#, "").unwrap();
        assert!(lit.stdout_is_output());
        for (output, create) in [
            (r#"stdout_file = "{input}""#, r#"create = ["{out}"]"#),
            (r#"stdout_file = "{out}""#, ""),
            (r#"stdout_file = "results/a.json""#, r#"create = ["{out}"]"#),
            (
                r#"stdout_file = "{out}"
               parser = "/usr/bin/parse""#,
                r#"create = ["{out}"]"#,
            ),
        ] {
            let e = manifest(output, create, "").unwrap_err();
            assert_eq!(e.code, ReasonCode::ManifestInvalid, "{output} {create}: {}", e.message);
            assert!(e.message.contains("stdout_file"), "{}", e.message);
        }
    }
}
