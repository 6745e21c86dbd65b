//! One member of a ring, like the wasm-operator paper's benchmark: loaded N times with
//! settings `namespace: ring-i` and `next: ring-j`, it watches the ConfigMap `ring` in
//! its namespace and, when its `nonce` changes, writes that nonce into the `ring`
//! ConfigMap of the next namespace — one unconditional PUT, so a hop costs one write.
//! It calls in `next` without watching it (`call_namespaces`, the WIT `reach`): a
//! plugin's namespaces bound its calls as well as its watches.

use k8s_openapi::api::core::v1::ConfigMap;
use wasmop_sdk::helpers::setting;
use wasmop_sdk::{Action, ClusterExt, Context, Manifest, ReconcileError, Reconciler, Request, Verb};

pub struct Ring;

impl Reconciler for Ring {
    fn manifest(settings: &str) -> Result<Manifest, String> {
        let ns = setting(settings, "namespace").ok_or("settings need `namespace: NAME`")?;
        let next = setting(settings, "next").ok_or("settings need `next: NAME`")?;
        Ok(Manifest::new::<ConfigMap>("ring", "1.0.0")
            .namespaces([ns])
            .call_namespaces([next])
            .allow::<ConfigMap>(&[Verb::Update]))
    }

    fn reconcile(ctx: &Context<'_>, req: &Request) -> Result<Action, ReconcileError> {
        if req.object.name != "ring" {
            return Ok(Action::done());
        }
        let Some(cm) = req.current_as::<ConfigMap>()? else { return Ok(Action::done()) };
        let next = setting(&req.settings, "next").ok_or_else(|| ReconcileError::permanent("no `next` setting"))?;
        let Some(nonce) = cm.data.as_ref().and_then(|d| d.get("nonce")).cloned() else { return Ok(Action::done()) };
        let mut out = ConfigMap::default();
        out.metadata.name = Some("ring".into());
        out.metadata.namespace = Some(next.to_owned());
        out.data = Some([("nonce".to_string(), nonce)].into());
        // Without a resourceVersion the update is unconditional: no read before the write.
        ctx.update_obj(&out)?;
        Ok(Action::done())
    }
}

wasmop_sdk::export_plugin!(Ring);
