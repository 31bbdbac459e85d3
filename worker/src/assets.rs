//! The asset check (§18.1, ASSET-1/2): before `open()`, every declared asset (`VF_ASSETS_JSON`)
//! is hashed on this host and compared with its declared SHA-256.
//!
//! A model file on a hostPath exists on the host that has it, not on the host a rescheduled
//! pod landed on; only a digest says the bytes are the declared ones. Nothing here fetches or
//! distributes: the deployment owns that; the worker only verifies identity and, when it
//! refuses, names the host, the path and the fix.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::model::AssetDecl;

/// Files are hashed in chunks of this size (ASSET-1), never read whole.
const CHUNK: usize = 1 << 20;

/// What the check found for one asset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssetStatus {
    /// A regular file whose digest is the declared one.
    Verified,
    /// Not a regular file on this host.
    Missing,
    /// A file with other bytes.
    Mismatch,
}

/// One asset's report (ASSET-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetReport {
    /// The declared path.
    pub path: String,
    /// The declared digest, lower-cased, `sha256:` prefix removed; empty when none was
    /// declared (then only presence is checked).
    pub expected: String,
    /// The digest found; `None` when missing.
    pub actual: Option<String>,
    /// Whether the asset can be shipped to any host.
    pub portable: bool,
    /// The verdict.
    pub status: AssetStatus,
}

/// Streams `path` through SHA-256 in 1 MiB chunks.
pub fn sha256_of(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// One report per declaration; never errors (ASSET-1). An unreadable file counts as missing.
/// A declaration without a digest is verified by presence alone (design §5 allows it).
pub fn check_assets(decls: &[AssetDecl]) -> Vec<AssetReport> {
    decls
        .iter()
        .map(|d| {
            let declared = d.sha256.as_deref().unwrap_or("").to_ascii_lowercase();
            let expected = declared
                .strip_prefix("sha256:")
                .unwrap_or(&declared)
                .to_owned();
            let path = Path::new(&d.path);
            let actual = if path.is_file() {
                sha256_of(path).ok()
            } else {
                None
            };
            let status = match &actual {
                None => AssetStatus::Missing,
                Some(_) if expected.is_empty() => AssetStatus::Verified,
                Some(a) if *a == expected => AssetStatus::Verified,
                Some(_) => AssetStatus::Mismatch,
            };
            AssetReport {
                path: d.path.clone(),
                expected,
                actual,
                portable: d.portable,
                status,
            }
        })
        .collect()
}

/// ASSET-2: the first asset not verified ⇒ ResourceUnavailable (exit 3) naming the node, the
/// host and the path, with the remedy for a portable or a local-only asset.
pub fn verify_assets(
    node: &str,
    host: &str,
    decls: &[AssetDecl],
) -> Result<Vec<AssetReport>, VfError> {
    let reports = check_assets(decls);
    if let Some(r) = reports.iter().find(|r| r.status != AssetStatus::Verified) {
        let what = match r.status {
            AssetStatus::Missing => "is missing".to_owned(),
            _ => format!(
                "has sha256 {}, not the declared {}",
                r.actual.as_deref().unwrap_or(""),
                r.expected
            ),
        };
        let remedy = if r.portable {
            "Re-run the distribution step that places the asset (prepare script, the claim contents, the image layer) and check its digest; the declared identity is what the node was built for."
        } else {
            "This is a local-only asset (a hostPath): run the node on the host that has it (GPU node pinning / a node selector), or put it on a claim and declare it portable."
        };
        return Err(VfError::new(
            ErrorCode::ResourceUnavailable,
            format!("Node {node} on {host}: asset {} {what}.", r.path),
        )
        .with_remedy(remedy)
        .with_context("node", node.to_owned())
        .with_context("host", host.to_owned())
        .with_context("path", r.path.clone()));
    }
    if !reports.is_empty() {
        tracing::info!("node {node}: {} asset(s) verified on {host}", reports.len());
    }
    Ok(reports)
}

/// This host's name: the kernel's, else `fallback` (the `HOSTNAME` variable,
/// [`crate::config::DeviceConfig::hostname`]), else `unknown-host`.
pub fn hostname(fallback: Option<&str>) -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| fallback.filter(|s| !s.is_empty()).map(str::to_owned))
        .unwrap_or_else(|| "unknown-host".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(path: &Path, sha: Option<&str>, portable: bool) -> AssetDecl {
        AssetDecl {
            path: path.display().to_string(),
            sha256: sha.map(str::to_owned),
            portable,
        }
    }

    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("vf-assets-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    #[test]
    fn asset_1_verified_missing_mismatch_and_prefix_case_normalised() {
        let d = dir("1");
        let f = d.join("model.bin");
        // Larger than one chunk so streaming crosses a boundary.
        let bytes: Vec<u8> = (0..(CHUNK + 123)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&f, &bytes).expect("write");
        let digest = hex::encode(Sha256::digest(&bytes));
        let upper = format!("SHA256:{}", digest.to_ascii_uppercase());
        let reports = check_assets(&[
            decl(&f, Some(&upper), true),
            decl(&d.join("nope"), Some(&digest), false),
            decl(&f, Some(&"0".repeat(64)), false),
            decl(&d, Some(&digest), false), // a directory is not a regular file
            decl(&f, None, false),
        ]);
        let statuses: Vec<AssetStatus> = reports.iter().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [
                AssetStatus::Verified,
                AssetStatus::Missing,
                AssetStatus::Mismatch,
                AssetStatus::Missing,
                AssetStatus::Verified
            ]
        );
        assert_eq!(reports[0].expected, digest);
        assert_eq!(reports[1].actual, None);
        assert_eq!(reports[2].actual.as_deref(), Some(digest.as_str()));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn asset_2_refusal_names_host_path_and_the_remedy_by_portability() {
        let d = dir("2");
        let f = d.join("w.bin");
        std::fs::write(&f, b"abc").expect("write");
        let missing = d.join("absent.onnx");
        let e = verify_assets("det", "gpu-7", &[decl(&missing, Some("ab"), false)])
            .expect_err("refused");
        assert_eq!(e.code, ErrorCode::ResourceUnavailable);
        assert_eq!(e.exit_code(), 3);
        assert_eq!(
            e.message,
            format!("Node det on gpu-7: asset {} is missing.", missing.display())
        );
        assert!(e.remedy_text().is_some_and(|r| r.contains("local-only")));
        let e = verify_assets("det", "h", &[decl(&f, Some("00"), true)]).expect_err("refused");
        let actual = hex::encode(Sha256::digest(b"abc"));
        assert_eq!(
            e.message,
            format!(
                "Node det on h: asset {} has sha256 {actual}, not the declared 00.",
                f.display()
            )
        );
        assert!(
            e.remedy_text()
                .is_some_and(|r| r.contains("distribution step"))
        );
        assert_eq!(
            verify_assets("det", "h", &[decl(&f, Some(&actual), false)])
                .expect("verified")
                .len(),
            1
        );
        assert!(
            verify_assets("det", "h", &[])
                .expect("nothing to check")
                .is_empty()
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
