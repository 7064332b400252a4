//! Whole-file copies made in the kernel and hashed from the copy.
//!
//! A large snapshot or publication candidate is copied with
//! `copy_file_range` (`sendfile` where the two files are on different file
//! systems, `pread`/`pwrite` where neither applies), so its bytes never
//! pass through airlock's memory. The SHA-256 is always of the *copy* —
//! the private file that will run or be published — read back through its
//! descriptor by a second thread that follows the copier, so hashing
//! overlaps copying (and whatever the caller does next, such as a
//! candidate's `fsync`). Memory stays bounded: one 256 KiB buffer.
//!
//! The copy stops at the source's end or after `cap` bytes, whichever is
//! first; the caller passes one byte more than it accepts, so growth past
//! its bound is seen, and judges the count.

use crate::error::{Error, Result};
use airlock_core::ReasonCode;
use rustix::fs::SeekFrom;
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{channel, Receiver, Sender};

/// Most bytes one kernel call copies (the hashing thread is told of
/// progress after each).
const STEP: u64 = 8 << 20;

/// Size of the buffer the hash is read through.
const HASH_BUF: usize = 256 << 10;

/// A finished copy: how many bytes and their SHA-256, read from the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Copied {
    /// Bytes copied (and hashed).
    pub bytes: u64,
    /// Lowercase hex SHA-256 of the copy.
    pub sha256_hex: String,
}

/// The kernel call in use; each falls back to the next where the kernel
/// or the file systems refuse it.
#[derive(Clone, Copy)]
enum Way {
    CopyFileRange,
    Sendfile,
    Userspace,
}

/// Copies at most `cap` bytes from offset 0 of `src` to offset 0 of `dst`
/// (new and empty, open for reading and writing), hashing `dst` in a second
/// thread as it fills. `step` hears of each step's bytes (in the calling
/// thread); `then` runs with the count once the copy is done,
/// while the hash finishes. A failed copy is `code`; a copy whose bytes
/// are not all in `dst` afterwards (it changed meanwhile) is
/// `output.identity_mismatch`.
pub(crate) fn copy_hashed(
    src: &File,
    dst: &File,
    cap: u64,
    code: ReasonCode,
    step: &mut dyn FnMut(u64),
    then: impl FnOnce(u64) -> Result<()>,
) -> Result<Copied> {
    let (progress, seen) = channel();
    let (copied, hashed) = std::thread::scope(|s| {
        let hashing = s.spawn(|| hash_behind(dst, seen));
        let copied = copy_range(src, dst, cap, progress, step)
            .map_err(|e| Error::new(code, format!("copying in the kernel: {e}")))
            .and_then(|n| then(n).map(|()| n));
        let hashed = hashing.join().unwrap_or_else(|_| Err(std::io::Error::other("the hashing thread panicked")));
        (copied, hashed)
    });
    let bytes = copied?;
    let (hashed, sha256_hex) =
        hashed.map_err(|e| Error::new(ReasonCode::Internal, format!("reading the copy back: {e}")))?;
    let size = dst.metadata().map_err(|e| Error::new(ReasonCode::Internal, format!("fstat(copy): {e}")))?.len();
    if hashed != bytes || size != bytes {
        return Err(Error::new(
            ReasonCode::OutputIdentityMismatch,
            format!("the copy holds {size} bytes ({hashed} hashed) after {bytes} were written: it changed meanwhile"),
        ));
    }
    Ok(Copied { bytes, sha256_hex })
}

/// Hashes `file` from its start to its end on this thread.
pub(crate) fn hash_file(file: &File) -> Result<Copied> {
    let (progress, seen) = channel();
    let _ = progress.send(u64::MAX);
    drop(progress);
    let (bytes, sha256_hex) =
        hash_behind(file, seen).map_err(|e| Error::new(ReasonCode::Internal, format!("reading the file back: {e}")))?;
    Ok(Copied { bytes, sha256_hex })
}

/// The copier: sends the offset reached after each step; dropping
/// `progress` tells the hashing thread the copy ended.
fn copy_range(
    src: &File,
    dst: &File,
    cap: u64,
    progress: Sender<u64>,
    copied: &mut dyn FnMut(u64),
) -> std::io::Result<u64> {
    let mut way = Way::CopyFileRange;
    let mut buf = Vec::new();
    let mut off = 0u64;
    while off < cap {
        let want = (cap - off).min(STEP) as usize;
        let step = match way {
            Way::CopyFileRange => {
                let (mut from, mut to) = (off, off);
                rustix::fs::copy_file_range(src, Some(&mut from), dst, Some(&mut to), want)
            }
            Way::Sendfile => {
                // sendfile writes at the file position of `dst`.
                rustix::fs::seek(dst, SeekFrom::Start(off))?;
                let mut from = off;
                rustix::fs::sendfile(dst, src, Some(&mut from), want)
            }
            Way::Userspace => {
                buf.resize(HASH_BUF.min(want), 0);
                let n = src.read_at(&mut buf, off)?;
                dst.write_all_at(&buf[..n], off)?;
                Ok(n)
            }
        };
        let n = match step {
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(Errno::XDEV | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) if matches!(way, Way::CopyFileRange) => {
                way = Way::Sendfile;
                continue;
            }
            Err(Errno::INVAL | Errno::NOSYS) if matches!(way, Way::Sendfile) => {
                way = Way::Userspace;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            break;
        }
        off += n as u64;
        copied(n as u64);
        // The hashing thread only ends early on an error, which the
        // caller reports: nothing to do here if it is gone.
        let _ = progress.send(off);
    }
    Ok(off)
}

/// The hashing thread: reads `dst` up to each offset the copier reports
/// (`u64::MAX`: to its end), until the copier is done; answers the bytes
/// hashed and the digest.
fn hash_behind(dst: &File, progress: Receiver<u64>) -> std::io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; HASH_BUF];
    let mut done = 0u64;
    for upto in progress {
        while done < upto {
            let want = buf.len().min((upto - done) as usize);
            let n = dst.read_at(&mut buf[..want], done)?;
            if n == 0 && upto == u64::MAX {
                // Told to read to the end, and there.
                break;
            }
            if n == 0 {
                // Shorter when read back than the copier reported.
                return Err(Errno::IO.into());
            }
            hasher.update(&buf[..n]);
            done += n as u64;
        }
    }
    Ok((done, hex::encode(hasher.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(content: &[u8]) -> (tempfile::TempDir, File, File) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("src"), content).unwrap();
        let src = File::open(tmp.path().join("src")).unwrap();
        let dst =
            std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(tmp.path().join("dst")).unwrap();
        (tmp, src, dst)
    }

    #[test]
    fn a_copy_larger_than_a_step_is_whole_and_hashed_from_the_copy() {
        let content: Vec<u8> = (0..(STEP as usize * 2 + 12_345)).map(|i| (i % 251) as u8).collect();
        let (tmp, src, dst) = files(&content);
        let got = copy_hashed(&src, &dst, u64::MAX, ReasonCode::Internal, &mut |_| {}, |_| Ok(())).unwrap();
        assert_eq!(got.bytes, content.len() as u64);
        assert_eq!(got.sha256_hex, hex::encode(Sha256::digest(&content)));
        assert_eq!(std::fs::read(tmp.path().join("dst")).unwrap(), content);
    }

    #[test]
    fn the_copy_stops_at_its_cap() {
        let (_tmp, src, dst) = files(b"0123456789");
        let got = copy_hashed(&src, &dst, 4, ReasonCode::Internal, &mut |_| {}, |n| {
            assert_eq!(n, 4);
            Ok(())
        })
        .unwrap();
        assert_eq!((got.bytes, got.sha256_hex), (4, hex::encode(Sha256::digest(b"0123"))));
    }

    #[test]
    fn a_failure_after_the_copy_is_the_callers() {
        let (_tmp, src, dst) = files(b"bytes");
        let err = copy_hashed(&src, &dst, 100, ReasonCode::Internal, &mut |_| {}, |_| {
            Err(Error::new(ReasonCode::InputChanged, "changed"))
        })
        .unwrap_err();
        assert_eq!(err.code(), ReasonCode::InputChanged);
    }
}
