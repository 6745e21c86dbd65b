//! One plugin's controller: watches, a queue, and workers that call the plugin.
//!
//! Flow: watch streams for the primary, owned and watched kinds (one per namespace
//! when the manifest names namespaces) → each event maps to primary keys → the
//! [`Queue`] (one key never runs twice at once; re-added keys run once more) → workers
//! load the plugin's *current* version, reconcile, and requeue per the answer: after
//! `requeue-after`, with per-object exponential backoff on a retryable error or a
//! fault, or not at all.
//!
//! Guarantees: a reconcile already running when the plugin is swapped finishes on the
//! old version; the next uses the new one. Stopping closes the queue and waits for
//! in-flight reconciles; nothing is cancelled half-way. Aborting (a deposed leader)
//! cancels in-flight reconciles and returns only once every worker has ended, so no
//! write of this replica can follow it; a dropped [`super::Running`] aborts too, so a
//! controller is never left running detached. A primary deleted while the watch was
//! down is reconciled once after the re-list (with `current` = none).

use super::backoff::Backoff;
use super::queue::Queue;
use super::selector::Selecting;
use super::watches::{self, Role, Seen, Source};
use crate::gateway::{Cached, Caches, KindCache, KubeBackend, ObjectRef, OwnWrites, PluginCache};
use crate::health::Health;
use crate::registry::Handle;
use crate::runtime::Runtime;
use futures::StreamExt;
use kube::runtime::watcher;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use wasmop_sdk::Mapping;

/// What every controller shares.
pub struct Shared {
    pub kube: Arc<KubeBackend>,
    pub runtime: Arc<Runtime>,
    /// Concurrent reconciles per plugin. Why 4: enough to overlap apiserver round
    /// trips; more would let one busy plugin take most of the host's instance slots.
    pub workers: usize,
    pub health: Arc<Health>,
    /// Where synced watch caches are published for cached reads (reconciles and
    /// admission reviews of the same plugin).
    pub caches: Arc<Caches>,
    /// The shortest `requeue-after` honoured; shorter answers (0 included) wait this
    /// long. Why 1 s by default: a plugin answering 0 would otherwise reconcile at full
    /// speed, a core and a stream of apiserver requests per object; once a second still
    /// serves a plugin that polls something outside the cluster, and anything needing
    /// to react faster should watch it instead.
    pub min_requeue: Duration,
    /// The largest share of wall time, in percent, that one object's reconciles that
    /// change nothing else may take while events about it keep coming (see
    /// [`super::pace`]); 100: no bound.
    pub reconcile_share: u8,
    /// Where controllers run: the reconcile threads ([`super::Apart`]), ranked below
    /// the threads that serve webhooks.
    pub reconciles: tokio::runtime::Handle,
}

type Cache = crate::gateway::ObjectCache;

/// One controller, until `ending` asks it to drain or abort (see [`super::Running`]).
pub(super) async fn run(
    name: String,
    handle: Handle,
    shared: Arc<Shared>,
    mut ending: watch::Receiver<super::Ending>,
    resync: Arc<tokio::sync::Notify>,
) {
    let (manifest, permissions, identity) = {
        let p = handle.load();
        (p.manifest.clone(), p.permissions.clone(), p.identity.clone())
    };
    shared.health.controller(&name, false);
    let (kinds, streams) = loop {
        // Watches run as the plugin, so its caches hold only what it may read.
        let watched = tokio::select! {
            w = async {
                match shared.kube.for_identity(identity.as_ref()) {
                    Ok(kube) => watches::streams(&kube, &manifest, &permissions).await,
                    Err(e) => Err(e),
                }
            } => w,
            _ = ending.changed() => return,
        };
        match watched {
            Ok(s) => break s,
            Err(e) => {
                tracing::warn!(plugin = %name, "cannot watch yet, retrying in 5s: {e}");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(5)) => continue,
                    _ = ending.changed() => return,
                }
            }
        }
    };
    tracing::info!(plugin = %name, primary = %manifest.primary, "controller started");

    let queue: Arc<Queue<ObjectRef>> = Queue::new();
    // One cache per watched kind; the primaries' is also where `current` comes from.
    let objects: HashMap<Role, Cache> = kinds.iter().map(|w| (w.role, Cache::default())).collect();
    let cache = objects[&Role::Primary].clone();
    let published = Arc::new(PluginCache::new(
        identity.clone(),
        kinds.into_iter().map(|w| KindCache::new(w.kind, w.namespaces, objects[&w.role].clone())).collect(),
    ));
    // Withdrawn however this controller ends, including being dropped when deposed.
    let _withdraw = Withdraw(shared.caches.clone(), name.clone(), published.clone());
    let backoff = Arc::new(Mutex::new(Backoff::default()));
    // Only for a plugin that asked: its own writes to a primary do not queue it again.
    let own = manifest.skip_own_writes.then(|| Arc::new(OwnWrites::default()));
    // A JoinSet, so that aborting (or dropping) this task aborts the workers too. They
    // start once every watch has synced, as controller-runtime's do: a reconcile then
    // reads from complete caches, never from the apiserver, and never takes an object
    // not listed yet for one that does not exist. Keys queued meanwhile wait.
    let mut workers = tokio::task::JoinSet::new();
    let spawn_workers = |workers: &mut tokio::task::JoinSet<()>| {
        for _ in 0..shared.workers.max(1) {
            let w = super::worker::Worker {
                handle: handle.clone(),
                shared: shared.clone(),
                queue: queue.clone(),
                cache: cache.clone(),
                backoff: backoff.clone(),
                own: own.clone(),
            };
            workers.spawn(w.run());
        }
    };

    let total_streams = streams.len();
    let mut events = futures::stream::select_all(streams);
    let mut relisting: HashMap<Source, HashSet<ObjectRef>> = HashMap::new();
    let mut selecting = Selecting::default();
    let mut synced: HashSet<Source> = HashSet::new();
    loop {
        tokio::select! {
            _ = ending.changed() => break,
            _ = resync.notified() => {
                let keys: Vec<ObjectRef> = cache.lock().unwrap().keys().cloned().collect();
                tracing::info!(plugin = %name, objects = keys.len(), "new version: reconciling every object again");
                keys.into_iter().for_each(|k| queue.add(k));
            }
            item = events.next() => match item {
                None => break,
                Some((source, Err(e))) => {
                    if refused(&e) {
                        // Its RBAC no longer allows the watch (revoked, or narrowed by the
                        // admin): its cache must not answer for it any more.
                        tracing::warn!(plugin = %name, "watch refused by the apiserver, withdrawing its cache: {e}");
                        shared.caches.withdraw(&name, &published);
                        synced.remove(&source);
                        shared.health.controller(&name, false);
                    } else {
                        tracing::debug!(plugin = %name, "watch error (retrying): {e}");
                    }
                }
                Some((source, Ok(ev))) => {
                    let done = matches!(ev, watcher::Event::InitDone);
                    let (queue, own) = (&*queue, own.as_deref());
                    on_event(&manifest, source.clone(), ev, &objects, (queue, own), &mut relisting, &mut selecting);
                    if done && synced.insert(source) && synced.len() == total_streams {
                        shared.health.controller(&name, true);
                        shared.caches.publish(&name, published.clone());
                        if workers.is_empty() {
                            spawn_workers(&mut workers);
                        }
                        tracing::info!(plugin = %name, "watches synced");
                    }
                }
            }
        }
    }
    queue.close();
    let drained = tokio::select! {
        _ = async { while workers.join_next().await.is_some() {} } => true,
        _ = ending.wait_for(|e| *e == super::Ending::Abort) => false,
    };
    if !drained {
        // Aborts every worker and waits until each has ended: a reconcile cancelled
        // at its next await (a host call, or the epoch yield of running wasm).
        workers.shutdown().await;
    }
    shared.health.controller_stopped(&name);
    if drained {
        tracing::info!(plugin = %name, "controller stopped");
    } else {
        tracing::info!(plugin = %name, "controller aborted: in-flight reconciles cancelled");
    }
}

/// A watch error that is the apiserver refusing the plugin's identity.
fn refused(e: &watcher::Error) -> bool {
    use watcher::Error::*;
    let api = match e {
        InitialListFailed(kube::Error::Api(s))
        | WatchStartFailed(kube::Error::Api(s))
        | WatchFailed(kube::Error::Api(s)) => Some(s.code),
        WatchError(s) => Some(s.code),
        _ => None,
    };
    matches!(api, Some(401 | 403))
}

struct Withdraw(Arc<Caches>, String, Arc<PluginCache>);

impl Drop for Withdraw {
    fn drop(&mut self) {
        self.0.withdraw(&self.1, &self.2);
    }
}

fn on_event(
    m: &wasmop_sdk::Manifest,
    source: Source,
    ev: watcher::Event<Seen>,
    objects: &HashMap<Role, Cache>,
    (queue, own): (&Queue<ObjectRef>, Option<&OwnWrites>),
    relisting: &mut HashMap<Source, HashSet<ObjectRef>>,
    selecting: &mut Selecting,
) {
    use watcher::Event::*;
    let role = source.0;
    let cache = &objects[&Role::Primary];
    let (obj, deleted) = match ev {
        Init => {
            relisting.insert(source, HashSet::new());
            return;
        }
        InitDone => {
            let Some(seen) = relisting.remove(&source) else { return };
            let in_scope = |k: &ObjectRef| source.1.is_none() || k.namespace == source.1;
            // Objects gone while the watch was down leave this kind's cache.
            let gone: Vec<(ObjectRef, Arc<Cached>)> = {
                let mut c = objects[&role].lock().unwrap();
                let gone: Vec<ObjectRef> = c.keys().filter(|k| in_scope(k) && !seen.contains(*k)).cloned().collect();
                gone.into_iter().filter_map(|k| c.remove(&k).map(|o| (k, o))).collect()
            };
            match role {
                // Primaries gone meanwhile: reconcile them once as deleted.
                Role::Primary => gone.into_iter().for_each(|(k, _)| queue.add(k)),
                // Objects gone meanwhile were news to the primaries that selected them.
                Role::Watched(i) => {
                    if let Mapping::Selector(path) = &m.watches[i].mapping {
                        for (k, last) in gone {
                            selecting.changed(m, cache, queue, path, &k, (Some(&last.labels), None));
                        }
                    }
                }
                Role::Owned(_) => {}
            }
            return;
        }
        InitApply(o) | Apply(o) => (o, false),
        Delete(o) => (o, true),
    };
    let Seen { oref, owners, object } = obj;
    if let Some(seen) = relisting.get_mut(&source) {
        seen.insert(oref.clone());
    }
    // The cache first: a reconcile this event queues reads the object as of the event.
    let before = if deleted {
        objects[&role].lock().unwrap().remove(&oref)
    } else {
        objects[&role].lock().unwrap().insert(oref.clone(), object.clone())
    };
    match role {
        Role::Primary => {
            if own.is_none_or(|o| o.is_news(&oref, object.resource_version.as_deref(), deleted)) {
                queue.add(oref);
            } else {
                // The state the plugin's own write produced, which its reconcile had in hand.
                tracing::debug!(plugin = %m.name, object = %oref, "own write echoed: not reconciled again");
            }
        }
        Role::Owned(_) => {
            let owner = owners.iter().find(|r| {
                r.controller == Some(true)
                    && r.kind == m.primary.kind
                    && same_group(&r.api_version, &m.primary.api_version)
            });
            if let Some(owner) = owner {
                let ns = if m.namespaced { oref.namespace.as_deref() } else { None };
                queue.add(ObjectRef::new(&m.primary, ns, &owner.name));
            }
        }
        Role::Watched(i) => {
            let ns = if m.namespaced { oref.namespace.clone() } else { None };
            match &m.watches[i].mapping {
                Mapping::AllPrimaries => {
                    let keys: Vec<ObjectRef> =
                        cache.lock().unwrap().keys().filter(|k| !m.namespaced || k.namespace == ns).cloned().collect();
                    keys.into_iter().for_each(|k| queue.add(k));
                }
                Mapping::Label(label) => {
                    if let Some(name) = object.labels.get(label) {
                        queue.add(ObjectRef::new(&m.primary, ns.as_deref(), name));
                    }
                }
                Mapping::SameName => queue.add(ObjectRef::new(&m.primary, ns.as_deref(), &oref.name)),
                // A deleted object's last labels are its `after`: the sets that selected
                // it as it was are concerned by its going.
                Mapping::Selector(path) => {
                    let before = before.as_ref().map(|b| &b.labels);
                    selecting.changed(m, cache, queue, path, &oref, (before, Some(&object.labels)));
                }
            }
        }
    }
}

fn same_group(a: &str, b: &str) -> bool {
    let g = |v: &str| v.rsplit_once('/').map(|(g, _)| g.to_owned()).unwrap_or_default();
    g(a) == g(b)
}
