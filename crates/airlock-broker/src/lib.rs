//! airlock-broker: the filesystem broker of `airlock isolated`.
//!
//! airlock starts one broker per submission with
//! [`airlock_sandbox::spawn_broker`]: fd 0 is a socket to airlock, fds 3, 4, …
//! are the granted roots (directory handles), and `--rights r,wl,l` says
//! what each root allows. [`main`] parses that strictly ([`Args`]), confines
//! the process before it reads a byte ([`airlock_sandbox::confine_broker`]:
//! no host path reachable, Landlock to the roots' rights, a default-deny
//! seccomp allowlist), then [`Broker::serve`]s `airlock-fsproto` frames:
//! read, list, and writes in two steps (prepare: synced unnamed file;
//! commit: link under airlock's staging name, rename over the target). A
//! stream's file (a read that goes on, a chunked write's unnamed file) is
//! handed to airlock with the answer that opened it, on fd 0.
//! Every request is checked again here (root, right, path rules, limits),
//! under airlock's own checks.
//!
//! Run with `--handshake` alone, it prints its
//! [`airlock_fsproto::Handshake`] line and exits 0: airlock's check of
//! the protocol version and build fingerprint before it passes any root.
//!
//! Exit status: 0 when airlock closes the socket; [`EXIT_USAGE`],
//! [`EXIT_CONFINE`], [`EXIT_PROTOCOL`], [`EXIT_IO`] otherwise. Writes
//! prepared but not committed are never visible.
//!
//! The whole `airlock-broker` binary is one call:
//!
//! ```no_run
//! airlock_broker::main()
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod args;
mod serve;

use std::io::{BufReader, Read, Write};
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};

use airlock_hostfs::Resolver;
use airlock_sandbox::{confine_broker, BROKER_FIRST_ROOT_FD};

pub use args::{Args, UsageError};
pub use serve::{Answer, Broker, Channel, Fatal, MAX_OUTSTANDING};

/// The command line was refused (sysexits `EX_USAGE`).
pub const EXIT_USAGE: i32 = 64;
/// Confinement or the resolver could not be set up (`EX_OSERR`).
pub const EXIT_CONFINE: i32 = 71;
/// The socket failed (`EX_IOERR`).
pub const EXIT_IO: i32 = 74;
/// airlock sent something the protocol does not allow (`EX_PROTOCOL`).
pub const EXIT_PROTOCOL: i32 = 76;

/// The broker's `main`: parse, confine, serve fd 0, exit.
pub fn main() -> ! {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if argv.len() == 1 && argv[0] == airlock_fsproto::HANDSHAKE_FLAG {
        // airlock's start-up check, before it gives this program a root.
        print!("{}", airlock_fsproto::Handshake::ours("airlock-broker").line());
        std::process::exit(0);
    }
    let args = match Args::parse(argv) {
        Ok(args) => args,
        Err(e) => fail(EXIT_USAGE, &e),
    };
    let (roots, resolver) = match confine(&args) {
        Ok(done) => done,
        Err(e) => fail(EXIT_CONFINE, &e),
    };
    let mut broker = Broker::new(roots.into_iter().zip(args.rights.iter().copied()).collect(), resolver);
    if let Some(mode) = args.mode {
        broker.set_file_mode(mode);
    }
    match broker.serve(&mut Socket::stdin()) {
        Ok(()) => std::process::exit(0),
        Err(e @ Fatal::Protocol(_)) => fail(EXIT_PROTOCOL, &e),
        Err(e @ Fatal::Io(_)) => fail(EXIT_IO, &e),
    }
}

fn fail(code: i32, e: &dyn std::fmt::Display) -> ! {
    eprintln!("airlock-broker: {e}");
    std::process::exit(code)
}

/// Confines the process to the roots `args` describes (descriptors 3, 4,
/// …) and picks the resolver; returns the roots in order. Everything
/// [`main`] does before it serves.
pub fn confine(args: &Args) -> Result<(Vec<OwnedFd>, Resolver), Box<dyn std::error::Error>> {
    if args.mode.is_some() {
        // The operator's mode is given exactly (airlock already applied the
        // caller's umask to its default); umask(2) is not in the jail's
        // filter, so it is cleared before.
        rustix::process::umask(rustix::fs::Mode::empty());
    }
    let spec: Vec<(RawFd, airlock_fsproto::Rights)> =
        args.rights.iter().enumerate().map(|(i, r)| (BROKER_FIRST_ROOT_FD + i as RawFd, *r)).collect();
    let roots = confine_broker(&spec, args.max_file_bytes)?;
    // Probed inside the jail, where the answer counts.
    let resolver = Resolver::new(args.resolver)?;
    Ok((roots, resolver))
}

/// Descriptor 0 as a byte stream in both directions (the socket to
/// airlock). Requests are read through a buffer, so one wait and one read
/// usually take a whole request (its length and its body, and any requests
/// sent after it), where reading the length apart took two of each; a
/// write's payload past the buffer is read straight into the frame. Answers
/// are written unbuffered.
#[derive(Debug)]
pub struct Socket {
    requests: BufReader<Waiting>,
}

/// Most bytes one read of requests takes: a read request and its
/// neighbours, or the head and first 16 KiB of a write.
const REQUEST_BUFFER: usize = 16 * 1024;

/// The socket read after waiting for input in `poll` ([`airlock_fsproto::wait_ready`]:
/// a read blocked here would be woken for nothing each time airlock reads
/// an answer).
#[derive(Debug)]
struct Waiting(BorrowedFd<'static>);

impl Read for Waiting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        airlock_fsproto::wait_ready(self.0, airlock_fsproto::PollFlags::IN, None)?;
        Ok(rustix::io::read(self.0, buf)?)
    }
}

impl Socket {
    /// Standard input, which [`airlock_sandbox::spawn_broker`] makes the socket.
    pub fn stdin() -> Socket {
        Socket { requests: BufReader::with_capacity(REQUEST_BUFFER, Waiting(rustix::stdio::stdin())) }
    }

    /// The socket itself, for answers (written unbuffered).
    fn fd(&self) -> BorrowedFd<'static> {
        self.requests.get_ref().0
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.requests.read(buf)
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(rustix::io::write(self.fd(), buf)?)
    }

    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        Ok(rustix::io::writev(self.fd(), bufs)?)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Channel for Socket {
    /// One `sendmsg` with the descriptor; what it leaves (a signal may cut
    /// it short) goes out as plain bytes.
    fn write_with_file(&mut self, parts: &[&[u8]], file: BorrowedFd<'_>) -> std::io::Result<()> {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let files = [file];
        if !control.push(SendAncillaryMessage::ScmRights(&files)) {
            return Err(std::io::Error::other("no room for one descriptor in the control buffer"));
        }
        let slices: Vec<std::io::IoSlice<'_>> = parts.iter().map(|p| std::io::IoSlice::new(p)).collect();
        let sent = loop {
            match rustix::net::sendmsg(self.fd(), &slices, &mut control, SendFlags::NOSIGNAL) {
                Err(rustix::io::Errno::INTR) => continue,
                other => break other?,
            }
        };
        let mut skip = sent;
        for part in parts {
            let from = skip.min(part.len());
            skip -= from;
            if from < part.len() {
                self.write_all(&part[from..])?;
            }
        }
        Ok(())
    }
}
