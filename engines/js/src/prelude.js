// The JavaScript side of the wasmop SDK, evaluated before the plugin's script.
// Globals: cluster, events, log, console, ClusterError, ReconcileError (types in
// guest-sdk/js/wasmop.d.ts). The host's answers arrive as JSON text from
// __wasmop_host (engines/js/src/bridge.rs).
(function (host) {
  "use strict";

  class ClusterError extends Error {
    // reason: the Kubernetes StatusReason: NotFound, AlreadyExists, Conflict, Forbidden,
    // Invalid, Unavailable or Internal.
    constructor(reason, message) {
      super(message);
      this.name = "ClusterError";
      this.reason = reason;
    }
  }

  // Thrown from reconcile: { retry: false } waits for the next change instead of
  // retrying with backoff.
  class ReconcileError extends Error {
    constructor(message, options) {
      super(message);
      this.name = "ReconcileError";
      this.retry = !(options && options.retry === false);
    }
  }

  function call(op, args) {
    const r = host(op, JSON.stringify(args));
    if (r === undefined) return undefined;
    if (r.charCodeAt(0) === 33) {
      const nl = r.indexOf("\n");
      throw new ClusterError(r.slice(1, nl), r.slice(nl + 1));
    }
    return JSON.parse(r);
  }

  function notFoundIsNull(f) {
    try {
      return f();
    } catch (e) {
      if (e instanceof ClusterError && e.reason === "NotFound") return null;
      throw e;
    }
  }

  const cluster = Object.freeze({
    get: (ref) => call("get", [ref]),
    // get, with null when the object does not exist.
    find: (ref) => notFoundIsNull(() => call("get", [ref])),
    list: (kind, params) => call("list", [kind, params || null]),
    getLive: (ref) => call("getLive", [ref]),
    listLive: (kind, params) => call("listLive", [kind, params || null]),
    create: (object) => call("create", [object]),
    update: (object) => call("update", [object]),
    updateStatus: (object) => call("updateStatus", [object]),
    delete: (ref) => {
      call("delete", [ref]);
    },
  });

  const events = Object.freeze({
    record: (regarding, type, reason, message) => {
      call("event", [regarding, type, reason, String(message)]);
    },
    normal: (regarding, reason, message) => events.record(regarding, "Normal", reason, message),
    warning: (regarding, reason, message) => events.record(regarding, "Warning", reason, message),
  });

  function logAt(level) {
    return (message, fields) => {
      call("log", [level, String(message), fields || null]);
    };
  }
  const log = Object.freeze({
    trace: logAt("trace"),
    debug: logAt("debug"),
    info: logAt("info"),
    warn: logAt("warn"),
    error: logAt("error"),
  });

  function text(args) {
    return args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" ");
  }
  const console = Object.freeze({
    log: (...a) => log.info(text(a)),
    info: (...a) => log.info(text(a)),
    debug: (...a) => log.debug(text(a)),
    warn: (...a) => log.warn(text(a)),
    error: (...a) => log.error(text(a)),
  });

  function threw(e) {
    const message = e instanceof Error ? (e.name === "Error" ? e.message : `${e.name}: ${e.message}`) : String(e);
    const retry = e instanceof ReconcileError ? e.retry : !(e instanceof ClusterError && (e.reason === "Forbidden" || e.reason === "Invalid"));
    return JSON.stringify({ threw: message, retry });
  }
  const returned = (r) => JSON.stringify({ ok: r === undefined ? null : r });

  // An async export's answer, once the engine has run the promise jobs.
  let settled = null;

  // What the engine calls: one exported function, with JSON arguments, answered as
  // JSON: {ok: value}, {threw: message, retry}, {missing: true}, or {pending: true}
  // for a promise (an async function): the engine runs its jobs, which settle it
  // (host calls are synchronous, so an `await` of one resolves at once), and asks
  // __wasmop_settled for the answer.
  function wasmopCall(exports, name, args) {
    const f = exports[name];
    if (typeof f !== "function") return JSON.stringify({ missing: true });
    try {
      const r = f(...JSON.parse(args));
      if (r instanceof Promise) {
        settled = null;
        r.then((v) => (settled = returned(v)), (e) => (settled = threw(e)));
        return JSON.stringify({ pending: true });
      }
      return returned(r);
    } catch (e) {
      return threw(e);
    }
  }
  function wasmopSettled() {
    const s = settled;
    settled = null;
    return s === null ? JSON.stringify({ threw: "the promise it returned never settled", retry: true }) : s;
  }

  const g = globalThis;
  for (const [k, v] of Object.entries({ cluster, events, log, console, ClusterError, ReconcileError })) {
    Object.defineProperty(g, k, { value: v, writable: false, enumerable: false, configurable: false });
  }
  Object.defineProperty(g, "__wasmop_call", { value: wasmopCall, writable: false, enumerable: false });
  Object.defineProperty(g, "__wasmop_settled", { value: wasmopSettled, writable: false, enumerable: false });
})(__wasmop_host);
