//! The tools an MCP client sees: every manifest in the tools directory
//! that airlock can run, by its `[tool] name`, with its argument schema and
//! annotations derived from what the manifest grants.
//!
//! The catalog is read from `tools_dir` for every listing and call: every manifest
//! that loads, passes `check_executable` and whose programs the worker image
//! holds (`Runtime::check_runnable`), by `[tool] name`. A name two manifests
//! answer to (file name or `[tool] name`) is served by neither. A call names
//! a tool by `[tool] name` or by manifest file name, as `airlock run` does;
//! it is looked up in the catalog and run from the catalog's manifest path,
//! so a client can never name a path. `readOnlyHint` and `idempotentHint` hold when the
//! manifest has no `create` entry; `destructiveHint` is always false
//! (outputs are only ever new files) and `openWorldHint` false (no network
//! in the sandbox). Every tool declares the envelope as its `outputSchema`.
//!
//! A long-lived server keeps the catalog it read ([`CatalogCache`]) and
//! reuses it while the tools directory's stamp (its times, and every
//! manifest's identity, size and times: [`ListingStamp`]) is what it was
//! when the catalog was read — one directory read and a `stat` per
//! manifest instead of parsing every manifest and building its schemas for
//! each request. A catalog is reused only when its stamp was settled (no
//! time in it younger than [`airlock_hostfs::SETTLED_AFTER`], so no change
//! can hide inside a clock tick) and no manifest was skipped for a program
//! the worker image lacks (installing one changes no time in the tools
//! directory). The call itself reads its manifest again, with every check,
//! and the called tool's programs are checked again at the call.

use crate::schemas;
use airlock_core::manifest::Manifest;
use airlock_core::Config;
use airlock_hostfs::ListingStamp;
use airlock_runtime::names::ToolIndex;
use airlock_runtime::{catalog, Runtime};
use rmcp::model::{Tool, ToolAnnotations};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// One servable tool: what the client sees and where its manifest is.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The MCP tool (name, description, input schema, annotations).
    pub tool: Tool,
    /// The manifest file the call is run from.
    pub manifest: PathBuf,
    /// The manifest's file name without `.clad.toml` (empty for a bundled tool).
    pub stem: String,
    /// The manifest as the catalog read it (its programs are checked
    /// again when the tool is called).
    pub parsed: Arc<Manifest>,
}

/// The servable tools, in manifest file order; names are unique (the
/// manifests of a name claimed twice are skipped and reported).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// The tools.
    pub entries: Vec<Entry>,
    /// Manifests not served, with why (for the operator's log).
    pub skipped: Vec<(PathBuf, String)>,
    /// Names two or more manifests answer to: no call by them is served.
    pub ambiguous: Vec<String>,
    /// `[session]` tools: served through the session tools, never called directly.
    pub sessions: Vec<Entry>,
    /// A manifest was skipped because a program it runs is not in the
    /// worker image: the host can change that without changing the tools
    /// directory, so this catalog is read again for every request.
    pub not_runnable: bool,
}

impl Catalog {
    /// Reads the tools directory of `runtime` now.
    pub fn load(runtime: &Runtime) -> Catalog {
        let mut catalog = Catalog::default();
        let index = ToolIndex::read(runtime.authority(), &runtime.config().tools_dir);
        for path in catalog::list_manifests(runtime.authority(), &runtime.config().tools_dir) {
            let loaded = match runtime.load_tool(&path.display().to_string()) {
                Ok(t) => t,
                Err(r) => {
                    catalog.skipped.push((path, format!("{}: {}", r.code, r.message)));
                    continue;
                }
            };
            let m = &loaded.manifest;
            let usable =
                m.check_executable().and_then(|()| index.find(m.name())).and_then(|_| runtime.check_runnable(m));
            if let Err(r) = usable {
                match r.code {
                    airlock_core::ReasonCode::ManifestAmbiguous => catalog.ambiguous.push(m.name().to_owned()),
                    airlock_core::ReasonCode::ToolNotRunnable => catalog.not_runnable = true,
                    _ => {}
                }
                catalog.skipped.push((path, format!("{}: {}", r.code, r.message)));
                continue;
            }
            let file = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let stem = file.strip_suffix(airlock_runtime::names::MANIFEST_SUFFIX).unwrap_or(file).to_owned();
            if index.find(&stem).is_err() {
                catalog.ambiguous.push(stem.clone());
            }
            let entry =
                Entry { tool: describe(m, runtime.config()), manifest: path, stem, parsed: Arc::new(m.clone()) };
            if m.session_spec().is_some() {
                catalog.sessions.push(entry);
            } else {
                catalog.entries.push(entry);
            }
        }
        // The bundled source tools the tools directory does not shadow are
        // served by name (the runtime loads them from the binary).
        for m in airlock_runtime::bundled_missing_from(runtime.authority(), &runtime.config().tools_dir) {
            if catalog.find(m.name()).is_none() {
                catalog.entries.push(Entry {
                    tool: describe(&m, runtime.config()),
                    manifest: PathBuf::from(m.name()),
                    stem: String::new(),
                    parsed: Arc::new(m),
                });
            }
        }
        catalog
    }

    /// The entry serving `name` (its `[tool] name` or its manifest's file
    /// name), if exactly one does. Only entries in the catalog are ever run:
    /// a client cannot name a manifest path.
    pub fn find(&self, name: &str) -> Option<&Entry> {
        self.find_in(&self.entries, name)
    }

    fn find_in<'a>(&self, entries: &'a [Entry], name: &str) -> Option<&'a Entry> {
        if self.ambiguous.iter().any(|a| a == name) {
            return None;
        }
        let mut serving = entries.iter().filter(|e| e.tool.name == name || e.stem == name);
        let first = serving.next()?;
        serving.next().is_none().then_some(first)
    }

    /// The `[session]` tool serving `name`, if exactly one does.
    pub fn find_session(&self, name: &str) -> Option<&Entry> {
        self.find_in(&self.sessions, name)
    }

    /// The MCP tools of the one-shot entries (`tools/list` adds the
    /// session tools when any `[session]` tool is served).
    pub fn tools(&self) -> Vec<Tool> {
        self.entries.iter().map(|e| e.tool.clone()).collect()
    }
}

/// The catalog a server read last, with the stamp of the tools directory it
/// was read from (see the module documentation).
#[derive(Debug, Default)]
pub struct CatalogCache {
    kept: Mutex<Option<(ListingStamp, Arc<Catalog>)>>,
}

impl CatalogCache {
    /// The catalog of `runtime`'s tools directory as it is now: the kept
    /// one if the directory's stamp still matches it, else read again (and
    /// kept, if it may be reused).
    pub fn current(&self, runtime: &Runtime) -> Arc<Catalog> {
        let tools_dir = &runtime.config().tools_dir;
        let stamp = runtime.authority().stamp_files_in(tools_dir, airlock_runtime::names::is_manifest_name);
        let mut kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let (Some(now), Some((then, catalog))) = (&stamp, kept.as_ref()) {
            if now == then {
                return Arc::clone(catalog);
            }
        }
        let catalog = Arc::new(Catalog::load(runtime));
        *kept = match stamp {
            Some(stamp) if stamp.settled(std::time::SystemTime::now()) && !catalog.not_runnable => {
                Some((stamp, Arc::clone(&catalog)))
            }
            _ => None,
        };
        catalog
    }
}

/// The MCP tool for a manifest under `config`: its input schema with the
/// path arguments described by the roots they may name, and the envelope as
/// its output schema ([`crate::schemas`]).
pub fn describe(m: &Manifest, config: &Config) -> Tool {
    let schema = match m.input_schema() {
        serde_json::Value::Object(o) => o,
        _ => serde_json::Map::new(),
    };
    let input = schemas::describe_paths(schema, m, config);
    Tool::new(m.name().to_owned(), m.tool.description.clone(), Arc::new(input))
        .with_raw_output_schema(Arc::new(schemas::output_schema(m)))
        .annotate(annotations(m))
}

/// Hints derived from the manifest. `readOnlyHint`: no `[filesystem] create`
/// entry. `destructiveHint`: always false (an output is only ever a new file;
/// an existing one is refused, never replaced). `idempotentHint`: true for a
/// read-only tool. `openWorldHint`: false (the worker has no network).
pub fn annotations(m: &Manifest) -> ToolAnnotations {
    let creates = m.filesystem.as_ref().is_some_and(|f| !f.create.is_empty());
    ToolAnnotations::with_title(m.name().to_owned())
        .read_only(!creates)
        .destructive(false)
        .idempotent(!creates)
        .open_world(false)
}
