//! The one output rule for status commands (`doctor`, `tools list`,
//! `approvals list`, `staging status`, `journal show`): text for people
//! when stdout is a terminal; the JSON envelope with `--json` or when
//! stdout is not a terminal (a pipe, a file, a program). Commands that
//! answer a call always print the envelope.

use super::Answer;
use airlock_core::Envelope;
use std::io::IsTerminal;

/// The answer of a status command: `envelope`, or `text(&envelope)` when
/// the rule above asks for text (rendered only then).
pub fn status(json: bool, envelope: Envelope, text: impl FnOnce(&Envelope) -> String) -> Answer {
    if json || !std::io::stdout().is_terminal() {
        return envelope.into();
    }
    let text = text(&envelope);
    Answer::Report { text, envelope: Box::new(envelope) }
}

/// `"yes"`, or `"no"` with why.
pub fn yes_no(ok: bool, detail: &str) -> String {
    if ok {
        "yes".to_owned()
    } else {
        format!("no: {detail}")
    }
}
