//! 1.0.4's `videoflow.processors.vision.annotators.BoundingBoxAnnotator`.

use videoflow_core::envelope::Payload;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_repr_str;

use super::array::{image, numbers};
use super::draw::Canvas;
use crate::nodes::convert::{arity_error, expect_inputs, schema_error};
use crate::nodes::params::Params;
use crate::nodes::{Input, NodeContext, Processor};

const NODE: &str = "BoundingBoxAnnotator";

/// The label datasets 1.0.4 knows by name.
const DATASETS: &[&str] = &["coco", "oidv4", "pascal", "kitti", "faces"];

/// `BoundingBoxAnnotator(class_labels_path=None, class_labels_dataset='coco',
/// box_color=(255, 225, 0), box_thickness=2, text_color=(255, 255, 0))`:
/// `process(im, boxes)` returns a copy of `im` with one rectangle per row `[ymin, xmin,
/// ymax, xmax, class_index, score]` of `boxes`, drawn as `cv2.rectangle` draws it.
///
/// The label text 1.0.4 writes above each box with `cv2.putText` (`"<label>: <score>%"`) is
/// not drawn (docs/COMPATIBILITY.md): OpenCV's Hershey glyphs are its own data. So the label
/// map is read only to check it (`class_labels_path`, a `.pbtxt` as 1.0.4 parses), and a
/// dataset name is accepted without the download 1.0.4 makes for it.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundingBoxAnnotator {
    box_color: Vec<u8>,
    box_thickness: i64,
}

/// A colour tuple as OpenCV takes it: each channel rounded and saturated to `0..=255`.
fn color(p: &mut Params<'_>, name: &'static str, default: [u8; 3]) -> Result<Vec<u8>, VfError> {
    let Some(j) = p.opt_json(name) else {
        return Ok(default.to_vec());
    };
    let values = j
        .as_array()
        .filter(|a| (1..=4).contains(&a.len()))
        .and_then(|a| {
            a.iter()
                .map(serde_json::Value::as_f64)
                .collect::<Option<Vec<f64>>>()
        });
    match values {
        Some(v) => Ok(v
            .into_iter()
            .map(|c| c.round_ties_even().clamp(0.0, 255.0) as u8)
            .collect()),
        None => Err(p.bad(
            name,
            "a colour tuple of 1 to 4 numbers, e.g. [255, 225, 0]",
            j,
        )),
    }
}

/// The entries of a label map as 1.0.4's `parse_label_map` finds them: each `item`'s `id:`
/// and quoted `display_name:`. `None` when an entry has no integer id.
fn label_count(text: &str) -> Option<usize> {
    let mut count = 0;
    let mut at = text.find("item");
    while let Some(a) = at {
        let id = a + text[a..].find("id:")? + 3;
        let end = id + text[id..].find('\n').unwrap_or(text.len() - id);
        text[id..end].trim().parse::<i64>().ok()?;
        let name = a + text[a..].find("display_name:").unwrap_or(0);
        count += 1;
        at = text[name..]
            .find("item")
            .map(|i| name + i)
            .filter(|&i| i > a);
    }
    Some(count)
}

impl BoundingBoxAnnotator {
    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        let path = p.opt_string("class_labels_path")?;
        let dataset = match p.opt_json("class_labels_dataset") {
            None => None,
            Some(j) => Some(
                j.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| p.bad("class_labels_dataset", "a string", j))?,
            ),
        };
        let explicit_null = p.is_null("class_labels_dataset");
        let box_color = color(p, "box_color", [255, 225, 0])?;
        let box_thickness = p.int("box_thickness", 2)?;
        color(p, "text_color", [255, 255, 0])?;
        if !(-1..=32767).contains(&box_thickness) {
            return Err(p.bad(
                "box_thickness",
                "an integer from -1 (filled) to 32767",
                &serde_json::json!(box_thickness),
            ));
        }
        match (&path, &dataset) {
            (None, None) if explicit_null => {
                return Err(config(
                    "If class_labels_path is None, then class_labels_dataset cannot be None",
                    "class_labels_dataset",
                ));
            }
            (None, Some(d)) if !DATASETS.contains(&d.as_str()) => {
                return Err(config(
                    &format!(
                        "dataset is not one of supported datasets: {}",
                        DATASETS.join(", ")
                    ),
                    "class_labels_dataset",
                ));
            }
            _ => {}
        }
        if let Some(path) = &path {
            let text = std::fs::read_to_string(path).map_err(|e| {
                config(
                    &format!(
                        "class_labels_path {} cannot be read: {e}",
                        py_repr_str(path)
                    ),
                    "class_labels_path",
                )
            })?;
            if label_count(&text).is_none() {
                return Err(config(
                    &format!(
                        "class_labels_path {} is not a label map (an `item` without an \
                         integer `id:`)",
                        py_repr_str(path)
                    ),
                    "class_labels_path",
                ));
            }
        }
        Ok(BoundingBoxAnnotator {
            box_color,
            box_thickness,
        })
    }
}

fn config(message: &str, param: &str) -> VfError {
    VfError::new(ErrorCode::Config, format!("{NODE}: {message}."))
        .with_remedy("Fix the node's parameters.")
        .with_context("variable", "VF_NODE_PARAMS_JSON")
        .with_context(
            "class",
            "videoflow.processors.vision.annotators.BoundingBoxAnnotator",
        )
        .with_context("param", param)
}

impl Processor for BoundingBoxAnnotator {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        expect_inputs(NODE, 2, parents)
    }

    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        let [im, boxes] = inputs else {
            return Err(arity_error(NODE, 2, inputs.len()));
        };
        let mut im = image(NODE, "im", im)?;
        let boxes = numbers(NODE, "boxes", boxes)?.unwrap_or(super::array::Numbers {
            shape: vec![0, 6],
            values: Vec::new(),
            float: true,
        });
        let rows = boxes.shape.first().copied().unwrap_or(0);
        let cols = boxes.shape.get(1).copied().unwrap_or(0);
        if rows > 0 && (boxes.shape.len() != 2 || cols < 4) {
            return Err(schema_error(
                NODE,
                format!(
                    "boxes must have shape (nb_boxes, 6): [ymin, xmin, ymax, xmax, \
                     class_index, score], got {:?}",
                    boxes.shape
                ),
            ));
        }
        let mut canvas = Canvas {
            height: im.height,
            width: im.width,
            channels: im.channels,
            data: &mut im.data,
        };
        for i in 0..rows {
            let b = boxes.row(i);
            if b[..4].iter().any(|v| !v.is_finite()) {
                return Err(schema_error(
                    NODE,
                    format!("box {i} has a coordinate that is not a finite number"),
                ));
            }
            // Python's int(): truncation toward zero.
            let [ymin, xmin, ymax, xmax] = [b[0], b[1], b[2], b[3]].map(|v| v as i64);
            canvas.rectangle(xmin, ymin, xmax, ymax, &self.box_color, self.box_thickness);
        }
        Ok(im.into_payload())
    }

    fn may_block(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_map_counts_its_items() {
        let text = "item {\n  id: 1\n  display_name: \"person\"\n}\nitem {\n  id: 2\n  \
                    display_name: 'bicycle'\n}\n";
        assert_eq!(label_count(text), Some(2));
        assert_eq!(label_count("item {\n id: x\n}\n"), None);
    }
}
