//! The call channel of a warm sandbox ([`crate::warm`]): one Unix stream
//! socket pair per skeleton, over which the caller sends the one call the
//! skeleton will ever run — its [`InitSpec`] and the call's descriptors —
//! and which tells the skeleton's init that its caller is gone (the
//! caller's end closes).
//!
//! A message is a 4-byte little-endian length carrying every descriptor
//! (`SCM_RIGHTS`), then that many bytes of JSON. In the JSON, each
//! descriptor is named by its slot ([`crate::wire::CALL_SLOT_BASE`] plus its place in
//! the message), never by a number of the caller's; the receiver puts the
//! descriptors it got in their place ([`InitSpec::resolve_slots`]).
#![forbid(unsafe_code)]

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage};

use crate::error::{errno, SandboxError};
use crate::wire::{InitSpec, MAX_SPEC_BYTES};

/// The most descriptors one call can hand a warm sandbox; a call with more
/// starts cold (the kernel passes at most 253 in one message).
pub(crate) const MAX_CALL_FDS: usize = 240;

fn io_err(call: &str) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |e| SandboxError::Descriptor { call: call.to_string(), errno: errno(e) }
}

/// A new close-on-exec Unix stream socket pair: (caller's end, skeleton's end).
pub(crate) fn pair() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    rustix::net::socketpair(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None).map_err(|e| {
        SandboxError::Descriptor { call: "socketpair(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC)".into(), errno: errno(e) }
    })
}

/// Sends one call: `spec` (whose descriptors are slots) and `fds`, in slot order.
pub(crate) fn send(channel: &OwnedFd, spec: &[u8], fds: &[OwnedFd]) -> Result<(), SandboxError> {
    if fds.len() > MAX_CALL_FDS || spec.len() > MAX_SPEC_BYTES {
        return Err(SandboxError::Protocol(format!(
            "a call of {} descriptors and {} spec bytes does not fit a warm sandbox's channel",
            fds.len(),
            spec.len()
        )));
    }
    let header = (spec.len() as u32).to_le_bytes();
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_CALL_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !borrowed.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&borrowed)) {
        return Err(SandboxError::Protocol("the call's descriptors do not fit one message".into()));
    }
    let sent = rustix::net::sendmsg(channel, &[IoSlice::new(&header)], &mut control, rustix::net::SendFlags::NOSIGNAL)
        .map_err(|e| SandboxError::Descriptor { call: "sendmsg(call channel)".into(), errno: errno(e) })?;
    if sent != header.len() {
        return Err(SandboxError::Protocol("the call's header was cut short".into()));
    }
    let mut stream = std::fs::File::from(channel.try_clone().map_err(io_err("dup(call channel)"))?);
    stream.write_all(spec).map_err(io_err("write(call channel)"))
}

/// Reads the one call (blocking): the spec with its descriptors in their
/// places (close-on-exec), or `None` when the caller closed the channel
/// without a call (the skeleton was discarded).
pub(crate) fn receive(channel: &OwnedFd) -> Result<Option<(InitSpec, Vec<OwnedFd>)>, SandboxError> {
    let mut header = [0u8; 4];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_CALL_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(channel, &mut [IoSliceMut::new(&mut header)], &mut control, RecvFlags::CMSG_CLOEXEC)
        {
            Ok(msg) => break msg,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(SandboxError::Descriptor { call: "recvmsg(call channel)".into(), errno: errno(e) }),
        }
    };
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    if got.bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    if got.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
        return Err(SandboxError::Protocol("the call's descriptors were cut short".into()));
    }
    let mut stream = std::fs::File::from(channel.try_clone().map_err(io_err("dup(call channel)"))?);
    if got.bytes < header.len() {
        stream.read_exact(&mut header[got.bytes..]).map_err(io_err("read(call channel header)"))?;
    }
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_SPEC_BYTES {
        return Err(SandboxError::Protocol(format!("a call spec of {len} bytes is over {MAX_SPEC_BYTES}")));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).map_err(io_err("read(call channel)"))?;
    let mut spec: InitSpec =
        serde_json::from_slice(&body).map_err(|e| SandboxError::Protocol(format!("decode call spec: {e}")))?;
    let fds = spec.resolve_slots(fds)?;
    Ok(Some((spec, fds)))
}
