//! The Kubernetes protobuf wire format, read by hand: what a list or watch of Pods, Nodes or
//! Leases answers with `Accept: application/vnd.kubernetes.protobuf`. Only the reading side,
//! and only the envelopes; the kinds themselves are decoded in `proto_kinds`
//! ([`super::WirePod::from_protobuf`], ...).
//!
//! Hand-written rather than generated (no protoc, no prost): the reader hands out sub-slices of
//! the body, so a field the cache does not read costs a varint and a pointer bump, and a kind's
//! decoder can note a bad field for its one object ([`super::lenient`]) instead of failing the
//! page it came in.
//!
//! The shapes, as the API server writes them:
//! - A body (a list, a single object, an error `Status`): the prefix [`MAGIC`] `k8s\0`, then a
//!   `runtime.Unknown` whose `raw` is the object's own message (apimachinery
//!   `pkg/runtime/serializer/protobuf/protobuf.go`, `protoEncodingPrefix` and `Serializer.doEncode`;
//!   `pkg/runtime/generated.proto`): [`unknown`].
//! - A list's `raw`: `{ ListMeta metadata = 1; repeated <Kind> items = 2; }` (core/v1 and
//!   coordination/v1 `generated.proto`; apiserver `handlers/responsewriters` streams the same
//!   bytes): [`list`].
//! - A watch stream (`application/vnd.kubernetes.protobuf;stream=watch`): frames of a 4-byte
//!   big-endian length and a bare `metav1.WatchEvent` (no prefix, no `Unknown`: the raw
//!   serializer), whose `object.raw` is again a prefixed `Unknown` (apimachinery
//!   `pkg/util/framer/framer.go` `lengthDelimitedFrameWriter`, apiserver `handlers/watch.go`,
//!   client-go `rest/watch/decoder.go`): [`Framer`], [`watch_event`].
//! - Errors and watch `ERROR` events: a `metav1.Status` ([`status`]).
//!
//! Wire facts (protobuf encoding spec; gogo's generated `Unmarshal`s in apimachinery): a tag is a
//! varint `number << 3 | wire type`; wire types 0 (varint), 1 (fixed64), 2 (length-delimited),
//! 5 (fixed32); 3 and 4 (groups) never occur in Kubernetes messages and are malformed here; a
//! varint is at most 10 bytes. PURE.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube_core::response::{Status, StatusCause, StatusDetails, StatusSummary};
use std::borrow::Cow;

/// The prefix of every protobuf body: `k8s\0` (apimachinery
/// `pkg/runtime/serializer/protobuf/protobuf.go`, `protoEncodingPrefix`).
pub const MAGIC: [u8; 4] = *b"k8s\x00";

/// The largest watch frame accepted: client-go's cap (apimachinery
/// `pkg/runtime/serializer/streaming/streaming.go`, 16 MiB), so that a corrupt length never
/// makes the reader buffer gigabytes.
pub const MAX_FRAME: usize = 16 << 20;

/// The annotation of the bookmark that ends a streaming list's initial events (apimachinery
/// `pkg/apis/meta/v1/types.go`, `InitialEventsAnnotationKey`).
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Why a body, frame or message could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("a protobuf message ends inside a field")]
    Truncated,
    #[error("a protobuf varint longer than 10 bytes")]
    LongVarint,
    #[error("a protobuf tag with field number {0}")]
    BadField(u64),
    #[error("protobuf wire type {0} (a group or invalid) in field {1}")]
    BadWireType(u8, u32),
    #[error("field {field} of {what}: expected {expected}, got wire type {got}")]
    WrongType { what: &'static str, field: u32, expected: &'static str, got: u8 },
    #[error("field {field} of {what} is not UTF-8")]
    NotUtf8 { what: &'static str, field: u32 },
    #[error("the body does not start with the protobuf prefix k8s\\0")]
    NoMagic,
    #[error("a watch frame of {0} bytes, over the {MAX_FRAME}-byte limit")]
    FrameTooLarge(usize),
    #[error("a list item of {0} bytes, over the {MAX_FRAME}-byte limit")]
    ItemTooLarge(u64),
    #[error("a list body with a second raw field")]
    SecondRaw,
}

/// One field's value, by wire type. `Len` borrows the bytes (a string, bytes, a message, or a
/// packed list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Len(&'a [u8]),
    Fixed32(u32),
}

impl<'a> Value<'a> {
    /// The wire type this value came with.
    pub fn wire_type(&self) -> u8 {
        match self {
            Value::Varint(_) => 0,
            Value::Fixed64(_) => 1,
            Value::Len(_) => 2,
            Value::Fixed32(_) => 5,
        }
    }

    /// A length-delimited value (string, bytes, message), or the error naming the field.
    pub fn len(self, what: &'static str, field: u32, expected: &'static str) -> Result<&'a [u8], Error> {
        match self {
            Value::Len(b) => Ok(b),
            other => Err(Error::WrongType { what, field, expected, got: other.wire_type() }),
        }
    }

    /// A UTF-8 string. gogo does not check UTF-8 (and Go's JSON encoder would replace bad bytes
    /// with U+FFFD); here bad UTF-8 is an error, which a kind's decoder notes as its object's
    /// problem, as the JSON path notes a field of the wrong type.
    pub fn str(self, what: &'static str, field: u32) -> Result<&'a str, Error> {
        let b = self.len(what, field, "a string")?;
        std::str::from_utf8(b).map_err(|_| Error::NotUtf8 { what, field })
    }

    /// A string as Go's JSON encoder would write it ([`go_lossy`]): never an error for its bytes.
    pub fn str_lossy(self, what: &'static str, field: u32) -> Result<std::borrow::Cow<'a, str>, Error> {
        let b = self.len(what, field, "a string")?;
        Ok(match std::str::from_utf8(b) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            Err(_) => std::borrow::Cow::Owned(go_lossy(b)),
        })
    }

    /// A varint (int32, int64, bool, enum), as its raw 64 bits.
    pub fn varint(self, what: &'static str, field: u32) -> Result<u64, Error> {
        match self {
            Value::Varint(n) => Ok(n),
            other => Err(Error::WrongType { what, field, expected: "a varint", got: other.wire_type() }),
        }
    }
}

/// Reads a varint at the start of `buf`: its value and length. Like gogo's generated code, at
/// most 10 bytes, the bits past 64 dropped.
fn varint(buf: &[u8]) -> Result<(u64, usize), Error> {
    let mut value: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok((value, i + 1));
        }
    }
    if buf.len() >= 10 { Err(Error::LongVarint) } else { Err(Error::Truncated) }
}

/// The fields of one message, in the order written. Yields each `(number, value)`; after the
/// first malformed field, that error and then nothing. Nothing is copied. Callers must not rely
/// on order: protobuf allows any, a repeated field may be split, and of a non-repeated field
/// written twice the last one counts.
#[derive(Clone, Debug)]
pub struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    pub fn new(msg: &'a [u8]) -> Self {
        Self { rest: msg }
    }

    fn read(&mut self) -> Result<(u32, Value<'a>), Error> {
        let (tag, n) = varint(self.rest)?;
        let rest = &self.rest[n..];
        let number = tag >> 3;
        // Field numbers are 1..2^29-1 (protobuf spec); gogo refuses 0 and negatives as int32.
        let field = match u32::try_from(number) {
            Ok(f) if (1..1 << 29).contains(&f) => f,
            _ => return Err(Error::BadField(number)),
        };
        let (value, used) = match tag & 7 {
            0 => {
                let (v, used) = varint(rest)?;
                (Value::Varint(v), used)
            }
            1 => {
                let b: [u8; 8] = rest.get(..8).and_then(|b| b.try_into().ok()).ok_or(Error::Truncated)?;
                (Value::Fixed64(u64::from_le_bytes(b)), 8)
            }
            2 => {
                let (len, used) = varint(rest)?;
                let end = usize::try_from(len).ok().and_then(|len| used.checked_add(len)).ok_or(Error::Truncated)?;
                (Value::Len(rest.get(used..end).ok_or(Error::Truncated)?), end)
            }
            5 => {
                let b: [u8; 4] = rest.get(..4).and_then(|b| b.try_into().ok()).ok_or(Error::Truncated)?;
                (Value::Fixed32(u32::from_le_bytes(b)), 4)
            }
            // The cast is exact: `tag & 7` is below 8.
            wt => return Err(Error::BadWireType(wt as u8, field)),
        };
        self.rest = &rest[used..];
        Ok((field, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let field = self.read();
        if field.is_err() {
            self.rest = &[];
        }
        Some(field)
    }
}

/// A body's `runtime.Unknown`: the object's `apiVersion` and `kind` (its `TypeMeta`, field 1:
/// `apiVersion = 1, kind = 2`) and `raw` (field 2), the object's own message. `contentEncoding`
/// and `contentType` (3, 4) are left empty by the server and not read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unknown<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub raw: &'a [u8],
}

/// Reads a whole protobuf body: checks the `k8s\0` prefix, then reads the `runtime.Unknown`
/// after it (apimachinery `pkg/runtime/serializer/protobuf/protobuf.go`, `Serializer.Decode`).
pub fn unknown(body: &[u8]) -> Result<Unknown<'_>, Error> {
    let msg = body.strip_prefix(&MAGIC).ok_or(Error::NoMagic)?;
    let mut out = Unknown::default();
    for field in Fields::new(msg) {
        match field? {
            (1, v) => (out.api_version, out.kind) = type_meta(v.len("runtime.Unknown", 1, "TypeMeta")?)?,
            (2, v) => out.raw = v.len("runtime.Unknown", 2, "bytes")?,
            _ => {}
        }
    }
    Ok(out)
}

/// A `TypeMeta` (`apiVersion = 1, kind = 2`).
fn type_meta(msg: &[u8]) -> Result<(&str, &str), Error> {
    let (mut api_version, mut kind) = ("", "");
    for f in Fields::new(msg) {
        match f? {
            (1, v) => api_version = v.str("TypeMeta", 1)?,
            (2, v) => kind = v.str("TypeMeta", 2)?,
            _ => {}
        }
    }
    Ok((api_version, kind))
}

/// A `metav1.ListMeta` (`selfLink = 1, resourceVersion = 2, continue = 3,
/// remainingItemCount = 4`), as its JSON reads: the strings are `omitempty` (empty: `None`),
/// `remainingItemCount` a pointer (present: `Some`, even 0).
fn list_meta(msg: &[u8]) -> Result<ListMeta, Error> {
    const WHAT: &str = "ListMeta";
    let mut m = ListMeta::default();
    for field in Fields::new(msg) {
        match field? {
            (2, v) => m.resource_version = Some(v.str(WHAT, 2)?.to_owned()),
            (3, v) => m.continue_ = Some(v.str(WHAT, 3)?.to_owned()),
            // int64: the varint's bits as two's complement.
            (4, v) => m.remaining_item_count = Some(v.varint(WHAT, 4)? as i64),
            _ => {}
        }
    }
    m.resource_version = m.resource_version.filter(|s| !s.is_empty());
    m.continue_ = m.continue_.filter(|s| !s.is_empty());
    Ok(m)
}

/// Reads a list's `raw` (a `PodList`, `NodeList` or `LeaseList`: `metadata = 1, items = 2`):
/// its `ListMeta` and each item's message, in order, uncopied. Only the list's own framing is
/// checked here; each item is decoded (leniently) by its kind's decoder.
pub fn list(raw: &[u8]) -> Result<(ListMeta, Vec<&[u8]>), Error> {
    let mut meta = ListMeta::default();
    let mut items = Vec::new();
    for field in Fields::new(raw) {
        match field? {
            (1, v) => meta = list_meta(v.len("a list", 1, "ListMeta")?)?,
            (2, v) => items.push(v.len("a list", 2, "an item")?),
            _ => {}
        }
    }
    Ok((meta, items))
}

/// Reads a list body as its bytes arrive: what [`unknown`] and [`list`] read from the whole body,
/// each item handed on as soon as all of it is in, so that a page of large objects is never held
/// at once (at most one item, up to [`MAX_FRAME`], and one chunk are buffered). Fields may come in
/// any order and in chunks cut anywhere; the one departure from the whole-body reading is that a
/// body with two `raw` fields (which gogo never writes: the last would count) is an error.
#[derive(Debug, Default)]
pub struct ListReader {
    buf: Vec<u8>,
    /// Where the unread bytes of `buf` start.
    start: usize,
    at: At,
    /// Bytes of a field not kept, still to be passed over.
    skip: u64,
    meta: ListMeta,
    raw_seen: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum At {
    #[default]
    Magic,
    /// The `runtime.Unknown`'s own fields.
    Envelope,
    /// Inside its `raw` (the list message), `left` bytes of which are still to come.
    List { left: u64 },
}

/// A field's head: its number and wire type, how many bytes the tag (and a length, or a
/// varint's value) take, and how many follow.
struct Head {
    field: u32,
    wire_type: u8,
    head: usize,
    len: u64,
}

/// The head of the field at the start of `buf`; `None` until all of it has arrived.
fn field_head(buf: &[u8]) -> Result<Option<Head>, Error> {
    let incomplete = |r: Result<(u64, usize), Error>| match r {
        Ok(v) => Ok(Some(v)),
        Err(Error::Truncated) => Ok(None),
        Err(e) => Err(e),
    };
    let Some((tag, n)) = incomplete(varint(buf))? else { return Ok(None) };
    let number = tag >> 3;
    let field = match u32::try_from(number) {
        Ok(f) if (1..1 << 29).contains(&f) => f,
        _ => return Err(Error::BadField(number)),
    };
    let rest = buf.get(n..).unwrap_or_default();
    // The cast is exact: `tag & 7` is below 8.
    let wire_type = (tag & 7) as u8;
    let (head, len) = match wire_type {
        0 => match incomplete(varint(rest))? {
            Some((_, used)) => (n + used, 0),
            None => return Ok(None),
        },
        1 => (n, 8),
        2 => match incomplete(varint(rest))? {
            Some((len, used)) => (n + used, len),
            None => return Ok(None),
        },
        5 => (n, 4),
        wt => return Err(Error::BadWireType(wt, field)),
    };
    Ok(Some(Head { field, wire_type, head, len }))
}

impl ListReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the next chunk of the body, calling `item` with each item whose bytes are all in.
    pub fn push(&mut self, chunk: &[u8], mut item: impl FnMut(&[u8])) -> Result<(), Error> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
        loop {
            let unread = self.buf.get(self.start..).unwrap_or_default();
            if self.skip > 0 {
                let n = usize::try_from(self.skip).map_or(unread.len(), |s| s.min(unread.len()));
                self.start += n;
                self.skip -= n as u64;
                if self.skip > 0 {
                    return Ok(());
                }
                continue;
            }
            let left = match self.at {
                At::Magic => {
                    let n = unread.len().min(MAGIC.len());
                    if unread.get(..n) != MAGIC.get(..n) {
                        return Err(Error::NoMagic);
                    }
                    if n < MAGIC.len() {
                        return Ok(());
                    }
                    self.start += n;
                    self.at = At::Envelope;
                    continue;
                }
                At::List { left: 0 } => {
                    self.at = At::Envelope;
                    continue;
                }
                At::List { left } => Some(left),
                At::Envelope => None,
            };
            if unread.is_empty() {
                return Ok(());
            }
            let Some(h) = field_head(unread)? else { return Ok(()) };
            let total = (h.head as u64).saturating_add(h.len);
            if left.is_some_and(|left| total > left) {
                return Err(Error::Truncated);
            }
            let what = if left.is_some() { "a list" } else { "runtime.Unknown" };
            let kept = match (left.is_some(), h.field) {
                (false, 2) if h.wire_type == 2 => {
                    if std::mem::replace(&mut self.raw_seen, true) {
                        return Err(Error::SecondRaw);
                    }
                    self.start += h.head;
                    self.at = At::List { left: h.len };
                    continue;
                }
                (false, 1 | 2) | (true, 1 | 2) => true,
                _ => false,
            };
            if kept && h.wire_type != 2 {
                let expected = match (left.is_some(), h.field) {
                    (false, 1) => "TypeMeta",
                    (false, _) => "bytes",
                    (true, 1) => "ListMeta",
                    (true, _) => "an item",
                };
                return Err(Error::WrongType { what, field: h.field, expected, got: h.wire_type });
            }
            if kept && h.len > MAX_FRAME as u64 {
                return Err(Error::ItemTooLarge(h.len));
            }
            // A kept field is at most MAX_FRAME and a head's few bytes: `total` fits.
            let end = if kept { h.head + h.len as usize } else { h.head };
            let Some(payload) = unread.get(h.head..end) else {
                // Not all in yet: the field is read again, whole, when it is.
                return Ok(());
            };
            if let At::List { left } = &mut self.at {
                *left -= total;
            }
            if !kept {
                self.start += h.head;
                self.skip = h.len;
                continue;
            }
            match (left.is_some(), h.field) {
                (false, _) => {
                    type_meta(payload)?;
                }
                (true, 1) => self.meta = list_meta(payload)?,
                (true, _) => item(payload),
            }
            self.start += end;
        }
    }

    /// The list's metadata, once the whole body has been read; an error if it ended early.
    pub fn finish(self) -> Result<ListMeta, Error> {
        match self.at {
            At::Magic => Err(Error::NoMagic),
            At::List { left } if left > 0 => Err(Error::Truncated),
            _ if self.skip > 0 || self.start < self.buf.len() => Err(Error::Truncated),
            _ => Ok(self.meta),
        }
    }
}

/// A `metav1.WatchEvent`: `type` (field 1: `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`)
/// and `object` (field 2, a `RawExtension` whose `raw = 1` is a prefixed body for [`unknown`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchEvent<'a> {
    pub type_: &'a str,
    pub object: &'a [u8],
}

/// Reads one watch frame's payload (what [`Framer::next_frame`] returns).
pub fn watch_event(frame: &[u8]) -> Result<WatchEvent<'_>, Error> {
    let mut out = WatchEvent::default();
    for field in Fields::new(frame) {
        match field? {
            (1, v) => out.type_ = v.str("WatchEvent", 1)?,
            (2, v) => {
                for f in Fields::new(v.len("WatchEvent", 2, "RawExtension")?) {
                    if let (1, v) = f? {
                        out.object = v.len("RawExtension", 1, "bytes")?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// What a `BOOKMARK` event's object says: its `metadata.resourceVersion` and whether it carries
/// the [`INITIAL_EVENTS_END`] annotation (`"true"`). The object is a Pod, Node or Lease with only
/// those set (apiserver `storage/cacher`); every kind has `metadata = 1`, and in `ObjectMeta`
/// `resourceVersion = 6`, `annotations = 12` (map entries `key = 1, value = 2`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bookmark {
    pub resource_version: Option<String>,
    pub initial_events_end: bool,
}

/// Reads a bookmark's object (the `raw` of its [`Unknown`]).
pub fn bookmark(object: &[u8]) -> Result<Bookmark, Error> {
    let mut out = Bookmark::default();
    for field in Fields::new(object) {
        let (1, v) = field? else { continue };
        for f in Fields::new(v.len("an object", 1, "ObjectMeta")?) {
            match f? {
                (6, v) => out.resource_version = Some(v.str("ObjectMeta", 6)?.to_owned()).filter(|s| !s.is_empty()),
                (12, v) => {
                    let (k, val) = map_entry(v.len("ObjectMeta", 12, "a map entry")?)?;
                    if k == INITIAL_EVENTS_END {
                        out.initial_events_end = val == "true";
                    }
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

/// One `map<string, string>` entry: `key = 1, value = 2`, each `""` when absent (protobuf).
pub(crate) fn map_entry(msg: &[u8]) -> Result<(Cow<'_, str>, Cow<'_, str>), Error> {
    let (mut key, mut value) = (Cow::Borrowed(""), Cow::Borrowed(""));
    for f in Fields::new(msg) {
        match f? {
            (1, v) => key = v.str_lossy("a map entry", 1)?,
            (2, v) => value = v.str_lossy("a map entry", 2)?,
            _ => {}
        }
    }
    Ok((key, value))
}

/// `b` with each byte that is not part of valid UTF-8 replaced by U+FFFD, as Go's
/// `utf8.DecodeRune` (a width of 1 on error) and so encoding/json do it.
pub fn go_lossy(mut b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    loop {
        match std::str::from_utf8(b) {
            Ok(s) => {
                out.push_str(s);
                return out;
            }
            Err(e) => {
                let (valid, rest) = b.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                out.push('\u{FFFD}');
                b = rest.get(1..).unwrap_or_default();
            }
        }
    }
}

/// Reads a `metav1.Status` (the `raw` of an error body's or an `ERROR` event's [`Unknown`]) into
/// kube's [`Status`], as kube reads the JSON one, so that errors classify the same: `metadata = 1`,
/// `status = 2`, `message = 3`, `reason = 4`, `details = 5` (`name = 1, group = 2, kind = 3,
/// causes = 4 {reason = 1, message = 2, field = 3}, retryAfterSeconds = 5, uid = 6`), `code = 6`
/// (apimachinery `pkg/apis/meta/v1/generated.proto`). A code outside `u16` reads as 0 (unset), a
/// negative `retryAfterSeconds` as 0.
pub fn status(raw: &[u8]) -> Result<Status, Error> {
    const WHAT: &str = "Status";
    let mut s = Status::default();
    for field in Fields::new(raw) {
        match field? {
            (1, v) => s.metadata = Some(list_meta(v.len(WHAT, 1, "ListMeta")?)?),
            (2, v) => {
                s.status = match v.str(WHAT, 2)? {
                    "Success" => Some(StatusSummary::Success),
                    "Failure" => Some(StatusSummary::Failure),
                    _ => None,
                }
            }
            (3, v) => s.message = v.str(WHAT, 3)?.to_owned(),
            (4, v) => s.reason = v.str(WHAT, 4)?.to_owned(),
            (5, v) => s.details = Some(status_details(v.len(WHAT, 5, "StatusDetails")?)?),
            // int32: the low 32 bits of the varint.
            (6, v) => s.code = u16::try_from(v.varint(WHAT, 6)? as i32).unwrap_or(0),
            _ => {}
        }
    }
    Ok(s)
}

fn status_details(msg: &[u8]) -> Result<StatusDetails, Error> {
    const WHAT: &str = "StatusDetails";
    let mut d = StatusDetails {
        name: String::new(),
        group: String::new(),
        kind: String::new(),
        uid: String::new(),
        causes: Vec::new(),
        retry_after_seconds: 0,
    };
    for field in Fields::new(msg) {
        match field? {
            (1, v) => d.name = v.str(WHAT, 1)?.to_owned(),
            (2, v) => d.group = v.str(WHAT, 2)?.to_owned(),
            (3, v) => d.kind = v.str(WHAT, 3)?.to_owned(),
            (4, v) => {
                let mut c = StatusCause { reason: String::new(), message: String::new(), field: String::new() };
                for f in Fields::new(v.len(WHAT, 4, "StatusCause")?) {
                    match f? {
                        (1, v) => c.reason = v.str("StatusCause", 1)?.to_owned(),
                        (2, v) => c.message = v.str("StatusCause", 2)?.to_owned(),
                        (3, v) => c.field = v.str("StatusCause", 3)?.to_owned(),
                        _ => {}
                    }
                }
                d.causes.push(c);
            }
            (5, v) => d.retry_after_seconds = u32::try_from(v.varint(WHAT, 5)? as i32).unwrap_or(0),
            (6, v) => d.uid = v.str(WHAT, 6)?.to_owned(),
            _ => {}
        }
    }
    Ok(d)
}

/// Cuts a watch stream's bytes, as they arrive in chunks of any size, into frames: each a 4-byte
/// big-endian length and that many bytes (apimachinery `pkg/util/framer/framer.go`,
/// `lengthDelimitedFrameReader`). A length over [`MAX_FRAME`] is an error (the stream is then
/// unusable: restart the watch).
#[derive(Debug, Default)]
pub struct Framer {
    buf: Vec<u8>,
    /// Where the unread bytes of `buf` start (the frames before it were handed out).
    start: usize,
}

impl Framer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the next chunk of the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete frame's payload, if all of it has arrived; it borrows the buffer until
    /// the next call.
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, Error> {
        let unread = self.buf.get(self.start..).unwrap_or_default();
        let Some(header) = unread.get(..4).and_then(|h| <[u8; 4]>::try_from(h).ok()) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(header);
        let len = usize::try_from(len).map_err(|_| Error::FrameTooLarge(usize::MAX))?;
        if len > MAX_FRAME {
            return Err(Error::FrameTooLarge(len));
        }
        let Some(end) = self.start.checked_add(4 + len).filter(|&end| end <= self.buf.len()) else {
            return Ok(None);
        };
        let from = self.start + 4;
        self.start = end;
        Ok(self.buf.get(from..end))
    }

    /// How many bytes of an incomplete frame are buffered (at the end of a stream: a cut frame).
    pub fn pending(&self) -> usize {
        self.buf.len().saturating_sub(self.start)
    }
}

/// A tiny protobuf writer for tests: fields appended in the order called.
#[cfg(test)]
pub(crate) mod encode {
    #[derive(Clone, Debug, Default)]
    pub struct Msg(pub Vec<u8>);

    pub fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    impl Msg {
        pub fn new() -> Self {
            Self::default()
        }
        pub fn tag(mut self, field: u32, wire_type: u8) -> Self {
            varint(&mut self.0, u64::from(field) << 3 | u64::from(wire_type));
            self
        }
        pub fn uint(self, field: u32, v: u64) -> Self {
            let mut m = self.tag(field, 0);
            varint(&mut m.0, v);
            m
        }
        pub fn int(self, field: u32, v: i64) -> Self {
            self.uint(field, v as u64)
        }
        pub fn bytes(self, field: u32, b: &[u8]) -> Self {
            let mut m = self.tag(field, 2);
            varint(&mut m.0, b.len() as u64);
            m.0.extend_from_slice(b);
            m
        }
        pub fn str(self, field: u32, s: &str) -> Self {
            self.bytes(field, s.as_bytes())
        }
        pub fn msg(self, field: u32, m: &Msg) -> Self {
            self.bytes(field, &m.0)
        }
        pub fn fixed64(self, field: u32, v: u64) -> Self {
            let mut m = self.tag(field, 1);
            m.0.extend_from_slice(&v.to_le_bytes());
            m
        }
        pub fn fixed32(self, field: u32, v: u32) -> Self {
            let mut m = self.tag(field, 5);
            m.0.extend_from_slice(&v.to_le_bytes());
            m
        }
        /// A `map<string, string>` entry as field `field`.
        pub fn entry(self, field: u32, k: &str, v: &str) -> Self {
            self.msg(field, &Msg::new().str(1, k).str(2, v))
        }
        /// This message as a body: `k8s\0` + `Unknown{TypeMeta{apiVersion, kind}, raw}`.
        pub fn body(&self, api_version: &str, kind: &str) -> Vec<u8> {
            let unknown = Msg::new().msg(1, &Msg::new().str(1, api_version).str(2, kind)).bytes(2, &self.0);
            let mut out = super::MAGIC.to_vec();
            out.extend_from_slice(&unknown.0);
            out
        }
    }

    /// A watch frame: 4-byte big-endian length + `WatchEvent{type, RawExtension{raw: body}}`.
    pub fn frame(type_: &str, body: &[u8]) -> Vec<u8> {
        let event = Msg::new().str(1, type_).msg(2, &Msg::new().bytes(1, body));
        let mut out = (event.0.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&event.0);
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::encode::{Msg, frame};
    use super::*;

    #[test]
    fn varints_read_as_gogo_reads_them() {
        assert_eq!(varint(&[0x00]), Ok((0, 1)));
        assert_eq!(varint(&[0x96, 0x01]), Ok((150, 2)));
        let mut minus_one = Vec::new();
        encode::varint(&mut minus_one, -1i64 as u64);
        assert_eq!(minus_one.len(), 10, "negative int64s take 10 bytes");
        assert_eq!(varint(&minus_one), Ok((u64::MAX, 10)));
        assert_eq!(varint(&[0x80; 11]), Err(Error::LongVarint));
        assert_eq!(varint(&[0x80, 0x80]), Err(Error::Truncated));
        assert_eq!(varint(&[]), Err(Error::Truncated));
    }

    #[test]
    fn fields_skip_every_wire_type_and_stop_at_the_first_error() {
        let m = Msg::new().uint(1, 7).fixed64(2, 9).str(3, "x").fixed32(4, 5).int(5, -2);
        let got: Vec<_> = Fields::new(&m.0).collect::<Result<_, _>>().expect("well-formed");
        assert_eq!(
            got,
            vec![
                (1, Value::Varint(7)),
                (2, Value::Fixed64(9)),
                (3, Value::Len(b"x")),
                (4, Value::Fixed32(5)),
                (5, Value::Varint(-2i64 as u64))
            ]
        );
        // A group (wire type 3), field 0, and a length past the end are errors, then the end.
        for bad in [vec![0x0b, 0x00], vec![0x00, 0x01], vec![0x0a, 0x05, b'a'], vec![0x09, 1, 2, 3]] {
            let mut f = Fields::new(&bad);
            assert!(matches!(f.next(), Some(Err(_))), "{bad:?}");
            assert_eq!(f.next(), None);
        }
    }

    #[test]
    fn an_unknown_checks_the_prefix_and_finds_its_raw() {
        let raw = Msg::new().str(1, "inner");
        let body = raw.body("v1", "PodList");
        let u = unknown(&body).expect("an unknown");
        assert_eq!((u.api_version, u.kind, u.raw), ("v1", "PodList", &raw.0[..]));
        assert_eq!(unknown(&body[1..]), Err(Error::NoMagic));
        assert_eq!(unknown(b"{\"kind\":\"PodList\"}"), Err(Error::NoMagic));
    }

    #[test]
    fn a_list_gives_its_meta_and_its_items_uncopied() {
        let meta = Msg::new().str(1, "").str(2, "123").str(3, "").int(4, 0);
        let raw = Msg::new().msg(1, &meta).bytes(2, b"a").fixed32(9, 1).bytes(2, b"").bytes(2, b"c");
        let (m, items) = list(&raw.0).expect("a list");
        assert_eq!(m.resource_version.as_deref(), Some("123"));
        assert_eq!(m.continue_, None, "omitempty");
        assert_eq!(m.remaining_item_count, Some(0), "a pointer");
        assert_eq!(items, vec![&b"a"[..], b"", b"c"]);
        let bad = Msg::new().uint(2, 1);
        assert!(matches!(list(&bad.0), Err(Error::WrongType { .. })));
    }

    #[test]
    fn a_status_reads_as_kubes_json_one() {
        let details = Msg::new()
            .str(1, "web-0")
            .str(2, "")
            .str(3, "pods")
            .msg(4, &Msg::new().str(1, "FieldValueInvalid").str(2, "bad").str(3, "spec.x"))
            .int(5, 3)
            .str(6, "");
        let raw = Msg::new()
            .msg(1, &Msg::new())
            .str(2, "Failure")
            .str(3, "too many requests")
            .str(4, "TooManyRequests")
            .msg(5, &details)
            .int(6, 429);
        let s = status(&raw.0).expect("a status");
        let json: Status = serde_json::from_value(serde_json::json!({
            "metadata": {}, "status": "Failure", "message": "too many requests", "reason": "TooManyRequests",
            "details": {"name": "web-0", "kind": "pods", "retryAfterSeconds": 3,
                "causes": [{"reason": "FieldValueInvalid", "message": "bad", "field": "spec.x"}]},
            "code": 429
        }))
        .expect("json");
        assert_eq!(s, json);
        assert_eq!(
            status(&Msg::new().int(6, -1).int(3, 1).0).map(|s| s.code),
            Err(Error::WrongType { what: "Status", field: 3, expected: "a string", got: 0 })
        );
        assert_eq!(status(&Msg::new().int(6, 70_000).0).map(|s| s.code), Ok(0));
    }

    #[test]
    fn a_watch_frame_holds_an_event_whose_object_is_a_body() {
        let obj = Msg::new().msg(1, &Msg::new().str(6, "77").entry(12, INITIAL_EVENTS_END, "true"));
        let body = obj.body("v1", "Pod");
        let f = frame("BOOKMARK", &body);
        let mut framer = Framer::new();
        framer.push(&f);
        let payload = framer.next_frame().expect("ok").expect("a frame").to_vec();
        assert_eq!(framer.next_frame(), Ok(None));
        let e = watch_event(&payload).expect("an event");
        assert_eq!(e.type_, "BOOKMARK");
        let u = unknown(e.object).expect("a body");
        assert_eq!(u.kind, "Pod");
        assert_eq!(bookmark(u.raw), Ok(Bookmark { resource_version: Some("77".into()), initial_events_end: true }));
        let plain = Msg::new().msg(1, &Msg::new().str(6, "78").entry(12, "other", "true"));
        assert_eq!(bookmark(&plain.0), Ok(Bookmark { resource_version: Some("78".into()), initial_events_end: false }));
    }

    #[test]
    fn an_oversized_frame_is_an_error_not_an_allocation() {
        let mut framer = Framer::new();
        framer.push(&(MAX_FRAME as u32 + 1).to_be_bytes());
        assert_eq!(framer.next_frame(), Err(Error::FrameTooLarge(MAX_FRAME + 1)));
        let mut framer = Framer::new();
        framer.push(&u32::MAX.to_be_bytes());
        assert!(framer.next_frame().is_err());
        let mut framer = Framer::new();
        framer.push(&(MAX_FRAME as u32).to_be_bytes());
        framer.push(&[0; 100]);
        assert_eq!(framer.next_frame(), Ok(None), "at the limit: waits for the rest");
        assert_eq!(framer.pending(), 104);
    }

    /// A list body's parts, in any order, some written twice or not at all: the `runtime.Unknown`
    /// fields (0 TypeMeta, 1 raw, 2 contentType, 3 an unknown varint) and the list's (0 ListMeta,
    /// 1 an item, 2 an unknown fixed64, 3 an unknown message).
    fn list_body(envelope: &[u8], list: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut raw = Msg::new();
        for (kind, bytes) in list {
            raw = match kind % 4 {
                0 => raw.msg(1, &Msg::new().str(2, &format!("{}", bytes.len())).str(3, "c")),
                1 => raw.bytes(2, bytes),
                2 => raw.fixed64(7, bytes.len() as u64),
                _ => raw.bytes(9, bytes),
            };
        }
        let mut unknown = Msg::new();
        for kind in envelope {
            unknown = match kind % 4 {
                0 => unknown.msg(1, &Msg::new().str(1, "v1").str(2, "PodList")),
                1 => unknown.bytes(2, &raw.0),
                2 => unknown.str(4, ""),
                _ => unknown.uint(12, 7),
            };
        }
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&unknown.0);
        out
    }

    /// The list body read whole, as [`unknown`] and [`list`] read it.
    fn whole(body: &[u8]) -> Result<(ListMeta, Vec<Vec<u8>>), Error> {
        let (meta, items) = unknown(body).and_then(|u| list(u.raw))?;
        Ok((meta, items.into_iter().map(<[u8]>::to_vec).collect()))
    }

    /// The list body read by [`ListReader`], in chunks cut at `cuts`.
    fn streamed(body: &[u8], cuts: &[usize]) -> Result<(ListMeta, Vec<Vec<u8>>), Error> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        cuts.push(body.len());
        cuts.sort_unstable();
        let (mut reader, mut items, mut from) = (ListReader::new(), Vec::new(), 0);
        for cut in cuts {
            reader.push(&body[from..cut], |i| items.push(i.to_vec()))?;
            from = cut;
        }
        Ok((reader.finish()?, items))
    }

    #[test]
    fn a_list_read_as_it_arrives_is_the_list_read_whole() {
        let items: Vec<(u8, Vec<u8>)> =
            vec![(0, vec![]), (1, vec![1, 2, 3]), (1, vec![]), (3, vec![9; 300]), (1, vec![7; 200])];
        let body = list_body(&[0, 1, 2, 3], &items);
        let want = whole(&body).expect("a list");
        assert_eq!(want.1.len(), 3);
        assert_eq!(want.0.resource_version.as_deref(), Some("0"));
        for step in [1, 2, 3, 7, 64, body.len()] {
            let cuts: Vec<usize> = (0..body.len()).step_by(step).collect();
            assert_eq!(streamed(&body, &cuts), Ok(want.clone()), "chunks of {step}");
        }
        // Cut short anywhere: what the whole reading makes of it (an error, or at a field's end
        // the fields before it).
        for end in 0..body.len() {
            assert_eq!(streamed(&body[..end], &[3, 10]), whole(&body[..end]), "cut at {end}");
        }
        // An item over the cap is refused from its length alone, before its bytes are buffered.
        let mut raw = Vec::new();
        encode::varint(&mut raw, 2 << 3 | 2);
        encode::varint(&mut raw, MAX_FRAME as u64 + 1);
        let mut body = MAGIC.to_vec();
        body.extend_from_slice(&[2 << 3 | 2]);
        encode::varint(&mut body, u64::from(u32::MAX));
        body.extend_from_slice(&raw);
        assert_eq!(ListReader::new().push(&body, |_| {}), Err(Error::ItemTooLarge(MAX_FRAME as u64 + 1)));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = Fields::new(&bytes).count();
            let _ = unknown(&bytes);
            let mut prefixed = MAGIC.to_vec();
            prefixed.extend_from_slice(&bytes);
            let _ = unknown(&prefixed);
            let _ = list(&bytes);
            let _ = watch_event(&bytes);
            let _ = status(&bytes);
            let _ = bookmark(&bytes);
            let mut framer = Framer::new();
            framer.push(&bytes);
            while let Ok(Some(_)) = framer.next_frame() {}
        }

        #[test]
        fn frames_split_anywhere_reassemble(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..8),
            cuts in proptest::collection::vec(0usize..2500, 0..12),
        ) {
            let mut stream = Vec::new();
            for p in &payloads {
                stream.extend_from_slice(&(p.len() as u32).to_be_bytes());
                stream.extend_from_slice(p);
            }
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(stream.len())).collect();
            cuts.push(stream.len());
            cuts.sort_unstable();
            let (mut framer, mut got, mut from) = (Framer::new(), Vec::new(), 0);
            for cut in cuts {
                framer.push(&stream[from..cut]);
                from = cut;
                while let Some(f) = framer.next_frame().expect("within the cap") {
                    got.push(f.to_vec());
                }
            }
            prop_assert_eq!(got, payloads);
            prop_assert_eq!(framer.pending(), 0);
        }

        /// Structured list bodies, with parts in any order, repeated or missing, then maybe cut
        /// short or with a byte changed, read in chunks cut anywhere: the same list as read
        /// whole, or an error for both (a second `raw` is the one error of the streamed reading
        /// alone).
        #[test]
        fn lists_read_as_they_arrive_equal_lists_read_whole(
            envelope in proptest::collection::vec(0u8..4, 0..5),
            list in proptest::collection::vec((0u8..4, proptest::collection::vec(any::<u8>(), 0..200)), 0..10),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
            damage in proptest::option::of((any::<usize>(), any::<u8>(), any::<bool>())),
        ) {
            let mut body = list_body(&envelope, &list);
            if let Some((at, byte, cut)) = damage {
                let at = at % (body.len() + 1);
                if cut { body.truncate(at) } else if at < body.len() { body[at] = byte }
            }
            // Of two `raw`s the whole reading reads the last alone; the streamed one refuses them.
            let raws = body.strip_prefix(&MAGIC).map_or(0, |m| Fields::new(m).filter(|f| matches!(f, Ok((2, _)))).count());
            match (whole(&body), streamed(&body, &cuts)) {
                (_, s) if raws > 1 => prop_assert!(s.is_err()),
                (Ok(w), Ok(s)) => prop_assert_eq!(w, s),
                (Err(_), Err(_)) => {}
                (w, s) => prop_assert!(false, "whole: {:?}, streamed: {:?}", w, s),
            }
        }
    }
}
