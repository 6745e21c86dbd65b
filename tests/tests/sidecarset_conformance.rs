//! Kruise's SidecarSet validation rules through the real apiserver: every case of
//! `plugins/sidecarset/tests/data/validation-cases.json` (the table the plugin's unit
//! tests run on the SDK's fake cluster, taken from Kruise's validating webhook and its
//! test tables) sent as `kubectl create --dry-run=server`, which validates fields
//! strictly, as a user's kubectl does: each denied case is refused with its message,
//! naming the field, and each allowed one is admitted.

use anyhow::Result;
use serde_json::Value;
use wasmop_e2e::sidecarset::*;
use wasmop_e2e::*;

const CASES: &str = include_str!("../../plugins/sidecarset/tests/data/validation-cases.json");

/// Settings under which any annotation may be patched: the base case patches one, and
/// the whitelist has its own test.
const ANY_ANNOTATION: &str = r#"patchPodMetadataWhiteList: {"rules": [{"allowedAnnotationKeyExprs": [".*"]}]}"#;

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn kruises_validation_rules_hold_through_the_apiserver() -> Result<()> {
    let _lock = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespace::new("ss-conf");
    let (_h, _configs) = host_with("wasmop-e2e-conf", &[&ns.0], ANY_ANNOTATION)?;
    let doc: Value = serde_json::from_str(CASES)?;
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (list, denied) in [("denied", true), ("allowed", false)] {
        for c in doc[list].as_array().unwrap() {
            let mut obj = doc["base"].clone();
            let patch: json_patch::Patch = serde_json::from_value(c["patch"].clone())?;
            json_patch::patch(&mut obj, &patch)?;
            // Its own name, so no case meets another (or a set of another test).
            if obj["metadata"]["name"] == "s" {
                obj["metadata"]["name"] = format!("{}-{checked}", ns.0).into();
            }
            let what = c["why"].as_str().map_or_else(|| c["patch"].to_string(), str::to_owned);
            let out = kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], Some(&obj.to_string()));
            match (out, denied) {
                (Ok(_), false) => {}
                (Err(e), true) if e.contains(c["message"].as_str().unwrap()) => {}
                (Ok(_), true) => wrong.push(format!("{what}: admitted, want {}", c["message"])),
                (Err(e), true) => wrong.push(format!("{what}: want {} in {e}", c["message"])),
                (Err(e), false) => wrong.push(format!("{what}: refused: {e}")),
            }
            checked += 1;
        }
    }
    assert!(checked > 40, "{checked} cases");
    assert!(wrong.is_empty(), "{} of {checked} cases differ:\n{}", wrong.len(), wrong.join("\n"));
    Ok(())
}
