//! What a sidecar takes over from the Pod's app containers when its set says so
//! (Kruise's `GetInjectedVolumeMountsAndEnvs` and `GetInjectedVolumeDevices`):
//!
//! - `shareVolumePolicy: enabled`: every volume mount of every app container, in their
//!   order, except at a path the sidecar already uses (a mount or a device); and the
//!   env vars a shared mount's `subPathExpr` expands (`$(POD_NAME)`), taken from the app
//!   container that mounts it, unless the sidecar already sets them;
//! - `shareVolumeDevicePolicy: enabled`: every volume device likewise.
//!
//! App containers that are themselves injected sidecars (`IS_INJECTED`) share nothing,
//! as in Kruise. Caveat, as Kruise's: init containers' mounts are not shared.

use crate::defaults::IS_INJECTED;
use crate::types::{ShareVolumePolicy, SidecarContainer};
use serde_json::Value;

fn enabled(p: &Option<ShareVolumePolicy>) -> bool {
    p.as_ref().and_then(|p| p.type_.as_deref()) == Some("enabled")
}

fn items<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v[key].as_array().into_iter().flatten()
}

/// Adds to container `c` (the sidecar as it goes in, its env already set) what `sc`
/// shares from `app`.
pub fn share(c: &mut Value, sc: &SidecarContainer, app: &[Value]) {
    let own = |c: &Value| items(c, "env").any(|e| e["name"] == IS_INJECTED && e["value"] == "true");
    let apps: Vec<&Value> = app.iter().filter(|a| !own(a)).collect();
    let mut paths: Vec<Value> = items(c, "volumeMounts")
        .map(|m| m["mountPath"].clone())
        .chain(items(c, "volumeDevices").map(|d| d["devicePath"].clone()))
        .collect();
    if enabled(&sc.share_volume_policy) {
        let mut mounts: Vec<Value> = items(c, "volumeMounts").cloned().collect();
        let mut env: Vec<Value> = items(c, "env").cloned().collect();
        for a in &apps {
            for m in items(a, "volumeMounts") {
                // The env its subPathExpr needs comes along even when the mount
                // itself is not added (Kruise collects them before merging).
                for name in expansions(m["subPathExpr"].as_str().unwrap_or("")) {
                    let var = items(a, "env").find(|e| e["name"] == name);
                    if let Some(var) = var
                        && !env.iter().any(|e| e["name"] == name)
                    {
                        env.push(var.clone());
                    }
                }
                if !paths.contains(&m["mountPath"]) {
                    paths.push(m["mountPath"].clone());
                    mounts.push(m.clone());
                }
            }
        }
        c["volumeMounts"] = Value::Array(mounts);
        c["env"] = Value::Array(env);
    }
    if enabled(&sc.share_volume_device_policy) {
        let mut devices: Vec<Value> = items(c, "volumeDevices").cloned().collect();
        for d in apps.iter().flat_map(|a| items(a, "volumeDevices")) {
            if !paths.contains(&d["devicePath"]) {
                paths.push(d["devicePath"].clone());
                devices.push(d.clone());
            }
        }
        c["volumeDevices"] = Value::Array(devices);
    }
}

/// The variable names `$(NAME)` in a subPathExpr (Kruise's `SubPathExprEnvReg`:
/// `\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)`).
fn expansions(expr: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("$(") {
        rest = &rest[i + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        let name = &rest[..end];
        let first_ok = name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b"-._".contains(&b));
        if end < rest.len() && first_ok && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)) {
            out.push(name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansions_as_kruises_pattern() {
        assert_eq!(expansions("logs/$(POD_NAME)/$(ns.x-1)"), ["POD_NAME", "ns.x-1"]);
        assert_eq!(expansions("$(9BAD)/$()/$(open"), Vec::<&str>::new());
        assert_eq!(expansions("$($(INNER))"), ["INNER"]);
    }
}
