//! The gateway's calls: the authority check before each, what a call leaves behind
//! (denials counted, conflicts and other objects' changes remembered), and objects
//! refused with the field named.

use super::*;
use serde_json::json;

fn gateway(perms: Permissions) -> (Gateway, Arc<MemoryBackend>) {
    let mem = Arc::new(MemoryBackend::default());
    (Gateway::new("t", Arc::new(perms), mem.clone()), mem)
}

#[tokio::test]
async fn denied_call_writes_nothing_and_is_counted() {
    let cm = KindRef::new("v1", "ConfigMap");
    let mut p = Permissions::default();
    p.allow(&cm, &[Verb::Get]);
    let (g, mem) = gateway(p);
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d"}});
    let err = g.create(obj).await.unwrap_err();
    assert!(matches!(err, Error::Forbidden(ref m) if m.contains("create") && m.contains("ConfigMap")), "{err}");
    let secret = ObjectRef::new(&KindRef::new("v1", "Secret"), Some("d"), "s");
    assert!(matches!(g.get(&secret, Read::Cached).await, Err(Error::Forbidden(_))));
    assert_eq!(g.denied_calls(), 2);
    assert!(mem.fake().take_writes().is_empty());
}

#[tokio::test]
async fn knows_whether_a_reconcile_changed_objects_other_than_its_own() {
    let cm = KindRef::new("v1", "ConfigMap");
    let mut p = Permissions::default();
    p.allow(&cm, &[Verb::Create, Verb::Update, Verb::UpdateStatus]);
    let (g, _) = gateway(p);
    let g = g.reconciling(ObjectRef::new(&cm, Some("d"), "mine"), None);
    let seen_by_worker = g.clone();
    let named = |n: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "namespace": "d"}});
    let mine = g.create(named("mine")).await.unwrap();
    let mine = g.update(mine).await.unwrap();
    g.update_status(mine).await.unwrap();
    assert!(!g.changed_others(), "writes of the reconciled object");
    g.create(named("mine")).await.unwrap_err();
    g.update(named("missing")).await.unwrap_err();
    assert!(!seen_by_worker.changed_others(), "writes refused");
    g.create(named("other")).await.unwrap();
    assert!(seen_by_worker.changed_others(), "clones share it");
}

#[tokio::test]
async fn remembers_whether_the_last_call_ended_in_conflict() {
    let cm = KindRef::new("v1", "ConfigMap");
    let mut p = Permissions::default();
    p.allow(&cm, &[Verb::Create, Verb::Update, Verb::Get]);
    let (g, _) = gateway(p);
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d"}});
    let mut stale = g.create(obj).await.unwrap();
    stale["metadata"]["resourceVersion"] = "999".into();
    let seen_by_worker = g.clone();
    assert!(matches!(g.update(stale.clone()).await, Err(Error::Conflict(_))));
    assert!(seen_by_worker.ended_in_conflict(), "clones share it: the worker reads what the plugin's calls did");
    g.get(&ObjectRef::new(&cm, Some("d"), "a"), Read::Live).await.unwrap();
    assert!(!g.ended_in_conflict(), "a later call that succeeds clears it");
    g.update(stale).await.unwrap_err();
    let denied = g.delete(&ObjectRef::new(&cm, Some("d"), "a")).await.unwrap_err();
    assert!(matches!(denied, Error::Forbidden(_)));
    assert!(!g.ended_in_conflict(), "so does a later call that is refused");
}

#[tokio::test]
async fn allowed_call_reaches_backend() {
    let cm = KindRef::new("v1", "ConfigMap");
    let mut p = Permissions::default();
    p.allow(&cm, &[Verb::Create, Verb::Get]);
    let (g, _) = gateway(p);
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d"}});
    g.create(obj).await.unwrap();
    assert!(g.get(&ObjectRef::new(&cm, Some("d"), "a"), Read::Cached).await.is_ok());
    assert_eq!(g.denied_calls(), 0);
}

#[tokio::test]
async fn events_pass_the_same_check_as_reading_what_they_describe() {
    let cm = KindRef::new("v1", "ConfigMap");
    let mut p = Permissions::default();
    p.allow(&cm, &[Verb::Get]);
    p.restrict_namespaces(["d".to_string()]);
    let (g, mem) = gateway(p);
    let mine = ObjectRef::new(&cm, Some("d"), "a");
    g.record_event(&mine, EventType::Normal, "Synced", "ok").await;
    // Outside its namespaces, of a kind it may not read, or with a host's reason: refused.
    g.record_event(&ObjectRef::new(&cm, Some("wasmop-system"), "other-plugin"), EventType::Warning, "Synced", "x")
        .await;
    g.record_event(&ObjectRef::new(&KindRef::new("v1", "Secret"), Some("d"), "s"), EventType::Normal, "Seen", "x")
        .await;
    g.record_event(&mine, EventType::Warning, "PluginRejected", "forged").await;
    g.record_event(&mine, EventType::Warning, "pluginRejected", "forged").await;
    g.record_event(&mine, EventType::Warning, "PluginRejected\u{200b}", "forged").await;
    let reasons: Vec<String> = mem.fake().events().into_iter().map(|e| e.reason).collect();
    assert_eq!(reasons, ["Synced"]);
    assert_eq!(g.denied_calls(), 5);
    // The host's own reports about the plugin's objects are not the plugin's to forge, but are the host's to write.
    g.report(&mine, EventType::Warning, "ReconcileFailed", "boom").await;
    assert_eq!(mem.fake().events().len(), 2);
}

#[tokio::test]
async fn a_create_may_leave_the_name_to_generate_name() {
    let cm = KindRef::new("v1", "ConfigMap");
    let mut p = Permissions::default();
    p.allow(&cm, &[Verb::Create]);
    let (g, _) = gateway(p);
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "a-", "namespace": "d"}});
    let made = g.create(obj).await.unwrap();
    assert!(made["metadata"]["name"].as_str().unwrap().starts_with("a-"), "{made}");
    let unnamed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "d"}});
    assert_eq!(g.create(unnamed).await.unwrap_err(), Error::Invalid("object is missing metadata.name".into()));
}

#[tokio::test]
async fn malformed_object_is_invalid_naming_the_field() {
    let (g, _) = gateway(Permissions::default());
    let err = g.create(json!({"apiVersion": "v1", "metadata": {}})).await.unwrap_err();
    assert_eq!(err, Error::Invalid("object is missing kind, metadata.name".into()));
    assert!(matches!(g.update(json!([1, 2])).await, Err(Error::Invalid(_))));
}
