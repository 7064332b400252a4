//! A program copied into a sealed memory file while it is hashed, so the
//! copy that was hashed is the copy that runs.
//!
//! [`SealedProgram::open`] reads an executable once, into a
//! `memfd_create(MFD_CLOEXEC | MFD_ALLOW_SEALING)` file, hashing every byte
//! it copies, then seals it (`F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK |
//! F_SEAL_SEAL`): nobody, this process included, can change it afterwards.
//! The writable descriptor is then replaced by a read-only one, so the file
//! can be executed (a file open for writing cannot be).
//! Replacing the file at the original path afterwards changes nothing.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{FileType, MemfdFlags, Mode, OFlags, SealFlags};
use sha2::{Digest, Sha256};

use crate::error::{errno, OsErrno, SandboxError};

/// An executable sealed in memory, with the SHA-256 of its bytes.
#[derive(Debug)]
pub struct SealedProgram {
    file: File,
    sha256: [u8; 32],
    len: u64,
    name: String,
}

fn sealed_err(call: String) -> impl FnOnce(OsErrno) -> SandboxError {
    move |errno| SandboxError::Sealed { call, errno }
}

impl SealedProgram {
    /// Copies the executable at `path` (the operator's path: links in it are
    /// followed) into a sealed memory file, hashing it as it copies. Anything
    /// but a regular file is refused.
    pub fn open(path: &Path) -> Result<SealedProgram, SandboxError> {
        let shown = path.display().to_string();
        let fd =
            rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY, Mode::empty())
                .map_err(|e| sealed_err(format!("open({shown:?}, O_RDONLY|O_NONBLOCK)"))(errno(e)))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| sealed_err(format!("fstat({shown:?})"))(errno(e)))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(SandboxError::InvalidSpec(format!("program {shown:?} is not a regular file")));
        }
        let name = path.file_name().map_or_else(|| "program".into(), |n| n.to_string_lossy().into_owned());
        SealedProgram::copy_from(File::from(fd), &name)
    }

    /// Like [`SealedProgram::open`], from an already open file (read from
    /// its current offset to its end). `name` is for messages and the
    /// memory file's name only.
    pub fn from_file(source: File, name: &str) -> Result<SealedProgram, SandboxError> {
        SealedProgram::copy_from(source, name)
    }

    fn copy_from(mut source: File, name: &str) -> Result<SealedProgram, SandboxError> {
        let memfd = create_memfd(name)?;
        let mut out = File::from(memfd);
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut len = 0u64;
        loop {
            let n = match source.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(sealed_err(format!("read({name:?})"))(errno(e))),
            };
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(|e| sealed_err(format!("write(memfd {name:?})"))(errno(e)))?;
            len += n as u64;
        }
        seal_memory_file(&out, name)?;
        let file = reopen_read_only(out, name)?;
        Ok(SealedProgram { file, sha256: hasher.finalize().into(), len, name: name.to_owned() })
    }

    /// A sealed memory file holding `bytes` (e.g. a script given to a
    /// worker). `name` is for messages and the memory file's name only.
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<SealedProgram, SandboxError> {
        let memfd = create_memfd(name)?;
        let mut out = File::from(memfd);
        out.write_all(bytes).map_err(|e| sealed_err(format!("write(memfd {name:?})"))(errno(e)))?;
        seal_memory_file(&out, name)?;
        let file = reopen_read_only(out, name)?;
        Ok(SealedProgram { file, sha256: Sha256::digest(bytes).into(), len: bytes.len() as u64, name: name.to_owned() })
    }

    /// Lowercase hex SHA-256 of the sealed bytes.
    pub fn sha256_hex(&self) -> String {
        hex(&self.sha256)
    }

    /// Size of the sealed bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the program is empty (an empty file cannot be executed).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sealed memory file (read-only descriptor, close-on-exec).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Refuses ([`SandboxError::DigestMismatch`]) unless the sealed bytes
    /// hash to `expected_hex` (64 hex digits; letter case ignored).
    pub fn verify(&self, expected_hex: &str) -> Result<(), SandboxError> {
        let actual = self.sha256_hex();
        if expected_hex.len() == 64 && expected_hex.eq_ignore_ascii_case(&actual) {
            Ok(())
        } else {
            Err(SandboxError::DigestMismatch { program: self.name.clone(), expected: expected_hex.into(), actual })
        }
    }
}

impl AsFd for SealedProgram {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// Seals `file`, a memory file made with `MFD_ALLOW_SEALING` and never
/// mapped, against any change of content or size, and against new seals:
/// a [`SealedProgram`]'s, or another sealed copy such as an input's
/// snapshot. `F_SEAL_WRITE` waits for page references to drop and can fail
/// with `EBUSY` while freshly written pages still sit in another CPU's LRU
/// batch; then `F_SEAL_FUTURE_WRITE` is used, which refuses every later
/// write and writable mapping and is as strong here, since the memory file
/// was never mapped. `name` is for messages only.
pub fn seal_memory_file(file: &File, name: &str) -> Result<(), SandboxError> {
    let rest = SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL;
    match rustix::fs::fcntl_add_seals(file, SealFlags::WRITE | rest) {
        Err(rustix::io::Errno::BUSY) => {
            rustix::fs::fcntl_add_seals(file, SealFlags::FUTURE_WRITE | rest).map_err(|e| {
                sealed_err(format!("fcntl(memfd {name:?}, F_ADD_SEALS, FUTURE_WRITE|GROW|SHRINK|SEAL)"))(errno(e))
            })
        }
        other => other
            .map_err(|e| sealed_err(format!("fcntl(memfd {name:?}, F_ADD_SEALS, WRITE|GROW|SHRINK|SEAL)"))(errno(e))),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC)`, without
/// `MFD_EXEC` on kernels older than 6.3 (which reject the flag and allow
/// execution anyway).
fn create_memfd(name: &str) -> Result<OwnedFd, SandboxError> {
    let base = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    let label = format!("airlock-sealed:{}", name.replace('\0', ""));
    match rustix::fs::memfd_create(label.as_str(), base | MemfdFlags::EXEC) {
        Ok(fd) => Ok(fd),
        Err(rustix::io::Errno::INVAL) => rustix::fs::memfd_create(label.as_str(), base)
            .map_err(|e| sealed_err(format!("memfd_create({label:?}, MFD_CLOEXEC|MFD_ALLOW_SEALING)"))(errno(e))),
        Err(e) => Err(sealed_err(format!("memfd_create({label:?}, MFD_CLOEXEC|MFD_ALLOW_SEALING|MFD_EXEC)"))(errno(e))),
    }
}

/// A new read-only descriptor of the sealed file (through
/// `/proc/self/fd/N`); the writable one is closed, since `execve` refuses a
/// file that is open for writing (`ETXTBSY`).
fn reopen_read_only(writable: File, name: &str) -> Result<File, SandboxError> {
    use std::os::fd::AsRawFd;
    let path = format!("/proc/self/fd/{}", writable.as_raw_fd());
    let fd = rustix::fs::open(path.as_str(), OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| sealed_err(format!("open({path:?}, O_RDONLY) for memfd {name:?}"))(errno(e)))?;
    let (a, b) = (rustix::fs::fstat(&fd), rustix::fs::fstat(&writable));
    match (a, b) {
        (Ok(a), Ok(b)) if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) => Ok(File::from(fd)),
        _ => Err(sealed_err(format!("fstat({path:?}) is not memfd {name:?}"))(OsErrno(libc::EIO))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom};

    fn program(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("prog");
        std::fs::write(&p, bytes).unwrap();
        (t, p)
    }

    #[test]
    fn the_hash_is_of_the_sealed_copy() {
        let (_t, p) = program(b"hello sealed world");
        let sealed = SealedProgram::open(&p).unwrap();
        // sha256("hello sealed world")
        let want = hex(&Sha256::digest(b"hello sealed world"));
        assert_eq!(sealed.sha256_hex(), want);
        sealed.verify(&want).unwrap();
        sealed.verify(&want.to_uppercase()).unwrap();
        assert!(matches!(sealed.verify(&"0".repeat(64)), Err(SandboxError::DigestMismatch { .. })));
        assert!(sealed.verify("").is_err());
        assert!(sealed.verify(&want[..63]).is_err());
        // Changing the file on disk afterwards changes nothing.
        std::fs::write(&p, b"evil").unwrap();
        let mut copy = String::new();
        let mut f = sealed.file();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_string(&mut copy).unwrap();
        assert_eq!(copy, "hello sealed world");
        assert_eq!(sealed.len(), 18);
    }

    #[test]
    fn the_copy_cannot_be_changed_even_through_proc() {
        let (_t, p) = program(b"immutable");
        let sealed = SealedProgram::open(&p).unwrap();
        use std::os::fd::AsRawFd;
        let path = format!("/proc/self/fd/{}", sealed.file().as_raw_fd());
        // A descriptor reopened for writing cannot write (F_SEAL_WRITE).
        let mut w = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert_eq!(w.write(b"X").unwrap_err().raw_os_error(), Some(libc::EPERM));
        drop(w);
        let seals = rustix::fs::fcntl_get_seals(sealed.file()).unwrap();
        assert!(seals.contains(SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL));
        assert!(rustix::fs::ftruncate(sealed.file(), 0).is_err());
        assert!(rustix::fs::fcntl_add_seals(sealed.file(), SealFlags::EXEC).is_err(), "no seal can be changed");
        let fl = rustix::fs::fcntl_getfl(sealed.file()).unwrap();
        assert_eq!(fl & OFlags::RWMODE, OFlags::RDONLY, "the kept descriptor is read-only");
    }

    #[test]
    fn non_regular_files_are_refused() {
        let t = tempfile::tempdir().unwrap();
        assert!(matches!(SealedProgram::open(t.path()), Err(SandboxError::InvalidSpec(_))));
        let fifo = t.path().join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        // Opened non-blocking: a FIFO without a writer does not hang the caller.
        assert!(matches!(SealedProgram::open(&fifo), Err(SandboxError::InvalidSpec(_))));
        assert!(matches!(SealedProgram::open(&t.path().join("missing")), Err(SandboxError::Sealed { .. })));
    }

    #[test]
    fn a_sealed_program_runs() {
        let sealed = SealedProgram::open(Path::new("/bin/true")).unwrap();
        use std::os::fd::AsRawFd;
        let status =
            std::process::Command::new(format!("/proc/self/fd/{}", sealed.file().as_raw_fd())).status().unwrap();
        assert!(status.success());
    }
}
