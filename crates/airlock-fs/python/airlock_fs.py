"""airlock_fs: read, write and list the named roots airlock grants this worker.

Inside an isolated worker, descriptor 3 (named by ``AIRLOCK_FS_FD``) is a
connected socket to airlock. Every call sends one frame (a big-endian u32
length, then one compact UTF-8 JSON object) and receives one back; the
frames that carry file bytes (a write, an append, a read's answer) are data
frames: the byte 0x01, a big-endian u16 header length, the JSON header,
then the bytes raw::

    import airlock_fs
    text = airlock_fs.read("data", "message.txt")        # the whole file
    head = airlock_fs.read("data", "message.txt", 4096)  # at most 4096 bytes
    airlock_fs.write("results", "copy.txt", text)        # any size
    listing = airlock_fs.list("data", ".")
    for name, kind in zip(listing.names, listing.kinds): ...
    listing.truncated, listing.skipped

A read streams the file in frames of at most 64 KiB, each after the first
sending the first frame's ``version``: a file that grows, shrinks or is
replaced meanwhile raises ``FsError`` (``broker.changed``), as does a budget
that ends first (``broker.budget``); a read never returns a silently short
file. A write of more than one frame is a chunked write, named only at its
commit. The frames after a read's first, and a chunked write's appends,
keep up to the window (``AIRLOCK_FS_WINDOW``, airlock's ``outstanding``
budget) in flight; every answer is taken before the call returns. No
deadlock: a read's requests and an append's answers are small, so the
direction not drained while a frame is sent holds at most a window of
small frames.

A refused or failed call raises ``FsError`` with ``.code`` (``broker.denied``,
``broker.not_found``, ``path.traversal``, ...) and ``.message``. Transport
failures use ``broker.io`` (no socket, or it failed) and ``broker.protocol``
(a malformed or mismatched frame, or a request too large to frame); after
one of those the connection is unusable.

Standard library only; Python 3.8 or later. Calls are made one at a time
(but for the frames in flight of one read or write), and processes sharing
the socket must take turns.
"""

import builtins
import collections
import io
import json
import os
import socket
import struct
import time

__all__ = ["FsError", "Listing", "read", "write", "list", "list_dir", "MAX_IO_BYTES", "MAX_LIST_NAMES"]

#: Most bytes of one frame body (either direction).
MAX_FRAME = 96 * 1024
#: Most bytes one read or write moves (airlock enforces it).
MAX_IO_BYTES = 65536
#: Most names one list returns (airlock enforces it).
MAX_LIST_NAMES = 256
#: The environment variable naming the socket's descriptor.
ENV_FD = "AIRLOCK_FS_FD"
#: The environment variable giving the window: how many requests may be
#: sent and not yet answered (absent or not a positive number: 1).
ENV_WINDOW = "AIRLOCK_FS_WINDOW"
#: The first byte of a data frame's body.
DATA_TAG = 0x01
#: The largest data frame header: what a full payload leaves of a frame.
MAX_DATA_HEADER = MAX_FRAME - MAX_IO_BYTES - 3

_PROTOCOL = "broker.protocol"
_IO = "broker.io"
_CHANGED = "broker.changed"
_READ_GROUP = frozenset(("size", "eof", "version"))
_LIST_GROUP = frozenset(("names", "kinds", "skipped", "truncated"))
_RESPONSE_FIELDS = _READ_GROUP | _LIST_GROUP | frozenset(("id", "written", "stream", "aborted", "error"))
_KINDS = frozenset(["file", "dir", "link", "other"])

#: A listing: ``names`` (sorted by bytes), ``kinds`` (``file``, ``dir``,
#: ``link`` or ``other``, one per name), ``skipped`` (entries whose names
#: break the path rules) and ``truncated`` (more names than ``maximum``).
Listing = collections.namedtuple("Listing", ["names", "kinds", "skipped", "truncated"])


class FsError(Exception):
    """A refused or failed operation: ``code`` (stable) and ``message``."""

    def __init__(self, code, message):
        super().__init__("{}: {}".format(code, message))
        self.code = code
        self.message = message


class _Connection:
    """The socket, the last call id and whether the exchange broke."""

    def __init__(self):
        self.sock = None
        self.last_id = 0
        self.broken = False
        self.window = _window(os.environ.get(ENV_WINDOW))

    def open(self):
        if self.sock is not None:
            return self.sock
        raw = os.environ.get(ENV_FD)
        if raw is None:
            raise FsError(_IO, "{} is not set: not running in an isolated worker".format(ENV_FD))
        if not (raw.isascii() and raw.isdigit()):
            raise FsError(_IO, "{}={!r} is not a descriptor number".format(ENV_FD, raw))
        try:
            # A duplicate (not inheritable): the original number stays open
            # for child processes such as `airlock-fs` commands.
            self.sock = socket.socket(fileno=os.dup(int(raw)))
        except OSError as e:
            raise FsError(_IO, "descriptor {} from {}: {}".format(raw, ENV_FD, e)) from None
        return self.sock

    def next_id(self):
        # Strictly increasing across every process sharing the socket:
        # CLOCK_MONOTONIC nanoseconds, the clock the Rust client reads too.
        self.last_id = max(self.last_id + 1, time.monotonic_ns())
        return self.last_id

    def fail(self, code, message):
        self.broken = True
        return FsError(code, message)

    def call(self, request, data=None):
        """Sends ``request`` (without its id; in a data frame with ``data``)
        and returns the fields of its answer, which carries no data."""
        return self.exchange(request, data)[0]

    def exchange(self, request, data=None):
        """Sends ``request`` (without its id; in a data frame with ``data``,
        bytes-like) and returns the answer's fields and the payload of its
        data frame (``None`` for a message)."""
        return self.receive(self.send(request, data))

    def send(self, request, data=None):
        """Sends ``request`` with the next id (in a data frame with
        ``data``: its head and the payload in one ``sendmsg``); returns the id."""
        if self.broken:
            raise FsError(_PROTOCOL, "the connection failed earlier and is unusable")
        sock = self.open()
        ident = self.next_id()
        message = {"id": ident}
        message.update(request)
        # The same bytes serde_json writes: compact, keys in declaration
        # order, non-ASCII as UTF-8, control characters as lower-case \u00xx.
        header = _ENCODER.encode(message).encode("utf-8")
        if data is None:
            size, parts = len(header), (struct.pack(">I", len(header)), header)
        else:
            size = 3 + len(header) + len(data)
            parts = (struct.pack(">IBH", size, DATA_TAG, len(header) & 0xFFFF), header, data)
        if size > MAX_FRAME or (data is not None and (len(header) > MAX_DATA_HEADER or len(data) > MAX_IO_BYTES)):
            raise FsError(
                _PROTOCOL,
                "the {} request is {} bytes, over the {}-byte frame limit".format(request["op"], size, MAX_FRAME),
            )
        try:
            self._send_all(sock, parts)
        except OSError as e:
            raise self.fail(_IO, "sending call {}: {}".format(ident, e)) from None
        return ident

    def receive(self, ident, into=None):
        """The next answer, which must be to the call ``ident``: its fields
        and its data frame's payload (``None`` for a message). With
        ``into`` (a writable memoryview), a data frame's payload is received
        straight into it and the payload returned is the part it filled;
        a payload longer than ``into`` is a protocol failure."""
        sock = self.open()
        try:
            head = self._recv_exact(sock, 4)
            (length,) = struct.unpack(">I", head)
            if length > MAX_FRAME:
                raise self.fail(_PROTOCOL, "frame of {} bytes exceeds the {}-byte limit".format(length, MAX_FRAME))
            if into is None or length < 3:
                response, payload = self._decode(self._recv_exact(sock, length))
            else:
                response, payload = self._receive_data(sock, length, into)
        except OSError as e:
            raise self.fail(_IO, "exchanging call {}: {}".format(ident, e)) from None
        if response["id"] != ident:
            raise self.fail(_PROTOCOL, "answer to call {} arrived for call {}".format(response["id"], ident))
        error = response.get("error")
        if error is not None:
            raise FsError(error["code"], error["message"])
        return response, payload

    def _receive_data(self, sock, length, into):
        """A frame body of ``length`` bytes (at least 3): a message, or a
        data frame whose payload is received into ``into``, checked as
        ``_split`` checks it before anything is placed."""
        start = self._recv_exact(sock, 3)
        if start[0] != DATA_TAG:
            return self._decode(start + self._recv_exact(sock, length - 3))
        (size,) = struct.unpack_from(">H", start, 1)
        if size > MAX_DATA_HEADER or size > length - 3:
            raise self.fail(_PROTOCOL, "a data frame's header length of {} does not fit the frame".format(size))
        header = self._recv_exact(sock, size)
        n = length - 3 - size
        if n > MAX_IO_BYTES:
            raise self.fail(_PROTOCOL, "a data frame of {} bytes is over {}".format(n, MAX_IO_BYTES))
        if n > len(into):
            raise self.fail(_PROTOCOL, "{} bytes answered a read of at most {}".format(n, len(into)))
        payload = into[:n]
        self._recv_into(sock, payload)
        return self._parse(header, payload), payload

    @staticmethod
    def _send_all(sock, parts):
        parts = [memoryview(p).cast("B") for p in parts if len(p)]
        while parts:
            sent = sock.sendmsg(parts)
            while parts and sent >= len(parts[0]):
                sent -= len(parts[0])
                parts.pop(0)
            if parts and sent:
                parts[0] = parts[0][sent:]

    def _recv_exact(self, sock, n):
        buf = bytearray(n)
        self._recv_into(sock, memoryview(buf))
        return buf

    def _recv_into(self, sock, view):
        """Fills ``view`` from the socket (usually in one ``recv``)."""
        n, got = len(view), 0
        while got < n:
            k = sock.recv_into(view[got:] if got else view, n - got, socket.MSG_WAITALL)
            if not k:
                raise self.fail(_IO, "airlock closed the connection before answering")
            got += k

    def _split(self, body):
        """A frame body as its JSON bytes and the payload of a data frame
        (``None`` for a message), strictly."""
        if body[:1] != bytes([DATA_TAG]):
            return body, None
        if len(body) < 3:
            raise self.fail(_PROTOCOL, "a data frame ends inside its header length")
        (length,) = struct.unpack_from(">H", body, 1)
        if length > MAX_DATA_HEADER or length > len(body) - 3:
            raise self.fail(_PROTOCOL, "a data frame's header length of {} does not fit the frame".format(length))
        payload = memoryview(body)[3 + length :]
        if len(payload) > MAX_IO_BYTES:
            raise self.fail(_PROTOCOL, "a data frame of {} bytes is over {}".format(len(payload), MAX_IO_BYTES))
        return body[3 : 3 + length], payload

    def _decode(self, body):
        header, payload = self._split(body)
        return self._parse(header, payload), payload

    def _parse(self, header, payload):
        """The answer's fields, from its JSON (a data frame's header with
        ``payload``), checked strictly."""
        try:
            response = _DECODER.decode(header.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise self.fail(_PROTOCOL, "malformed answer: {}".format(e)) from None
        if not isinstance(response, dict) or not response.keys() <= _RESPONSE_FIELDS:
            raise self.fail(_PROTOCOL, "malformed answer: unknown fields")
        if not _is_u64(response.get("id")):
            raise self.fail(_PROTOCOL, "malformed answer: no id")
        keys = response.keys()
        error = response.get("error")
        read_all = payload is not None and keys >= _READ_GROUP
        list_all = keys >= _LIST_GROUP
        groups = [
            read_all,
            "written" in response,
            list_all,
            "stream" in response,
            "aborted" in response,
            error is not None,
        ]
        partial = (not read_all and (payload is not None or not keys.isdisjoint(_READ_GROUP))) or (
            not list_all and not keys.isdisjoint(_LIST_GROUP)
        )
        if sum(groups) != 1 or partial:
            raise self.fail(_PROTOCOL, "an answer must hold exactly one result or an error")
        if error is not None and not (
            isinstance(error, dict)
            and set(error) == {"code", "message"}
            and isinstance(error["code"], str)
            and isinstance(error["message"], str)
        ):
            raise self.fail(_PROTOCOL, "malformed error in the answer")
        return response


def _pairs(items):
    """A JSON object's fields, refusing a field given twice."""
    fields = dict(items)
    if len(fields) != len(items):
        seen = set()
        twice = next(key for key, _ in items if key in seen or seen.add(key))
        raise ValueError("duplicate field {!r}".format(twice))
    return fields


# Made once (json.dumps and json.loads with options make one per call).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_DECODER = json.JSONDecoder(object_pairs_hook=_pairs)


def _window(raw):
    """The window ``AIRLOCK_FS_WINDOW`` allows: a decimal number of at least
    1, else 1 (the same rule as the Rust client)."""
    if raw and len(raw) <= 4 and raw.isascii() and raw.isdigit() and int(raw) >= 1:
        return int(raw)
    return 1


def _is_u64(value):
    return type(value) is int and 0 <= value < 2**64


_connection = _Connection()


def _check_args(root, path):
    if not isinstance(root, str) or not isinstance(path, str):
        raise TypeError("root and path must be str")


def _check_max(maximum):
    if type(maximum) is not int or not 0 <= maximum < 2**64:
        raise TypeError("maximum must be a non-negative int")


def _read_request(root, path, offset, maximum, version):
    request = {"op": "read", "root": root, "path": path, "max": maximum}
    if offset:
        request["offset"] = offset
    if version is not None:
        request["version"] = version
    return request


def _read_frame(conn, root, path, offset, maximum, version):
    return _take_frame(conn, conn.send(_read_request(root, path, offset, maximum, version)), maximum)


def _take_frame(conn, ident, maximum, into=None):
    r, data = conn.receive(ident, into)
    ok = (
        data is not None
        and _is_u64(r.get("size"))
        and isinstance(r.get("eof"), bool)
        and isinstance(r.get("version"), str)
    )
    if not ok:
        raise conn.fail(_PROTOCOL, "a read was answered without data")
    if len(data) > maximum:
        raise conn.fail(_PROTOCOL, "{} bytes answered a read of at most {}".format(len(data), maximum))
    return data, r["size"], r["eof"], r["version"]


def read(root, path, maximum=None, offset=0):
    """Reads the regular file ``path`` in ``root``: all of it, or at most
    ``maximum`` bytes, from ``offset``; streamed in frames of 64 KiB.

    Raises ``FsError`` (``broker.changed``) if the file changes between
    frames, and whatever a budget or refusal ends the read with: the bytes
    returned are always one version of the file.
    """
    _check_args(root, path)
    if maximum is not None:
        _check_max(maximum)
    _check_max(offset)
    conn = _connection
    want = MAX_IO_BYTES if maximum is None else min(maximum, MAX_IO_BYTES)
    data, size, eof, version = _read_frame(conn, root, path, offset, want, None)
    if eof or len(data) == maximum:
        return bytes(data)
    if len(data) < want:
        raise conn.fail(_PROTOCOL, "a read of {} bytes got {} before the end".format(want, len(data)))
    # The rest: [offset + len(data), end), up to the window in flight, each
    # frame received straight into its place in one buffer of the whole.
    end = size if maximum is None else min(size, offset + maximum)
    # A bytes object of the final size, written through the BytesIO that
    # owns it: getvalue() then returns that object itself, not a copy (a
    # bytearray would be copied once more into the bytes returned).
    whole = io.BytesIO(bytes(end - offset))
    pending = collections.deque()
    try:
        with whole.getbuffer() as view:
            view[: len(data)] = data
            pos = nxt = offset + len(data)
            while pos < end:
                while len(pending) < conn.window and nxt < end:
                    want = min(end - nxt, MAX_IO_BYTES)
                    pending.append((conn.send(_read_request(root, path, nxt, want, version)), want))
                    nxt += want
                ident, want = pending.popleft()
                at = pos - offset
                got, now, _, _ = _take_frame(conn, ident, want, view[at : at + want])
                if now != size:
                    raise FsError(_CHANGED, "{}:{} was {} bytes, now {}".format(root, path, size, now))
                if len(got) < want:
                    raise conn.fail(_PROTOCOL, "a read of {} bytes got {} before the end".format(want, len(got)))
                got.release()
                pos += want
    finally:
        if pending:
            # Answers left unread: the connection is out of step.
            conn.broken = True
    return whole.getvalue()


def write(root, path, data):
    """Creates or replaces the regular file ``path`` in ``root`` with ``data``
    (bytes, any size): one frame up to 64 KiB, else a chunked write that is
    named only when all of it arrived."""
    _check_args(root, path)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError("data must be bytes")
    data = memoryview(bytes(data))
    conn = _connection
    if len(data) < MAX_IO_BYTES:
        r = conn.call({"op": "write", "root": root, "path": path}, data)
        _expect_written(conn, r, len(data))
        return
    r = conn.call({"op": "write_open", "root": root, "path": path})
    stream = r.get("stream")
    if not _is_u64(stream):
        raise conn.fail(_PROTOCOL, "a write_open was answered without a stream")
    pending = collections.deque()
    try:
        for start in range(0, len(data), MAX_IO_BYTES):
            if len(pending) >= conn.window:
                ident, want = pending.popleft()
                _expect_written(conn, conn.receive(ident)[0], want)
            chunk = data[start : start + MAX_IO_BYTES]
            request = {"op": "write_append", "root": root, "path": path, "stream": stream}
            pending.append((conn.send(request, chunk), start + len(chunk)))
        while pending:
            ident, want = pending.popleft()
            _expect_written(conn, conn.receive(ident)[0], want)
    finally:
        if pending:
            # Answers left unread: the connection is out of step.
            conn.broken = True
    r = conn.call({"op": "write_commit", "root": root, "path": path, "stream": stream})
    _expect_written(conn, r, len(data))


def _expect_written(conn, r, want):
    if r.get("written") != want or not _is_u64(r.get("written")):
        raise conn.fail(_PROTOCOL, "a write of {} bytes was answered with {!r}".format(want, r.get("written")))


def list_dir(root, path=".", maximum=MAX_LIST_NAMES):
    """Lists at most ``maximum`` names of the directory ``path`` in ``root``.

    Returns a ``Listing`` (``names``, ``kinds``, ``skipped``, ``truncated``).
    """
    _check_args(root, path)
    _check_max(maximum)
    conn = _connection
    r = conn.call({"op": "list", "root": root, "path": path, "max": maximum})
    names, kinds, skipped, truncated = r.get("names"), r.get("kinds"), r.get("skipped"), r.get("truncated")
    ok = (
        isinstance(names, builtins.list)
        and all(isinstance(n, str) for n in names)
        and isinstance(kinds, builtins.list)
        and len(kinds) == len(names)
        and all(k in _KINDS for k in kinds)
        and _is_u64(skipped)
        and isinstance(truncated, bool)
        and len(names) <= maximum
    )
    if not ok:
        raise conn.fail(_PROTOCOL, "a list was answered without valid names")
    return Listing(names, kinds, skipped, truncated)


#: The same as ``list_dir`` (this name hides the built-in ``list`` inside the module).
list = list_dir
