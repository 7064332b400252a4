//! Who may talk to `airlock mcp --http` and `--unix` (ATTACKS.md 22), tried
//! on the shipping binary: no token, a wrong token, a token file others can
//! read, a foreign Origin, a flood of `initialize`, an oversized body, an
//! unmapped uid on the socket, and a principal smuggled in the body.

use crate::httpkit::{initialize_body, Endpoint, HttpSession, Server, MCP_POST};
use crate::util::{is_root, Project, CANARY};
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

/// Only the principal "alice" may make calls.
const ALICE_ONLY: &str = "@id(\"alice-only\")\npermit(principal == Airlock::Agent::\"alice\", action, resource);\n";

fn project(mcp: &str) -> Project {
    let p = Project::with_config(&format!(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n{mcp}"
    ));
    p.write("data/notes.txt", "line one\nline two\n");
    p
}

fn with_policy(mcp: &str) -> Project {
    let p = project(&format!("[policy]\nfiles = [\"policy/*.cedar\"]\n{mcp}"));
    p.write("policy/alice.cedar", ALICE_ONLY);
    p
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// The token file is made 0600 and only its path is printed; every request
/// without it — any method, any path, a session id learnt from someone
/// else — is refused with 401 and `mcp.unauthenticated`; with it,
/// `tools/list` and `read_file` work.
#[test]
fn http_requests_without_the_right_token_are_refused() {
    let p = project("");
    let server = Server::start(&p, &["--http", "127.0.0.1:0"]).unwrap();
    let token_file = server.token_file.clone().unwrap();
    assert!(token_file.starts_with(p.path(".airlock/mcp")), "{}", token_file.display());
    let meta = std::fs::metadata(&token_file).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600);
    let token = server.token();
    assert_eq!(token.len(), 64, "32 random bytes in hex");
    assert!(!server.stderr.contains(&token), "the token is never printed: {}", server.stderr);

    let ep = server.tcp();
    let mut wrong = token.clone().into_bytes();
    wrong[10] = if wrong[10] == b'a' { b'b' } else { b'a' };
    let wrong = String::from_utf8(wrong).unwrap();
    let refused_with: [Vec<(&str, String)>; 6] = [
        vec![],
        vec![("Authorization", bearer(&wrong))],
        vec![("Authorization", bearer(&token[..63]))],
        vec![("Authorization", token.clone())],
        vec![("Authorization", format!("Basic {token}"))],
        vec![("Authorization", bearer(&wrong)), ("Authorization", bearer(&token))],
    ];
    for extra in &refused_with {
        let mut headers: Vec<(&str, &str)> = MCP_POST.to_vec();
        headers.extend(extra.iter().map(|(n, v)| (*n, v.as_str())));
        let answer = ep.send("POST", "/mcp", &headers, &initialize_body());
        assert_eq!((answer.status, answer.reason().as_str()), (401, "mcp.unauthenticated"), "{extra:?}: {answer}");
        assert_eq!(answer.header("www-authenticate").as_deref(), Some("Bearer"));
        assert!(answer.header("mcp-session-id").is_none(), "no session for {extra:?}");
    }
    for (method, path) in [("GET", "/mcp"), ("DELETE", "/mcp"), ("GET", "/"), ("POST", "/elsewhere")] {
        let answer = ep.send(method, path, &[], b"");
        assert_eq!(answer.status, 401, "{method} {path}: {answer}");
    }

    let auth = bearer(&token);
    let mut s = HttpSession::new(ep.clone(), &[("Authorization", &auth)]);
    let init = s.initialize();
    assert_eq!(init.status, 200, "{init}");
    assert_eq!(init.json()["result"]["serverInfo"]["name"], "airlock");
    let list = s.request("tools/list", json!({}));
    assert!(list.json().to_string().contains("\"read_file\""), "{list}");
    let r = s.call("read_file", json!({"path": "data/notes.txt"}));
    assert_eq!(r["isError"], false, "{r}");
    assert!(r["structuredContent"]["content"].to_string().contains("line two"), "{r}");

    // A session id is not a credential: without the token it is refused.
    let mut thief = HttpSession::new(ep.clone(), &[]);
    thief.session = s.session.clone();
    let stolen = thief.request("tools/call", json!({"name": "read_file", "arguments": {"path": "data/notes.txt"}}));
    assert_eq!((stolen.status, stolen.reason().as_str()), (401, "mcp.unauthenticated"), "{stolen}");
    assert!(!String::from_utf8_lossy(&stolen.body).contains("line two"));

    // A restart reads the same token.
    drop(server);
    let again = Server::start(&p, &["--http", "127.0.0.1:0"]).unwrap();
    assert_eq!(again.token(), token);
    assert!(again.stderr.contains("bearer token read at"), "{}", again.stderr);
}

/// `--token-file` is refused when others can read it, when it is a link,
/// or (for root) when another user owns it; an operator's own 0600 token
/// is used as written.
#[test]
fn an_unsafe_token_file_is_refused_at_start() {
    let p = project("");
    let open = p.path("open-token");
    std::fs::write(&open, "o".repeat(40)).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let link = p.path("link-token");
    let own = p.path("own-token");
    std::fs::write(&own, format!("{}\n", "k".repeat(48))).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&own, &link).unwrap();
    let mut cases = vec![(open, "chmod 600"), (link, "symbolic link")];
    if is_root() {
        let foreign = p.path("foreign-token");
        std::fs::write(&foreign, "f".repeat(40)).unwrap();
        std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
        cases.push((foreign, "owned by uid 65534"));
    }
    for (file, says) in cases {
        let run = p.run(&["mcp", "--http", "127.0.0.1:0", "--token-file", file.to_str().unwrap()]);
        assert_eq!((run.reason(), run.code), ("mcp.token_unsafe", 78), "{run:#?}");
        assert!(run.envelope["error"]["message"].as_str().unwrap().contains(says), "{run:#?}");
    }
    let server = Server::start(&p, &["--http", "127.0.0.1:0", "--token-file", own.to_str().unwrap()]).unwrap();
    assert_eq!(server.token(), "k".repeat(48));
    let auth = bearer(&"k".repeat(48));
    assert_eq!(HttpSession::new(server.tcp(), &[("Authorization", &auth)]).initialize().status, 200);
}

/// With the token, a browser page from an origin not on the list is
/// refused (403, `mcp.origin_forbidden`); a listed origin and a request
/// without Origin (a non-browser client) are served.
#[test]
fn a_foreign_origin_is_refused_and_an_absent_one_accepted() {
    let p = project("[mcp]\nallowed_origins = [\"http://localhost:3000\"]\n");
    let server = Server::start(&p, &["--http", "127.0.0.1:0"]).unwrap();
    let auth = bearer(&server.token());
    for origin in ["http://evil.example", "http://localhost:3001", "https://localhost:3000", "null", "http://localhost"]
    {
        let answer = HttpSession::new(server.tcp(), &[("Authorization", &auth), ("Origin", origin)]).initialize();
        assert_eq!((answer.status, answer.reason().as_str()), (403, "mcp.origin_forbidden"), "{origin}: {answer}");
    }
    for origin in [Some("http://localhost:3000"), Some("HTTP://LOCALHOST:3000"), None] {
        let mut extra = vec![("Authorization", auth.as_str())];
        extra.extend(origin.map(|o| ("Origin", o)));
        let answer = HttpSession::new(server.tcp(), &extra).initialize();
        assert_eq!(answer.status, 200, "{origin:?}: {answer}");
    }
    // Without the list, any Origin a browser sends is foreign.
    let q = project("");
    let plain = Server::start(&q, &["--http", "127.0.0.1:0"]).unwrap();
    let auth = bearer(&plain.token());
    let answer =
        HttpSession::new(plain.tcp(), &[("Authorization", &auth), ("Origin", "http://127.0.0.1")]).initialize();
    assert_eq!(answer.status, 403, "{answer}");
}

/// 2,000 `initialize` calls: exactly `max_sessions` (default 256) open, the
/// rest are refused (503, `mcp.sessions_exhausted`, Retry-After), the
/// server's memory stays bounded, and closing a session makes room.
#[test]
fn sessions_past_the_cap_are_refused_and_memory_stays_bounded() {
    let p = project("");
    let server = Server::start(&p, &["--http", "127.0.0.1:0"]).unwrap();
    let auth = bearer(&server.token());
    let first = HttpSession::new(server.tcp(), &[("Authorization", &auth)]).initialize();
    assert_eq!(first.status, 200);
    let start_kib = server.rss_kib();
    let (mut opened, mut refused) = (vec![first.header("mcp-session-id").unwrap()], 0);
    let mut headers: Vec<(&str, &str)> = MCP_POST.to_vec();
    headers.push(("Authorization", &auth));
    for _ in 1..2000 {
        let answer = server.tcp().send("POST", "/mcp", &headers, &initialize_body());
        match answer.status {
            200 => opened.push(answer.header("mcp-session-id").unwrap()),
            503 => {
                assert_eq!(answer.reason(), "mcp.sessions_exhausted", "{answer}");
                assert!(answer.header("retry-after").is_some(), "{answer}");
                refused += 1;
            }
            _ => panic!("unexpected answer: {answer}"),
        }
    }
    assert_eq!((opened.len(), refused), (256, 1744));
    let grown_kib = server.rss_kib().saturating_sub(start_kib);
    eprintln!("RSS {start_kib} KiB after one session, +{grown_kib} KiB after 2,000 initialize calls");
    assert!(grown_kib < 60 * 1024, "the server grew by {grown_kib} KiB over 2,000 initialize calls");

    // Closing one (HTTP DELETE with its id, and the token) makes room for one.
    let close = server.tcp().send("DELETE", "/mcp", &[("Authorization", &auth), ("Mcp-Session-Id", &opened[0])], b"");
    assert!(close.status < 300, "{close}");
    assert_eq!(HttpSession::new(server.tcp(), &[("Authorization", &auth)]).initialize().status, 200);
    assert_eq!(HttpSession::new(server.tcp(), &[("Authorization", &auth)]).initialize().status, 503);
}

/// An idle session expires after `[mcp] session_idle_seconds` and gives
/// its room back.
#[test]
fn idle_sessions_expire_and_free_their_room() {
    let p = project("[mcp]\nmax_sessions = 2\nsession_idle_seconds = 1\n");
    let server = Server::start(&p, &["--http", "127.0.0.1:0"]).unwrap();
    let auth = bearer(&server.token());
    let open = || HttpSession::new(server.tcp(), &[("Authorization", &auth)]).initialize();
    assert_eq!((open().status, open().status), (200, 200));
    assert_eq!(open().status, 503);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(open().status, 200, "the idle sessions were closed");
}

/// A declared body over 4 MiB is refused before it is read (413,
/// `mcp.body_too_large`); a chunked one is cut off at the limit (413).
#[test]
fn an_oversized_body_is_refused() {
    let p = project("");
    let server = Server::start(&p, &["--http", "127.0.0.1:0"]).unwrap();
    let token = server.token();
    let declared = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\n\r\n",
        5 << 20
    );
    let answer = String::from_utf8_lossy(&server.tcp().exchange(declared.as_bytes())).into_owned();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("mcp.body_too_large"), "{answer}");

    let mut chunked = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    let chunk = vec![b' '; 64 << 10];
    for _ in 0..65 {
        chunked.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        chunked.extend_from_slice(&chunk);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let answer = String::from_utf8_lossy(&server.tcp().exchange(&chunked)).into_owned();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // The server still serves.
    let auth = bearer(&token);
    assert_eq!(HttpSession::new(server.tcp(), &[("Authorization", &auth)]).initialize().status, 200);
}

/// A call over HTTP is made as `[mcp] token_principal` whatever the body
/// says: with a policy that permits only "alice", the token of a server
/// configured for alice reads, one configured for bob is denied even when
/// its request names alice.
#[test]
fn the_principal_of_an_http_call_is_the_token_principal_never_the_body() {
    let alice = with_policy("[mcp]\ntoken_principal = \"alice\"\n");
    let server = Server::start(&alice, &["--http", "127.0.0.1:0"]).unwrap();
    let auth = bearer(&server.token());
    let mut s = HttpSession::new(server.tcp(), &[("Authorization", &auth)]);
    assert_eq!(s.initialize().status, 200);
    let r = s.call("read_file", json!({"path": "data/notes.txt"}));
    assert_eq!(r["isError"], false, "{r}");

    let bob = with_policy("[mcp]\ntoken_principal = \"bob\"\n");
    bob.write("data/notes.txt", CANARY);
    let server = Server::start(&bob, &["--http", "127.0.0.1:0"]).unwrap();
    let auth = bearer(&server.token());
    let mut s = HttpSession::new(server.tcp(), &[("Authorization", &auth)]);
    assert_eq!(s.initialize().status, 200);
    let smuggled = s.request(
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "data/notes.txt"},
               "_meta": {"principal": "alice", "airlock/principal": "alice"}}),
    );
    let r = smuggled.json()["result"].clone();
    assert_eq!(r["isError"], true, "{smuggled}");
    assert_eq!(r["structuredContent"]["error"]["code"], "policy.denied", "{r}");
    assert!(!String::from_utf8_lossy(&smuggled.body).contains(CANARY));
}

/// A private directory for a socket.
fn socket_dir(mode: u32) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("airlock-sock-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    dir
}

fn me() -> u32 {
    std::fs::metadata("/proc/self").unwrap().uid()
}

/// Over `--unix`, the peer's uid is its identity: a mapped uid makes calls
/// as its principal (the alice-only policy permits it), the socket is 0600
/// when only the server's own uid is mapped, and an unmapped uid is refused
/// (403, `mcp.peer_unmapped`) with no session.
#[test]
fn a_unix_socket_peer_is_its_mapped_principal_and_an_unmapped_one_is_refused() {
    let dir = socket_dir(0o700);
    let sock = dir.path().join("mcp.sock");
    let p = with_policy(&format!("[mcp.principals]\n{} = \"alice\"\n", me()));
    let server = Server::start(&p, &["--unix", sock.to_str().unwrap()]).unwrap();
    assert_eq!(server.address, sock.to_str().unwrap());
    assert_eq!(std::fs::metadata(&sock).unwrap().mode() & 0o777, 0o600);
    let ep = Endpoint::Unix { path: sock.clone(), as_nobody: false };
    let mut s = HttpSession::new(ep, &[]);
    assert_eq!(s.initialize().status, 200);
    let r = s.call("read_file", json!({"path": "data/notes.txt"}));
    assert_eq!(r["isError"], false, "{r}");
    assert!(server.stop().success());
    assert!(!sock.exists(), "the socket goes with the server");

    let other = if me() == 4242 { 4243 } else { 4242 };
    let q = project(&format!("[mcp.principals]\n{other} = \"other\"\n"));
    let server = Server::start(&q, &["--unix", sock.to_str().unwrap()]).unwrap();
    assert_eq!(std::fs::metadata(&sock).unwrap().mode() & 0o777, 0o666, "other uids are mapped");
    let answer = HttpSession::new(Endpoint::Unix { path: sock.clone(), as_nobody: false }, &[]).initialize();
    assert_eq!((answer.status, answer.reason().as_str()), (403, "mcp.peer_unmapped"), "{answer}");
    assert!(answer.json()["error"]["message"].as_str().unwrap().contains(&me().to_string()), "{answer}");
    drop(server);

    // A directory others can write to is refused: they could swap the socket.
    let open = socket_dir(0o777);
    let run = q.run(&["mcp", "--unix", open.path().join("s").to_str().unwrap()]);
    assert_eq!((run.reason(), run.code), ("mcp.socket_unsafe", 78), "{run:#?}");
}

/// As root: uid 65534, unmapped, reaches a socket that other uids may use
/// and is refused by the mapping; mapped, it makes calls as its own
/// principal; and a socket only root is mapped on is closed to it.
#[test]
fn uid_65534_on_the_socket_is_refused_unless_mapped() {
    if !is_root() {
        eprintln!("skipped: not root (cannot connect as uid 65534)");
        return;
    }
    if !std::process::Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: setpriv is not installed");
        return;
    }
    let dir = socket_dir(0o711);
    let sock = dir.path().join("mcp.sock");
    let nobody = Endpoint::Unix { path: sock.clone(), as_nobody: true };

    let p = with_policy("[mcp.principals]\n0 = \"alice\"\n4242 = \"other\"\n");
    p.write("data/notes.txt", CANARY);
    let server = Server::start(&p, &["--unix", sock.to_str().unwrap()]).unwrap();
    let answer = HttpSession::new(nobody.clone(), &[]).initialize();
    assert_eq!((answer.status, answer.reason().as_str()), (403, "mcp.peer_unmapped"), "{answer}");
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "read_file", "arguments": {"path": "data/notes.txt"}}});
    let mut headers: Vec<(&str, &str)> = MCP_POST.to_vec();
    headers.push(("Mcp-Session-Id", "guessed"));
    let answer = nobody.send("POST", "/mcp", &headers, call.to_string().as_bytes());
    assert_eq!(answer.status, 403, "{answer}");
    assert!(!String::from_utf8_lossy(&answer.body).contains(CANARY));
    // Root, mapped to alice, is served.
    let mut root = HttpSession::new(Endpoint::Unix { path: sock.clone(), as_nobody: false }, &[]);
    assert_eq!(root.initialize().status, 200);
    assert_eq!(root.call("read_file", json!({"path": "data/notes.txt"}))["isError"], false);
    drop(server);

    let q = with_policy("[mcp.principals]\n65534 = \"alice\"\n");
    let server = Server::start(&q, &["--unix", sock.to_str().unwrap()]).unwrap();
    let mut s = HttpSession::new(nobody.clone(), &[]);
    assert_eq!(s.initialize().status, 200);
    let r = s.call("read_file", json!({"path": "data/notes.txt"}));
    assert_eq!(r["isError"], false, "uid 65534 calls as alice: {r}");
    drop(server);

    let only_root = project("[mcp.principals]\n0 = \"ops\"\n");
    let _server = Server::start(&only_root, &["--unix", sock.to_str().unwrap()]).unwrap();
    let refused = crate::httpkit::nobody_exchange(&sock, &initialize_body());
    assert_eq!(String::from_utf8_lossy(&refused), "CONNECT-ERRNO 13", "the 0600 socket is closed to uid 65534");
}
