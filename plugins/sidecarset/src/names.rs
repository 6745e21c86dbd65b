//! Kubernetes' name rules (apimachinery's `validation` package): DNS-1123 labels and
//! subdomains, qualified names (label and annotation keys) and label values. The
//! checks a message comes from return it (what is wrong and the rule), or None.

/// Why a `name` field at `field` is refused, if it is no DNS-1123 label (container and
/// volume names).
pub fn label_name(field: &str, name: &str) -> Option<String> {
    (!dns1123_label(name))
        .then(|| format!("{field}.name: {name:?} must be a DNS-1123 label (a-z, 0-9, '-', at most 63 characters)"))
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters (container names).
pub fn dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Dot-separated DNS-1123 labels, at most 253 characters (a key's prefix).
fn dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`: the name part of a key, and a label value.
fn alnum_dashes(s: &str) -> bool {
    let edge = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    edge(s.bytes().next())
        && edge(s.bytes().last())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A label key (`IsQualifiedName`): an optional DNS-1123 subdomain prefix and `/`, then
/// a name of at most 63 characters.
pub fn qualified_name(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && (p.is_empty() || !dns1123_subdomain(p))
    {
        return Some(format!("{key:?}: the prefix before '/' must be a DNS-1123 subdomain"));
    }
    if name.is_empty() || name.len() > 63 || !alnum_dashes(name) {
        return Some(format!(
            "{key:?}: a qualified name must be at most 63 characters of alphanumerics, '-', '_' or '.', \
             starting and ending with an alphanumeric, with an optional DNS subdomain prefix and '/'"
        ));
    }
    None
}

/// A label value (`IsValidLabelValue`): empty, or at most 63 characters as a name.
pub fn label_value(v: &str) -> Option<String> {
    (!v.is_empty() && (v.len() > 63 || !alnum_dashes(v))).then(|| {
        format!(
            "{v:?}: a label value must be empty or at most 63 characters of alphanumerics, '-', '_' or '.', \
             starting and ending with an alphanumeric"
        )
    })
}

/// A field path with a subscript, `metadata.labels['KEY']`, split into the path and the
/// key (apimachinery's `fieldpath.SplitMaybeSubscriptedPath`); None without one.
pub fn split_subscript(path: &str) -> Option<(&str, &str)> {
    let (field, key) = path.strip_suffix("']")?.split_once("['")?;
    (!field.is_empty()).then_some((field, key))
}
