//! `[tool.evidence]`: ToolClad's raw-output capture. With `capture = true`
//! the tool's bounded standard output and standard error are kept as
//! evidence blobs in airlock's state directory, each named by its SHA-256,
//! and referenced by hash from the journal (and so the attestation).
//!
//! `output_dir` is a template of ToolClad's executor variables only:
//! `{evidence_dir}` (or `{_evidence_dir}`) — airlock's `evidence/` under the
//! state directory — and `{scan_id}` (or `{_scan_id}`) — the invocation id.
//! It must begin with the evidence directory and may add plain relative
//! names after it; an argument placeholder, `..` or an absolute path is
//! refused at parse, so no call can choose a host path for its evidence.

use super::model::EvidenceMeta;
use super::template::{parse_word, Segment};
use crate::path::RelPath;
use crate::reason::{ReasonCode, Refusal};

/// The evidence directory under the state directory.
pub const EVIDENCE_DIR: &str = "evidence";

/// A checked `output_dir`: the text after the evidence directory, with
/// `{scan_id}` still to fill in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EvidenceDir {
    segments: Vec<Segment>,
}

fn invalid(why: String) -> Refusal {
    Refusal::new(
        ReasonCode::ManifestInvalid,
        format!(
            "[tool.evidence] output_dir {why}; write \"{{evidence_dir}}\" followed by plain names and {{scan_id}}, \
             e.g. \"{{evidence_dir}}/{{scan_id}}-nmap\""
        ),
    )
}

/// Checks `[tool.evidence]`; `None` when nothing is captured.
pub(crate) fn compile(meta: Option<&EvidenceMeta>) -> Result<Option<EvidenceDir>, Refusal> {
    let Some(meta) = meta.filter(|m| m.capture) else { return Ok(None) };
    if meta.hash != "sha256" {
        return Err(Refusal::new(
            ReasonCode::ManifestInvalid,
            format!("[tool.evidence] hash = {:?}: airlock names evidence by \"sha256\"", meta.hash),
        ));
    }
    let word = parse_word(&meta.output_dir).map_err(|why| invalid(why.to_string()))?;
    let mut segments = word.segments.into_iter();
    match segments.next() {
        Some(Segment::Placeholder(p)) if p == "evidence_dir" || p == "_evidence_dir" => {}
        _ => return Err(invalid(format!("{:?} does not begin with {{evidence_dir}}", meta.output_dir))),
    }
    let rest: Vec<Segment> = segments.collect();
    for s in &rest {
        if let Segment::Placeholder(p) = s {
            if p != "scan_id" && p != "_scan_id" {
                return Err(invalid(format!("uses {{{p}}}; only {{evidence_dir}} and {{scan_id}} are filled in")));
            }
        }
    }
    let dir = EvidenceDir { segments: rest };
    // A sample id checks the shape: relative, no `..`, no empty component.
    dir.resolve("sample-id")?;
    Ok(Some(dir))
}

impl EvidenceDir {
    /// The directory of one call's evidence, relative to the state
    /// directory: `evidence` and the path `output_dir` names under it.
    pub(crate) fn resolve(&self, invocation_id: &str) -> Result<RelPath, Refusal> {
        let mut text = EVIDENCE_DIR.to_owned();
        for s in &self.segments {
            match s {
                Segment::Text(t) => text.push_str(t),
                Segment::Placeholder(_) => text.push_str(invocation_id),
            }
        }
        let text = text.trim_end_matches('/');
        RelPath::parse(text).map_err(|r| invalid(format!("resolves to {text:?}: {}", r.message)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(dir: &str) -> EvidenceMeta {
        EvidenceMeta { output_dir: dir.to_owned(), capture: true, hash: "sha256".to_owned() }
    }

    #[test]
    fn output_dir_stays_under_the_state_evidence_dir() {
        let d = compile(Some(&meta("{evidence_dir}/{scan_id}-nmap"))).unwrap().unwrap();
        assert_eq!(d.resolve("abc").unwrap().as_str(), "evidence/abc-nmap");
        let d = compile(Some(&meta("{_evidence_dir}"))).unwrap().unwrap();
        assert_eq!(d.resolve("abc").unwrap().as_str(), "evidence");
        for bad in [
            "/tmp/x",
            "{target}",
            "{evidence_dir}/{target}",
            "{evidence_dir}/../x",
            "x/{evidence_dir}",
            "{evidence_dir}//x",
        ] {
            assert_eq!(compile(Some(&meta(bad))).unwrap_err().code, ReasonCode::ManifestInvalid, "{bad}");
        }
        let mut m = meta("{evidence_dir}");
        m.hash = "md5".into();
        assert!(compile(Some(&m)).is_err());
        m.capture = false;
        assert_eq!(compile(Some(&m)).unwrap(), None);
    }
}
