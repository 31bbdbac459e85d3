//! Framing on the component socket: a 4-byte big-endian length, then that many bytes of one
//! encoded message (the header of `component.proto`).
//!
//! Why length-prefixed protobuf rather than gRPC or delimited varints: a fixed 4-byte header
//! is trivial to write in any language (no protobuf varint code outside the message itself),
//! and one frame per `write` keeps a request and its payload bytes contiguous.

use std::io::{self, Read, Write};

use prost::Message;

/// The largest frame either side accepts (1 GiB): anything bigger is a corrupt header, not a
/// payload (a 4K RGB frame is 25 MiB).
pub const MAX_FRAME_BYTES: u32 = 1 << 30;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The socket failed, timed out, or closed mid-frame.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The header announced more than [`MAX_FRAME_BYTES`].
    #[error("frame of {0} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")]
    TooLarge(u32),
    /// The bytes are not the expected message.
    #[error("undecodable frame: {0}")]
    Decode(#[from] prost::DecodeError),
}

impl FrameError {
    /// Whether the read hit the socket's read timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(self, FrameError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

/// Writes `msg` as one frame (header and body in one buffer, one `write_all`).
pub fn write_frame<W: Write, M: Message>(w: &mut W, msg: &M) -> io::Result<()> {
    let len = msg.encoded_len();
    let header = u32::try_from(len)
        .ok()
        .filter(|n| *n <= MAX_FRAME_BYTES)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("message of {len} bytes exceeds the {MAX_FRAME_BYTES}-byte frame limit"),
            )
        })?;
    let mut buf = Vec::with_capacity(4 + len);
    buf.extend_from_slice(&header.to_be_bytes());
    msg.encode(&mut buf)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    w.write_all(&buf)?;
    w.flush()
}

/// Reads one frame; `Ok(None)` when the peer closed the connection cleanly between frames.
pub fn read_frame<R: Read, M: Message + Default>(r: &mut R) -> Result<Option<M>, FrameError> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < header.len() {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_be_bytes(header);
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    // The body grows with the bytes that arrive, not to what the header announces: a corrupt
    // or hostile header followed by little or nothing then costs no memory.
    let mut body = Vec::with_capacity((len as usize).min(READ_CHUNK));
    r.take(u64::from(len)).read_to_end(&mut body)?;
    if body.len() < len as usize {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    Ok(Some(M::decode(body.as_slice())?))
}

/// Buffered, incremental reading of frames: one `read` may bring several frames (a
/// pipelining component answers several requests back to back), and a frame may arrive in
/// pieces. Why not [`read_frame`] on the socket: it costs two reads per frame and cannot
/// stop between a header and its body, which the host needs when it drains answers while a
/// request is still being written.
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// The read buffer's resting size; a larger frame grows it for as long as it is needed.
pub const READ_CHUNK: usize = 64 * 1024;

impl Default for FrameReader {
    fn default() -> Self {
        FrameReader {
            buf: vec![0; READ_CHUNK],
            start: 0,
            end: 0,
        }
    }
}

impl FrameReader {
    /// The next complete frame already buffered, decoded; `Ok(None)` when more bytes are
    /// needed.
    pub fn next_frame<M: Message + Default>(&mut self) -> Result<Option<M>, FrameError> {
        let Some(len) = self.buffered_len()? else {
            return Ok(None);
        };
        if self.end - self.start < 4 + len {
            return Ok(None);
        }
        let body = &self.buf[self.start + 4..self.start + 4 + len];
        let msg = M::decode(body);
        self.start += 4 + len;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > 4 * READ_CHUNK {
                // A large frame grew the buffer: give the memory back once it is consumed.
                self.buf = vec![0; READ_CHUNK];
            }
        }
        Ok(Some(msg?))
    }

    /// Whether part of a frame is buffered (a peer that closes now closed mid-frame).
    pub fn has_partial(&self) -> bool {
        self.end > self.start
    }

    /// The bytes the reader holds allocated (what a hostile header must not inflate).
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// The length announced by the buffered header, when the header is complete.
    fn buffered_len(&self) -> Result<Option<usize>, FrameError> {
        if self.end - self.start < 4 {
            return Ok(None);
        }
        let mut header = [0u8; 4];
        header.copy_from_slice(&self.buf[self.start..self.start + 4]);
        let len = u32::from_be_bytes(header);
        if len > MAX_FRAME_BYTES {
            return Err(FrameError::TooLarge(len));
        }
        Ok(Some(len as usize))
    }

    /// One `read` into the free room, grown towards the frame being received. Returns the
    /// bytes read (0: the peer closed the connection); the reader's own errors (timeouts,
    /// `WouldBlock`) pass through.
    ///
    /// The room grows with the bytes that arrive — a full buffer at most doubles, up to the
    /// frame's announced size — never to the announced size at once: a corrupt or hostile
    /// header alone then costs no memory, and a large frame still takes a handful of
    /// resizes.
    pub fn fill<R: Read>(&mut self, r: &mut R) -> Result<usize, FrameError> {
        let need = match self.buffered_len()? {
            Some(len) => 4 + len,
            None => 4,
        };
        if self.start > 0 && (self.buf.len() - self.start < need || self.end == self.buf.len()) {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let doubled = self.buf.len().saturating_mul(2).max(READ_CHUNK);
            let wanted = (self.start + need).max(self.buf.len() + 1);
            self.buf.resize(wanted.min(doubled), 0);
        }
        let n = r.read(&mut self.buf[self.end..])?;
        self.end += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use videoflow_core::component::proto::{
        ComponentMessage, Hello, WorkerMessage, component_message, worker_message,
    };

    #[test]
    fn a_frame_is_a_big_endian_length_then_the_message() {
        let msg = WorkerMessage {
            request_id: 7,
            body: Some(worker_message::Body::Next(Default::default())),
        };
        let mut buf = Vec::new();
        write_frame(&mut buf, &msg).expect("writes");
        let body = msg.encode_to_vec();
        assert_eq!(&buf[..4], &(body.len() as u32).to_be_bytes());
        assert_eq!(&buf[4..], body.as_slice());
        let back: WorkerMessage = read_frame(&mut buf.as_slice())
            .expect("reads")
            .expect("a frame");
        assert_eq!(back, msg);
    }

    #[test]
    fn frames_follow_each_other_and_clean_eof_is_none() {
        let hello = ComponentMessage {
            body: Some(component_message::Body::Hello(Hello {
                protocol_versions: vec![1],
                pid: 42,
                ..Hello::default()
            })),
        };
        let mut buf = Vec::new();
        write_frame(&mut buf, &hello).expect("writes");
        write_frame(&mut buf, &ComponentMessage::default()).expect("writes"); // empty body
        let mut r = buf.as_slice();
        assert_eq!(
            read_frame::<_, ComponentMessage>(&mut r).expect("1"),
            Some(hello)
        );
        assert_eq!(
            read_frame::<_, ComponentMessage>(&mut r).expect("2"),
            Some(ComponentMessage::default())
        );
        assert!(
            read_frame::<_, ComponentMessage>(&mut r)
                .expect("eof")
                .is_none()
        );
    }

    #[test]
    fn the_reader_takes_frames_in_any_slicing() {
        let msgs: Vec<WorkerMessage> = (1..=5)
            .map(|i| WorkerMessage {
                request_id: i,
                body: Some(worker_message::Body::Next(Default::default())),
            })
            .collect();
        let mut wire = Vec::new();
        for m in &msgs {
            write_frame(&mut wire, m).expect("writes");
        }
        // A frame larger than the resting buffer, too.
        let big = ComponentMessage {
            body: Some(component_message::Body::Hello(Hello {
                sdk: "x".repeat(200_000),
                ..Hello::default()
            })),
        };
        write_frame(&mut wire, &big).expect("writes");
        for piece in [1usize, 3, 7, 4096, usize::MAX] {
            let mut reader = FrameReader::default();
            let mut src = wire.chunks(piece.min(wire.len()));
            let mut got = Vec::new();
            let mut big_back = None;
            loop {
                if got.len() < msgs.len() {
                    if let Some(m) = reader.next_frame::<WorkerMessage>().expect("decodes") {
                        got.push(m);
                        continue;
                    }
                } else if let Some(m) = reader.next_frame::<ComponentMessage>().expect("decodes") {
                    big_back = Some(m);
                    break;
                }
                let Some(chunk) = src.next() else { break };
                let mut c = chunk;
                while !c.is_empty() {
                    let n = reader.fill(&mut c).expect("fills");
                    assert!(n > 0);
                }
            }
            assert_eq!(got, msgs, "piece {piece}");
            assert_eq!(big_back.as_ref(), Some(&big), "piece {piece}");
            assert!(!reader.has_partial());
        }
        let mut reader = FrameReader::default();
        let huge = (MAX_FRAME_BYTES + 1).to_be_bytes();
        reader.fill(&mut huge.as_slice()).expect("fills");
        assert!(matches!(
            reader.next_frame::<WorkerMessage>(),
            Err(FrameError::TooLarge(_))
        ));
    }

    #[test]
    fn truncated_oversized_and_garbage_frames_are_errors() {
        let mut buf = Vec::new();
        write_frame(
            &mut buf,
            &WorkerMessage {
                request_id: 1,
                body: None,
            },
        )
        .expect("writes");
        // Truncated header and truncated body.
        assert!(read_frame::<_, WorkerMessage>(&mut &buf[..2]).is_err());
        assert!(read_frame::<_, WorkerMessage>(&mut &buf[..buf.len() - 1]).is_err());
        // A header past the limit is refused before allocating.
        let huge = (MAX_FRAME_BYTES + 1).to_be_bytes();
        assert!(matches!(
            read_frame::<_, WorkerMessage>(&mut huge.as_slice()),
            Err(FrameError::TooLarge(_))
        ));
        // Bytes that are not the message.
        let garbage = [0, 0, 0, 2, 0xff, 0xff];
        assert!(matches!(
            read_frame::<_, WorkerMessage>(&mut garbage.as_slice()),
            Err(FrameError::Decode(_))
        ));
    }
}
