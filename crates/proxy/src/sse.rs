//! `SseTap`: reads usage out of a server-sent-event stream as it passes, sans-IO.
//!
//! Each upstream data frame goes through [`SseTap::feed`], which answers what to send the
//! client. The fast path (the common case): no event is split across frames, and the frame
//! holds no usage report, so the frame is forwarded as is, without a copy. Otherwise the tap
//! cuts the bytes into whole events (`\n\n` or `\r\n\r\n`), parses the JSON `data:` of each
//! event that mentions `"usage"` with a non-null value, and forwards every event except the
//! usage-only chunk the proxy injected (an OpenAI chunk with `"choices": []` and a usage
//! object, when the client did not ask for usage). Bytes of an unfinished event wait for the
//! rest of it (a client cannot use half an event anyway); [`SseTap::finish`] flushes them.
//!
//! Invariants: apart from the stripped chunk, the client receives exactly the upstream's bytes
//! in order; the tap holds at most one unfinished event.

use bytes::{Bytes, BytesMut};
use memchr::memmem;
use serde_json::Value;
use turnstile_admission::ProviderUsage;

/// The usage reader of one stream.
#[derive(Debug)]
pub struct SseTap {
    /// Strip the usage-only chunk (the client did not ask for it).
    strip_usage_chunk: bool,
    /// Bytes of an event not finished yet.
    pending: BytesMut,
    pub usage: ProviderUsage,
    /// A usage-only chunk was removed.
    pub stripped: bool,
}

/// Whether `bytes` reports usage: a `"usage"` key followed by something other than `null`.
fn mentions_usage(bytes: &[u8]) -> bool {
    memmem::find_iter(bytes, b"\"usage\"").any(|at| {
        let rest = &bytes[at + 7..];
        let rest = rest
            .iter()
            .position(|b| !matches!(b, b' ' | b'\t' | b':'))
            .map_or(&[][..], |i| &rest[i..]);
        !rest.starts_with(b"null")
    })
}

/// Where the last complete event in `bytes` ends (just past its blank line).
fn last_event_end(bytes: &[u8]) -> Option<usize> {
    let lf = memmem::rfind(bytes, b"\n\n").map(|i| i + 2);
    let crlf = memmem::rfind(bytes, b"\r\n\r\n").map(|i| i + 4);
    lf.max(crlf)
}

/// Splits off the first event of `bytes` (through its blank line).
fn first_event_len(bytes: &[u8]) -> Option<usize> {
    let lf = memmem::find(bytes, b"\n\n").map(|i| i + 2);
    let crlf = memmem::find(bytes, b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl SseTap {
    pub fn new(strip_usage_chunk: bool) -> Self {
        SseTap {
            strip_usage_chunk,
            pending: BytesMut::new(),
            usage: ProviderUsage::default(),
            stripped: false,
        }
    }

    /// Takes one upstream frame; answers the bytes to forward now (possibly empty).
    pub fn feed(&mut self, frame: Bytes) -> Bytes {
        if self.pending.is_empty() && frame.ends_with(b"\n\n") && !mentions_usage(&frame) {
            return frame;
        }
        self.pending.extend_from_slice(&frame);
        let Some(end) = last_event_end(&self.pending) else {
            return Bytes::new();
        };
        let complete = self.pending.split_to(end).freeze();
        if !mentions_usage(&complete) {
            return complete;
        }
        let mut out = BytesMut::with_capacity(complete.len());
        let mut rest = &complete[..];
        while let Some(len) = first_event_len(rest) {
            let event = &rest[..len];
            rest = &rest[len..];
            if self.read_event(event) {
                out.extend_from_slice(event);
            }
        }
        out.extend_from_slice(rest);
        out.freeze()
    }

    /// The bytes of an event the stream ended in the middle of.
    pub fn finish(&mut self) -> Bytes {
        let rest = self.pending.split().freeze();
        if mentions_usage(&rest) {
            self.read_event(&rest);
        }
        rest
    }

    /// Reads usage from one event; answers whether to forward it.
    fn read_event(&mut self, event: &[u8]) -> bool {
        if !mentions_usage(event) {
            return true;
        }
        let mut data = Vec::new();
        for line in event.split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(value) = line.strip_prefix(b"data:") {
                if !data.is_empty() {
                    data.push(b'\n');
                }
                data.extend_from_slice(value.strip_prefix(b" ").unwrap_or(value));
            }
        }
        let Ok(document) = serde_json::from_slice::<Value>(&data) else {
            return true;
        };
        self.usage.merge_document(&document);
        let usage_only = document
            .get("choices")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
            && document.get("usage").is_some_and(Value::is_object);
        if self.strip_usage_chunk && usage_only {
            self.stripped = true;
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHUNK: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n";
    const USAGE: &str =
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}\n\n";
    const DONE: &str = "data: [DONE]\n\n";

    #[test]
    fn content_frames_pass_untouched_and_the_injected_usage_chunk_is_stripped() {
        let mut tap = SseTap::new(true);
        let frame = Bytes::from(CHUNK);
        let out = tap.feed(frame.clone());
        assert_eq!(out.as_ptr(), frame.as_ptr(), "the fast path does not copy");
        assert!(tap.feed(Bytes::from(USAGE)).is_empty());
        assert_eq!(tap.feed(Bytes::from(DONE)), DONE);
        assert_eq!(tap.usage.counts(), (5, 7));
        assert!(tap.stripped);
    }

    #[test]
    fn a_client_that_asked_for_usage_gets_the_chunk() {
        let mut tap = SseTap::new(false);
        assert_eq!(tap.feed(Bytes::from(USAGE)), USAGE);
        assert_eq!(tap.usage.counts(), (5, 7));
    }

    #[test]
    fn events_split_across_frames_are_reassembled_in_order() {
        let all = format!("{CHUNK}{USAGE}{DONE}");
        for cut in 1..all.len() {
            let mut tap = SseTap::new(true);
            let mut out = Vec::new();
            out.extend_from_slice(&tap.feed(Bytes::from(all[..cut].to_owned())));
            out.extend_from_slice(&tap.feed(Bytes::from(all[cut..].to_owned())));
            out.extend_from_slice(&tap.finish());
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("{CHUNK}{DONE}"),
                "cut {cut}"
            );
            assert_eq!(tap.usage.counts(), (5, 7));
        }
    }

    #[test]
    fn anthropic_events_report_usage_and_pass_through() {
        let start = "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\r\n\r\n";
        let delta = "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":12}}\n\n";
        let mut tap = SseTap::new(true);
        assert_eq!(tap.feed(Bytes::from(start)), start);
        assert_eq!(tap.feed(Bytes::from(delta)), delta);
        assert_eq!(tap.usage.counts(), (9, 12));
        assert!(!tap.stripped);
    }
}
