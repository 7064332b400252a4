//! The guest build fingerprint: the GNU build ID (`NT_GNU_BUILD_ID`) of an
//! airlock binary, read from its ELF program headers. The host takes its
//! own (`/proc/self/exe`), the guest its own; a guest built from another
//! airlock build has another ID and is refused. Stripping keeps the note,
//! so the stripped copy in the initramfs has the host binary's ID.
#![forbid(unsafe_code)]

use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// `PT_NOTE`.
const PT_NOTE: u32 = 4;
/// `NT_GNU_BUILD_ID`.
const NT_GNU_BUILD_ID: u32 = 3;
/// The most bytes of note segments read.
const MAX_NOTES: u64 = 1 << 16;

/// The build ID of the ELF file at `path`, lowercase hex.
pub fn of_file(path: &Path) -> io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut head = [0u8; 64];
    f.read_exact(&mut head)?;
    if &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return Err(io::Error::other("not a 64-bit little-endian ELF file"));
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    let (phoff, phentsize, phnum) = (u64_at(&head, 0x20), usize::from(u16_at(&head, 0x36)), u16_at(&head, 0x38));
    if phentsize < 56 {
        return Err(io::Error::other("ELF program headers too small"));
    }
    let mut phdrs = vec![0u8; phentsize * usize::from(phnum)];
    f.seek(SeekFrom::Start(phoff))?;
    f.read_exact(&mut phdrs)?;
    for ph in phdrs.chunks(phentsize) {
        if u32_at(ph, 0) != PT_NOTE {
            continue;
        }
        let (offset, size) = (u64_at(ph, 8), u64_at(ph, 32).min(MAX_NOTES));
        let mut notes = vec![0u8; size as usize];
        f.seek(SeekFrom::Start(offset))?;
        f.read_exact(&mut notes)?;
        if let Some(id) = build_id(&notes, u32_at) {
            return Ok(id);
        }
    }
    Err(io::Error::other("the binary has no GNU build ID (link it with --build-id)"))
}

fn build_id(notes: &[u8], u32_at: impl Fn(&[u8], usize) -> u32) -> Option<String> {
    let align = |n: usize| (n + 3) & !3;
    let mut at = 0;
    while at + 12 <= notes.len() {
        let (namesz, descsz, kind) =
            (u32_at(notes, at) as usize, u32_at(notes, at + 4) as usize, u32_at(notes, at + 8));
        let name = notes.get(at + 12..at + 12 + namesz)?;
        let desc_at = at + 12 + align(namesz);
        let desc = notes.get(desc_at..desc_at + descsz)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" && !desc.is_empty() {
            return Some(hex::encode(desc));
        }
        at = desc_at + align(descsz);
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_running_binary_has_a_build_id() {
        let id = super::of_file(std::path::Path::new("/proc/self/exe")).unwrap();
        assert!(id.len() >= 16 && id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    }
}
