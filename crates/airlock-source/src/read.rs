//! `read_file`: one bounded byte range of one regular file.

use crate::outcome::into_map;
use crate::outcome::{reason, Tally};
use crate::query::Query;
use crate::tree::{Place, Tree};
use airlock_core::{ReasonCode, Refusal, SourceRange};
use airlock_hostfs::RegularFile;
use serde_json::{json, Map, Value};

pub(crate) fn read(tree: &Tree<'_>, q: &Query, tally: &mut Tally) -> Result<Map<String, Value>, Refusal> {
    let path = q.path.as_ref().ok_or_else(|| Refusal::new(ReasonCode::ArgMissing, "read_file needs a path"))?;
    let here = |e: airlock_hostfs::Error| Refusal::new(e.code(), format!("{:?}: {}", path.as_str(), e.message()));
    let (dir, rest) = match tree.locate(Some(path))? {
        Place::Covered(dir, Some(rest)) => (dir, rest),
        Place::Covered(_, None) | Place::Virtual => {
            return Err(Refusal::new(ReasonCode::InputNotRegular, format!("{:?} is a directory", path.as_str())))
        }
    };
    let file = RegularFile::open_beneath(tree.resolver, &dir, &rest).map_err(here)?;
    let size = file.size();
    let got = file.read_range(q.offset, q.limit).map_err(here)?;
    let bytes = got.bytes.len() as u64;
    let sha256 = format!("sha256:{}", got.sha256_hex);
    tally.ranges.push(SourceRange { path: path.as_str().to_owned(), offset: q.offset, bytes, sha256: sha256.clone() });
    let end = q.offset + bytes;
    let eof = end >= size;
    let mut body = json!({
        "operation": "read_file",
        "path": path.as_str(),
        "offset": q.offset,
        "bytes": bytes,
        "size": size,
        "eof": eof,
        "content": tally.render(&got.bytes),
        "content_sha256": sha256,
    });
    if !eof {
        tally.cut(reason::READ_LIMIT);
        body["next_offset"] = json!(end);
    }
    Ok(into_map(body))
}
