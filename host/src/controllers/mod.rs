//! Controllers: one per loaded plugin, started, re-watched and stopped as the registry
//! reports plugins loaded, replaced and removed. See [`controller`] for one plugin's
//! loop and [`Manager`] for their lifecycle.

pub mod apart;
mod backoff;
pub mod controller;
mod pace;
mod queue;
mod selector;
mod watches;
mod worker;

pub use apart::{Apart, RECONCILE_PRIORITY};
pub use backoff::Backoff;
pub use controller::Shared;
pub use queue::Queue;

use crate::registry::{Handle, Registry, RegistryEvent};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::{Notify, watch};

/// How a controller is asked to end: [`Running::stop`] drains, [`Running::abort`] cancels.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ending {
    Running,
    Drain,
    Abort,
}

/// A running controller; [`Running::stop`] ends it gracefully, [`Running::abort`] at
/// once, and dropping it aborts it (nothing it started is ever left detached).
pub struct Running {
    ending: watch::Sender<Ending>,
    resync: Arc<Notify>,
    /// None once the controller has ended.
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    pub fn spawn(name: String, handle: Handle, shared: Arc<Shared>) -> Running {
        let (ending, ends) = watch::channel(Ending::Running);
        let resync = Arc::new(Notify::new());
        // On the reconcile threads (`apart`), below the webhooks' rank.
        let task = shared.reconciles.spawn(controller::run(name, handle, shared.clone(), ends, resync.clone()));
        Running { ending, resync, task: Some(task) }
    }

    /// Reconciles every primary again, for example because a new plugin version (new
    /// code or new settings) should apply to objects that did not change.
    pub fn resync(&self) {
        self.resync.notify_one();
    }

    /// Stops taking work and returns once in-flight reconciles have finished.
    pub async fn stop(&mut self) {
        self.ending.send_if_modified(|e| {
            let drain = *e == Ending::Running;
            if drain {
                *e = Ending::Drain;
            }
            drain
        });
        self.ended().await;
    }

    /// Cancels in-flight reconciles and returns once the controller and every worker
    /// have ended (also when a [`Running::stop`] was under way).
    pub async fn abort(&mut self) {
        let _ = self.ending.send(Ending::Abort);
        self.ended().await;
    }

    async fn ended(&mut self) {
        if let Some(task) = self.task.as_mut() {
            let _ = task.await;
            self.task = None;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Not awaited here; its workers are aborted as the task's JoinSet is dropped.
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Keeps one controller per loaded plugin.
///
/// A replaced plugin whose watches are unchanged keeps its controller, which
/// reconciles every object again with the new version (reconciles already running
/// finish on the old one); one whose watches changed gets a new controller after the
/// old one drained. A removed plugin's controller is stopped. When registry events
/// were missed (the channel lagged), every controller is restarted from what the
/// registry holds: rare, and the one answer that is right whatever was missed.
pub struct Manager {
    shared: Arc<Shared>,
    running: HashMap<String, Running>,
}

impl Manager {
    pub fn new(shared: Arc<Shared>) -> Self {
        Manager { shared, running: HashMap::new() }
    }

    /// Runs until `shutdown` resolves, then stops every controller gracefully. When
    /// `deposed` resolves first (also during that drain), aborts every controller
    /// instead and returns only once none of their reconciles is running.
    pub async fn run(
        mut self,
        registry: Arc<Registry>,
        shutdown: impl Future<Output = ()>,
        deposed: impl Future<Output = ()>,
    ) {
        let aborted = tokio::select! {
            _ = self.lead(&registry, shutdown) => false,
            _ = deposed => true,
        };
        if aborted {
            futures::future::join_all(self.running.values_mut().map(Running::abort)).await;
            self.running.clear();
        }
    }

    async fn lead(&mut self, registry: &Registry, shutdown: impl Future<Output = ()>) {
        let mut events = registry.subscribe();
        self.start_loaded(registry);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                ev = events.recv() => match ev {
                    Ok(RegistryEvent::Upserted { name, handle, watches_changed }) => {
                        match self.running.get(&name) {
                            Some(c) if !watches_changed => c.resync(),
                            _ => {
                                self.stop(&name).await;
                                self.running.insert(name.clone(), Running::spawn(name, handle, self.shared.clone()));
                            }
                        }
                    }
                    Ok(RegistryEvent::Removed { name }) => self.stop(&name).await,
                    Err(RecvError::Lagged(n)) => {
                        tracing::warn!("controller manager missed {n} registry events: restarting every controller");
                        self.stop_all().await;
                        self.resubscribe(registry, &mut events);
                    }
                    Err(RecvError::Closed) => break,
                }
            }
        }
        self.stop_all().await;
    }

    /// Events from now on, and a controller for every plugin loaded now. Subscribing
    /// first: a change between the two is then seen twice, never missed (an older
    /// event still queued would undo a newer state).
    fn resubscribe(&mut self, registry: &Registry, events: &mut broadcast::Receiver<RegistryEvent>) {
        *events = registry.subscribe();
        self.start_loaded(registry);
    }

    fn start_loaded(&mut self, registry: &Registry) {
        for (name, handle) in registry.handles() {
            if !self.running.contains_key(&name) {
                self.running.insert(name.clone(), Running::spawn(name, handle, self.shared.clone()));
            }
        }
    }

    /// Stops `name`'s controller. It stays in `running` until it has ended, so an abort
    /// meanwhile reaches it.
    async fn stop(&mut self, name: &str) {
        if let Some(c) = self.running.get_mut(name) {
            c.stop().await;
        }
        self.running.remove(name);
    }

    async fn stop_all(&mut self) {
        futures::future::join_all(self.running.values_mut().map(Running::stop)).await;
        self.running.clear();
    }
}
