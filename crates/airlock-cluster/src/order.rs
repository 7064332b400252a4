//! The order an edge signs for one call: the call's descriptor and what a
//! worker needs to run it exactly as the edge would (argv, limits, the
//! input blobs by hash, the output's bound), and until when it may run.

use crate::error::ClusterError;
use crate::subjects::check_token;
use airlock_core::Descriptor;
use airlock_sandbox::WorkerLimits;
use serde::{Deserialize, Serialize};

/// DSSE payload type of an order.
pub const ORDER_TYPE: &str = "application/vnd.airlock.cluster-order+json";
/// The order format this build writes and reads.
pub const ORDER_VERSION: u32 = 1;

/// Bytes named by their SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blob {
    /// `sha256:` and the lowercase hex digest.
    pub sha256: String,
    /// Length in bytes.
    pub bytes: u64,
}

/// A small blob carried beside a signed message instead of in the store
/// (it saves an upload and a fetch; it is checked like a fetched one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inline {
    /// `sha256:` of the bytes.
    pub sha256: String,
    /// The bytes, base64 (standard).
    pub base64: String,
}

impl Inline {
    /// The bytes, if they are exactly `blob` (its size and hash);
    /// `cluster.blob_mismatch` otherwise.
    pub fn bytes_of(&self, blob: &Blob) -> Result<Vec<u8>, ClusterError> {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.base64)
            .map_err(|e| ClusterError::Protocol(format!("an inline blob that is not base64: {e}")))?;
        let got = airlock_core::sha256_tagged(&bytes);
        if bytes.len() as u64 != blob.bytes || got != blob.sha256 {
            return Err(ClusterError::BlobMismatch(format!(
                "inline blob {} holds {} bytes hashing to {got}, not its {} bytes",
                blob.sha256,
                bytes.len(),
                blob.bytes
            )));
        }
        Ok(bytes)
    }
}

/// Largest blob carried inline.
pub const INLINE_MAX_EACH: u64 = 64 << 10;
/// Most bytes carried inline in one message (before base64).
pub const INLINE_MAX_TOTAL: u64 = 256 << 10;

/// Blobs a message carries inline, within [`INLINE_MAX_TOTAL`].
#[derive(Debug, Default)]
pub struct InlineSet {
    blobs: Vec<Inline>,
    total: u64,
}

impl InlineSet {
    /// Carries `bytes` inline if it fits; whether it did.
    pub fn offer(&mut self, bytes: &[u8]) -> bool {
        let n = bytes.len() as u64;
        if n > INLINE_MAX_EACH || self.total + n > INLINE_MAX_TOTAL {
            return false;
        }
        use base64::Engine as _;
        self.total += n;
        let sha256 = airlock_core::sha256_tagged(bytes);
        if !self.blobs.iter().any(|b| b.sha256 == sha256) {
            self.blobs.push(Inline { sha256, base64: base64::engine::general_purpose::STANDARD.encode(bytes) });
        }
        true
    }

    /// The blobs, for the message.
    pub fn into_vec(self) -> Vec<Inline> {
        self.blobs
    }
}

/// One input: where the worker shows it, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderInput {
    /// Relative to the working directory (the descriptor's read path).
    pub virtual_path: String,
    /// The snapshot's bytes.
    pub blob: Blob,
}

/// The one output a call may create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderOutput {
    /// Relative to the working directory (the descriptor's create path).
    pub virtual_path: String,
    /// More bytes than this and nothing is exported.
    pub max_bytes: u64,
    /// The tool's standard output is the output file (`[output]
    /// stdout_file`): the worker writes no file of its own.
    pub from_stdout: bool,
}

/// How the worker runs the call: the parts of the sandbox's spec that are
/// the call's, not the worker host's (its image and tier are its own).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// The command, as the descriptor has it.
    pub argv: Vec<String>,
    /// The worker's environment.
    pub env: Vec<(String, String)>,
    /// The working directory inside, as the descriptor has it.
    pub working_dir: String,
    /// The inputs, in the descriptor's order.
    pub inputs: Vec<OrderInput>,
    /// The output, if the call creates one.
    pub output: Option<OrderOutput>,
    /// Resource limits.
    pub limits: WorkerLimits,
    /// Wall-clock budget of the run, in milliseconds.
    pub timeout_ms: u64,
    /// Bytes of stdout kept.
    pub stdout_limit: u64,
    /// Bytes of stderr kept.
    pub stderr_limit: u64,
}

/// One call, as an edge orders it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Order {
    /// [`ORDER_VERSION`].
    pub version: u32,
    /// The invocation id: the message id (duplicates dropped) and the
    /// results subject.
    pub invocation_id: String,
    /// The worker tier that must run it.
    pub tier: String,
    /// The pool of workers it is for.
    pub pool: String,
    /// When the edge signed it (Unix milliseconds).
    pub issued_at_ms: u64,
    /// After this no worker may start it (Unix milliseconds): the edge has
    /// stopped waiting.
    pub expires_at_ms: u64,
    /// The call's descriptor, as prepared and authorized at the edge.
    pub descriptor: Descriptor,
    /// Its digest (what the edge's journal and Cedar saw).
    pub descriptor_sha256: String,
    /// How to run it.
    pub run: RunSpec,
}

impl Order {
    /// Checks what a signature alone cannot: the version, the tokens, the
    /// descriptor's digest, and that the run is the descriptor's (its argv,
    /// working directory, inputs with their sizes and hashes, and output
    /// path).
    pub fn check(&self) -> Result<(), ClusterError> {
        let bad = |why: String| Err(ClusterError::Protocol(format!("order {}: {why}", self.invocation_id)));
        if self.version != ORDER_VERSION {
            return bad(format!("version {} (this worker reads {ORDER_VERSION})", self.version));
        }
        check_token("invocation id", &self.invocation_id)?;
        check_token("tier", &self.tier)?;
        check_token("pool", &self.pool)?;
        if self.descriptor.digest() != self.descriptor_sha256 {
            return bad("the descriptor does not hash to descriptor_sha256".into());
        }
        let d = &self.descriptor;
        if self.run.argv != d.argv || self.run.working_dir != d.working_dir {
            return bad("its argv or working directory is not the descriptor's".into());
        }
        let fs = &d.command_boundary.filesystem;
        let reads_match = self.run.inputs.len() == fs.reads.len()
            && self
                .run
                .inputs
                .iter()
                .zip(&fs.reads)
                .all(|(i, r)| i.virtual_path == r.path && i.blob.bytes == r.bytes && i.blob.sha256 == r.sha256);
        if !reads_match {
            return bad("its inputs are not the descriptor's reads".into());
        }
        match (&self.run.output, fs.create.first()) {
            (None, None) => {}
            (Some(o), Some(path)) if &o.virtual_path == path && o.max_bytes == fs.max_file_bytes => {}
            _ => return bad("its output is not the descriptor's".into()),
        }
        if self.expires_at_ms < self.issued_at_ms {
            return bad("it expires before it was issued".into());
        }
        Ok(())
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_core::{CallShape, FilesystemBoundary, ReadGrant, ToolIdentity};

    fn order() -> Order {
        let read = ReadGrant { path: "data/in.txt".into(), bytes: 3, sha256: format!("sha256:{}", "a".repeat(64)) };
        let filesystem = FilesystemBoundary {
            reads: vec![read.clone()],
            create: vec!["results/out.txt".into()],
            max_file_bytes: 1 << 20,
            input_snapshots: true,
            overwrite: false,
            output_parent: None,
            create_dirs: None,
            read_paths: vec![read.path.clone()],
            read_sha256: vec![read.sha256.clone()],
            create_paths: vec!["results/out.txt".into()],
            source: None,
            snapshot: None,
            broker: None,
        };
        let shape = CallShape {
            transport: "exec".into(),
            args: Default::default(),
            argv: vec!["cp".into(), "data/in.txt".into(), "results/out.txt".into()],
            working_dir: "/workspace".into(),
            tier: "cluster".into(),
            filesystem,
        };
        let descriptor = Descriptor::new(&ToolIdentity::builtin("copy", "1", "low"), shape);
        Order {
            version: ORDER_VERSION,
            invocation_id: "inv-1".into(),
            tier: "native".into(),
            pool: "default".into(),
            issued_at_ms: 1,
            expires_at_ms: 2,
            descriptor_sha256: descriptor.digest(),
            run: RunSpec {
                argv: descriptor.argv.clone(),
                env: Vec::new(),
                working_dir: "/workspace".into(),
                inputs: vec![OrderInput {
                    virtual_path: read.path.clone(),
                    blob: Blob { sha256: read.sha256.clone(), bytes: 3 },
                }],
                output: Some(OrderOutput {
                    virtual_path: "results/out.txt".into(),
                    max_bytes: 1 << 20,
                    from_stdout: false,
                }),
                limits: WorkerLimits::default(),
                timeout_ms: 1000,
                stdout_limit: 1024,
                stderr_limit: 1024,
            },
            descriptor,
        }
    }

    #[test]
    fn inline_blobs_are_bounded_and_checked_like_fetched_ones() {
        let mut set = InlineSet::default();
        assert!(set.offer(b"small"));
        assert!(!set.offer(&vec![0u8; INLINE_MAX_EACH as usize + 1]));
        for _ in 0..3 {
            assert!(set.offer(&vec![1u8; INLINE_MAX_EACH as usize]));
        }
        assert!(!set.offer(&vec![2u8; INLINE_MAX_EACH as usize]), "over the total");
        let blobs = set.into_vec();
        let small = Blob { sha256: airlock_core::sha256_tagged(b"small"), bytes: 5 };
        assert_eq!(blobs[0].bytes_of(&small).unwrap(), b"small");
        let mut forged = blobs[0].clone();
        forged.base64 = "c21hbGw=".replace('w', "x");
        assert!(matches!(forged.bytes_of(&small), Err(ClusterError::BlobMismatch(_) | ClusterError::Protocol(_))));
        let longer = Blob { bytes: 6, ..small.clone() };
        assert!(matches!(blobs[0].bytes_of(&longer), Err(ClusterError::BlobMismatch(_))));
    }

    #[test]
    fn an_order_is_the_descriptors_call_or_nothing() {
        order().check().unwrap();
        type Change = (&'static str, fn(&mut Order));
        let changes: [Change; 8] = [
            ("argv", |o| o.run.argv.push("-v".into())),
            ("working dir", |o| o.run.working_dir = "/tmp".into()),
            ("input hash", |o| o.run.inputs[0].blob.sha256 = format!("sha256:{}", "b".repeat(64))),
            ("input size", |o| o.run.inputs[0].blob.bytes = 4),
            ("input dropped", |o| o.run.inputs.clear()),
            ("output path", |o| o.run.output.as_mut().unwrap().virtual_path = "results/other.txt".into()),
            ("output bound", |o| o.run.output.as_mut().unwrap().max_bytes += 1),
            ("descriptor", |o| o.descriptor.argv.push("-v".into())),
        ];
        for (what, change) in changes {
            let mut o = order();
            change(&mut o);
            assert!(matches!(o.check(), Err(ClusterError::Protocol(_))), "{what} changed and the order still checks");
        }
        let mut o = order();
        o.pool = "a.b".into();
        assert!(o.check().is_err());
        let mut o = order();
        o.version = 2;
        assert!(o.check().is_err());
    }
}
