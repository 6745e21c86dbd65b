//! The watch caches' answers, and read-your-writes for a reconciled object.

use super::cache::*;
use super::{Error, KindRef, ListParams, ObjectRef};
use serde_json::{Value, json};
use std::sync::Arc;

fn cached(v: Value) -> Arc<Cached> {
    Arc::new(Cached::of(&v))
}

fn parsed(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn answers_only_what_it_covers() {
    let kind = KindRef::new("v1", "ConfigMap");
    let objects: ObjectCache = Arc::default();
    let a = ObjectRef::new(&kind, Some("a"), "x");
    objects
        .lock()
        .unwrap()
        .insert(a.clone(), cached(json!({"metadata": {"name": "x", "uid": "u-1", "labels": {"k": "v"}}})));
    let c = KindCache::new(kind.clone(), Some(vec!["a".into()]), objects.clone());
    assert_eq!(parsed(&c.get(&a).unwrap().unwrap())["metadata"]["labels"]["k"], "v");
    assert!(matches!(c.get(&ObjectRef::new(&kind, Some("a"), "y")), Some(Err(Error::NotFound(_)))));
    assert!(c.get(&ObjectRef::new(&kind, Some("b"), "x")).is_none(), "namespace not watched: ask the apiserver");
    assert!(c.get(&ObjectRef::new(&KindRef::new("v1", "Secret"), Some("a"), "x")).is_none());
    // Events on a cached object find its uid without a GET.
    assert_eq!(c.uid(&a).as_deref(), Some("u-1"));
    assert_eq!(c.uid(&ObjectRef::new(&kind, Some("a"), "y")), None);
    assert_eq!(c.uid(&ObjectRef::new(&kind, Some("b"), "x")), None);
    let p = |ns: Option<&str>, sel: Option<&str>| ListParams {
        namespace: ns.map(Into::into),
        label_selector: sel.map(Into::into),
        field_selector: None,
    };
    let text = |sel: Option<&str>| c.list_text(&kind, &p(Some("a"), sel)).unwrap().unwrap();
    assert_eq!(parsed(&text(Some("k=v"))).as_array().unwrap().len(), 1);
    assert_eq!(text(Some("k=w")), "[]");
    assert!(matches!(c.list_text(&kind, &p(Some("a"), Some("k in ("))), Some(Err(Error::Invalid(_)))));
    assert!(c.list_text(&kind, &p(None, None)).is_none(), "all namespaces, but only `a` is watched");

    // Several objects: a JSON array in name order, whatever the map's order.
    for n in ["c", "b"] {
        let r = ObjectRef::new(&kind, Some("a"), n);
        objects.lock().unwrap().insert(r, cached(json!({"metadata": {"name": n, "labels": {"k": "v"}}})));
    }
    let names: Vec<Value> =
        parsed(&text(Some("k=v"))).as_array().unwrap().iter().map(|o| o["metadata"]["name"].clone()).collect();
    assert_eq!(names, [json!("b"), json!("c"), json!("x")]);
    for n in ["c", "b"] {
        objects.lock().unwrap().remove(&ObjectRef::new(&kind, Some("a"), n));
    }
    let first = text(None);
    assert_eq!(parsed(&first)[0]["metadata"]["uid"], "u-1");
    assert_eq!(text(None), first, "the same objects, the same text");
    objects.lock().unwrap().insert(a.clone(), cached(json!({"metadata": {"name": "x", "uid": "u-2"}})));
    assert_eq!(parsed(&text(None))[0]["metadata"]["uid"], "u-2", "changed object");
    objects.lock().unwrap().remove(&a);
    assert_eq!(text(None), "[]", "deleted object");
    assert!(c.list_text(&kind, &p(None, None)).is_none());
}

#[test]
fn a_plugin_cache_answers_each_watched_kind_from_its_own_cache() {
    let (mc, dep) = (KindRef::new("cache.example.com/v1alpha1", "Memcached"), KindRef::new("apps/v1", "Deployment"));
    let filled = |kind: &KindRef, name: &str| {
        let objects: ObjectCache = Arc::default();
        let r = ObjectRef::new(kind, Some("a"), name);
        objects.lock().unwrap().insert(r, cached(json!({"kind": kind.kind, "metadata": {"name": name}})));
        objects
    };
    let c = PluginCache::new(
        None,
        vec![
            KindCache::new(mc.clone(), None, filled(&mc, "m")),
            KindCache::new(dep.clone(), Some(vec!["a".into()]), filled(&dep, "d")),
        ],
    );
    assert_eq!(parsed(&c.get(&ObjectRef::new(&dep, Some("a"), "d")).unwrap().unwrap())["kind"], "Deployment");
    assert_eq!(parsed(&c.get(&ObjectRef::new(&mc, Some("a"), "m")).unwrap().unwrap())["kind"], "Memcached");
    // Not found in a watched kind is an answer (a create follows); elsewhere, no answer.
    assert!(matches!(c.get(&ObjectRef::new(&dep, Some("a"), "m")), Some(Err(Error::NotFound(_)))));
    assert!(c.get(&ObjectRef::new(&dep, Some("b"), "d")).is_none());
    assert!(c.get(&ObjectRef::new(&KindRef::new("v1", "Pod"), Some("a"), "d")).is_none());
    let all = ListParams::default();
    assert!(c.list_text(&dep, &all).is_none(), "all namespaces, but Deployments only in `a`");
    let text = c.list_text(&mc, &all).unwrap().unwrap();
    assert_eq!(parsed(&text)[0]["metadata"]["name"], "m");
    let fields = ListParams { field_selector: Some("metadata.name=m".into()), ..ListParams::default() };
    assert!(c.list_text(&mc, &fields).is_none(), "field selectors are the apiserver's");
}

#[test]
fn a_write_advances_the_cache_only_from_the_state_it_was_made_from() {
    let kind = KindRef::new("v1", "ConfigMap");
    let objects: ObjectCache = Arc::default();
    let r = ObjectRef::new(&kind, Some("a"), "x");
    let state = |rv: &str, v: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "a", "uid": "u", "resourceVersion": rv}, "data": {"v": v}})
    };
    objects.lock().unwrap().insert(r.clone(), cached(state("10", "old")));
    let c = KindCache::new(kind.clone(), Some(vec!["a".into()]), objects.clone());
    let read = || parsed(&c.get(&r).unwrap().unwrap());

    assert!(!c.advance(&r, "9", &state("11", "from an older state")), "the write was not made from what is cached");
    assert_eq!(read()["data"]["v"], "old");
    assert!(c.advance(&r, "10", &state("11", "mine")));
    assert_eq!(read()["data"]["v"], "mine", "the next read sees the write");
    assert_eq!(c.uid(&r).as_deref(), Some("u"));
    // The watch's later events replace it as usual; a write answered after one of
    // them arrived changes nothing.
    objects.lock().unwrap().insert(r.clone(), cached(state("12", "someone else's")));
    assert!(!c.advance(&r, "11", &state("13", "mine, later")));
    assert_eq!(read()["data"]["v"], "someone else's");
    // Gone, or never cached: a write does not bring it (back).
    objects.lock().unwrap().remove(&r);
    assert!(!c.advance(&r, "12", &state("13", "mine")));
    assert!(matches!(c.get(&r), Some(Err(Error::NotFound(_)))));
    assert!(!c.advance(&ObjectRef::new(&kind, Some("b"), "x"), "10", &state("11", "elsewhere")));
}

#[tokio::test]
async fn a_reconcile_reads_its_own_update_of_the_object_it_reconciles_at_once() {
    use crate::gateway::{Gateway, MemoryBackend, Permissions, Read, Verb};
    let kind = KindRef::new("v1", "ConfigMap");
    let mut p = Permissions::default();
    p.allow(&kind, &[Verb::Get, Verb::Create, Verb::Update, Verb::UpdateStatus]);
    let backend = Arc::new(MemoryBackend::default());
    let plain = Gateway::new("t", Arc::new(p.clone()), backend.clone());
    let object = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "a"}, "data": {"v": "0"}})
    };
    // The cache holds both objects as the watch delivered them (the create's answers).
    let objects: ObjectCache = Arc::default();
    for name in ["me", "other"] {
        let created = plain.create(object(name)).await.unwrap();
        objects.lock().unwrap().insert(ObjectRef::new(&kind, Some("a"), name), cached(created));
    }
    let cache = Arc::new(PluginCache::new(None, vec![KindCache::new(kind.clone(), None, objects)]));
    let me = ObjectRef::new(&kind, Some("a"), "me");
    let other = ObjectRef::new(&kind, Some("a"), "other");
    let g = Gateway::new("t", Arc::new(p), backend).with_cache(Some(cache)).reconciling(me.clone(), None);
    let read = async |r: &ObjectRef| -> Value { parsed(&g.get(r, Read::Cached).await.unwrap()) };
    for r in [&me, &other] {
        let mut v = read(r).await;
        v["data"]["v"] = json!("1");
        g.update(v).await.unwrap();
    }
    assert_eq!(read(&me).await["data"]["v"], "1", "its own object: read-your-writes");
    assert_eq!(read(&other).await["data"]["v"], "0", "another object waits for its watch event");
    let mut v = read(&me).await;
    v["status"] = json!({"phase": "done"});
    g.update_status(v).await.unwrap();
    let v = read(&me).await;
    assert_eq!((&v["status"]["phase"], &v["data"]["v"]), (&json!("done"), &json!("1")), "a status update too");
}
