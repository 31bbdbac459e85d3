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
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    Ok(Some(M::decode(body.as_slice())?))
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
