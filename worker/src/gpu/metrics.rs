//! The GPU lines of a GPU node's `/metrics`, after the §12 (HEALTH-3) ones and in their
//! style: `videoflow_gpu_<m>{node="…",device="…"} <value>`, no `# HELP`/`# TYPE`, one family
//! after another. Per granted device (its id as the grant report shows it: MIG UUID, else
//! card UUID): NVML's utilisation, memory used and in all, NVDEC and NVENC utilisation.
//!
//! What NVML did not report is left out, never written as 0: `videoflow_gpu_observed` says
//! per device whether NVML answered (1) or not (0, with the reason), so a dashboard can tell
//! an idle GPU from an unread one. Ratios are fractions (0..1), memory is bytes.

use std::fmt::Write as _;

use videoflow_core::scaling::Observation;

use super::nvml::DeviceSample;
use videoflow_core::partition::py_float;

/// The families, in the order they are written, with the sample field each reads.
type Field = fn(&DeviceSample) -> Option<String>;

fn ratio(v: Option<f64>) -> Option<String> {
    v.map(py_float)
}

fn bytes(v: Option<u64>) -> Option<String> {
    v.map(|b| b.to_string())
}

const FAMILIES: [(&str, Field); 5] = [
    ("videoflow_gpu_utilization_ratio", |s| ratio(s.utilization)),
    ("videoflow_gpu_memory_used_bytes", |s| {
        bytes(s.memory_used_bytes)
    }),
    ("videoflow_gpu_memory_total_bytes", |s| {
        bytes(s.memory_total_bytes)
    }),
    ("videoflow_gpu_decoder_utilization_ratio", |s| {
        ratio(s.decoder_utilization)
    }),
    ("videoflow_gpu_encoder_utilization_ratio", |s| {
        ratio(s.encoder_utilization)
    }),
];

/// A label value as HEALTH-3 writes the node's: every `"` removed (and `\` and newlines,
/// which would break the line).
fn label(v: &str) -> String {
    v.chars()
        .filter(|c| !matches!(c, '"' | '\\' | '\n'))
        .collect()
}

/// The GPU lines for `node`'s granted `devices` from one NVML read, each line ending in
/// `\n`. With no granted device and no answer, one node-level `observed 0` line says why.
pub fn render(node: &str, devices: &[String], samples: &Observation<Vec<DeviceSample>>) -> String {
    let node = label(node);
    let mut out = String::new();
    match samples {
        Observation::Unknown { reason, .. } => {
            let reason = label(reason);
            if devices.is_empty() {
                let _ = writeln!(
                    out,
                    "videoflow_gpu_observed{{node=\"{node}\",reason=\"{reason}\"}} 0"
                );
            }
            for d in devices {
                let _ = writeln!(
                    out,
                    "videoflow_gpu_observed{{node=\"{node}\",device=\"{}\",reason=\"{reason}\"}} 0",
                    label(d)
                );
            }
        }
        Observation::Known(list) => {
            let found = |d: &String| list.iter().find(|s| &s.id == d);
            for d in devices {
                let _ = match found(d) {
                    Some(_) => writeln!(
                        out,
                        "videoflow_gpu_observed{{node=\"{node}\",device=\"{}\"}} 1",
                        label(d)
                    ),
                    None => writeln!(
                        out,
                        "videoflow_gpu_observed{{node=\"{node}\",device=\"{}\",reason=\"not_found\"}} 0",
                        label(d)
                    ),
                };
            }
            for (family, field) in FAMILIES {
                for d in devices {
                    if let Some(v) = found(d).and_then(field) {
                        let _ = writeln!(
                            out,
                            "{family}{{node=\"{node}\",device=\"{}\"}} {v}",
                            label(d)
                        );
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: &str) -> DeviceSample {
        DeviceSample {
            id: id.to_owned(),
            utilization: Some(0.37),
            memory_used_bytes: Some(1_048_576),
            memory_total_bytes: Some(150_754_820_096),
            decoder_utilization: Some(0.0),
            encoder_utilization: None,
        }
    }

    #[test]
    fn known_samples_render_per_device_families_and_leave_out_unreported_fields() {
        let devices = vec!["GPU-aaaa".to_owned(), "MIG-cccc".to_owned()];
        let mig = DeviceSample {
            utilization: None,
            decoder_utilization: None,
            ..sample("MIG-cccc")
        };
        let text = render(
            "de\"tect",
            &devices,
            &Observation::Known(vec![sample("GPU-aaaa"), mig]),
        );
        assert_eq!(
            text,
            "videoflow_gpu_observed{node=\"detect\",device=\"GPU-aaaa\"} 1\n\
             videoflow_gpu_observed{node=\"detect\",device=\"MIG-cccc\"} 1\n\
             videoflow_gpu_utilization_ratio{node=\"detect\",device=\"GPU-aaaa\"} 0.37\n\
             videoflow_gpu_memory_used_bytes{node=\"detect\",device=\"GPU-aaaa\"} 1048576\n\
             videoflow_gpu_memory_used_bytes{node=\"detect\",device=\"MIG-cccc\"} 1048576\n\
             videoflow_gpu_memory_total_bytes{node=\"detect\",device=\"GPU-aaaa\"} 150754820096\n\
             videoflow_gpu_memory_total_bytes{node=\"detect\",device=\"MIG-cccc\"} 150754820096\n\
             videoflow_gpu_decoder_utilization_ratio{node=\"detect\",device=\"GPU-aaaa\"} 0.0\n"
        );
    }

    #[test]
    fn a_granted_device_nvml_does_not_find_is_observed_zero_not_zero_usage() {
        let text = render(
            "n",
            &["GPU-gone".to_owned()],
            &Observation::Known(Vec::new()),
        );
        assert_eq!(
            text,
            "videoflow_gpu_observed{node=\"n\",device=\"GPU-gone\",reason=\"not_found\"} 0\n"
        );
    }

    #[test]
    fn absent_nvml_says_unobserved_and_writes_no_figures() {
        let missing = Observation::unknown("missing", "libnvidia-ml.so.1 could not be loaded");
        assert_eq!(
            render("n", &["0".to_owned()], &missing),
            "videoflow_gpu_observed{node=\"n\",device=\"0\",reason=\"missing\"} 0\n"
        );
        let text = render("n", &[], &missing);
        assert_eq!(
            text,
            "videoflow_gpu_observed{node=\"n\",reason=\"missing\"} 0\n"
        );
        assert!(!text.contains("utilization"));
    }
}
