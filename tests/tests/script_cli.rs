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

/// An async `reconcile` (TypeScript authors write them) runs to its end: host calls are
/// synchronous, so each `await` resolves at once, and the engine settles the promise
/// before it answers. A rejected promise is the reconcile's error.
#[test]
#[ignore = "runs the JavaScript engine (make e2e)"]
fn async_exports_run_to_their_end() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let script = r#"
const CM = { apiVersion: "v1", kind: "ConfigMap" };
export async function manifest() {
  return { name: "a", version: "1", primary: CM, owns: [CM], permissions: [{ kind: CM, verbs: ["create"] }] };
}
export async function reconcile({ object, current }) {
  if (current.data.fail) throw new ReconcileError("failed after an await", { retry: false });
  const copy = await Promise.resolve({ ...CM, metadata: { name: object.name + "-copy", namespace: object.namespace } });
  await cluster.create(copy);
  events.normal(object, "Copied", "after two awaits");
  return { requeueAfterMs: 5000 };
}
"#;
    std::fs::write(dir.path().join("async.js"), script)?;
    let object = |data: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c, namespace: default}}\ndata: {{{data}}}\n")
    };
    std::fs::write(dir.path().join("ok.yaml"), object("a: b"))?;
    std::fs::write(dir.path().join("fail.yaml"), object("fail: \"yes\""))?;
    std::fs::write(
        dir.path().join("expect.yaml"),
        "result: {ok: {requeueAfterMs: 5000}}\nwrites: [{create: {metadata: {name: c-copy}}}]\nevents: [{reason: Copied}]\n",
    )?;
    let run = |object: &str, expect: bool| -> Result<(bool, String)> {
        let mut cmd = Command::new(wasmop_bin());
        cmd.current_dir(dir.path()).args(["reconcile", "async.js", "--object", object]);
        if expect {
            cmd.args(["--expect", "expect.yaml"]);
        }
        let out = cmd.output()?;
        Ok((
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        ))
    };
    let (ok, text) = run("ok.yaml", true)?;
    assert!(ok && text.contains("as expected"), "{text}");
    let (ok, text) = run("fail.yaml", false)?;
    assert!(!ok && text.contains("failed after an await") && text.contains("retry: false"), "{text}");
    Ok(())
}
