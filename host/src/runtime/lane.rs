//! The long lane: while short calls are busy, one long call at a time computes its
//! next tick, and the turns go round the plugins that wait, not to whichever call
//! came first.
//!
//! Why: first come, first served gave a plugin one turn per call it had waiting. A
//! plugin whose fifty concurrent reviews keep faulting has each of them wait out its
//! pace holding the lane (`cpu`: ~90 ms a turn), so anything of another plugin that
//! went long waited behind all fifty, seconds on end: a healthy webhook's review held
//! for 0.7–5.5 s while an attacker flooded (BENCHMARKS.md, issue 18). One plugin's
//! flood must cost that plugin, not its neighbours.
//!
//! Flow: [`Lane::turn`] returns at once when the lane is free; otherwise the call joins
//! its plugin's line, and a plugin with a line joins the round. When a [`Turn`] ends,
//! the lane goes to the first call in the line of the next plugin round, and that
//! plugin goes to the back of the round if it has more calls waiting.
//!
//! Guarantees: between two turns of a waiting plugin, every other plugin waiting gets
//! at most one. A waiter that gives up (its deadline passed, its request went) is
//! skipped, and a turn handed to one that gave up at that moment is handed on.
//! Caveats: a plugin's own calls still wait in its line in order, so a plugin that
//! floods waits behind itself.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// See the module docs.
#[derive(Default)]
pub(super) struct Lane {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    busy: bool,
    /// The plugins with calls waiting, in the order their next turn comes; a plugin is
    /// here exactly when its line is not empty.
    round: VecDeque<Arc<str>>,
    lines: HashMap<Arc<str>, VecDeque<oneshot::Sender<Turn>>>,
}

/// The lane, held; the next waiter's when dropped.
pub(super) struct Turn {
    lane: Option<Arc<Lane>>,
}

impl Lane {
    /// The lane for a call of `plugin`, once it is its turn. Cancel-safe.
    pub(super) async fn turn(self: &Arc<Self>, plugin: &Arc<str>) -> Turn {
        let waiting = {
            let mut s = self.state.lock().unwrap();
            if !s.busy {
                s.busy = true;
                return Turn { lane: Some(self.clone()) };
            }
            let (give, wait) = oneshot::channel();
            let line = s.lines.entry(plugin.clone()).or_default();
            line.push_back(give);
            if line.len() == 1 {
                s.round.push_back(plugin.clone());
            }
            wait
        };
        // A sender is dropped only once it has handed a turn over, so this cannot fail
        // while the lane lives; if it did, pacing is all that is lost.
        waiting.await.unwrap_or(Turn { lane: None })
    }

    /// Hands the lane to the next waiter round, or frees it.
    fn hand_on(self: &Arc<Self>) {
        loop {
            let give = {
                let mut s = self.state.lock().unwrap();
                let Some(plugin) = s.round.pop_front() else {
                    s.busy = false;
                    return;
                };
                let line = s.lines.get_mut(&plugin).expect("a plugin in the round has a line");
                let give = line.pop_front().expect("a plugin in the round has a call waiting");
                if line.is_empty() {
                    s.lines.remove(&plugin);
                } else {
                    s.round.push_back(plugin);
                }
                give
            };
            // Sent outside the lock: a turn that comes back (its waiter gave up) is
            // handed on here, not dropped, which would hand it on from inside.
            match give.send(Turn { lane: Some(self.clone()) }) {
                Ok(()) => return,
                Err(mut unwanted) => unwanted.lane = None,
            }
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(lane) = self.lane.take() {
            lane.hand_on();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Turns taken by `calls` (plugin names) queued in that order behind a held lane.
    async fn order_of(calls: &[&str]) -> Vec<String> {
        let lane = Arc::new(Lane::default());
        let held = lane.turn(&"first".into()).await;
        let served = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for &p in calls {
            let (lane, served, p) = (lane.clone(), served.clone(), p.to_owned());
            tasks.push(tokio::spawn(async move {
                let _turn = lane.turn(&p.as_str().into()).await;
                served.lock().unwrap().push(p);
            }));
            // Queued in this order.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        Arc::try_unwrap(served).unwrap().into_inner().unwrap()
    }

    #[tokio::test]
    async fn turns_go_round_the_plugins_not_to_whoever_came_first() {
        let calls = ["flood", "flood", "flood", "flood", "healthy", "other", "healthy"];
        assert_eq!(order_of(&calls).await, ["flood", "healthy", "other", "flood", "healthy", "flood", "flood"]);
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_is_skipped_and_the_lane_frees_when_nobody_waits() {
        let lane = Arc::new(Lane::default());
        let held = lane.turn(&"a".into()).await;
        let gave_up = {
            let lane = lane.clone();
            tokio::spawn(async move { lane.turn(&"b".into()).await })
        };
        let next = {
            let lane = lane.clone();
            tokio::spawn(async move { drop(lane.turn(&"c".into()).await) })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        gave_up.abort();
        let _ = gave_up.await;
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), next).await.expect("c gets the turn b gave up").unwrap();
        // Free again: the next call takes it at once.
        let t = tokio::time::timeout(Duration::from_secs(1), lane.turn(&"d".into())).await;
        assert!(t.is_ok(), "the lane is free once nobody waits");
        assert!(!lane.state.lock().unwrap().lines.contains_key("b"), "no line is left behind");
    }
}
