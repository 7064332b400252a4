//! Starting a helper binary as the broker, over real root directories.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use airlock_fsproto::{
    decode_body, encode_body, read_frame, write_frame, BrokerRequest, BrokerResponse, Rights, MAX_FRAME,
};
use airlock_sandbox::{spawn_broker_with, BrokerOptions, BrokerProcess, SealedProgram};

/// The broker exactly as `airlock-broker` runs it.
pub const MAIN: &str = env!("CARGO_BIN_EXE_airlock-broker-testmain");
/// The same jail, then commands from the test (see the helper's docs).
pub const PROBE: &str = env!("CARGO_BIN_EXE_airlock-broker-testprobe");

/// A temporary directory with one subdirectory per root, plus `outside/`
/// (a secret beside the roots).
pub struct Roots {
    pub tmp: tempfile::TempDir,
    pub rights: Vec<&'static str>,
}

impl Roots {
    /// Roots `root0`, `root1`, … granted `rights`; each holds `a.txt`
    /// ("root N") and `sub/`; `outside/secret` sits beside them.
    pub fn new(rights: &[&'static str]) -> Roots {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..rights.len() {
            let dir = tmp.path().join(format!("root{i}"));
            std::fs::create_dir_all(dir.join("sub")).unwrap();
            std::fs::write(dir.join("a.txt"), format!("root {i}")).unwrap();
        }
        std::fs::create_dir(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/secret"), "secret").unwrap();
        Roots { tmp, rights: rights.to_vec() }
    }

    pub fn path(&self, i: usize) -> PathBuf {
        self.tmp.path().join(format!("root{i}"))
    }

    pub fn outside(&self) -> PathBuf {
        self.tmp.path().join("outside")
    }

    /// `outside/` holds only the secret, unchanged.
    pub fn outside_untouched(&self) {
        let names: Vec<_> = std::fs::read_dir(self.outside()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["secret"]);
        assert_eq!(std::fs::read(self.outside().join("secret")).unwrap(), b"secret");
    }

    fn handles(&self) -> Vec<(OwnedFd, Rights)> {
        use rustix::fs::{Mode, OFlags};
        (0..self.rights.len())
            .map(|i| {
                let fd = rustix::fs::open(
                    self.path(i).as_path(),
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .unwrap();
                (fd, Rights::parse(self.rights[i]).unwrap())
            })
            .collect()
    }
}

/// A running helper and airlock's end of its socket.
pub struct Running {
    pub process: BrokerProcess,
    pub sock: UnixStream,
    pub stderr: std::fs::File,
}

/// The resolver the environment asks for (CI runs the suite twice).
fn options() -> BrokerOptions {
    BrokerOptions {
        resolver: std::env::var("AIRLOCK_RESOLVER").ok().filter(|r| !r.is_empty()),
        mode: None,
        max_file_bytes: None,
    }
}

pub fn start(program: &str, roots: &Roots) -> Running {
    let sealed = SealedProgram::open(Path::new(program)).unwrap();
    let (ours, theirs) = UnixStream::pair().unwrap();
    ours.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let stderr = tempfile::tempfile().unwrap();
    let process = spawn_broker_with(
        &sealed,
        theirs.into(),
        roots.handles(),
        Stdio::from(stderr.try_clone().unwrap()),
        &options(),
    )
    .unwrap();
    Running { process, sock: ours, stderr }
}

impl Running {
    /// Sends a request and reads the response.
    pub fn call(&mut self, req: &BrokerRequest) -> BrokerResponse {
        self.call_with(req, None).0
    }

    /// Sends a request (in a data frame with `data`) and reads the
    /// response and the payload of its data frame.
    pub fn call_with(&mut self, req: &BrokerRequest, data: Option<&[u8]>) -> (BrokerResponse, Option<Vec<u8>>) {
        write_frame(&mut self.sock, &encode_body(req, data).unwrap()).unwrap();
        self.response().unwrap_or_else(|| panic!("no response; stderr: {}", self.stderr_text()))
    }

    /// The next response frame and its data, `None` at end of stream.
    pub fn response(&mut self) -> Option<(BrokerResponse, Option<Vec<u8>>)> {
        read_frame(&mut self.sock, MAX_FRAME).unwrap().map(|body| {
            let (response, data) = decode_body::<BrokerResponse>(&body).unwrap();
            (response, data.map(<[u8]>::to_vec))
        })
    }

    /// Sends a message request and reads the response, its data and the
    /// descriptor passed with it (read with `recvmsg`, as airlock reads).
    pub fn call_receiving(&mut self, req: &BrokerRequest) -> (BrokerResponse, Option<Vec<u8>>, Option<OwnedFd>) {
        write_frame(&mut self.sock, &encode_body(req, None).unwrap()).unwrap();
        let mut passed = Vec::new();
        let body = read_frame(&mut Receiving { sock: &self.sock, passed: &mut passed }, MAX_FRAME).unwrap().unwrap();
        let (response, data) = decode_body::<BrokerResponse>(&body).unwrap();
        assert!(passed.len() <= 1, "one descriptor at most");
        (response, data.map(<[u8]>::to_vec), passed.pop())
    }

    /// Sends probe commands and reads one answer line per command; stops
    /// early when the probe dies.
    pub fn probe(&mut self, commands: &[&str]) -> Vec<String> {
        let mut reader = BufReader::new(self.sock.try_clone().unwrap());
        let mut answers = Vec::new();
        for c in commands {
            if writeln!(self.sock, "{c}").is_err() {
                break;
            }
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => answers.push(line.trim_end().to_string()),
            }
        }
        answers
    }

    /// Closes airlock's end and waits for the broker.
    pub fn finish(mut self) -> (ExitStatus, String) {
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        let status = self.process.wait().unwrap();
        let text = self.stderr_text();
        (status, text)
    }

    pub fn stderr_text(&mut self) -> String {
        use std::io::Seek;
        let mut s = String::new();
        self.stderr.rewind().unwrap();
        self.stderr.read_to_string(&mut s).unwrap();
        s
    }
}

/// The socket read with `recvmsg`, keeping what descriptors come.
struct Receiving<'a> {
    sock: &'a UnixStream,
    passed: &'a mut Vec<OwnedFd>,
}

impl Read for Receiving<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            self.sock,
            &mut [std::io::IoSliceMut::new(buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = message {
                self.passed.extend(fds);
            }
        }
        Ok(got.bytes)
    }
}
