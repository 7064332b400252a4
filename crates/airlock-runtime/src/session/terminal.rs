//! Reading a session's terminal: until the ready pattern shows on the last
//! line, within a deadline and a byte bound; escape sequences stripped
//! (never interpreted), or kept raw on request.

use crate::progress::Meter;
use airlock_core::manifest::SessionSpec;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::io::Read;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// What one read of the terminal gave.
#[derive(Debug, Default)]
pub(crate) struct Reading {
    /// The text kept (stripped unless raw), at most the byte bound.
    pub text: String,
    /// Bytes the program wrote in all.
    pub bytes: u64,
    /// More than the bound was written: `text` is cut.
    pub truncated: bool,
    /// The ready pattern showed.
    pub ready: bool,
    /// The program closed the terminal (it ended).
    pub ended: bool,
}

/// Removes terminal escape sequences (CSI, OSC, two-byte escapes) and
/// control characters but newline and tab; `\r` is dropped.
#[derive(Debug, Default)]
pub(crate) struct Stripper {
    state: State,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Text,
    Escape,
    Csi,
    Osc,
    OscEscape,
}

impl Stripper {
    /// The printable text of `bytes`, carrying an unfinished sequence over.
    pub(crate) fn strip(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len());
        for &b in bytes {
            self.state = match (self.state, b) {
                (State::Text, 0x1b) => State::Escape,
                (State::Text, b'\n' | b'\t') => {
                    out.push(b);
                    State::Text
                }
                (State::Text, b) if b < 0x20 || b == 0x7f => State::Text,
                (State::Text, b) => {
                    out.push(b);
                    State::Text
                }
                (State::Escape, b'[') => State::Csi,
                (State::Escape, b']') => State::Osc,
                (State::Escape, _) => State::Text,
                (State::Csi, 0x40..=0x7e) => State::Text,
                (State::Csi, _) => State::Csi,
                (State::Osc, 0x07) => State::Text,
                (State::Osc, 0x1b) => State::OscEscape,
                (State::Osc, _) => State::Osc,
                (State::OscEscape, _) => State::Text,
            };
        }
        out
    }
}

/// Reads `master` until the ready pattern shows on the last line, the
/// program ends, or `deadline` passes; keeps at most `max_bytes`. The wait
/// (and the bytes read) go to `meter`.
pub(crate) fn read_until_ready(
    master: &mut std::fs::File,
    spec: &SessionSpec,
    max_bytes: u64,
    deadline: Instant,
    raw: bool,
    meter: &mut Meter<'_>,
) -> Reading {
    let mut reading = Reading::default();
    let mut stripper = Stripper::default();
    let mut kept: Vec<u8> = Vec::new();
    // The last line so far, stripped: what the ready pattern is matched on.
    let mut last_line: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let fd = master.as_fd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        // Woken at least this often so that a long wait is reported.
        let timeout = Timespec::try_from(left.min(Duration::from_millis(250))).ok();
        match poll(&mut fds, timeout.as_ref()) {
            Ok(0) => {
                meter.add(0);
                continue;
            }
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => {
                reading.ended = true;
                break;
            }
        }
        let n = match master.read(&mut buf) {
            Ok(0) | Err(_) => {
                // EIO: every slave descriptor is closed, the program ended.
                reading.ended = true;
                break;
            }
            Ok(n) => n,
        };
        reading.bytes += n as u64;
        meter.add(n as u64);
        let clean = stripper.strip(&buf[..n]);
        match clean.iter().rposition(|b| *b == b'\n') {
            Some(at) => last_line = clean[at + 1..].to_vec(),
            None => last_line.extend_from_slice(&clean),
        }
        let piece: &[u8] = if raw { &buf[..n] } else { &clean };
        let room = usize::try_from(max_bytes).unwrap_or(usize::MAX).saturating_sub(kept.len());
        if piece.len() > room {
            reading.truncated = true;
        }
        kept.extend_from_slice(&piece[..piece.len().min(room)]);
        if last_line.len() > 4096 {
            last_line.drain(..last_line.len() - 4096);
        }
        if spec.is_ready(&String::from_utf8_lossy(&last_line)) {
            reading.ready = true;
            break;
        }
    }
    reading.text = String::from_utf8_lossy(&kept).into_owned();
    reading
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_removed_not_interpreted() {
        let mut s = Stripper::default();
        let out = s.strip(b"\x1b[1;31mred\x1b[0m\r\n\x1b]0;title\x07ok\x1b");
        assert_eq!(out, b"red\nok");
        // The escape left open is carried into the next piece.
        assert_eq!(s.strip(b"[2Jx"), b"x");
    }
}
