//! Controllers: one per loaded plugin, started, re-watched and stopped as the registry
//! reports plugins loaded, replaced and removed. See [`controller`] for one plugin's
//! loop and [`Manager`] for their lifecycle.

mod backoff;
pub mod controller;
mod queue;
mod watches;

pub use backoff::Backoff;
pub use controller::Shared;
pub use queue::Queue;

use crate::registry::{Registry, RegistryEvent};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

/// Keeps one controller per loaded plugin.
///
/// A replaced plugin whose watches are unchanged keeps its controller, which
/// reconciles every object again with the new version (reconciles already running
/// finish on the old one); one whose watches changed gets a new controller after the
/// old one drained. A removed plugin's controller is stopped.
pub struct Manager {
    shared: Arc<Shared>,
    running: HashMap<String, controller::Running>,
}

impl Manager {
    pub fn new(shared: Arc<Shared>) -> Self {
        Manager { shared, running: HashMap::new() }
    }

    /// Runs until `shutdown` resolves, then stops every controller gracefully.
    pub async fn run(mut self, registry: Arc<Registry>, shutdown: impl std::future::Future<Output = ()>) {
        let mut events = registry.subscribe();
        // Plugins loaded before we subscribed.
        for (name, handle) in registry.handles() {
            self.running.insert(name.clone(), controller::spawn(name, handle, self.shared.clone()));
        }
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                ev = events.recv() => match ev {
                    Ok(RegistryEvent::Upserted { name, handle, watches_changed }) => {
                        match self.running.get(&name) {
                            Some(c) if !watches_changed => c.resync(),
                            _ => {
                                if let Some(old) = self.running.remove(&name) {
                                    old.stop().await;
                                }
                                self.running.insert(name.clone(), controller::spawn(name, handle, self.shared.clone()));
                            }
                        }
                    }
                    Ok(RegistryEvent::Removed { name }) => {
                        if let Some(old) = self.running.remove(&name) {
                            old.stop().await;
                        }
                    }
                    Err(RecvError::Lagged(n)) => tracing::warn!("controller manager missed {n} registry events"),
                    Err(RecvError::Closed) => break,
                }
            }
        }
        for (_, c) in self.running.drain() {
            c.stop().await;
        }
    }
}
