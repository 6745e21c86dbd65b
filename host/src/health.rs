//! Readiness: the host is ready when every plugin source finished its first pass and
//! every loaded plugin's controller has listed all it watches. A leaf module, like
//! [`crate::metrics`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Default)]
pub struct Health {
    sources_pending: AtomicUsize,
    controllers: Mutex<HashMap<String, bool>>,
}

impl Health {
    /// `sources` sources must report their first pass before the host is ready.
    pub fn new(sources: usize) -> Self {
        Health { sources_pending: AtomicUsize::new(sources), controllers: Mutex::default() }
    }

    pub fn source_synced(&self) {
        let _ = self.sources_pending.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    /// A controller started (not yet synced) or finished its initial lists.
    pub fn controller(&self, plugin: &str, synced: bool) {
        self.controllers.lock().unwrap().insert(plugin.to_owned(), synced);
    }

    pub fn controller_stopped(&self, plugin: &str) {
        self.controllers.lock().unwrap().remove(plugin);
    }

    /// Ok, or what is still missing.
    pub fn ready(&self) -> Result<(), String> {
        let pending = self.sources_pending.load(Ordering::SeqCst);
        if pending > 0 {
            return Err(format!("{pending} plugin source(s) still on their first pass"));
        }
        let waiting: Vec<String> =
            self.controllers.lock().unwrap().iter().filter(|(_, s)| !**s).map(|(p, _)| p.clone()).collect();
        if waiting.is_empty() { Ok(()) } else { Err(format!("watches not synced for: {}", waiting.join(", "))) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_after_sources_and_controllers() {
        let h = Health::new(1);
        assert!(h.ready().is_err());
        h.source_synced();
        assert!(h.ready().is_ok());
        h.controller("a", false);
        assert!(h.ready().unwrap_err().contains("a"));
        h.controller("a", true);
        assert!(h.ready().is_ok());
        h.controller("b", false);
        h.controller_stopped("b");
        assert!(h.ready().is_ok());
    }
}
