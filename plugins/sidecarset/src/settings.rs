//! The plugin's settings (its ConfigMap's `sidecarset.settings.yaml`): one `key: value`
//! per line, read without a YAML parser (the values are Kruise's one-line JSON or
//! plain words). `deploy/plugins/sidecarset.settings.yaml` documents each key.

/// The raw value of `key` in the settings: the rest of its line, outer quotes removed.
pub fn raw<'a>(settings: &'a str, key: &str) -> Option<&'a str> {
    settings.lines().find_map(|l| {
        let v = l.trim().strip_prefix(key)?.trim_start().strip_prefix(':')?.trim();
        let v = v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')).unwrap_or(v);
        (!v.is_empty()).then_some(v)
    })
}

/// Where the set's ControllerRevisions live: `revisionNamespace`, else Kruise's
/// `kruise-system` (so revisions Kruise wrote are found after a move, and Kruise's
/// tools find ours). A namespace only the cluster admin can write to: whoever may
/// write revisions there chooses what `injectionStrategy.revision` injects.
pub fn revision_namespace(settings: &str) -> &str {
    raw(settings, "revisionNamespace").unwrap_or("kruise-system")
}
