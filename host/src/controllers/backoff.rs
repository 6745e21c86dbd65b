//! Per-object exponential backoff for failed reconciles.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// Delays grow `base × 2^failures` up to `cap`, with ±10 % jitter so that objects that
/// failed together do not retry in lockstep; a success resets the object.
///
/// Why 200 ms and 5 min: a conflict clears within one retry; a missing CRD or RBAC
/// rule needs a human, and five minutes keeps the log readable while they come.
pub struct Backoff<K> {
    base: Duration,
    cap: Duration,
    failures: HashMap<K, u32>,
}

impl<K: Eq + Hash + Clone> Backoff<K> {
    pub fn new(base: Duration, cap: Duration) -> Self {
        Backoff { base, cap, failures: HashMap::new() }
    }

    /// Records a failure of `key` and returns how long to wait before retrying it.
    pub fn fail(&mut self, key: &K) -> Duration {
        let n = self.failures.entry(key.clone()).or_insert(0);
        let exp = (*n).min(20);
        *n += 1;
        let d = self.base.saturating_mul(1u32 << exp).min(self.cap);
        let jitter = 0.9 + rand::random::<f64>() * 0.2;
        d.mul_f64(jitter).min(self.cap)
    }

    /// How many times in a row `key` failed.
    pub fn failures(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }

    pub fn reset(&mut self, key: &K) {
        self.failures.remove(key);
    }
}

impl<K: Eq + Hash + Clone> Default for Backoff<K> {
    fn default() -> Self {
        Backoff::new(Duration::from_millis(200), Duration::from_secs(300))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_caps_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let d: Vec<Duration> = (0..6).map(|_| b.fail(&"k")).collect();
        for (i, want) in [100u64, 200, 400, 800].iter().enumerate() {
            let ms = d[i].as_millis() as u64;
            assert!(ms >= want * 9 / 10 && ms <= want * 11 / 10, "step {i}: {ms}ms");
        }
        assert!(d[4] <= Duration::from_secs(1) && d[5] <= Duration::from_secs(1));
        assert_eq!(b.failures(&"k"), 6);
        assert_eq!(b.failures(&"other"), 0);
        b.reset(&"k");
        let again = b.fail(&"k").as_millis();
        assert!((90..=110).contains(&again), "{again}");
    }
}
