//! {{name}}: a wasmop plugin. It reconciles ConfigMaps: one annotated
//! `{{name}}.example.com/copy-to: OTHER` gets a copy named OTHER, owned by it, that
//! follows its data.
//!
//! Test it without a cluster: `make test`; build and deploy: `make deploy`.

use serde_json::json;
use wasmop_sdk::k8s_openapi::api::core::v1::ConfigMap;
use wasmop_sdk::{Action, Context, Error, KindRef, Manifest, ObjectRef, ReconcileError, Reconciler, Request, Verb};

const COPY_TO: &str = "{{name}}.example.com/copy-to";

pub struct Operator;

impl Reconciler for Operator {
    fn manifest(_settings: &str) -> Result<Manifest, String> {
        Ok(Manifest::new::<ConfigMap>("{{name}}", env!("CARGO_PKG_VERSION"))
            .owns::<ConfigMap>()
            .allow::<ConfigMap>(&[Verb::Create, Verb::Update]))
    }

    fn reconcile(ctx: &Context<'_>, req: &Request) -> Result<Action, ReconcileError> {
        let Some(cm) = &req.current else { return Ok(Action::done()) };
        let meta = &cm["metadata"];
        let Some(target) = meta["annotations"][COPY_TO].as_str() else { return Ok(Action::done()) };
        if !meta["deletionTimestamp"].is_null() {
            return Ok(Action::done());
        }
        let ns = meta["namespace"].as_str();
        let data = if cm["data"].is_null() { json!({}) } else { cm["data"].clone() };
        let uid = meta["uid"].clone();
        let copy_ref = ObjectRef::new(&KindRef::of::<ConfigMap>(), ns, target);
        match ctx.cluster().get(&copy_ref) {
            Err(Error::NotFound(_)) => {
                let owner = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": meta["name"], "uid": uid, "controller": true});
                ctx.cluster().create(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": target, "namespace": ns, "ownerReferences": [owner]}, "data": data}))?;
                ctx.event(&req.object, "Copied", &format!("Copied to ConfigMap {target}"));
            }
            Err(e) => return Err(e.into()),
            Ok(mut copy) => {
                let ours = copy["metadata"]["ownerReferences"].as_array().into_iter().flatten().any(|r| r["uid"] == uid);
                if !ours {
                    ctx.warning(&req.object, "NameTaken", &format!("ConfigMap {target} exists and is not a copy of this one"));
                    return Err(ReconcileError::permanent(format!("ConfigMap {target} is not ours")));
                }
                let have = if copy["data"].is_null() { json!({}) } else { copy["data"].clone() };
                if have != data {
                    copy["data"] = data;
                    ctx.cluster().update(&copy)?;
                    ctx.event(&req.object, "Updated", &format!("Updated ConfigMap {target}"));
                }
            }
        }
        Ok(Action::done())
    }
}

wasmop_sdk::export_plugin!(Operator);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmop_sdk::fake::{FakeCluster, Write};

    fn reconcile(fake: &FakeCluster, name: &str) -> Result<Action, ReconcileError> {
        let object = ObjectRef::new(&KindRef::of::<ConfigMap>(), Some("default"), name);
        let current: Option<serde_json::Value> = fake.object(&object);
        Operator::reconcile(&Context::new(fake), &Request { object, current, settings: String::new() })
    }

    #[test]
    fn an_annotated_configmap_gets_its_copy_and_keeps_it_in_step() {
        let fake = FakeCluster::new();
        fake.seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "greeting", "namespace": "default", "annotations": {COPY_TO: "greeting-copy"}},
            "data": {"hello": "world"}}))
        .unwrap();
        assert_eq!(reconcile(&fake, "greeting").unwrap(), Action::done());
        let writes = fake.take_writes();
        let Some(Write::Create(copy)) = writes.first() else { panic!("created the copy: {writes:?}") };
        assert_eq!(copy["metadata"]["name"], "greeting-copy");
        assert_eq!(copy["data"]["hello"], "world");
        assert!(fake.events().iter().any(|e| e.reason == "Copied"));

        let original = ObjectRef::new(&KindRef::of::<ConfigMap>(), Some("default"), "greeting");
        fake.edit(&original, |cm| cm["data"]["hello"] = json!("there")).unwrap();
        reconcile(&fake, "greeting").unwrap();
        let copy = fake.object(&ObjectRef::new(&KindRef::of::<ConfigMap>(), Some("default"), "greeting-copy")).unwrap();
        assert_eq!(copy["data"]["hello"], "there", "the copy follows");
    }
}
