//! `videoflow.producers.video.VideoUrlReader` against a real RTSP server process on
//! loopback (GStreamer's rtsp-server, `video_support/rtsp_server.py`, started per test),
//! streaming H.264 with B-frames made at test time: frames byte for byte those of the file
//! over RTSP/TCP and RTP/UDP, a late client starting at a keyframe, the server killed and
//! restarted (the reader reconnects, 1.0.4's indices), a stalled server (SIGSTOP) given up
//! within `stall_timeout_s` and reopened, retries running out, and the typed errors of a
//! bad URL or a missing capture device.
//!
//! Every frame is checked against the file's own frames (FFmpeg's CLI `bgr24`, hashed), so
//! a frame out of order, concealed, duplicated or from before a keyframe fails the test.

#![cfg(feature = "video")]

mod video_support;

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use serde_json::{Map, Value as Json, json};
use video_support::build_node;
use video_support::rtsp::{FPS, GOP, H, Media, SECONDS, Server, W, hash, media};
use video_support::run_ffmpeg;
use videoflow_core::envelope::Payload;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::model::NodeKind;
use videoflow_core::value::Value;
use videoflow_worker::clock::wall_now;
use videoflow_worker::nodes::{BuiltNode, NodeContext, Producer};

const URL_CLASS: &str = "videoflow.producers.video.VideoUrlReader";
const DEVICE_CLASS: &str = "videoflow.producers.video.VideoDeviceReader";

fn reader(class: &str, p: Json) -> Result<Box<dyn Producer>, VfError> {
    let Json::Object(map) = p else {
        panic!("params must be an object")
    };
    let map: Map<String, Json> = map;
    match build_node(class, NodeKind::Producer, &map)? {
        BuiltNode::Producer(p) => Ok(p),
        other => panic!("{class}: expected a producer, got {other:?}"),
    }
}

/// One output: the index, which frame of the file it is, and the event time.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Got {
    index: i64,
    frame: usize,
    ts: f64,
}

/// [`Got::frame`] of an output that is no frame of the file.
const CONCEALED: usize = usize::MAX;

struct Session {
    node: Box<dyn Producer>,
    ctx: NodeContext,
}

impl Session {
    fn open(url: &str, extra: Json) -> Session {
        let mut params = json!({"url": url, "swap_channels": false});
        if let (Some(p), Json::Object(extra)) = (params.as_object_mut(), extra) {
            p.extend(extra);
        }
        let mut node = reader(URL_CLASS, params).unwrap_or_else(|e| panic!("build: {e:?}"));
        let mut ctx = NodeContext::new("f", "r", "video", 0);
        node.open(&mut ctx)
            .unwrap_or_else(|e| panic!("open: {e:?}"));
        Session { node, ctx }
    }

    /// The next output, matched against the file's frames.
    fn next(&mut self, m: &Media) -> Result<Option<Got>, VfError> {
        self.next_matching(m, false)
    }

    /// The next output; with `concealed_ok`, one that is no frame of the file (FFmpeg
    /// concealed a frame whose data was cut) comes back as frame [`CONCEALED`].
    fn next_matching(&mut self, m: &Media, concealed_ok: bool) -> Result<Option<Got>, VfError> {
        let Some(item) = self.node.next(&mut self.ctx)? else {
            return Ok(None);
        };
        let ts = self
            .ctx
            .take_output_event_timestamp()
            .unwrap_or_else(|| panic!("no event timestamp"));
        let Payload::Value(Value::List(items)) = item else {
            panic!("not a tuple: {item:?}");
        };
        let [Value::Int(index), Value::Tensor(t)] = items.as_slice() else {
            panic!("not (int, tensor): {items:?}");
        };
        assert_eq!(t.shape, vec![H as i64, W as i64, 3]);
        assert_eq!(t.dtype, "uint8");
        let h = hash(&t.data);
        let frame = match m.index_of.get(&h).copied() {
            Some(frame) => frame,
            None if concealed_ok => CONCEALED,
            None => panic!("output {index} is not a frame of the file (concealed or damaged)"),
        };
        Ok(Some(Got {
            index: *index,
            frame,
            ts,
        }))
    }

    fn take(&mut self, m: &Media, n: usize) -> Vec<Got> {
        (0..n)
            .map(|i| match self.next(m) {
                Ok(Some(g)) => g,
                other => panic!("output {i}: {other:?}"),
            })
            .collect()
    }

    fn close(mut self) {
        assert_eq!(self.node.close(&mut self.ctx), Ok(()));
    }
}

/// Consecutive frames of the file from `first`, with consecutive indices.
fn assert_run(got: &[Got], first_frame: usize, first_index: i64) {
    for (k, g) in got.iter().enumerate() {
        assert_eq!(
            (g.index, g.frame),
            (first_index + k as i64, first_frame + k),
            "output {k} of {got:?}"
        );
    }
}

fn plays_the_file(transport: &str) {
    let m = media(transport);
    let server = Server::start(&m.path, 0, false);
    let mut s = Session::open(
        &server.url(),
        json!({"rtsp_transport": transport, "nb_frames": 60}),
    );
    let got = s.take(&m, 60);
    // nb_frames reached: the reader ends.
    assert_eq!(s.next(&m).map(|g| g.is_none()).ok(), Some(true));
    s.close();
    // Every frame of the file from its first, in display order (B-frames reordered), with
    // 1.0.4's indices from 1.
    assert_run(&got, 0, 1);
    assert_eq!(got[59].frame, 59);
    assert!(m.hashes.len() > 60);
}

#[test]
fn rtsp_over_tcp_delivers_the_files_frames_byte_for_byte() {
    plays_the_file("tcp");
}

#[test]
fn rtsp_over_udp_delivers_the_files_frames_byte_for_byte() {
    plays_the_file("udp");
}

#[test]
fn the_default_transport_prefers_tcp_and_plays_the_file() {
    plays_the_file("auto");
}

/// Byte offsets of the packets of a raw H.264 stream, in decode order, and whether each
/// is a keyframe.
fn raw_packets(path: &Path) -> Vec<(u64, bool)> {
    let out = Command::new(video_support::ffprobe())
        .args([
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_entries",
            "packet=pos,flags",
        ])
        .args(["-of", "csv=p=0"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("ffprobe: {e}"));
    assert!(out.status.success(), "ffprobe failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (pos, flags) = l.split_once(',')?;
            Some((pos.trim().parse().ok()?, flags.starts_with('K')))
        })
        .collect()
}

#[test]
fn a_stream_joined_mid_gop_starts_at_its_next_keyframe_without_timestamps() {
    // A live source joined in the middle of a GOP: the file's H.264 as a raw Annex B stream
    // (no container, so no timestamps either), cut inside its second GOP. FFmpeg reads it
    // as it reads a URL; what comes before the next keyframe refers to pictures never
    // received and must not come out (OpenCV's default would conceal them).
    let m = media("midgop");
    let raw = m.dir.join("stream.h264");
    let (mp4, raw_s) = (m.path.display().to_string(), raw.display().to_string());
    run_ffmpeg(&[
        "-i",
        &mp4,
        "-c:v",
        "copy",
        "-bsf:v",
        "h264_mp4toannexb",
        "-f",
        "h264",
        &raw_s,
    ]);
    let packets = raw_packets(&raw);
    assert_eq!(packets.len(), m.hashes.len());
    let (cut, _) = packets[GOP + GOP / 2];
    assert!(
        !packets[GOP + GOP / 2].1 && packets[2 * GOP].1,
        "GOPs of {GOP} frames"
    );
    let bytes = std::fs::read(&raw).unwrap_or_else(|e| panic!("{e}"));
    let joined = m.dir.join("joined.h264");
    std::fs::write(&joined, &bytes[usize::try_from(cut).unwrap_or(0)..])
        .unwrap_or_else(|e| panic!("{e}"));
    let mut s = Session::open(
        &joined.display().to_string(),
        json!({"timestamp_source": "position"}),
    );
    let mut got = Vec::new();
    let end = loop {
        match s.next(&m) {
            Ok(Some(g)) => got.push(g),
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    s.close();
    assert_eq!(end, None);
    // The next keyframe (display frame 2·GOP, closed GOPs) and every frame after it.
    assert_run(&got, 2 * GOP, 1);
    assert_eq!(got.len(), m.hashes.len() - 2 * GOP);
    // Timestamps the stream does not carry: FFmpeg's raw H.264 demuxer stamps none, so
    // every position is what OpenCV reports then, 0.
    assert!(got.iter().all(|g| g.ts.is_finite()), "{got:?}");
}

#[test]
fn the_server_going_away_reconnects_with_backoff_and_the_stream_resumes() {
    let m = media("restart");
    let mut server = Server::start(&m.path, 0, false);
    let mut s = Session::open(
        &server.url(),
        json!({"rtsp_transport": "tcp", "nb_retries": -1, "timestamp_source": "position"}),
    );
    let before = s.take(&m, 30);
    assert_run(&before, 0, 1);
    // The server dies (SIGKILL) and comes back on the same port a second later, while the
    // reader is reconnecting: refused connections first, so the backoff is exercised.
    server.kill();
    let path = m.path.clone();
    let port = server.port;
    let restarted = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        Server::start(&path, port, false)
    });
    // What the old connection still delivers comes out first: frames after the last one
    // read, in display order, up to the first frame of the new session (the file's frame 0).
    // The kill may cut a frame in flight — FFmpeg conceals what it got of it — and a B-frame
    // whose data died with the connection is never output, so the old tail may skip frames
    // and end in a concealed one, but never repeats or reorders them.
    let mut after = Vec::new();
    let mut buffered = Vec::new();
    while after.len() < 30 {
        let g = s
            .next_matching(&m, after.is_empty())
            .unwrap_or_else(|e| panic!("the reader gave up: {e:?}"))
            .unwrap_or_else(|| panic!("the reader ended"));
        if after.is_empty() && g.frame != 0 {
            buffered.push(g);
        } else {
            after.push(g);
        }
    }
    let _server = restarted.join().unwrap_or_else(|_| panic!("restart"));
    s.close();
    let mut last_frame = before.len() - 1;
    for (k, g) in buffered.iter().enumerate() {
        assert_eq!(
            g.index,
            before.len() as i64 + 1 + k as i64,
            "tail {k} of {buffered:?}"
        );
        if g.frame == CONCEALED {
            continue;
        }
        assert!(
            g.frame > last_frame,
            "tail {k} repeats or reorders: {buffered:?}"
        );
        last_frame = g.frame;
    }
    assert!(
        after.iter().all(|g| g.frame != CONCEALED),
        "the new session's frames are the file's: {after:?}"
    );
    // The lost read counts one index, as in 1.0.4: the resumed stream's first frame has
    // the last index + 2, and the new session plays the file from its start.
    let last = before.len() as i64 + buffered.len() as i64;
    assert_run(&after, 0, last + 2);
    // Position timestamps follow each connection's own timeline, as OpenCV computes them:
    // after the first GOP's leading frames (whose B-frame reordering puts them before
    // the stream's start time), increasing; starting over after the reconnection.
    let all: Vec<Got> = before
        .iter()
        .chain(buffered.iter().filter(|g| g.frame != CONCEALED))
        .copied()
        .collect();
    assert!(all[3..].windows(2).all(|w| w[1].ts > w[0].ts), "{all:?}");
    assert!(
        after[3..].windows(2).all(|w| w[1].ts > w[0].ts),
        "{after:?}"
    );
    assert!(after[3].ts < all[all.len() - 1].ts);
}

#[test]
fn a_stalled_server_is_given_up_after_the_stall_timeout_and_reopened() {
    let m = media("stall");
    let server = Server::start(&m.path, 0, false);
    let mut s = Session::open(
        &server.url(),
        json!({"rtsp_transport": "tcp", "nb_retries": -1, "stall_timeout_s": 1.0}),
    );
    let before = s.take(&m, 20);
    assert_run(&before, 0, 1);
    // The server freezes (SIGSTOP) with the connection open, for three stall timeouts.
    server.signal("-STOP");
    let pid = server.child.as_ref().map(Child::id).unwrap_or_default();
    let resume = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        let _ = Command::new("kill")
            .args(["-CONT", &pid.to_string()])
            .status();
    });
    let mut rest = Vec::new();
    while rest.len() < 60 {
        match s.next(&m) {
            Ok(Some(g)) => rest.push(g),
            other => panic!("the reader stopped: {other:?}"),
        }
    }
    resume.join().unwrap_or_else(|_| panic!("resume"));
    s.close();
    // Frames already received come first; then the stall is a failed read (one index) and
    // the reopened session plays from the start of the file. A reader that waited the
    // stall out on the old connection would go on with the next frame and no gap instead.
    let cut = (0..rest.len())
        .find(|k| rest[*k].frame != before.len() + k)
        .unwrap_or_else(|| panic!("no reconnection: {rest:?}"));
    assert_run(&rest[..cut], before.len(), before.len() as i64 + 1);
    let last = (before.len() + cut) as i64;
    assert_run(&rest[cut..], 0, last + 2);
    // Clock timestamps (the default) never go backwards.
    let all: Vec<Got> = before.iter().chain(&rest).copied().collect();
    assert!(all.windows(2).all(|w| w[1].ts >= w[0].ts));
    assert!(all[all.len() - 1].ts <= wall_now());
}

#[test]
fn retries_running_out_after_the_server_is_gone_is_a_typed_error_naming_the_url() {
    let m = media("gone");
    let mut server = Server::start(&m.path, 0, false);
    let url = server.url();
    let mut s = Session::open(&url, json!({"rtsp_transport": "tcp", "nb_retries": 2}));
    let before = s.take(&m, 10);
    assert_run(&before, 0, 1);
    server.kill();
    let mut more = 0;
    let end = loop {
        match s.next(&m) {
            Ok(Some(_)) => more += 1,
            Ok(None) => panic!("ended as end of input after a failure"),
            Err(e) => break e,
        }
        assert!(more < FPS * SECONDS, "the reader does not end");
    };
    s.close();
    assert_eq!(end.code, ErrorCode::ResourceUnavailable, "{end:?}");
    assert!(end.message.contains(&url), "{}", end.message);
    assert!(
        end.message.contains("2 reconnection attempts"),
        "{}",
        end.message
    );
}

#[test]
fn a_stream_that_ends_and_no_retries_is_end_of_input_as_in_the_reference() {
    // The server plays the file once: at its end the stream ends cleanly and, with 1.0.4's
    // default nb_retries=0, so does the reader (no error), after every frame.
    let m = media("ends");
    let server = Server::start(&m.path, 0, false);
    let mut s = Session::open(
        &server.url(),
        json!({"rtsp_transport": "tcp", "stall_timeout_s": 5.0}),
    );
    let mut got = Vec::new();
    let end = loop {
        match s.next(&m) {
            Ok(Some(g)) => got.push(g),
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
        assert!(got.len() <= m.hashes.len(), "more frames than the file has");
    };
    s.close();
    assert_eq!(end, None);
    assert_run(&got, 0, 1);
    assert_eq!(got.len(), m.hashes.len());
}

#[test]
fn credentials_in_the_url_never_reach_the_error() {
    // Nothing listens on port 9 of loopback (discard): refused at once.
    let url = "rtsp://user:s3cret@127.0.0.1:9/test";
    let mut node = reader(URL_CLASS, json!({"url": url, "nb_retries": 1}))
        .unwrap_or_else(|e| panic!("build: {e:?}"));
    let mut ctx = NodeContext::new("f", "r", "video", 0);
    assert_eq!(node.open(&mut ctx), Ok(()));
    let end = node.next(&mut ctx);
    let Err(e) = end else {
        panic!("a refused connection read as {end:?}");
    };
    assert_eq!(e.code, ErrorCode::ResourceUnavailable);
    let text = format!("{e:?} {}", e.message);
    assert!(!text.contains("s3cret"), "{text}");
    assert!(text.contains("127.0.0.1:9/test"), "{text}");
}

#[test]
fn an_unknown_protocol_is_a_config_error_naming_the_url() {
    let mut node = reader(URL_CLASS, json!({"url": "nosuch://127.0.0.1/x"}))
        .unwrap_or_else(|e| panic!("build: {e:?}"));
    let mut ctx = NodeContext::new("f", "r", "video", 0);
    let Err(e) = node.open(&mut ctx) else {
        panic!("an unknown protocol opened");
    };
    assert_eq!(e.code, ErrorCode::Config, "{e:?}");
    assert!(e.message.contains("nosuch://127.0.0.1/x"), "{}", e.message);
}

#[test]
fn bad_params_are_config_errors() {
    for (p, says) in [
        (
            json!({"url": "rtsp://h/x", "rtsp_transport": "sctp"}),
            "rtsp_transport",
        ),
        (
            json!({"url": "rtsp://h/x", "stall_timeout_s": 0}),
            "stall_timeout_s",
        ),
        (
            json!({"url": "rtsp://h/x", "timestamp_source": "pts"}),
            "timestamp_source",
        ),
        (json!({}), "url"),
        (json!({"url": "rtsp://h/x", "nosuch": 1}), "nosuch"),
    ] {
        let Err(e) = reader(URL_CLASS, p.clone()) else {
            panic!("{p} accepted");
        };
        assert_eq!(e.code, ErrorCode::Config, "{p}: {e:?}");
        assert!(format!("{e:?}").contains(says), "{p}: {e:?}");
    }
    // 1.0.4's get_params() shape builds.
    assert!(
        reader(
            URL_CLASS,
            json!({"url": "rtsp://h/x", "nb_frames": -1, "nb_retries": 0, "is_finite": false,
                   "swap_channels": true, "timestamp_source": "clock", "name": "cam"})
        )
        .is_ok()
    );
    assert!(
        reader(
            DEVICE_CLASS,
            json!({"device_id": 0, "nb_frames": -1, "nb_retries": 0, "is_finite": false,
                   "swap_channels": true, "timestamp_source": "clock", "name": "cam"})
        )
        .is_ok()
    );
}

#[test]
fn a_missing_capture_device_is_a_config_error_naming_it() {
    let n = (0..1000)
        .find(|n| !Path::new(&format!("/dev/video{n}")).exists())
        .unwrap_or(999);
    let mut node =
        reader(DEVICE_CLASS, json!({"device_id": n})).unwrap_or_else(|e| panic!("build: {e:?}"));
    let mut ctx = NodeContext::new("f", "r", "video", 0);
    let Err(e) = node.open(&mut ctx) else {
        panic!("a missing device opened");
    };
    assert_eq!(e.code, ErrorCode::Config, "{e:?}");
    assert!(
        e.message.contains(&format!("/dev/video{n}")),
        "{}",
        e.message
    );
    assert!(e.message.contains("V4L2"), "{}", e.message);
    assert_eq!(node.close(&mut ctx), Ok(()));
}
