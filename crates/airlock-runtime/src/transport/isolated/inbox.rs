//! The worker's requests as they arrive: bytes read from its socket into
//! one buffer, taken as whole frames where they lie.
//!
//! A frame is handed out as a range of the buffer, never copied out of it,
//! and the buffer is never drained byte by byte: bytes are received at its
//! end, and only when the room left there is less than a frame are the
//! bytes not yet handled (the frames still queued and the start of the
//! next) moved to its front. The buffer is allocated once per submission,
//! and its pages are touched only as far as requests fill it.

use std::collections::VecDeque;
use std::ops::Range;

use airlock_fsproto::{ProtoError, MAX_FRAME};

/// The buffer: room for many frames, so that the bytes moved to its front
/// (at most the window's frames and a partial one) are moved seldom.
const INBOX_BYTES: usize = 2 << 20;

/// Whole frames received and not yet handled, and the bytes of the next.
pub(crate) struct Inbox {
    buf: Vec<u8>,
    /// The first byte not yet taken into a frame.
    start: usize,
    /// The end of the bytes received.
    end: usize,
    /// The bodies of the frames taken and not yet handled, in order.
    frames: VecDeque<Range<usize>>,
}

impl Inbox {
    /// An empty inbox holding at least `window` whole frames (up to 64)
    /// and a partial one.
    pub fn new(window: u64) -> Inbox {
        let frames = window.min(64) as usize;
        let len = INBOX_BYTES.max((frames + 2) * (4 + MAX_FRAME));
        Inbox { buf: vec![0; len], start: 0, end: 0, frames: VecDeque::new() }
    }

    /// How many whole frames are queued.
    pub fn queued(&self) -> usize {
        self.frames.len()
    }

    /// Whether bytes were received that are not (yet) a whole frame.
    pub fn partial(&self) -> bool {
        self.end > self.start
    }

    /// Where the next bytes go: the room at the end, after moving what is
    /// not handled yet to the front when that room is less than a frame.
    /// Empty only while the queued frames fill the buffer.
    pub fn room(&mut self) -> &mut [u8] {
        let head = self.frames.front().map_or(self.start, |body| body.start - 4);
        if head == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.buf.len() - self.end < 4 + MAX_FRAME && head > 0 {
            self.buf.copy_within(head..self.end, 0);
            for body in &mut self.frames {
                *body = body.start - head..body.end - head;
            }
            self.start -= head;
            self.end -= head;
        }
        &mut self.buf[self.end..]
    }

    /// `n` bytes were received into [`Inbox::room`].
    pub fn received(&mut self, n: usize) {
        self.end += n;
    }

    /// Takes the next whole frame, if one was received, into the queue:
    /// whether it did. A length over [`MAX_FRAME`] is refused from its
    /// prefix alone.
    pub fn take_frame(&mut self) -> Result<bool, ProtoError> {
        let Some(prefix) = self.buf[self.start..self.end].first_chunk::<4>() else { return Ok(false) };
        let len = u32::from_be_bytes(*prefix) as usize;
        if len > MAX_FRAME {
            return Err(ProtoError::TooLarge { len, max: MAX_FRAME });
        }
        let body = self.start + 4..self.start + 4 + len;
        if body.end > self.end {
            return Ok(false);
        }
        self.start = body.end;
        self.frames.push_back(body);
        Ok(true)
    }

    /// The oldest queued frame's body, out of the queue (it stays where it
    /// lies until the next [`Inbox::room`]).
    pub fn pop(&mut self) -> Option<Range<usize>> {
        self.frames.pop_front()
    }

    /// The bytes of a frame [`Inbox::pop`] handed out.
    pub fn body(&self, body: Range<usize>) -> &[u8] {
        &self.buf[body]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_fsproto::framed;

    fn receive(inbox: &mut Inbox, bytes: &[u8]) {
        let room = inbox.room();
        room[..bytes.len()].copy_from_slice(bytes);
        inbox.received(bytes.len());
    }

    fn take_all(inbox: &mut Inbox) -> Vec<Vec<u8>> {
        while inbox.take_frame().unwrap() {}
        let mut bodies = Vec::new();
        while let Some(body) = inbox.pop() {
            bodies.push(inbox.body(body).to_vec());
        }
        bodies
    }

    #[test]
    fn frames_are_taken_once_whole_in_order() {
        let mut inbox = Inbox::new(4);
        let (a, b) = (framed(b"{\"a\":1}").unwrap(), framed(&[7u8; 1000]).unwrap());
        let mut both = a.clone();
        both.extend_from_slice(&b[..10]);
        receive(&mut inbox, &both);
        assert_eq!(take_all(&mut inbox), vec![b"{\"a\":1}".to_vec()]);
        assert!(inbox.partial(), "the second frame is not whole yet");
        receive(&mut inbox, &b[10..]);
        assert_eq!(take_all(&mut inbox), vec![vec![7u8; 1000]]);
        assert!(!inbox.partial());
        let mut empty = Inbox::new(1);
        receive(&mut empty, &framed(b"").unwrap());
        assert_eq!(take_all(&mut empty), vec![Vec::<u8>::new()], "an empty body is a frame");
    }

    #[test]
    fn a_length_over_the_limit_is_refused_from_its_prefix() {
        let mut inbox = Inbox::new(1);
        receive(&mut inbox, &(MAX_FRAME as u32 + 1).to_be_bytes());
        assert!(matches!(inbox.take_frame(), Err(ProtoError::TooLarge { .. })));
    }

    #[test]
    fn queued_frames_and_a_partial_one_survive_the_move_to_the_front() {
        let mut inbox = Inbox::new(4);
        let frame = |i: u8| framed(&vec![i; MAX_FRAME]).unwrap();
        let mut sent = 0u8;
        let mut got = Vec::new();
        // Far more than the buffer holds, received in pieces that end
        // inside frames, with frames left queued at every move.
        let mut pending = Vec::new();
        while got.len() < 100 {
            while pending.len() < 3 * (4 + MAX_FRAME) {
                pending.extend_from_slice(&frame(sent));
                sent = sent.wrapping_add(1);
            }
            let room = inbox.room().len();
            assert!(room >= 4 + MAX_FRAME || inbox.queued() > 0, "room for a frame unless frames are queued");
            let n = room.min(2 * (4 + MAX_FRAME) + 1000);
            receive(&mut inbox, &pending[..n]);
            pending.drain(..n);
            while inbox.take_frame().unwrap() {}
            // Handle all but one: the last stays queued across the move.
            while inbox.queued() > 1 {
                let body = inbox.pop().unwrap();
                got.push(inbox.body(body).to_vec());
            }
        }
        for (i, body) in got.iter().enumerate() {
            assert_eq!(body, &vec![i as u8; MAX_FRAME], "frame {i}");
        }
    }
}
