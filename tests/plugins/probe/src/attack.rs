//! `mode: attack`: one cluster call the ConfigMap names, for the identity tests. The
//! ConfigMap's `data` says what: `verb` (get, list, get-live, list-live, update, create,
//! event),
//! `apiVersion`, `kind`, `namespace` (optional), `name` (for create: a `generateName`
//! prefix), `reason` (for event). The answer is logged as `probe attack` and kept in
//! the `probe/attack` annotation: `ok` or the error's code and message.
//!
//! The settings may declare more than the probe needs (`allow: API_VERSION/KIND=VERB,VERB
//! ...`), so a test can show what stops a call that the manifest declares but the
//! cluster admin never granted, and namespaces beyond its own where it may call
//! (`call-namespaces: NS ...`).

use std::collections::BTreeMap;
use wasmop_sdk::{Context, KindRef, ListParams, Manifest, ObjectRef, Verb};

/// `m` with the `allow:` entries of `settings` added, and its `call-namespaces: NS ...`
/// (where it may call without watching).
pub fn declare(mut m: Manifest, settings: &str) -> Result<Manifest, String> {
    if let Some(namespaces) = wasmop_sdk::helpers::setting(settings, "call-namespaces") {
        m = m.call_namespaces(namespaces.split_whitespace());
    }
    let Some(entries) = wasmop_sdk::helpers::setting(settings, "allow") else { return Ok(m) };
    for entry in entries.split_whitespace() {
        let (kind, verbs) = entry.split_once('=').ok_or_else(|| format!("allow: {entry:?} is not KIND=VERBS"))?;
        let (api_version, kind) =
            kind.rsplit_once('/').ok_or_else(|| format!("allow: {kind:?} is not API_VERSION/KIND"))?;
        let verbs = verbs
            .split(',')
            .map(|v| {
                Verb::ALL.into_iter().find(|x| x.as_str() == v).ok_or_else(|| format!("allow: unknown verb {v:?}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        m = m.allow_kind(KindRef::new(api_version, kind), &verbs);
    }
    Ok(m)
}

/// Makes the call `data` names; the outcome as the annotation keeps it.
pub fn attack(ctx: &Context<'_>, data: &BTreeMap<String, String>) -> String {
    let field = |k: &str| data.get(k).map(String::as_str).unwrap_or("");
    let kind = KindRef::new(field("apiVersion"), field("kind"));
    let namespace = data.get("namespace").map(String::as_str).filter(|n| !n.is_empty());
    let target = ObjectRef::new(&kind, namespace, field("name"));
    let outcome = match field("verb") {
        "get" => ctx.get(&target).map(|_| ()),
        "get-live" => ctx.get_live(&target).map(|_| ()),
        "list" | "list-live" => {
            let params = ListParams { namespace: namespace.map(Into::into), ..Default::default() };
            if field("verb") == "list" { ctx.list(&kind, &params) } else { ctx.list_live(&kind, &params) }.map(|_| ())
        }
        "update" => ctx.get(&target).and_then(|mut o| {
            o["metadata"]["annotations"]["probe/attacked"] = "true".into();
            ctx.update(&o).map(|_| ())
        }),
        "create" => {
            let mut meta = serde_json::json!({ "generateName": field("name") });
            if let Some(ns) = namespace {
                meta["namespace"] = ns.into();
            }
            let o = serde_json::json!({ "apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta });
            ctx.create(&o).map(|_| ())
        }
        "event" => {
            ctx.warning(&target, field("reason"), "recorded by the probe");
            Ok(())
        }
        other => return format!("unknown verb {other:?}"),
    };
    let result = match outcome {
        Ok(()) => "ok".to_owned(),
        Err(e) => format!("{}: {}", e.code(), e.message()).chars().take(300).collect(),
    };
    ctx.info("probe attack", &[("verb", field("verb")), ("target", &target.to_string()), ("result", &result)]);
    result
}
