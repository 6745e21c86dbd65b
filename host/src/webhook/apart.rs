//! TLS handshakes run apart: on a thread of their own (`wasmop-tls`, its own
//! single-threaded tokio runtime) at a lower CPU priority than the threads that serve
//! reviews; a connection moves to the host's runtime once its handshake is done.
//!
//! Why: until its handshake ends a connection has proven nothing, yet its key exchange
//! and signature cost the host more than a whole review of a connection kept alive,
//! and anyone who can reach the port can ask for one as often as they like. An
//! apiserver opens a few connections and keeps them, so the work of new connections
//! is, on a busy host, mostly a flood's: under `scripts/bench-abuse.py`'s attacks
//! (~150 handshakes and ~850 silent connections a second) handshake crypto was 4 % of
//! the host's CPU, taken from a healthy webhook saturating it (BENCHMARKS.md, issue
//! 18, eighth part). On a niced thread the kernel preempts that work whenever the
//! runtime thread has a review; on a quiet host it runs at once.
//!
//! Flow: the accept loop stays on the host's runtime (the socket is registered with its
//! reactor, which keeps serving it wherever it is polled), and so do accepting a
//! connection and waking its handshake when bytes arrive; each accepted connection's
//! handshake, its eviction by a newer one (`handshakes`) and its timeout run here;
//! the connection, once past its handshake, is spawned on the host's runtime.
//!
//! Caveats: on a host whose cores are all busy, a new connection's handshake gets
//! about a tenth of a core (a few milliseconds instead of a fraction of one); its
//! place among the handshakes lasts as long as before, since evictions are counted at
//! accept. The thread ends when the server does, dropping handshakes under way.

use crate::runtime::{NicedRuntime, Priority};

/// The handshake thread's nice value. Why 10: the same trade as the sources thread:
/// about a tenth of a core reviews keep busy (weight 110 against 1024), so new
/// connections, an apiserver's among them, still get in while reviews saturate the
/// host. Not idle priority (`runtime::Priority::Idle`): there a handshake would wait
/// for a pause in the reviews, and a flood's newer handshakes evict it.
pub const HANDSHAKE_NICE: i32 = 10;

/// Starts the handshake thread: a niced runtime that serves handshakes until dropped
/// (with the server). `webhook::client_auth_tests` checks that `serve` does its
/// handshakes there.
pub(super) fn start() -> std::io::Result<NicedRuntime> {
    NicedRuntime::start("wasmop-tls", Priority::Nice(HANDSHAKE_NICE))
}
