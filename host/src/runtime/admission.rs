//! The `admission` export: which handlers a plugin serves, and one review.

use super::bindings::exports::wasmop::operator::admission as adm;
use super::{Code, Compiled, Limits, Runtime, RuntimeError, convert};
use crate::gateway::Gateway;
use wasmop_sdk::{Handler, Operation};

impl Runtime {
    /// The handlers a plugin serves under `settings`; empty when it exports no
    /// `admission` interface. No cluster access during this call.
    pub async fn handlers(
        &self,
        c: &Compiled,
        name: &str,
        settings: &str,
        limits: &Limits,
    ) -> Result<Vec<Handler>, RuntimeError> {
        if !c.serves_admission() {
            return Ok(Vec::new());
        }
        // Describing itself, like `manifest`: the short deadline, not the reconcile's.
        let limits = &Limits { deadline: limits.deadline.min(super::DESCRIBE_DEADLINE), ..limits.clone() };
        let settings = settings.to_owned();
        let hs = self
            .call(c, name, None, limits, None, move |code, i, s| {
                Box::pin(async move { export(code)?.load(&mut *s, i)?.call_handlers(s, &settings).await })
            })
            .await?;
        Ok(hs.into_iter().map(handler).collect())
    }

    /// Runs one review: `request` is the JSON of the AdmissionReview's `request`; the
    /// inner result is the plugin's AdmissionResponse JSON or its own error text.
    pub async fn review(
        &self,
        c: &Compiled,
        gateway: Gateway,
        handler: &str,
        settings: &str,
        request: &str,
        limits: &Limits,
    ) -> Result<Result<String, String>, RuntimeError> {
        if !c.serves_admission() {
            return Ok(Err("the plugin exports no admission interface".into()));
        }
        let name = gateway.plugin().to_owned();
        // Owned: a review that turns out long finishes on the aside threads (`aside`).
        let (handler, owned, request) = (handler.to_owned(), settings.to_owned(), request.to_owned());
        self.call(c, &name, Some((gateway, None)), limits, Some(settings), move |code, i, s| {
            Box::pin(async move {
                // The review handed in counts toward the call's compute allowance.
                s.data_mut().exchanged += request.len() as u64;
                export(code)?.load(&mut *s, i)?.call_review(s, &handler, &owned, &request).await
            })
        })
        .await
    }
}

/// Both tiers link the same bytes, so a plugin that served admission still does.
fn export(code: &Code) -> wasmtime::Result<&adm::GuestIndices> {
    code.admission.as_ref().ok_or_else(|| wasmtime::Error::msg("the plugin exports no admission interface"))
}

fn handler(h: adm::Handler) -> Handler {
    Handler {
        name: h.name,
        mutating: h.mutating,
        kinds: h.kinds.into_iter().map(convert::kind).collect(),
        operations: h
            .operations
            .into_iter()
            .map(|o| match o {
                adm::Operation::Create => Operation::Create,
                adm::Operation::Update => Operation::Update,
                adm::Operation::Delete => Operation::Delete,
                adm::Operation::Connect => Operation::Connect,
            })
            .collect(),
    }
}
