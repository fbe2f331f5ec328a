//! Writes `crds/*.yaml` from the Rust CRD types.
//!
//! `cargo run -p karpenter-kakaocloud --bin crdgen [-- <dir>]` (default: the
//! repository's `crds/`). Files of CRDs we no longer define are left alone.

use std::path::PathBuf;

use anyhow::Context;

fn main() -> anyhow::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../crds"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, yaml) in kk_apis::crd::generated_files()? {
        let path = dir.join(&name);
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
