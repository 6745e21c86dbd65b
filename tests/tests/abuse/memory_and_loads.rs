//! Memory grabbed up to a plugin's share, and loads that are slow or come in a loop.

use super::*;

fn metric(host: &Host, name: &str) -> Result<f64> {
    let (_, text) = host.http_get("/metrics")?;
    text.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no metric {name}"))
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn plugins_that_grab_memory_are_held_to_their_share_and_a_neighbour_keeps_working() -> Result<()> {
    let greedy = Namespace::new("greedy");
    let calm = Namespace::new("calm");
    let hostile = plugin_path("hostile.wasm");
    // 96 MiB host-wide, a plugin at most half: two greedy plugins could each take all
    // their instances may (128 MiB) four times over, without the budget.
    let host = Host::start(
        &[
            ("greedy-a", &hostile, &format!("namespace: {}", greedy.0)),
            ("probe", &plugin_path("probe.wasm"), &format!("namespace: {}", calm.0)),
        ],
        &["--plugin-memory-budget-mib", "96", "--plugin-memory-share-percent", "50"],
    )?;
    for i in 0..4 {
        let cm = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: grab-{i}, namespace: {}, labels: {{hostile: \"true\"}}}}\ndata: {{mode: grab}}\n",
            greedy.0
        );
        apply(&cm).map_err(|e| anyhow!(e))?;
    }
    // The plugin that asked pays: its reconciles trap with a budget fault naming its share.
    let fault = eventually("a budget fault on a greedy object", Duration::from_secs(60), || {
        for i in 0..4 {
            if let Some((_, m)) = warnings(&greedy.0, &format!("grab-{i}"))
                .into_iter()
                .find(|(r, m)| r == "PluginFault" && m.contains("(budget)"))
            {
                return Ok(m);
            }
        }
        bail!("no budget fault yet")
    })?;
    assert!(fault.contains("greedy-a") && fault.contains("share of 48 MiB"), "{fault}");
    // Meanwhile the neighbour reconciles as usual.
    let cm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: beside, namespace: {}, labels: {{probe: \"true\"}}}}\ndata: {{value: \"1\"}}\n",
        calm.0
    );
    apply(&cm).map_err(|e| anyhow!(e))?;
    eventually("the neighbour's ServiceAccount", Duration::from_secs(30), || {
        let sa = get_json(&["serviceaccount", "beside-probe", "-n", &calm.0]).ok_or_else(|| anyhow!("none yet"))?;
        if sa["metadata"]["annotations"]["probe/value"] == "1" { Ok(()) } else { bail!("{sa}") }
    })?;
    // Never above the budget, whatever the greedy plugin asks.
    for _ in 0..10 {
        let used = metric(&host, "wasmop_plugin_memory_budget_used_bytes")?;
        assert!(used <= (96u64 << 20) as f64, "budget used {used} bytes");
        std::thread::sleep(Duration::from_millis(300));
    }
    let (_, metrics) = host.http_get("/metrics")?;
    assert!(metrics.contains(r#"wasmop_plugin_faults_total{plugin="greedy-a",kind="budget"}"#), "{metrics}");
    Ok(())
}

/// `wasm` with a custom section appended: the same plugin, new bytes (a new sha256, so
/// a new compile), as a ConfigMap rewritten with new plugin code would carry.
fn variant(wasm: &[u8], n: u32) -> Vec<u8> {
    fn leb(mut v: usize, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            out.push(if v == 0 { b } else { b | 0x80 });
            if v == 0 {
                break;
            }
        }
    }
    let name = b"wasmop-test";
    let payload = n.to_le_bytes();
    let mut section = Vec::new();
    leb(name.len(), &mut section);
    section.extend_from_slice(name);
    section.extend_from_slice(&payload);
    let mut out = wasm.to_vec();
    out.push(0);
    leb(section.len(), &mut out);
    out.extend_from_slice(&section);
    out
}

/// A plugin ConfigMap `configmap` in `ns` carrying `bytes` as plugin `name`.
fn packed(bytes: &[u8], name: &str, configmap: &str, ns: &str, settings: &str) -> Result<String> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join(format!("{name}.wasm"));
    std::fs::write(&file, bytes)?;
    pack_plugin(&file, name, configmap, ns, settings, &[])
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn a_plugin_slow_to_load_holds_up_no_other_and_a_rewrite_loop_costs_ever_fewer_loads() -> Result<()> {
    let ns = Namespace::new("loading");
    let settings = format!("namespace: {}", ns.0);
    let probe = std::fs::read(plugin_path("probe.wasm"))?;
    let host = Host::start(&[], &["--plugins-configmaps", "--plugins-namespace", &ns.0])?;
    // Both plugins' code compiled first (compiles take turns, and on a busy machine one
    // can take seconds): `warm` is the hostile plugin's bytes with harmless settings.
    let hostile = std::fs::read(plugin_path("hostile.wasm"))?;
    // Its own namespace: two plugins may not reconcile ConfigMaps in the same one.
    let elsewhere = Namespace::new("loading-warm");
    let warm_settings = format!("namespace: {}", elsewhere.0);
    for name in ["stuck", "quick", "warm"] {
        kubectl(&["create", "serviceaccount", name, "-n", &ns.0]).map_err(|e| anyhow!(e))?;
        kubectl(&["annotate", "serviceaccount", name, "-n", &ns.0, &format!("wasmop.io/plugin={name}")])
            .map_err(|e| anyhow!(e))?;
    }
    grant(&plugin_path("probe.wasm"), "quick", &settings, &ns.0)?;
    grant(&plugin_path("hostile.wasm"), "warm", &warm_settings, &ns.0)?;
    apply_server_side(&packed(&hostile, "warm", "warm", &ns.0, &warm_settings)?).map_err(|e| anyhow!(e))?;
    apply_server_side(&packed(&probe, "quick", "quick", &ns.0, &settings)?).map_err(|e| anyhow!(e))?;
    eventually("both compiled and loaded", Duration::from_secs(120), || {
        let logs = host.logs();
        let loaded = |p: &str| logs.lines().any(|l| l.contains("plugin loaded") && l.contains(&format!("plugin={p} ")));
        if loaded("warm") && loaded("quick") { Ok(()) } else { bail!("not yet") }
    })?;
    // `stuck`'s manifest never returns (refused at the 10 s describe deadline); a new
    // version of `quick` (new settings, same code) arrives just after and must not wait.
    apply_server_side(&packed(&hostile, "stuck", "stuck", &ns.0, "mode: manifest-loop\n")?).map_err(|e| anyhow!(e))?;
    let settings2 = format!("{settings}\nnote: second\n");
    apply_server_side(&packed(&probe, "quick", "quick", &ns.0, &settings2)?).map_err(|e| anyhow!(e))?;
    eventually("stuck refused", Duration::from_secs(60), || {
        let logs = host.logs();
        let second = logs.lines().filter(|l| l.contains("plugin=quick ") && l.contains("plugin loaded")).nth(1);
        let at = |line: &str| logs.lines().position(|l| l == line);
        let refused = logs.lines().position(|l| l.contains("plugin=stuck") && l.contains("rejected"));
        match (second.and_then(at), refused) {
            (_, None) => bail!("stuck not refused yet"),
            (Some(q), Some(r)) if q < r => Ok(()),
            _ => Err(anyhow!("quick's second version waited for stuck's refusal:\n{logs}")),
        }
    })?;

    // Rewritten with new code twenty times as fast as the apiserver takes the writes
    // (one kubectl applies them in order; one kubectl per write would pace them by
    // how busy the machine is): every version is taken in, the loads come 1 s, 2 s,
    // 4 s ... apart (the reload interval doubles while versions keep coming), and the
    // newest one serves.
    let writes = 20;
    let mut last = String::new();
    let mut versions = Vec::new();
    for n in 0..writes {
        let bytes = variant(&probe, n);
        use sha2::Digest;
        last = hex::encode(sha2::Sha256::digest(&bytes));
        versions.push(packed(&bytes, "quick", "quick", &ns.0, &settings)?);
    }
    let started = std::time::Instant::now();
    apply_server_side(&versions.join("\n---\n")).map_err(|e| anyhow!(e))?;
    let took = started.elapsed();
    // Versions in a loop compile at nice 19 (`registry::compiling`): on a machine busy
    // with other tests each can take tens of seconds.
    eventually("the newest version serves", Duration::from_secs(180), || {
        let (_, plugins) = host.http_get("/plugins")?;
        if plugins.contains(&last) { Ok(()) } else { bail!("{plugins}") }
    })?;
    let loads = metric(&host, r#"wasmop_plugin_loads_total{plugin="quick"}"#)?;
    let superseded = metric(&host, "wasmop_plugin_versions_superseded_total")?;
    // Its first two versions, then loads at most 0, 1, 3, 7, 15 ... s into the
    // rewriting, and the last; one a second would be `took` of them.
    let bound = 2.0 + 1.0 + (took.as_secs_f64() + 1.0).log2().floor() + 1.0;
    eprintln!("rewrite loop: {loads} loads (bound {bound}) for {writes} versions written in {took:?}");
    assert!(loads <= bound, "{loads} loads for {writes} versions written in {took:?}");
    assert!(superseded >= 1.0, "versions overtaken by newer ones were never loaded: {superseded}");
    Ok(())
}
