//! `list_files`: names and metadata below a directory; no content is read.

use crate::outcome::into_map;
use crate::outcome::Tally;
use crate::query::Query;
use crate::tree::{Flow, Tree, Visit, Walk};
use airlock_core::Refusal;
use serde_json::{json, Map, Value};
use std::time::Instant;

pub(crate) fn list(
    tree: &Tree<'_>,
    q: &Query,
    tally: &mut Tally,
    deadline: Option<Instant>,
) -> Result<Map<String, Value>, Refusal> {
    let root = q.path.as_ref();
    let handle = tree.open_dir(root)?;
    let mut entries = Vec::new();
    let (mut files, mut dirs) = (0u64, 0u64);
    Walk::new(tree, deadline).walk(root, handle.as_ref(), 1, tally, &mut |visit, _| {
        match visit {
            Visit::Dir(p) => {
                dirs += 1;
                entries.push(json!({ "path": p.as_str(), "type": "dir" }));
            }
            Visit::File(p, e, _, _) => {
                files += 1;
                entries.push(json!({ "path": p.as_str(), "type": "file", "bytes": e.size }));
            }
        }
        Flow::Go
    })?;
    let body = json!({
        "operation": "list_files",
        "path": q.path_str(),
        "entries": entries,
        "files": files,
        "dirs": dirs,
    });
    Ok(into_map(body))
}
