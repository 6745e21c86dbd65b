// TypeScript declarations for wasmop script plugins: the contract (wit/operator.wit) as
// the JavaScript engine (engines/js) presents it. Records are camelCase, `null` is
// none, a failed cluster call throws a ClusterError. Objects are plain Kubernetes
// JSON (use any typings you like for them, e.g. @kubernetes/client-node's models).
//
// A script plugin is an ES module exporting `manifest` and `reconcile`, and
// optionally `handlers` and `review`:
//
//   /// <reference path="wasmop.d.ts" />
//   export function manifest(settings: any): Manifest { ... }
//   export function reconcile(request: Request): Action | null { ... }
//
// Any export may be async (return a Promise): host calls are synchronous, so an
// `await` of one resolves at once, and the engine settles the promise before it answers.
//
// Compile TypeScript to one ES module (`tsc --target es2020 --module es2020`, or
// esbuild) and deploy the .js: the host runs scripts, not TypeScript.

/** A Kubernetes object, as JSON. */
type KubeObject = { apiVersion: string; kind: string; metadata: { name?: string; namespace?: string; [k: string]: any }; [k: string]: any };

/** A kind: `apps/v1` + `Deployment`. */
interface KindRef {
  apiVersion: string;
  kind: string;
}

/** One object; `namespace` is null or absent for cluster-scoped kinds. */
interface ObjectRef extends KindRef {
  namespace?: string | null;
  name: string;
}

type Verb = "get" | "list" | "create" | "update" | "updateStatus" | "delete";

/** How a change to a watched object turns into primaries to reconcile. */
type Mapping =
  | "allPrimaries"
  | "sameName"
  | { label: string }
  /** The primaries whose label selector at this path (["spec", "selector"]) matches. */
  | { selector: string[] };

interface Manifest {
  name: string;
  version: string;
  primary: KindRef;
  /** Default true. */
  namespaced?: boolean;
  /** Namespaces to watch; empty or absent: all. */
  namespaces?: string[];
  /** Kinds created with a controller ownerReference to the primary. */
  owns?: KindRef[];
  watches?: { kind: KindRef; mapping: Mapping }[];
  /** Everything the plugin may call beyond get/list of the kinds above. */
  permissions?: { kind: KindRef; verbs: Verb[] }[];
  /** The plugin's own writes to a primary do not reconcile it again. */
  skipOwnWrites?: boolean;
  /** Namespaces where a plugin limited to `namespaces` may also call. */
  callNamespaces?: string[];
}

interface Request {
  object: ObjectRef;
  /** The primary as the host last saw it; null when it no longer exists. */
  current: KubeObject | null;
  /** The settings document, parsed (YAML or JSON); null when empty. */
  settings: any;
}

/** What reconcile returns; null or undefined: done until the next change. */
interface Action {
  requeueAfterMs?: number | null;
}

type Operation = "CREATE" | "UPDATE" | "DELETE" | "CONNECT";

interface Handler {
  /** Part of the webhook URL: /<plugin>/<name>. */
  name: string;
  /** True: mutating; false or absent: validating. */
  mutating?: boolean;
  kinds: KindRef[];
  operations: Operation[];
}

/** AdmissionReview v1 `request`. */
interface AdmissionRequest {
  uid: string;
  kind: { group: string; version: string; kind: string };
  name?: string;
  namespace?: string | null;
  operation: Operation;
  userInfo: { username: string; groups?: string[] };
  object: KubeObject | null;
  oldObject: KubeObject | null;
  dryRun?: boolean;
}

/** AdmissionReview v1 `response` without uid (the host adds it). */
interface AdmissionResponse {
  allowed: boolean;
  /** A denial: `message` should name the field and the rule. */
  status?: { code?: number; reason?: string; message?: string };
  /** A base64 JSONPatch, if the plugin computes it. */
  patch?: string;
  warnings?: string[];
  /** wasmop's extension: the whole mutated object; the host diffs it into a JSONPatch. */
  object?: KubeObject;
}

/** A failed cluster call. */
declare class ClusterError extends Error {
  readonly reason: "NotFound" | "AlreadyExists" | "Conflict" | "Forbidden" | "Invalid" | "Unavailable" | "Internal";
}

/** Thrown from reconcile; `{ retry: false }` waits for the next change instead of backing off. */
declare class ReconcileError extends Error {
  constructor(message: string, options?: { retry?: boolean });
  readonly retry: boolean;
}

interface ListParams {
  namespace?: string | null;
  labelSelector?: string | null;
  fieldSelector?: string | null;
}

/** The cluster, on the plugin's behalf and within its permissions. */
declare const cluster: {
  /** Reads one object (from the host's watch caches for watched kinds). Throws NotFound. */
  get(ref: ObjectRef): KubeObject;
  /** get, with null when the object does not exist. */
  find(ref: ObjectRef): KubeObject | null;
  list(kind: KindRef, params?: ListParams): KubeObject[];
  /** get, always answered by the apiserver. */
  getLive(ref: ObjectRef): KubeObject;
  listLive(kind: KindRef, params?: ListParams): KubeObject[];
  create(object: KubeObject): KubeObject;
  /** Replaces the object; a stale metadata.resourceVersion throws Conflict. */
  update(object: KubeObject): KubeObject;
  updateStatus(object: KubeObject): KubeObject;
  delete(ref: ObjectRef): void;
};

/** Kubernetes Events, shown by `kubectl describe`. Recording never throws. */
declare const events: {
  record(regarding: ObjectRef, type: "Normal" | "Warning", reason: string, message: string): void;
  normal(regarding: ObjectRef, reason: string, message: string): void;
  warning(regarding: ObjectRef, reason: string, message: string): void;
};

type Fields = Record<string, string | number | boolean>;
/** Structured logs in the host's log, tagged with the plugin's name. */
declare const log: {
  trace(message: string, fields?: Fields): void;
  debug(message: string, fields?: Fields): void;
  info(message: string, fields?: Fields): void;
  warn(message: string, fields?: Fields): void;
  error(message: string, fields?: Fields): void;
};
