//! Which Pod annotations a SidecarSet may patch (`patchPodMetadata`): the cluster
//! admin's choice, as Kruise's `SidecarSet_PatchPodMetadata_WhiteList`.
//!
//! Why: an annotation can change how a Pod is run or treated (AppArmor profiles,
//! service-mesh and monitoring switches), and whoever may create a SidecarSet could
//! otherwise set it on every Pod the set selects. So, as in Kruise, nothing may be
//! patched until the admin says what may.
//!
//! The admin writes, in the plugin's settings (its ConfigMap's
//! `sidecarset.settings.yaml`), Kruise's JSON value on one line:
//!
//! ```yaml
//! patchPodMetadataWhiteList: {"rules": [{"selector": {"matchLabels": {"team": "infra"}}, "allowedAnnotationKeyExprs": ["^oom-score$"]}]}
//! ```
//!
//! A rule applies to the SidecarSets its `selector` matches (all without one); a key
//! may be patched if an expression of an applying rule is found in it (unanchored, as
//! Go's `MatchString`). `patchPodMetadataDefaultsAllowed: true` stands for Kruise's
//! feature gate `SidecarSetPatchPodMetadataDefaultsAllowed`: with no list, or no rule
//! applying, every key may be patched.

use crate::scope;
use crate::settings::raw;
use crate::types::SidecarSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;

pub const SETTING: &str = "patchPodMetadataWhiteList";
pub const DEFAULTS_ALLOWED: &str = "patchPodMetadataDefaultsAllowed";

#[derive(Deserialize, Default)]
struct WhiteList {
    #[serde(default)]
    rules: Vec<Rule>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    #[serde(default)]
    selector: Option<LabelSelector>,
    #[serde(default)]
    allowed_annotation_key_exprs: Vec<String>,
}

/// Ok when every key `ss` patches is allowed by the admin's list in `settings`.
pub fn check(settings: &str, ss: &SidecarSet) -> Result<(), String> {
    if ss.spec.patch_pod_metadata.is_empty() {
        return Ok(());
    }
    let f = "spec.patchPodMetadata";
    let defaults_allowed = raw(settings, DEFAULTS_ALLOWED) == Some("true");
    let Some(value) = raw(settings, SETTING) else {
        return if defaults_allowed {
            Ok(())
        } else {
            Err(format!(
                "{f}: no annotation may be patched: the sidecarset plugin's settings have no {SETTING} (Kruise's SidecarSet_PatchPodMetadata_WhiteList), which the cluster admin sets"
            ))
        };
    };
    let list: WhiteList = serde_json::from_str(value)
        .map_err(|e| format!("the sidecarset plugin's setting {SETTING} is not Kruise's whitelist JSON: {e}"))?;
    let labels = ss.metadata.labels.clone().unwrap_or_default();
    let mut allowed = Vec::new();
    for rule in &list.rules {
        if rule.selector.as_ref().is_some_and(|s| !scope::matches(s, &labels)) {
            continue;
        }
        for expr in &rule.allowed_annotation_key_exprs {
            let re = regex_lite::Regex::new(expr)
                .map_err(|e| format!("the sidecarset plugin's setting {SETTING}: {expr:?}: {e}"))?;
            allowed.push(re);
        }
    }
    if allowed.is_empty() {
        return if defaults_allowed {
            Ok(())
        } else {
            Err(format!("{f}: no annotation may be patched by this SidecarSet: no rule of {SETTING} selects it"))
        };
    }
    for p in &ss.spec.patch_pod_metadata {
        if let Some(k) = p.annotations.keys().find(|k| !allowed.iter().any(|re| re.is_match(k))) {
            return Err(format!("{f}: annotation {k:?} is not allowed by {SETTING}"));
        }
    }
    Ok(())
}
