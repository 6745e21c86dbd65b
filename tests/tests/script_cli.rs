//! Script plugins that are wrong in each way an author gets them wrong are refused with
//! a message that says where (what the `PluginRejected` Event carries), checked offline
//! with `wasmop inspect` on the same engine the host runs.

use anyhow::Result;
use std::process::Command;
use wasmop_e2e::*;

const GOOD_MANIFEST: &str = r#"export function manifest(settings) {
  return { name: "x", version: "1", primary: { apiVersion: "v1", kind: "ConfigMap" } };
}
export function reconcile(request) { return null; }
"#;

/// `wasmop inspect` of `script` saved as `bad.js`: (succeeded, stdout + stderr).
fn inspect(script: &str) -> Result<(bool, String)> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bad.js");
    std::fs::write(&path, script)?;
    let out = Command::new(wasmop_bin()).arg("inspect").arg(&path).output()?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok((out.status.success(), text))
}

fn refused(script: &str, needles: &[&str]) -> Result<()> {
    let (ok, text) = inspect(script)?;
    assert!(!ok, "must be refused: {text}");
    for n in needles {
        assert!(text.contains(n), "{n:?} not in: {text}");
    }
    Ok(())
}

#[test]
#[ignore = "runs the JavaScript engine (make e2e)"]
fn broken_scripts_are_refused_saying_where() -> Result<()> {
    let (ok, text) = inspect(GOOD_MANIFEST)?;
    assert!(ok && text.contains("format: script"), "the well-formed one loads: {text}");

    refused(
        "export function manifest(s) {\n  return { a: 1,\n  b: [ };\n}\n",
        &["bad.js: SyntaxError", "at line 3, col"],
    )?;
    refused("throw new Error('not configured');\n", &["bad.js: Error: not configured"])?;
    refused("export function reconcile() {}\n", &["exports no function `manifest`"])?;
    refused(
        "export function manifest() { return { name: 'x', version: '1' }; }\n",
        &["manifest: missing field `primary`"],
    )?;
    refused(
        &GOOD_MANIFEST.replace(
            "primary:",
            "permissions: [{ kind: { apiVersion: 'v1', kind: 'Secret' }, verbs: ['steal'] }], primary:",
        ),
        &["manifest: unknown variant `steal`"],
    )?;
    refused(
        &format!(
            "{GOOD_MANIFEST}export function handlers() {{ return [{{ name: 'h', kinds: [], operations: ['SOMETIMES'] }}]; }}\n"
        ),
        &["handlers: unknown variant `SOMETIMES`"],
    )?;
    refused(
        &format!("{GOOD_MANIFEST}export function handlers() {{ throw new TypeError('no handlers today'); }}\n"),
        &["handlers threw: TypeError: no handlers today"],
    )?;
    refused("export function manifest() { for (;;) {} }\n", &["deadline"])?;
    Ok(())
}
