//! `wasmop new`: each language's project builds and passes its own test as generated,
//! and that test fails when the plugin does not do what it expects. No cluster needed.

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::{Command, Output};
use wasmop_e2e::*;

fn run(dir: &Path, cmd: &mut Command) -> Result<Output> {
    let out = cmd.current_dir(dir).output().with_context(|| format!("{cmd:?}"))?;
    Ok(out)
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn new(work: &Path, name: &str, lang: &str) -> Result<std::path::PathBuf> {
    let out = run(work, Command::new(wasmop_bin()).args(["new", name, "--lang", lang]))?;
    if !out.status.success() {
        bail!("wasmop new: {}", text(&out));
    }
    // A second `new` over it refuses rather than overwrite the author's files.
    let again = run(work, Command::new(wasmop_bin()).args(["new", name, "--lang", lang]))?;
    assert!(!again.status.success() && text(&again).contains("already exists"), "{}", text(&again));
    Ok(work.join(name))
}

fn make(dir: &Path, target: &str) -> Result<Output> {
    run(dir, Command::new("make").arg(target).arg(format!("WASMOP={}", wasmop_bin().display())))
}

#[test]
#[ignore = "builds generated projects (make e2e)"]
fn a_generated_js_plugin_passes_its_test_and_the_test_can_fail() -> Result<()> {
    let work = tempfile::tempdir()?;
    let dir = new(work.path(), "copier-js", "js")?;
    let out = make(&dir, "test")?;
    assert!(out.status.success(), "make test: {}", text(&out));
    assert!(text(&out).contains("as expected by test/expect.yaml"), "{}", text(&out));

    // The same test against a plugin that copies to another name: it fails and says where.
    let expect = std::fs::read_to_string(dir.join("test/expect.yaml"))?;
    std::fs::write(dir.join("test/expect.yaml"), expect.replace("name: greeting-copy", "name: elsewhere"))?;
    let out = make(&dir, "test")?;
    assert!(!out.status.success(), "a wrong expectation must fail: {}", text(&out));
    assert!(text(&out).contains("not as expected") && text(&out).contains(".writes[0]"), "{}", text(&out));
    Ok(())
}

#[test]
#[ignore = "builds generated projects (make e2e)"]
fn a_generated_rust_plugin_passes_its_test_and_builds_a_component_the_host_loads() -> Result<()> {
    let work = tempfile::tempdir()?;
    let dir = new(work.path(), "copier-rs", "rust")?;
    // The workspace's lock file, so the project builds the versions this repository
    // was tested with (and reuses their build in the shared target directory).
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock"), dir.join("Cargo.lock"))?;
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/scaffold");
    let make = |t: &str| run(&dir, Command::new("make").arg(t).env("CARGO_TARGET_DIR", &target));
    let out = make("test")?;
    assert!(out.status.success(), "make test: {}", text(&out));
    assert!(
        text(&out).contains("test tests::an_annotated_configmap_gets_its_copy_and_keeps_it_in_step ... ok"),
        "{}",
        text(&out)
    );
    let out = make("build")?;
    assert!(out.status.success(), "make build: {}", text(&out));
    let out = run(&dir, Command::new(wasmop_bin()).args(["inspect", "copier-rs.wasm"]))?;
    assert!(out.status.success() && text(&out).contains("name: copier-rs"), "{}", text(&out));
    Ok(())
}
