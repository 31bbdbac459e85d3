//! Still images: 1.0.4's `ImageProducer` (one image) and `ImageFolderReader` (a folder of
//! them, in name order), decoded with FFmpeg's image decoders (PNG, JPEG, BMP, TIFF, WebP,
//! PNM) through the same demux → decode → swscale path as video files.
//!
//! Both publish each image as 1.0.4's `ImageProducer` does: a `uint8` array `(h, w, 3)` in
//! RGB order (`cv2.imread` and `[..., ::-1]`). Lossless formats match OpenCV byte for byte;
//! JPEG decodes with FFmpeg's IDCT and chroma upsampling, which differ from OpenCV's
//! libjpeg-turbo by a few levels (docs/COMPATIBILITY.md).

use std::path::{Path, PathBuf};

use videoflow_core::envelope::Payload;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_repr_str;
use videoflow_core::value::Tensor;

use super::decoding::Decoding;
use super::media::OpenFailure;
use crate::nodes::params::Params;
use crate::nodes::{GpuPlacement, NodeContext, Producer};

/// File name extensions the folder reader takes for images (compared lowercased).
const IMAGE_EXTENSIONS: &[&str] = &[
    "png", "jpg", "jpeg", "bmp", "tif", "tiff", "webp", "ppm", "pgm", "pnm",
];

/// Why an image could not be decoded, in words.
fn failure_text(failure: &OpenFailure) -> String {
    match failure {
        OpenFailure::Missing => "does not exist".to_owned(),
        OpenFailure::NotAFile => "is not a regular file".to_owned(),
        OpenFailure::BadPath => "contains a NUL character".to_owned(),
        OpenFailure::Unreadable(e) => format!("cannot be read: {e}"),
        OpenFailure::NotMedia(e) => format!("is not an image FFmpeg can read ({e})"),
        OpenFailure::NoVideoStream => "holds no picture".to_owned(),
        OpenFailure::UnsupportedCodec(c) => format!("is coded with {c}, which has no decoder here"),
        OpenFailure::DecoderFailed(c, e) => format!("was refused by the {c} decoder ({e})"),
        OpenFailure::Thread(e) => format!("could not be decoded: {e}"),
        OpenFailure::Unreachable(e) | OpenFailure::GpuRequired(e) => {
            format!("could not be opened: {e}")
        }
    }
}

/// The first picture of `path`, RGB, as a `(h, w, 3)` `uint8` tensor; the error text says
/// what is wrong with the file.
fn decode_image(path: &Path) -> Result<Tensor, String> {
    let text = path.to_str().ok_or("has a name that is not UTF-8")?;
    let mut decoding =
        Decoding::start(text, true, 1, &GpuPlacement::Cpu).map_err(|f| failure_text(&f))?;
    let frame = decoding.next_frame();
    decoding.stop();
    match frame {
        Ok(Some(f)) => Ok(Tensor::new(
            vec![i64::from(f.height), i64::from(f.width), 3],
            "uint8",
            f.data,
        )),
        Ok(None) => Err("holds no picture".to_owned()),
        Err(damage) => Err(format!("is damaged: {}", damage.reason)),
    }
}

/// `videoflow.producers.video.ImageProducer(image_path)`: publishes the image once, then
/// ends. A file that cannot be read is a `VF_CONFIG` error naming it (1.0.4 ends without
/// output when `cv2.imread` returns `None`).
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProducer {
    class: &'static str,
    image_path: String,
    image: Option<Tensor>,
    returned: bool,
}

impl ImageProducer {
    pub(crate) fn from_params(p: &mut Params<'_>, class: &'static str) -> Result<Self, VfError> {
        Ok(ImageProducer {
            class,
            image_path: p.required_string("image_path")?,
            image: None,
            returned: false,
        })
    }
}

impl Producer for ImageProducer {
    fn open(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        if self.image.is_none() && !self.returned {
            let image = decode_image(Path::new(&self.image_path)).map_err(|why| {
                VfError::new(
                    ErrorCode::Config,
                    format!(
                        "{}: image_path {} {why}.",
                        self.class,
                        py_repr_str(&self.image_path)
                    ),
                )
                .with_remedy(
                    "Point image_path at an image file (PNG, JPEG, BMP, TIFF, WebP or PNM) \
                     the worker's user can read.",
                )
                .with_context("variable", "VF_NODE_PARAMS_JSON")
                .with_context("class", self.class)
                .with_context("param", "image_path")
                .with_context("file", self.image_path.clone())
            })?;
            self.image = Some(image);
        }
        Ok(())
    }

    fn next(&mut self, _ctx: &mut NodeContext) -> Result<Option<Payload>, VfError> {
        if self.returned {
            return Ok(None);
        }
        self.returned = true;
        Ok(self.image.take().map(Payload::Tensor))
    }

    /// Its one item is offset 1.
    fn replayable(&self) -> bool {
        true
    }

    fn seek(&mut self, offset: u64) -> Result<(), VfError> {
        if offset >= 1 {
            self.returned = true;
            self.image = None;
        }
        Ok(())
    }
}

/// `videoflow.producers.video.ImageFolderReader(folder_path)`: every image file directly
/// in the folder (by extension: PNG, JPEG, BMP, TIFF, WebP, PNM), one per `next()`, in
/// the byte order of their names — 1.0.4 documents this node ("alphabetical order") but
/// leaves it unimplemented, so the parameter is ours. Other files and subfolders are
/// skipped. A missing folder is `VF_CONFIG`; an image that does not decode ends the
/// reader with `VF_POISON` naming it, after the images before it.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageFolderReader {
    class: &'static str,
    folder_path: String,
    files: Vec<PathBuf>,
    next: usize,
}

impl ImageFolderReader {
    pub(crate) fn from_params(p: &mut Params<'_>, class: &'static str) -> Result<Self, VfError> {
        Ok(ImageFolderReader {
            class,
            folder_path: p.required_string("folder_path")?,
            files: Vec::new(),
            next: 0,
        })
    }

    fn config_error(&self, why: String) -> VfError {
        VfError::new(
            ErrorCode::Config,
            format!(
                "{}: folder_path {} {why}.",
                self.class,
                py_repr_str(&self.folder_path)
            ),
        )
        .with_remedy("Point folder_path at a folder of images the worker's user can read.")
        .with_context("variable", "VF_NODE_PARAMS_JSON")
        .with_context("class", self.class)
        .with_context("param", "folder_path")
        .with_context("file", self.folder_path.clone())
    }
}

fn is_image(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

impl Producer for ImageFolderReader {
    fn open(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        let entries = std::fs::read_dir(&self.folder_path)
            .map_err(|e| self.config_error(format!("cannot be listed: {e}")))?;
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| self.config_error(format!("cannot be listed: {e}")))?;
            let path = entry.path();
            if path.is_file() && is_image(&path) {
                files.push(path);
            }
        }
        files.sort_by(|a, b| {
            a.as_os_str()
                .as_encoded_bytes()
                .cmp(b.as_os_str().as_encoded_bytes())
        });
        self.files = files;
        self.next = 0;
        Ok(())
    }

    fn next(&mut self, _ctx: &mut NodeContext) -> Result<Option<Payload>, VfError> {
        let Some(path) = self.files.get(self.next).cloned() else {
            return Ok(None);
        };
        match decode_image(&path) {
            Ok(tensor) => {
                self.next += 1;
                Ok(Some(Payload::Tensor(tensor)))
            }
            Err(why) => {
                let delivered = self.next;
                self.next = self.files.len();
                let file = path.display().to_string();
                Err(VfError::new(
                    ErrorCode::Poison,
                    format!("{}: image {} {why}.", self.class, py_repr_str(&file)),
                )
                .with_remedy(
                    "The images before it were delivered. Repair or remove the file, or move \
                     it out of the folder.",
                )
                .with_context("class", self.class)
                .with_context("file", file)
                .with_context("frames_delivered", delivered))
            }
        }
    }

    /// Item `n` is the `n`-th image of the sorted listing `open()` took.
    fn replayable(&self) -> bool {
        true
    }

    fn seek(&mut self, offset: u64) -> Result<(), VfError> {
        self.next = usize::try_from(offset).unwrap_or(usize::MAX);
        Ok(())
    }
}
