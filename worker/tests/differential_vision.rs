//! Differential tests of the image nodes against the Python reference, videoflow 1.0.4 with
//! OpenCV 5.0 (`opencv-python-headless` in the reference virtualenv): the same inputs, made
//! here at test time (seeded noise and gradients, PNGs written by the `ffmpeg` CLI), through
//! 1.0.4's node (`tests/conformance/vision_reference.py`) and ours, compared **on the wire**
//! byte for byte — `ResizeImageTransformer` (plain and `maintain_ratio`, up, down, odd
//! factors, 1 and 3 channels), `CropImageTransformer`, `MaskImageTransformer`,
//! `ImageProducer` and `ImageFolderReader` on PNGs — and `BoundingBoxAnnotator` pixel for
//! pixel except the label text 1.0.4 draws with `cv2.putText` (COMPATIBILITY V17).

mod support;
mod video_support;

use std::path::Path;
use std::process::Command;

use serde_json::{Map, Value as Json, json};
use video_support::build_node;
use video_support::{TempDir, run_ffmpeg};
use videoflow_core::envelope::{Payload, encode_payload};
use videoflow_core::model::NodeKind;
use videoflow_core::value::{Tensor, Value};
use videoflow_worker::nodes::{BuiltNode, Input, NodeContext};

const REMEDY: &str = "Run `./scripts/install-deps`: it installs the reference virtualenv with \
    OpenCV (scripts/reference-requirements.txt), which 1.0.4's image nodes compute with.";

/// A deterministic byte source (xorshift64*), so a failure reproduces.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next() >> 56) as u8).collect()
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One input of a case: our payload and how the reference loads it.
#[derive(Clone)]
enum Arg {
    Array(Tensor),
    Json(Json),
}

impl Arg {
    fn image(h: usize, w: usize, c: usize, noise: &mut Noise) -> Arg {
        let mut shape = vec![h as i64, w as i64];
        if c > 0 {
            shape.push(c as i64);
        }
        Arg::Array(Tensor::new(shape, "uint8", noise.bytes(h * w * c.max(1))))
    }

    fn f64s(shape: &[usize], values: &[f64]) -> Arg {
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Arg::Array(Tensor::new(
            shape.iter().map(|&d| d as i64).collect(),
            "float64",
            data,
        ))
    }

    fn i64s(shape: &[usize], values: &[i64]) -> Arg {
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Arg::Array(Tensor::new(
            shape.iter().map(|&d| d as i64).collect(),
            "int64",
            data,
        ))
    }

    fn input(&self) -> Input {
        Input::Present(match self {
            Arg::Array(t) => Payload::Tensor(t.clone()),
            Arg::Json(j) => Payload::Value(json_value(j)),
        })
    }
}

fn json_value(j: &Json) -> Value {
    match j {
        Json::Array(a) => Value::List(a.iter().map(json_value).collect()),
        Json::Number(n) if n.is_i64() => Value::Int(n.as_i64().unwrap_or_default()),
        Json::Number(n) => Value::Double(n.as_f64().unwrap_or_default()),
        Json::Null => Value::Null,
        other => Value::String(other.to_string()),
    }
}

/// What one case gave: the wire bytes and, for an array, its pixels and shape — or the
/// error.
#[derive(Debug, Clone, PartialEq)]
enum Out {
    Ok {
        payload_type: String,
        wire: Vec<u8>,
        raw: Option<(Vec<i64>, Vec<u8>)>,
    },
    Err(String),
}

/// Runs the reference's `class` over `cases` (or, for a producer, until it ends).
fn reference(class: &str, params: &Json, cases: &[Vec<Arg>], producer: bool) -> Vec<Out> {
    let dir = TempDir::new("vision-ref");
    let mut n = 0;
    let cases_json: Vec<Json> = cases
        .iter()
        .map(|case| {
            Json::Array(
                case.iter()
                    .map(|arg| match arg {
                        Arg::Array(t) => {
                            n += 1;
                            let file = format!("in{n}.raw");
                            std::fs::write(dir.join(&file), &t.data)
                                .unwrap_or_else(|e| panic!("{file}: {e}"));
                            json!({"raw": file, "dtype": t.dtype, "shape": t.shape})
                        }
                        Arg::Json(j) => json!({ "json": j }),
                    })
                    .collect(),
            )
        })
        .collect();
    let job = dir.join("job.json");
    let spec = json!({"class": class, "params": params, "producer": producer, "cases": cases_json});
    std::fs::write(&job, spec.to_string()).unwrap_or_else(|e| panic!("job: {e}"));
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap_or_else(|e| panic!("out: {e}"));
    let run = Command::new(support::reference_python())
        .arg(support::conformance_dir().join("vision_reference.py"))
        .arg(&job)
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the reference: {e}. {REMEDY}"));
    assert!(
        run.status.success(),
        "the reference failed for {class}: {}. {REMEDY}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: Json = serde_json::from_slice(&run.stdout)
        .unwrap_or_else(|e| panic!("report: {e}: {}", String::from_utf8_lossy(&run.stdout)));
    report["outputs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, o)| {
            if let Some(e) = o["error"].as_str() {
                return Out::Err(e.to_owned());
            }
            let read = |ext: &str| std::fs::read(out.join(format!("{i}.{ext}")));
            let raw = o["shape"].as_array().map(|s| {
                (
                    s.iter().filter_map(Json::as_i64).collect(),
                    read("raw").unwrap_or_else(|e| panic!("{i}.raw: {e}")),
                )
            });
            Out::Ok {
                payload_type: o["payload_type"].as_str().unwrap_or_default().to_owned(),
                wire: read("bin").unwrap_or_else(|e| panic!("{i}.bin: {e}")),
                raw,
            }
        })
        .collect()
}

fn ours_out(item: Result<Payload, String>) -> Out {
    match item {
        Err(e) => Out::Err(e),
        Ok(p) => {
            let (payload_type, wire) = encode_payload(&p).unwrap_or_else(|e| panic!("{e}"));
            let raw = match &p {
                Payload::Tensor(t) => Some((t.shape.clone(), t.data.to_vec())),
                _ => None,
            };
            Out::Ok {
                payload_type,
                wire,
                raw,
            }
        }
    }
}

fn params_map(params: &Json) -> Map<String, Json> {
    params.as_object().cloned().unwrap_or_default()
}

/// Runs our processor `class` over `cases`.
fn ours(class: &str, params: &Json, cases: &[Vec<Arg>]) -> Vec<Out> {
    let node = build_node(class, NodeKind::Processor, &params_map(params));
    let Ok(BuiltNode::Processor(mut node)) = node else {
        panic!("{class} not built: {node:?}");
    };
    let mut ctx = NodeContext::new("f", "p", "vision", 0);
    node.open(&mut ctx)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    cases
        .iter()
        .map(|case| {
            let inputs: Vec<Input> = case.iter().map(Arg::input).collect();
            ours_out(node.process(&mut ctx, &inputs).map_err(|e| e.render()))
        })
        .collect()
}

/// Our producer `class` until it ends.
fn ours_produced(class: &str, params: &Json) -> Vec<Out> {
    let node = build_node(class, NodeKind::Producer, &params_map(params));
    let Ok(BuiltNode::Producer(mut node)) = node else {
        panic!("{class} not built: {node:?}");
    };
    let mut ctx = NodeContext::new("f", "p", "vision", 0);
    node.open(&mut ctx)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    let mut out = Vec::new();
    while let Some(item) = node
        .next(&mut ctx)
        .unwrap_or_else(|e| panic!("{}", e.render()))
    {
        out.push(ours_out(Ok(item)));
        assert!(out.len() < 100, "does not end");
    }
    out
}

/// Every case: both failed, or both gave the same bytes on the wire.
fn assert_same(class: &str, params: &Json, cases: &[Vec<Arg>]) {
    let theirs = reference(class, params, cases, false);
    let mine = ours(class, params, cases);
    assert_eq!(
        theirs.len(),
        cases.len(),
        "{class} {params}: reference outputs"
    );
    let mut compared = 0;
    for (i, (m, t)) in mine.iter().zip(&theirs).enumerate() {
        match (m, t) {
            (Out::Err(_), Out::Err(_)) => {}
            (
                Out::Ok {
                    payload_type: mt,
                    wire: mw,
                    raw: mr,
                },
                Out::Ok {
                    payload_type: tt,
                    wire: tw,
                    raw: tr,
                },
            ) => {
                assert_eq!(mt, tt, "{class} {params} case {i}: payload type");
                if let (Some((ms, mp)), Some((ts, tp))) = (mr, tr) {
                    assert_eq!(ms, ts, "{class} {params} case {i}: shape");
                    let differing = mp.iter().zip(tp).filter(|(a, b)| a != b).count();
                    assert_eq!(
                        differing, 0,
                        "{class} {params} case {i}: {differing} bytes differ"
                    );
                }
                assert!(mw == tw, "{class} {params} case {i}: differs on the wire");
                compared += 1;
            }
            _ => panic!("{class} {params} case {i}: ours {m:?}\nreference {t:?}"),
        }
    }
    assert!(compared > 0, "{class} {params}: nothing compared");
}

const RESIZE: &str = "videoflow.processors.vision.transformers.ResizeImageTransformer";

#[test]
fn resize_matches_opencv_byte_for_byte_up_down_and_odd_factors() {
    let mut noise = Noise(0x5eed_0001);
    let sizes = [
        ((360, 640), (180, 320)),
        ((360, 640), (224, 300)),
        ((100, 130), (37, 259)),
        ((64, 64), (200, 150)),
        ((360, 640), (720, 1280)),
        ((359, 641), (123, 457)),
        ((7, 5), (1, 1)),
        ((1, 1), (9, 7)),
        ((33, 17), (33, 17)),
        ((480, 640), (300, 300)),
    ];
    let mut cases = Vec::new();
    for (i, ((h, w), (nh, nw))) in sizes.into_iter().enumerate() {
        let channels = if i % 3 == 2 { 0 } else { 3 };
        cases.push(vec![
            Arg::image(h, w, channels, &mut noise),
            Arg::Json(json!([nh, nw])),
        ]);
    }
    // A negative size fails in both.
    cases.push(vec![
        Arg::image(4, 4, 3, &mut noise),
        Arg::Json(json!([-1, 4])),
    ]);
    assert_same(RESIZE, &json!({}), &cases);
}

#[test]
fn resize_keeping_the_ratio_pads_as_the_reference() {
    let mut noise = Noise(0x5eed_0002);
    let cases = vec![
        vec![
            Arg::image(360, 640, 3, &mut noise),
            Arg::Json(json!([200, 400])),
        ],
        vec![
            Arg::image(360, 640, 3, &mut noise),
            Arg::Json(json!([300, 100])),
        ],
        vec![
            Arg::image(100, 80, 3, &mut noise),
            Arg::Json(json!([256, 256])),
        ],
        // Too wide for the target: 1.0.4 fails to broadcast, ours fails too.
        vec![
            Arg::image(100, 640, 3, &mut noise),
            Arg::Json(json!([100, 150])),
        ],
    ];
    assert_same(RESIZE, &json!({"maintain_ratio": true}), &cases);
}

#[test]
fn crop_matches_the_reference_for_int_and_float_boxes() {
    let mut noise = Noise(0x5eed_0003);
    let im = Arg::image(120, 160, 3, &mut noise);
    let cases = vec![
        vec![
            im.clone(),
            Arg::i64s(&[3, 4], &[0, 0, 10, 10, 5, 7, 120, 160, 30, 40, 31, 41]),
        ],
        vec![
            im.clone(),
            Arg::f64s(&[2, 4], &[1.9, 2.5, 50.7, 80.2, 0.0, 0.0, 0.0, 0.0]),
        ],
        // Reaching past the bottom edge (ymax 150 ≤ the width 160): cut at the edge.
        vec![im.clone(), Arg::i64s(&[1, 4], &[100, 10, 150, 20])],
        // A detector's boxes, `[ymin, xmin, ymax, xmax, class, score]`: the first four
        // columns are the box in both.
        vec![
            im.clone(),
            Arg::f64s(
                &[2, 6],
                &[
                    10.0, 20.0, 40.0, 60.0, 1.0, 0.9, 0.0, 0.0, 5.0, 5.0, 2.0, 0.5,
                ],
            ),
        ],
        // Three columns are not a box in either.
        vec![im.clone(), Arg::i64s(&[1, 3], &[0, 0, 5])],
        // Negative and reversed boxes fail in both.
        vec![im.clone(), Arg::i64s(&[1, 4], &[-1, 0, 5, 5])],
        vec![im, Arg::i64s(&[1, 4], &[9, 0, 5, 5])],
    ];
    assert_same(
        "videoflow.processors.vision.transformers.CropImageTransformer",
        &json!({}),
        &cases,
    );
}

#[test]
fn mask_matches_the_reference() {
    let mut noise = Noise(0x5eed_0004);
    let (h, w) = (90, 70);
    let mut values: Vec<f64> = (0..h * w).map(|_| noise.unit()).collect();
    values[0] = 0.0;
    values[1] = 1.0;
    values[2] = 0.5;
    let cases = vec![
        vec![Arg::image(h, w, 3, &mut noise), Arg::f64s(&[h, w], &values)],
        vec![
            Arg::image(h, w + 1, 3, &mut noise),
            Arg::f64s(&[h, w], &values),
        ],
    ];
    assert_same(
        "videoflow.processors.vision.transformers.MaskImageTransformer",
        &json!({}),
        &cases,
    );
}

/// A PNG of `testsrc2` at `size` in `pix_fmt`, written by the ffmpeg CLI.
fn png(dir: &TempDir, name: &str, size: &str, pix_fmt: &str) -> String {
    let path = dir.join(name);
    let p = path.display().to_string();
    run_ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        &format!("testsrc2=size={size}:rate=1"),
        "-frames:v",
        "1",
        "-pix_fmt",
        pix_fmt,
        &p,
    ]);
    p
}

#[test]
fn image_producer_reads_pngs_as_the_reference() {
    let dir = TempDir::new("vision-png");
    for (name, pix_fmt) in [
        ("rgb.png", "rgb24"),
        ("gray.png", "gray"),
        ("rgba.png", "rgba"),
    ] {
        let file = png(&dir, name, "320x180", pix_fmt);
        let params = json!({ "image_path": file });
        let class = "videoflow.producers.video.ImageProducer";
        let theirs = reference(class, &params, &[], true);
        let mine = ours_produced(class, &params);
        assert_eq!(
            theirs.len(),
            1,
            "{name}: the reference read {}",
            theirs.len()
        );
        assert_eq!(mine, theirs, "{name}");
    }
}

#[test]
fn image_folder_reader_gives_each_image_in_name_order_as_image_producer_does() {
    let dir = TempDir::new("vision-folder");
    let names = ["b.png", "a10.png", "a2.PNG", "c.png"];
    let sizes = ["64x48", "80x60", "32x32", "50x20"];
    for (name, size) in names.iter().zip(sizes) {
        png(&dir, name, size, "rgb24");
    }
    std::fs::write(dir.join("notes.txt"), "not an image").unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(dir.join("sub.png")).unwrap_or_else(|e| panic!("{e}"));
    let mine = ours_produced(
        "videoflow.producers.video.ImageFolderReader",
        &json!({"folder_path": dir.path().display().to_string()}),
    );
    let mut sorted = names.to_vec();
    sorted.sort_unstable();
    assert_eq!(sorted, ["a10.png", "a2.PNG", "b.png", "c.png"]);
    assert_eq!(mine.len(), sorted.len());
    for (name, m) in sorted.iter().zip(&mine) {
        let params = json!({"image_path": dir.join(name).display().to_string()});
        let theirs = reference(
            "videoflow.producers.video.ImageProducer",
            &params,
            &[],
            true,
        );
        assert_eq!(Some(m), theirs.first(), "{name}");
    }
}

const LABELS: &str = "item {\n  id: 1\n  display_name: \"person\"\n}\nitem {\n  id: 2\n  \
    display_name: \"car\"\n}\n";

/// Boxes `[ymin, xmin, ymax, xmax, class, score]` as a float64 `(n, 6)` array.
fn boxes(rows: &[[f64; 6]]) -> Arg {
    let values: Vec<f64> = rows.iter().flatten().copied().collect();
    Arg::f64s(&[rows.len(), 6], &values)
}

#[test]
fn bounding_boxes_are_the_reference_pixels_except_its_label_text() {
    let dir = TempDir::new("vision-boxes");
    let labels = dir.join("labels.pbtxt");
    std::fs::write(&labels, LABELS).unwrap_or_else(|e| panic!("{e}"));
    let mut noise = Noise(0x5eed_0005);
    let (h, w) = (180usize, 240usize);
    let rows = [
        [40.0, 30.0, 120.0, 90.0, 1.0, 0.87],
        [10.7, 150.2, 60.9, 230.5, 2.0, 0.5],
        // Reaching past the image on two sides.
        [150.0, 200.0, 400.0, 500.0, 1.0, 0.25],
        [-20.0, -5.0, 30.0, 20.0, 2.0, 0.99],
    ];
    let class = "videoflow.processors.vision.annotators.BoundingBoxAnnotator";
    for (thickness, color) in [
        (2, json!([255, 225, 0])),
        (1, json!([0, 0, 255])),
        (3, json!([10, 200, 30])),
        (6, json!([1, 2, 3])),
        (-1, json!([90, 80, 70])),
    ] {
        let im = Arg::image(h, w, 3, &mut noise);
        let Arg::Array(input) = &im else {
            unreachable!()
        };
        let input = input.data.to_vec();
        let params = json!({
            "class_labels_path": labels.display().to_string(),
            "box_thickness": thickness,
            "box_color": color,
        });
        let cases = vec![vec![im.clone(), boxes(&rows)], vec![im.clone(), boxes(&[])]];
        let theirs = reference(class, &params, &cases, false);
        let mine = ours(class, &params, &cases);
        let pixels = |o: &Out| match o {
            Out::Ok {
                raw: Some((s, p)), ..
            } => {
                assert_eq!(s, &[h as i64, w as i64, 3]);
                p.clone()
            }
            other => panic!("{params}: not an image: {other:?}"),
        };
        let (t, m) = (pixels(&theirs[0]), pixels(&mine[0]));
        let mut drawn = 0;
        for i in 0..h * w {
            let (tp, mp, ip) = (
                &t[i * 3..i * 3 + 3],
                &m[i * 3..i * 3 + 3],
                &input[i * 3..i * 3 + 3],
            );
            if mp != ip {
                drawn += 1;
            }
            if tp == mp {
                continue;
            }
            // Only the reference's label text may differ (drawn over the image and over
            // the box edge it crosses): pixels in a label's band, the rows of the text
            // 1.0.4 puts 15 rows above the box's top edge (or below it, near the top).
            let (y, x) = ((i / w) as f64, (i % w) as f64);
            let in_label = rows.iter().any(|b| {
                let ymin = b[0].trunc();
                let y_label = if ymin - 15.0 > 15.0 {
                    ymin - 15.0
                } else {
                    (ymin + 15.0).min(b[2].trunc())
                };
                x >= b[1].trunc() - 1.0 && y >= y_label - 14.0 && y <= y_label + 5.0
            });
            assert!(
                in_label,
                "{params}: pixel ({y}, {x}) is {mp:?}, the reference's {tp:?}"
            );
        }
        assert!(drawn > 300, "{params}: only {drawn} pixels drawn");
        // No boxes: the image unchanged, on the wire too.
        assert_eq!(mine[1], theirs[1], "{params}: no boxes");
    }
}

#[test]
fn an_annotator_without_labels_or_dataset_is_refused_as_the_reference_refuses_it() {
    let r = build_node(
        "videoflow.processors.vision.annotators.BoundingBoxAnnotator",
        NodeKind::Processor,
        &params_map(&json!({"class_labels_path": null, "class_labels_dataset": null})),
    );
    let e = r.err().unwrap_or_else(|| panic!("built"));
    assert_eq!(e.code.code(), "VF_CONFIG", "{}", e.render());
    assert!(
        e.message.contains("class_labels_dataset cannot be None"),
        "{}",
        e.message
    );
    let missing = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such-labels.pbtxt");
    let r = build_node(
        "videoflow.processors.vision.annotators.BoundingBoxAnnotator",
        NodeKind::Processor,
        &params_map(&json!({"class_labels_path": missing.display().to_string()})),
    );
    assert!(r.is_err(), "a missing label map must be refused");
}
