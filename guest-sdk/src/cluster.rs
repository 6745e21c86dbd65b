use crate::types::{Error, EventType, KindRef, LogLevel, ObjectRef};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Filters for [`Cluster::list`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListParams {
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
}

impl ListParams {
    pub fn namespace(ns: &str) -> Self {
        ListParams { namespace: Some(ns.to_owned()), ..Default::default() }
    }

    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_owned());
        self
    }
}

/// Cluster access at the level of the contract: objects as JSON values.
///
/// In a plugin this is the host (`cluster`, `events` and `log` imports); in tests it is
/// [`crate::fake::FakeCluster`]. Use the typed helpers of [`ClusterExt`].
pub trait Cluster {
    fn get(&self, object: &ObjectRef) -> Result<serde_json::Value, Error>;
    fn list(&self, kind: &KindRef, params: &ListParams) -> Result<Vec<serde_json::Value>, Error>;
    /// The same list as JSON text, an array of objects: as the host sends it, so
    /// [`ClusterExt::list_shared`] can tell an answer it has parsed before.
    fn list_text(&self, kind: &KindRef, params: &ListParams) -> Result<String, Error> {
        Ok(serde_json::Value::Array(self.list(kind, params)?).to_string())
    }
    /// Whether [`Cluster::list_text`] is the cluster's own answer (the host's), from
    /// which typed lists are parsed directly; in-process clusters hold values, and
    /// write the text from them.
    fn lists_as_text(&self) -> bool {
        false
    }
    /// [`Cluster::get`] answered by the apiserver itself, never by the host's watch
    /// caches (which may be one event behind the plugin's own last write): for a read
    /// that must see a change made a moment ago. In-process clusters have no cache and
    /// answer as `get`.
    fn get_live(&self, object: &ObjectRef) -> Result<serde_json::Value, Error> {
        self.get(object)
    }
    /// [`Cluster::list`] answered by the apiserver itself (see [`Cluster::get_live`]).
    fn list_live(&self, kind: &KindRef, params: &ListParams) -> Result<Vec<serde_json::Value>, Error> {
        self.list(kind, params)
    }
    fn create(&self, object: &serde_json::Value) -> Result<serde_json::Value, Error>;
    fn update(&self, object: &serde_json::Value) -> Result<serde_json::Value, Error>;
    fn update_status(&self, object: &serde_json::Value) -> Result<serde_json::Value, Error>;
    fn delete(&self, object: &ObjectRef) -> Result<(), Error>;
    fn record_event(&self, regarding: &ObjectRef, event_type: EventType, reason: &str, message: &str);
    fn log(&self, level: LogLevel, message: &str, fields: &[(&str, &str)]);
}

/// A Kubernetes type the SDK can move across the boundary: any k8s-openapi type, or a
/// kube `CustomResource`.
pub trait Object: kube::core::Resource<DynamicType = ()> + Serialize + DeserializeOwned {}
impl<T: kube::core::Resource<DynamicType = ()> + Serialize + DeserializeOwned> Object for T {}

/// Typed helpers over any [`Cluster`].
pub trait ClusterExt: Cluster {
    /// Reads `T` named `name` in `namespace`; Ok(None) when it does not exist.
    fn get_opt<T: Object>(&self, namespace: Option<&str>, name: &str) -> Result<Option<T>, Error> {
        let r = ObjectRef::new(&KindRef::of::<T>(), namespace, name);
        match self.get(&r) {
            Ok(v) => from_value(v).map(Some),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn list_of<T: Object>(&self, params: &ListParams) -> Result<Vec<T>, Error> {
        self.list(&KindRef::of::<T>(), params)?.into_iter().map(from_value).collect()
    }

    /// The objects of `kind` as `T`, which may be any view of them: a type with only
    /// the fields a plugin reads (say, Pods' metadata) costs only those fields. From
    /// the host's text each object is parsed once, straight into `T`, where
    /// [`list_of`](Self::list_of) builds every field of every object as a JSON value
    /// first (the Memcached plugin lists its Pods on every reconcile).
    /// Caveat: parsing a type from text adds a second copy of its deserializer to the
    /// plugin if the type is also read from values (`from_value`, request objects):
    /// SidecarSets read both ways added 170 KB to the sidecarset plugin.
    fn list_as<T: DeserializeOwned>(&self, kind: &KindRef, params: &ListParams) -> Result<Vec<T>, Error> {
        if self.lists_as_text() {
            let text = self.list_text(kind, params)?;
            return serde_json::from_str(&text).map_err(|e| Error::Internal(format!("deserialize: {e}")));
        }
        self.list(kind, params)?.into_iter().map(from_value).collect()
    }

    /// [`list_of`](Self::list_of) for lists read on every call, such as the policies
    /// or SidecarSets a webhook consults for each review: when the host answers with
    /// the same text as the last time this instance listed `T` with `params`, the list
    /// parsed then is returned instead of parsing it again.
    ///
    /// It pays where one instance serves many calls, as admission reviews do (see the
    /// README); a reconcile runs in a fresh instance, where this is `list_of` plus one
    /// comparison. Answers are compared byte for byte, so a changed object, or the same
    /// objects in another order, is parsed afresh: the result is never stale.
    fn list_shared<T: Object + 'static>(&self, params: &ListParams) -> Result<std::rc::Rc<Vec<T>>, Error> {
        let text = self.list_text(&KindRef::of::<T>(), params)?;
        let key = (std::any::TypeId::of::<T>(), params.clone());
        let hit = SHARED.with_borrow(|m| {
            m.iter()
                .find(|e| e.key == key && same_text(&e.text, &text))
                .and_then(|e| e.list.clone().downcast::<Vec<T>>().ok())
        });
        if let Some(list) = hit {
            return Ok(list);
        }
        let values: Vec<serde_json::Value> =
            serde_json::from_str(&text).map_err(|e| Error::Internal(format!("host returned bad JSON: {e}")))?;
        let list = std::rc::Rc::new(values.into_iter().map(from_value).collect::<Result<Vec<T>, Error>>()?);
        SHARED.with_borrow_mut(|m| {
            m.retain(|e| e.key != key);
            if m.len() == SHARED_LISTS {
                m.remove(0);
            }
            m.push(SharedList { key, text, list: list.clone() });
        });
        Ok(list)
    }

    fn create_obj<T: Object>(&self, object: &T) -> Result<T, Error> {
        from_value(self.create(&to_value(object)?)?)
    }

    fn update_obj<T: Object>(&self, object: &T) -> Result<T, Error> {
        from_value(self.update(&to_value(object)?)?)
    }

    fn update_status_obj<T: Object>(&self, object: &T) -> Result<T, Error> {
        from_value(self.update_status(&to_value(object)?)?)
    }

    fn delete_obj<T: Object>(&self, namespace: Option<&str>, name: &str) -> Result<(), Error> {
        self.delete(&ObjectRef::new(&KindRef::of::<T>(), namespace, name))
    }
}

impl<C: Cluster + ?Sized> ClusterExt for C {}

/// Lists [`ClusterExt::list_shared`] remembers per instance. Why 8: a handler reads a
/// few kinds per call; more would only hold memory for lists nobody asks for again.
const SHARED_LISTS: usize = 8;

/// `a == b`, eight bytes at a time. Why not `==`: in wasm that is a byte-by-byte
/// `memcmp`, and this comparison runs on every `list_shared` call over the whole answer
/// (4 % of the host's CPU per SidecarSet injection in a profile; BENCHMARKS.md, sixth
/// pass).
fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let (wa, wb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail = wa.remainder() == wb.remainder();
    tail && wa
        .zip(wb)
        .all(|(x, y)| u64::from_ne_bytes(x.try_into().unwrap()) == u64::from_ne_bytes(y.try_into().unwrap()))
}

/// A list parsed by [`ClusterExt::list_shared`], with the text it was parsed from.
struct SharedList {
    key: (std::any::TypeId, ListParams),
    text: String,
    list: std::rc::Rc<dyn std::any::Any>,
}

thread_local! {
    static SHARED: std::cell::RefCell<Vec<SharedList>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Serializes `object` with its apiVersion and kind filled in (k8s-openapi types carry
/// them implicitly; kube `CustomResource` types carry them as fields).
pub fn to_value<T: Object>(object: &T) -> Result<serde_json::Value, Error> {
    let mut v = serde_json::to_value(object).map_err(|e| Error::Internal(format!("serialize: {e}")))?;
    if let Some(map) = v.as_object_mut() {
        map.insert("apiVersion".into(), T::api_version(&()).into_owned().into());
        map.insert("kind".into(), T::kind(&()).into_owned().into());
    }
    Ok(v)
}

pub fn from_value<T: DeserializeOwned>(v: serde_json::Value) -> Result<T, Error> {
    serde_json::from_value(v).map_err(|e| Error::Internal(format!("deserialize: {e}")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn same_text_is_equality() {
        let base = "[{\"metadata\":{\"name\":\"s\"}}]";
        for (a, b) in [(base, base), ("", ""), ("abc", "abd"), ("abcdefgh1", "abcdefgh2"), ("abcdefgh", "abcdefgi")] {
            assert_eq!(super::same_text(a, b), a == b, "{a:?} {b:?}");
        }
        let mut changed = base.to_owned().into_bytes();
        changed[3] = b'M';
        assert!(!super::same_text(base, std::str::from_utf8(&changed).unwrap()));
        assert!(!super::same_text(base, &base[1..]));
    }
}
