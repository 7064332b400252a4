//! The relay's SHA-256 of streamed reads and chunked writes, on a thread
//! of its own.
//!
//! Hashing was half the relay's time on a large stream, and the relay is
//! the middle of a pipeline (broker → relay → worker): while it hashed a
//! frame, neither neighbour got the next one. Here the relay hands each
//! frame's bytes to one hashing thread and goes on forwarding; the thread
//! keeps one SHA-256 per stream, fed in the order the frames were handed
//! over, and gives each buffer back for the next frame. A stream's digest
//! is asked for when it is needed (a chunked write's commit, the end of the
//! submission for reads), and that call waits for every frame before it.
//!
//! Memory is bounded: at most [`QUEUED`] frames wait for the thread (the
//! relay waits when the thread is that far behind), and a new buffer is
//! made only when none is given back, so no more than about `QUEUED` + 3
//! are ever in use.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

/// Frames that may wait for the hashing thread before the relay waits.
const QUEUED: usize = 8;

/// A stream's number, chosen by the relay.
pub(crate) type StreamId = u64;

enum Job {
    /// Hash `buf[start..]` as the next bytes of `stream`.
    Feed { stream: StreamId, buf: Vec<u8>, start: usize },
    /// The digest of everything fed to `stream`, which is then forgotten.
    Finish { stream: StreamId, reply: Sender<[u8; 32]> },
    /// Forget `stream` (an aborted write).
    Forget { stream: StreamId },
}

/// The hashing thread was lost (it panicked): the relay cannot vouch for
/// the bytes it forwarded.
#[derive(Debug)]
pub(crate) struct HasherLost;

/// The relay's handle on its hashing thread.
pub(crate) struct StreamHasher {
    jobs: Option<SyncSender<Job>>,
    given_back: Receiver<Vec<u8>>,
    thread: Option<JoinHandle<()>>,
}

impl StreamHasher {
    /// Starts the thread.
    pub fn start() -> std::io::Result<StreamHasher> {
        let (jobs, queue) = mpsc::sync_channel::<Job>(QUEUED);
        let (give_back, given_back) = mpsc::channel::<Vec<u8>>();
        let thread = std::thread::Builder::new().name("airlock-hash".into()).spawn(move || serve(queue, give_back))?;
        Ok(StreamHasher { jobs: Some(jobs), given_back, thread: Some(thread) })
    }

    /// Hands `buf[start..]` over as the next bytes of `stream`; waits only
    /// when [`QUEUED`] frames are already waiting.
    pub fn feed(&self, stream: StreamId, buf: Vec<u8>, start: usize) -> Result<(), HasherLost> {
        self.send(Job::Feed { stream, buf, start })
    }

    /// Hands over a copy of `bytes` (for bytes the relay does not own).
    pub fn feed_copy(&self, stream: StreamId, bytes: &[u8]) -> Result<(), HasherLost> {
        let mut buf = self.buffer();
        buf.clear();
        buf.extend_from_slice(bytes);
        self.feed(stream, buf, 0)
    }

    /// The SHA-256 of everything fed to `stream`, once the thread has
    /// hashed it all; the stream is forgotten.
    pub fn finish(&self, stream: StreamId) -> Result<[u8; 32], HasherLost> {
        let (reply, answer) = mpsc::channel();
        self.send(Job::Finish { stream, reply })?;
        answer.recv().map_err(|_| HasherLost)
    }

    /// Forgets `stream` without its digest.
    pub fn forget(&self, stream: StreamId) -> Result<(), HasherLost> {
        self.send(Job::Forget { stream })
    }

    /// A buffer the thread gave back, or a new one.
    pub fn buffer(&self) -> Vec<u8> {
        self.given_back.try_recv().unwrap_or_default()
    }

    fn send(&self, job: Job) -> Result<(), HasherLost> {
        self.jobs.as_ref().ok_or(HasherLost)?.send(job).map_err(|_| HasherLost)
    }
}

impl Drop for StreamHasher {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it has drained it.
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(queue: Receiver<Job>, give_back: Sender<Vec<u8>>) {
    let mut streams: HashMap<StreamId, Sha256> = HashMap::new();
    while let Ok(job) = queue.recv() {
        match job {
            Job::Feed { stream, buf, start } => {
                streams.entry(stream).or_default().update(&buf[start.min(buf.len())..]);
                let _ = give_back.send(buf);
            }
            Job::Finish { stream, reply } => {
                let _ = reply.send(streams.remove(&stream).unwrap_or_default().finalize().into());
            }
            Job::Forget { stream } => {
                streams.remove(&stream);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_streams_hash_as_their_own_bytes_in_order() {
        let hasher = StreamHasher::start().unwrap();
        let (a, b): (Vec<u8>, Vec<u8>) = ((0..200_000u32).map(|i| i as u8).collect(), vec![7u8; 150_000]);
        for (i, (x, y)) in a.chunks(65_536).zip(b.chunks(65_536)).enumerate() {
            let mut framed = vec![0xAA; 3];
            framed.extend_from_slice(x);
            hasher.feed(1, framed, 3).unwrap();
            hasher.feed_copy(2, y).unwrap();
            if i == 0 {
                hasher.feed_copy(3, b"aborted").unwrap();
                hasher.forget(3).unwrap();
            }
        }
        for x in a.chunks(65_536).skip(3) {
            hasher.feed_copy(1, x).unwrap();
        }
        assert_eq!(hasher.finish(1).unwrap(), <[u8; 32]>::from(Sha256::digest(&a)));
        assert_eq!(hasher.finish(2).unwrap(), <[u8; 32]>::from(Sha256::digest(&b)));
        assert_eq!(hasher.finish(3).unwrap(), <[u8; 32]>::from(Sha256::digest(b"")), "a forgotten stream starts anew");
    }
}
