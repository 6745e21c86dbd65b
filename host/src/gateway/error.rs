//! Mapping the apiserver's answers to the contract's error variant.

use wasmop_sdk::Error;

/// Maps a kube client error to the contract's error variant.
///
/// The apiserver's Status decides: 404 not-found; 409 with reason AlreadyExists
/// already-exists, other 409 conflict; 403 forbidden; 400/422 invalid (its message
/// names the field); 429, 5xx and transport failures unavailable; the rest internal.
pub fn from_kube(e: kube::Error) -> Error {
    match e {
        kube::Error::Api(status) => {
            let msg = if status.message.is_empty() { status.reason.clone() } else { status.message.clone() };
            match (status.code, status.reason.as_str()) {
                (404, _) => Error::NotFound(msg),
                (409, "AlreadyExists") => Error::AlreadyExists(msg),
                (409, _) => Error::Conflict(msg),
                (403, _) => Error::Forbidden(msg),
                (400 | 422, _) => Error::Invalid(msg),
                (429, _) | (500..=599, _) => Error::Unavailable(msg),
                _ => Error::Internal(msg),
            }
        }
        kube::Error::HyperError(e) => Error::Unavailable(e.to_string()),
        kube::Error::Service(e) => Error::Unavailable(e.to_string()),
        other => Error::Internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        let mut s = Status::failure(message, reason);
        s.code = code;
        kube::Error::Api(Box::new(s))
    }

    #[test]
    fn status_codes_map_to_variants() {
        assert_eq!(from_kube(api(404, "NotFound", "gone")), Error::NotFound("gone".into()));
        assert_eq!(from_kube(api(409, "AlreadyExists", "exists")), Error::AlreadyExists("exists".into()));
        assert_eq!(from_kube(api(409, "Conflict", "stale")), Error::Conflict("stale".into()));
        assert_eq!(from_kube(api(403, "Forbidden", "no")), Error::Forbidden("no".into()));
        assert_eq!(
            from_kube(api(422, "Invalid", "spec.size: Invalid value: -1")),
            Error::Invalid("spec.size: Invalid value: -1".into())
        );
        assert_eq!(from_kube(api(400, "BadRequest", "bad")), Error::Invalid("bad".into()));
        assert_eq!(from_kube(api(503, "ServiceUnavailable", "busy")), Error::Unavailable("busy".into()));
        assert_eq!(from_kube(api(429, "TooManyRequests", "slow")), Error::Unavailable("slow".into()));
        assert_eq!(from_kube(api(418, "Teapot", "")), Error::Internal("Teapot".into()));
    }
}
