//! The checked-in CRD is generated from the Rust types; regenerate with
//! `WASMOP_UPDATE_CRDS=1 cargo test -p sidecarset --test crd`.

#[test]
fn crd_is_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/crds/sidecarset.yaml");
    let want = format!(
        "# Generated from plugins/sidecarset/src/types.rs; do not edit.\n{}",
        serde_yaml::to_string(&sidecarset::types::crd()).unwrap()
    );
    if std::env::var_os("WASMOP_UPDATE_CRDS").is_some() {
        std::fs::write(path, &want).unwrap();
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(have == want, "{path} is stale: run WASMOP_UPDATE_CRDS=1 cargo test -p sidecarset --test crd");
}
