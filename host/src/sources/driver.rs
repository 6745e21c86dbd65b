//! Feeds source events into the registry and reports what it refuses.
//!
//! Flow: each plugin name has a lane of its own, a task that applies that name's events
//! in order. Lanes run side by side, so a plugin that is slow to describe itself, or
//! whose identity check waits on the apiserver, holds up no other plugin's load or
//! removal (compiles still take turns: see `registry::compiling`).
//!
//! Guarantees: a name's events apply in the order the sources sent them (so a name
//! moving from one ConfigMap to another is removed before it is claimed again), except
//! that a lane keeps only the newest event not yet started from each place the name
//! comes from (each event is the plugin's whole state there, so the newest says all),
//! and that a lane applies a new version at most once per reload interval, which
//! starts at [`MIN_RELOAD_INTERVAL`] and doubles, up to [`MAX_RELOAD_INTERVAL`], each
//! time a version arrives within twice the interval of the last load: a ConfigMap
//! rewritten ten times a second for a minute costs nine loads, not six hundred
//! (`scripts/bench-abuse.py`), and the newest version still wins. Why twice: a loop
//! slower than the interval is still a loop (kubectl on a busy machine rewrites every
//! 1.2 s; with a window of one interval each write was a load). The interval is back
//! at its least once the plugin has been quiet for twice it (the lane ends).
//! A source's `Synced` counts once every lane has applied what was sent before it.

use super::{SourceEvent, bytes};
use crate::gateway::{Backend, EventType, Identities};
use crate::health::Health;
use crate::metrics::{METRICS, labels};
use crate::registry::{MAX_RELOAD_INTERVAL, MIN_RELOAD_INTERVAL, Place, PluginSpec, Registry};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;
use wasmop_sdk::ObjectRef;

/// How often a version waiting for its ServiceAccount is tried again: the plugin starts
/// soon after a cluster admin applies its RBAC, without anyone touching its ConfigMap.
const IDENTITY_RETRY: Duration = Duration::from_secs(10);
/// The longest one identity check may take.
const IDENTITY_CHECK: Duration = Duration::from_secs(10);

/// Applies every event to `registry` until the sources close. A rejected version is
/// logged and, when it came from a cluster object, reported as a Warning Event
/// `PluginRejected` on that object; the previous version keeps serving either way.
///
/// With [`Identities::ServiceAccounts`], a version is admitted only once the host may
/// act as its ServiceAccount (see [`crate::gateway::verify_identity`]); until then it
/// waits, reported once and tried again every [`IDENTITY_RETRY`]. With
/// [`Identities::Host`], plugins act as the host.
pub async fn drive(
    registry: Arc<Registry>,
    mut rx: mpsc::Receiver<SourceEvent>,
    events: Option<Arc<dyn Backend>>,
    identities: Identities,
    health: Arc<Health>,
) {
    let ctx = Arc::new(Ctx { registry, events, identities });
    let mut lanes: HashMap<String, Arc<Lane>> = HashMap::new();
    while let Some(ev) = rx.recv().await {
        let (name, from) = match &ev {
            SourceEvent::Synced => {
                lanes.retain(|_, l| !l.slot.lock().unwrap().closed);
                let barriers: Vec<_> = lanes.values().map(|l| l.barrier()).collect();
                let health = health.clone();
                tokio::spawn(async move {
                    for b in barriers {
                        let _ = b.await;
                    }
                    health.source_synced();
                });
                continue;
            }
            SourceEvent::Upsert(spec) | SourceEvent::Reject { spec, .. } => {
                (spec.name.clone(), Origin::of(spec.place()))
            }
            SourceEvent::Remove { name, origin, origin_object } => {
                (name.clone(), Origin::of(Place::of(origin, origin_object.as_ref())))
            }
        };
        let mut ev = Some(ev);
        while let Some(e) = ev.take() {
            let lane = lanes.entry(name.clone()).or_insert_with(|| Lane::spawn(ctx.clone()));
            if let Some(e) = lane.put(from.clone(), e) {
                // That lane had just finished; a new one takes the event.
                lanes.remove(&name);
                ev = Some(e);
            }
        }
    }
}

/// What every lane shares.
struct Ctx {
    registry: Arc<Registry>,
    events: Option<Arc<dyn Backend>>,
    identities: Identities,
}

/// Where an event comes from (an owned [`Place`]): a lane keeps one event per place.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Origin(Option<ObjectRef>, String);

impl Origin {
    fn of(place: Place<'_>) -> Self {
        match place {
            Place::Object(o) => Origin(Some(o.clone()), String::new()),
            Place::Dir(d) => Origin(None, d.to_owned()),
        }
    }
}

/// One name's lane: the events not yet started (the newest from each place), and who
/// waits for them to drain.
struct Lane {
    slot: Mutex<Slot>,
    wake: Notify,
}

#[derive(Default)]
struct Slot {
    /// With when the first of them arrived (a newer event from the same place keeps
    /// the older one's time: the place has had news pending since then).
    next: std::collections::VecDeque<(Origin, Instant, SourceEvent)>,
    drained: Vec<oneshot::Sender<()>>,
    /// An event is being applied.
    busy: bool,
    /// The lane's task has ended; events go to a new lane.
    closed: bool,
}

impl Lane {
    fn spawn(ctx: Arc<Ctx>) -> Arc<Lane> {
        let lane = Arc::new(Lane { slot: Default::default(), wake: Notify::new() });
        tokio::spawn(lane.clone().run(ctx));
        lane
    }

    /// Hands `ev` to the lane, replacing an event from the same place it has not
    /// started; gives `ev` back when the lane has ended.
    fn put(&self, from: Origin, ev: SourceEvent) -> Option<SourceEvent> {
        let mut s = self.slot.lock().unwrap();
        if s.closed {
            return Some(ev);
        }
        match s.next.iter_mut().find(|(f, _, _)| *f == from) {
            Some(older) => {
                METRICS.plugin_versions_superseded.inc();
                older.2 = ev;
            }
            None => s.next.push_back((from, Instant::now(), ev)),
        }
        drop(s);
        self.wake.notify_one();
        None
    }

    /// Resolves once the lane has applied every event handed to it so far.
    fn barrier(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut s = self.slot.lock().unwrap();
        if s.closed || (!s.busy && s.next.is_empty()) {
            let _ = tx.send(());
        } else {
            s.drained.push(tx);
        }
        rx
    }

    async fn run(self: Arc<Self>, ctx: Arc<Ctx>) {
        // Closed however the task ends (a panic included), so no event is put into a
        // lane nobody runs.
        let _closing = Closing(self.clone());
        // A version waiting for its identity, when a version was last applied, and the
        // reload interval.
        let mut waiting: Option<(Origin, Box<PluginSpec>)> = None;
        let mut applied: Option<Instant> = None;
        let mut interval = MIN_RELOAD_INTERVAL;
        loop {
            let wake = self.wake.notified();
            let ev = {
                let mut s = self.slot.lock().unwrap();
                s.busy = !s.next.is_empty();
                match s.next.pop_front() {
                    Some(ev) => Some(ev),
                    None => {
                        s.drained.drain(..).for_each(|tx| {
                            let _ = tx.send(());
                        });
                        if waiting.is_none() && applied.is_none_or(|t| t.elapsed() >= 2 * interval) {
                            // Nothing left to do: events from now on go to a new lane.
                            s.closed = true;
                            return;
                        }
                        None
                    }
                }
            };
            let Some((from, arrived, ev)) = ev else {
                tokio::select! {
                    _ = wake => {}
                    _ = tokio::time::sleep(IDENTITY_RETRY), if waiting.is_some() => {
                        let (from, spec) = waiting.take().expect("a waiting version");
                        match admit(&ctx, &spec, interval).await {
                            Ok(()) => applied = Some(Instant::now()),
                            Err(("identity", _)) => waiting = Some((from, spec)),
                            Err((kind, reason)) => report(&ctx, &spec, kind, &reason).await,
                        }
                    }
                    // Long enough for (half) the lane's quiet to pass: it may end.
                    _ = tokio::time::sleep(interval), if waiting.is_none() => {}
                }
                continue;
            };
            // A newer event from the place of a version waiting for its identity
            // replaces that version.
            if waiting.as_ref().is_some_and(|(f, _)| *f == from) {
                waiting = None;
            }
            match ev {
                SourceEvent::Upsert(spec) => {
                    // Versions in a loop: wait out the interval (a newer one arriving
                    // meanwhile replaces this one when it is put back).
                    if let Some(due) = applied.map(|t| t + interval)
                        && due > Instant::now()
                    {
                        tokio::time::sleep_until(due).await;
                        let mut s = self.slot.lock().unwrap();
                        match s.next.iter_mut().find(|(f, _, _)| *f == from) {
                            Some(newer) => {
                                METRICS.plugin_versions_superseded.inc();
                                newer.1 = newer.1.min(arrived);
                            }
                            None => s.next.push_front((from, arrived, SourceEvent::Upsert(spec))),
                        }
                        continue;
                    }
                    // News that came within twice the interval of the last load:
                    // versions in a loop (however long that load took), so the interval
                    // doubles.
                    if applied.is_some_and(|t| arrived < t + 2 * interval) {
                        interval = (interval * 2).min(MAX_RELOAD_INTERVAL);
                    }
                    applied = Some(Instant::now());
                    if let Err((kind, reason)) = admit(&ctx, &spec, interval).await {
                        report(&ctx, &spec, kind, &reason).await;
                        if kind == "identity" {
                            waiting = Some((from, spec));
                        }
                    }
                }
                SourceEvent::Reject { spec, kind, reason } => report(&ctx, &spec, kind, &reason).await,
                SourceEvent::Remove { name, origin, origin_object } => {
                    ctx.registry.remove(&name, &origin, origin_object.as_ref());
                }
                SourceEvent::Synced => {}
            }
        }
    }
}

/// Closes its lane when the lane's task ends, and lets every barrier through.
struct Closing(Arc<Lane>);

impl Drop for Closing {
    fn drop(&mut self) {
        let mut s = self.0.slot.lock().unwrap_or_else(|e| e.into_inner());
        s.closed = true;
        s.drained.drain(..).for_each(|tx| {
            let _ = tx.send(());
        });
    }
}

/// Checks the version's identity, decodes its bytes and applies it (the next version
/// may come `next_after` from now): Err(kind, reason).
async fn admit(ctx: &Ctx, spec: &PluginSpec, next_after: Duration) -> Result<(), (&'static str, String)> {
    let mut spec = spec.clone();
    match (&ctx.identities, &spec.identity) {
        (Identities::Host, _) => spec.identity = None,
        (Identities::ServiceAccounts(kube), Some(id)) => {
            let check = crate::gateway::verify_identity(kube.client(), &spec.name, id);
            match tokio::time::timeout(IDENTITY_CHECK, check).await {
                Ok(r) => r.map_err(|e| ("identity", e))?,
                Err(_) => return Err(("identity", format!("the apiserver did not answer within {IDENTITY_CHECK:?}"))),
            }
        }
        (Identities::ServiceAccounts(_), None) => {
            return Err(("identity", "the plugin has no ServiceAccount to act as".to_owned()));
        }
    }
    spec.bytes = bytes::decode(&spec.bytes).map_err(|e| ("decode", e.to_string()))?.into();
    ctx.registry.apply(spec, next_after).await.map(|_| ()).map_err(|e| (e.kind(), e.to_string()))
}

async fn report(ctx: &Ctx, spec: &PluginSpec, kind: &str, reason: &str) {
    let serving = ctx.registry.get(&spec.name).map(|p| p.sha256.clone());
    let previous = match &serving {
        Some(sha) => format!("the previous version (sha256 {}) keeps serving", &sha[..12]),
        None => "no version of it is serving".to_owned(),
    };
    METRICS.plugin_rejections.get_or_create(&labels(&[("plugin", &spec.name), ("reason", kind)])).inc();
    tracing::error!(plugin = %spec.name, origin = %spec.origin, reason = kind, "plugin version rejected: {reason}; {previous}");
    if let (Some(events), Some(obj)) = (&ctx.events, &spec.origin_object) {
        let msg = format!(
            "{}: rejected ({kind}): {reason}; {previous}",
            spec.origin.rsplit('#').next().unwrap_or(&spec.name)
        );
        events.record_event("host", obj, None, EventType::Warning, "PluginRejected", &msg).await;
    }
}
