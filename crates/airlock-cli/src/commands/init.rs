//! `airlock init`: a working project in the current directory.

use airlock_core::{Envelope, ReasonCode, Refusal};
use airlock_hostfs::{HostAuthority, PrivateDir};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

const CONFIG: &str = r#"# airlock configuration. Relative paths are taken from this file's directory.
state_dir = ".airlock"          # journal, keys, staging, invocations (kept 0700)
tools_dir = "tools"

[sandbox]
tier = "native"
working_dir = "/workspace"      # where the worker sees declared paths

[filesystem]
# Ceilings HOST:VIRTUAL:MODE: the most a call may ever touch. Each call still
# gets only the files its manifest declares.
roots = ["./data:data:ro", "./results:results:rw"]
"#;

/// `.airlock/.gitignore`: nothing in the state directory (the journal's
/// signing key, snapshots, the MCP token) belongs in a repository.
const STATE_GITIGNORE: &str = "# airlock's state: the journal signing key, snapshots, tokens. Never commit it.\n*\n";

const TOOL: &str = include_str!("../../../../examples/tools/wordcount.clad.toml");
const EXAMPLE: &str = "airlock runs one tool call at a time with exactly the files it declares.\n";

/// Creates what is missing; never overwrites.
pub fn run(config: Option<&Path>) -> Result<Envelope, Refusal> {
    let config_path = config.map(Path::to_path_buf).unwrap_or_else(|| "airlock.toml".into());
    let base = config_path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    let fail = |what: &Path, e: std::io::Error| {
        Refusal::new(ReasonCode::Internal, format!("creating {}: {e}", what.display()))
    };
    let mut created = Vec::new();
    let mut kept = Vec::new();
    let mut put = |path: &Path, text: &str| -> Result<(), Refusal> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        // Control files are refused when others may write them, so their
        // modes do not depend on the umask (0644 files, 0755 directories).
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(path) {
            Ok(mut f) => {
                f.write_all(text.as_bytes()).map_err(|e| fail(path, e))?;
                created.push(path.display().to_string());
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => kept.push(path.display().to_string()),
            Err(e) => return Err(fail(path, e)),
        }
        Ok(())
    };
    for dir in ["data", "results", "tools"] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(base.join(dir))
            .map_err(|e| fail(&base.join(dir), e))?;
    }
    put(&config_path, CONFIG)?;
    put(&base.join("tools/wordcount.clad.toml"), TOOL)?;
    put(&base.join("data/example.txt"), EXAMPLE)?;
    let state = base.join(".airlock");
    let state_dir = PrivateDir::open_or_create(&HostAuthority::ambient(), &state)?;
    let key =
        airlock_journal::JournalKey::open_or_create(&state_dir).map_err(airlock_runtime::failure::journal_refusal)?;
    // The state dir holds the journal's signing key: git must never pick it up.
    let ignore = state.join(".gitignore");
    if state_dir.contains(".gitignore") {
        kept.push(ignore.display().to_string());
    } else {
        state_dir.write_new_file(".gitignore", STATE_GITIGNORE.as_bytes())?;
        created.push(ignore.display().to_string());
    }
    let content = serde_json::json!({
        "created": created,
        "kept": kept,
        "state_dir": state.display().to_string(),
        "journal_public_key": key.public_key().to_text(),
        "next": "airlock run wordcount data/example.txt results/example-count.json",
    });
    Ok(Envelope { content: Some(content), ..Envelope::ok() })
}
