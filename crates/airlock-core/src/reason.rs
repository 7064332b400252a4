//! Stable reason codes, the envelope status they imply, and process exit codes.
//!
//! Every refusal or failure airlock reports carries exactly one [`ReasonCode`].
//! The dotted string of a code never changes meaning; programs key on it.
//! The table below is the single place that maps a code to its status and
//! exit code (DESIGN.md §3).

use std::fmt;

/// The `status` field of an envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The call did what was asked.
    Ok,
    /// The tool ran and failed.
    Failed,
    /// A grant, path, limit or policy said no before anything ran.
    Refused,
    /// airlock itself failed.
    Error,
}

impl Status {
    /// The word the envelope's `status` holds (`ok`, `failed`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Refused => "refused",
            Status::Error => "error",
        }
    }
}

/// Process exit codes (DESIGN.md §3, sysexits-style).
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// The tool ran and failed.
    pub const TOOL_FAILED: i32 = 1;
    /// Command-line usage error.
    pub const USAGE: i32 = 64;
    /// Bad manifest or argument.
    pub const DATA: i32 = 65;
    /// An input is missing.
    pub const NO_INPUT: i32 = 66;
    /// Internal error.
    pub const SOFTWARE: i32 = 70;
    /// The output already exists.
    pub const CANT_CREATE: i32 = 73;
    /// Staging capacity exhausted; retry later.
    pub const TEMP_FAIL: i32 = 75;
    /// Refused by a grant, path rule or policy.
    pub const NO_PERM: i32 = 77;
    /// Bad configuration, or a host that cannot enforce it.
    pub const CONFIG: i32 = 78;
    /// Timed out.
    pub const TIMEOUT: i32 = 124;
    /// Cancelled by SIGINT (128 + 2; SIGTERM exits 143, 128 + 15).
    pub const INTERRUPTED: i32 = 130;
}

macro_rules! reason_codes {
    ($( $(#[$doc:meta])* $variant:ident => $code:literal, $status:ident, $exit:ident; )*) => {
        /// A stable, dotted reason code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ReasonCode {
            $( $(#[$doc])* $variant, )*
        }

        impl ReasonCode {
            /// Every code, in table order.
            pub const ALL: &'static [ReasonCode] = &[ $( ReasonCode::$variant, )* ];

            /// The dotted string, e.g. `path.traversal`.
            pub fn as_str(self) -> &'static str {
                match self { $( ReasonCode::$variant => $code, )* }
            }

            /// The envelope status this code implies.
            pub fn status(self) -> Status {
                match self { $( ReasonCode::$variant => Status::$status, )* }
            }

            /// The process exit code this code implies.
            pub fn exit_code(self) -> i32 {
                match self { $( ReasonCode::$variant => exit::$exit, )* }
            }

            /// Looks a code up by its dotted string.
            pub fn from_str_code(s: &str) -> Option<ReasonCode> {
                match s { $( $code => Some(ReasonCode::$variant), )* _ => None }
            }
        }
    };
}

reason_codes! {
    // ---- paths (grammar; refused before any I/O) ----
    /// The path is empty.
    PathEmpty => "path.empty", Refused, NO_PERM;
    /// The path is rooted (`/etc/passwd`).
    PathAbsolute => "path.absolute", Refused, NO_PERM;
    /// A `..` component.
    PathTraversal => "path.traversal", Refused, NO_PERM;
    /// An empty component (`a//b`, a trailing `/`).
    PathEmptyComponent => "path.empty_component", Refused, NO_PERM;
    /// A `.` component.
    PathDotComponent => "path.dot_component", Refused, NO_PERM;
    /// A backslash anywhere.
    PathBackslash => "path.backslash", Refused, NO_PERM;
    /// A mount delimiter or drive prefix (`:`).
    PathMountDelimiter => "path.mount_delimiter", Refused, NO_PERM;
    /// A character reserved on portable file systems (`<>"|?*`).
    PathReservedChar => "path.reserved_char", Refused, NO_PERM;
    /// NUL, CR, LF or another control or bidirectional-override character.
    PathControlChar => "path.control_char", Refused, NO_PERM;
    /// The path is not valid UTF-8.
    PathEncoding => "path.encoding", Refused, NO_PERM;
    /// A component is longer than 255 bytes.
    PathComponentTooLong => "path.component_too_long", Refused, NO_PERM;
    /// The path is longer than 4,096 bytes.
    PathTooLong => "path.too_long", Refused, NO_PERM;
    /// The path has more than 64 components.
    PathTooDeep => "path.too_deep", Refused, NO_PERM;
    /// A Windows device name (`CON`, `nul.txt`, `COM1`, `LPT1.log`).
    PathDeviceName => "path.device_name", Refused, NO_PERM;
    /// A component ends in a dot or a space.
    PathTrailingDotOrSpace => "path.trailing_dot_or_space", Refused, NO_PERM;
    /// A control directory (`.git`, `.airlock`) in any letter case.
    PathControlDir => "path.control_dir", Refused, NO_PERM;
    /// The same path is declared twice.
    PathDuplicate => "path.duplicate", Refused, NO_PERM;
    // ---- paths (resolution on the host) ----
    /// A symbolic link at some component.
    PathSymlink => "path.symlink", Refused, NO_PERM;
    /// A component on the way is not a directory.
    PathNotDirectory => "path.not_directory", Refused, NO_PERM;
    /// Resolution would cross a mount point.
    PathMountCrossing => "path.mount_crossing", Refused, NO_PERM;
    /// Resolution would leave the ceiling.
    PathEscape => "path.escape", Refused, NO_PERM;
    /// The path changed between two steps of resolution (a race was seen).
    PathRace => "path.race", Refused, NO_PERM;
    // ---- grants ----
    /// No configured ceiling covers the path.
    GrantNoCeiling => "grant.no_ceiling", Refused, NO_PERM;
    /// A read-only ceiling cannot authorize creating an output.
    GrantReadOnly => "grant.read_only", Refused, NO_PERM;
    // ---- inputs ----
    /// A declared input does not exist.
    InputMissing => "input.missing", Refused, NO_INPUT;
    /// An input is not a regular file (directory, FIFO, socket, device).
    InputNotRegular => "input.not_regular", Refused, NO_PERM;
    /// An input has more than one hard link.
    InputHardlink => "input.hardlink", Refused, NO_PERM;
    /// An input is larger than its bound (`max_input_file_bytes`).
    InputTooLarge => "input.too_large", Refused, NO_PERM;
    /// An input changed while it was being snapshotted.
    InputChanged => "input.changed", Refused, NO_PERM;
    /// An input could not be read.
    InputUnreadable => "input.unreadable", Refused, NO_INPUT;
    // ---- outputs ----
    /// The output already exists (file, directory or any link).
    OutputExists => "output.exists", Refused, CANT_CREATE;
    /// The output's parent directory does not exist.
    OutputParentMissing => "output.parent_missing", Refused, NO_INPUT;
    /// The output's parent directory is not the one that was prepared.
    OutputParentChanged => "output.parent_changed", Refused, NO_PERM;
    /// What publication put under the output's name is not the candidate
    /// airlock wrote (another user swapped it); left in place, not vouched for.
    OutputIdentityMismatch => "output.identity_mismatch", Refused, NO_PERM;
    // ---- limits ----
    /// More inputs than allowed.
    LimitInputs => "limit.inputs", Refused, NO_PERM;
    /// More input bytes in all than allowed.
    LimitInputBytes => "limit.input_bytes", Refused, NO_PERM;
    /// More than one output.
    LimitOutputs => "limit.outputs", Refused, DATA;
    /// A manifest's `max_file_bytes` is 0 or above what the operator allows
    /// (`[limits] max_file_bytes`).
    LimitFileBytes => "limit.file_bytes", Refused, DATA;
    /// A manifest's `max_input_file_bytes` is 0 or above what the operator
    /// allows (`[limits] max_input_file_bytes`).
    LimitInputFileBytes => "limit.input_file_bytes", Refused, DATA;
    /// An output went over its size limit.
    LimitOutputSize => "limit.output_size", Failed, TOOL_FAILED;
    // ---- manifests and arguments ----
    /// The manifest is malformed (syntax, unknown key, bad value).
    ManifestInvalid => "manifest.invalid", Refused, DATA;
    /// The manifest uses a section or feature airlock does not execute yet.
    ManifestUnsupported => "manifest.unsupported", Refused, DATA;
    /// The tool could not be found.
    ManifestNotFound => "manifest.not_found", Refused, DATA;
    /// Two or more manifests in the tools directory answer to the name
    /// asked for (file name or `[tool] name`); none is picked.
    ManifestAmbiguous => "manifest.ambiguous", Refused, DATA;
    /// The tool's program (or its custom parser) is not an executable
    /// regular file in the worker image as the worker sees it.
    ToolNotRunnable => "tool.not_runnable", Refused, CONFIG;
    /// A `[filesystem]` entry is a template other than one whole `{arg}`.
    ManifestPathTemplate => "manifest.path_template", Refused, DATA;
    /// A required argument is missing.
    ArgMissing => "arg.missing", Refused, DATA;
    /// An argument that the tool does not declare.
    ArgUnknown => "arg.unknown", Refused, DATA;
    /// An argument value failed its type's validation.
    ArgInvalid => "arg.invalid", Refused, DATA;
    /// An argument holds a shell metacharacter.
    ArgInjection => "arg.injection", Refused, DATA;
    /// An argument starts with `-` where options are not allowed.
    ArgLeadingDash => "arg.leading_dash", Refused, DATA;
    /// An argument value is outside its range.
    ArgOutOfRange => "arg.out_of_range", Refused, DATA;
    /// An argument does not match its pattern.
    ArgPattern => "arg.pattern", Refused, DATA;
    /// An argument value is not in its `allowed` list.
    ArgNotAllowed => "arg.not_allowed", Refused, DATA;
    /// The tool's standard output could not be parsed as its declared format.
    OutputParse => "output.parse", Failed, TOOL_FAILED;
    /// The manifest names a custom parser that `[sandbox] parsers` does not allow.
    OutputParserNotAllowed => "output.parser_not_allowed", Refused, NO_PERM;
    /// The tool removed, replaced or linked its output instead of writing it.
    OutputTampered => "output.tampered", Failed, TOOL_FAILED;
    // ---- running ----
    /// The tool ran and exited unsuccessfully.
    ToolFailed => "tool.failed", Failed, TOOL_FAILED;
    /// The tool ran past `timeout_seconds` and was killed.
    ToolTimeout => "tool.timeout", Failed, TIMEOUT;
    /// The call was cancelled by a signal (SIGINT, SIGTERM) to airlock;
    /// its worker was killed and nothing was published. The process exits
    /// 128 + the signal's number (130 for SIGINT, 143 for SIGTERM).
    CallCancelled => "call.cancelled", Failed, INTERRUPTED;
    /// Policy refused the call.
    PolicyDenied => "policy.denied", Refused, NO_PERM;
    /// Policy files are configured but this build cannot evaluate them yet.
    PolicyUnavailable => "policy.unavailable", Error, CONFIG;
    /// A policy file does not parse or does not validate against the schema.
    PolicyInvalid => "policy.invalid", Error, CONFIG;
    /// Policy evaluation failed; the call is refused.
    PolicyEval => "policy.eval", Error, SOFTWARE;
    /// The call was prepared under another revision of the cluster's policy bundle than the one in force at its dispatch; nothing ran: prepare it again.
    PolicyChanged => "policy.changed", Refused, NO_PERM;
    /// The selected worker tier cannot run on this host.
    SandboxUnavailable => "sandbox.unavailable", Error, CONFIG;
    /// `[sandbox] require_cgroup = true` and no delegated cgroup v2 can hold
    /// the worker's memory and process limits; nothing was started.
    SandboxLimitsUnavailable => "sandbox.limits_unavailable", Refused, CONFIG;
    /// The call asks for a worker tier the operator's `[sandbox] tiers` does
    /// not allow, or another than the manifest's `[tool.sandbox] tier`.
    SandboxTierNotAllowed => "sandbox.tier_not_allowed", Refused, NO_PERM;
    /// The call's shape cannot run on the chosen tier (isolated submissions,
    /// Git queries and `[mcp]` tools run on the native tier only).
    SandboxTierUnsupported => "sandbox.tier_unsupported", Refused, CONFIG;
    /// Setting up the worker failed.
    SandboxSetup => "sandbox.setup_failed", Error, SOFTWARE;
    /// The worker's processes could not be confirmed gone; nothing is published.
    WorkerCleanup => "worker.cleanup_unconfirmed", Error, SOFTWARE;
    // ---- git queries ----
    /// The directory is not a repository airlock snapshots: no `.git`
    /// directory (a `.git` file, a linked worktree or a bare layout are refused).
    GitNotRepository => "git.not_a_repository", Refused, NO_INPUT;
    /// The repository snapshot would pass a limit (files, bytes, bytes a file, depth).
    GitSnapshotTooLarge => "git.snapshot_too_large", Refused, NO_PERM;
    /// A path in the snapshot is not acceptable (`..`, absolute, CR/LF/NUL,
    /// duplicate, case collision, a link where a directory must be).
    GitPathRejected => "git.path_rejected", Refused, NO_PERM;
    /// The repository's data could not be read as Git (corrupt, missing
    /// objects, an unsupported format); nothing outside the snapshot was consulted.
    GitRepositoryInvalid => "git.repository_invalid", Failed, TOOL_FAILED;
    /// The Git query's arguments are malformed (unknown operation or argument).
    GitBadArgument => "git.bad_argument", Refused, DATA;
    // ---- MCP workers ----
    /// The `[mcp]` section is malformed (server, tool, unknown key).
    McpInvalid => "mcp.invalid", Refused, DATA;
    /// `[mcp]` is combined with something that makes no sense beside it
    /// (`[command]`, a custom parser, a non-JSON output format).
    McpConflict => "mcp.conflict", Refused, DATA;
    /// `[mcp.field_map]` names an undeclared argument, or two arguments
    /// would be sent under one upstream name.
    McpFieldMap => "mcp.field_map", Refused, DATA;
    /// The upstream server broke the protocol (bad message, early exit,
    /// failed handshake, no answer), or did not exit after the call.
    McpProtocol => "mcp.protocol", Failed, TOOL_FAILED;
    /// The upstream server does not offer the manifest's tool.
    McpToolMissing => "mcp.tool_missing", Failed, TOOL_FAILED;
    /// The upstream tool answered with `isError: true`.
    McpToolError => "mcp.tool_error", Failed, TOOL_FAILED;
    // ---- MCP server front (`airlock mcp --http`, `--unix`) ----
    /// An HTTP request without the server's bearer token, or with another one.
    McpUnauthenticated => "mcp.unauthenticated", Refused, NO_PERM;
    /// A Unix-socket peer whose uid `[mcp] principals` does not map.
    McpPeerUnmapped => "mcp.peer_unmapped", Refused, NO_PERM;
    /// A request whose `Origin` is not in `[mcp] allowed_origins`.
    McpOriginForbidden => "mcp.origin_forbidden", Refused, NO_PERM;
    /// `[mcp] max_sessions` sessions are live; a new `initialize` waits
    /// until one is closed or idles out. Retry later.
    McpSessionsExhausted => "mcp.sessions_exhausted", Refused, TEMP_FAIL;
    /// A request body over the server's limit (4 MiB).
    McpBodyTooLarge => "mcp.body_too_large", Refused, DATA;
    /// The bearer token file is unsafe (a link, another owner, readable by
    /// others, not one link) or malformed.
    McpTokenUnsafe => "mcp.token_unsafe", Error, CONFIG;
    /// The Unix socket cannot be made safely (its directory is not the
    /// caller's or is writable by others, or another file has its name).
    McpSocketUnsafe => "mcp.socket_unsafe", Error, CONFIG;
    // ---- named-root broker (`airlock isolated`) ----
    /// A root grant is malformed (`NAME=PATH:RIGHTS`, name grammar, rights,
    /// more than 64 roots, a name given twice, a name with no configured path).
    BrokerRootInvalid => "broker.root_invalid", Refused, USAGE;
    /// A root directory cannot be granted: missing, a symlink, not a
    /// directory, or overlapping the state directory or another root.
    BrokerRootUnusable => "broker.root_unusable", Refused, NO_PERM;
    /// `[broker]` combined with `[filesystem]`, `[source]` or `[mcp]`, or malformed.
    BrokerConflict => "broker.conflict", Refused, DATA;
    /// A helper binary's SHA-256 differs from the pinned digest.
    BrokerDigestMismatch => "broker.digest_mismatch", Refused, NO_PERM;
    /// The broker or a client binary could not be found, sealed or started.
    BrokerUnavailable => "broker.unavailable", Error, CONFIG;
    /// A file operation of the submission failed (denied, missing, over a
    /// limit or budget, malformed); the submission ends as failed.
    BrokerOperationFailed => "broker.operation_failed", Failed, TOOL_FAILED;
    /// The broker died or broke the protocol during a submission.
    BrokerFailed => "broker.failed", Error, SOFTWARE;
    /// Leftover staging entries could not all be removed; run `airlock isolated recover`.
    BrokerCleanupFailed => "broker.cleanup_failed", Error, SOFTWARE;
    /// A submission to recover still has a live owner.
    BrokerBusy => "broker.busy", Refused, TEMP_FAIL;
    /// Recovery records name roots that were not granted to `recover`, or
    /// whose directories changed identity.
    BrokerRecoveryRoots => "broker.recovery_roots", Refused, NO_PERM;
    // ---- approval ----
    /// The tool needs an exact-call approval of this descriptor digest first.
    ApprovalRequired => "approval.required", Refused, NO_PERM;
    /// No prepared call awaits approval with that digest.
    ApprovalUnknown => "approval.unknown", Refused, NO_INPUT;
    /// The approval names an approver, or was signed by a key, that
    /// `[approval] approvers` does not pin.
    ApprovalUnknownApprover => "approval.unknown_approver", Refused, NO_PERM;
    /// The approval is malformed, its signature does not verify, or it is
    /// for another call (digest or invocation id).
    ApprovalInvalid => "approval.invalid", Refused, NO_PERM;
    /// The prepared call, or its approval, is past its expiry (`[approval] ttl`).
    ApprovalExpired => "approval.expired", Refused, NO_PERM;
    /// An approver denied the call; it is settled and never runs.
    ApprovalDenied => "approval.denied", Refused, NO_PERM;
    /// The principal already has `[approval] max_pending` calls waiting (or
    /// the pending budget is full); nothing was copied. Retry later.
    ApprovalQuota => "approval.quota", Refused, TEMP_FAIL;
    /// No `[approval] approvers` are configured, so no call can be approved.
    ApprovalNoApprovers => "approval.no_approvers", Refused, CONFIG;
    /// An approver key file is missing, unsafe (owner, mode, links, size)
    /// or placed where calls can reach it (a ceiling, a broker root, the state dir).
    ApprovalKeyUnusable => "approval.key_unusable", Error, CONFIG;
    // ---- journal and recovery ----
    /// A publication's outcome is unconfirmed; new effects wait for `airlock invocation recover`.
    JournalUnconfirmed => "journal.unconfirmed", Refused, NO_PERM;
    /// The journal or its key is unsafe (ownership, mode, links) or missing.
    JournalKeyUnsafe => "journal.key_unsafe", Error, CONFIG;
    /// The journal is damaged (torn tail, bad record, other key, a missing segment); appends stop.
    JournalCorrupt => "journal.corrupt", Error, SOFTWARE;
    /// The journal could not be written or read.
    JournalIo => "journal.io", Error, SOFTWARE;
    /// Journal verification found a bad record.
    JournalInvalid => "journal.invalid", Failed, TOOL_FAILED;
    /// A prune would remove sealed segments never exported (export them, or `--allow-unexported`).
    JournalNotExported => "journal.not_exported", Refused, NO_PERM;
    /// `journal verify` found no public key to check against: none beside the journal or in the state dir, and no `--public-key`.
    JournalPublicKeyMissing => "journal.public_key_missing", Refused, USAGE;
    /// Recovery found a conflict an operator must look at (`--discard` to give up the candidate).
    RecoveryConflict => "recovery.conflict", Refused, NO_PERM;
    /// The invocation is still being run by a live process.
    InvocationActive => "invocation.active", Refused, TEMP_FAIL;
    /// Nothing was published by that invocation, so there is nothing to attest.
    AttestNothing => "attest.nothing_published", Refused, NO_INPUT;
    // ---- staging ----
    /// The shared staging pool has no room for this call's snapshots and
    /// output; nothing was copied and no worker started. Retry later.
    StagingExhausted => "staging.exhausted", Refused, TEMP_FAIL;
    /// The call needs more bytes than the whole staging pool holds
    /// (`[staging] max_bytes`): it could never be admitted, so retrying is
    /// no use.
    StagingPoolTooSmall => "staging.pool_too_small", Refused, NO_PERM;
    /// No reservation by that invocation id is held in the staging pool.
    StagingNotReserved => "staging.not_reserved", Refused, NO_INPUT;
    /// The reservation belongs to a live process.
    StagingBusy => "staging.busy", Refused, TEMP_FAIL;
    // ---- configuration and host ----
    /// `airlock.toml` is malformed or inconsistent.
    ConfigInvalid => "config.invalid", Error, CONFIG;
    /// A configured ceiling is not acceptable (protected path, not a directory …).
    ConfigCeiling => "config.ceiling", Error, CONFIG;
    /// The state directory is unsafe or unusable.
    ConfigStateDir => "config.state_dir", Error, CONFIG;
    /// A ceiling or broker root holds one of airlock's control files
    /// (the configuration, the tools directory, a policy file's directory,
    /// the state directory where declared paths could reach it), judged by
    /// `(dev, ino)`: a tool granted it could change what later calls may do.
    ControlFileExposed => "config.control_file_exposed", Refused, CONFIG;
    /// A control file (configuration, manifest, policy) or its directory is
    /// owned by someone other than the caller or root, is writable by group
    /// or others, is a symbolic link, or is not a regular file.
    ControlFileUnsafe => "config.control_file_unsafe", Refused, CONFIG;
    /// The host lacks a facility the configuration needs.
    HostUnsupported => "host.unsupported", Error, CONFIG;
    /// Logging cannot be set up as the environment asks: `AIRLOCK_LOG` (or
    /// `RUST_LOG`) is not a valid filter, or `AIRLOCK_LOG_FILE` is a
    /// symbolic link or cannot be opened for appending.
    ConfigLogging => "config.logging", Error, CONFIG;
    // ---- invocations ----
    /// The invocation id has been used before.
    InvocationDuplicate => "invocation.duplicate", Refused, NO_PERM;
    /// The invocation id is malformed.
    InvocationIdInvalid => "invocation.id_invalid", Refused, USAGE;
    /// No prepared invocation with that id.
    InvocationNotFound => "invocation.not_found", Refused, NO_INPUT;
    // ---- source queries ----
    /// `[source] operation` names no known operation.
    SourceOperationUnknown => "source.operation_unknown", Refused, DATA;
    /// A source manifest also declares a binary, command, `[filesystem]`, another backend, a mode other than oneshot or non-JSON output.
    SourceConflict => "source.conflict", Refused, DATA;
    /// A manifest in the tools directory has the name of a bundled source operation but is not a source manifest for it.
    SourceShadowed => "source.shadowed", Refused, DATA;
    // ---- general ----
    /// Command-line usage error.
    Usage => "usage", Refused, USAGE;
    /// airlock itself failed.
    Internal => "internal", Error, SOFTWARE;
    // ---- toolclad (issue 24) ----
    /// The tool's parsed output does not satisfy its `[output] schema`;
    /// nothing was published.
    OutputSchema => "output.schema", Failed, TOOL_FAILED;
    // ---- approve (issue 24) ----
    /// A read, listing, source query, Git snapshot or broker read/list
    /// right reaches a create-only ceiling (`create`), which only ever
    /// receives new outputs.
    GrantCreateOnly => "grant.create_only", Refused, NO_PERM;
    /// What an approved call reaches changed between its approval and its
    /// dispatch: a broker root's identity, its rights, the budgets or a
    /// helper's digest. Prepare and approve the call again.
    ApprovalCallChanged => "approval.call_changed", Refused, NO_PERM;
    // ---- pinning (issue 24) ----
    /// A helper (`airlock-broker`, `airlock-fs`) answered the start-up handshake with another protocol version or build fingerprint than this airlock's, or did not answer it; nothing was started and no root was opened.
    HelperMismatch => "helper.mismatch", Refused, NO_PERM;
    /// A stored record or descriptor carries a format version this airlock does not know; it is refused, never misread.
    RecordVersion => "record.version", Refused, DATA;
    /// An `[mcp]` upstream tool's schema is not signed by the pinned key, or differs from the pinned digest; no file was staged and nothing publishes.
    McpSchemaUnpinned => "mcp.schema_unpinned", Refused, NO_PERM;
    // ---- session (issue 21) ----
    /// A session interaction's argument does not match its command's whole-string pattern (nothing was written to the terminal).
    SessionArgument => "session.argument", Refused, DATA;
    /// A session names a command its manifest does not declare.
    SessionCommandUnknown => "session.command_unknown", Refused, DATA;
    /// No live session has this id (it was finalized, closed, timed out, or its holder died).
    SessionNotFound => "session.not_found", Refused, NO_INPUT;
    /// A session's input snapshots or output parent changed since it started; start a new session.
    SessionStale => "session.stale", Refused, NO_PERM;
    /// As many sessions as `[session] max_live` are live; finalize or close one.
    SessionLimit => "session.limit", Refused, TEMP_FAIL;
    /// The session's program did not show its ready pattern in time, or ended.
    SessionNotReady => "session.not_ready", Failed, TIMEOUT;
    /// The session ended without finalize: nothing was published and its staging was discarded.
    SessionDiscarded => "session.discarded", Failed, TOOL_FAILED;
    /// The session holder could not be reached or refused the connection.
    SessionHolder => "session.holder", Error, SOFTWARE;
    // ---- microvm (issue 20) ----
    /// A microVM's guest did not answer within `[sandbox.microvm]
    /// boot_timeout_ms`; the VM was killed and nothing ran.
    SandboxBootTimeout => "sandbox.boot_timeout", Error, TEMP_FAIL;
    /// A microVM's guest speaks another protocol version or is another
    /// airlock build than the host; rebuild it with scripts/microvm-build.sh.
    SandboxGuestMismatch => "sandbox.guest_mismatch", Refused, CONFIG;
    // ---- cluster (issue 23) ----
    /// The edge could not reach the NATS cluster (connect, publish, or a blob upload failed); nothing was published on the host: try again.
    ClusterUnavailable => "cluster.unavailable", Error, TEMP_FAIL;
    /// No worker answered the call within the tool's timeout plus `[cluster] queue_seconds`; nothing was published on the host: try again, or start workers of its tier and pool.
    ClusterTimeout => "cluster.timeout", Error, TEMP_FAIL;
    /// A signed order or receipt does not verify under a key pinned in the cluster's key bucket, or names a key that is not pinned; nothing of it is used.
    ClusterUntrusted => "cluster.untrusted", Refused, NO_PERM;
    /// A blob's bytes do not hash to the name the signed order or receipt gives them, or exceed its size; nothing of it is used.
    ClusterBlobMismatch => "cluster.blob_mismatch", Refused, DATA;
    /// A worker refused the call (its reason is in the message: an expired order, a tier it does not run, a blob it could not fetch); nothing ran.
    ClusterRefused => "cluster.refused", Refused, NO_PERM;
    /// A worker refused an order that asks for more than its host allows (inputs, output bound, timeout, memory, processes, CPU, scratch: its `[limits]` and `[cluster.worker]`); nothing ran. At the edge it is `cluster.refused` with this code in the message.
    ClusterOverLimit => "cluster.over_limit", Refused, NO_PERM;
    /// A message on the cluster's subjects is not a well-formed order or receipt of this protocol version.
    ClusterProtocol => "cluster.protocol", Error, SOFTWARE;
    /// The local journal disagrees with the cluster's journal stream: a record the stream holds is missing here (the journal was cut) or differs (it was rewritten).
    JournalStreamMismatch => "journal.stream_mismatch", Failed, TOOL_FAILED;
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ReasonCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A reason code with a message for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Refusal {
    /// The stable code programs key on.
    pub code: ReasonCode,
    /// What happened, for people.
    pub message: String,
}

impl Refusal {
    /// A refusal with `code` and `message`.
    pub fn new(code: ReasonCode, message: impl Into<String>) -> Self {
        Refusal { code, message: message.into() }
    }
}

/// Anything that carries a reason code.
pub trait HasReason {
    /// The stable code of this error.
    fn reason(&self) -> ReasonCode;
}

impl HasReason for Refusal {
    fn reason(&self) -> ReasonCode {
        self.code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_dotted_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for code in ReasonCode::ALL {
            let s = code.as_str();
            assert!(seen.insert(s), "duplicate code {s}");
            assert!(s.chars().all(|c| c.is_ascii_lowercase() || c == '.' || c == '_'), "{s}");
            assert_eq!(ReasonCode::from_str_code(s), Some(*code));
        }
    }

    #[test]
    fn refusals_never_exit_zero() {
        for code in ReasonCode::ALL {
            assert_ne!(code.exit_code(), exit::OK, "{code}");
            assert_ne!(code.status(), Status::Ok, "{code}");
        }
    }

    #[test]
    fn control_file_codes_refuse_the_configuration() {
        for (code, s) in [
            (ReasonCode::ControlFileExposed, "config.control_file_exposed"),
            (ReasonCode::ControlFileUnsafe, "config.control_file_unsafe"),
        ] {
            assert_eq!((code.as_str(), code.status(), code.exit_code()), (s, Status::Refused, exit::CONFIG));
        }
    }
}
