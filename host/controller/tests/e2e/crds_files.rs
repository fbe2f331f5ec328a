//! The committed `crds/*.yaml` are exactly what the Rust types generate.

use std::path::PathBuf;

#[test]
fn committed_crds_are_current() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../crds");
    let mut stale = Vec::new();
    let files = kk_apis::crd::generated_files().expect("CRDs serialize");
    assert_eq!(files.len(), 3, "KCNodeClass, NodePool, NodeClaim");
    for (name, yaml) in files {
        let path = dir.join(&name);
        match std::fs::read_to_string(&path) {
            Ok(committed) if committed == yaml => {}
            Ok(_) => stale.push(format!("{} differs", path.display())),
            Err(e) => stale.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "crds/ is stale ({}): run `cargo run -p karpenter-kakaocloud --bin crdgen` and commit crds/",
        stale.join("; ")
    );
}

#[test]
fn crd_files_are_named_like_upstream() {
    let names: Vec<String> = kk_apis::crd::generated_files()
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "karpenter.kakaocloud.com_kcnodeclasses.yaml",
            "karpenter.sh_nodepools.yaml",
            "karpenter.sh_nodeclaims.yaml"
        ]
    );
}
