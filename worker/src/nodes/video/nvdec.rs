//! Which decoder a reader opens — FFmpeg's NVDEC (`*_cuvid`) decoder when the node holds a
//! GPU grant, else the CPU one — and how the choice is reported.
//!
//! Pure decisions, so every branch is tested without a GPU: the media layer asks [`plan`]
//! for a stream's codec, tries what it says, and describes what it ended up with as a
//! [`DecoderInUse`]; a decoder that would not open becomes a [`Fallback`] with the reason.
//!
//! Why the `*_cuvid` decoders and not `hwaccel cuda` on the native decoder: the hwaccel needs
//! a CUDA device context set on the codec context, which the safe `ffmpeg-next` API does not
//! expose (and the workspace forbids `unsafe`); a `*_cuvid` decoder creates its own device
//! context when it opens, and with no device context given it hands back NV12 (P010 for
//! 10-bit) frames already copied to system memory, which the colour conversion takes like
//! any other picture.

use crate::nodes::GpuPlacement;

/// FFmpeg's NVDEC decoder per codec (FFmpeg's codec name → decoder name): every `*_cuvid`
/// decoder Debian's FFmpeg 5.1 builds (`ffmpeg -decoders | grep cuvid`).
const CUVID_DECODERS: &[(&str, &str)] = &[
    ("h264", "h264_cuvid"),
    ("hevc", "hevc_cuvid"),
    ("av1", "av1_cuvid"),
    ("vp8", "vp8_cuvid"),
    ("vp9", "vp9_cuvid"),
    ("mpeg1video", "mpeg1_cuvid"),
    ("mpeg2video", "mpeg2_cuvid"),
    ("mpeg4", "mpeg4_cuvid"),
    ("vc1", "vc1_cuvid"),
    ("mjpeg", "mjpeg_cuvid"),
];

/// The NVDEC decoder FFmpeg has for `codec` (its FFmpeg name), if NVDEC decodes it at all.
pub(crate) fn cuvid_decoder(codec: &str) -> Option<&'static str> {
    CUVID_DECODERS
        .iter()
        .find(|(c, _)| *c == codec)
        .map(|(_, d)| *d)
}

/// Why a node that asked for a GPU decodes on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FallbackReason {
    /// The grant check delivered no device.
    NoDevice,
    /// NVDEC has no decoder for the stream's codec.
    CodecWithoutNvdec,
    /// This FFmpeg build has no `*_cuvid` decoder for the codec.
    NotInFfmpeg,
    /// The `*_cuvid` decoder did not open (no driver library, no device, a stream NVDEC
    /// refuses: FFmpeg's error says which).
    OpenFailed,
}

impl FallbackReason {
    /// The stable word `/metrics` and the logs carry.
    pub(crate) fn code(self) -> &'static str {
        match self {
            FallbackReason::NoDevice => "no_device",
            FallbackReason::CodecWithoutNvdec => "codec_without_nvdec",
            FallbackReason::NotInFfmpeg => "nvdec_not_in_ffmpeg",
            FallbackReason::OpenFailed => "nvdec_open_failed",
        }
    }
}

/// A fallback to the CPU decoder: its reason and the details in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fallback {
    /// What kind of failure.
    pub reason: FallbackReason,
    /// What happened, for the log and the error texts.
    pub detail: String,
}

/// What [`plan`] says to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// The CPU decoder: the node asked for no GPU.
    Cpu,
    /// This NVDEC decoder, falling back to the CPU when it does not open.
    Nvdec(&'static str),
    /// The CPU decoder, though the node asked for a GPU.
    Fallback(Fallback),
}

/// The decoder to open for a stream coded with `codec` (FFmpeg's name) on a node placed as
/// `placement`; `in_ffmpeg` says whether this FFmpeg build has a decoder of that name.
///
/// A grant whose host could not be observed still tries NVDEC: no probe answering is not
/// evidence of no GPU, and the decoder opening (or not) is the real test.
pub(crate) fn plan(
    placement: &GpuPlacement,
    codec: &str,
    in_ffmpeg: &dyn Fn(&str) -> bool,
) -> Plan {
    match placement {
        GpuPlacement::Cpu => Plan::Cpu,
        GpuPlacement::Denied(why) => Plan::Fallback(Fallback {
            reason: FallbackReason::NoDevice,
            detail: format!("the GPU grant delivered no device ({why})"),
        }),
        GpuPlacement::Granted { .. } | GpuPlacement::Unobserved(_) => match cuvid_decoder(codec) {
            None => Plan::Fallback(Fallback {
                reason: FallbackReason::CodecWithoutNvdec,
                detail: format!("NVDEC has no decoder for {codec}"),
            }),
            Some(name) if !in_ffmpeg(name) => Plan::Fallback(Fallback {
                reason: FallbackReason::NotInFfmpeg,
                detail: format!("this FFmpeg has no {name} decoder (built without NVDEC)"),
            }),
            Some(name) => Plan::Nvdec(name),
        },
    }
}

/// The fallback when the NVDEC decoder `name` did not open with FFmpeg's `error`.
/// `driver_library_found` says whether `libnvcuvid.so.1` was found where a container
/// runtime mounts the driver's libraries: when it was not, the likely cause is named.
pub(crate) fn open_failed(name: &str, error: &str, driver_library_found: bool) -> Fallback {
    let hint = if driver_library_found {
        ""
    } else {
        "; libnvcuvid.so.1 (the driver's NVDEC library) is not installed: in a container the \
         NVIDIA runtime mounts it only with the `video` driver capability \
         (NVIDIA_DRIVER_CAPABILITIES=compute,utility,video)"
    };
    Fallback {
        reason: FallbackReason::OpenFailed,
        detail: format!("{name} did not open ({error}){hint}"),
    }
}

/// The decoder a reader ended up with, for its start log line and its `/metrics` gauge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecoderInUse {
    /// The stream's codec (FFmpeg's name: `h264`, `hevc`, …).
    pub codec: String,
    /// The decoder's FFmpeg name (`h264_cuvid`, or `h264` for libavcodec's own).
    pub decoder: String,
    /// Whether it decodes on the GPU (NVDEC).
    pub gpu: bool,
    /// Whether the node asked for a GPU.
    pub requested_gpu: bool,
    /// Why a node that asked for a GPU decodes on the CPU.
    pub(crate) fallback: Option<Fallback>,
}

impl DecoderInUse {
    /// What was chosen, for a start log line: `h264 decoded by h264_cuvid on the GPU`.
    pub fn describe(&self) -> String {
        let place = if self.gpu {
            "the GPU (NVDEC)"
        } else {
            "the CPU"
        };
        format!("{} decoded by {} on {place}", self.codec, self.decoder)
    }

    /// Why a node that asked for a GPU decodes on the CPU: `(reason code, details)`.
    pub fn fallback(&self) -> Option<(&'static str, &str)> {
        self.fallback
            .as_ref()
            .map(|f| (f.reason.code(), f.detail.as_str()))
    }

    /// Says what was opened: the start log line (INFO), a fallback's reason (WARN — unless
    /// `previous`, the decoder of the connection before, fell back for the same reason, so a
    /// reconnecting source does not repeat it), and the `/metrics` gauge.
    pub(crate) fn announce(
        &self,
        class: &str,
        source: &str,
        node: &str,
        previous: Option<&DecoderInUse>,
    ) {
        tracing::info!("{class}: opened {source} ({})", self.describe());
        if let Some(f) = &self.fallback
            && previous.and_then(|p| p.fallback.as_ref()) != Some(f)
        {
            tracing::warn!(
                "{class}: {source} is decoded on the CPU, not on the GPU it was granted ({}): {}",
                f.reason.code(),
                f.detail
            );
        }
        crate::health::set_info("video_decoder", self.metric_line(node));
    }

    /// The `/metrics` line: `videoflow_video_decoder{node, codec, decoder, hardware,
    /// requested[, fallback]} 1`, the `fallback` label only when a GPU was asked for and
    /// the CPU decodes.
    pub fn metric_line(&self, node: &str) -> String {
        let label = |v: &str| v.replace(['"', '\\', '\n'], "");
        let mut labels = format!(
            "node=\"{}\",codec=\"{}\",decoder=\"{}\",hardware=\"{}\",requested=\"{}\"",
            label(node),
            label(&self.codec),
            label(&self.decoder),
            if self.gpu { "gpu" } else { "cpu" },
            if self.requested_gpu { "gpu" } else { "cpu" },
        );
        if let Some(f) = &self.fallback {
            labels.push_str(&format!(",fallback=\"{}\"", f.reason.code()));
        }
        format!("videoflow_video_decoder{{{labels}}} 1\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every(_: &str) -> bool {
        true
    }

    #[test]
    fn a_cpu_node_never_tries_nvdec() {
        assert_eq!(plan(&GpuPlacement::Cpu, "h264", &every), Plan::Cpu);
    }

    #[test]
    fn a_granted_or_unobserved_node_tries_the_codecs_cuvid_decoder() {
        let granted = GpuPlacement::Granted {
            devices: vec!["GPU-1".into()],
            required: false,
        };
        assert_eq!(plan(&granted, "h264", &every), Plan::Nvdec("h264_cuvid"));
        assert_eq!(plan(&granted, "hevc", &every), Plan::Nvdec("hevc_cuvid"));
        assert_eq!(
            plan(&granted, "mpeg2video", &every),
            Plan::Nvdec("mpeg2_cuvid")
        );
        let unobserved = GpuPlacement::Unobserved("no probe answered".into());
        assert_eq!(plan(&unobserved, "av1", &every), Plan::Nvdec("av1_cuvid"));
    }

    #[test]
    fn every_other_case_falls_back_with_its_reason() {
        let denied = GpuPlacement::Denied("requested 1 device(s), delivered 0".into());
        let Plan::Fallback(f) = plan(&denied, "h264", &every) else {
            panic!("no fallback");
        };
        assert_eq!(f.reason, FallbackReason::NoDevice);
        assert!(f.detail.contains("delivered 0"), "{}", f.detail);

        let granted = GpuPlacement::Granted {
            devices: vec!["0".into()],
            required: true,
        };
        let Plan::Fallback(f) = plan(&granted, "prores", &every) else {
            panic!("no fallback");
        };
        assert_eq!(f.reason, FallbackReason::CodecWithoutNvdec);
        assert_eq!(f.detail, "NVDEC has no decoder for prores");

        let Plan::Fallback(f) = plan(&granted, "hevc", &|name| name != "hevc_cuvid") else {
            panic!("no fallback");
        };
        assert_eq!(f.reason, FallbackReason::NotInFfmpeg);
        assert!(f.detail.contains("hevc_cuvid"), "{}", f.detail);
    }

    #[test]
    fn an_open_failure_names_the_decoder_ffmpegs_error_and_the_missing_library() {
        let f = open_failed("h264_cuvid", "Operation not permitted", false);
        assert_eq!(f.reason.code(), "nvdec_open_failed");
        assert!(
            f.detail
                .starts_with("h264_cuvid did not open (Operation not permitted)")
        );
        assert!(
            f.detail.contains("NVIDIA_DRIVER_CAPABILITIES"),
            "{}",
            f.detail
        );
        let f = open_failed("h264_cuvid", "Generic error in an external library", true);
        assert_eq!(
            f.detail,
            "h264_cuvid did not open (Generic error in an external library)"
        );
    }

    #[test]
    fn the_metric_names_the_decoder_and_a_fallback_only_when_there_is_one() {
        let gpu = DecoderInUse {
            codec: "h264".into(),
            decoder: "h264_cuvid".into(),
            gpu: true,
            requested_gpu: true,
            fallback: None,
        };
        assert_eq!(
            gpu.metric_line("cam"),
            "videoflow_video_decoder{node=\"cam\",codec=\"h264\",decoder=\"h264_cuvid\",\
             hardware=\"gpu\",requested=\"gpu\"} 1\n"
        );
        assert_eq!(
            gpu.describe(),
            "h264 decoded by h264_cuvid on the GPU (NVDEC)"
        );
        let fell = DecoderInUse {
            codec: "h264".into(),
            decoder: "h264".into(),
            gpu: false,
            requested_gpu: true,
            fallback: Some(open_failed("h264_cuvid", "x", true)),
        };
        assert_eq!(
            fell.metric_line("c\"am"),
            "videoflow_video_decoder{node=\"cam\",codec=\"h264\",decoder=\"h264\",\
             hardware=\"cpu\",requested=\"gpu\",fallback=\"nvdec_open_failed\"} 1\n"
        );
        assert_eq!(
            fell.fallback(),
            Some(("nvdec_open_failed", "h264_cuvid did not open (x)"))
        );
    }
}
