//! An in-memory cluster with the apiserver behaviour reconcilers depend on, for unit
//! tests and for the host's offline `wasmop reconcile`.
//!
//! It keeps: resourceVersion (and `conflict` on a stale one), uid, generation (bumped
//! when anything but status and metadata changes), status kept apart from spec
//! (`update` never writes status, `update-status` writes only status), finalizers
//! (a delete sets deletionTimestamp until they are gone), and garbage collection of
//! dependents through ownerReferences. It does not validate schemas, apply CRD
//! defaults or run admission: those are proven against a real apiserver. (Without
//! defaulting, an object seeded without a defaulted field looks "changed" to the fake
//! when the plugin writes it back with the default, and its generation moves.)

use crate::cluster::{Cluster, ListParams};
use crate::types::{Error, EventType, KindRef, LogLevel, ObjectRef};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A write the plugin made, in order; what `wasmop reconcile` prints.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    Create(Value),
    Update(Value),
    UpdateStatus(Value),
    Delete(ObjectRef),
}

/// A recorded Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedEvent {
    pub regarding: ObjectRef,
    pub event_type: EventType,
    pub reason: String,
    pub message: String,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<ObjectRef, Value>,
    writes: Vec<Write>,
    events: Vec<RecordedEvent>,
    logs: Vec<(LogLevel, String)>,
    next_rv: u64,
}

/// See the module docs.
#[derive(Default)]
pub struct FakeCluster {
    state: Mutex<State>,
}

impl FakeCluster {
    pub fn new() -> Self {
        Self::default()
    }

    /// Seeds an object as if it already existed (not recorded as a write). A uid and a
    /// generation in the object are kept, so ownerReferences and observedGeneration
    /// between seeded objects hold.
    pub fn seed(&self, object: Value) -> Result<Value, Error> {
        let mut created = self.create(&object)?;
        let mut st = self.state.lock().unwrap();
        st.writes.pop();
        for field in ["uid", "generation"] {
            if let Some(v) = object.pointer(&format!("/metadata/{field}")) {
                created["metadata"][field] = v.clone();
            }
        }
        st.objects.insert(key_of(&created)?, created.clone());
        Ok(created)
    }

    /// Seeds a typed object.
    pub fn seed_obj<T: crate::Object>(&self, object: &T) -> Result<Value, Error> {
        self.seed(crate::cluster::to_value(object)?)
    }

    /// The stored object, if any.
    pub fn object(&self, r: &ObjectRef) -> Option<Value> {
        self.state.lock().unwrap().objects.get(r).cloned()
    }

    /// All stored objects of a kind.
    pub fn objects_of(&self, kind: &KindRef) -> Vec<Value> {
        let st = self.state.lock().unwrap();
        st.objects.iter().filter(|(r, _)| r.kind_ref() == *kind).map(|(_, v)| v.clone()).collect()
    }

    /// Every write since the last [`Self::take_writes`].
    pub fn take_writes(&self) -> Vec<Write> {
        std::mem::take(&mut self.state.lock().unwrap().writes)
    }

    pub fn events(&self) -> Vec<RecordedEvent> {
        self.state.lock().unwrap().events.clone()
    }

    pub fn logs(&self) -> Vec<(LogLevel, String)> {
        self.state.lock().unwrap().logs.clone()
    }

    /// Edits a stored object in place, as another actor would (bumps resourceVersion).
    pub fn edit(&self, r: &ObjectRef, f: impl FnOnce(&mut Value)) -> Result<(), Error> {
        let mut st = self.state.lock().unwrap();
        let rv = st.bump();
        let obj = st.objects.get_mut(r).ok_or_else(|| not_found(r))?;
        f(obj);
        obj["metadata"]["resourceVersion"] = rv.into();
        Ok(())
    }
}

fn not_found(r: &ObjectRef) -> Error {
    Error::NotFound(format!("{} \"{}\" not found", r.kind, r.name))
}

fn key_of(object: &Value) -> Result<ObjectRef, Error> {
    ObjectRef::of_json(object).ok_or_else(|| Error::Invalid("object needs apiVersion, kind and metadata.name".into()))
}

impl State {
    fn bump(&mut self) -> String {
        self.next_rv += 1;
        self.next_rv.to_string()
    }

    fn check_rv(&self, r: &ObjectRef, incoming: &Value) -> Result<&Value, Error> {
        let stored = self.objects.get(r).ok_or_else(|| not_found(r))?;
        let want = incoming.pointer("/metadata/resourceVersion").and_then(Value::as_str);
        let have = stored.pointer("/metadata/resourceVersion").and_then(Value::as_str);
        match want {
            Some(w) if Some(w) != have => Err(Error::Conflict(format!(
                "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                r.kind, r.name
            ))),
            _ => Ok(stored),
        }
    }

    /// Removes `r` and, transitively, every object whose ownerReferences name its uid.
    fn remove_cascading(&mut self, r: &ObjectRef) {
        let Some(gone) = self.objects.remove(r) else { return };
        let uid = gone.pointer("/metadata/uid").cloned();
        let dependents: Vec<ObjectRef> = self
            .objects
            .iter()
            .filter(|(_, o)| {
                o.pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|refs| refs.iter().any(|or| or.get("uid") == uid.as_ref()))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for d in dependents {
            self.remove_cascading(&d);
        }
    }
}

fn has_finalizers(o: &Value) -> bool {
    o.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty())
}

impl Cluster for FakeCluster {
    fn get(&self, r: &ObjectRef) -> Result<Value, Error> {
        self.object(r).ok_or_else(|| not_found(r))
    }

    fn list(&self, kind: &KindRef, params: &ListParams) -> Result<Vec<Value>, Error> {
        let selector = match &params.label_selector {
            Some(s) => crate::helpers::LabelSelector::parse(s).map_err(Error::Invalid)?,
            None => crate::helpers::LabelSelector::default(),
        };
        let st = self.state.lock().unwrap();
        Ok(st
            .objects
            .iter()
            .filter(|(r, _)| r.kind_ref() == *kind)
            .filter(|(r, _)| params.namespace.is_none() || r.namespace == params.namespace)
            .filter(|(_, o)| selector.matches_json(o.pointer("/metadata/labels")))
            .map(|(_, o)| o.clone())
            .collect())
    }

    fn create(&self, object: &Value) -> Result<Value, Error> {
        let mut obj = object.clone();
        if obj.pointer("/metadata/name").is_none()
            && let Some(prefix) = obj.pointer("/metadata/generateName").and_then(Value::as_str)
        {
            let n = self.state.lock().unwrap().next_rv;
            obj["metadata"]["name"] = format!("{prefix}{n:05x}").into();
        }
        let r = key_of(&obj)?;
        let mut st = self.state.lock().unwrap();
        if st.objects.contains_key(&r) {
            return Err(Error::AlreadyExists(format!("{} \"{}\" already exists", r.kind, r.name)));
        }
        let rv = st.bump();
        let meta =
            obj["metadata"].as_object_mut().ok_or_else(|| Error::Invalid("metadata must be an object".into()))?;
        meta.insert("resourceVersion".into(), rv.clone().into());
        meta.insert("uid".into(), format!("00000000-0000-0000-0000-{:012}", rv.parse::<u64>().unwrap_or(0)).into());
        meta.insert("generation".into(), 1.into());
        meta.insert("creationTimestamp".into(), "2024-01-01T00:00:00Z".into());
        st.objects.insert(r, obj.clone());
        st.writes.push(Write::Create(obj.clone()));
        Ok(obj)
    }

    fn update(&self, object: &Value) -> Result<Value, Error> {
        let r = key_of(object)?;
        let mut st = self.state.lock().unwrap();
        let stored = st.check_rv(&r, object)?.clone();
        let mut obj = object.clone();
        // Status goes only through update-status, as with a status subresource.
        match stored.get("status") {
            Some(s) => obj["status"] = s.clone(),
            None => {
                obj.as_object_mut().map(|m| m.remove("status"));
            }
        }
        let spec_changed = strip_meta_status(&obj) != strip_meta_status(&stored);
        let generation = stored.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
        for k in ["uid", "creationTimestamp", "deletionTimestamp"] {
            match stored["metadata"].get(k) {
                Some(v) => obj["metadata"][k] = v.clone(),
                None => {
                    obj["metadata"].as_object_mut().map(|m| m.remove(k));
                }
            }
        }
        obj["metadata"]["generation"] = json!(if spec_changed { generation + 1 } else { generation });
        obj["metadata"]["resourceVersion"] = st.bump().into();
        st.writes.push(Write::Update(obj.clone()));
        if obj["metadata"].get("deletionTimestamp").is_some() && !has_finalizers(&obj) {
            st.remove_cascading(&r);
        } else {
            st.objects.insert(r, obj.clone());
        }
        Ok(obj)
    }

    fn update_status(&self, object: &Value) -> Result<Value, Error> {
        let r = key_of(object)?;
        let mut st = self.state.lock().unwrap();
        let mut stored = st.check_rv(&r, object)?.clone();
        stored["status"] = object.get("status").cloned().unwrap_or(Value::Null);
        stored["metadata"]["resourceVersion"] = st.bump().into();
        st.objects.insert(r, stored.clone());
        st.writes.push(Write::UpdateStatus(stored.clone()));
        Ok(stored)
    }

    fn delete(&self, r: &ObjectRef) -> Result<(), Error> {
        let mut st = self.state.lock().unwrap();
        let stored = st.objects.get(r).ok_or_else(|| not_found(r))?.clone();
        st.writes.push(Write::Delete(r.clone()));
        if has_finalizers(&stored) {
            let rv = st.bump();
            let o = st.objects.get_mut(r).expect("checked above");
            o["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:01Z".into();
            o["metadata"]["resourceVersion"] = rv.into();
        } else {
            st.remove_cascading(r);
        }
        Ok(())
    }

    fn record_event(&self, regarding: &ObjectRef, event_type: EventType, reason: &str, message: &str) {
        self.state.lock().unwrap().events.push(RecordedEvent {
            regarding: regarding.clone(),
            event_type,
            reason: reason.to_owned(),
            message: message.to_owned(),
        });
    }

    fn log(&self, level: LogLevel, message: &str, fields: &[(&str, &str)]) {
        let mut line = message.to_owned();
        for (k, v) in fields {
            line.push_str(&format!(" {k}={v}"));
        }
        self.state.lock().unwrap().logs.push((level, line));
    }
}

fn strip_meta_status(o: &Value) -> Value {
    let mut o = o.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClusterExt;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "d"}, "data": {"k": "v"}})
    }

    #[test]
    fn stale_resource_version_conflicts() {
        let f = FakeCluster::new();
        let first = f.create(&cm("a")).unwrap();
        let mut second = first.clone();
        second["data"]["k"] = "w".into();
        f.update(&second).unwrap();
        let mut stale = first.clone();
        stale["data"]["k"] = "x".into();
        assert!(f.update(&stale).unwrap_err().is_conflict());
        assert!(matches!(f.create(&cm("a")), Err(Error::AlreadyExists(_))));
    }

    #[test]
    fn update_keeps_status_and_update_status_keeps_spec() {
        let f = FakeCluster::new();
        let mut o = f.create(&cm("a")).unwrap();
        o["status"] = json!({"phase": "x"});
        let o = f.update_status(&o).unwrap();
        let mut changed = o.clone();
        changed["status"] = json!({"phase": "ignored"});
        changed["data"]["k"] = "new".into();
        let after = f.update(&changed).unwrap();
        assert_eq!(after["status"]["phase"], "x");
        assert_eq!(after["metadata"]["generation"], 2, "a spec change bumps generation");
    }

    #[test]
    fn finalizers_hold_deletion_and_owners_collect_dependents() {
        let f = FakeCluster::new();
        let mut owner = cm("owner");
        owner["metadata"]["finalizers"] = json!(["x/f"]);
        let owner = f.create(&owner).unwrap();
        let mut child = cm("child");
        child["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner["metadata"]["uid"], "controller": true}]);
        f.create(&child).unwrap();
        let r = ObjectRef::of_json(&owner).unwrap();
        f.delete(&r).unwrap();
        let held = f.get(&r).unwrap();
        assert!(held["metadata"]["deletionTimestamp"].is_string());
        let mut released = held.clone();
        released["metadata"]["finalizers"] = json!([]);
        f.update(&released).unwrap();
        assert!(f.get(&r).unwrap_err().is_not_found());
        assert!(f.get_opt::<ConfigMap>(Some("d"), "child").unwrap().is_none(), "dependent collected");
    }

    #[test]
    fn list_filters_by_namespace_and_labels() {
        let f = FakeCluster::new();
        let mut a = cm("a");
        a["metadata"]["labels"] = json!({"app": "x"});
        f.create(&a).unwrap();
        f.create(&cm("b")).unwrap();
        let mut other = cm("c");
        other["metadata"]["namespace"] = "e".into();
        f.create(&other).unwrap();
        let all: Vec<ConfigMap> = f.list_of(&ListParams::namespace("d")).unwrap();
        assert_eq!(all.len(), 2);
        let labelled: Vec<ConfigMap> = f.list_of(&ListParams::namespace("d").labels("app=x")).unwrap();
        assert_eq!(labelled.len(), 1);
        assert!(
            f.list(
                &KindRef::new("v1", "ConfigMap"),
                &ListParams { label_selector: Some("a in b".into()), ..Default::default() }
            )
            .is_err()
        );
    }

    #[test]
    fn list_shared_parses_a_list_again_only_when_its_text_changes() {
        let f = FakeCluster::new();
        let a = f.create(&cm("a")).unwrap();
        let in_d = ListParams::namespace("d");
        let first = f.list_shared::<ConfigMap>(&in_d).unwrap();
        let again = f.list_shared::<ConfigMap>(&in_d).unwrap();
        assert!(std::rc::Rc::ptr_eq(&first, &again), "unchanged: the list parsed before");
        // Other params are another list.
        assert!(f.list_shared::<ConfigMap>(&ListParams::namespace("e")).unwrap().is_empty());
        let mut changed = a.clone();
        changed["data"]["k"] = "w".into();
        f.update(&changed).unwrap();
        let after = f.list_shared::<ConfigMap>(&in_d).unwrap();
        assert!(!std::rc::Rc::ptr_eq(&first, &after), "a changed object is parsed afresh");
        assert_eq!(after[0].data.as_ref().unwrap()["k"], "w");
        assert_eq!(first[0].data.as_ref().unwrap()["k"], "v", "an earlier result is left as it was");
    }
}
