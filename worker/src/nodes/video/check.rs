//! What a sample's self-check learns from a video file the flow wrote: frames, size, how many
//! frames show a given box colour — and a contact sheet (a PNG of a few frames) for a person
//! to look at.
//!
//! Why it waits: the self-check and the writer close independently when the run ends, and an
//! MP4 cannot be read before its writer wrote the index at `close()`. So the file is read
//! again until it decodes completely or the wait is over.

use std::time::{Duration, Instant};

use bytes::Bytes;
use ffmpeg_next::Rational;

use super::decoding::Decoding;
use super::encode::{Codec, Encoding, Picture};

/// A colour counts as the box colour when every channel is within this of it (H.264 smears
/// colours at thin edges).
const COLOUR_TOLERANCE: i16 = 60;

/// Pixels of the box colour that make a frame one "with boxes".
const BOX_PIXELS: usize = 100;

/// Frames on the contact sheet (a 2 × 2 grid).
const SHEET_FRAMES: usize = 4;

/// What the file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VideoReport {
    /// Frames decoded.
    pub frames: u64,
    /// `[height, width]` of the first frame.
    pub size: [u32; 2],
    /// Frames with at least [`BOX_PIXELS`] pixels of the box colour.
    pub box_frames: u64,
}

/// Reads `path` (BGR frames), counting frames whose pixels show `box_color` (in the frames'
/// channel order), waiting up to `wait` for the file to become readable; writes the contact
/// sheet to `sheet` when given.
pub fn inspect(
    path: &str,
    box_color: [u8; 3],
    sheet: Option<&str>,
    wait: Duration,
) -> Result<VideoReport, String> {
    let started = Instant::now();
    // While the writer has not finished the file FFmpeg logs every failed open; this worker
    // decodes nothing else meanwhile, so quiet it for the wait.
    ffmpeg_next::util::log::set_level(ffmpeg_next::util::log::Level::Fatal);
    let result = wait_for(path, box_color, sheet, wait, started);
    ffmpeg_next::util::log::set_level(ffmpeg_next::util::log::Level::Error);
    result
}

fn wait_for(
    path: &str,
    box_color: [u8; 3],
    sheet: Option<&str>,
    wait: Duration,
    started: Instant,
) -> Result<VideoReport, String> {
    loop {
        match read(path, box_color) {
            Ok((report, picked)) => {
                if let Some(sheet) = sheet {
                    write_sheet(sheet, &picked, report.size)?;
                }
                return Ok(report);
            }
            Err(e) if started.elapsed() >= wait => {
                return Err(format!("{path} could not be read within {wait:?}: {e}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// One complete read: the report and the frames for the sheet.
fn read(path: &str, color: [u8; 3]) -> Result<(VideoReport, Vec<Bytes>), String> {
    let mut decoding = Decoding::start(path, false, 0, &crate::nodes::GpuPlacement::Cpu)
        .map_err(|f| format!("{f:?}"))?;
    let mut frames = Vec::new();
    let mut report = VideoReport {
        frames: 0,
        size: [0, 0],
        box_frames: 0,
    };
    let result = loop {
        match decoding.next_frame() {
            Ok(Some(f)) => {
                if report.frames == 0 {
                    report.size = [f.height, f.width];
                }
                report.frames += 1;
                let boxed = f
                    .data
                    .chunks_exact(3)
                    .filter(|px| {
                        px.iter()
                            .zip(color)
                            .all(|(&v, c)| (i16::from(v) - i16::from(c)).abs() <= COLOUR_TOLERANCE)
                    })
                    .count();
                if boxed >= BOX_PIXELS {
                    report.box_frames += 1;
                }
                if [f.height, f.width] == report.size {
                    frames.push(f.data);
                }
            }
            Ok(None) => break Ok(()),
            Err(damage) => break Err(damage.reason),
        }
    };
    decoding.stop();
    result?;
    if report.frames == 0 {
        return Err("no frame".to_owned());
    }
    // Evenly spread frames, from the middle of each quarter.
    let n = frames.len();
    let picked = (0..SHEET_FRAMES.min(n))
        .map(|i| frames[(2 * i + 1) * n / (2 * SHEET_FRAMES.min(n))].clone())
        .collect();
    Ok((report, picked))
}

/// Tiles `frames` (`h × w` BGR each) two across into one PNG.
fn write_sheet(path: &str, frames: &[Bytes], [h, w]: [u32; 2]) -> Result<(), String> {
    let (h, w) = (h as usize, w as usize);
    let cols = frames.len().clamp(1, 2);
    let rows = frames.len().div_ceil(cols);
    let (sw, sh) = (w * cols, h * rows);
    let mut sheet = vec![0u8; sw * sh * 3];
    for (i, frame) in frames.iter().enumerate() {
        let (cx, cy) = (i % cols * w, i / cols * h);
        for (y, line) in frame.chunks_exact(w * 3).enumerate() {
            let at = ((cy + y) * sw + cx) * 3;
            sheet[at..at + w * 3].copy_from_slice(line);
        }
    }
    let mut png = Encoding::start(path, Codec::Png, sw as u32, sh as u32, Rational::new(1, 1))
        .map_err(|e| format!("contact sheet {path}: {e}"))?;
    png.write(Picture {
        width: sw as u32,
        height: sh as u32,
        rgb: false,
        data: sheet.into(),
    })
    .map_err(|e| format!("contact sheet {path}: {e}"))?;
    png.finish()
        .map_err(|e| format!("contact sheet {path}: {e}"))?;
    Ok(())
}
