//! `videoflow.producers.video.VideoFileReader` on real media made at test time
//! (`video_support`): frames against the `ffmpeg` CLI's own `bgr24` conversion byte for byte,
//! 1.0.4's indices, `nb_frames`, `swap_channels` and event timestamps, and every way a file
//! can be bad — missing, not a file, not a video, an unsupported codec, cut short, damaged —
//! each a typed error naming the file, after the frames before any damage.

#![cfg(feature = "video")]

mod video_support;

use serde_json::{Map, Value as Json, json};
use video_support::{
    FRAMES, H, TempDir, W, cli_bgr_frames, frames_before, h264, h265, packets, run_ffmpeg,
    truncated_copy,
};
use video_support::{build_node, decode_twice};
use videoflow_core::envelope::Payload;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::model::NodeKind;
use videoflow_core::value::Value;
use videoflow_worker::clock::wall_now;
use videoflow_worker::nodes::{BuiltNode, GpuPlacement, NodeContext, Producer};

const CLASS: &str = "videoflow.producers.video.VideoFileReader";

fn params(j: Json) -> Map<String, Json> {
    match j {
        Json::Object(m) => m,
        _ => Map::new(),
    }
}

fn reader(class: &str, p: Json) -> Result<Box<dyn Producer>, VfError> {
    match build_node(class, NodeKind::Producer, &params(p))? {
        BuiltNode::Producer(p) => Ok(p),
        other => panic!("{class}: expected a producer, got {other:?}"),
    }
}

/// One output: 1.0.4's `(index, frame)` tuple, with the event time the node stamped.
#[derive(Debug)]
struct Out {
    index: i64,
    shape: Vec<i64>,
    dtype: String,
    data: Vec<u8>,
    event_ts: Option<f64>,
}

/// Opens and drains `p`: every output, then how it ended (`None`: end of input).
fn drain(p: &mut dyn Producer) -> (Vec<Out>, Option<VfError>) {
    drain_in(p, NodeContext::new("f", "r", "video", 0))
}

/// [`drain`] with the node's context `ctx` (its GPU placement).
fn drain_in(p: &mut dyn Producer, mut ctx: NodeContext) -> (Vec<Out>, Option<VfError>) {
    if let Err(e) = p.open(&mut ctx) {
        return (Vec::new(), Some(e));
    }
    let mut out = Vec::new();
    let end = loop {
        match p.next(&mut ctx) {
            Ok(Some(item)) => out.push(unpack(item, ctx.take_output_event_timestamp())),
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
        assert!(out.len() <= 10 * FRAMES, "the reader does not end");
    };
    assert_eq!(p.close(&mut ctx), Ok(()));
    (out, end)
}

fn unpack(item: Payload, event_ts: Option<f64>) -> Out {
    let Payload::Value(Value::List(items)) = item else {
        panic!("not a tuple: {item:?}");
    };
    match items.as_slice() {
        [Value::Int(index), Value::Tensor(t)] => Out {
            index: *index,
            shape: t.shape.clone(),
            dtype: t.dtype.clone(),
            data: t.data.to_vec(),
            event_ts,
        },
        other => panic!("not (int, tensor): {other:?}"),
    }
}

fn read_all(path: &std::path::Path, extra: Json) -> (Vec<Out>, Option<VfError>) {
    let mut p = json!({"video_file": path.display().to_string()});
    if let (Some(m), Json::Object(e)) = (p.as_object_mut(), extra) {
        m.extend(e);
    }
    let mut node = reader(CLASS, p).unwrap_or_else(|e| panic!("{}", e.render()));
    drain(node.as_mut())
}

/// Frames equal `want` one for one, indices 1, 2, … (1.0.4 counts from 1).
fn assert_frames(got: &[Out], want: &[Vec<u8>]) {
    assert_eq!(got.len(), want.len(), "frame count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.index, i as i64 + 1, "index of frame {i}");
        assert_eq!(g.shape, vec![H as i64, W as i64, 3], "shape of frame {i}");
        assert_eq!(g.dtype, "uint8");
        assert!(g.data == *w, "frame {} differs from ffmpeg's bgr24", i + 1);
    }
}

fn rgb_of(bgr: &[u8]) -> Vec<u8> {
    bgr.chunks_exact(3)
        .flat_map(|p| [p[2], p[1], p[0]])
        .collect()
}

#[test]
fn h264_with_b_frames_equals_ffmpeg_bgr24_byte_for_byte() {
    let dir = TempDir::new("h264");
    let file = h264(&dir, "in.mp4", &[]);
    let want = cli_bgr_frames(&file);
    assert_eq!(want.len(), FRAMES);
    let (got, end) = read_all(&file, json!({}));
    assert!(end.is_none(), "{end:?}");
    assert_frames(&got, &want);
    // timestamp_source defaults to `position`: the file's own timeline, 40 ms apart.
    for (i, g) in got.iter().enumerate() {
        let ts = g.event_ts.expect("an event time");
        assert!((ts - i as f64 * 0.04).abs() < 1e-9, "frame {i}: {ts}");
    }
}

#[test]
fn h265_with_b_frames_equals_ffmpeg_bgr24_byte_for_byte() {
    let dir = TempDir::new("h265");
    let file = h265(&dir, "in.mp4");
    let want = cli_bgr_frames(&file);
    let (got, end) = read_all(&file, json!({}));
    assert!(end.is_none(), "{end:?}");
    assert_frames(&got, &want);
}

#[test]
fn matroska_reads_like_mp4() {
    let dir = TempDir::new("mkv");
    let file = h264(&dir, "in.mkv", &[]);
    let (got, end) = read_all(&file, json!({}));
    assert!(end.is_none(), "{end:?}");
    assert_frames(&got, &cli_bgr_frames(&file));
}

#[test]
fn swap_channels_gives_rgb() {
    let dir = TempDir::new("swap");
    let file = h264(&dir, "in.mp4", &[]);
    let want: Vec<Vec<u8>> = cli_bgr_frames(&file).iter().map(|f| rgb_of(f)).collect();
    let (got, end) = read_all(&file, json!({"swap_channels": true}));
    assert!(end.is_none(), "{end:?}");
    assert_frames(&got, &want);
}

/// MSGID-6: a resumed reader (`seek(k)` after `open()`) yields frame k + 1 onwards, with
/// their own indices and bytes — what the first process would have published next — and a
/// seek past the end or past `nb_frames` yields nothing.
#[test]
fn msgid_6_seek_resumes_at_the_next_frame_byte_for_byte() {
    let dir = TempDir::new("seek");
    let file = h264(&dir, "in.mp4", &[]);
    let want = cli_bgr_frames(&file);
    let resumed = |offset: u64, extra: Json| {
        let mut p = json!({"video_file": file.display().to_string()});
        if let (Some(m), Json::Object(e)) = (p.as_object_mut(), extra) {
            m.extend(e);
        }
        let mut node = reader(CLASS, p).unwrap_or_else(|e| panic!("{}", e.render()));
        assert!(node.replayable());
        let mut ctx = NodeContext::new("f", "r", "video", 0);
        node.open(&mut ctx).expect("opens");
        node.seek(offset).expect("seeks");
        let mut out = Vec::new();
        while let Some(item) = node.next(&mut ctx).expect("reads") {
            out.push(unpack(item, None));
        }
        node.close(&mut ctx).expect("closes");
        out
    };
    let got = resumed(5, json!({}));
    assert_eq!(got.len(), FRAMES - 5);
    for (g, (i, w)) in got.iter().zip(want.iter().enumerate().skip(5)) {
        assert_eq!(g.index, i as i64 + 1);
        assert!(g.data == *w, "frame {} differs after the seek", i + 1);
    }
    assert!(resumed(FRAMES as u64 + 3, json!({})).is_empty());
    let capped = resumed(5, json!({"nb_frames": 7}));
    assert_eq!(
        capped.iter().map(|o| o.index).collect::<Vec<_>>(),
        [6, 7],
        "nb_frames counts the frames before the resume point"
    );
    assert!(resumed(9, json!({"nb_frames": 7})).is_empty());
}

#[test]
fn nb_frames_stops_after_that_many_and_zero_reads_none() {
    let dir = TempDir::new("nb");
    let file = h264(&dir, "in.mp4", &[]);
    let want = cli_bgr_frames(&file);
    let (got, end) = read_all(&file, json!({"nb_frames": 7}));
    assert!(end.is_none(), "{end:?}");
    assert_frames(&got, &want[..7]);
    let (got, end) = read_all(&file, json!({"nb_frames": 0}));
    assert!(end.is_none() && got.is_empty(), "{got:?} {end:?}");
    // Only an exact match stops it early: any other value reads to the end, as in 1.0.4.
    for nb in [-1, -3, 500] {
        let (got, end) = read_all(&file, json!({"nb_frames": nb}));
        assert!(end.is_none(), "{end:?}");
        assert_eq!(got.len(), FRAMES, "nb_frames {nb}");
    }
}

#[test]
fn clock_timestamps_are_the_wall_clock_at_read() {
    let dir = TempDir::new("clock");
    let file = h264(&dir, "in.mp4", &[]);
    let before = wall_now();
    let (got, end) = read_all(&file, json!({"timestamp_source": "clock"}));
    let after = wall_now();
    assert!(end.is_none(), "{end:?}");
    assert_eq!(got.len(), FRAMES);
    let mut last = before;
    for g in &got {
        let ts = g.event_ts.expect("an event time");
        assert!(ts >= last && ts <= after, "{ts} not in [{last}, {after}]");
        last = ts;
    }
}

#[test]
fn a_bad_timestamp_source_is_the_reference_value_error() {
    let e = reader(
        CLASS,
        json!({"video_file": "x.mp4", "timestamp_source": "pts"}),
    )
    .err()
    .expect("refused");
    assert_eq!(e.code, ErrorCode::Config);
    assert_eq!(
        e.message,
        "timestamp_source must be one of ('clock', 'position'), got 'pts'"
    );
}

#[test]
fn params_follow_the_reference() {
    // video_file is required; the old name and the package form build the same class.
    let e = reader(CLASS, json!({})).err().expect("refused");
    assert_eq!(e.code, ErrorCode::Config);
    assert!(e.message.contains("requires parameter 'video_file'"), "{e}");
    for class in [
        "videoflow.producers.video.VideofileReader",
        "videoflow.producers.VideofileReader",
    ] {
        assert!(
            reader(class, json!({"video_file": "x.mp4"})).is_ok(),
            "{class}"
        );
    }
    // 1.0.4's VideoFileReader fixes nb_retries itself and takes no such argument.
    let e = reader(CLASS, json!({"video_file": "x.mp4", "nb_retries": 3}))
        .err()
        .expect("refused");
    assert!(e.message.contains("has no parameter 'nb_retries'"), "{e}");
    // get_params() of 1.0.4 as the compiler ships it.
    let shipped = json!({"video_file": "x.mp4", "swap_channels": false, "nb_frames": -1,
                         "timestamp_source": "position", "name": "video"});
    assert!(reader(CLASS, shipped).is_ok());
}

#[test]
fn next_before_open_is_a_node_contract_error() {
    let mut node = reader(CLASS, json!({"video_file": "x.mp4"})).expect("built");
    let mut ctx = NodeContext::default();
    let e = node.next(&mut ctx).expect_err("refused");
    assert_eq!(e.code, ErrorCode::NodeContract);
    assert!(
        e.message
            .starts_with("VideoFileReader.next() called before open()"),
        "{e}"
    );
}

/// A refusal at `open()`: `VF_CONFIG` (exit 2) naming the file.
fn assert_config_naming(end: Option<VfError>, file: &str, says: &str) -> VfError {
    let e = end.expect("refused");
    assert_eq!(e.code, ErrorCode::Config, "{}", e.render());
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.message.contains(file),
        "{} does not name {file}",
        e.message
    );
    assert!(
        e.message.contains(says),
        "{} does not say {says:?}",
        e.message
    );
    assert_eq!(e.context.get("file").and_then(Json::as_str), Some(file));
    e
}

#[test]
fn a_missing_file_is_a_config_error_naming_it() {
    let dir = TempDir::new("missing");
    let file = dir.join("nowhere.mp4").display().to_string();
    let (got, end) = read_all(std::path::Path::new(&file), json!({}));
    assert!(got.is_empty());
    assert_config_naming(end, &file, "does not exist");
    let dir_path = dir.path().display().to_string();
    let (_, end) = read_all(dir.path(), json!({}));
    assert_config_naming(end, &dir_path, "is not a regular file");
}

#[test]
fn a_file_that_is_not_a_video_is_a_config_error_naming_what_is_supported() {
    let dir = TempDir::new("notvideo");
    let text = dir.join("notes.mp4");
    std::fs::write(&text, "these are not frames\n".repeat(100)).expect("write");
    let (got, end) = read_all(&text, json!({}));
    assert!(got.is_empty());
    let e = assert_config_naming(end, &text.display().to_string(), "is not a video file");
    assert!(e.remedy.unwrap_or_default().contains("H.264"));
    // An audio-only file has no video stream.
    let audio = dir.join("tone.wav");
    run_ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        "sine=d=0.5",
        &audio.display().to_string(),
    ]);
    let (_, end) = read_all(&audio, json!({}));
    assert_config_naming(end, &audio.display().to_string(), "has no video stream");
}

#[test]
fn an_unsupported_codec_is_a_config_error_naming_it_and_what_is_supported() {
    // A Matroska file whose codec id FFmpeg does not know: the container reads, the codec
    // has no decoder.
    let dir = TempDir::new("codec");
    let good = h264(&dir, "in.mkv", &[]);
    let mut bytes = std::fs::read(&good).expect("read");
    let id = b"V_MPEG4/ISO/AVC";
    let at = bytes
        .windows(id.len())
        .position(|w| w == id)
        .expect("codec id in the header");
    bytes[at..at + id.len()].copy_from_slice(b"V_NOSUCH/CODEC!");
    let odd = dir.join("odd.mkv");
    std::fs::write(&odd, bytes).expect("write");
    let (got, end) = read_all(&odd, json!({}));
    assert!(got.is_empty());
    let e = assert_config_naming(end, &odd.display().to_string(), "cannot decode");
    let remedy = e.remedy.unwrap_or_default();
    assert!(
        remedy.contains("H.264") && remedy.contains("H.265/HEVC"),
        "{remedy}"
    );
}

/// The end of a damaged file: `VF_POISON` naming the file and where, after `delivered`.
fn assert_damage(end: Option<VfError>, file: &str, delivered: usize) {
    let e = end.expect("a damage error");
    assert_eq!(e.code, ErrorCode::Poison, "{}", e.render());
    assert!(e.message.contains(file), "{}", e.message);
    assert!(
        e.message
            .contains(&format!("is damaged after frame {delivered}")),
        "{}",
        e.message
    );
    assert_eq!(
        e.context.get("frames_delivered").and_then(Json::as_u64),
        Some(delivered as u64)
    );
}

/// An MP4 whose index comes first (`+faststart`, as streaming tools write it) cut short:
/// the demuxer marks the cut sample, so exactly the frames before the cut are delivered.
/// (Matroska and MPEG-TS cut inside a packet drop it and end as if the file had ended:
/// docs/COMPATIBILITY.md.)
#[test]
fn a_truncated_file_delivers_the_frames_before_the_cut_then_a_typed_error() {
    let dir = TempDir::new("cut");
    for (name, extra) in [("fs.mp4", &["-movflags", "+faststart"][..])] {
        let good = h264(&dir, name, extra);
        let want = cli_bgr_frames(&good);
        let pkts = packets(&good);
        // Cut inside a packet early, in the middle and near the end (decode order).
        for k in [3, 24, 45] {
            let cut = pkts[k].pos + pkts[k].size / 2;
            let file = dir.join(&format!("cut{k}-{name}"));
            truncated_copy(&good, &file, cut);
            let (got, end) = read_all(&file, json!({}));
            let expected = frames_before(&pkts, cut);
            assert!(
                expected > 0 && expected < FRAMES,
                "{name} cut in packet {k}"
            );
            assert_frames(&got, &want[..expected]);
            assert_damage(end, &file.display().to_string(), expected);
        }
    }
}

#[test]
fn an_mp4_cut_before_its_index_was_written_is_refused_at_open() {
    // ffmpeg writes the index (moov) last by default: a recording cut short has none.
    let dir = TempDir::new("nomoov");
    let good = h264(&dir, "in.mp4", &[]);
    let len = std::fs::metadata(&good).expect("stat").len();
    let file = dir.join("cut.mp4");
    truncated_copy(&good, &file, len / 2);
    let (got, end) = read_all(&file, json!({}));
    assert!(got.is_empty());
    assert_config_naming(end, &file.display().to_string(), "is not a video file");
}

#[test]
fn damage_in_the_middle_delivers_clean_frames_before_it_then_a_typed_error() {
    let dir = TempDir::new("damage");
    // Where a packet's H.264 data starts, from where ffprobe places the packet: an MP4
    // sample is the data itself; a Matroska block starts with its track number, timecode
    // and flags (4 bytes here).
    for (name, data_at) in [("in.mp4", 0), ("in.mkv", 4)] {
        let good = h264(&dir, name, &[]);
        let want = cli_bgr_frames(&good);
        let pkts = packets(&good);
        for k in [5, 20, 33] {
            // A NAL length field beyond the packet: the decoder cannot split it and says so.
            let victim = pkts[k];
            let mut bytes = std::fs::read(&good).expect("read");
            let at = (victim.pos + data_at) as usize;
            bytes[at..at + 4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
            let file = dir.join(&format!("damaged{k}-{name}"));
            std::fs::write(&file, bytes).expect("write");
            let (got, end) = read_all(&file, json!({}));
            // Every frame delivered is a clean one from before the damage (with frame
            // threads the error can surface a few frames late and those are held back).
            let before = frames_before(&pkts, victim.pos);
            assert!(got.len() <= before, "{name} {k}: {} > {before}", got.len());
            assert!(
                got.len() + 8 >= before,
                "{name} {k}: {} ≪ {before}",
                got.len()
            );
            assert_frames(&got, &want[..got.len()]);
            assert_damage(end, &file.display().to_string(), got.len());
        }
    }
}

/// A reader whose node holds a GPU grant decodes on NVDEC — or, where NVDEC cannot open (no
/// driver library here), on the CPU, saying why — and its frames are the CPU decoder's
/// either way, in count and size, and on the CPU byte for byte `ffmpeg`'s `bgr24`.
#[test]
fn a_gpu_granted_reader_decodes_on_nvdec_or_falls_back_to_the_cpu_with_the_reason() {
    let dir = TempDir::new("gpu-reader");
    let file = h264(&dir, "in.mp4", &[]);
    let want = cli_bgr_frames(&file);
    let granted = GpuPlacement::Granted {
        devices: vec!["GPU-aaaa1111".into()],
        required: false,
    };
    let report = decode_twice(&file.display().to_string(), &granted);
    let g = &report["granted"];
    assert_eq!(report["cpu"]["hardware"], "cpu", "{report}");
    assert_eq!(report["cpu"]["decoder"], "h264", "{report}");
    assert_eq!(report["cpu"]["fallback"], Json::Null, "{report}");
    assert_eq!(report["cpu"]["frames"], json!(FRAMES), "{report}");
    assert_eq!(report["same_frames"], true, "{report}");
    if g["hardware"] == "gpu" {
        assert_eq!(g["decoder"], "h264_cuvid", "{report}");
        assert_eq!(g["fallback"], Json::Null, "{report}");
    } else {
        assert_eq!(g["decoder"], "h264", "{report}");
        assert_eq!(g["fallback"]["reason"], "nvdec_open_failed", "{report}");
        let detail = g["fallback"]["detail"].as_str().unwrap_or_default();
        assert!(detail.starts_with("h264_cuvid did not open ("), "{report}");
        assert_eq!(report["bytes_match"], true, "{report}");
        // Through the node: the granted reader's frames are ffmpeg's, index for index.
        let mut node = reader(CLASS, json!({"video_file": file.display().to_string()}))
            .unwrap_or_else(|e| panic!("{}", e.render()));
        let mut ctx = NodeContext::new("f", "r", "video", 0);
        ctx.gpu = granted.clone();
        let (got, end) = drain_in(node.as_mut(), ctx);
        assert!(end.is_none(), "{end:?}");
        assert_frames(&got, &want);
    }
}

/// A node that asked for a GPU and was delivered none, and a codec NVDEC does not decode:
/// the CPU decodes, and the reason is the grant's, or the codec's.
#[test]
fn no_delivered_device_or_a_codec_without_nvdec_decodes_on_the_cpu_with_that_reason() {
    let dir = TempDir::new("gpu-denied");
    let file = h264(&dir, "in.mp4", &[]);
    let denied = GpuPlacement::Denied("requested 1 device(s), delivered 0".into());
    let report = decode_twice(&file.display().to_string(), &denied);
    let g = &report["granted"];
    assert_eq!(g["hardware"], "cpu", "{report}");
    assert_eq!(g["fallback"]["reason"], "no_device", "{report}");
    assert!(
        g["fallback"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("delivered 0")),
        "{report}"
    );
    assert_eq!(report["bytes_match"], true, "{report}");
    // Raw video has no NVDEC decoder, whatever the grant.
    let raw = dir.join("raw.avi");
    run_ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=64x48:rate=25",
        "-frames:v",
        "5",
        "-c:v",
        "rawvideo",
        "-pix_fmt",
        "bgr24",
        raw.to_str().unwrap_or_default(),
    ]);
    let unobserved = GpuPlacement::Unobserved("no probe answered".into());
    let report = decode_twice(&raw.display().to_string(), &unobserved);
    let g = &report["granted"];
    assert_eq!(g["codec"], "rawvideo", "{report}");
    assert_eq!(g["fallback"]["reason"], "codec_without_nvdec", "{report}");
    assert_eq!(g["fallback"]["detail"], "NVDEC has no decoder for rawvideo");
    assert_eq!(g["frames"], 5, "{report}");
    assert_eq!(report["bytes_match"], true, "{report}");
}

/// A node that declared `gpu.fallback: none` is refused at `open()` when NVDEC cannot
/// decode its file — `VF_RESOURCE_UNAVAILABLE` naming the file and why — instead of quietly
/// decoding on the CPU (on a machine with NVDEC it opens on the GPU).
#[test]
fn a_reader_that_requires_its_gpu_is_refused_when_nvdec_cannot_decode() {
    let dir = TempDir::new("gpu-required");
    let file = h264(&dir, "in.mp4", &[]);
    let path = file.display().to_string();
    let required = GpuPlacement::Granted {
        devices: vec!["GPU-aaaa1111".into()],
        required: true,
    };
    let nvdec = decode_twice(
        &path,
        &GpuPlacement::Granted {
            devices: vec!["GPU-aaaa1111".into()],
            required: false,
        },
    );
    let mut node =
        reader(CLASS, json!({"video_file": path})).unwrap_or_else(|e| panic!("{}", e.render()));
    let mut ctx = NodeContext::new("f", "r", "video", 0);
    ctx.gpu = required;
    let (got, end) = drain_in(node.as_mut(), ctx);
    if nvdec["granted"]["hardware"] == "gpu" {
        assert!(end.is_none(), "{end:?}");
        assert_eq!(got.len(), FRAMES);
        return;
    }
    let e = end.unwrap_or_else(|| panic!("opened without NVDEC"));
    assert!(got.is_empty());
    assert_eq!(e.code, ErrorCode::ResourceUnavailable, "{}", e.render());
    assert!(
        e.message.contains(&format!(
            "video_file '{path}' must be decoded on the GPU (gpu.fallback: none), and NVDEC \
             cannot: h264_cuvid did not open ("
        )),
        "{}",
        e.render()
    );
    assert!(
        e.remedy_text()
            .is_some_and(|r| r.contains("gpu.fallback: cpu")),
        "{}",
        e.render()
    );
}
